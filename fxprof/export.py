"""Chrome trace export: every node of every run as a span, on torch.profiler's clock.

The Trace Event Format (the JSON that chrome://tracing and https://ui.perfetto.dev open) takes
complete events (``"ph": "X"``) with a start ``ts`` and a duration ``dur`` in microseconds.
fxprof writes one such span per node per chosen run, on a host track (host clock) and, with
the CUDA timers, a device track (stream time), with the node's kind, scope, shapes and FLOPs in
``args``.

Timestamps follow torch.profiler (Kineto): ``ts`` is microseconds of the Unix-epoch wall clock
counted from ``baseTimeNanoseconds``, which Kineto sets to the start of the current 7889238 s
("three month") interval and writes at the top of its JSON. fxprof computes the same base and
places its runs at the wall-clock time they ran (``meta["epoch_ns"]``: the first timed run's
start, from the host clock's offset to ``time.time_ns()``), so a torch.profiler trace of the
same process lines up with an fxprof trace: concatenate their ``traceEvents`` (or use
:func:`merge_chrome_traces`, which also shifts traces written against another base). A profile
without ``epoch_ns`` (saved by an older fxprof) starts at 0.

Device spans are placed at their run's host start plus their offset on the stream from the
run's first event, so host and device tracks line up per run but not to the microsecond.
"""

from __future__ import annotations

import json
import os
import time
from typing import TYPE_CHECKING, Any, Sequence

from .io import atomic_write
from .runs import parse_runs, select_runs

if TYPE_CHECKING:
    from .profile import Profile

__all__ = ["chrome_trace_events", "write_chrome_trace", "merge_chrome_traces", "epoch_ns", "kineto_base_ns"]

_PID = 1
_HOST_TID = 1
_DEVICE_TID = 2
#: Kineto's ChromeTraceBaseTime: the epoch rounded down to a multiple of this many seconds
KINETO_BASE_INTERVAL_S = 7889238


def kineto_base_ns(epoch_ns: int) -> int:
    """The ``baseTimeNanoseconds`` torch.profiler writes for a trace taken at ``epoch_ns``."""
    interval = KINETO_BASE_INTERVAL_S * 1_000_000_000
    return (int(epoch_ns) // interval) * interval


def epoch_ns(timer: Any, host_ns: int, tries: int = 5) -> int:
    """The Unix-epoch time (ns, ``time.time_ns()``'s clock, which Kineto uses) of a reading
    ``host_ns`` of ``timer.host_ns()``. The offset between the two clocks is read ``tries``
    times, and the reading pair with the shortest gap is kept."""
    best = None
    for _ in range(max(tries, 1)):
        a = timer.host_ns()
        wall = time.time_ns()
        b = timer.host_ns()
        if best is None or b - a < best[0]:
            best = (b - a, wall - (a + b) // 2)
    return int(host_ns) + best[1]


def chrome_trace_events(profile: "Profile", runs: Any = None) -> list[dict[str, Any]]:
    """The trace events of a profile: metadata, then one span per node per chosen run per track.

    Args:
        runs: which timed runs: None or ``"all"``, ``"median"`` (the run with the median total),
            ``"first:N"``, ``"last:N"``, ``"0-4"``, ``"0,5,9"``, an int or a list of ints.
    """
    meta = profile.meta
    if meta.get("mode") == "isolated":
        raise ValueError(
            "an isolated-mode profile has no timeline (each node was re-run on its own); "
            "profile with mode='timed' for a Chrome trace"
        )
    device_track = meta.get("timer") in ("cuda", "sync", "kernel")
    info = {n.name: n for n in profile.nodes}
    anatomy = profile.anatomy
    facts = {node: _facts(row) for node, row in anatomy.iterrows()}
    offset_us = _offset_us(meta)
    events: list[dict[str, Any]] = [
        {"ph": "M", "name": "process_name", "pid": _PID, "tid": 0, "args": {"name": f"fxprof: {meta.get('model', 'model')}"}},
        {"ph": "M", "name": "thread_name", "pid": _PID, "tid": _HOST_TID, "args": {"name": "fxprof host"}},
    ]
    if device_track:
        events.append({"ph": "M", "name": "thread_name", "pid": _PID, "tid": _DEVICE_TID, "args": {"name": f"fxprof device ({meta.get('device', 'cuda')})"}})
    runs_table = profile.runs
    chosen = set(select_runs(parse_runs(runs), runs_table["run"].tolist(), runs_table["total_ms"].tolist()))
    run_start = runs_table.set_index("run")["start_ms"]
    for row in runs_table.itertuples(index=False):
        if row.run in chosen:
            events.append(_span(f"run {row.run}", "run", row.start_ms, row.host_ms, _HOST_TID, {"run": int(row.run)}, offset_us))
    samples = profile.samples
    samples = samples[samples["run"].isin(chosen)]
    for row in samples.itertuples(index=False):
        node = info[row.node]
        args = {"run": int(row.run), "kind": node.kind, "scope": node.scope, "op": node.op, "target": node.target}
        if node.module_type:
            args["module_type"] = node.module_type
        if node.range:
            args["range"] = node.range
        if node.graph:
            args["graph"] = node.graph
        args.update(facts.get(row.node, {}))
        base = run_start[row.run]
        if device_track:
            events.append(_span(row.node, node.kind, base + row.host_start_ms, row.host_ms, _HOST_TID, args, offset_us))
            events.append(_span(row.node, node.kind, base + row.start_ms, row.time_ms, _DEVICE_TID, args, offset_us))
        else:
            events.append(_span(row.node, node.kind, base + row.start_ms, row.time_ms, _HOST_TID, args, offset_us))
    return events


def _offset_us(meta: dict[str, Any]) -> float:
    """Microseconds from the trace's base to the first timed run's start (0 without epoch)."""
    epoch = meta.get("epoch_ns")
    if not isinstance(epoch, int) or isinstance(epoch, bool):
        return 0.0
    return (epoch - kineto_base_ns(epoch)) / 1000.0


def _facts(row: Any) -> dict[str, Any]:
    """A node's shapes, dtype and FLOPs, for the span's args (only what was measured)."""
    out: dict[str, Any] = {}
    for key in ("input_shapes", "output_shape", "dtype"):
        value = row.get(key, "")
        if isinstance(value, str) and value:
            out[key] = value
    flops = row.get("flops")
    try:
        if flops is not None and not _isna(flops):
            out["flops"] = int(flops)
    except (TypeError, ValueError):
        pass
    return out


def _isna(value: Any) -> bool:
    try:
        return bool(value != value) or value is None or str(value) == "<NA>"
    except (TypeError, ValueError):
        return str(value) == "<NA>"


def _span(name: str, cat: str, start_ms: float, dur_ms: float, tid: int, args: dict[str, Any], offset_us: float) -> dict[str, Any]:
    return {
        "name": name,
        "cat": cat or "node",
        "ph": "X",
        "ts": round(offset_us + start_ms * 1000.0, 3),
        "dur": round(max(dur_ms, 0.0) * 1000.0, 3),
        "pid": _PID,
        "tid": tid,
        "args": args,
    }


def trace_document(profile: "Profile", runs: Any = None) -> dict[str, Any]:
    """The whole trace JSON document (events, display unit, the base, what was measured)."""
    document: dict[str, Any] = {
        "traceEvents": chrome_trace_events(profile, runs=runs),
        "displayTimeUnit": "ms",
        "otherData": {k: v for k, v in profile.meta.items() if isinstance(v, (str, int, float, bool))},
    }
    epoch = profile.meta.get("epoch_ns")
    if isinstance(epoch, int) and not isinstance(epoch, bool):
        document["baseTimeNanoseconds"] = kineto_base_ns(epoch)
    return document


def write_chrome_trace(profile: "Profile", path: str | os.PathLike, runs: Any = None) -> None:
    """Write the profile as a Chrome trace JSON file, atomically (see :func:`chrome_trace_events`)."""
    document = trace_document(profile, runs=runs)
    atomic_write(path, lambda handle: json.dump(document, handle))


def merge_chrome_traces(paths: Sequence[str | os.PathLike], out: str | os.PathLike) -> None:
    """Write one trace holding the events of ``paths`` (fxprof's and torch.profiler's), each
    shifted onto the earliest ``baseTimeNanoseconds`` among them, so they open together in
    Perfetto. A trace without a base is taken as it is."""
    documents = []
    for path in paths:
        with open(path, encoding="utf-8") as handle:
            documents.append(json.load(handle))
    bases = [d.get("baseTimeNanoseconds") for d in documents if isinstance(d.get("baseTimeNanoseconds"), int)]
    base = min(bases) if bases else None
    events: list[dict[str, Any]] = []
    for d in documents:
        shift = (d["baseTimeNanoseconds"] - base) / 1000.0 if base is not None and isinstance(d.get("baseTimeNanoseconds"), int) else 0.0
        for e in d.get("traceEvents", []):
            if shift and "ts" in e:
                e = {**e, "ts": e["ts"] + shift}
            events.append(e)
    merged: dict[str, Any] = {"traceEvents": events, "displayTimeUnit": "ms"}
    if base is not None:
        merged["baseTimeNanoseconds"] = base
    atomic_write(out, lambda handle: json.dump(merged, handle))
