"""Chrome trace export: nodes of representative runs (or of every run) as spans, viewable in Perfetto.

The Trace Event Format (the JSON that chrome://tracing and https://ui.perfetto.dev open) takes
complete events (``"ph": "X"``) with a start ``ts`` and a duration ``dur`` in microseconds.
fxprof writes one such span per node per chosen run, on a host track (host clock) and, with
the CUDA timers, a device track (stream time), plus one span per chosen run. Runs are placed at
their host start times; a device span is placed at its run's host start plus its offset on the
stream from the run's first event, so host and device tracks line up per run but not to the
microsecond.

Which runs: by default the **fastest**, the **median** and the **slowest** run by whole-run
time (``total_ms``; the median of an even count is the lower middle run), each labelled so in
its run span; a trace of every run of a long profile is mostly repetition and too big for the
viewers. ``runs="all"`` writes every run, ``runs=[0, 5]`` the runs named. The file is written
from the sample columns with one string template per node, never a dict per event.
"""

from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING, Any, Iterable, Iterator, Union

import numpy as np

from .io import atomic_write

if TYPE_CHECKING:
    from .profile import Profile

__all__ = ["chrome_trace_events", "write_chrome_trace", "trace_runs", "TRACE_RUNS"]

_PID = 1
_HOST_TID = 1
_DEVICE_TID = 2
#: the named run selections
TRACE_RUNS = ("representative", "all")
Runs = Union[str, Iterable[int]]


def trace_runs(profile: "Profile", runs: Runs = "representative") -> dict[int, str]:
    """The runs a trace shows, in run order, each with its label (``"fastest"``, ``"median"``,
    ``"slowest"``, joined by ``/`` when one run is several; ``""`` for runs named explicitly or
    ``runs="all"``)."""
    table = profile.runs
    known = table["run"].to_numpy()
    if isinstance(runs, str):
        if runs == "all":
            return {int(r): "" for r in known}
        if runs != "representative":
            raise ValueError(f"unknown runs={runs!r}; choose one of {', '.join(TRACE_RUNS)} or pass a list of run numbers")
        totals = table["total_ms"].to_numpy(dtype=np.float64)
        finite = np.flatnonzero(np.isfinite(totals))
        if not len(finite):
            return {int(r): "" for r in known}
        order = finite[np.argsort(totals[finite], kind="stable")]
        labels: dict[int, list[str]] = {}
        for label, position in (("fastest", 0), ("median", (len(order) - 1) // 2), ("slowest", len(order) - 1)):
            labels.setdefault(int(known[order[position]]), []).append(label)
        return {r: "/".join(labels[r]) for r in sorted(labels)}
    chosen = sorted({int(r) for r in runs})
    missing = sorted(set(chosen) - {int(r) for r in known})
    if missing:
        raise ValueError(f"the profile has no run(s) {missing[:5]}; its runs are 0 to {len(known) - 1}")
    return {r: "" for r in chosen}


def _check_timeline(profile: "Profile") -> None:
    if profile.meta.get("mode") == "isolated":
        raise ValueError(
            "an isolated-mode profile has no timeline (each node was re-run on its own); "
            "profile with mode='timed' for a Chrome trace"
        )


class _Spans:
    """The spans of the chosen runs as columns: node code, run, track, start and duration (ms)."""

    def __init__(self, profile: "Profile", runs: Runs):
        _check_timeline(profile)
        meta = profile.meta
        self.device_track = meta.get("timer") in ("cuda", "sync", "kernel")
        self.labels = trace_runs(profile, runs)
        table = profile.runs
        columns = profile._columns
        keep = np.isin(columns.run, np.fromiter(self.labels, dtype=np.int64, count=len(self.labels)))
        run = columns.run[keep]
        # each run's host start, looked up by run number
        run_numbers = table["run"].to_numpy(dtype=np.int64)
        base_of = dict(zip(run_numbers.tolist(), table["start_ms"].to_numpy(dtype=np.float64).tolist()))
        base = np.asarray([base_of.get(int(r), np.nan) for r in range(int(run.max()) + 1)] if len(run) else [], dtype=np.float64)
        base = base[run] if len(run) else np.zeros(0)
        node = columns.node[keep]
        if self.device_track:
            tracks = [(_HOST_TID, base + columns.host_start_ms[keep], columns.host_ms[keep]),
                      (_DEVICE_TID, base + columns.start_ms[keep], columns.time_ms[keep])]
        else:
            tracks = [(_HOST_TID, base + columns.start_ms[keep], columns.time_ms[keep])]
        # host and device span of a sample side by side, samples in recorded order
        self.node = np.repeat(node, len(tracks))
        self.run = np.repeat(run, len(tracks))
        self.tid = np.tile(np.asarray([t for t, _, _ in tracks]), len(node))
        self.start = np.column_stack([s for _, s, _ in tracks]).reshape(-1) if len(node) else np.zeros(0)
        self.dur = np.column_stack([d for _, _, d in tracks]).reshape(-1) if len(node) else np.zeros(0)
        finite = np.isfinite(self.start) & np.isfinite(self.dur)  # a sample without a time has no place
        self.node, self.run, self.tid, self.start, self.dur = (a[finite] for a in (self.node, self.run, self.tid, self.start, self.dur))
        self.run_rows = [(int(r), float(s), float(h)) for r, s, h in table[["run", "start_ms", "host_ms"]].itertuples(index=False) if int(r) in self.labels]

    def run_name(self, run: int) -> str:
        label = self.labels.get(run, "")
        return f"run {run} ({label})" if label else f"run {run}"


def _metadata_events(profile: "Profile", device_track: bool) -> list[dict[str, Any]]:
    meta = profile.meta
    events: list[dict[str, Any]] = [
        {"ph": "M", "name": "process_name", "pid": _PID, "tid": 0, "args": {"name": f"fxprof: {meta.get('model', 'model')}"}},
        {"ph": "M", "name": "thread_name", "pid": _PID, "tid": _HOST_TID, "args": {"name": "host"}},
    ]
    if device_track:
        events.append({"ph": "M", "name": "thread_name", "pid": _PID, "tid": _DEVICE_TID, "args": {"name": f"device ({meta.get('device', 'cuda')})"}})
    return events


def _node_args(profile: "Profile") -> list[dict[str, Any]]:
    out = []
    for n in profile.nodes:
        args = {"op": n.op, "target": n.target, "kind": n.kind, "scope": n.scope}
        if n.range:
            args["range"] = n.range
        if n.phase != "forward":  # a training step: which phase, and what a backward node differentiates
            args["phase"] = n.phase
            if n.forward_node:
                args["forward_node"] = n.forward_node
        out.append(args)
    return out


def chrome_trace_events(profile: "Profile", runs: Runs = "representative") -> list[dict[str, Any]]:
    """The trace events of a profile: metadata, one span per chosen run, then one span per node
    per chosen run per track (see :func:`trace_runs` for ``runs``)."""
    if len(profile.ranks) > 1:  # torch.distributed ranks: one trace process per rank
        from .distributed import trace_events

        return trace_events(profile, runs)
    spans = _Spans(profile, runs)
    events = _metadata_events(profile, spans.device_track)
    for run, start, host in spans.run_rows:
        events.append(_span(spans.run_name(run), "run", start, host, _HOST_TID, {"run": run}))
    node_args = _node_args(profile)
    for code, run, tid, start, dur in zip(spans.node.tolist(), spans.run.tolist(), spans.tid.tolist(), spans.start.tolist(), spans.dur.tolist()):
        node = profile.nodes[code]
        events.append(_span(node.name, node.kind, start, dur, tid, {"run": run, **node_args[code]}))
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


def _node_span_text(profile: "Profile", spans: _Spans) -> Iterator[str]:
    """The node spans as JSON text, one template per node: only run, ts and dur vary."""
    heads = [f'{{"name":{json.dumps(n.name)},"cat":{json.dumps(n.kind or "node")},"ph":"X","ts":' for n in profile.nodes]
    tails = [",".join(f"{json.dumps(k)}:{json.dumps(v)}" for k, v in args.items()) + "}}" for args in _node_args(profile)]
    ts = np.round(spans.start * 1000.0, 3).tolist()
    dur = np.round(np.maximum(spans.dur, 0.0) * 1000.0, 3).tolist()
    for code, run, tid, t, d in zip(spans.node.tolist(), spans.run.tolist(), spans.tid.tolist(), ts, dur):
        yield f'{heads[code]}{t!r},"dur":{d!r},"pid":{_PID},"tid":{tid},"args":{{"run":{run},{tails[code]}'


def write_chrome_trace(profile: "Profile", path: str | os.PathLike, runs: Runs = "representative") -> None:
    """Write the profile as a Chrome trace JSON file, atomically (``runs``: see :func:`trace_runs`)."""
    if len(profile.ranks) > 1:  # torch.distributed ranks: one trace process per rank
        document = {"traceEvents": chrome_trace_events(profile, runs), "displayTimeUnit": "ms",
                    "otherData": {k: v for k, v in profile.meta.items() if isinstance(v, (str, int, float, bool))}}
        return atomic_write(path, lambda handle: json.dump(document, handle))
    spans = _Spans(profile, runs)
    other = {k: v for k, v in profile.meta.items() if isinstance(v, (str, int, float, bool))}
    other["trace_runs"] = ", ".join(spans.run_name(r) for r in spans.labels)
    head = [json.dumps(e) for e in _metadata_events(profile, spans.device_track)]
    head += [json.dumps(_span(spans.run_name(run), "run", start, host, _HOST_TID, {"run": run})) for run, start, host in spans.run_rows]

    def write(handle: Any) -> None:
        handle.write('{"traceEvents":[\n')
        handle.write(",\n".join(head))
        batch: list[str] = []
        for text in _node_span_text(profile, spans):
            batch.append(text)
            if len(batch) == 65536:
                handle.write(",\n" + ",\n".join(batch))
                batch.clear()
        if batch:
            handle.write(",\n" + ",\n".join(batch))
        handle.write(f'\n],"displayTimeUnit":"ms","otherData":{json.dumps(other, default=str)}}}')

    atomic_write(path, write)
