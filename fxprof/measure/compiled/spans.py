"""A compiled program's kernel calls, read from torch.profiler's events: the spans every
compiled-mode pass charges to the kernels' rows (the timed runs of :mod:`fxprof.measure.compiled.mode`,
a session's of :mod:`fxprof.measure.compiled.in_session`, the memory run of
:mod:`fxprof.measure.compiled.memory`), and the names of the ranges they are read from."""

from __future__ import annotations

from ...core.compiled import Span
from ..device.bridge import Event
from .breaks import CALL_RANGE, REGION, frame_spans
from .profiler_cost import PROFILER_SPAN, ProfilerCost

__all__ = ["spans_from_events", "RUN_RANGE", "REGION", "CALL_RANGE", "KERNEL_COST"]

#: the range around each timed (or memory) run of a compiled model
RUN_RANGE = "fxprof::run"
#: the graph of the profiler-cost spans taken out of kernel spans (an extern op's nested aten calls)
KERNEL_COST = "kernels"


def spans_from_events(events: list[Event], device: bool = False,
                      cost: ProfilerCost | None = None) -> tuple[list[Span], list[tuple[int, int]]]:
    """Kernel calls from the profiler's events: ``(spans, runs)``, runs as ``(start_ns, end_ns)``
    of each ``fxprof::run`` range in order.

    Also the compiled program's time outside its kernels (graph breaks, each graph's overhead),
    as spans named in :data:`fxprof.measure.compiled.breaks.FRAME_SPANS`.

    On the CPU, every event directly inside a ``## Call CompiledFxGraph`` range is one span
    (a generated kernel's range or an extern op). With ``device``, a span is a device
    activity, its time the device's: a kernel is named as launched (a Triton kernel by its
    name); the host event directly inside the call that launched it (by correlation id) names
    an extern op's kernels, which are summed into one span per op call.

    ``cost``: the profiler's own cost per event (:mod:`fxprof.measure.compiled.profiler_cost`), taken out
    of the span holding each event (on the CPU, an extern op's nested aten calls out of its
    span), what was taken kept per run as a :data:`~fxprof.measure.compiled.profiler_cost.PROFILER_SPAN`.
    """
    runs = sorted((e.start_ns, e.end_ns, e.thread) for e in events if e.name == RUN_RANGE)
    host = sorted((e for e in events if e.kind in ("other", "range", "runtime") and e.device_type == "CPU"),
                  key=lambda e: (e.start_ns, -e.end_ns))
    by_corr: dict[int, list[Event]] = {}
    if device:
        for e in events:
            if e.kind == "device" and e.correlation:
                by_corr.setdefault(e.correlation, []).append(e)
    spans: list[Span] = []
    removed: dict[int, float] = {}  # run -> profiler cost taken out of its kernel spans (ms)
    calls: dict[tuple[int, str], int] = {}
    for run, (r0, r1, thread) in enumerate(runs):
        inside = [e for e in host if e.thread == thread and e.start_ns >= r0 and e.end_ns <= r1 and e.name != RUN_RANGE]
        regions = [e for e in inside if REGION.search(e.name)]
        for call in (e for e in inside if e.name.startswith(CALL_RANGE)):
            holding = [g for g in regions if g.start_ns <= call.start_ns and call.end_ns <= g.end_ns]
            # the innermost: a graph after a break inside a block runs within the caller's region
            region = max(holding, key=lambda g: (g.start_ns, -g.end_ns)) if holding else None
            graph = REGION.search(region.name).group(1) if region is not None else "0/0"
            index = calls.get((run, graph), 0)
            calls[(run, graph)] = index + 1
            children = [e for e in inside if call.start_ns <= e.start_ns and e.end_ns <= call.end_ns and e is not call]
            direct: list[Event] = []
            for e in children:  # sorted by start: a direct child starts after the last one ended
                if not direct or e.start_ns >= direct[-1].end_ns:
                    direct.append(e)
            if not device:
                for e in direct:
                    if e.kind == "runtime":
                        continue
                    ms = (e.end_ns - e.start_ns) / 1e6
                    if cost is not None:  # the profiler's cost of the events nested in it (an extern op's aten calls)
                        taken = min(ms, sum(cost.of(c.name, nested=True) for c in children
                                            if e.start_ns <= c.start_ns and c.end_ns <= e.end_ns and c is not e))
                        ms -= taken
                        removed[run] = removed.get(run, 0.0) + taken
                    spans.append(Span(graph, run, e.name, (e.start_ns - r0) / 1e6, ms, index))
                continue
            for parent in direct:
                launches = [e for e in children if e.kind == "runtime" and parent.start_ns <= e.start_ns <= parent.end_ns]
                work = [d for e in launches for d in by_corr.get(e.correlation, [])]
                if not work:
                    continue
                if parent.kind == "runtime":  # a generated (Triton) kernel launched straight from the call
                    spans.extend(Span(graph, run, d.name, (d.start_ns - r0) / 1e6, (d.end_ns - d.start_ns) / 1e6, index)
                                 for d in work)
                else:  # an extern op: its kernels, summed
                    start = min(d.start_ns for d in work)
                    spans.append(Span(graph, run, parent.name, (start - r0) / 1e6,
                                      sum(d.end_ns - d.start_ns for d in work) / 1e6, index))
    spans.extend(Span(KERNEL_COST, run, PROFILER_SPAN, 0.0, ms, 0) for run, ms in sorted(removed.items()))
    spans.extend(frame_spans(events, RUN_RANGE, device, cost))  # the time outside the kernels (graph breaks, overhead)
    return spans, [(r0, r1) for r0, r1, _ in runs]
