"""The run loop: warm-up, the timed runs (or isolated re-runs), the untimed passes, the Profile.

:func:`fxprof.profile` checks its options, captures the model and picks the timer; everything
from there to the returned :class:`~fxprof.core.profile.Profile` happens here, in
:func:`measure`:

1. warm-up: at least ``warmup`` runs and ``warmup_ms`` of them (first-call costs stay out);
2. the timed runs, each node bracketed by the timer's marks (:mod:`fxprof.measure.capture.interpreter`),
   with a barrier before each run under ``torch.distributed`` and a memory budget that stops a
   huge ``iters`` in time; or, with ``mode="isolated"``, every node re-run on its own inputs;
3. the untimed passes (shapes, FLOPs, CUDA memory), whose own costs never reach the timings;
4. the Profile, with what was measured described in its ``meta``.

An error or Ctrl-C anywhere hands back what was measured as ``exc.profile`` (:func:`hand_back`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as _dt
import platform
import time
import warnings
from typing import Any, Iterator

import torch
from torch import nn

from ...core.profile import Profile
from ...errors import add_note
from ...vocab import TIMER_NAMES, __version__
from ..capture.captures import Capture
from ..common.state import preserved_buffers
from ..common.tree import clone_tensors, describe_value
from ..device.bridge import KernelProfiler, input_copies_range, kernel_ms_per_sample, profiler_running
from ..distributed.ranks import RankSync
from ..passes.anatomy import anatomy_pass
from ..passes.memory import memory_pass, memory_per_node
from ..timing.budget import SampleBudget
from ..timing.contention import ContentionMeter, RunWatch, clock_excludes_other_processes, cpu_clock_record
from ..timing.launches import launch_check
from ..timing.recorder import Recorder
from ..timing.timers import Timer, epoch_ns, index_key, tensor_devices
from .fidelity import OwnRuns, count_aten_ops, dispatch_note, own_run_slots
from .isolated import isolated_pass
from .plan import DEFAULT_GPU_WARMUP_MS, ProfilePlan

__all__ = ["measure", "describe_run", "check_devices", "DEFAULT_GPU_WARMUP_MS"]


def measure(captured: Capture, call_args: tuple, call_kwargs: dict[str, Any], timer: Timer, plan: ProfilePlan,
            meta: dict[str, Any], devices: set[torch.device], ranks: RankSync | None, bar: Any,
            own: OwnRuns | None = None) -> Profile:
    """Warm up, run the timed runs (or the isolated re-runs) and the untimed passes of
    ``captured`` on ``call_args``/``call_kwargs`` with ``timer``, and build the Profile.

    ``meta`` describes the run (:func:`describe_run`); ``ranks`` is this rank's part under
    ``torch.distributed`` (None otherwise); ``bar`` the progress bar. On an error or Ctrl-C
    the completed runs come back as the exception's ``.profile``. ``own`` times the model's own
    forward between the timed runs (:mod:`fxprof.measure.eager.fidelity`)."""
    kernel_time = bool(getattr(timer, "wants_kernel_time", False))
    if kernel_time and plan.mode == "isolated":
        raise ValueError("timer='kernel' works with mode='timed' only; use timer='cuda' for isolated mode")
    recorder = Recorder(timer, node_ranges=kernel_time)
    iters = plan.iters

    copies = input_copies_range if kernel_time else contextlib.nullcontext  # a range the attribution knows

    def one_run() -> None:
        with copies():
            a, k = _fresh((call_args, call_kwargs))
        captured.run(recorder, a, k)

    grad_context = torch.enable_grad() if plan.backward else torch.no_grad() if plan.no_grad else contextlib.nullcontext()
    with grad_context, preserved_buffers(captured.module), _own_buffers(own, captured.module):
        if captured.kind in ("dynamo", "aot"):
            bar.phase(f"compiling ({captured.kind})")
            one_run()  # dynamo compiles on the first call: never part of warm-up or timing
            bar.step()
        if own is not None and plan.mode == "timed":  # same program, or said: once per capture
            # before the warm-up: the first calls after torch.profiler stops run cold (its trace
            # processing evicts the model's data and code), and the warm-up runs then settle them
            meta = _same_program(meta, own, one_run, captured.kind)
        bar.phase("warm-up", plan.warmup)
        # under torch.distributed the ranks agree on when warm-up by time ends (equal run counts)
        agree_more = (lambda more: ranks.agree(more, every=False)) if ranks is not None else None
        meta["warmup_runs"] = _warm_up(one_run, plan.warmup, plan.warmup_ms, bar.step, agree_more)
        recorder.reset()
        captured.start_timing()
        records: dict[str, dict[str, Any]] = {}
        stage = "runs"
        try:
            if plan.mode == "isolated":
                bar.phase("isolated re-runs")
                records = _isolated(captured, timer, iters, (call_args, call_kwargs), recorder)
                meta = {**meta, "mode": "isolated"}
                if getattr(timer, "hold_device", None) is not None:
                    meta["notes"] = meta.get("notes", []) + [
                        "isolated on the GPU: a spin kernel queued before each node's repeats keeps the host ahead, "
                        "so the repeats run back to back and their times are device time, not launch rate"]
            else:
                meta = _timed_runs(one_run, recorder, iters, kernel_time, ranks, meta, bar, own)
            stage = "untimed passes"
            records = _merge(records, _untimed_passes(captured, (call_args, call_kwargs), devices, plan.anatomy, plan.memory, bar,
                                                      meta, plan.backward))
            meta = _with_peaks(meta, plan, records, devices, bar)
            meta["notes"] = meta.get("notes", []) + _unwatched_devices(records, timer) + launch_check(recorder.unmarked, records)
            if recorder.unmarked:  # nodes given no event of their own: no device time, so no bound verdict
                meta["no_event_nodes"] = sorted(recorder.unmarked)
            switches = getattr(captured.module, "meta", {}).get("fxprof_dropped_stream_switches")
            if switches:
                meta["notes"] = meta["notes"] + [
                    f"the model entered torch.cuda.stream(...) {switches} time(s) while being traced; symbolic tracing "
                    f"drops stream switches, so this graph ran everything on the current stream: its times are not the model's stream overlap"]
        except BaseException as exc:  # KeyboardInterrupt too: hand back what was measured
            _hand_back(exc, captured, recorder, meta, records, iters, plan.mode, stage, ranks)
            raise
    return build_profile(captured, recorder, meta, records, ranks)


def _timed_runs(one_run: Any, recorder: Recorder, iters: int, kernel_time: bool, ranks: RankSync | None,
                meta: dict[str, Any], bar: Any, own: OwnRuns | None = None) -> dict[str, Any]:
    """The timed runs into ``recorder``; returns ``meta`` with the budget's and the kernel
    profiler's facts, and the model's own runs (``own``: a few, between the timed runs; after
    them with the kernel timer, whose profiler must see only profiled runs). An error or
    Ctrl-C in a run is raised after the completed runs' kernel times are attached."""
    own_slots = own_run_slots(iters) if own is not None else set()
    bar.phase("timed runs", iters)
    budget = SampleBudget(iters)  # a huge iters stops cleanly before memory runs out
    stopped: BaseException | None = None  # an error or Ctrl-C in a timed run
    # what each run lost to other processes (a busy machine), read outside every node's marks;
    # fxprof's own timers only (a Timer of the user's may not count time)
    # a timer on a CPU-time clock (this thread's: tests/benchmarks/zoo.py) holds no time lost to
    # other processes: nothing to measure or correct, and the header says why
    cpu_clock = clock_excludes_other_processes(recorder.timer)
    meter = ContentionMeter() if meta.get("timer") in TIMER_NAMES and not cpu_clock else None
    # read at each run's first and last mark: a window around the call held its input copies too,
    # and the syscalls at its edges, where a busy process is switched out
    watch = RunWatch(meter) if meter is not None else None
    recorder.watch = watch
    if own is not None:
        own.meter = meter
    own_wall_ns = 0  # the model's own runs inside the window: not fxprof's cost between runs
    with _kernel_profiler(kernel_time, iters) as kernel_prof:
        kernel_prof.warm_up(one_run, recorder.reset)  # CUPTI start-up, inside the profiler
        if meter is not None:
            meter.start_window()
            watch.track(recorder.recording)  # type: ignore[union-attr]
        began = time.perf_counter_ns()  # the wall time of the timed runs and all between them
        try:
            allowed = True
            for index in range(iters):
                if index in own_slots and not kernel_time:
                    t_own = time.perf_counter_ns()
                    own.run()  # type: ignore[union-attr]
                    own_wall_ns += time.perf_counter_ns() - t_own
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
        except BaseException as exc:  # handed back by the caller, after the completed runs' kernel times
            stopped = exc
        if recorder.timer.host_ns is time.perf_counter_ns:  # the clock the runs' host_ms are on
            # what the loop cost beyond the runs themselves: this minus the runs' host time and
            # minus the model's own runs (fxprof.core.overhead)
            meta["timed_wall_ms"] = (time.perf_counter_ns() - began) / 1e6
            meta["own_wall_ms"] = own_wall_ns / 1e6
        window_lost, window_ms = meter.window_lost_ms() if meter is not None else (float("nan"), float("nan"))
    if own is not None and stopped is None:
        for _ in range(len(own_slots) if kernel_time else 0):
            own.run()
        meta = own.describe(meta)
    if cpu_clock:
        meta["contention"] = cpu_clock_record()
    if meter is not None:
        own_lost = list(own.lost_ms) if own is not None else []
        recorder.watch = None
        meta = meter.describe(meta, lost_ms=watch.lost_of(recorder.recording), own_lost_ms=own_lost,  # type: ignore[union-attr]
                              window_lost_ms=round(window_lost, 6), window_ms=round(window_ms, 6))
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
    return meta


def _own_buffers(own: OwnRuns | None, held: Any) -> Any:
    """The model's own buffers put back after its own runs too, where the capture holds others
    (a traced graph's)."""
    if own is None or own.model is held or not isinstance(own.model, nn.Module):
        return contextlib.nullcontext()
    return preserved_buffers(own.model)


def _same_program(meta: dict[str, Any], own: OwnRuns, one_run: Any, captured_kind: str = "") -> dict[str, Any]:
    """``meta`` with a warning (in ``notes`` and ``dispatch_differences``) when one run of the
    captured program dispatches other aten ops than one eager forward of the model."""
    if profiler_running():  # the caller's own torch.profiler: profilers do not nest
        return {**meta, "notes": meta.get("notes", []) + [
            "aten-op comparison skipped: torch.profiler was already running around fxprof.profile (profilers do not nest)"]}
    try:
        own.call()  # warm, as the captured program is: a first call compiles what the model compiles lazily
        eager = count_aten_ops(own.call)  # (a torch.compile'd submodule's compile-time ops counted as the model's)
    except Exception as exc:  # the model's own forward cannot run here: no own runs, no comparison
        own.failed = f"{type(exc).__name__}: {str(exc).strip()[:200]}"
        return meta
    if captured_kind == "dynamo":  # warm after the model's own calls, as they were: a call that changed what dynamo
        one_run()  # specialised on first sight (an int the forward writes: self.calls += 1) compiles here, not counted
    note, differences = dispatch_note(eager, count_aten_ops(one_run))
    if not note:
        return meta
    warnings.warn(f"fxprof: {note}", stacklevel=4)
    return {**meta, "notes": meta.get("notes", []) + [note],
            "dispatch_differences": [{"op": op, "model": a, "captured": b} for op, a, b in differences]}


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
        exc.profile = build_profile(captured, recorder, partial_meta, records, ranks)  # type: ignore[attr-defined]
        add_note(exc, message)


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


def build_profile(captured: Capture, recorder: Recorder, meta: dict[str, Any], records: dict[str, dict[str, Any]],
           ranks: RankSync | None = None) -> Profile:
    nodes, note = captured.nodes_in(recorder.recording.recorded_names())
    names = captured.readable_names(nodes)
    if names:  # rows named for a reader; the capture's own name kept in raw_name
        nodes = [dataclasses.replace(n, name=names[n.name], raw_name=n.name) if n.name in names else n for n in nodes]
        recorder.recording.rename(names)
        records = {names.get(k, k): v for k, v in records.items()}
    if note:
        meta = {**meta, "capture_note": f"{meta['capture_note']}; {note}" if meta.get("capture_note") else note}
    origin = getattr(recorder.recording, "origin_ns", None)
    if origin is not None:  # places the runs on the wall clock torch.profiler's traces use
        meta = {**meta, "epoch_ns": epoch_ns(recorder.timer, origin)}
    known = {n.name for n in nodes}
    built = Profile.from_recording(nodes, recorder.recording, meta, {k: v for k, v in records.items() if k in known})
    return ranks.attach(built) if ranks is not None else built


def _untimed_passes(captured: Capture, inputs: tuple, devices: set[torch.device], anatomy: bool, memory: bool | None,
                    bar: Any = None, meta: dict[str, Any] | None = None, backward: bool = False) -> dict[str, dict[str, Any]]:
    """Shapes/FLOPs and memory passes (the memory summary goes to ``meta["memory"]``). A
    failure here costs a warning, never the timings."""
    records: dict[str, dict[str, Any]] = {}
    cuda = sorted((d for d in devices if d.type == "cuda"), key=index_key)
    if memory is None:
        memory = True
    passes = []
    if anatomy:
        passes.append(("anatomy (shapes, FLOPs)", anatomy_pass(watch_syncs=bool(cuda) and torch.cuda.is_available())))
    if memory:
        passes.append(("memory", memory_pass(cuda or [torch.device("cpu")])))
    for label, make_pass in passes:
        if bar is not None:
            bar.phase(f"{label.split()[0]} pass")
        try:
            args, kwargs = _fresh(inputs)
            if label == "memory":  # fxprof.measure.passes.memory: allocations per node, the run's peak
                found = memory_per_node(captured, make_pass, args, kwargs, backward, meta)
            else:
                found = captured.run_pass(make_pass, args, kwargs)
        except Exception as exc:  # keep the timings; say what is missing
            warnings.warn(f"fxprof: the {label} pass failed ({type(exc).__name__}: {exc}); those columns are left empty", stacklevel=3)
            continue
        for node, values in found.items():
            records.setdefault(node, {}).update(values)
    return records


def _with_peaks(meta: dict[str, Any], plan: ProfilePlan, records: dict[str, dict[str, Any]], devices: set[torch.device],
                bar: Any) -> dict[str, Any]:
    """``meta`` with ``peaks``: the roofs of the roofline columns, measured (or cached) for the
    profile's device, the dtype of the node that does the most FLOPs and the thread count, or
    as given. Measured for fxprof's own timers only: a :class:`Timer` of the user's may count
    something else than time (a fake clock), so it gets the peaks it is given. Only when the
    anatomy pass counted bytes; a failure costs a warning, never the runs."""
    if not plan.anatomy or plan.peaks is None or plan.peaks is False:
        return meta
    if isinstance(plan.peaks, str) and meta.get("timer") not in TIMER_NAMES:
        return meta  # a Timer of the user's may count something else than seconds: their peaks only
    from ..passes.peaks import resolve_peaks

    cuda = sorted((d for d in devices if d.type == "cuda"), key=index_key)
    device = cuda[0] if cuda else torch.device("cpu")
    try:
        bar.phase("machine peaks")
        found = resolve_peaks(plan.peaks, device, _busiest_dtype(records), int(meta.get("threads") or torch.get_num_threads()))
    except Exception as exc:
        warnings.warn(f"fxprof: the machine peaks could not be measured ({type(exc).__name__}: {exc}); the roofline "
                      f"columns are left empty (give them with peaks=(TFLOPS, GBPS))", stacklevel=4)
        return meta
    return {**meta, "peaks": found.to_dict()} if found is not None else meta


def _busiest_dtype(records: dict[str, dict[str, Any]]) -> torch.dtype:
    """The floating dtype of the node with the most FLOPs (float32 if none counts any)."""
    best, chosen = -1, torch.float32
    for record in records.values():
        flops = record.get("flops") or 0
        names = [n for n in str(record.get("dtype") or "").split(",") if n]
        dtype = getattr(torch, names[0], None) if names else None
        if isinstance(dtype, torch.dtype) and dtype.is_floating_point and flops > best:
            best, chosen = flops, dtype
    return chosen


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
    :class:`fxprof.measure.device.bridge.KernelProfiler`); a stand-in that does nothing otherwise."""
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


def check_devices(held: list[torch.Tensor], inputs: tuple) -> None:
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


def _fresh(values: tuple) -> tuple:
    """Clone tensors (recursively) so in-place ops in the model never touch the caller's."""
    return clone_tensors(tuple(values))


def describe_run(
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
    cuda = sorted((d for d in devices if d.type == "cuda"), key=index_key)
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
    meta.update(captured.notes.meta())  # what the capture found (nested_compile, fsdp...)
    if cuda and torch.cuda.is_available():
        with contextlib.suppress(Exception):
            meta["gpu"] = torch.cuda.get_device_name(cuda[0])
    # the floating dtypes of the parameters and buffers ("float32"; "bfloat16, float32" if mixed):
    # fxprof.compare warns when two profiles differ in it
    floats = {str(t.dtype).removeprefix("torch.") for t in [*model.parameters(), *model.buffers()] if t.is_floating_point()}
    meta["dtype"] = ", ".join(sorted(floats)) or "none"
    return meta
