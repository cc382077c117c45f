"""``fxprof.profile``: trace, warm up, time every node of every run, return a Profile."""

from __future__ import annotations

import contextlib
import datetime as _dt
import inspect
import platform
import warnings
from typing import Any, Callable, Iterable, Iterator

import torch
from torch import nn

from . import __version__
from ._tree import clone_tensors
from .errors import describe_value
from .anatomy import anatomy_pass, memory_pass
from .bridge import KernelProfiler, kernel_ms_per_sample
from .environment import environment
from .capture import CAPTURES, Capture, capture_model
from . import distributed
from .distributed import ISOLATED_UNDER_RANKS, RankSync, rank_sync
from .recording import Recorder
from .isolated import isolated_pass
from .profile import Profile
from .budget import SampleBudget
from .export import epoch_ns
from .progress import Progress, as_progress
from .state import PROFILING, preserved_autocast, preserved_buffers, preserved_rng
from .timers import Timer, _index_key, resolve_timer, tensor_devices

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
            ``torch.profiler``'s trace), or a :class:`~fxprof.timers.Timer`. The CUDA timers
            watch every CUDA device the model's tensors are on.
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
        memory: run once more untimed, under ``torch.profiler`` with ``profile_memory``, to
            record each node's allocation delta and peak on the model's devices (default:
            when the model runs on CUDA; ``True`` on the CPU measures the CPU allocator).
            Nothing is reset: your own peak-memory statistics are left as they were.
        progress: show a progress bar on stderr naming each phase (tracing, warm-up, timed
            runs, anatomy pass) with its own count (tqdm; silent when stderr is not a
            terminal); or a :class:`fxprof.progress.Progress` to report to (left open).
        backward: profile training steps instead of forward passes: each run is forward, loss
            and backward (and ``optimizer`` step), with the nodes of the forward and backward
            graphs (from AOTAutograd) all timed; the table's ``phase`` column says which, and
            backward nodes are charged to the module of the forward op they differentiate.
            Runs with gradients on (``no_grad`` is ignored; inside ``torch.no_grad()`` too), and is
            refused inside ``torch.inference_mode()``. See :mod:`fxprof.training`.
        loss_fn: with ``backward``, ``loss_fn(output) -> scalar tensor`` (default: the sum of
            the output's floating-point values).
        optimizer: with ``backward``, also ``optimizer.zero_grad()`` and ``optimizer.step()``
            in every run, each timed as a node of phase ``optimizer``. Parameters, ``.grad``,
            optimizer state and the RNG are restored when profiling ends.

    Returns:
        A :class:`~fxprof.Profile`. Buffers the runs changed (batch-norm running statistics in
        training mode) are restored afterwards, so the model is left bit-identical; fxprof
        never writes parameters (a model whose forward writes its own parameters would). The random
        number generators (CPU, and CUDA when in use) are put back as well. Tensor inputs are cloned
        as new leaves: a backward never reaches the caller's tensors (``x.grad`` stays as it was).
        Under an initialized ``torch.distributed`` process group, every rank must call this with
        the same ``warmup``/``warmup_ms``/``iters``/``mode``; each timed run starts after a barrier (outside
        the marks) and the profile carries this rank (collect the ranks with
        :func:`fxprof.gather`; see :mod:`fxprof.distributed`).

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
                                 ("warmup_ms", warmup_ms), ("backward", backward), ("loss_fn", loss_fn), ("optimizer", optimizer),
                                 ("trace_into", trace_into))
                if v is not _DEFAULTS[k]}
    _check_count("warmup", warmup, minimum=0)
    _check_count("iters", iters, minimum=1)
    if warmup_ms is not None and (isinstance(warmup_ms, bool) or not isinstance(warmup_ms, (int, float)) or not warmup_ms >= 0):
        raise ValueError(f"warmup_ms must be a number of milliseconds >= 0, got {warmup_ms!r}")
    if not isinstance(model, nn.Module):
        raise TypeError(f"fxprof.profile takes an nn.Module or fx.GraphModule, got {type(model).__name__}")
    if capture not in CAPTURES:
        raise ValueError(f"unknown capture {capture!r}; choose one of {', '.join(CAPTURES)}")
    if mode not in ("timed", "isolated"):
        raise ValueError(f"unknown mode {mode!r}; choose 'timed' or 'isolated'")
    if mode == "isolated" and distributed.is_initialized():
        raise ValueError(ISOLATED_UNDER_RANKS)
    if model_kwargs is not None:
        if kwargs:
            raise TypeError(f"unknown option(s) {', '.join(map(repr, kwargs))} of fxprof.profile (model inputs go in model_kwargs)")
        kwargs = dict(model_kwargs)

    PROFILING.acquire()  # one profile at a time in this process (see fxprof.state)
    restore_rng = contextlib.ExitStack()  # dropout in training mode draws in every run: the caller's sequence is kept
    restore_rng.enter_context(preserved_rng())
    restore_rng.enter_context(preserved_autocast())  # a node that fails inside an autocast region leaves it entered
    bar, own_bar = as_progress(progress)
    try:
        bar.phase("tracing" if capture in ("auto", "symbolic") else f"capturing ({capture})")
        if backward:  # training steps: forward and backward graphs (see fxprof.training)
            from .training import capture_training

            if torch.is_inference_mode_enabled():
                raise ValueError(
                    "backward=True was called inside torch.inference_mode(), where no gradient can be computed "
                    "(tensors made there can never take part in autograd); call fxprof.profile outside the "
                    "inference_mode() block. (Inside torch.no_grad() fxprof turns gradients on for the steps itself.)"
                )

            captured: Capture = capture_training(model, capture, mode, loss_fn, optimizer)
            no_grad = False
        elif loss_fn is not None or optimizer is not None:
            raise ValueError("loss_fn and optimizer apply to training steps: pass backward=True as well")
        else:
            captured = capture_model(model, args, kwargs, capture, concrete_args=concrete_args, leaf_modules=leaf_modules,
                                     trace_into=trace_into)
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
        _check_devices(held, inputs)
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
        kernel_time = bool(getattr(chosen, "wants_kernel_time", False))
        if kernel_time and mode == "isolated":
            raise ValueError("timer='kernel' works with mode='timed' only; use timer='cuda' for isolated mode")
        recorder = Recorder(chosen, node_ranges=kernel_time)
        meta = _describe_run(model, name, chosen, devices, inputs, warmup, iters, no_grad, captured)
        meta.update(env=environment(devices), warmup_ms=float(warmup_ms))
        if backward:
            meta.update(captured.describe())  # type: ignore[attr-defined]
        ranks = rank_sync()  # under torch.distributed: a barrier before each timed run
        if ranks is not None:
            # everything that decides how many times a rank runs the model (and so its collectives)
            ranks.check_same(warmup=warmup, warmup_ms=float(warmup_ms), iters=iters, mode=mode, capture=captured.kind,
                             timer=getattr(chosen, "name", type(chosen).__name__), anatomy=bool(anatomy),
                             memory=bool(on_cuda if memory is None else memory))
            meta = {**meta, **ranks.meta()}

        def one_run() -> None:
            a, k = _fresh((call_args, call_kwargs))
            captured.run(recorder, a, k)

        # a training step needs gradients even when the caller is inside torch.no_grad()
        grad_context = torch.enable_grad() if backward else torch.no_grad() if no_grad else contextlib.nullcontext()
        with grad_context, preserved_buffers(captured.module):
            if captured.kind in ("dynamo", "aot"):
                bar.phase(f"compiling ({captured.kind})")
                one_run()  # dynamo compiles on the first call: never part of warm-up or timing
                bar.step()
            bar.phase("warm-up", warmup)
            # under torch.distributed the ranks agree on when warm-up by time ends (equal run counts)
            agree_more = (lambda more: ranks.agree(more, every=False)) if ranks is not None else None
            meta["warmup_runs"] = _warm_up(one_run, warmup, warmup_ms, bar.step, agree_more)
            recorder.reset()
            captured.start_timing()
            records: dict[str, dict[str, Any]] = {}
            stage = "runs"
            try:
                if mode == "isolated":
                    bar.phase("isolated re-runs")
                    records = _isolated(captured, chosen, iters, (call_args, call_kwargs), recorder)
                    meta = {**meta, "mode": "isolated"}
                    if getattr(chosen, "hold_device", None) is not None:
                        meta["notes"] = meta.get("notes", []) + [
                            "isolated on the GPU: a spin kernel queued before each node's repeats keeps the host ahead, "
                            "so the repeats run back to back and their times are device time, not launch rate"]
                else:
                    bar.phase("timed runs", iters)
                    budget = SampleBudget(iters)  # a huge iters stops cleanly before memory runs out
                    stopped: BaseException | None = None  # an error or Ctrl-C in a timed run
                    with _kernel_profiler(kernel_time, iters) as kernel_prof:
                        kernel_prof.warm_up(one_run, recorder.reset)  # CUPTI start-up, inside the profiler
                        try:
                            allowed = True
                            for _ in range(iters):
                                if ranks is not None:
                                    # the barrier before each run, outside its marks (the wait is recorded);
                                    # it carries the budget's verdict, so one rank out of memory stops all
                                    allowed = ranks.barrier(allowed)
                                    if not allowed:
                                        budget.stopped_by_other_rank(recorder.recording.runs)
                                        break
                                one_run()
                                bar.step()
                                kernel_prof.step()
                                if recorder.recording.runs == 1:  # the size of a run is known: room for them all
                                    recorder.recording.reserve(budget.samples_that_fit(len(recorder.recording)))
                                allowed = budget.allows_another_run(len(recorder.recording), recorder.recording.runs)
                                if ranks is None and not allowed:
                                    break
                        except BaseException as exc:  # handed back below, after the completed runs' kernel times
                            stopped = exc
                    meta = budget.describe(meta)
                    if kernel_time:
                        meta["profiler_warmup_runs"] = kernel_prof.warmup
                        try:
                            meta["notes"] = meta.get("notes", []) + _attach_kernel_times(recorder.recording, kernel_prof.attribution())
                        except Exception:
                            if stopped is None:
                                raise
                    if stopped is not None:
                        raise stopped
                stage = "untimed passes"
                records = _merge(records, _untimed_passes(captured, (call_args, call_kwargs), devices, anatomy, memory, bar))
                meta["notes"] = meta.get("notes", []) + _unwatched_devices(records, chosen)
                switches = getattr(captured.module, "meta", {}).get("fxprof_dropped_stream_switches")
                if switches:
                    meta["notes"] = meta["notes"] + [
                        f"the model entered torch.cuda.stream(...) {switches} time(s) while being traced; symbolic tracing "
                        f"drops stream switches, so this graph ran everything on the current stream: its times are not the model's stream overlap"]
            except BaseException as exc:  # KeyboardInterrupt too: hand back what was measured
                _hand_back(exc, captured, recorder, meta, records, iters, mode, stage, ranks)
                raise
        return _build(captured, recorder, meta, records, ranks)
    finally:
        captured.close()
        restore_rng.close()
        PROFILING.release()
        if own_bar:
            bar.close()


def _hand_back(exc: BaseException, captured: Capture, recorder: Recorder, meta: dict[str, Any],
               records: dict[str, dict[str, Any]], iters: int, mode: str, stage: str, ranks: RankSync | None = None) -> None:
    """Attach what was measured before ``exc`` to it as ``exc.profile`` (nothing is lost)."""
    rec = recorder.recording
    if not len(rec):
        return
    if stage == "untimed passes":  # every run completed; only shapes/FLOPs/memory are missing
        note = f"interrupted in the untimed passes ({type(exc).__name__}): all {iters} runs kept, anatomy columns may be empty"
        partial_meta = {**meta, "capture_note": note}
        message = f"fxprof: all {iters} timed runs completed before this; they are in this exception's .profile"
    elif mode == "isolated":
        done = len(rec.recorded_names())
        partial_meta = {**meta, "mode": "isolated", "incomplete": True, "requested_iters": iters, "iters": iters}
        message = f"fxprof: {done} node(s) were re-run in isolation before this; they are in this exception's .profile"
    else:
        done = rec.runs
        if not done:
            return
        partial_meta = {**meta, "iters": done, "requested_iters": iters, "incomplete": True}
        message = f"fxprof: {done} of {iters} timed runs completed; they are in this exception's .profile"
    with contextlib.suppress(Exception):
        exc.profile = _build(captured, recorder, partial_meta, records, ranks)  # type: ignore[attr-defined]
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


def _build(captured: Capture, recorder: Recorder, meta: dict[str, Any], records: dict[str, dict[str, Any]],
           ranks: RankSync | None = None) -> Profile:
    nodes, note = captured.nodes_in(recorder.recording.recorded_names())
    if note:
        meta = {**meta, "capture_note": f"{meta['capture_note']}; {note}" if meta.get("capture_note") else note}
    origin = getattr(recorder.recording, "origin_ns", None)
    if origin is not None:  # places the runs on the wall clock torch.profiler's traces use
        meta = {**meta, "epoch_ns": epoch_ns(recorder.timer, origin)}
    known = {n.name for n in nodes}
    built = Profile.from_recording(nodes, recorder.recording, meta, {k: v for k, v in records.items() if k in known})
    return ranks.attach(built) if ranks is not None else built


#: profile()'s options and their defaults: an option still at its default object was not given
_DEFAULTS: dict[str, Any] = {
    k: p.default for k, p in inspect.signature(profile).parameters.items() if p.default is not inspect.Parameter.empty
}


def _untimed_passes(captured: Capture, inputs: tuple, devices: set[torch.device], anatomy: bool, memory: bool | None,
                    bar: Progress | None = None) -> dict[str, dict[str, Any]]:
    """Shapes/FLOPs and CUDA memory passes. A failure here costs a warning, never the timings."""
    records: dict[str, dict[str, Any]] = {}
    cuda = sorted((d for d in devices if d.type == "cuda"), key=_index_key)
    if memory is None:
        memory = bool(cuda)
    passes = []
    if anatomy:
        passes.append(("anatomy (shapes, FLOPs)", anatomy_pass(watch_syncs=bool(cuda) and torch.cuda.is_available())))
    if memory:
        passes.append(("memory", memory_pass(cuda or sorted(devices, key=_index_key) or [torch.device("cpu")])))
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


#: default ``warmup_ms`` on CUDA: long enough for a GPU to leave its idle clocks (a choice, to be
#: checked on a GPU: docs/performance.md)
DEFAULT_GPU_WARMUP_MS = 200.0


def _warm_up(one_run: Any, runs: int, ms: float, step: Any, agree: Any = None) -> int:
    """At least ``runs`` runs and at least ``ms`` milliseconds of them; returns the runs done.

    ``agree(more) -> bool``, under torch.distributed: whether any rank wants another run, so
    that every rank does the same number (a rank that stopped alone would leave the others in
    the model's collectives or the next barrier)."""
    import time

    done = 0
    end = time.perf_counter() + ms / 1000.0
    while True:
        if done >= runs:
            more = ms > 0 and time.perf_counter() < end
            if agree is not None and ms > 0:
                more = agree(more)
            if not more:
                break
        one_run()
        done += 1
        step()
    return done


class _NoProfiler:
    def warm_up(self, run: Any, reset: Any) -> None:
        pass

    def step(self) -> None:
        pass


@contextlib.contextmanager
def _kernel_profiler(enabled: bool, iters: int) -> Iterator[Any]:
    """torch.profiler with CUDA activity around the timed runs of ``timer="kernel"`` (see
    :class:`fxprof.bridge.KernelProfiler`); a stand-in that does nothing otherwise."""
    if not enabled:
        yield _NoProfiler()
        return
    with KernelProfiler(iters) as prof:
        yield prof


def _attach_kernel_times(recording: Any, attribution: Any) -> list[str]:
    """Give every sample the device activity of its node's range in the same run (k-th to
    k-th); return what the profile must say about the attribution."""
    recording.kernel_ms = kernel_ms_per_sample(recording.node, attribution)
    return attribution.notes()


def _unwatched_devices(records: dict[str, dict[str, Any]], timer: Any) -> list[str]:
    """CUDA devices that node outputs are on but the timer does not watch."""
    watched = {str(d) for d in getattr(timer, "devices", []) if d is not None}
    if not getattr(timer, "measures_device", False):
        return []
    seen = {d for r in records.values() for d in r.get("devices", ()) if d.startswith("cuda")}
    missing = sorted(seen - watched, key=lambda d: (len(d), d))
    if not missing:
        return []
    return [f"nodes produce tensors on {', '.join(missing)}, which the timer does not watch (only the devices of "
            f"the model's parameters and inputs are): their device time is not in any node's time"]


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
    cuda = sorted((d for d in devices if d.type == "cuda"), key=_index_key)
    device = ", ".join(map(str, cuda)) if cuda else ("cpu" if devices else "none")
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
    meta.update(captured.notes)  # what the capture found (nested_compile...)
    if cuda and torch.cuda.is_available():
        with contextlib.suppress(Exception):
            meta["gpu"] = torch.cuda.get_device_name(cuda[0])
    # the floating dtypes of the parameters and buffers ("float32"; "bfloat16, float32" if mixed):
    # fxprof.compare warns when two profiles differ in it
    floats = {str(t.dtype).removeprefix("torch.") for t in [*model.parameters(), *model.buffers()] if t.is_floating_point()}
    meta["dtype"] = ", ".join(sorted(floats)) or "none"
    return meta
