"""``fxprof.profile``: trace, warm up, time every node of every run, return a Profile."""

from __future__ import annotations

import contextlib
import inspect
import warnings
from typing import Any, Callable, Iterable

import torch
from torch import nn

from .core.profile import Profile
from .core.ranks import ISOLATED_UNDER_RANKS
from .measure.capture.captures import Capture
from .measure.compiled.mode import profile_compiled_model
from .measure.program import capture_program, wants_compiled
from .measure.passes.environment import environment
from .measure.eager.fidelity import OwnRuns
from .measure.eager.loop import DEFAULT_GPU_WARMUP_MS, RunPlan, check_devices, describe_run, measure
from .measure.distributed.ranks import is_initialized, rank_sync
from .measure.common.state import PROFILING, preserved_autocast, preserved_rng, refuse_inside_session
from .measure.timing.timers import Timer, resolve_timer, tensor_devices
from .views.progress import Progress, as_progress
from .vocab import CAPTURES, MODES

__all__ = ["profile"]


def profile(
    model: nn.Module,
    *args: Any,
    warmup: int = 5,
    iters: int = 20,
    timer: str | Timer = "auto",
    no_grad: bool = True,
    concrete_args: dict[str, Any] | None = None,
    leaf_modules: Iterable[type | str] = (),
    name: str | None = None,
    anatomy: bool = True,
    memory: bool | None = None,
    progress: "bool | Progress" = False,
    model_kwargs: dict[str, Any] | None = None,
    capture: str = "auto",
    mode: str = "timed",
    warmup_ms: float | None = None,
    backward: bool = False,
    loss_fn: Callable[[Any], torch.Tensor] | None = None,
    optimizer: torch.optim.Optimizer | None = None,
    trace_into: Iterable[type | str] | str = (),
    compile: bool | dict[str, Any] | None = None,
    peaks: Any = "auto",
    **kwargs: Any,
) -> Profile:
    """Profile ``model(*args, **kwargs)`` node by node.

    The model is captured as FX graph(s) (``capture``; a ``GraphModule`` is used as is), run
    ``warmup`` times untimed (first-call costs: allocator growth, cuDNN / cuBLAS setup, lazy
    init), then ``iters`` times with every node timed. Every sample is kept.

    Args:
        model: an ``nn.Module`` or ``fx.GraphModule``. Call ``model.eval()`` first unless you
            mean to profile training-mode behaviour (dropout, batch statistics).
        *args, **kwargs: the model's inputs. Tensors are cloned before each run, so a model
            that modifies its inputs in place never changes yours.
        model_kwargs: the model's keyword inputs, as a dict, for inputs whose names collide
            with this function's options (a model input called ``name`` or ``timer``). When
            given, no other keyword is taken as a model input.
        warmup: discarded runs before timing (>= 0).
        warmup_ms: keep warming up until this many milliseconds (host clock) have passed as
            well as ``warmup`` runs, so a fast GPU model runs long enough for the GPU to
            leave its idle clocks. Default: 200 on CUDA, 0 on the CPU. The runs done are in
            ``profile.meta["warmup_runs"]``.
        iters: timed runs (>= 1).
        timer: ``"auto"`` (``"cuda"`` if any parameter, buffer or input is on CUDA, else
            ``"cpu"``), ``"cpu"``, ``"cuda"``, ``"sync"``, ``"kernel"`` (CUDA events plus the
            device activity each node launched, matched by correlation id in
            ``torch.profiler``'s trace), or a :class:`~fxprof.measure.timing.timers.Timer`. The CUDA timers
            watch every CUDA device the model's tensors are on.
        no_grad: run under ``torch.no_grad()`` (default True).
        capture: how to get the graph(s): ``"auto"`` (symbolic tracing, falling back to
            ``"dynamo"`` when it fails, and saying why in ``profile.meta``), ``"symbolic"``
            (:func:`fxprof.trace`), ``"dynamo"`` (``torch.compile`` with fxprof's backend: one
            graph per region between graph breaks; node names get a ``g0:`` prefix) or
            ``"export"`` (``torch.export``, aten-level nodes). See :mod:`fxprof.measure.capture.captures`.
        concrete_args, leaf_modules, trace_into: passed to :func:`fxprof.trace` (symbolic
            capture); ``trace_into`` names ``torch.nn`` modules to trace inside (or ``"all"``).
        mode: ``"timed"`` (whole runs, every node timed in place) or ``"isolated"`` (after
            warm-up, each node re-run ``iters`` times back to back on its real inputs for a
            steady-state cost; nodes that are impure, random or modify their inputs are
            skipped, with the reason in the ``skip_reason`` column). See :mod:`fxprof.measure.eager.isolated`.
        name: the model's name in the profile (default: its class name).
        anatomy: after the timed runs, run once more untimed to record each node's input and
            output shapes, dtype, output bytes and FLOPs (``FlopCounterMode``).
        memory: run once more untimed, under ``torch.profiler`` with ``profile_memory``, to
            record each node's memory (``mem_delta_bytes``, ``mem_temp_bytes``,
            ``mem_peak_bytes``, ``mem_live_bytes``; ``mem_saved_bytes`` with ``backward``) from
            the CPU or CUDA allocator, and the run's peak (``profile.memory``; docs/memory.md).
            Default (None): on; ``False`` skips the pass. Nothing is reset: your own
            peak-memory statistics are left as they were. Compiled mode (``compile=``) charges
            the allocations of one more untimed run to its kernels
            (:mod:`fxprof.measure.compiled.memory`).
        peaks: the machine's roofs for the roofline columns (``bytes``, ``intensity``,
            ``roof_ms``, ``roof_pct``, ``headroom_ms``, ``limit``; with ``anatomy``):
            ``"auto"`` (default: :func:`fxprof.machine_peaks` for the model's device, the
            dtype of its busiest node and this thread count: measured once, a few seconds, then
            cached; the environment variable ``FXPROF_PEAKS`` overrides it: ``off``,
            ``quick`` or ``TFLOPS,GBPS``), ``None`` (no roofline), ``(tflops, gbps)`` or
            ``"TFLOPS,GBPS"`` (yours, e.g. a datasheet's), or a :class:`fxprof.core.roofline.Peaks`.
            Kept in ``profile.meta["peaks"]``. A :class:`~fxprof.timers.Timer` of your own gets
            only peaks you give (its clock may not be seconds). See docs/roofline.md.
        progress: show a progress bar on stderr naming each phase (tracing, warm-up, timed
            runs, anatomy pass) with its own count (tqdm; silent when stderr is not a
            terminal); or a :class:`fxprof.views.progress.Progress` to report to (left open).
        backward: profile training steps instead of forward passes: each run is forward, loss
            and backward (and ``optimizer`` step), with the nodes of the forward and backward
            graphs (from AOTAutograd) all timed; the table's ``phase`` column says which, and
            backward nodes are charged to the module of the forward op they differentiate.
            Runs with gradients on (``no_grad`` is ignored; inside ``torch.no_grad()`` too), and is
            refused inside ``torch.inference_mode()``. See :mod:`fxprof.measure.capture.training`.
        loss_fn: with ``backward``, ``loss_fn(output) -> scalar tensor`` (default: the sum of
            the output's floating-point values).
        optimizer: with ``backward``, also ``optimizer.zero_grad()`` and ``optimizer.step()``
            in every run, each timed as a node of phase ``optimizer``. Parameters, ``.grad``,
            optimizer state and the RNG are restored when profiling ends.
        compile: profile the compiled program instead of the eager graph: ``True`` compiles
            ``model`` with ``torch.compile`` (inductor), a dict passes ``mode``, ``dynamic``,
            ``fullgraph`` and ``options`` to it. A model that already is ``torch.compile(m)``
            (an ``OptimizedModule``) is profiled this way with its own options (``compile=False``
            profiles its eager graph instead, through ``capture``). Rows are then
            the kernels it runs (generated and extern), each charged to the eager nodes it
            computes (``origins``) and their module (``scope``); compile time, graph breaks and
            recompiles are in ``meta["compiled"]``. See :mod:`fxprof.measure.compiled.mode`.

    Returns:
        A :class:`~fxprof.Profile`. Buffers the runs changed (batch-norm running statistics in
        training mode) are restored afterwards, so the model is left bit-identical; fxprof
        never writes parameters (a model whose forward writes its own parameters would). The random
        number generators (CPU, and CUDA when in use) are put back as well. Tensor inputs are cloned
        as new leaves: a backward never reaches the caller's tensors (``x.grad`` stays as it was).
        Under an initialized ``torch.distributed`` process group, every rank must call this with
        the same ``warmup``/``warmup_ms``/``iters``/``mode``; each timed run starts after a barrier (outside
        the marks) and the profile carries this rank (collect the ranks with
        :func:`fxprof.gather`; see :mod:`fxprof.core.ranks`).

    Raises:
        ValueError: ``warmup``/``iters`` out of range, or inputs that do not fit the graph.
        TimerUnavailableError: a CUDA timer without a usable GPU (raised before anything runs).
        TraceError: the model cannot be captured as asked; says why and what to try.
        Exception: a node failed: the model's own exception (its type unchanged), with a note
            naming the node and what it received (:func:`fxprof.node_failure` reads it). If
            timed runs had completed, the exception's ``profile`` attribute holds them.
    """
    explicit = {k for k, v in (("warmup", warmup), ("iters", iters), ("timer", timer), ("no_grad", no_grad),
                                ("concrete_args", concrete_args), ("leaf_modules", leaf_modules), ("name", name),
                                ("anatomy", anatomy), ("memory", memory), ("progress", progress), ("capture", capture),
                                 ("warmup_ms", warmup_ms), ("backward", backward), ("loss_fn", loss_fn), ("optimizer", optimizer),
                                 ("trace_into", trace_into), ("compile", compile), ("peaks", peaks))
                if v is not _DEFAULTS[k]}
    _check_count("warmup", warmup, minimum=0)
    _check_count("iters", iters, minimum=1)
    if warmup_ms is not None and (isinstance(warmup_ms, bool) or not isinstance(warmup_ms, (int, float)) or not warmup_ms >= 0):
        raise ValueError(f"warmup_ms must be a number of milliseconds >= 0, got {warmup_ms!r}")
    if not isinstance(model, nn.Module):
        raise TypeError(f"fxprof.profile takes an nn.Module or fx.GraphModule, got {type(model).__name__}")
    refuse_inside_session(model, "fxprof.profile")
    if capture not in CAPTURES:
        raise ValueError(f"unknown capture {capture!r}; choose one of {', '.join(CAPTURES)}")
    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r}; choose one of {', '.join(MODES)}")
    if mode == "isolated" and is_initialized():
        raise ValueError(ISOLATED_UNDER_RANKS)
    if not (peaks is None or peaks is False or (isinstance(peaks, str) and peaks in ("auto", "quick"))):
        from .measure.passes.peaks import resolve_peaks

        peaks = resolve_peaks(peaks)  # the user's numbers, checked before anything runs
    if model_kwargs is not None:
        if kwargs:
            raise TypeError(f"unknown option(s) {', '.join(map(repr, kwargs))} of fxprof.profile (model inputs go in model_kwargs)")
        kwargs = dict(model_kwargs)
    if wants_compiled(model, compile):  # the compiled program's kernels (fxprof.measure.compiled.mode)
        return profile_compiled_model(model, args, kwargs, compile, explicit, mode, warmup, iters, no_grad, name, memory is not False)

    PROFILING.acquire()  # one profile at a time in this process (see fxprof.measure.common.state)
    restore_rng = contextlib.ExitStack()  # dropout in training mode draws in every run: the caller's sequence is kept
    restore_rng.enter_context(preserved_rng())
    restore_rng.enter_context(preserved_autocast())  # a node that fails inside an autocast region leaves it entered
    bar, own_bar = as_progress(progress)
    try:
        bar.phase("tracing" if capture in ("auto", "symbolic") else f"capturing ({capture})")
        # the one capture entry (fxprof.measure.program): training steps or the model's graphs
        captured: Capture = capture_program(model, args, kwargs, capture=capture, backward=backward, loss_fn=loss_fn,
                                            optimizer=optimizer, mode=mode, concrete_args=concrete_args,
                                            leaf_modules=leaf_modules, trace_into=trace_into, compile=False)
        if backward:
            no_grad = False
    except BaseException:
        if own_bar:
            bar.close()
        restore_rng.close()
        PROFILING.release()
        raise
    bar.step()
    try:
        if model_kwargs is None:
            _refuse_ambiguous_keywords(captured.input_names(), explicit)
        call_args, call_kwargs = captured.bind(args, kwargs)
        inputs = call_args + tuple(call_kwargs.values())
        held = list(captured.module.parameters()) + list(captured.module.buffers())
        check_devices(held, inputs)
        chosen = resolve_timer(timer, captured.module, inputs)
        devices = tensor_devices(held + list(inputs))
        if any(d.type == "meta" for d in devices):
            raise ValueError(
                "the model's tensors are on the meta device, which holds no data and computes nothing: "
                "every node's time would be Python overhead, not the model's. Profile on a real device "
                "(device='cpu' or 'cuda'); shapes and FLOPs need a real run as well"
            )
        if getattr(chosen, "name", None) == "cpu" and any(d.type == "cuda" for d in devices):
            warnings.warn(
                "timer='cpu' on CUDA tensors measures only the time to launch kernels (CUDA is "
                "asynchronous); use timer='cuda' (or 'auto') for device time.",
                stacklevel=2,
            )
        on_cuda = any(d.type == "cuda" for d in devices)
        if warmup_ms is None:
            warmup_ms = DEFAULT_GPU_WARMUP_MS if on_cuda else 0.0
        meta = describe_run(model, name, chosen, devices, inputs, warmup, iters, no_grad, captured)
        meta.update(env=environment(devices), warmup_ms=float(warmup_ms))
        if backward:
            meta.update(captured.describe())  # type: ignore[attr-defined]
        ranks = rank_sync()  # under torch.distributed: a barrier before each timed run
        if ranks is not None:
            # everything that decides how many times a rank runs the model (and so its collectives)
            ranks.check_same(warmup=warmup, warmup_ms=float(warmup_ms), iters=iters, mode=mode, capture=captured.kind,
                             timer=getattr(chosen, "name", type(chosen).__name__), anatomy=bool(anatomy),
                             memory=bool(True if memory is None else memory))
            meta = {**meta, **ranks.meta()}
        plan = RunPlan(warmup=warmup, iters=iters, warmup_ms=float(warmup_ms), mode=mode, anatomy=anatomy, memory=memory,
                       no_grad=no_grad, backward=backward, peaks=peaks)
        return measure(captured, call_args, call_kwargs, chosen, plan, meta, devices, ranks, bar,
                       own=OwnRuns.for_profile(model, captured, (args, kwargs), (call_args, call_kwargs), chosen, devices, backward, mode))
    finally:
        captured.close()
        restore_rng.close()
        PROFILING.release()
        if own_bar:
            bar.close()


#: profile()'s options and their defaults: an option still at its default object was not given
_DEFAULTS: dict[str, Any] = {
    k: p.default for k, p in inspect.signature(profile).parameters.items() if p.default is not inspect.Parameter.empty
}


def _check_count(label: str, value: Any, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{label} must be an integer, got {value!r}")
    if value < minimum:
        raise ValueError(f"{label} must be >= {minimum}, got {value}")


def _refuse_ambiguous_keywords(inputs: set[str], explicit: set[str]) -> None:
    """A keyword that is both a profile() option and a model input cannot be placed safely."""
    clash = sorted(explicit & inputs)
    if clash:
        raise TypeError(
            f"{', '.join(map(repr, clash))} is both an option of fxprof.profile and an input of the "
            f"model, so it is not clear which you meant; pass the model's inputs as "
            f"model_kwargs={{...}} (then every other keyword is a profile option)"
        )


