"""Memory per kernel in compiled mode (issue 34 item 4): one extra, untimed run of the compiled
model under ``torch.profiler(profile_memory=True)``, its allocations charged to the rows.

The memory pass of eager profiles (:mod:`fxprof.measure.passes.memory`) places each allocation in the
``fxprof::<node>`` range it happens in. A compiled program has no node ranges: its rows are the
kernels inductor generated (their profiler ranges, or an extern op's ``aten::`` range, as the
timed runs see them: :func:`fxprof.measure.compiled.spans.spans_from_events`), each graph's
``compiled_overhead``, the graph-break rows and ``compiled_entry``. Inductor's generated
``call()`` allocates a kernel's buffers *between* kernels (``buf0 = empty_strided_cpu(...)``
just before the kernel that writes it) and frees them between kernels too (``del buf0`` after
the last kernel reading it). So the rule, per allocation, by where it happens:

- inside a kernel's range: that kernel (a library op's own output and workspace);
- inside a graph's call but between kernels: the **next kernel of that call** (the buffer it
  writes); after the call's last kernel: the graph's ``compiled_overhead`` row;
- inside a compiled region, outside its call (guards, AOT wrappers, the input/output
  handling): the graph's ``compiled_overhead`` row; after the call, when the graph ends in a
  graph break: the break's row (the eager code between graphs);
- outside every compiled region: ``compiled_entry``.

Frees are placed by time only: a free between kernels (the wrapper's ``del`` after a buffer's
last use) lowers no row's delta, as the interpreter's frees after a node's last use do in eager
mode. The columns then mean what they mean in eager mode, per row and run:

``mem_delta_bytes``  bytes charged to the row and still held when it ends, minus the bytes of
                     older allocations freed inside its range;
``mem_temp_bytes``   bytes charged to the row and freed before it ends (a library op's
                     workspace);
``mem_peak_bytes``   the highest the bytes charged to the row held at once (its buffers plus its
                     workspaces);
``mem_live_bytes``   everything the run holds after the row, once the buffers that died with it
                     are freed: parameters, buffers and inputs (each storage once) and what the
                     run allocated and still holds.

A row that runs several times in a run (a graph called twice) adds up its deltas and
temporaries, keeps its highest peak and its last live bytes. The run's peak, the row running
then and the breakdown at that moment go to ``meta["memory"]`` as for eager profiles
(``profile.memory``).
"""

from __future__ import annotations

import bisect
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from ...core.breaks import BREAK, OVERHEAD
from ...core.compiled import UNMATCHED, Span, charge_spans
from ..device.bridge import UNKNOWN_BLOCK_LINE, Event, events_from_kineto, kineto_quiet, profiler_running
from ..passes.memory import allocations, device_keys, held_breakdown, held_bytes
from .spans import CALL_RANGE, spans_from_events

__all__ = ["CompiledMemory", "record_memory_run", "charge_memory", "with_memory", "memory_devices", "Charged"]

_REGION_PREFIX = "Torch-Compiled Region: "
SKIPPED_NOTE = ("memory pass skipped: torch.profiler was already running around fxprof.profile (profilers do not "
                "nest); the mem_* columns are empty")


@dataclass
class CompiledMemory:
    """What the memory run recorded: its host events (for the kernel spans), its allocations
    ``(time ns, address, signed bytes)`` on the watched devices, and the bytes held before it."""

    events: list[Event]
    allocs: list[tuple[int, int, int]]
    held: dict[str, int]
    on_cuda: bool
    seconds: float = 0.0


def record_memory_run(call: Callable[[tuple | None], Any], sync: Callable[[], None], fresh: Callable[[], tuple],
                      root: torch.nn.Module, devices: list[torch.device], meta: dict[str, Any],
                      run_range: str, outer: bool = False) -> CompiledMemory | None:
    """One untimed call of the compiled model under ``torch.profiler(profile_memory=True)``,
    inside a ``run_range`` range (its inputs cloned before it, outside the range). None, with a
    note in ``meta["notes"]``, under the caller's own ``torch.profiler`` (profilers do not nest;
    ``outer``: one was running when fxprof began, before compiled mode's own profiler ended it)."""
    from torch.profiler import ProfilerActivity, profile, record_function

    if outer or profiler_running():
        meta["notes"] = meta.get("notes", []) + [SKIPPED_NOTE]
        return None
    on_cuda = any(d.type == "cuda" for d in devices)
    keys = device_keys(devices)
    inputs = fresh()
    held = held_bytes(root, inputs, None)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if on_cuda else [])
    t0 = time.perf_counter()
    prof = profile(activities=activities, profile_memory=True)
    with kineto_quiet(UNKNOWN_BLOCK_LINE):
        prof.__enter__()
        try:
            with record_function(run_range):
                call(inputs)
                sync()
        finally:
            prof.__exit__(None, None, None)
    results = prof.profiler.kineto_results
    events = [e for e in events_from_kineto(results.events()) if e.kind != "memory"]
    allocs = allocations(results.experimental_event_tree(), keys)
    return CompiledMemory(events, allocs, held, on_cuda, time.perf_counter() - t0)


@dataclass
class _Item:
    """One occurrence of a row in the run: a kernel call, or a row's share of a region."""

    row: str
    start: int
    end: int
    order: int  # sort key among items that start together
    first: int | None = None  # the earliest allocation charged to it


@dataclass
class Charged:
    """The per-row columns and the run's peak (``summary``, as ``meta["memory"]``)."""

    records: dict[str, dict[str, int]] = field(default_factory=dict)
    summary: dict[str, Any] = field(default_factory=dict)


def _host(events: list[Event], r0: int, r1: int, thread: int) -> list[Event]:
    return sorted((e for e in events if e.device_type == "CPU" and e.thread == thread and e.kind in ("other", "range", "runtime")
                   and r0 <= e.start_ns and e.end_ns <= r1), key=lambda e: (e.start_ns, -e.end_ns))


def charge_memory(kernel_spans: list[tuple[str, int, int]], calls: list[tuple[str, int, int]],
                  regions: list[tuple[str, int, int]], run: tuple[int, int], allocs: list[tuple[int, int, int]],
                  held: dict[str, int], overhead_row: dict[str, str], break_row: dict[str, str],
                  entry_row: str | None) -> Charged:
    """The rule of the module's doc, as a pure function (unit-tested without a compile).

    ``kernel_spans``: ``(row, start, end)`` of every kernel call in the run; ``calls`` and
    ``regions``: ``(graph, start, end)`` of each graph's call and compiled region; ``run``: the
    run's range; ``allocs``: ``(time, address, signed bytes)`` sorted by time (frees negative);
    ``held``: bytes held before the run by category; ``overhead_row``/``break_row``: the row of
    each graph's overhead and of its break (graphs that end in one); ``entry_row``: the row of
    the time outside every region (None: such allocations count to no row)."""
    r0, r1 = run
    kspans = sorted(kernel_spans, key=lambda k: k[1])
    kstarts = [k[1] for k in kspans]
    items: list[_Item] = [_Item(row, s, e, i) for i, (row, s, e) in enumerate(kspans)]
    shared: dict[tuple[str, int], _Item] = {}  # (row, region index) -> its item

    def share(row: str, key: int, start: int, end: int) -> _Item:
        item = shared.get((row, key))
        if item is None:
            item = shared[(row, key)] = _Item(row, start, end, len(kspans) + len(shared))
            items.append(item)
        return item

    for k, (graph, g0, g1) in enumerate(regions):  # every overhead and break row that ran gets its columns
        for rows in (overhead_row, break_row):
            if rows.get(graph):
                share(rows[graph], k, g0, g1)
    if entry_row:
        share(entry_row, len(regions), r0, r1)

    def owner(t: int) -> _Item | None:
        i = bisect.bisect_right(kstarts, t) - 1
        if i >= 0 and t <= kspans[i][2]:
            return items[i]
        holding = [c for c in calls if c[1] <= t <= c[2]]
        if holding:
            graph, c0, c1 = max(holding, key=lambda c: c[1])
            j = bisect.bisect_left(kstarts, t)
            if j < len(kspans) and kspans[j][1] <= c1:
                return items[j]  # a buffer the next kernel of this call writes
            row = overhead_row.get(graph)
            return share(row, -1 - calls.index((graph, c0, c1)), c0, c1) if row else None
        inside = [(k, g) for k, g in enumerate(regions) if g[1] <= t <= g[2]]
        if inside:
            k, (graph, g0, g1) = max(inside, key=lambda kg: kg[1][1])
            after_call = any(c[0] == graph and g0 <= c[1] and c[2] <= t for c in calls)
            row = break_row.get(graph) if after_call and graph in break_row else overhead_row.get(graph)
            return share(row, k, g0, g1) if row else None
        return share(entry_row, len(regions), r0, r1) if entry_row else None

    @dataclass
    class _A:
        size: int
        made: int
        item: _Item | None
        freed: int | None = None

    alive: dict[int, _A] = {}
    made: list[_A] = []
    level, best, best_t = 0, 0, r0
    levels: list[tuple[int, int]] = []  # (time, level after the event)
    freed_inside: dict[int, int] = {}  # id(item) -> bytes of older allocations freed inside its range
    for t, ptr, size in allocs:
        if t < r0 or t > r1:
            continue
        if size > 0:
            old = alive.pop(ptr, None)
            if old is not None:  # an address reused without a free we saw: the old block is gone
                old.freed = t
                level -= old.size
            item = owner(t)
            a = _A(size, t, item)
            if item is not None and (item.first is None or t < item.first):
                item.first = t
            alive[ptr] = a
            made.append(a)
            level += size
        else:
            a = alive.pop(ptr, None)
            if a is None:
                continue  # allocated before the run: not followed
            a.freed = t
            level -= a.size
            i = bisect.bisect_right(kstarts, t) - 1
            if i >= 0 and t <= kspans[i][2] and a.item is not items[i]:
                freed_inside[id(items[i])] = freed_inside.get(id(items[i]), 0) + a.size
        levels.append((t, level))
        if level > best:
            best, best_t = level, t
    times = [lv[0] for lv in levels]

    def level_before(t: int) -> int:
        i = bisect.bisect_left(times, t) - 1
        return levels[i][1] if i >= 0 else 0

    def level_at(t: int) -> int:
        i = bisect.bisect_right(times, t) - 1
        return levels[i][1] if i >= 0 else 0

    base = sum(held.values())
    for item in items:  # an item's window opens with its first charged allocation
        item.start = min(item.start, item.first) if item.first is not None else item.start
    kernels_in_order = items[:len(kspans)]
    records: dict[str, dict[str, int]] = {}
    mine: dict[int, list[_A]] = {}
    for a in made:
        if a.item is not None:
            mine.setdefault(id(a.item), []).append(a)
    for idx, item in enumerate(items):
        own = mine.get(id(item), [])
        held_at_end = sum(a.size for a in own if a.freed is None or a.freed > item.end)
        temp = sum(a.size for a in own if a.freed is not None and a.freed <= item.end)
        changes = sorted([(a.made, a.size) for a in own] + [(a.freed, -a.size) for a in own
                                                              if a.freed is not None and a.freed <= item.end])
        peak = running = 0
        for _, d in changes:
            running += d
            peak = max(peak, running)
        if idx < len(kernels_in_order):
            nxt = kernels_in_order[idx + 1].start if idx + 1 < len(kernels_in_order) else None
            region_end = max((g[2] for g in regions if g[1] <= item.start <= g[2]), default=r1)
            cut = min(nxt, region_end) if nxt is not None else region_end
            live = level_before(cut) if nxt is not None and nxt <= region_end else level_at(cut)
        else:
            live = level_at(item.end)
        record = {"mem_delta_bytes": held_at_end - freed_inside.get(id(item), 0), "mem_temp_bytes": temp,
                  "mem_peak_bytes": peak, "mem_live_bytes": base + live}
        seen = records.get(item.row)
        if seen is None:
            records[item.row] = record
        else:
            seen["mem_delta_bytes"] += record["mem_delta_bytes"]
            seen["mem_temp_bytes"] += record["mem_temp_bytes"]
            seen["mem_peak_bytes"] = max(seen["mem_peak_bytes"], record["mem_peak_bytes"])
            if item.end >= seen.get("_end", -1):
                seen["mem_live_bytes"] = record["mem_live_bytes"]
        records[item.row]["_end"] = max(item.end, records[item.row].get("_end", -1))
    for r in records.values():
        r.pop("_end", None)
    summary: dict[str, Any] = {}
    if items:
        within = [it for it in items if it.start <= best_t <= it.end]
        if within:  # the innermost: a kernel over the region share that holds it
            at = min(within, key=lambda it: it.end - it.start)
        else:  # between rows: the kernel that ran last
            before = [it for it in kernels_in_order if it.start <= best_t] or kernels_in_order or items
            at = max(before, key=lambda it: it.start)
        breakdown = held_breakdown(held)
        for a in made:
            if a.made > best_t or (a.freed is not None and a.freed <= best_t):
                continue
            if a.item is at and a.freed is not None and a.freed <= at.end:
                breakdown["temporaries"] += a.size
            else:
                breakdown["activations"] += a.size
        summary = {"peak_bytes": base + best, "peak_node": at.row, "breakdown": breakdown, "held_bytes": base,
                   "covers": "one untimed run of the compiled model (allocator events charged to kernels, "
                             "docs/memory.md)"}
    return Charged(records, summary)


def _missing(value: Any) -> bool:
    import pandas as pd

    try:
        return bool(pd.isna(value))
    except (TypeError, ValueError):
        return False


def memory_devices(root: torch.nn.Module, args: tuple, kwargs: dict) -> list[torch.device]:
    """The devices whose allocator the pass watches: the CUDA devices the model and inputs are
    on, else the CPU."""
    from ..common.tree import tensors_in

    found = {t.device for t in [*root.parameters(), *root.buffers(), *tensors_in((args, kwargs))] if t.device.type == "cuda"}
    return sorted(found, key=lambda d: d.index or 0) or [torch.device("cpu")]


def with_memory(profile: Any, recorded: CompiledMemory | None, kernels: list[Any], run_range: str) -> Any:
    """``profile`` (compiled mode's, from :func:`fxprof.measure.compiled.mode._build`) with the
    memory columns of ``recorded`` and ``meta["memory"]``; as it was when nothing was recorded
    or nothing could be charged."""
    from ...core.profile import Profile

    if recorded is None:
        return profile
    events = recorded.events
    runs = sorted((e.start_ns, e.end_ns, e.thread) for e in events if e.name == run_range)
    if not runs:
        return profile
    r0, r1, thread = runs[0]
    spans, _ = spans_from_events(events, device=False)
    spans = [s for s in spans if not s.name.startswith("fxprof::")]
    charged, unmatched = charge_spans(kernels, spans)
    nodes = profile.nodes
    row_of = {k.graph + "|" + k.key: n.name for k, n in zip(kernels, nodes)}
    unmatched_row = {(n.graph, n.target): n.name for n in nodes if n.op == UNMATCHED}
    overhead_row = {n.graph: n.name for n in nodes if n.op == OVERHEAD and n.graph}
    entry = next((n.name for n in nodes if n.op == OVERHEAD and not n.graph), None)
    break_row: dict[str, str] = {}
    for n in nodes:
        if n.op == BREAK:
            for g in (n.origins or n.graph).split(","):
                break_row.setdefault(g, n.name)

    def interval(s: Span) -> tuple[int, int]:
        start = r0 + round(s.start_ms * 1e6)
        return start, start + round(s.duration_ms * 1e6)

    kernel_spans = [(row_of[key], *interval(s)) for key, s in charged if key in row_of]
    kernel_spans += [(unmatched_row[(s.graph, s.name)], *interval(s)) for s in unmatched if (s.graph, s.name) in unmatched_row]
    host = _host(events, r0, r1, thread)
    calls, regions = [], []
    for e in host:
        if e.name.startswith(_REGION_PREFIX):
            regions.append((e.name[len(_REGION_PREFIX):].split()[0], e.start_ns, e.end_ns))
    for e in host:
        if e.name.startswith(CALL_RANGE):
            holding = [g for g in regions if g[1] <= e.start_ns and e.end_ns <= g[2]]
            graph = max(holding, key=lambda g: g[1])[0] if holding else "0/0"
            calls.append((graph, e.start_ns, e.end_ns))
    done = charge_memory(kernel_spans, calls, regions, (r0, r1), recorded.allocs, recorded.held, overhead_row,
                         break_row, entry)
    if not done.records:
        return profile
    anatomy = profile.anatomy
    records = {name: {k: v for k, v in row.items() if not _missing(v)} for name, row in anatomy.to_dict("index").items()}
    for name, cols in done.records.items():
        records.setdefault(name, {}).update(cols)
    meta = dict(profile.meta)
    meta["memory"] = done.summary
    rebuilt = Profile(nodes, profile._columns, profile._runs, meta, records)
    rebuilt.keep_outliers = profile.keep_outliers
    return rebuilt
