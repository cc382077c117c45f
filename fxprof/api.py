"""``fxprof.profile``: trace, warm up, time every node of every run, return a Profile."""

from __future__ import annotations

import contextlib
import datetime as _dt
import inspect
import platform
import warnings
from typing import Any, Iterable, Iterator

import torch
from torch import nn

from . import __version__
from ._tree import clone_tensors
from .errors import describe_value
from .anatomy import anatomy_pass, memory_pass
from .bridge import times_from_events
from .capture import CAPTURES, Capture, capture_model
from .recording import Recorder
from .isolated import isolated_pass
from .profile import Profile
from .progress import Progress, as_progress
from .export import epoch_ns
from .timers import Timer, resolve_timer, tensor_devices

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
    trace_into: Iterable[type | str] | str = (),
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
        iters: timed runs (>= 1).
        timer: ``"auto"`` (``"cuda"`` if any parameter, buffer or input is on CUDA, else
            ``"cpu"``), ``"cpu"``, ``"cuda"``, ``"sync"``, ``"kernel"`` (CUDA events plus the
            kernel time launched inside each node, from ``torch.profiler``), or a
            :class:`~fxprof.timers.Timer`.
        no_grad: run under ``torch.no_grad()`` (default True).
        capture: how to get the graph(s): ``"auto"`` (symbolic tracing, falling back to
            ``"dynamo"`` when it fails, and saying why in ``profile.meta``), ``"symbolic"``
            (:func:`fxprof.trace`), ``"dynamo"`` (``torch.compile`` with fxprof's backend: one
            graph per region between graph breaks; node names get a ``g0:`` prefix) or
            ``"export"`` (``torch.export``, aten-level nodes). See :mod:`fxprof.capture`.
        concrete_args, leaf_modules, trace_into: passed to :func:`fxprof.trace` (symbolic
            capture); ``trace_into`` names ``torch.nn`` modules to trace inside (or ``"all"``).
        mode: ``"timed"`` (whole runs, every node timed in place) or ``"isolated"`` (after
            warm-up, each node re-run ``iters`` times back to back on its real inputs for a
            steady-state cost; nodes that are impure, random or modify their inputs are
            skipped, with the reason in the ``skip_reason`` column). See :mod:`fxprof.isolated`.
        name: the model's name in the profile (default: its class name).
        anatomy: after the timed runs, run once more untimed to record each node's input and
            output shapes, dtype, output bytes and FLOPs (``FlopCounterMode``).
        memory: run once more untimed to record each node's CUDA memory delta and peak
            (default: when the model runs on CUDA; resets CUDA peak-memory statistics).
        progress: show a progress bar on stderr naming each phase (tracing, warm-up, timed
            runs, anatomy pass) with its own count (tqdm; silent when stderr is not a
            terminal); or a :class:`fxprof.progress.Progress` to report to (left open).

    Returns:
        A :class:`~fxprof.Profile`. Buffers the runs changed (batch-norm running statistics in
        training mode) are restored afterwards, so the model is left bit-identical; fxprof
        never writes parameters (a model whose forward writes its own parameters would).

    Raises:
        ValueError: ``warmup``/``iters`` out of range, or inputs that do not fit the graph.
        TimerUnavailableError: a CUDA timer without a usable GPU (raised before anything runs).
        TraceError: the model cannot be captured as asked; says why and what to try.
        NodeExecutionError: a node failed; names the node and what it received. If timed runs
            had completed, the exception's ``profile`` attribute holds them.
    """
    explicit = {k for k, v in (("warmup", warmup), ("iters", iters), ("timer", timer), ("no_grad", no_grad),
                                ("concrete_args", concrete_args), ("leaf_modules", leaf_modules), ("name", name),
                                ("anatomy", anatomy), ("memory", memory), ("progress", progress), ("capture", capture),
                                ("trace_into", trace_into))
                if v is not _DEFAULTS[k]}
    _check_count("warmup", warmup, minimum=0)
    _check_count("iters", iters, minimum=1)
    if not isinstance(model, nn.Module):
        raise TypeError(f"fxprof.profile takes an nn.Module or fx.GraphModule, got {type(model).__name__}")
    if capture not in CAPTURES:
        raise ValueError(f"unknown capture {capture!r}; choose one of {', '.join(CAPTURES)}")
    if mode not in ("timed", "isolated"):
        raise ValueError(f"unknown mode {mode!r}; choose 'timed' or 'isolated'")
    if model_kwargs is not None:
        if kwargs:
            raise TypeError(f"unknown option(s) {', '.join(map(repr, kwargs))} of fxprof.profile (model inputs go in model_kwargs)")
        kwargs = dict(model_kwargs)

    bar, own_bar = as_progress(progress)
    bar.phase("tracing" if capture in ("auto", "symbolic") else f"capturing ({capture})")
    try:
        captured = capture_model(model, args, kwargs, capture, concrete_args=concrete_args, leaf_modules=leaf_modules,
                                 trace_into=trace_into)
    except BaseException:
        if own_bar:
            bar.close()
        raise
    bar.step()
    try:
        if model_kwargs is None:
            _refuse_ambiguous_keywords(captured.input_names(), explicit)
        call_args, call_kwargs = captured.bind(args, kwargs)
        inputs = call_args + tuple(call_kwargs.values())
        held = list(captured.module.parameters()) + list(captured.module.buffers())
        _check_devices(held, inputs)
        chosen = resolve_timer(timer, captured.module, inputs)
        devices = tensor_devices(held + list(inputs))
        if getattr(chosen, "name", None) == "cpu" and any(d.type == "cuda" for d in devices):
            warnings.warn(
                "timer='cpu' on CUDA tensors measures only the time to launch kernels (CUDA is "
                "asynchronous); use timer='cuda' (or 'auto') for device time.",
                stacklevel=2,
            )
        if memory and not (any(d.type == "cuda" for d in devices) and torch.cuda.is_available()):
            raise ValueError("memory=True measures the CUDA caching allocator, but the model runs on the CPU")
        kernel_time = bool(getattr(chosen, "wants_kernel_time", False))
        if kernel_time and mode == "isolated":
            raise ValueError("timer='kernel' works with mode='timed' only; use timer='cuda' for isolated mode")
        recorder = Recorder(chosen, node_ranges=kernel_time)
        meta = _describe_run(model, name, chosen, devices, inputs, warmup, iters, no_grad, captured)

        def one_run() -> None:
            a, k = _fresh((call_args, call_kwargs))
            captured.run(recorder, a, k)

        grad_context = torch.no_grad() if no_grad else contextlib.nullcontext()
        with grad_context, _restore_buffers(captured.module):
            if captured.kind == "dynamo":
                bar.phase("compiling (dynamo)")
                one_run()  # dynamo compiles on the first call: never part of warm-up or timing
                bar.step()
            bar.phase("warm-up", warmup)
            for _ in range(warmup):
                one_run()
                bar.step()
            recorder.reset()
            captured.start_timing()
            records: dict[str, dict[str, Any]] = {}
            stage = "runs"
            try:
                if mode == "isolated":
                    bar.phase("isolated re-runs")
                    records = _isolated(captured, chosen, iters, (call_args, call_kwargs), recorder)
                    meta = {**meta, "mode": "isolated"}
                else:
                    bar.phase("timed runs", iters)
                    with _kernel_profiler(kernel_time) as kernel_prof:
                        for _ in range(iters):
                            one_run()
                            bar.step()
                    if kernel_prof is not None:
                        _attach_kernel_times(recorder.recording, kernel_prof.events())
                stage = "untimed passes"
                records = _merge(records, _untimed_passes(captured, (call_args, call_kwargs), devices, anatomy, memory, bar))
            except BaseException as exc:  # KeyboardInterrupt too: hand back what was measured
                _hand_back(exc, captured, recorder, meta, records, iters, mode, stage)
                raise
        return _build(captured, recorder, meta, records)
    finally:
        captured.close()
        if own_bar:
            bar.close()


def _hand_back(exc: BaseException, captured: Capture, recorder: Recorder, meta: dict[str, Any],
               records: dict[str, dict[str, Any]], iters: int, mode: str, stage: str) -> None:
    """Attach what was measured before ``exc`` to it as ``exc.profile`` (nothing is lost)."""
    rec = recorder.recording
    if not rec.node:
        return
    if stage == "untimed passes":  # every run completed; only shapes/FLOPs/memory are missing
        note = f"interrupted in the untimed passes ({type(exc).__name__}): all {iters} runs kept, anatomy columns may be empty"
        partial_meta = {**meta, "capture_note": note}
        message = f"fxprof: all {iters} timed runs completed before this; they are in this exception's .profile"
    elif mode == "isolated":
        done = len(set(rec.node))
        partial_meta = {**meta, "mode": "isolated", "incomplete": True, "requested_iters": iters, "iters": iters}
        message = f"fxprof: {done} node(s) were re-run in isolation before this; they are in this exception's .profile"
    else:
        done = rec.runs
        if not done:
            return
        partial_meta = {**meta, "iters": done, "requested_iters": iters, "incomplete": True}
        message = f"fxprof: {done} of {iters} timed runs completed; they are in this exception's .profile"
    with contextlib.suppress(Exception):
        exc.profile = _build(captured, recorder, partial_meta, records)  # type: ignore[attr-defined]
        exc.add_note(message)


def _isolated(captured: Capture, timer: Timer, repeats: int, inputs: tuple, recorder: Recorder) -> dict[str, dict[str, Any]]:
    """Samples of every re-runnable node into ``recorder.recording``; skip reasons as records."""
    rec = recorder.recording
    skips: dict[str, str] = {}
    kinds = {n.name: n.kind for n in captured.nodes}
    args, kwargs = _fresh(inputs)
    # no whole runs here: the samples' run index is the repeat, and the runs table stays empty
    captured.run_pass(isolated_pass(timer, repeats, rec, skips, kinds), args, kwargs)
    return {node: {"skip_reason": reason} for node, reason in skips.items()}


def _merge(a: dict[str, dict[str, Any]], b: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    out = {k: dict(v) for k, v in a.items()}
    for node, values in b.items():
        out.setdefault(node, {}).update(values)
    return out


def _build(captured: Capture, recorder: Recorder, meta: dict[str, Any], records: dict[str, dict[str, Any]]) -> Profile:
    nodes, note = captured.nodes_in(set(recorder.recording.node))
    if note:
        meta = {**meta, "capture_note": note}
    origin = getattr(recorder.recording, "origin_ns", None)
    if origin is not None:  # places the runs on the wall clock torch.profiler's traces use
        meta = {**meta, "epoch_ns": epoch_ns(recorder.timer, origin)}
    known = {n.name for n in nodes}
    return Profile.from_recording(nodes, recorder.recording, meta, {k: v for k, v in records.items() if k in known})


#: profile()'s options and their defaults: an option still at its default object was not given
_DEFAULTS: dict[str, Any] = {
    k: p.default for k, p in inspect.signature(profile).parameters.items() if p.default is not inspect.Parameter.empty
}


def _untimed_passes(captured: Capture, inputs: tuple, devices: set[torch.device], anatomy: bool, memory: bool | None,
                    bar: Progress | None = None) -> dict[str, dict[str, Any]]:
    """Shapes/FLOPs and CUDA memory passes. A failure here costs a warning, never the timings."""
    records: dict[str, dict[str, Any]] = {}
    cuda = sorted((d for d in devices if d.type == "cuda"), key=str)
    if memory is None:
        memory = bool(cuda)
    passes = []
    if anatomy:
        passes.append(("anatomy (shapes, FLOPs)", anatomy_pass()))
    if memory:
        passes.append(("CUDA memory", memory_pass(cuda[0])))
    for label, make_pass in passes:
        if bar is not None:
            bar.phase(f"{label.split()[0]} pass")
        try:
            args, kwargs = _fresh(inputs)
            found = captured.run_pass(make_pass, args, kwargs)
        except Exception as exc:  # keep the timings; say what is missing
            warnings.warn(f"fxprof: the {label} pass failed ({type(exc).__name__}: {exc}); those columns are left empty", stacklevel=3)
            continue
        for node, values in found.items():
            records.setdefault(node, {}).update(values)
    return records


@contextlib.contextmanager
def _kernel_profiler(enabled: bool) -> Iterator[Any]:
    """torch.profiler with CUDA activity around the timed runs of ``timer="kernel"``."""
    if not enabled:
        yield None
        return
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    with torch_profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        yield prof


def _attach_kernel_times(recording: Any, events: Any) -> None:
    """Give every sample the kernel time of its node's range in the same run (k-th to k-th)."""
    times = times_from_events(events)
    seen: dict[str, int] = {}
    kernel_ms = []
    for node in recording.node:
        k = seen.get(node, 0)
        seen[node] = k + 1
        ranges = times.get(node, [])
        kernel_ms.append(ranges[k][1] if k < len(ranges) else float("nan"))
    recording.kernel_ms = kernel_ms


def _check_count(label: str, value: Any, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{label} must be an integer, got {value!r}")
    if value < minimum:
        raise ValueError(f"{label} must be >= {minimum}, got {value}")


def _check_devices(held: list[torch.Tensor], inputs: tuple) -> None:
    """Inputs on another device than a model whose tensors all sit on one device."""
    held_devices = {t.device for t in held}
    if len(held_devices) != 1:
        return
    (device,) = held_devices
    for i, value in enumerate(inputs):
        for d in tensor_devices([value]):
            if d != device:
                raise ValueError(
                    f"input {i} is on {d} but the model's parameters and buffers are on {device}; "
                    f"move the inputs there first (x.to('{device}')) or the model to {d}"
                )


def _refuse_ambiguous_keywords(inputs: set[str], explicit: set[str]) -> None:
    """A keyword that is both a profile() option and a model input cannot be placed safely."""
    clash = sorted(explicit & inputs)
    if clash:
        raise TypeError(
            f"{', '.join(map(repr, clash))} is both an option of fxprof.profile and an input of the "
            f"model, so it is not clear which you meant; pass the model's inputs as "
            f"model_kwargs={{...}} (then every other keyword is a profile option)"
        )


def _fresh(values: tuple) -> tuple:
    """Clone tensors (recursively) so in-place ops in the model never touch the caller's."""
    return clone_tensors(tuple(values))


@contextlib.contextmanager
def _restore_buffers(gm: nn.Module) -> Iterator[None]:
    """Put every buffer back as it was (batch-norm statistics move in training mode)."""
    saved = [(b, b.detach().clone()) for b in gm.buffers()]
    try:
        yield
    finally:
        with torch.no_grad():
            for buffer, value in saved:
                if buffer.shape == value.shape:
                    buffer.copy_(value)


def _describe_run(
    model: nn.Module,
    name: str | None,
    timer: Timer,
    devices: set[torch.device],
    inputs: tuple,
    warmup: int,
    iters: int,
    no_grad: bool,
    captured: Capture,
) -> dict[str, Any]:
    cuda = sorted((d for d in devices if d.type == "cuda"), key=str)
    device = str(cuda[0]) if cuda else ("cpu" if devices else "none")
    meta: dict[str, Any] = {
        "model": name or type(model).__name__,
        "timer": getattr(timer, "name", type(timer).__name__),
        "device": device,
        "warmup": warmup,
        "iters": iters,
        "threads": torch.get_num_threads(),
        "no_grad": no_grad,
        "capture": captured.kind,
        "capture_reason": captured.reason,
        "training": model.training,
        "inputs": [describe_value(v) for v in inputs],
        "torch": torch.__version__,
        "fxprof": __version__,
        "python": platform.python_version(),
        "machine": platform.machine(),
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
    }
    if cuda and torch.cuda.is_available():
        with contextlib.suppress(Exception):
            meta["gpu"] = torch.cuda.get_device_name(cuda[0])
    return meta
