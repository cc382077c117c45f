"""Compiled mode's own kernel timer: inductor's generated wrappers run with fxprof's marks, no
torch.profiler (issue 60).

torch.profiler alone costs a compiled model 1.05-1.35x its run (a 0.3 ms decode step 1.34x;
docs/performance.md section 16): no kernel time read from it can be the program's own. Marks in
the generated program itself cost 1.01-1.03x: :mod:`fxprof.measure.compiled.wrapper_sites` gives
each graph's ``call`` with a host clock read before and after every kernel call and at the call's
start and end. :class:`WrapperTimer` swaps that code into fxprof's own copy of the graph (the
generated function's ``__code__``; the module is fxprof's, exec'd for its compile, never the
user's program) for the timed runs and back after, so a plain call runs inductor's code exactly.

What a run's marks give (:func:`spans_from_marks`), every moment of the run in one span:

- each kernel call, charged to its kernel by inductor's provenance key (``Span.name``);
- each call of a graph beyond its kernels: its wrapper's Python (allocations, size asserts,
  ``del``\\ s), its :data:`~fxprof.measure.compiled.breaks.OVERHEAD_SPAN`;
- from the end of a graph's call to the start of the next one (or to the run's end): the AOT
  wrapper's epilogue, dynamo's return, the next frame's guards and prologue, and, after a graph
  that ends in a graph break, the break's Python: its
  :data:`~fxprof.measure.compiled.breaks.TAIL_SPAN` (the break's row, else the graph's overhead);
- from the run's start to the first graph's call: ``nn.Module.__call__``, dynamo's frame hook and
  guards, the AOT prologue (:data:`~fxprof.measure.compiled.breaks.OUTSIDE_SPAN`, the
  ``compiled_entry`` row).

The clock is ``time.perf_counter_ns`` (the runs' bounds read the same one). A span holds one clock
read's cost at most (:func:`clock_read_ns` measures it; kept in the profile's meta).

Where a wrapper cannot be marked (inductor's ``cpp_wrapper``, CUDA graphs, a GPU: the marks'
event path is not yet proven on one) compiled mode keeps timing with torch.profiler, and says
why in ``meta["compiled"]["kernel_source"]``.
"""

from __future__ import annotations

import statistics
import time
import types
from typing import Any, Callable, Collection, Iterable, Mapping, Sequence

from ...core.compiled import Span
from .breaks import OUTSIDE_SPAN, OVERHEAD_SPAN, PART_PREFIX, TAIL_SPAN
from .wrapper_sites import CLOCK, KEEP, Instrumented, NotInstrumentable, Site, instrument

__all__ = ["WrapperTimer", "NotInstrumentable", "timers_for", "spans_from_marks", "clock_read_ns", "MARKS_SOURCE",
           "not_marked_reason", "installed"]

#: ``meta["compiled"]["kernel_source"]`` of a profile timed by the marks
MARKS_SOURCE = "fxprof's marks in inductor's generated code (a host clock read around every kernel call; no torch.profiler)"
#: the overhead part the marks name: a graph's call beyond its kernels
OWN_PYTHON = "generated call()'s own Python"


class WrapperTimer:
    """One compiled graph's generated ``call`` with marks: :meth:`install` swaps them in,
    :meth:`remove` swaps inductor's code back; while installed, every call of the graph keeps a
    row of clock reads (:meth:`take_rows`)."""

    def __init__(self, graph: str, module: types.ModuleType, source: str,
                 clock: Callable[[], int] = time.perf_counter_ns):
        self.graph = graph
        self.module = module
        done: Instrumented = instrument(source)
        self.sites: tuple[Site, ...] = done.sites
        self.width = done.width
        self._target = self._generated_call(module)
        scratch: dict[str, Any] = {}
        exec(compile(done.module, getattr(module, "__file__", "<inductor wrapper>"), "exec"), dict(module.__dict__), scratch)
        self._marked = scratch["call"].__code__
        if self._marked.co_freevars != self._target.__code__.co_freevars:
            raise NotInstrumentable("the generated call() is a closure; its code cannot be swapped")
        self._original = self._target.__code__
        self.rows: list[list[int]] = []
        self._clock = clock
        self.installed = False

    @staticmethod
    def _generated_call(module: types.ModuleType) -> types.FunctionType:
        call = getattr(module, "call", None)
        function = call.__func__ if isinstance(call, types.MethodType) else call
        if not isinstance(function, types.FunctionType):
            raise NotInstrumentable("the generated module's call is not a Python function (inductor's cpp_wrapper?)")
        return function

    @classmethod
    def from_file(cls, graph: str, path: str, **kwargs: Any) -> "WrapperTimer":
        """The timer of the generated module inductor wrote at ``path`` (the structured trace's
        ``inductor_output_code`` record): the module loaded from it, its source the file's."""
        from torch._inductor.codecache import PyCodeCache

        for module in reversed(list(PyCodeCache.modules)):
            if getattr(module, "__file__", None) == path:
                with open(path, encoding="utf-8") as f:
                    return cls(graph, module, f.read(), **kwargs)
        raise NotInstrumentable(f"inductor's loaded modules hold none from {path}")

    def install(self) -> None:
        """Every call of the graph runs with marks from now on (until :meth:`remove`)."""
        if self.installed:
            return
        self.module.__dict__[KEEP] = self.rows.append
        self.module.__dict__[CLOCK] = self._clock
        self._target.__code__ = self._marked
        self.installed = True

    def remove(self) -> None:
        """Inductor's own code again; nothing of fxprof's left in the module."""
        if not self.installed:
            return
        self._target.__code__ = self._original
        self.module.__dict__.pop(KEEP, None)
        self.module.__dict__.pop(CLOCK, None)
        self.installed = False

    def take_rows(self) -> list[list[int]]:
        """The rows kept since the last take (one per call of the graph), cleared."""
        rows = self.rows[:]
        self.rows.clear()
        return rows


class installed:
    """Context: ``timers`` installed inside, removed after (also on errors)."""

    def __init__(self, timers: Iterable[WrapperTimer]):
        self.timers = list(timers)

    def __enter__(self) -> "installed":
        try:
            for t in self.timers:
                t.install()
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, *exc: Any) -> None:
        for t in self.timers:
            t.remove()


def not_marked_reason(on_cuda: bool, described: Mapping[str, Any]) -> str:
    """Why compiled mode cannot time this program with the marks ("" where it can): known before
    it compiles, from the device and the compile options."""
    options = described.get("options") or {}
    if on_cuda:  # measured on an H200 (tests/benchmarks/marks/gpu_marks.py, docs/performance.md section 18)
        return ("a GPU: CUDA event marks around each launch cost a launch-bound compiled run 1.6-2.2x and read "
                "the device's waits for launches as kernel time, so CUPTI times the kernels")
    if options.get("cpp_wrapper"):
        return "cpp_wrapper=True: inductor's wrapper is C++, its kernel calls are no Python statements to mark"
    return ""


def timers_for(graphs: Sequence[str], files: Mapping[str, Sequence[str]],
               have: Mapping[str, WrapperTimer] | None = None, no_tensors: Collection[str] = ()) -> dict[str, WrapperTimer]:
    """A timer per compiled graph, from the generated module of its forward (the first file
    inductor wrote for it; a training graph's backward comes after). ``have``: timers already
    made, kept. ``no_tensors``: graphs whose calls make no tensor (torchvision's
    ``torch._C._log_api_usage_once`` alone between two breaks): inductor generates no code for
    them, and with no kernel they need no timer (their Python is in the span between the graphs
    around them). Raises :class:`NotInstrumentable` naming the graph where one cannot be made."""
    out = dict(have or {})
    for graph in graphs:
        if graph in out:
            continue
        paths = list(files.get(graph) or ())
        if not paths and graph in no_tensors:
            continue
        if not paths:
            raise NotInstrumentable(f"inductor's trace gave no generated file for graph {graph}")
        try:
            out[graph] = WrapperTimer.from_file(graph, paths[0])
        except NotInstrumentable as exc:
            raise NotInstrumentable(f"graph {graph}: {exc}") from None
        except (OSError, SyntaxError, ValueError) as exc:
            raise NotInstrumentable(f"graph {graph}: its generated file could not be read ({exc})") from None
    return out


def spans_from_marks(timers: Mapping[str, WrapperTimer], rows: Sequence[Mapping[str, list[list[int]]]],
                     bounds: Sequence[tuple[int, int]]) -> list[Span]:
    """Spans of the marked runs (see the module's doc): ``rows[r][graph]`` the rows each graph
    kept in run ``r``, ``bounds[r]`` the run's ``(start_ns, end_ns)`` on the marks' clock."""
    spans: list[Span] = []
    for run, ((r0, r1), kept) in enumerate(zip(bounds, rows)):
        calls: list[tuple[int, int, str, int]] = []  # (start, end, graph, call) of each graph call
        for graph, graph_rows in kept.items():
            sites = timers[graph].sites
            for call, row in enumerate(graph_rows):
                if not row or row[-1] == 0:  # a call that raised before its end: no time to charge
                    continue
                inside = 0
                for site in sites:
                    ns = row[site.end] - row[site.start]
                    inside += ns
                    spans.append(Span(graph, run, site.key or site.callee, (row[site.start] - r0) / 1e6, ns / 1e6, call))
                own = max(row[-1] - row[0] - inside, 0)
                spans.append(Span(graph, run, OVERHEAD_SPAN, (row[0] - r0) / 1e6, own / 1e6, call))
                spans.append(Span(graph, run, PART_PREFIX + OWN_PYTHON, (row[0] - r0) / 1e6, own / 1e6, call))
                calls.append((row[0], row[-1], graph, call))
        calls.sort()
        for i, (start, end, graph, call) in enumerate(calls):
            until = calls[i + 1][0] if i + 1 < len(calls) else r1
            spans.append(Span(graph, run, TAIL_SPAN, (end - r0) / 1e6, max(until - end, 0) / 1e6, call))
        first = calls[0][0] if calls else r1
        spans.append(Span("", run, OUTSIDE_SPAN, 0.0, max(first - r0, 0) / 1e6, 0))
    return spans


def clock_read_ns(clock: Callable[[], int] = time.perf_counter_ns, n: int = 2001) -> float:
    """The median cost of one mark (a clock read stored into a list), back to back: at most this
    much of each span is the marks' own."""
    t = [0, 0]
    c = clock
    costs = []
    for _ in range(n):
        t[0] = c()
        t[1] = c()
        costs.append(t[1] - t[0])
    return float(statistics.median(costs))
