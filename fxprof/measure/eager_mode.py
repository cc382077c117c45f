"""The eager mode's driver (counterpart of :mod:`fxprof.measure.compiled.mode`): the eager profile,
step by step, from a checked :class:`~fxprof.measure.eager.plan.ProfilePlan`.

:func:`fxprof.profile` checks its options into a plan, then, for a model that is not compiled,
calls :func:`profile_eager`: take the process-wide profiling lock, capture the program
(:mod:`fxprof.measure.program`), bind the inputs, pick the timer, describe the run, and hand it
all to the run loop (:func:`fxprof.measure.eager.loop.measure`). The caller's RNG and autocast
state are put back whatever happens.
"""

from __future__ import annotations

import contextlib
import warnings
from typing import Any

from torch import nn

from ..core.profile import Profile
from .capture.captures import Capture
from .common.state import PROFILING, preserved_autocast, preserved_rng
from .distributed.ranks import rank_sync
from .eager.fidelity import OwnRuns
from .eager.loop import check_devices, describe_run, measure
from .eager.plan import ProfilePlan
from .passes.environment import environment
from .program import capture_program
from .timing.timers import resolve_timer, tensor_devices

__all__ = ["profile_eager", "refuse_ambiguous_keywords"]


def profile_eager(model: nn.Module, args: tuple, kwargs: dict[str, Any], plan: ProfilePlan, bar: Any,
                  keywords_are_options: bool = True) -> Profile:
    """Profile ``model(*args, **kwargs)`` as ``plan`` says, its phases reported to ``bar``.
    ``keywords_are_options``: the keywords were not given as ``model_kwargs``, so one that is
    both an option and a model input is refused as ambiguous."""
    PROFILING.acquire()  # one profile at a time in this process (see fxprof.measure.common.state)
    restore = contextlib.ExitStack()  # dropout in training mode draws in every run: the caller's sequence is kept
    restore.enter_context(preserved_rng())
    restore.enter_context(preserved_autocast())  # a node that fails inside an autocast region leaves it entered
    try:
        bar.phase("tracing" if plan.capture in ("auto", "symbolic") else f"capturing ({plan.capture})")
        # the one capture entry (fxprof.measure.program): training steps or the model's graphs
        captured: Capture = capture_program(model, args, kwargs, capture=plan.capture, backward=plan.backward,
                                            loss_fn=plan.loss_fn, optimizer=plan.optimizer, mode=plan.mode,
                                            concrete_args=plan.concrete_args, leaf_modules=plan.leaf_modules,
                                            trace_into=plan.trace_into, compile=False)
    except BaseException:
        restore.close()
        PROFILING.release()
        raise
    bar.step()
    try:
        if keywords_are_options:
            refuse_ambiguous_keywords(captured.input_names(), set(plan.given))
        call_args, call_kwargs = captured.bind(args, kwargs)
        inputs = call_args + tuple(call_kwargs.values())
        held = list(captured.module.parameters()) + list(captured.module.buffers())
        check_devices(held, inputs)
        timer = resolve_timer(plan.timer, captured.module, inputs)
        devices = tensor_devices(held + list(inputs))
        _check_devices_and_timer(devices, timer)
        plan = plan.for_device(any(d.type == "cuda" for d in devices))
        meta = describe_run(model, plan.name, timer, devices, inputs, plan.warmup, plan.iters, plan.no_grad, captured)
        meta.update(env=environment(devices), warmup_ms=plan.warmup_ms)
        if plan.backward:
            meta.update(captured.describe())  # type: ignore[attr-defined]
        ranks = rank_sync()  # under torch.distributed: a barrier before each timed run
        if ranks is not None:
            # everything that decides how many times a rank runs the model (and so its collectives)
            ranks.check_same(warmup=plan.warmup, warmup_ms=plan.warmup_ms, iters=plan.iters, mode=plan.mode,
                             capture=captured.kind, timer=getattr(timer, "name", type(timer).__name__),
                             anatomy=bool(plan.anatomy), memory=bool(True if plan.memory is None else plan.memory))
            meta = {**meta, **ranks.meta()}
        own = OwnRuns.for_profile(model, captured, (args, kwargs), (call_args, call_kwargs), timer, devices, plan.backward,
                                  plan.mode)
        return measure(captured, call_args, call_kwargs, timer, plan, meta, devices, ranks, bar, own=own)
    finally:
        captured.close()
        restore.close()
        PROFILING.release()


def _check_devices_and_timer(devices: set, timer: Any) -> None:
    if any(d.type == "meta" for d in devices):
        raise ValueError(
            "the model's tensors are on the meta device, which holds no data and computes nothing: "
            "every node's time would be Python overhead, not the model's. Profile on a real device "
            "(device='cpu' or 'cuda'); shapes and FLOPs need a real run as well"
        )
    if getattr(timer, "name", None) == "cpu" and any(d.type == "cuda" for d in devices):
        warnings.warn(
            "timer='cpu' on CUDA tensors measures only the time to launch kernels (CUDA is "
            "asynchronous); use timer='cuda' (or 'auto') for device time.",
            stacklevel=4,
        )


def refuse_ambiguous_keywords(inputs: set[str], explicit: set[str]) -> None:
    """A keyword that is both a profile() option and a model input cannot be placed safely."""
    clash = sorted(explicit & inputs)
    if clash:
        raise TypeError(
            f"{', '.join(map(repr, clash))} is both an option of fxprof.profile and an input of the "
            f"model, so it is not clear which you meant; pass the model's inputs as "
            f"model_kwargs={{...}} (then every other keyword is a profile option)"
        )

