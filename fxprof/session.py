"""``fxprof.session``: profiling inside the user's own loop: a schedule, the instrumented model,
``step()``, cycles.

:func:`fxprof.profile` runs the model itself on one example input. A :class:`Session` instead
instruments the user's model in place and lets the user's loop drive it, with real batches,
the real loss, optimizer and data-dependent work between steps::

    with fxprof.session(model, schedule=fxprof.schedule(wait=1, warmup=2, active=5, repeat=2),
                        on_ready=lambda prof: prof.save(f"step{prof.meta['step']}.npz")) as s:
        for batch in loader:
            out = s.model(batch)            # s.model is the model itself, instrumented
            loss_fn(out, batch).backward(); opt.step(); opt.zero_grad()
            s.step()

The schedule has torch.profiler's names and meaning (:class:`Schedule`; a
``torch.profiler.schedule(...)`` is accepted as it is). Every model call of a step does what
the step's action says:

- ``none`` (``skip_first`` and ``wait`` steps, and after the last cycle): the model's own
  forward, eagerly, at full speed (one attribute check in front of it);
- ``warmup``: through the profiling interpreter, untimed (the graph is captured on first use);
- ``active``: through the interpreter with every node timed, every sample kept. A call whose
  input *signature* (the shapes, dtypes and devices of its tensors, the values of its other
  inputs, and ``model.training``) was never seen runs untimed instead: the first batch of a
  shape pays for allocator growth, kernel selection or a dynamo recompile. It is timed from its
  next occurrence, and the profile's notes say which steps were left out.

When the last active step of a cycle ends (``step()``), the cycle's runs become one
:class:`~fxprof.core.profile.Profile` (``meta["step"]``: the last step of the cycle,
``meta["cycle"]``, ``meta["run_steps"]`` and ``meta["run_signatures"]``: the step and signature
of every run, ``meta["signatures"]``: what each signature is) and go to ``on_ready`` and to
:attr:`Session.profiles`. The per-run step and signature are kept in ``meta``, one entry per run,
not as columns of the runs table, so the saved formats stay as they are (:func:`session_runs`
joins them onto :attr:`Profile.runs`; :func:`by_signature` rolls runs up per signature,
both in :mod:`fxprof.core.signatures`).

On exit, also on an error or Ctrl-C in the loop, the model's ``forward`` is put back (nothing
else of the model is touched: hooks, modes, parameters and buffers are the user's and change
only as the user's own loop changes them). A cycle that was under way goes to ``on_ready``
with the runs that completed, marked ``meta["incomplete"] = True``.

Gradients flow through the instrumented forward as through the eager one (the interpreter calls
the same modules and functions on the same tensors). Backward is run by autograd, eagerly, and a
session times the forward nodes only (``meta["notes"]`` says so), unless ``backward=True``: then
the forward is captured with AOTAutograd and its backward graph is timed node by node when the
loop's own ``loss.backward()`` runs it (:mod:`fxprof.measure.capture.training_loop`; an FSDP2
model's, with FSDP's all-gathers and reduce-scatters as rows: :mod:`fxprof.measure.capture.fsdp_loop`).

Under ``torch.distributed`` every rank steps its own session; at the end of each cycle the
cycle's profiles are gathered on rank 0 (:func:`fxprof.gather`): ``on_ready`` gets the gathered
profile there, and nothing on the other ranks. A rank whose loop fails hands its own runs to its
own ``on_ready`` (gathering would wait for ranks that are not failing).

This module is the public face, beside :mod:`fxprof.api` (``fxprof.profile``): the function, its
keyword checks and its docs, and what ``fxprof.session`` and ``fxprof.schedule`` are. The
measuring machinery (:class:`Session`, the schedule's actions, cycles, the warm-up steps' memory)
is :mod:`fxprof.measure.session`.
"""

from __future__ import annotations

from typing import Any, Callable

import torch
from torch import nn

from .core.profile import Profile
from .measure.session.schedule import Schedule, schedule
from .measure.session.session import Session
from .measure.timing.timers import Timer
from .vocab import CAPTURES

__all__ = ["Schedule", "Session", "schedule", "session", "check_keywords"]

#: the kernel timer's profiler brackets fxprof's own loop of runs, not the caller's steps (a GPU
#: run: fxprof.generate's kernel column came back empty in both phases)
SESSION_KERNEL_TIMER = ("timer='kernel' is not available in a session (nor in fxprof.generate): its kernels are charged "
                        "only in fxprof.profile's own timed runs. Use timer='cuda' here (events per node), or "
                        "fxprof.profile(model, *inputs, timer='kernel') for one input's kernels per node")


def session(model: nn.Module, schedule: Callable[[int], Any] | None = None, on_ready: Callable[[Profile], Any] | None = None,
            capture: str = "auto", timer: str | Timer = "auto", backward: bool = False, name: str | None = None,
            gather: bool = True, leaf_modules: Any = (), trace_into: Any = (), memory: bool = True) -> Session:
    """Profile ``model`` inside your own loop; use as ``with fxprof.session(model, ...) as s:``.

    Args:
        model: the model your loop calls. While the session is open, calling it (or
            ``s.model``, the same object) goes through the session; on exit its ``forward``
            is put back.
        schedule: :func:`fxprof.schedule` (or ``torch.profiler.schedule(...)``): which steps are
            eager, warm-up and timed. Default: ``schedule()`` (1 warm-up step, 3 active, once).
        on_ready: called with each cycle's :class:`~fxprof.Profile` when its last active step
            ends (and on exit with an unfinished cycle's runs, ``meta["incomplete"]`` True).
        capture: ``"auto"``, ``"symbolic"`` or ``"dynamo"``, as for :func:`fxprof.profile`.
        timer: as for :func:`fxprof.profile` (``"auto"``: CUDA events for a model on a GPU).
        backward: also time the backward nodes, inside the loop's own ``loss.backward()``: the
            forward is captured with AOTAutograd (``torch.compile``), whose backward graph runs
            through fxprof's interpreter (see :mod:`fxprof.measure.capture.training_loop`). Each run is
            then one forward and its backward; the ``phase`` column says which. Default False:
            forward nodes only, backward eager.
        name: the model's name in the profiles (default: its class name).
        gather: under ``torch.distributed``, gather each cycle's profiles on rank 0.
        leaf_modules, trace_into: as for :func:`fxprof.profile` (symbolic capture).
        memory: record memory in each cycle's warm-up steps (untimed): each step's peak and end
            bytes (``meta["memory_steps"]``), per-node ``mem_*`` columns and ``profile.memory``
            from the last one (see :mod:`fxprof.measure.session.memory`). Default True.

    Call ``s.step()`` at the end of every iteration. See :mod:`fxprof.session`.
    """
    check_keywords(model, schedule, on_ready, capture, timer)
    return Session(model, schedule=schedule, on_ready=on_ready, capture=capture, timer=timer, backward=backward,
                   name=name, gather=gather, leaf_modules=leaf_modules, trace_into=trace_into, memory=memory)


def check_keywords(model: Any, schedule: Any, on_ready: Any, capture: str, timer: Any) -> None:
    """The checks of :func:`session`'s keywords that need no state of the session, before anything
    is touched (what an FSDP2 or a compiled model cannot do is :class:`Session`'s own check)."""
    if not isinstance(model, nn.Module):
        raise TypeError(f"fxprof.session takes an nn.Module, got {type(model).__name__}")
    if isinstance(model, torch.jit.ScriptModule):
        raise TypeError(f"{type(model).__name__} is a TorchScript module; pass the eager nn.Module it was made from")
    if capture not in CAPTURES or capture == "export":
        raise ValueError(f"capture must be one of auto, symbolic, dynamo for a session, got {capture!r} "
                         f"(export fixes the input shapes, and a session's batches change)")
    plan = schedule if schedule is not None else Schedule()
    if not callable(plan):
        raise TypeError(f"schedule must be fxprof.schedule(...) or torch.profiler.schedule(...), got {plan!r}")
    if on_ready is not None and not callable(on_ready):
        raise TypeError(f"on_ready must be a function taking a Profile, got {on_ready!r}")
    if timer == "kernel" or getattr(timer, "wants_kernel_time", False):
        raise ValueError(SESSION_KERNEL_TIMER)
