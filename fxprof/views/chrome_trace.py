"""Chrome trace export: nodes of representative runs (or of any runs) as spans, on torch.profiler's clock.

The Trace Event Format (the JSON that chrome://tracing and https://ui.perfetto.dev open) takes
complete events (``"ph": "X"``) with a start ``ts`` and a duration ``dur`` in microseconds.
fxprof writes one such span per node per chosen run, on a host track (host clock) and, with
the CUDA timers, a device track (stream time), plus one span per chosen run. Each node span's
``args`` hold the node's kind, scope, module type, shapes and FLOPs (what the anatomy pass measured).

Timestamps follow torch.profiler (Kineto): ``ts`` is microseconds of the Unix-epoch wall clock
counted from ``baseTimeNanoseconds``, which Kineto sets to the start of the current 7889238 s
("three month") interval and writes at the top of its JSON. fxprof computes the same base and
places its runs at the wall-clock time they ran (``meta["epoch_ns"]``: the first timed run's
start, from the host clock's offset to ``time.time_ns()``), so a torch.profiler trace of the
same process lines up with an fxprof trace: concatenate their ``traceEvents`` (or use
:func:`merge_chrome_traces`, which also shifts traces written against another base). A profile
without ``epoch_ns`` (saved by an older fxprof) starts at 0. A device span is placed at its
run's host start plus its offset on the stream from the run's first event, so host and device
tracks line up per run but not to the microsecond.

Which runs (:mod:`fxprof.core.runs`): by default the **fastest**, the **median** and the **slowest**
run by whole-run time, each labelled so in its run span; a trace of every run of a long profile
is mostly repetition and too big for the viewers. ``runs="all"``, ``"median"``, ``"first:N"``,
``"last:N"``, ``"0-4"``, ``"0,5,9"`` or a list of run numbers choose others. The file is written
from the sample columns with one string template per node, never a dict per event.
"""

from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING, Any, Iterable, Iterator, Sequence, Union

import numpy as np

from ..core.runs import parse_runs, run_labels
from ..io import atomic_write
from ..vocab import CUDA_TIMERS

if TYPE_CHECKING:
    from ..core.profile import Profile

__all__ = ["chrome_trace_events", "write_chrome_trace", "trace_runs", "merge_chrome_traces", "kineto_base_ns"]

_PID = 1
_HOST_TID = 1
_DEVICE_TID = 2
#: Kineto's ChromeTraceBaseTime: the epoch rounded down to a multiple of this many seconds
KINETO_BASE_INTERVAL_S = 7889238
Runs = Union[str, int, Iterable[int], None]


def kineto_base_ns(epoch_ns: int) -> int:
    """The ``baseTimeNanoseconds`` torch.profiler writes for a trace taken at ``epoch_ns``."""
    interval = KINETO_BASE_INTERVAL_S * 1_000_000_000
    return (int(epoch_ns) // interval) * interval


def trace_runs(profile: "Profile", runs: Runs = "representative") -> dict[int, str]:
    """The runs a trace shows, in run order, each with its label (``"fastest"``, ``"median"``,
    ``"slowest"``, joined by ``/`` when one run is several; ``""`` for runs picked by number or
    position). ``runs``: see :func:`fxprof.core.runs.parse_runs` (None is ``"representative"``)."""
    table = profile.runs
    # runs are 0..n-1 (checked on load): a range past them is refused before it is expanded
    numbers = table["run"].tolist()
    # run numbers past the last one are refused before a range is expanded; one rank's runs of a
    # gathered profile keep their numbers in the whole profile, so the bound is the largest
    limit = int(max(numbers)) + 1 if numbers else 0
    return run_labels(parse_runs(runs, limit=limit), numbers, table["total_ms"].to_numpy(dtype=np.float64).tolist())


def _offset_us(meta: dict[str, Any]) -> float:
    """Microseconds from the trace's base to the first timed run's start (0 without epoch)."""
    epoch = meta.get("epoch_ns")
    if not isinstance(epoch, int) or isinstance(epoch, bool):
        return 0.0
    return (epoch - kineto_base_ns(epoch)) / 1000.0


def _base_ns(meta: dict[str, Any]) -> int | None:
    epoch = meta.get("epoch_ns")
    return kineto_base_ns(epoch) if isinstance(epoch, int) and not isinstance(epoch, bool) else None


def _check_timeline(profile: "Profile") -> None:
    if profile.is_isolated:
        raise ValueError(
            "an isolated-mode profile has no timeline (each node was re-run on its own); "
            "profile with mode='timed' for a Chrome trace"
        )


class _Spans:
    """The spans of the chosen runs as columns: node code, run, track, start and duration (ms)."""

    def __init__(self, profile: "Profile", runs: Runs):
        _check_timeline(profile)
        meta = profile.meta
        self.device_track = meta.get("timer") in CUDA_TIMERS
        self.labels = trace_runs(profile, runs)
        offset_ms = _offset_us(meta) / 1000.0
        table = profile.runs
        columns = profile.columns
        keep = np.isin(columns.run, np.fromiter(self.labels, dtype=np.int64, count=len(self.labels)))
        run = columns.run[keep]
        # each run's host start, looked up by run number
        run_numbers = table["run"].to_numpy(dtype=np.int64)
        base_of = dict(zip(run_numbers.tolist(), table["start_ms"].to_numpy(dtype=np.float64).tolist()))
        base = np.asarray([base_of.get(int(r), np.nan) for r in range(int(run.max()) + 1)] if len(run) else [], dtype=np.float64)
        base = (base[run] if len(run) else np.zeros(0)) + offset_ms
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
        self.run_rows = [(int(r), float(s) + offset_ms, float(h)) for r, s, h in table[["run", "start_ms", "host_ms"]].itertuples(index=False) if int(r) in self.labels]

    def run_name(self, run: int) -> str:
        label = self.labels.get(run, "")
        return f"run {run} ({label})" if label else f"run {run}"


def _metadata_events(profile: "Profile", device_track: bool) -> list[dict[str, Any]]:
    meta = profile.meta
    events: list[dict[str, Any]] = [
        {"ph": "M", "name": "process_name", "pid": _PID, "tid": 0, "args": {"name": f"fxprof: {meta.get('model', 'model')}"}},
        {"ph": "M", "name": "thread_name", "pid": _PID, "tid": _HOST_TID, "args": {"name": "fxprof host"}},
    ]
    if device_track:
        events.append({"ph": "M", "name": "thread_name", "pid": _PID, "tid": _DEVICE_TID, "args": {"name": f"fxprof device ({meta.get('device', 'cuda')})"}})
    return events


def _node_args(profile: "Profile") -> list[dict[str, Any]]:
    """Each node's span args: what it is, where it sits, and what the anatomy pass measured."""
    facts = _facts(profile.anatomy)
    out = []
    for n in profile.nodes:
        args = {"op": n.op, "target": n.target, "kind": n.kind, "scope": n.scope}
        if n.module_type:
            args["module_type"] = n.module_type
        if n.range:
            args["range"] = n.range
        if n.graph:
            args["graph"] = n.graph
        args.update(facts.get(n.name, {}))
        if n.phase != "forward":  # a training step: which phase, and what a backward node differentiates
            args["phase"] = n.phase
            if n.forward_node:
                args["forward_node"] = n.forward_node
        out.append(args)
    return out


def _facts(anatomy: Any) -> dict[str, dict[str, Any]]:
    """Per node: its shapes, dtype and FLOPs, for the span's args (only what was measured).
    Read column by column: a row at a time is slow for 10,000 nodes."""
    facts: dict[str, dict[str, Any]] = {str(node): {} for node in anatomy.index}
    for key in ("input_shapes", "output_shape", "dtype"):
        if key in anatomy.columns:
            for node, value in zip(anatomy.index, anatomy[key].tolist()):
                if isinstance(value, str) and value:
                    facts[str(node)][key] = value
    if "flops" in anatomy.columns:
        flops = anatomy["flops"]
        for node, value in zip(anatomy.index[flops.notna().to_numpy()], flops.dropna().tolist()):
            facts[str(node)]["flops"] = int(value)
    return facts


def chrome_trace_events(profile: "Profile", runs: Runs = "representative") -> list[dict[str, Any]]:
    """The trace events of a profile: metadata, one span per chosen run, then one span per node
    per chosen run per track (see :func:`trace_runs` for ``runs``)."""
    if len(profile.ranks) > 1:  # torch.distributed ranks: one trace process per rank

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
        "ts": float(np.round(start_ms * 1000.0, 3)),  # as the file writer rounds: the same numbers
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
        document: dict[str, Any] = {"traceEvents": chrome_trace_events(profile, runs), "displayTimeUnit": "ms",
                    "otherData": {k: v for k, v in profile.meta.items() if isinstance(v, (str, int, float, bool))}}
        if _base_ns(profile.meta) is not None:
            document["baseTimeNanoseconds"] = _base_ns(profile.meta)
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
        base = _base_ns(profile.meta)
        tail = f',"baseTimeNanoseconds":{base}' if base is not None else ""
        handle.write(f'\n],"displayTimeUnit":"ms"{tail},"otherData":{json.dumps(other, default=str)}}}')

    atomic_write(path, write)


def merge_chrome_traces(paths: Sequence[str | os.PathLike], out: str | os.PathLike) -> None:
    """Write one trace holding the events of ``paths`` (fxprof's and torch.profiler's), each
    shifted onto the earliest ``baseTimeNanoseconds`` among them, so they open together in
    Perfetto. A trace without a base is taken as it is. A file that is not a trace is refused,
    by name, before anything is written."""
    documents = []
    for path in paths:
        try:
            with open(path, encoding="utf-8") as handle:
                document = json.load(handle)
        except (OSError, ValueError) as exc:
            raise ValueError(f"cannot read the trace {os.fspath(path)!r}: {exc}") from exc
        if not isinstance(document, dict) or not isinstance(document.get("traceEvents"), list):
            raise ValueError(f"{os.fspath(path)!r} is not a Chrome trace (no traceEvents list)")
        documents.append(document)
    bases = [b for b in (d.get("baseTimeNanoseconds") for d in documents) if isinstance(b, int)]
    base = min(bases) if bases else None
    events: list[dict[str, Any]] = []
    for d in documents:
        own = d.get("baseTimeNanoseconds")
        shift = (own - base) / 1000.0 if base is not None and isinstance(own, int) else 0.0
        for e in d["traceEvents"]:
            if shift and isinstance(e, dict) and "ts" in e:
                e = {**e, "ts": e["ts"] + shift}
            events.append(e)
    merged: dict[str, Any] = {"traceEvents": events, "displayTimeUnit": "ms"}
    if base is not None:
        merged["baseTimeNanoseconds"] = base
    atomic_write(out, lambda handle: json.dump(merged, handle))


def trace_events(profile: "Profile", runs: Any = "representative") -> list[dict[str, Any]]:
    """Chrome trace events of a profile with ranks: one trace process per rank (pid rank + 1),
    each with the runs ``runs`` picks among that rank's (see :func:`fxprof.views.chrome_trace.trace_runs`).
    Runs named by number are each rank's own run numbers (``rank_run``: 0 to iters - 1 on every
    rank), as under ``torchrun`` every rank counted them.

    Each rank's runs start at its own first run's start; the barrier before that run lines the
    ranks up to within the barrier skew shown in the header.
    """
    from ..core.rankmerge import rank_profile

    selection = parse_runs(runs)
    events: list[dict[str, Any]] = []
    for rank in profile.ranks:
        one = rank_profile(profile, rank)
        chosen: Any = runs
        if selection[0] == "list":  # the rank's own run numbers -> this profile's run numbers
            mine = profile.runs[profile.runs["rank"] == rank]
            own = dict(zip(mine["rank_run"].astype(int), mine["run"].astype(int)))
            missing = [r for r in selection[1] if r not in own]
            if missing:
                raise ValueError(f"rank {rank} has no run(s) {', '.join(map(str, missing))}; its runs are 0..{len(own) - 1}")
            chosen = [own[r] for r in selection[1]]
        for event in chrome_trace_events(one, chosen):
            event = {**event, "pid": rank + 1}
            if event.get("ph") == "M" and event.get("name") == "process_name":
                event["args"] = {"name": f"fxprof: {profile.meta.get('model', 'model')} rank {rank}"}
                events.append(event)
                events.append({"ph": "M", "name": "process_sort_index", "pid": rank + 1, "tid": 0, "args": {"sort_index": rank}})
                continue
            events.append(event)
    return events
