"""Chrome trace export: every node of every run as a span, viewable in Perfetto.

The Trace Event Format (the JSON that chrome://tracing and https://ui.perfetto.dev open) takes
complete events (``"ph": "X"``) with a start ``ts`` and a duration ``dur`` in microseconds.
fxprof writes one such span per node per timed run, on a host track (host clock) and, with
the CUDA timers, a device track (stream time). Runs are placed at their host start times; a
device span is placed at its run's host start plus its offset on the stream from the run's
first event, so host and device tracks line up per run but not to the microsecond.
"""

from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING, Any

from .io import atomic_write

if TYPE_CHECKING:
    from .profile import Profile

__all__ = ["chrome_trace_events", "write_chrome_trace"]

_PID = 1
_HOST_TID = 1
_DEVICE_TID = 2


def chrome_trace_events(profile: "Profile") -> list[dict[str, Any]]:
    """The trace events of a profile: metadata, then one span per node per run per track."""
    meta = profile.meta
    if meta.get("mode") == "isolated":
        raise ValueError(
            "an isolated-mode profile has no timeline (each node was re-run on its own); "
            "profile with mode='timed' for a Chrome trace"
        )
    if profile.ranks:  # torch.distributed ranks: one trace process per rank
        from .distributed import trace_events

        return trace_events(profile)
    device_track = meta.get("timer") in ("cuda", "sync", "kernel")
    info = {n.name: n for n in profile.nodes}
    events: list[dict[str, Any]] = [
        {"ph": "M", "name": "process_name", "pid": _PID, "tid": 0, "args": {"name": f"fxprof: {meta.get('model', 'model')}"}},
        {"ph": "M", "name": "thread_name", "pid": _PID, "tid": _HOST_TID, "args": {"name": "host"}},
    ]
    if device_track:
        events.append({"ph": "M", "name": "thread_name", "pid": _PID, "tid": _DEVICE_TID, "args": {"name": f"device ({meta.get('device', 'cuda')})"}})
    runs = profile.runs.set_index("run")
    run_start = runs["start_ms"]
    for run, row in runs.iterrows():
        events.append(_span(f"run {run}", "run", row["start_ms"], row["host_ms"], _HOST_TID, {"run": int(run)}))
    for row in profile.samples.itertuples(index=False):
        node = info[row.node]
        args = {"run": int(row.run), "op": node.op, "target": node.target, "kind": node.kind, "scope": node.scope}
        if node.range:
            args["range"] = node.range
        base = run_start[row.run]
        if device_track:
            events.append(_span(row.node, node.kind, base + row.host_start_ms, row.host_ms, _HOST_TID, args))
            events.append(_span(row.node, node.kind, base + row.start_ms, row.time_ms, _DEVICE_TID, args))
        else:
            events.append(_span(row.node, node.kind, base + row.start_ms, row.time_ms, _HOST_TID, args))
    return events


def _span(name: str, cat: str, start_ms: float, dur_ms: float, tid: int, args: dict[str, Any]) -> dict[str, Any]:
    return {
        "name": name,
        "cat": cat or "node",
        "ph": "X",
        "ts": round(start_ms * 1000.0, 3),
        "dur": round(max(dur_ms, 0.0) * 1000.0, 3),
        "pid": _PID,
        "tid": tid,
        "args": args,
    }


def write_chrome_trace(profile: "Profile", path: str | os.PathLike) -> None:
    """Write the profile as a Chrome trace JSON file, atomically."""
    document = {
        "traceEvents": chrome_trace_events(profile),
        "displayTimeUnit": "ms",
        "otherData": {k: v for k, v in profile.meta.items() if isinstance(v, (str, int, float, bool))},
    }
    atomic_write(path, lambda handle: json.dump(document, handle))
