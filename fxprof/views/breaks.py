"""Graph breaks and the compiled program's own Python in words: the header line of a compiled
profile and the report's "breaks" section (rows of :mod:`fxprof.core.breaks`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pandas as pd

from ..core.breaks import BREAK, OVERHEAD, describe_site
from .tables import format_ms

if TYPE_CHECKING:  # pragma: no cover
    from ..core.profile import Profile

__all__ = ["kernel_rows", "breaks_lines", "breaks_table", "profiler_cost_lines", "breaks_panel"]

#: breaks named one by one in the header; the rest are counted
_NAMED = 3


def kernel_rows(table: pd.DataFrame) -> pd.Series:
    """Which rows of a compiled profile are kernels (not breaks, not overhead)."""
    if "op" not in table.columns:
        return pd.Series(True, index=table.index)
    return ~table["op"].isin((BREAK, OVERHEAD))


def _share(ms: float, whole: float | None) -> str:
    return f"{ms / whole * 100:.0f}%" if whole else "?"


def breaks_lines(profile: "Profile", own_ms: float | None) -> list[str]:
    """``graph breaks: 1 (print at model.py:42, 201 us a run, 83% of the compiled run); kernels
    17%, overhead 9%``, and the recompiles of the timed runs with their reasons. Shares are of
    the compiled run as profiled (the rows' summed medians, which add up to it), so they add up
    to 100%; ``own_ms`` (the unprofiled run) is named on the ``kernels:`` line."""
    compiled: dict[str, Any] = profile.compiled
    table = profile.df
    if "op" not in table.columns or not table["op"].isin((BREAK, OVERHEAD)).any():
        return []
    whole = float(table["median_ms"].sum()) or None
    breaks = compiled.get("breaks") or []
    kernels = float(table.loc[kernel_rows(table), "median_ms"].sum())
    overhead = float(table.loc[table["op"] == OVERHEAD, "median_ms"].sum())
    named = []
    for entry in breaks[:_NAMED]:
        ms = float(entry.get("median_ms") or 0.0)
        count = entry.get("count") or 1
        times = f" x{count:g} a run" if count and count != 1 else ""
        named.append(f"{describe_site(entry)}{times}, {format_ms(ms)} a run, {_share(ms, whole)} of the compiled run")
    more = f"; {len(breaks) - _NAMED} more" if len(breaks) > _NAMED else ""
    head = f"graph breaks: {len(breaks)}" + (f" ({'; '.join(named)}{more})" if named else "")
    lines = [f"{head}; kernels {_share(kernels, whole)}, overhead {_share(overhead, whole)} (guards, wrappers, "
             f"allocations: compiled_overhead rows)"]
    lines.extend(profiler_cost_lines(compiled))
    timed = [r for r in compiled.get("recompile_reasons") or () if r.get("during") == "timed"]
    if timed:
        reasons = "; ".join(f"{r.get('graph', '?')}: {r.get('reason', '?')}" for r in timed[:3])
        lines.append(f"recompiles during the timed runs: {len(timed)} ({reasons})")
    return lines


def profiler_cost_lines(compiled: dict[str, Any]) -> list[str]:
    """``profiler's own cost: 21 us a run taken out of the rows (ops 0.43 us, ranges 0.82 us an
    event, calibrated on this machine, x2.5 outside the kernels in this model's runs)``: what each
    profiled run spent recording itself, which the rows leave out (so they stand for the model's
    own run; rows + it = the profiled run). The factor: how much more (or less) an event cost in
    the model's runs than in the probes, from the profiled runs' excess over the unprofiled ones
    (:func:`fxprof.measure.compiled.profiler_cost.in_situ`)."""
    cost = compiled.get("profiler_cost") or {}
    if cost.get("median_ms") is None:
        return []
    scale, nested = float(cost.get("scale", 1.0)), float(cost.get("nested_scale", 1.0))
    if "scale" not in cost:  # not measured in the runs (a session; CUDA; a profile from before)
        where = "calibrated on this machine"
    elif scale == nested:
        where = f"calibrated on this machine, x{scale:.2f} in this model's runs"
    else:
        where = f"calibrated on this machine, x{scale:.2f} outside the kernels in this model's runs"
    measured = cost.get("measured_scale")
    held = ""
    if measured is not None and measured != scale:  # held to its bounds: say what was measured, never a negative factor
        held = (f", held: x{float(measured):.2f} measured" if float(measured) > 0 else
                ", held: the profiled runs were not slower than the unprofiled ones, so no factor could be measured (a noisy or busy machine)")
    return [f"profiler's own cost: {format_ms(float(cost['median_ms']))} a run taken out of the rows (its recording of "
            f"each event: {cost.get('op_us', 0):.2f} us an op, {cost.get('range_us', 0):.2f} us a range, {where}{held}); "
            f"rows + it = the profiled run"]


def breaks_table(profile: "Profile") -> pd.DataFrame:
    """Each graph break of a compiled profile, biggest first: where, why, how often a run, its
    median time a run and its share of the compiled model's own run."""
    from ..core.compiled import quiet_own_run_ms

    breaks = profile.compiled.get("breaks") or []
    own, _ = quiet_own_run_ms(profile.meta)
    rows = [{"break": e.get("name", ""), "reason": e.get("reason", ""), "where": describe_site(e).split(" at ", 1)[-1],
             "scope": e.get("scope", "") or "(root)", "count": e.get("count"), "median_ms": e.get("median_ms"),
             "pct_of_run": (e["median_ms"] / own * 100) if own and e.get("median_ms") is not None else None}
            for e in breaks]
    return pd.DataFrame(rows, columns=["break", "reason", "where", "scope", "count", "median_ms", "pct_of_run"])


def breaks_panel(profile: "Profile") -> str:
    """The report's "breaks" section: a compiled model's graph breaks, biggest first; "" without any."""
    if not profile.compiled.get("breaks"):
        return ""
    from .html_parts import section_html, table_html

    return section_html("breaks", "Graph breaks, biggest first", "Each is the Python that runs between two compiled graphs "
                        "and the resume: where dynamo broke the graph, why, how often a run, its median time a run and its "
                        "share of the compiled model's own run.", table_html(breaks_table(profile), "fx-breaks", "breaks"))
