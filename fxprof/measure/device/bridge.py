"""A bridge to ``torch.profiler``: device activity per node by correlation, quietly.

With ``node_ranges`` on, the interpreter wraps every node in
``record_function("fxprof::<node>")`` (outside the timer's marks, so the range's own cost is not
in the node's time). After the runs, :func:`attribute_kineto` reads the profiler's raw
(Kineto) events back in one flat pass and gives every node range the device activity it
launched (:func:`attribute_events` does the same from :class:`Event` records):

- every **device activity** (a kernel, a memcpy, a memset) carries the correlation id of the
  **runtime call** that launched it (``cudaLaunchKernel``, ``cuLaunchKernel``,
  ``cudaGraphLaunch``, ``cudaMemcpyAsync``...): CUPTI gives both records the same id;
- the runtime call happened on a host thread at a host time: the ``fxprof::<node>`` range of
  that thread that contains it is the node that launched the activity.

This is how kernels that no aten op launched reach their node too: ``torch.cuda._sleep``,
``CUDAGraph.replay``, Triton and custom-extension kernels. (A range's own
``device_time_total`` only sums the kernels of aten ops below it: Kineto links device work to
the innermost *op* around the launch, and a ``record_function`` range is a user scope, not an
op.)

The copies of the inputs that every run starts with (so in-place ops never touch the caller's
tensors) run inside a range of their own, :data:`INPUT_COPIES_RANGE`: their device activity is
reported as input copies, neither model time nor "outside every node".

Kineto prints log lines on the process's stderr when the profiler starts and stops;
:func:`kineto_quiet` keeps them off the user's terminal (other output passes through).
"""

from __future__ import annotations

import bisect
import contextlib
import os
import re
import sys
import tempfile
import warnings
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Iterable, Iterator

__all__ = [
    "RANGE_PREFIX",
    "Event",
    "DeviceAttribution",
    "events_from_kineto",
    "attribute_events",
    "attribute_kineto",
    "INPUT_COPIES_RANGE",
    "input_copies_range",
    "profiler_running",
    "memory_by_range",
    "kineto_quiet",
    "times_from_events",
    "KINETO_LINE",
]

RANGE_PREFIX = "fxprof::"
#: the range around the input copies made before each run (not a node: no ``fxprof::`` prefix)
INPUT_COPIES_RANGE = "fxprof: input copies"

#: Kineto activity types of device work (what a launch puts on a stream)
DEVICE_ACTIVITY_TYPES = frozenset({"kernel", "gpu_memcpy", "gpu_memset", "concurrent_kernel"})
#: Kineto activity types of host-side runtime/driver API calls
RUNTIME_TYPES = frozenset({"cuda_runtime", "cuda_driver", "privateuse1_runtime", "xpu_runtime", "mtia_runtime", "hip_runtime"})
#: runtime/driver call names, for releases whose events do not say their activity type
_RUNTIME_NAME = re.compile(r"^(cuda|cu|hip|hsa)[A-Z]")
#: a Kineto log line: ``USDT:2026-11-21 16:41:03 8071:8071 File.cpp:39] message``
KINETO_LINE = re.compile(r"^[A-Z]+:\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(\.\d+)? \d+:\d+ [\w./-]+:\d+\] ")
#: what the CPU allocator says when memory made before ``profile_memory`` began is freed under it
#: (the memory pass frees the caller's tensors' copies: expected, and not followed)
UNKNOWN_BLOCK_LINE = re.compile(r"^\[W.*CPUAllocator.*Memory block of unknown size")


@dataclass(frozen=True)
class Event:
    """One profiler event, reduced to what attribution needs. Times in ns (profiler clock).

    ``kind``: ``"range"`` (an ``fxprof::`` range), ``"copies"`` (the input copies' range,
    :data:`INPUT_COPIES_RANGE`), ``"runtime"`` (a runtime/driver API call on
    the host), ``"device"`` (a kernel, memcpy or memset on a device), ``"memory"`` (an
    allocation, ``nbytes`` > 0, or a free, < 0) or ``"other"``. ``thread`` is the host's system
    thread id for host events and the stream for device activities.
    """

    name: str
    kind: str
    start_ns: int
    end_ns: int
    thread: int = 0
    correlation: int = 0
    device: int = -1
    device_type: str = "CPU"
    nbytes: int = 0


def _call(event: Any, method: str, default: Any = None) -> Any:
    fn = getattr(event, method, None)
    if fn is None:
        return default
    try:
        return fn()
    except Exception:
        return default


def events_from_kineto(kineto_events: Iterable[Any]) -> list[Event]:
    """Turn ``prof.profiler.kineto_results.events()`` into :class:`Event` records.

    Uses ``activity_type()`` where the release has it; else device events are told from
    host ones by ``device_type()`` and runtime calls by their names (``cuda...``, ``cu...``).
    Device-side mirrors of ``record_function`` ranges (``gpu_user_annotation``) are dropped:
    they are spans, not work.
    """
    raw = list(kineto_events)
    user_names = {
        _call(e, "name", "") for e in raw
        if _device_type(e) == "CPU" and (_call(e, "activity_type") == "user_annotation" or _call(e, "is_user_annotation", False))
    }
    out = []
    for e in raw:
        name = _call(e, "name", "") or ""
        start = int(_call(e, "start_ns", 0) or 0)
        end = int(_call(e, "end_ns", None) or start + int(_call(e, "duration_ns", 0) or 0))
        activity = _call(e, "activity_type")
        activity = str(activity).lower() if activity is not None else None
        dtype = _device_type(e)
        common = dict(name=name, start_ns=start, end_ns=end, correlation=int(_call(e, "correlation_id", 0) or 0),
                      device_type=dtype)
        if name == "[memory]":
            out.append(Event(kind="memory", thread=int(_call(e, "start_thread_id", 0) or 0),
                             device=int(_call(e, "device_index", -1)), nbytes=int(_call(e, "nbytes", 0) or 0), **common))
        elif dtype != "CPU":
            is_work = activity in DEVICE_ACTIVITY_TYPES if activity is not None else name not in user_names
            out.append(Event(kind="device" if is_work else "other", thread=int(_call(e, "device_resource_id", 0) or 0),
                             device=int(_call(e, "device_index", -1)), **common))
        else:
            thread = int(_call(e, "device_resource_id", 0) or 0)
            if name.startswith(RANGE_PREFIX) and (activity in (None, "user_annotation")):
                kind = "range"
            elif name == INPUT_COPIES_RANGE and (activity in (None, "user_annotation")):
                kind = "copies"
            elif activity in RUNTIME_TYPES or (activity is None and _RUNTIME_NAME.match(name)):
                kind = "runtime"
            else:
                kind = "other"
            out.append(Event(kind=kind, thread=thread, **common))
    return out


def _device_type(event: Any) -> str:
    return str(_call(event, "device_type", "CPU")).rsplit(".", 1)[-1]


@dataclass
class DeviceAttribution:
    """Device activity per node range, and what could not be attributed.

    ``per_node[node]`` lists, for each ``fxprof::<node>`` range in the order the ranges
    started, the summed duration (ms) of the device activities launched inside it (busy
    time: activities of one range that overlap on several streams are summed).
    """

    per_node: dict[str, list[float]] = field(default_factory=dict)
    activities: int = 0
    attributed: int = 0
    #: device activities with no runtime call of the same correlation id in the events
    unlinked: int = 0
    unlinked_ms: float = 0.0
    #: device activities launched outside every node range (between nodes, or another thread)
    outside: int = 0
    outside_ms: float = 0.0
    #: device activities of the input copies made before each run (:data:`INPUT_COPIES_RANGE`)
    input_copies: int = 0
    input_copies_ms: float = 0.0
    #: ``{device index: {stream, ...}}`` of every device activity seen
    streams: dict[int, set[int]] = field(default_factory=dict)

    def notes(self) -> list[str]:
        """What a reader of the profile must know about this attribution, in words."""
        lines = []
        lost = self.unlinked + self.outside
        if lost:
            lines.append(
                f"{lost} of {self.activities} device activities ({self.unlinked_ms + self.outside_ms:.3f} ms) could not be "
                f"given to a node ({self.unlinked} without their launching call in the trace, {self.outside} launched "
                f"outside every node)"
            )
        if self.input_copies:
            lines.append(
                f"{self.input_copies} device activities ({self.input_copies_ms:.3f} ms) were the copies of the inputs made "
                f"before each run (range {INPUT_COPIES_RANGE!r}): not model time, in no node"
            )
        many = {d: s for d, s in self.streams.items() if len(s) > 1}
        for device, streams in sorted(many.items()):
            lines.append(
                f"device {device}: work ran on {len(streams)} streams; the event timer watches one stream per "
                f"device, so time on the others is charged to whichever node waits for it (kernel_ms is right)"
            )
        return lines


class _Ranges:
    """The ``fxprof::`` ranges of one host thread, for "which range contains time t"."""

    def __init__(self, ranges: list[tuple[int, int, int]]):
        ranges.sort()
        self.ranges = ranges
        self.starts = [r[0] for r in ranges]

    def find(self, t: int) -> int | None:
        """Index (into the sorted ranges) of the innermost range containing ``t``."""
        i = bisect.bisect_right(self.starts, t) - 1
        while i >= 0:
            start, end, index = self.ranges[i]
            if end >= t:
                return index  # the latest-starting range that contains t is the innermost
            i -= 1
        return None


def attribute_events(events: Iterable[Event]) -> DeviceAttribution:
    """:func:`attribute_kineto` on :class:`Event` records (:func:`events_from_kineto`, or a
    test's synthetic list): the same flat attribution."""
    ranges: list[tuple[int, int, int, str | None]] = []
    launches: dict[int, tuple[int, int]] = {}
    device: list[tuple[str, int, int, int, int, int]] = []
    cut = len(RANGE_PREFIX)
    for e in events:
        kind = e.kind
        if kind == "range":
            ranges.append((e.start_ns, e.end_ns, e.thread, e.name[cut:]))
        elif kind == "copies":
            ranges.append((e.start_ns, e.end_ns, e.thread, None))
        elif kind == "runtime" and e.correlation:
            launches[e.correlation] = (e.thread, e.start_ns)
        elif kind == "device":
            device.append((e.name, e.start_ns, e.end_ns, e.correlation, e.device, e.thread))
    return _attribute(ranges, launches, device)


def attribute_kineto(kineto_events: Iterable[Any]) -> DeviceAttribution:
    """Give every device activity to the ``fxprof::`` range whose thread made the runtime call
    that launched it (matched by correlation id), at the time of that call; straight from
    ``prof.profiler.kineto_results.events()``, in one flat pass: the host events that are neither an ``fxprof::`` range nor a runtime call
    (the aten ops: most of a trace) cost one ``name()`` and one ``device_type()`` call each and
    are dropped; no :class:`Event` is built, and whether a name is a runtime call or a device
    type is the CPU is decided once per distinct value (a dict lookup after that). Same result
    as ``attribute_events(events_from_kineto(...))`` (tests/measure/test_bridge.py checks it). Activity
    launched inside :data:`INPUT_COPIES_RANGE` is counted as input copies."""
    is_cpu_memo: dict[Any, bool] = {}
    runtime_memo: dict[str, bool] = {}
    ranges: list[tuple[int, int, int, str | None]] = []  # (start, end, thread, node; None: the input copies)
    launches: dict[int, tuple[int, int]] = {}  # correlation -> (thread, start)
    device: list[tuple[str, int, int, int, int, int]] = []  # (name, start, end, correlation, device, stream)
    user_names: set[str] = set()
    has_activity: bool | None = None
    prefix, cut = RANGE_PREFIX, len(RANGE_PREFIX)
    for e in kineto_events:
        if has_activity is None:
            has_activity = callable(getattr(e, "activity_type", None))
        name = e.name()
        dtype = e.device_type()
        cpu = is_cpu_memo.get(dtype)
        if cpu is None:
            cpu = is_cpu_memo[dtype] = str(dtype).rsplit(".", 1)[-1] == "CPU"
        if cpu:
            if name.startswith(prefix):
                if has_activity and str(e.activity_type()).lower() not in ("user_annotation", "none"):
                    continue
                start = e.start_ns()
                ranges.append((start, e.end_ns(), e.device_resource_id(), name[cut:]))
                user_names.add(name)
                continue
            if name == INPUT_COPIES_RANGE:
                if not has_activity or str(e.activity_type()).lower() in ("user_annotation", "none"):
                    ranges.append((e.start_ns(), e.end_ns(), e.device_resource_id(), None))
                    user_names.add(name)
                continue
            runtime = runtime_memo.get(name)  # decided once per name: a name is always the same kind of call
            if runtime is None:
                runtime = runtime_memo[name] = (str(e.activity_type()).lower() in RUNTIME_TYPES if has_activity
                                                else bool(_RUNTIME_NAME.match(name)))
                if not has_activity and not runtime and callable(getattr(e, "is_user_annotation", None)) and e.is_user_annotation():
                    user_names.add(name)
            if runtime:
                correlation = e.correlation_id()
                if correlation:
                    launches[correlation] = (e.device_resource_id(), e.start_ns())
            continue
        if name == "[memory]":
            continue
        if has_activity and str(e.activity_type()).lower() not in DEVICE_ACTIVITY_TYPES:
            continue
        device.append((name, e.start_ns(), e.end_ns(), e.correlation_id(), e.device_index(), e.device_resource_id()))
    if not has_activity:  # a range's device mirror (same name as a host range): a span, not work
        device = [d for d in device if d[0] not in user_names]
    return _attribute(ranges, launches, device)


def _attribute(ranges: list[tuple[int, int, int, str | None]], launches: dict[int, tuple[int, int]],
               device: list[tuple[str, int, int, int, int, int]]) -> DeviceAttribution:
    """The attribution's core: ``ranges`` ``(start, end, thread, node)`` (node None: the input
    copies), ``launches`` ``{correlation: (thread, start)}`` of the runtime calls, ``device``
    ``(name, start, end, correlation, device, stream)`` of the device activities."""
    ranges.sort(key=lambda r: r[:3])
    by_thread: dict[int, list[tuple[int, int, int]]] = defaultdict(list)
    for index, (start, end, thread, _) in enumerate(ranges):
        by_thread[thread].append((start, end, index))
    lookup = {thread: _Ranges(items) for thread, items in by_thread.items()}
    every = _Ranges([(start, end, i) for i, (start, end, _, _) in enumerate(ranges)])
    one_thread = len(lookup) == 1
    result = DeviceAttribution()
    per_range = [0.0] * len(ranges)
    streams = result.streams
    for name, start, end, correlation, index, stream in device:
        ms = (end - start) / 1e6
        result.activities += 1
        streams.setdefault(index, set()).add(stream)
        call = launches.get(correlation) if correlation else None
        if call is None:
            result.unlinked += 1
            result.unlinked_ms += ms
            continue
        thread, at = call
        ranges_of = lookup.get(thread)
        found = ranges_of.find(at) if ranges_of is not None else (every.find(at) if one_thread else None)
        if found is None:
            result.outside += 1
            result.outside_ms += ms
            continue
        if ranges[found][3] is None:
            result.input_copies += 1
            result.input_copies_ms += ms
            continue
        per_range[found] += ms
        result.attributed += 1
    for (_, _, _, node), ms in zip(ranges, per_range):
        if node is not None:
            result.per_node.setdefault(node, []).append(ms)
    return result


def input_copies_range() -> Any:
    """The range the input copies of every run are made in, under ``timer="kernel"``."""
    import torch

    return torch.profiler.record_function(INPUT_COPIES_RANGE)


def profiler_running() -> bool:
    """True while a ``torch.profiler`` (the caller's own, around fxprof) is running in this
    process: profilers do not nest, so fxprof's own passes that need one are skipped."""
    import torch

    return bool(torch._C._autograd._profiler_enabled())


def memory_by_range(events: Iterable[Event], devices: set[tuple[str, int]] | None = None) -> dict[str, dict[str, int]]:
    """Per ``fxprof::`` range: allocated bytes at its end minus at its start (``delta``) and the
    highest point reached inside it above the start (``peak``), from the profiler's allocation
    events (``profile_memory=True``), summed over ``devices`` (``{(type, index)}``; None: all).
    A node appearing in several ranges keeps its last one."""
    events = list(events)
    ranges = sorted((e for e in events if e.kind == "range"), key=lambda e: e.start_ns)
    memory = sorted((e for e in events if e.kind == "memory"), key=lambda e: e.start_ns)
    times = [m.start_ns for m in memory]
    out: dict[str, dict[str, int]] = {}
    for r in ranges:
        lo, hi = bisect.bisect_left(times, r.start_ns), bisect.bisect_right(times, r.end_ns)
        per_device: dict[tuple[str, int], list[int]] = {}
        for m in memory[lo:hi]:
            key = (m.device_type.lower(), m.device)
            if devices is not None and key not in devices:
                continue
            state = per_device.setdefault(key, [0, 0])
            state[0] += m.nbytes
            state[1] = max(state[1], state[0])
        level = sum(s[0] for s in per_device.values())
        peak = sum(s[1] for s in per_device.values())
        out[r.name[len(RANGE_PREFIX):]] = {"delta": level, "peak": peak}
    return out


def times_from_events(events: Iterable[Any]) -> dict[str, list[tuple[float, float]]]:
    """``{node: [(cpu_ms, device_ms), ...]}`` from ``torch.profiler``'s ``FunctionEvent`` list, in
    the order the node's ranges started: the host time of each ``fxprof::`` range and the
    ``device_time_total`` PyTorch itself gives it (only kernels of aten ops below the range;
    :func:`attribute_kineto` is the complete account). Used by the benchmarks."""
    found: dict[str, list[tuple[float, float, float]]] = defaultdict(list)
    for event in events:
        name = getattr(event, "name", "")
        if not name.startswith(RANGE_PREFIX) or _device_type(_Attr(event)) != "CPU":
            continue
        start = float(getattr(getattr(event, "time_range", None), "start", 0.0) or 0.0)
        device_us = getattr(event, "device_time_total", None)
        if device_us is None:  # older releases
            device_us = getattr(event, "cuda_time_total", 0.0)
        found[name[len(RANGE_PREFIX):]].append((start, float(event.cpu_time_total) / 1000.0, float(device_us or 0.0) / 1000.0))
    return {node: [(cpu, dev) for _, cpu, dev in sorted(items)] for node, items in found.items()}


class _Attr:
    """Adapts a FunctionEvent's ``device_type`` attribute to the method form Kineto events use."""

    def __init__(self, event: Any):
        self._event = event

    def device_type(self) -> Any:
        return getattr(self._event, "device_type", "CPU")


@contextlib.contextmanager
def kineto_quiet(also: re.Pattern | None = None) -> Iterator[None]:
    """Keep Kineto's log lines (written by C++ straight to file descriptor 2) off the
    terminal while the body runs (and lines matching ``also``); any other output written there
    meanwhile is passed on."""
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError, AttributeError):
        yield
        return
    with tempfile.TemporaryFile() as tmp:
        os.dup2(tmp.fileno(), 2)
        try:
            yield
        finally:
            with contextlib.suppress(Exception):
                sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            tmp.seek(0)
            text = tmp.read().decode("utf-8", errors="replace")
            kept = [line for line in text.splitlines(keepends=True) if not KINETO_LINE.match(line)
                    and not (also is not None and also.match(line))]
            if kept:
                sys.stderr.write("".join(kept))


class KernelProfiler:
    """``torch.profiler`` (CPU and CUDA activity) around the timed runs of ``timer="kernel"``.

    CUPTI's start-up is paid inside the same profiler run: a ``schedule`` with ``warmup`` steps
    runs that many untimed runs under the profiler before recording starts (PyTorch's own
    schedule warns that profiling without warm-up skews the first steps). Kineto's log lines
    are kept off the terminal. Use as a context manager; call :meth:`warm_up` first, then
    :meth:`step` after every timed run.
    """

    def __init__(self, iters: int, warmup: int = 2):
        from torch.profiler import ProfilerActivity, profile, schedule

        self.warmup = max(1, int(warmup))
        with warnings.catch_warnings():  # one cycle (repeat=1): torch's note about clearing cycles is moot
            warnings.filterwarnings("ignore", message=".*Profiler clears events at the end of each cycle")
            self.prof = profile(
                activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA],
                schedule=schedule(wait=0, warmup=self.warmup, active=iters, repeat=1),
            )

    def __enter__(self) -> "KernelProfiler":
        with kineto_quiet():
            self.prof.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        with kineto_quiet():
            self.prof.__exit__(*exc)

    def warm_up(self, run: Any, reset: Any) -> None:
        """``warmup`` runs under the profiler, not recorded; then ``reset()`` the recorder."""
        for _ in range(self.warmup):
            run()
            self.step()
        reset()

    def step(self) -> None:
        with kineto_quiet():
            self.prof.step()

    def attribution(self) -> DeviceAttribution:
        results = getattr(self.prof.profiler, "kineto_results", None)
        return attribute_kineto(results.events() if results is not None else [])


def kernel_ms_per_sample(nodes: list[str], attribution: DeviceAttribution) -> list[float]:
    """Device time of every sample: a node's k-th range belongs to its k-th sample (the ranges
    of the profiled runs, in order). NaN where a sample has no range."""
    seen: dict[str, int] = {}
    out = []
    for node in nodes:
        k = seen.get(node, 0)
        seen[node] = k + 1
        ranges = attribution.per_node.get(node, [])
        out.append(ranges[k] if k < len(ranges) else float("nan"))
    return out
