"""``fxprof.profile``: trace, warm up, time every node of every run, return a Profile."""

from __future__ import annotations

import inspect
from typing import Any, Callable, Iterable

import torch
from torch import nn

from .core.profile import Profile
from .measure.compiled.mode import profile_compiled_model
from .measure.eager.plan import ProfilePlan
from .measure.eager_mode import profile_eager
from .measure.program import wants_compiled
from .measure.timing.timers import Timer
from .views.progress import Progress, as_progress

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
            ``quick`` or ``TFLOPS,GBPS``), ``None`` or ``"off"`` (no roofline), ``(tflops, gbps)`` or
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
    options = dict(warmup=warmup, iters=iters, timer=timer, no_grad=no_grad, concrete_args=concrete_args,
                   leaf_modules=leaf_modules, name=name, anatomy=anatomy, memory=memory, progress=progress, capture=capture,
                   mode=mode, warmup_ms=warmup_ms, backward=backward, loss_fn=loss_fn, optimizer=optimizer,
                   trace_into=trace_into, compile=compile, peaks=peaks)
    given = {k for k, v in options.items() if v is not _DEFAULTS[k]}
    plan = ProfilePlan.checked(model, given, **options)  # every option, checked before anything runs
    if model_kwargs is not None:
        if kwargs:
            raise TypeError(f"unknown option(s) {', '.join(map(repr, kwargs))} of fxprof.profile (model inputs go in model_kwargs)")
        kwargs = dict(model_kwargs)
    if wants_compiled(model, compile):  # the compiled program's kernels (fxprof.measure.compiled.mode)
        return profile_compiled_model(model, args, kwargs, plan)
    bar, own_bar = as_progress(progress)
    try:  # the eager graphs, or a training step (fxprof.measure.eager_mode)
        return profile_eager(model, args, kwargs, plan, bar, keywords_are_options=model_kwargs is None)
    finally:
        if own_bar:
            bar.close()


#: profile()'s options and their defaults: an option still at its default object was not given
_DEFAULTS: dict[str, Any] = {
    k: p.default for k, p in inspect.signature(profile).parameters.items() if p.default is not inspect.Parameter.empty
}
