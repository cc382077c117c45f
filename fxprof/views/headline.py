"""The headline figures, worded once for every page (terminal, notebook, HTML report, compare).

One answer per question, in one order everywhere: how long does a run take? The median of
the runs' totals, first. How much of it do the nodes explain? The summed node medians, second
and labelled as such, with coverage as their ratio (the same statistic, medians, on both
sides). In a comparison: the ratio of the median runs with its bootstrap interval first, then
the ratio of the summed node medians, labelled. Views call these functions instead of wording
the figures themselves, so two pages never show two different totals unexplained.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from .tables import format_ms

if TYPE_CHECKING:
    from ..core.profile import Profile

__all__ = ["RunFigures", "run_figures", "run_line", "outside_words", "machine_line", "busy_kept", "compare_headline", "ratio_words",
           "outlier_lines", "loop_line", "eager_run_lines", "report_cards"]


class RunFigures:
    """A profile's headline figures in ms: ``run_ms`` (median of the kept runs' totals),
    ``iqr_ms`` (their IQR), ``runs``, ``nodes_ms`` (sum of the node medians), ``outside_ms``
    (``run_ms - nodes_ms``: time in no node, the interpreter between nodes and the model's
    Python between graphs; negative when the nodes' medians add up to more than the median
    run) and ``coverage`` (``nodes_ms / run_ms``)."""

    def __init__(self, run_ms: float, iqr_ms: float, runs: int, nodes_ms: float):
        self.run_ms, self.iqr_ms, self.runs, self.nodes_ms = run_ms, iqr_ms, runs, nodes_ms
        self.outside_ms = run_ms - nodes_ms if runs else float("nan")
        self.coverage = nodes_ms / run_ms if runs and run_ms > 0 else float("nan")

    @property
    def has_runs(self) -> bool:
        return self.runs > 0 and math.isfinite(self.run_ms)


def run_figures(profile: "Profile", table: pd.DataFrame | None = None) -> RunFigures:
    """The headline figures of ``profile`` (its kept runs; ``table``: its ``df`` if already made)."""
    totals = np.asarray(profile.kept_totals(None), dtype=np.float64)
    totals = totals[np.isfinite(totals)]
    table = profile.df if table is None else table
    nodes = float(np.nansum(table["median_ms"].to_numpy(dtype=np.float64))) if len(table) else 0.0
    if not len(totals):
        return RunFigures(float("nan"), float("nan"), 0, nodes)
    q1, q3 = np.percentile(totals, [25, 75])
    run_ms = float(np.median(totals))
    coverage = profile.coverage  # one definition for the header, the report's cards and every page
    if math.isfinite(coverage):  # gathered: each run's nodes summed, median over every rank's runs
        nodes = run_ms * coverage
    return RunFigures(run_ms, float(q3 - q1), int(len(totals)), nodes)


def outside_words(meta: dict[str, Any], busy: bool = False) -> str:
    """What the time outside every node is, for this capture; ``busy``: the runs it comes from
    lost time to other processes, which is in it too (never put down to the interpreter alone)."""
    if meta.get("capture") == "compiled":
        words = "the compiled program's own Python (guards, wrappers, allocations) and the profiler's"
    else:
        words = "interpreter overhead between nodes" + (" and the model's Python between graphs" if meta.get("capture") == "dynamo" else "")
    return words + (", and time lost to other processes (busy machine)" if busy else "")


def machine_line(profile: "Profile") -> list[str]:
    """The header's machine line (:func:`fxprof.core.contention.machine_words`): quiet, or how
    many runs lost how much to other processes and what the statistics did about it; none when
    it was not measured."""
    from ..core.contention import cpu_clock_words, machine_words

    found = profile.contention
    if found is not None:
        return [machine_words(found)]
    words = cpu_clock_words(profile.meta)
    return [words] if words else []


def busy_kept(profile: "Profile") -> bool:
    """Whether the runs the statistics use include busy ones (too few quiet runs to leave them
    out, or ``keep_outliers``)."""
    busy = set(profile.busy_runs)
    kept = profile.kept_runs()
    return bool(busy if kept is None else busy & set(kept))


def run_line(profile: "Profile") -> str:
    """The header's run line: the median run first, then what the node medians sum to and
    the time outside every node, so that the two add up to the run."""
    f = run_figures(profile)
    coverage = f.coverage  # per rank for a gathered profile
    # gathered: each run's node times summed, median over every rank's runs (the table's medians, over all
    # ranks' samples of a node, need not add up to it: docs/distributed.md, 19.9 ms against a table of 11.0)
    nodes = (f"{format_ms(f.nodes_ms)} of node time a run (each run's nodes summed, median over every "
             f"rank's runs)" if len(profile.ranks) > 1 else f"{format_ms(f.nodes_ms)} summed median node time")
    head = (f"run: median {format_ms(f.run_ms)} (IQR {format_ms(f.iqr_ms)}) over {f.runs} runs; nodes account for "
            f"{coverage * 100:.1f}% of it (coverage): {nodes}")
    if coverage > 1:
        return (head + ", more than the median run: each node's median comes from other runs, and the runs "
                "vary (see the IQR); compare medians of whole runs, not the nodes' sum")
    return head + (f", {format_ms(f.outside_ms)} of it outside every node "
                   f"({outside_words(profile.meta, busy_kept(profile))})")


def ratio_words(ratio: float) -> str:
    """``0.464`` -> ``2.16x faster``; ``1.3`` -> ``1.30x slower``; ``1.0`` -> ``the same time``."""
    if not math.isfinite(ratio) or ratio <= 0:
        return ""
    if abs(ratio - 1.0) < 0.005:
        return "the same time"
    return f"{1 / ratio:.2f}x faster" if ratio < 1 else f"{ratio:.2f}x slower"


def compare_headline(diff: pd.DataFrame) -> list[str]:
    """The first lines of a node-by-node comparison (:func:`fxprof.compare`): the ratio of the
    median runs with its interval, then the summed node medians, labelled."""
    lines = []
    run: dict[str, Any] | None = diff.attrs.get("run_ratio")
    if run and math.isfinite(run.get("ratio", float("nan"))):
        medians = ""
        if "a_median_ms" in run:
            medians = f"median run a {format_ms(run['a_median_ms'])}, b {format_ms(run['b_median_ms'])}: "
        words = ratio_words(run["ratio"])
        lines.append(
            f"run: {medians}b/a {run['ratio']:.3f}" + (f" (b {words})" if words else "")
            + f", {run['confidence']:.0%} interval {run['low']:.3f} to {run['high']:.3f} (bootstrap over "
            f"{run['a_runs']} and {run['b_runs']} runs; drift between the two profiles is not in it)"
        )
    a_total, b_total = float(diff["a_ms"].sum()), float(diff["b_ms"].sum())
    ratio = b_total / a_total if a_total > 0 else float("nan")
    status = diff["status"] if "status" in diff.columns else pd.Series("both", index=diff.index)
    lines.append(
        f"nodes (sum of node medians, without the time between nodes): a {format_ms(a_total)}, b {format_ms(b_total)}, "
        f"b/a {ratio:.3f}; {int((status == 'both').sum())} nodes in both, {int((status == 'only_a').sum())} only in a, "
        f"{int((status == 'only_b').sum())} only in b"
    )
    return lines


def outlier_lines(profile: "Profile") -> list[str]:
    """Which runs the statistics leave out (or keep), and the rule."""
    from ..core.stats import OUTLIER_FENCE_IQR, OUTLIER_MIN_RATIO, outlier_fence

    outliers = profile.outlier_runs
    if not outliers:
        return []
    fence = outlier_fence(profile.total_ms)
    listed = ", ".join(map(str, outliers[:10])) + (", ..." if len(outliers) > 10 else "")
    rule = (f"total above {format_ms(fence)} = max(Q3 + {OUTLIER_FENCE_IQR:g} IQR, {OUTLIER_MIN_RATIO:g} x median) "
            f"of the run totals")
    if profile.keep_outliers:
        return [f"outlier runs: {len(outliers)} of {profile.num_runs} (run {listed}; {rule}) are KEPT in the statistics"]
    return [f"outlier runs: {len(outliers)} of {profile.num_runs} left out of the statistics (run {listed}; {rule}); "
            f"samples kept in profile.samples, profile.keep_outliers = True uses them"]


def loop_line(profile: "Profile") -> list[str]:
    """fxprof's own time between the timed runs (turning marks into samples, the per-run
    bookkeeping; :func:`fxprof.core.overhead.between_runs`), shown when it is not negligible
    (over 2% of the runs)."""
    from ..core.overhead import between_runs

    found = between_runs(profile.meta, profile.runs)
    if found is None or found.share <= 0.02:
        return []
    return [f"between runs: fxprof took {format_ms(found.between_ms)} over {profile.num_runs} runs "
            f"({found.share * 100:.1f}% of the runs' own time), outside every run's time"
            + (f" (the model's own runs, {format_ms(found.own_ms)}, not counted)" if found.own_ms > 0 else "")]


def eager_run_lines(profile: "Profile") -> list[str]:
    """The header's runs section of a profile of whole eager runs: the run line, the machine,
    the outlier runs, fxprof's time between the runs, the launch-bound share. Nothing for an
    isolated or a compiled profile, or one without timed runs."""
    if profile.is_isolated or profile.is_compiled or not profile.num_runs:
        return []
    lines = [run_line(profile)]
    lines.extend(machine_line(profile))
    lines.extend(outlier_lines(profile))
    lines.extend(loop_line(profile))
    launch = profile.launch_bound_pct
    if not np.isnan(launch):
        lines.append(
            f"launch-bound: {launch:.1f}% of node time is in nodes where the GPU idled for most of "
            f"the node, waiting for the host to launch it (bound column; see docs/anatomy.md)"
        )
    return lines


def report_cards(profile: "Profile") -> list[tuple[str, str]]:
    """The report's cards, (label, value): the median run, what the node medians sum to, the rest
    outside every node, coverage, outlier runs and the machine (as the header's machine line
    says it, :mod:`fxprof.core.contention`), then the nodes, the timed runs and the share of
    ``record_function`` bookkeeping."""
    from ..core.contention import loaded_words
    from ..core.rollup import is_bookkeeping

    table = profile.df
    totals = profile.kept_totals()
    cards = [("nodes", f"{len(table)}"), ("timed runs", f"{profile.num_runs}")]
    if totals:  # one headline: the median run, then what the node medians sum to and the rest
        figures = run_figures(profile, table)
        gathered = len(profile.ranks) > 1
        cards[0:0] = [("median run", format_ms(figures.run_ms)),
                      ("node time a run (median over every rank's runs)" if gathered else "sum of node medians",
                       format_ms(figures.nodes_ms)),
                      ("outside every node", format_ms(figures.outside_ms))]
        cards.append(("coverage (node time / median run)", f"{figures.coverage * 100:.1f}%"))
        cards.append(("outlier runs left out" if not profile.keep_outliers else "outlier runs (kept)", f"{len(profile.outlier_runs)}"))
        found = profile.contention
        if found is not None:
            busy = int(found.busy.sum())
            cards.append(("machine", (f"LOADED: no run lost time, but {loaded_words(found)}"
                                      if found.loaded else "quiet") if not busy else
                          f"BUSY: {busy} of {len(found.runs)} runs lost time to other processes"
                          + (" (left out)" if found.left_out and not profile.keep_outliers else " (in the figures)")))
    book = is_bookkeeping(table)
    if book.any():
        cards.append(("record_function bookkeeping", f"{table.loc[book, 'pct'].sum():.1f}%"))
    return cards
