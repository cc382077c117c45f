"""Graph breaks and the compiled program's own Python, read from dynamo and torch.profiler.

Two readings, no guesswork from wall-clock differences:

- **where and why** (:func:`break_site`, at compile time, in fxprof's backend): the graph
  dynamo hands over carries ``compile_subgraph_reason`` (what ``torch._dynamo.explain`` reads):
  whether the graph ends in a break, dynamo's reason and the user's stack at the break. The
  innermost frame is the source line; walking the stack down from the compiled frame's module
  through the ``forward`` of each child it inlined gives the module that holds the break.
- **how long** (:func:`frame_spans`, from each timed run's profiler events): torch records a
  ``TorchDynamo Cache Lookup`` range (the guards choosing compiled code) before every compiled
  frame it enters and a ``Torch-Compiled Region: i/j`` range around the frame's compiled code;
  inside, ``Pregraph bytecode``, ``AOTDispatcher Runtime Wrapper Prologue`` and ``## Call
  CompiledFxGraph ... ##`` (the kernels). A frame that ends in a break runs the unsupported
  code in Python after its graph's call and then calls the resume function: the next frame's
  cache lookup and region, nested inside. So, per region occurrence:

  - from the region's start to the end of its graph's call, and the region's top-level cache
    lookup: ``compiled_overhead`` of the graph (less the kernels, which are rows of their own);
  - from the end of the graph's call to the end of the region, less the regions nested in it:
    the break's Python and the resume (``graph_break``), when the graph ends in a break; else
    the graph's epilogue (``compiled_overhead``).

  Every moment of a top-level cache lookup and region is in exactly one row. What lies
  outside them in a run (``nn.Module.__call__`` of the compiled wrapper, dynamo's frame hook,
  fxprof's run range) is the row ``compiled_entry`` (``meta["compiled"]["outside_ms"]``), so
  on the CPU the rows add up to the profiled run.
"""

from __future__ import annotations

import os
import re
from typing import Any, Iterable, Mapping

from torch import fx, nn

from ...core.breaks import BreakSite, reason_of
from ...core.compiled import Span, common_scope
from ...core.nodes import NodeInfo
from ...vocab import OUTSIDE
from ..device.bridge import Event

__all__ = ["LOOKUP", "OVERHEAD_SPAN", "TAIL_SPAN", "OUTSIDE_SPAN", "FRAME_SPANS", "PART_PREFIX", "break_site", "reported_site",
           "frame_spans", "frame_nodes", "describe_breaks", "recompile_reason", "dynamo_counters"]

LOOKUP = "TorchDynamo Cache Lookup"
#: names of the spans :func:`frame_spans` makes (kept apart from kernel spans by name)
OVERHEAD_SPAN, TAIL_SPAN, OUTSIDE_SPAN = "fxprof::compiled_overhead", "fxprof::after_graph", "fxprof::outside_regions"
FRAME_SPANS = (OVERHEAD_SPAN, TAIL_SPAN, OUTSIDE_SPAN)
#: spans of the overhead's named parts: ``fxprof::part:TorchDynamo Cache Lookup``... (for meta, no row)
PART_PREFIX = "fxprof::part:"
_PARTS = ("Pregraph bytecode", "AOTDispatcher Runtime Wrapper Prologue", "AOTDispatcher Runtime Wrapper Epilogue")
#: a compiled region's range (dynamo), its graph's id captured
REGION = re.compile(r"Torch-Compiled Region: (\d+/\d+)")
#: the range of a compiled graph's call (inductor's generated ``call()``)
CALL_RANGE = "## Call CompiledFxGraph"
_REGION, _CALL = REGION, CALL_RANGE
_RESUME = re.compile(r"torch_dynamo_resume_in_(\w+?)_at_\d+")


def _forward_code(module: nn.Module) -> Any:
    return getattr(getattr(type(module), "forward", None), "__code__", None)


def _holds_line(code: Any, line: Any) -> bool:
    """Is source line ``line`` in the function ``code`` (two ``forward``s of one file differ)?"""
    try:
        lines = [n for _, _, n in code.co_lines() if n is not None]
    except AttributeError:  # pragma: no cover - Python without co_lines
        return True
    return not lines or line is None or min(code.co_firstlineno, *lines) <= int(line) <= max(lines)


def _holder(root: nn.Module, path: str, frame: Any, last_scope: str) -> str | None:
    """The module under ``path`` whose class's ``forward`` is ``frame``'s code (the shallowest;
    among several of one class, the one holding ``last_scope``, else the module holding them
    all), or None."""
    try:
        base = root.get_submodule(path) if path else root
    except AttributeError:
        return None
    found: list[str] = []
    for sub, module in base.named_modules():
        if not sub:
            continue
        code = _forward_code(module)
        if code is not None and code.co_name == frame.name and _holds_line(code, frame.lineno) \
                and os.path.abspath(code.co_filename) == os.path.abspath(frame.filename):
            found.append(f"{path}.{sub}" if path else sub)
    if not found:
        return None
    depth = min(p.count(".") for p in found)
    shallow = [p for p in found if p.count(".") == depth]
    holding = [p for p in shallow if last_scope == p or last_scope.startswith(p + ".")]
    if len(holding) == 1 or len(shallow) == 1:
        return (holding or shallow)[0]
    common = common_scope(shallow)  # one of several blocks of a class: the module holding them all
    return common if len(common) > len(path) else None


def break_site(graph: str, gm: fx.GraphModule, root: nn.Module, frame_scope: str,
               nodes: Mapping[str, NodeInfo]) -> BreakSite | None:
    """Where and why the graph ``gm`` ends in a graph break (dynamo's
    ``compile_subgraph_reason``), or None when it does not."""
    reason = getattr(gm, "compile_subgraph_reason", None)
    if reason is None or not getattr(reason, "graph_break", False):
        return None
    stack = list(getattr(reason, "user_stack", None) or [])
    text = str(getattr(reason, "reason", "") or "")
    if not stack:
        return BreakSite(graph, reason_of(text), text.strip().splitlines()[0] if text.strip() else "", "?", 0, "?", frame_scope)
    last_scope = next((n.scope for n in reversed(list(nodes.values())) if n.op not in ("placeholder", "output") and n.scope), "")
    scope = frame_scope
    for frame in stack[1:]:  # the functions dynamo inlined, down to the break
        inner = _holder(root, scope, frame, last_scope)
        if inner is not None:
            scope = inner
    where = stack[-1]
    resumed = _RESUME.fullmatch(where.name or "")
    detail = text.strip().splitlines()[0] if text.strip() else ""
    return BreakSite(graph=graph, reason=reason_of(text), detail=detail, file=where.filename, line=int(where.lineno or 0),
                     function=resumed.group(1) if resumed else where.name, scope=scope)


_REPORTED = re.compile(r"Graph break in user code at (.+):(\d+)")
_FRAME = re.compile(r'File "([^"]+)", line (\d+), in (\w+)')


def reported_site(graph: str, text: str, root: nn.Module) -> BreakSite | None:
    """A break site from dynamo's graph break report (the ``dynamo_graph_break_reason`` trace
    artifact): ``Graph break in user code at FILE:LINE``, ``Graph Break Reason: ...`` and the
    user's traceback, whose frames are walked from the root through the children's
    ``forward`` as in :func:`break_site`. For a frame compiled to no graph (frame ids from 0,
    the root's ``forward`` first). None when the text is not such a report."""
    found = _REPORTED.search(text)
    if not found:
        return None
    file, line = found.group(1), int(found.group(2))
    reason = text.split("Graph Break Reason:", 1)[-1].split("User code traceback:", 1)[0]
    reason = reason.split("Stack variable source attribution:", 1)[0]
    scope = ""
    tail = text.split("User code traceback:", 1)[-1]

    class _Frame:
        def __init__(self, filename: str, lineno: int, name: str):
            self.filename, self.lineno, self.name = filename, lineno, name

    for f in _FRAME.finditer(tail):
        inner = _holder(root, scope, _Frame(f.group(1), int(f.group(2)), f.group(3)), "")
        if inner is not None:
            scope = inner
    lines = [x.strip() for x in reason.strip().splitlines() if x.strip() and not x.startswith("Encountered graph break")]
    detail = next((x for x in lines if not x.startswith("Encountered graph break")), "")
    function = next((f.group(3) for f in _FRAME.finditer(tail) if f.group(1) == file and int(f.group(2)) == line), "?")
    resumed = _RESUME.fullmatch(function)
    return BreakSite(graph=graph, reason=reason_of(reason), detail=detail, file=file, line=line,
                     function=resumed.group(1) if resumed else function, scope=scope)


def dynamo_counters() -> dict[str, int]:
    """Dynamo's running count of graph breaks per reason (``torch._dynamo.utils.counters``)."""
    try:
        from torch._dynamo.utils import counters

        return {str(k): int(v) for k, v in counters["graph_break"].items()}
    except Exception:  # pragma: no cover - a release without the counter
        return {}


def _tree(events: list[Event]) -> dict[int, int]:
    """Each event's innermost enclosing event (index into ``events``, sorted by start then
    longest first); -1 at the top."""
    parent: dict[int, int] = {}
    stack: list[int] = []
    for i, e in enumerate(events):
        while stack and events[stack[-1]].end_ns <= e.start_ns:
            stack.pop()
        while stack and events[stack[-1]].end_ns < e.end_ns:  # overlapping, not nested: not its parent
            stack.pop()
        parent[i] = stack[-1] if stack else -1
        stack.append(i)
    return parent


def _profiler_costs(inside: list[Event], parent: dict[int, int], children: dict[int, list[int]], cost: Any,
                    device: bool) -> tuple[dict[int, float], dict[int, float], float]:
    """The profiler's cost (ns) of the events of one run, charged to the time holding each
    event (its parent's own time): per region, before the end of its graph's call (head) and
    after it (tail); outside every region. Events inside a graph's call are a kernel's (taken
    out of the kernel spans by ``spans_from_events``) or the call's own (head, on the CPU);
    events inside a cache lookup are left (the lookup holds none)."""
    cut: dict[int, int] = {}
    for i, e in enumerate(inside):
        if _REGION.match(e.name):
            calls = [k for k in children.get(i, []) if inside[k].name.startswith(_CALL)]
            cut[i] = max((inside[k].end_ns for k in calls), default=e.start_ns)
    head: dict[int, float] = {}
    tail: dict[int, float] = {}
    outside = 0.0

    def owner(p: int, t: int) -> tuple[str, int] | None:
        while True:
            if p < 0:
                return ("outside", -1)
            name = inside[p].name
            if p in cut:
                return ("head" if t < cut[p] else "tail", p)
            if name == LOOKUP:
                return None
            if name.startswith(_CALL):
                if device:
                    return None
                t = inside[p].start_ns  # the call's own time is its region's head
            elif parent[p] >= 0 and inside[parent[p]].name.startswith(_CALL):
                return None  # inside a kernel: its span's
            p = parent[p]

    for j, e in enumerate(inside):
        slot = owner(parent[j], e.start_ns)
        if slot is None:
            continue
        ns = cost.of(e.name) * 1e6
        if slot[0] == "outside":
            outside += ns
        else:
            bucket = head if slot[0] == "head" else tail
            bucket[slot[1]] = bucket.get(slot[1], 0.0) + ns
    return head, tail, outside


def frame_spans(events: Iterable[Event], run_range: str, device: bool = False, cost: Any = None) -> list[Span]:
    """The compiled program's time outside its kernels in each run (see the module's doc), as
    spans: per region occurrence of a graph, :data:`OVERHEAD_SPAN` (from the region's start to
    the end of its graph's call, with the top-level cache lookup before it, less the kernels
    and nested regions) and :data:`TAIL_SPAN` (from the end of the call to the region's end,
    less nested regions: the break and resume when the graph ends in a break, else its
    epilogue); per run one :data:`OUTSIDE_SPAN` (graph ""): the time outside every top-level
    cache lookup and compiled region. On the CPU the kernels are the events directly inside a
    graph's call, and the call's own time beyond them is overhead; with ``device``, kernels
    are device time, and a call's host time counts to no span here.

    ``cost`` (a :class:`~fxprof.measure.compiled.profiler_cost.ProfilerCost`): the profiler's own cost
    of each event is taken out of the span holding it (the run's range counted outside every
    region); what was taken is one ``PROFILER_SPAN`` per run."""
    from .profiler_cost import PROFILER_SPAN
    events = list(events)
    runs = sorted((e.start_ns, e.end_ns, e.thread) for e in events if e.name == run_range)
    host = sorted((e for e in events if e.kind in ("other", "range", "runtime") and e.device_type == "CPU"),
                  key=lambda e: (e.start_ns, -e.end_ns))
    spans: list[Span] = []
    for run, (r0, r1, thread) in enumerate(runs):
        inside = [e for e in host if e.thread == thread and r0 <= e.start_ns and e.end_ns <= r1 and e.name != run_range]
        parent = _tree(inside)
        region_of: dict[int, int] = {}  # event -> its innermost enclosing region (-1: none)

        def enclosing_region(i: int) -> int:
            if i in region_of:
                return region_of[i]
            p = parent[i]
            found = -1 if p < 0 else (p if _REGION.match(inside[p].name) else enclosing_region(p))
            region_of[i] = found
            return found

        children: dict[int, list[int]] = {}
        for i in range(len(inside)):
            children.setdefault(parent[i], []).append(i)
        head_cost, tail_cost, outside_cost = (_profiler_costs(inside, parent, children, cost, device) if cost is not None
                                              else ({}, {}, 0.0))
        if cost is not None:
            outside_cost += cost.of(run_range) * 1e6  # the run's own range
        taken_ns = 0.0
        counted_ns = 0
        occurrence: dict[str, int] = {}
        last_lookup: dict[int, int] = {}  # parent -> the latest cache lookup under it so far
        for i, e in enumerate(inside):
            if e.name == LOOKUP:
                last_lookup[parent[i]] = i
                continue
            found = _REGION.match(e.name)
            if not found:
                continue
            graph = found.group(1)
            index = occurrence.get(graph, 0)
            occurrence[graph] = index + 1
            top = enclosing_region(i) < 0
            lookup_ns = 0
            if top:  # its guard check: the cache lookup just before it, at the same level
                j = last_lookup.get(parent[i], -1)
                if j >= 0 and inside[j].end_ns <= e.start_ns:
                    lookup_ns = inside[j].end_ns - inside[j].start_ns
                    last_lookup[parent[i]] = -1
                counted_ns += lookup_ns + (e.end_ns - e.start_ns)
            nested = []
            for k in range(i + 1, len(inside)):
                if inside[k].start_ns >= e.end_ns:
                    break
                if _REGION.match(inside[k].name) and enclosing_region(k) == i:
                    nested.append(k)
            calls = [k for k in children.get(i, []) if inside[k].name.startswith(_CALL)]
            cut = max((inside[k].end_ns for k in calls), default=e.start_ns)
            kernel_ns = 0
            for k in calls:
                if device:
                    kernel_ns += inside[k].end_ns - inside[k].start_ns
                else:
                    kernel_ns += sum(inside[c].end_ns - inside[c].start_ns for c in children.get(k, [])
                                     if inside[c].kind != "runtime")
            before = sum(inside[k].end_ns - inside[k].start_ns for k in nested if inside[k].start_ns < cut)
            after = sum(inside[k].end_ns - inside[k].start_ns for k in nested if inside[k].start_ns >= cut)
            head_ns = max((cut - e.start_ns) - before - kernel_ns + lookup_ns, 0)
            tail_ns = max((e.end_ns - cut) - after, 0)
            took = min(head_cost.get(i, 0.0), head_ns), min(tail_cost.get(i, 0.0), tail_ns)
            head_ns, tail_ns, taken_ns = head_ns - took[0], tail_ns - took[1], taken_ns + took[0] + took[1]
            spans.append(Span(graph, run, OVERHEAD_SPAN, (e.start_ns - r0) / 1e6, max(head_ns, 0) / 1e6, index))
            spans.append(Span(graph, run, TAIL_SPAN, (cut - r0) / 1e6, max(tail_ns, 0) / 1e6, index))
            # the overhead's parts torch's ranges name (meta only; they lie inside the overhead span)
            named = {LOOKUP: lookup_ns}
            for k in children.get(i, []):
                if inside[k].name in _PARTS:
                    named[inside[k].name] = named.get(inside[k].name, 0) + inside[k].end_ns - inside[k].start_ns
            if calls and not device:
                named["generated call()'s own Python"] = sum(inside[k].end_ns - inside[k].start_ns for k in calls) - kernel_ns
            spans.extend(Span(graph, run, PART_PREFIX + part, (e.start_ns - r0) / 1e6, ns / 1e6, index)
                         for part, ns in named.items())
        outside_ns = max((r1 - r0) - counted_ns, 0)
        took_outside = min(outside_cost, outside_ns)
        spans.append(Span("", run, OUTSIDE_SPAN, 0.0, (outside_ns - took_outside) / 1e6, 0))
        if cost is not None:
            spans.append(Span("", run, PROFILER_SPAN, 0.0, (taken_ns + took_outside) / 1e6, 0))
    return spans



def recompile_reason(payload: Any) -> str:
    """The guard failure(s) of a ``recompile_reasons`` trace artifact, as one line."""
    import json

    try:
        value = json.loads(payload) if isinstance(payload, str) else payload
    except ValueError:
        value = payload
    if isinstance(value, (list, tuple)):
        value = "; ".join(str(v) for v in value)
    return " ".join(str(value or "").split())[:300]


#: what the ``compiled_entry`` row holds, as torch.profiler's ranges bound it and as the marks do
ENTRY_WORDS = ("outside every compiled region: nn.Module.__call__ of the compiled model, dynamo's frame hook, "
               "fxprof's run range")
MARKED_ENTRY_WORDS = ("before the first graph's call: nn.Module.__call__ of the compiled model, dynamo's frame hook and "
                      "guards, the AOT wrapper's prologue")


def frame_nodes(session: Any, spans: Iterable[Span], taken: set[str], module_types: Mapping[str, str],
                root_type: str, marked: bool = False) -> tuple[list[NodeInfo], list[tuple[str, Span]], list[float]]:
    """Rows and samples of :func:`frame_spans`'s spans: ``(rows, [(row, span)], outside_ms per
    run)``. ``marked``: the spans are the marks' (:mod:`fxprof.measure.compiled.wrapper_timer`),
    whose bounds the rows' descriptions say. A graph's tail is its break's time when the graph ends in a break
    (``session.breaks``), else part of its overhead (summed with its head, one sample per
    region occurrence)."""
    from ...core.breaks import MARKED_OVERHEAD_WORDS, OVERHEAD, OVERHEAD_WORDS, break_rows, overhead_rows

    spans = list(spans)
    parts: dict[tuple[str, str], dict[int, float]] = {}  # (graph, part) -> run -> ms
    for s in spans:
        if s.name.startswith(PART_PREFIX):
            per_run = parts.setdefault((s.graph, s.name[len(PART_PREFIX):]), {})
            per_run[s.run] = per_run.get(s.run, 0.0) + s.duration_ms
    session.overhead_parts = {}
    for (graph, part), per_run in parts.items():
        values = sorted(per_run.values())
        middle = len(values) // 2
        median = values[middle] if len(values) % 2 else (values[middle - 1] + values[middle]) / 2
        session.overhead_parts.setdefault(graph, {})[part] = round(median, 6)
    from .profiler_cost import PROFILER_SPAN

    removed: dict[int, float] = {}  # run -> the profiler's cost taken out of its rows
    for s in spans:
        if s.name == PROFILER_SPAN:
            removed[s.run] = removed.get(s.run, 0.0) + s.duration_ms
    session.profiler_ms = [removed[r] for r in sorted(removed)]
    spans = [s for s in spans if s.name in FRAME_SPANS]
    outside: dict[int, float] = {}
    seen = list(dict.fromkeys(s.graph for s in spans if s.name != OUTSIDE_SPAN))
    order = [g for g in session.order if g in seen] + [g for g in seen if g not in session.order]
    taken = set(taken)
    over_rows, over_of = overhead_rows(order, session.frame_scope, module_types, root_type, taken,
                                       MARKED_OVERHEAD_WORDS if marked else OVERHEAD_WORDS)
    sites = [session.breaks[g] for g in order if g in session.breaks]
    brk_rows, brk_of = break_rows(sites, module_types, root_type, taken)
    samples: list[tuple[str, Span]] = []
    heads: dict[tuple[str, int, int], Span] = {}
    for s in spans:
        if s.name == OUTSIDE_SPAN:
            outside[s.run] = outside.get(s.run, 0.0) + s.duration_ms
        elif s.name == OVERHEAD_SPAN:
            heads[(s.graph, s.run, s.call)] = s
    for s in spans:
        if s.name != TAIL_SPAN:
            continue
        head = heads.pop((s.graph, s.run, s.call), None)
        if s.graph in brk_of:
            samples.append((brk_of[s.graph], s))
            if head is not None:
                samples.append((over_of[s.graph], head))
        else:
            total = s.duration_ms + (head.duration_ms if head is not None else 0.0)
            start = head.start_ms if head is not None else s.start_ms
            samples.append((over_of[s.graph], Span(s.graph, s.run, OVERHEAD_SPAN, start, total, s.call)))
    samples.extend((over_of[h.graph], h) for h in heads.values())
    entry: list[NodeInfo] = []
    if outside:
        name = entry_row_name(taken)
        entry = [NodeInfo(name=name, op=OVERHEAD, target="the compiled wrapper's call", module_type=root_type, scope="",
                          range="", kind=OVERHEAD, graph="", raw_name=MARKED_ENTRY_WORDS if marked else ENTRY_WORDS,
                          role=OUTSIDE)]
        samples.extend((name, s) for s in spans if s.name == OUTSIDE_SPAN)
    return entry + over_rows + brk_rows, samples, [outside[r] for r in sorted(outside)]


def entry_row_name(taken: set[str]) -> str:
    name = "compiled_entry"
    while name in taken:
        name += "_"
    taken.add(name)
    return name


def describe_breaks(profile: Any, session: Any, outside: list[float]) -> None:
    """``meta["compiled"]``: ``breaks`` (each break row: reason, file, line, scope, count a run,
    median ms a run; biggest first), ``outside_ms`` (median time a run outside every compiled
    region) and the per-row medians it is from."""
    import numpy as np

    from ...core.breaks import BREAK, break_summary

    df = profile.df
    rows = df[df["op"] == BREAK] if "op" in df.columns else df.iloc[:0]
    stats = {name: {"median_ms": row["median_ms"], "calls_per_run": row["calls_per_run"]} for name, row in rows.iterrows()}
    row_of = {}
    for name, row in rows.iterrows():
        for g in str(row.get("origins", "")).split(","):
            if g:
                row_of[g] = name
    compiled = profile.meta.setdefault("compiled", {})
    compiled["breaks"] = break_summary(session.breaks.values(), row_of, stats)
    compiled["outside_ms"] = round(float(np.median(outside)), 6) if outside else None
    # per graph, the parts of its overhead torch's ranges name (median ms a run; the rest of the row is
    # the region's Python between them)
    compiled["overhead_parts"] = dict(getattr(session, "overhead_parts", {}) or {})
    # the profiler's own cost taken out of the rows (issue 33): per event, and per run what was taken
    cost = getattr(session, "profiler_cost", None)
    taken = list(getattr(session, "profiler_ms", []) or [])
    if cost is not None and taken:
        compiled["profiler_cost"] = {**cost.as_dict(), "median_ms": round(float(np.median(taken)), 6),
                                     "per_run_ms": [round(v, 6) for v in taken]}
    # dynamo's counter misses some breaks (a data-dependent branch): the graphs that end in one count too
    compiled["graph_breaks"] = max(int(compiled.get("graph_breaks") or 0), len(session.breaks))
