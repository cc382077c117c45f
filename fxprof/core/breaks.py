"""The compiled program's time outside its kernels, as rows: graph breaks and per-graph overhead.

Plain data and pure functions (no torch). :mod:`fxprof.measure.compiled.breaks` reads where
and why each compiled graph ends in a break (dynamo's ``compile_subgraph_reason``: reason and
user stack) and cuts every compiled region of each timed run (torch's own profiler ranges:
``TorchDynamo Cache Lookup``, ``Torch-Compiled Region: i/j``, ``## Call CompiledFxGraph``) into

- the kernels (rows of :mod:`fxprof.core.compiled`),
- ``compiled_overhead`` of the graph: the frame's guard check (its cache lookup), the
  pre-graph bytecode, AOT's wrapper, the generated ``call()``'s own Python and allocations,
  everything in the region that is neither a kernel nor a break;
- ``graph_break``: after a graph that ends in a break, the Python that runs until the next
  graph (the unsupported code itself, eager ops included) and the resume (the resumed frame's
  cache lookup, and its return).

This module names those rows and sums them up for ``meta["compiled"]["breaks"]``.
"""

from __future__ import annotations

import dataclasses
import os
import re
from typing import Any, Iterable, Mapping, Sequence

from ..vocab import BREAK, GRAPH_BREAK, OUTSIDE, OVERHEAD
from .compiled import common_scope
from .nodes import NodeInfo

__all__ = ["BreakSite", "BREAK", "OVERHEAD", "OVERHEAD_WORDS", "MARKED_OVERHEAD_WORDS", "reason_of", "break_rows", "overhead_rows", "break_summary", "describe_site"]

#: ``op`` and ``kind`` of the rows this module makes


@dataclasses.dataclass(frozen=True)
class BreakSite:
    """Where and why a compiled graph ends in a graph break.

    Attributes:
        graph: the compile id of the graph the break ends (``"0/0"``).
        reason: dynamo's reason in a few words (``print``, ``Tensor.item()``, ``data-dependent
            branch``...; see :func:`reason_of`).
        detail: dynamo's reason as it gave it (first line).
        file, line, function: the user's source line the break is at (the innermost frame of
            dynamo's user stack: in a block's ``forward`` when the break is inside it).
        scope: the module path whose ``forward`` holds the break ("" at the root).
    """

    graph: str
    reason: str
    detail: str
    file: str
    line: int
    function: str
    scope: str

    @property
    def key(self) -> tuple[str, int, str]:
        return (self.file, self.line, self.reason)

    @property
    def where(self) -> str:
        return f"{os.path.basename(self.file)}:{self.line}"


_RULES: tuple[tuple[str, str], ...] = (
    (r"builtin operator `(\w+)`", "{0}"),
    (r"Tensor\.item\(\)", "Tensor.item()"),
    (r"generic_jump|[Dd]ata-dependent branching", "data-dependent branch"),
    (r"Operator `(aten\.\w+)[.\w]*`'s output shape", "data-dependent shape ({0})"),
    (r"Dynamic shape operator", "data-dependent shape"),
    (r"torch\._dynamo\.graph_break\(\)", "torch._dynamo.graph_break()"),
    (r"marked as skipped|[Ss]kipped function|skip_files", "skipped function"),
    (r"[Uu]nsupported (?:function|method|builtin|call)|Failed to trace", "unsupported call"),
)


def reason_of(text: str) -> str:
    """Dynamo's reason for a break, in a few words: ``print``, ``Tensor.item()``,
    ``data-dependent branch``, ``data-dependent shape (aten.nonzero)``, ``unsupported call``...
    (else its first line, shortened)."""
    for pattern, label in _RULES:
        found = re.search(pattern, text)
        if found:
            return label.format(*found.groups())
    first = text.strip().splitlines()[0] if text.strip() else "unknown"
    return first[:60]


def _slug(reason: str) -> str:
    words = {"Tensor.item()": "item", "data-dependent branch": "branch", "unsupported call": "call",
             "torch._dynamo.graph_break()": "graph_break", "skipped function": "skipped"}
    if reason in words:
        return words[reason]
    if reason.startswith("data-dependent shape"):
        found = re.search(r"aten\.(\w+)", reason)
        return found.group(1) if found else "shape"
    return re.sub(r"\W+", "_", reason).strip("_")[:24] or "break"


def _unique(base: str, taken: set[str]) -> str:
    name, i = base, 0
    while name in taken:
        i += 1
        name = f"{base}_{i}"
    taken.add(name)
    return name


def break_rows(sites: Iterable[BreakSite], module_types: Mapping[str, str], root_type: str,
               taken: set[str]) -> tuple[list[NodeInfo], dict[str, str]]:
    """One row per break site (source line and reason; graphs breaking at the same line share
    it), named from where it is: ``break_print_model_42``. Returns the rows and
    ``{graph: row name}``; ``taken`` (names in use) gets the new names."""
    by_key: dict[tuple[str, int, str], list[BreakSite]] = {}
    for site in sites:
        by_key.setdefault(site.key, []).append(site)
    rows: list[NodeInfo] = []
    row_of: dict[str, str] = {}
    for (file, line, reason), group in by_key.items():
        first = group[0]
        scope = common_scope(s.scope for s in group)  # a line several frames break at: the module holding them all
        stem = re.sub(r"\W+", "_", os.path.splitext(os.path.basename(file))[0]) or "src"
        name = _unique(f"break_{_slug(reason)}_{stem}_{line}", taken)
        rows.append(NodeInfo(
            name=name, op=BREAK, target=f"{file}:{line}", module_type=module_types.get(scope, "") if scope else root_type,
            scope=scope, range="", kind=BREAK, graph=first.graph, scope_source="frame",
            origins=",".join(s.graph for s in group), raw_name=f"{reason} at {first.where} in {first.function}", role=GRAPH_BREAK))
        for s in group:
            row_of[s.graph] = name
    return rows, row_of


#: a ``compiled_overhead`` row's ``raw_name``, as torch.profiler's ranges bound it and as compiled mode's marks do
OVERHEAD_WORDS = "Torch-Compiled Region: {graph} outside its kernels"
MARKED_OVERHEAD_WORDS = "graph {graph} outside its kernels: its call's own Python, and what runs after it up to the next graph"


def overhead_rows(graphs: Sequence[str], frame_scope: Mapping[str, str], module_types: Mapping[str, str], root_type: str,
                  taken: set[str], words: str = OVERHEAD_WORDS) -> tuple[list[NodeInfo], dict[str, str]]:
    """One ``compiled_overhead`` row per compiled graph, charged to the module whose frame it
    compiled: ``compiled_overhead_0_0``. Returns the rows and ``{graph: row name}``. ``words``:
    its ``raw_name``, ``{graph}`` filled in."""
    rows: list[NodeInfo] = []
    row_of: dict[str, str] = {}
    for g in graphs:
        scope = frame_scope.get(g, "")
        name = _unique("compiled_overhead_" + re.sub(r"\W+", "_", g), taken)
        rows.append(NodeInfo(
            name=name, op=OVERHEAD, target="guards, wrappers, allocations", module_type=module_types.get(scope, "") if scope else root_type,
            scope=scope, range="", kind=OVERHEAD, graph=g, scope_source="frame" if scope else "",
            raw_name=words.format(graph=g), role=OUTSIDE))
        row_of[g] = name
    return rows, row_of


def break_summary(sites: Iterable[BreakSite], row_of: Mapping[str, str], stats: Mapping[str, Mapping[str, Any]]) -> list[dict[str, Any]]:
    """``meta["compiled"]["breaks"]``: per break row, its reason, place, how often it ran per run
    and its median time per run (ms), biggest first. ``stats[row]`` holds the row's
    ``median_ms`` and ``calls_per_run``."""
    out: dict[str, dict[str, Any]] = {}
    for site in sites:
        row = row_of.get(site.graph)
        if row is None:
            continue
        entry = out.get(row)
        if entry is None:
            got = stats.get(row, {})
            median, count = got.get("median_ms"), got.get("calls_per_run")
            out[row] = {"name": row, "reason": site.reason, "detail": site.detail, "file": site.file, "line": site.line,
                        "function": site.function, "scope": site.scope, "graphs": [site.graph],
                        "count": None if count is None or count != count else round(float(count), 3),
                        "median_ms": None if median is None or median != median else round(float(median), 6)}
        else:
            entry["graphs"].append(site.graph)
            entry["scope"] = common_scope([entry["scope"], site.scope])
    return sorted(out.values(), key=lambda e: -(e["median_ms"] or 0.0))


def describe_site(entry: Mapping[str, Any]) -> str:
    """``print at model.py:42`` for an entry of ``meta["compiled"]["breaks"]``."""
    return f"{entry.get('reason', '?')} at {os.path.basename(str(entry.get('file', '?')))}:{entry.get('line', '?')}"
