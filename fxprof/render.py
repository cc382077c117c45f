"""Text rendering of a profile. Renderers format; they never time anything."""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterable

import numpy as np
import pandas as pd
from tabulate import tabulate

if TYPE_CHECKING:
    from .profile import Profile

__all__ = ["render_summary", "render_body", "render_compare", "render_header", "render_table", "DEFAULT_COLUMNS", "HIGH_SPREAD", "HIGH_TAIL", "spread_flags"]

DEFAULT_COLUMNS = ("op", "target", "scope", "range", "median_ms", "mean_ms", "iqr_ms", "pct", "cum_pct")
#: shown by default with the CUDA event timer, after mean_ms
DEVICE_COLUMNS = ("host_mean_ms", "bound")
#: a node whose interquartile range exceeds this fraction of its median is flagged "high"
HIGH_SPREAD = 0.25
#: a node whose mean exceeds its median by this fraction (a few very slow samples) is flagged "tail"
HIGH_TAIL = 0.5

_FLOAT_FORMATS = {"pct": ".1f", "cum_pct": ".1f", "flops_pct": ".1f", "gflops_per_s": ".2f", "bwd_fwd_ratio": ".2f"}


def render_header(profile: "Profile") -> str:
    """What was measured, and the run's own time, spread and coverage."""
    meta = profile.meta
    parts = [
        f"fxprof: {meta.get('model', 'model')}",
        f"timer {meta.get('timer', '?')} on {meta.get('gpu') or meta.get('device', '?')}",
        f"{meta.get('warmup_runs', meta.get('warmup', '?'))} warm-up + "
        + (f"{meta.get('iters', '?')} repeats per node" if meta.get("mode") == "isolated" else f"{profile.num_runs} timed runs")
        + (f" ({len(profile.ranks)} ranks)" if len(profile.ranks) > 1 else ""),
        f"threads {meta.get('threads', '?')}",
        f"torch {meta.get('torch', '?')}",
    ]
    lines = [" | ".join(parts)]
    inputs = meta.get("inputs")
    if inputs:
        lines.append("inputs: " + ", ".join(inputs))
    if meta.get("capture") and meta.get("capture") not in ("symbolic", "graphmodule"):
        reason = meta.get("capture_reason")
        lines.append(f"capture: {meta['capture']}" + (f" ({reason})" if reason and reason != "asked for" else ""))
    if meta.get("capture_note"):
        lines.append(f"note: {meta['capture_note']}")
    if meta.get("nested_compile_note"):
        lines.append(f"note: {meta['nested_compile_note']}")
    from .environment import env_line  # what the numbers depend on, and what could not be timed right

    if env_line(meta):
        lines.append(env_line(meta))
    lines.extend(f"note: {note}" for note in meta.get("notes", ()))
    if meta.get("mode") == "isolated":
        skipped = int((profile.anatomy["skip_reason"] != "").sum())
        lines.append(
            f"mode isolated: each node re-run {meta.get('iters', '?')} times back to back on its real "
            f"inputs (steady-state cost, no whole runs); {skipped} node(s) skipped, see skip_reason"
        )
    elif profile.num_runs:
        totals = np.asarray(profile.kept_totals())
        q25, med, q75 = np.percentile(totals, [25, 50, 75])
        lines.append(
            f"run: median {med:.3f} ms (IQR {q75 - q25:.3f} ms) over {len(totals)} runs; "
            f"nodes account for {profile.coverage * 100:.1f}% of it (coverage), "
            f"the rest is interpreter overhead between nodes"
            + (" and the model's Python between graphs" if meta.get("capture") == "dynamo" else "")
        )
        lines.extend(_outlier_lines(profile))
        launch = profile.launch_bound_pct
        if not np.isnan(launch):
            lines.append(
                f"launch-bound: {launch:.1f}% of node time is in nodes where the GPU idled for most of "
                f"the node, waiting for the host to launch it (bound column; see docs/anatomy.md)"
            )
    else:
        lines.append("no timed runs recorded")
    if profile.ranks:  # torch.distributed: the ranks, their barrier skew, the straggler
        from .distributed import rank_header

        lines.extend(rank_header(profile))
    if meta.get("backward") and profile.num_runs:
        lines.append(_step_line(profile))
    if meta.get("incomplete") and meta.get("mode") == "isolated":
        lines.append("INCOMPLETE: interrupted before every node was re-run")
    elif meta.get("incomplete"):
        lines.append(f"INCOMPLETE: {profile.num_runs} of {meta.get('requested_iters', '?')} requested runs completed")
    return "\n".join(lines)


def _outlier_lines(profile: "Profile") -> list[str]:
    """Which runs the statistics leave out (or keep), and the rule."""
    from .stats import OUTLIER_FENCE_IQR, OUTLIER_MIN_RATIO, outlier_fence

    outliers = profile.outlier_runs
    if not outliers:
        return []
    fence = outlier_fence(profile.total_ms)
    listed = ", ".join(map(str, outliers[:10])) + (", ..." if len(outliers) > 10 else "")
    rule = (f"total above {fence:.3f} ms = max(Q3 + {OUTLIER_FENCE_IQR:g} IQR, {OUTLIER_MIN_RATIO:g} x median) "
            f"of the run totals")
    if profile.keep_outliers:
        return [f"outlier runs: {len(outliers)} of {profile.num_runs} (run {listed}; {rule}) are KEPT in the statistics"]
    return [f"outlier runs: {len(outliers)} of {profile.num_runs} left out of the statistics (run {listed}; {rule}); "
            f"samples kept in profile.samples, profile.keep_outliers = True uses them"]
def _step_line(profile: "Profile") -> str:
    """A training step's split by phase (summed mean node times), and backward over forward."""
    phases = profile.group_by("phase")["mean_ms"]
    split = ", ".join(f"{phase} {phases[phase]:.3f} ms" for phase in ("forward", "loss", "backward", "optimizer") if phase in phases.index)
    line = f"training step (optimizer {profile.meta['optimizer']}): " if profile.meta.get("optimizer") else "training step: "
    line += f"{split} (summed mean node times)"
    if phases.get("forward", 0) > 0 and "backward" in phases.index:
        line += f"; backward/forward {phases['backward'] / phases['forward']:.2f}"
    return line


def render_table(table: pd.DataFrame, floatfmt: dict[str, str] | None = None) -> str:
    """A DataFrame as a tabulate table, index first; missing values shown empty."""
    rows = table.reset_index()
    formats = {**_FLOAT_FORMATS, **(floatfmt or {})}
    values = [[("" if _isna(v) else v) for v in row] for row in rows.itertuples(index=False)]
    return tabulate(
        values,
        headers=list(rows.columns),
        floatfmt=[formats.get(c, ".4f") for c in rows.columns],
        intfmt=",",
        tablefmt="simple",
    )


def _isna(value: object) -> bool:
    try:
        return bool(pd.isna(value))
    except (TypeError, ValueError):
        return False


def render_summary(
    profile: "Profile",
    sort: str | None = "pct",
    top: int | None = None,
    columns: Iterable[str] | None = None,
    group_by: str | None = None,
    depth: int = 1,
) -> str:
    """The header and the per-node (or per-group) table, sorted descending, first ``top`` rows."""
    if group_by == "rank":
        return render_header(profile) + "\n\n" + render_ranks(profile.group_by("rank"))
    return render_header(profile) + "\n\n" + render_body(
        profile.df, sort=sort, top=top, columns=columns, group_by=group_by, depth=depth,
        device_timer=is_device_timer(profile),
    )


def default_columns(table: pd.DataFrame, device_timer: bool) -> list[str]:
    """The columns a summary shows unless told otherwise: ``range`` only when a node has one;
    host time, kernel time and ``bound`` with the GPU timers."""
    columns = [c for c in DEFAULT_COLUMNS if c != "range" or (table["range"] != "").any()]
    if "rank_max_ms" in table.columns and (table["rank_max_ms"] > table["rank_min_ms"]).any():  # several ranks
        columns[columns.index("iqr_ms") + 1:columns.index("iqr_ms") + 1] = ["rank_min_ms", "rank_max_ms", "slowest_rank"]
    if "phase" in table.columns and (table["phase"] != "forward").any():  # a training step
        columns.insert(0, "phase")
    if device_timer:
        at = columns.index("mean_ms") + 1
        columns[at:at] = list(DEVICE_COLUMNS)
        if table["kernel_mean_ms"].notna().any():
            columns.insert(at + 1, "kernel_median_ms")
    return columns


def spread_flags(table: pd.DataFrame) -> pd.Series:
    """Per node: ``"high"`` when the IQR exceeds :data:`HIGH_SPREAD` of the median (the middle
    half of the samples is wide), else ``"tail"`` when the mean exceeds the median by more than
    :data:`HIGH_TAIL` (a few samples so slow that they drag the mean: the shares use medians and
    are not moved), else ``""``. Nodes with one sample are never flagged."""
    several = table["calls"] > 1
    high = several & (table["iqr_ms"] > HIGH_SPREAD * table["median_ms"])
    tail = several & ~high & (table["mean_ms"] > (1.0 + HIGH_TAIL) * table["median_ms"])
    return pd.Series(np.where(high, "high", np.where(tail, "tail", "")), index=table.index, dtype=str)


def noisy_nodes(table: pd.DataFrame) -> pd.Series:
    """Nodes flagged by :func:`spread_flags` (``high`` or ``tail``)."""
    return spread_flags(table) != ""


def spread_notes(flags: pd.Series) -> list[str]:
    """The footer lines that explain the ``spread`` column's flags."""
    notes = []
    n_high, n_tail = int((flags == "high").sum()), int((flags == "tail").sum())
    if n_high:
        notes.append(
            f"spread: {n_high} node(s) have an IQR above {HIGH_SPREAD:.0%} of their median "
            f"('high'): noisy machine or too few runs; raise iters or compare medians."
        )
    if n_tail:
        notes.append(
            f"spread: {n_tail} node(s) have a mean more than {HIGH_TAIL:.0%} above their median "
            f"('tail'): a few very slow samples; pct and the order use medians, which they do not move."
        )
    return notes


def is_device_timer(profile: "Profile") -> bool:
    return profile.meta.get("timer") in ("cuda", "kernel")


def render_body(
    table: pd.DataFrame,
    sort: str | None = "pct",
    top: int | None = None,
    columns: Iterable[str] | None = None,
    group_by: str | None = None,
    depth: int = 1,
    device_timer: bool = False,
) -> str:
    """A per-node table (a Profile's ``df`` or one read from CSV) rendered, or rolled up."""
    from .profile import sort_table
    from .rollup import group_by as roll_up

    if group_by is not None:
        return _render_groups(roll_up(table, group_by, depth=depth), group_by, depth, top)
    table = sort_table(table, sort)
    columns = list(columns) if columns is not None else default_columns(table, device_timer)
    missing = [c for c in columns if c not in table.columns]
    if missing:
        raise ValueError(f"unknown columns {missing}; available: {', '.join(table.columns)}")

    flags = spread_flags(table)
    shown = table if top is None else table.head(max(int(top), 0))
    rows = shown[columns].copy()
    if (flags != "").any():
        rows["spread"] = flags.loc[shown.index]

    lines = [render_table(rows)]
    hidden = len(table) - len(shown)
    if hidden > 0:
        rest = float(table["pct"].iloc[len(shown):].sum())
        lines.append(f"... {hidden} more nodes ({rest:.1f}% of node time)")
    lines.extend(spread_notes(flags))
    return "\n".join(lines)


def _render_groups(groups: pd.DataFrame, key: str, depth: int, top: int | None) -> str:
    if groups["flops"].isna().all():
        groups = groups.drop(columns=["flops", "flops_pct"])
    shown = groups if top is None else groups.head(max(int(top), 0))
    title = f"time by {key}" + (f" (depth {depth})" if key == "scope" else "")
    lines = [title, render_table(shown)]
    hidden = len(groups) - len(shown)
    if hidden > 0:
        lines.append(f"... {hidden} more groups ({groups['pct'].iloc[len(shown):].sum():.1f}% of node time)")
    return "\n".join(lines)


def render_ranks(ranks: pd.DataFrame) -> str:
    """The per-rank table of ``group_by("rank")`` (:func:`fxprof.distributed.rank_table`)."""
    return "time by rank (medians over each rank's runs)\n" + render_table(ranks, floatfmt={"vs_median": ".2f"})


def render_compare(diff: pd.DataFrame, label_a: str = "a", label_b: str = "b", top: int | None = None) -> str:
    """A comparison from :func:`fxprof.compare` as text: totals, the whole run's ratio with its
    interval, the verdict counts, comparability warnings, the table, one-sided nodes."""
    both = diff[diff["status"] == "both"]
    a_total, b_total = float(diff["a_ms"].sum()), float(diff["b_ms"].sum())
    ratio = b_total / a_total if a_total > 0 else float("nan")
    lines = [
        f"fxprof compare: a = {label_a}",
        f"                b = {label_b}",
        f"summed median node time: a {a_total:.4f} ms, b {b_total:.4f} ms, ratio b/a {ratio:.3f}; "
        f"{len(both)} nodes in both, {int((diff['status'] == 'only_a').sum())} only in a, "
        f"{int((diff['status'] == 'only_b').sum())} only in b",
    ]
    run = diff.attrs.get("run_ratio")
    if run and not np.isnan(run["ratio"]):
        lines.append(
            f"median run b/a {run['ratio']:.3f}, {run['confidence']:.0%} interval {run['low']:.3f} to {run['high']:.3f} "
            f"(bootstrap over {run['a_runs']} and {run['b_runs']} runs; drift between the two profiles is not in it)"
        )
    if "verdict" in diff.columns and (diff["verdict"] != "").any():
        counts = diff["verdict"].value_counts()
        lines.append(
            f"verdicts: {int(counts.get('slower', 0))} slower, {int(counts.get('faster', 0))} faster, "
            f"{int(counts.get('same', 0))} same ({diff.attrs.get('test', '')})"
        )
    elif diff.attrs.get("test"):
        lines.append(f"verdicts: none ({diff.attrs['test']})")
    lines += [f"warning: the profiles differ in {w}" for w in diff.attrs.get("warnings", [])]
    lines.append("")
    shown = diff if top is None else diff.head(max(int(top), 0))
    phase = ["phase"] if "phase" in diff.columns and (diff["phase"] != "forward").any() else []  # training steps only
    columns = ["status", "kind", "scope", *phase, "a_ms", "b_ms", "delta_ms", "ratio", "p_value", "verdict", "a_pct", "b_pct", "delta_pct"]
    lines.append(render_table(shown[[c for c in columns if c in shown.columns]],
                              floatfmt={"ratio": ".3f", "p_value": ".2g", "a_pct": ".1f", "b_pct": ".1f", "delta_pct": "+.1f", "delta_ms": "+.4f"}))
    hidden = len(diff) - len(shown)
    if hidden > 0:
        lines.append(f"... {hidden} more nodes (smaller changes)")
    for status, side in (("only_a", "a"), ("only_b", "b")):
        names = list(diff.index[diff["status"] == status])
        if names:
            more = f", ... ({len(names) - 20} more)" if len(names) > 20 else ""
            lines.append(f"only in {side}: {', '.join(names[:20])}{more}")
    return "\n".join(lines)
