"""Text rendering of a profile. Renderers format; they never time anything."""

from __future__ import annotations

import math
import textwrap
from typing import TYPE_CHECKING, Iterable, Sequence

import numpy as np
import pandas as pd

from ..columns import group_columns
from ..vocab import EVENT_TIMERS
from .memory import memory_columns
from .options import ViewOptions
from .sections import HEADER
from .tables import format_ms, hidden_note, ranked, render_fitted

if TYPE_CHECKING:
    from ..core.profile import Profile

__all__ = ["render_summary", "render_body", "render_compare", "render_blocks", "render_header", "render_table", "DEFAULT_COLUMNS", "GROUP_COLUMNS", "HIGH_SPREAD", "HIGH_TAIL", "spread_flags", "ranked"]

#: the node table's default columns: the operation in plain words, where it runs, its times
DEFAULT_COLUMNS = ("kind", "scope", "range", "median_ms", "mean_ms", "iqr_ms", "pct", "cum_pct")
#: shown by default with the CUDA event timer, after mean_ms
DEVICE_COLUMNS = ("host_mean_ms", "bound")
#: shown by default when the table is sorted by a roofline column (``--sort headroom_ms``)
ROOFLINE_SHOWN = ("roof_ms", "headroom_ms", "roof_pct", "limit")
#: the roofline columns a sort brings into view
ROOFLINE_SORTS = ("bytes", "intensity", "roof_ms", "roof_pct", "headroom_ms", "limit")
#: a node whose interquartile range exceeds this fraction of its median is flagged "high"
HIGH_SPREAD = 0.25
#: a node whose mean exceeds its median by this fraction (a few very slow samples) is flagged "tail"
HIGH_TAIL = 0.5
#: when a table is too wide, these columns go first, in this order (then others, from the right)
DROP_FIRST = ("status", "a_pct", "b_pct", "cum_pct", "mean_ms", "target", "op", "range", "host_mean_ms", "iqr_ms", "flops_pct", "p_value", "scope", "kind")
#: columns of a roll-up table (``Profile.group_by``)
GROUP_COLUMNS = group_columns()
#: columns of a comparison shown by default (any column of ``fxprof.compare`` may be chosen);
#: ``phase`` joins them for training steps
COMPARE_DEFAULT = ("status", "kind", "scope", "a_ms", "b_ms", "delta_ms", "ratio", "p_value", "verdict", "a_pct", "b_pct", "delta_pct")



def render_header(profile: "Profile") -> str:
    """What was measured, and the run's own time, spread and coverage: the lines of every
    section of :data:`fxprof.views.sections.HEADER`, in its order."""
    return "\n".join(line for section in HEADER for line in section.lines(profile))


def render_table(table: pd.DataFrame, width: int | None = None, keep: Iterable[str] = ()) -> str:
    """A DataFrame as a text table, index first: times with units that suit their size,
    missing values empty; fitted to ``width`` columns (None: no limit) with a note of what
    was hidden. See :mod:`fxprof.views.tables`."""
    text, dropped, shortened = render_fitted(table, width, keep=keep, drop_first=DROP_FIRST)
    note = hidden_note(dropped, shortened, width)
    if note and width:
        note = textwrap.fill(note, width, subsequent_indent="  ")
    return text + ("\n" + note if note else "")


def _known_columns(table: pd.DataFrame, columns: Iterable[str], what: str) -> list[str]:
    """``columns`` as a list, each one a column of ``table``; else ValueError naming the others."""
    columns = list(columns)
    missing = [c for c in columns if c not in table.columns]
    if missing:
        raise ValueError(f"unknown {what} {missing}; available: {', '.join(table.columns)}")
    return columns


def _rows(top: int | None) -> int | None:
    """``top`` as a row count: None and 0 both mean every row."""
    if top is None or int(top) == 0:
        return None
    if int(top) < 0:
        raise ValueError(f"top must be >= 0 (0 or None shows every row), got {top}")
    return int(top)


def render_summary(profile: "Profile", view: ViewOptions = ViewOptions()) -> str:
    """The header and the per-node (or per-group) table, as ``view`` says."""
    header = render_header(profile)
    width = view.width
    if width:  # header lines are prose: wrap them rather than hide anything
        header = "\n".join(textwrap.fill(line, width, subsequent_indent="  ") for line in header.splitlines())
    if view.group_by == "rank":
        return header + "\n\n" + render_ranks(profile.group_by("rank"), width)
    from .fidelity import outside_note, outside_row

    return header + "\n\n" + render_body(profile.df, view, device_timer=is_device_timer(profile),
                                          outside=(outside_row(profile), outside_note(profile)))


def default_columns(table: pd.DataFrame, device_timer: bool, base: Iterable[str] = DEFAULT_COLUMNS) -> list[str]:
    """The columns a summary shows unless told otherwise (``base``; the notebook view passes its
    own): ``range`` only when a node has one; ``phase`` for a training step; the rank spread
    for several ranks; host time, kernel time and ``bound`` with the GPU timers, after the
    last time column of ``base``."""
    columns = [c for c in base if c != "range" or (table["range"] != "").any()]
    if "origins" in table.columns and (table["origins"] != "").any() and "scope" in columns:  # a compiled model's kernels
        columns.insert(columns.index("scope") + 1, "origins")
    if "rank_max_ms" in table.columns and (table["rank_max_ms"] > table["rank_min_ms"]).any():  # several ranks
        columns[columns.index("iqr_ms") + 1:columns.index("iqr_ms") + 1] = ["rank_min_ms", "rank_max_ms", "slowest_rank"]
    if "phase" in table.columns and (table["phase"] != "forward").any():  # a training step
        columns.insert(0, "phase")
    if device_timer:
        at = columns.index("mean_ms" if "mean_ms" in columns else "median_ms") + 1
        columns[at:at] = list(DEVICE_COLUMNS)
        if table["kernel_mean_ms"].notna().any():
            columns.insert(at + 1, "kernel_median_ms")
    columns += memory_columns(table)
    if "limit" in table.columns and (table["limit"].astype(str) != "").any():  # peaks known: the roofline's answer, last
        columns += [c for c in ROOFLINE_DEFAULT if c not in columns]
    return columns


#: the roofline's columns in the default table when the peaks are known: what could be won, and what limits it
ROOFLINE_DEFAULT = ("headroom_ms", "limit")


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


def spread_notes(flags: pd.Series, shown: Iterable[str] | None = None) -> list[str]:
    """The footer lines that explain the ``spread`` column's flags; with ``shown`` (the rows
    printed), also the flagged nodes below the fold, by name, and how to see them."""
    notes = []
    n_high, n_tail = int((flags == "high").sum()), int((flags == "tail").sum())
    hidden = [] if shown is None else [n for n in flags.index[flags != ""] if n not in set(shown)]
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
    if hidden:
        more = f", ... ({len(hidden) - 8} more)" if len(hidden) > 8 else ""
        notes.append(f"spread: {len(hidden)} of the flagged node(s) are below the rows shown: {', '.join(hidden[:8])}{more} "
                     f"(see them: summary(sort=\"iqr_ms\"), or fxprof show FILE --sort iqr_ms)")
    return notes


def is_device_timer(profile: "Profile") -> bool:
    return profile.meta.get("timer") in EVENT_TIMERS


def render_body(table: pd.DataFrame, view: ViewOptions = ViewOptions(), device_timer: bool = False,
                outside: tuple[pd.DataFrame, str] | None = None) -> str:
    """A per-node table (a Profile's ``df`` or one read from CSV) rendered, or rolled up, as
    ``view`` says (see :class:`~fxprof.views.options.ViewOptions`); ``device_timer``: the
    profile's timer has a device timeline (its host columns are shown). A sorted table leaves
    out ``record_function`` enter/exit nodes unless ``view.bookkeeping`` and says what they
    cost on a line of its own (see :func:`ranked`). ``outside``: a row of time in no node and the
    line that says what it is (:mod:`fxprof.views.fidelity`), shown after the node rows, unranked."""
    from ..core.rollup import group_by as roll_up

    columns: Sequence[str] | None
    sort, top, columns, group_by, depth = view.sort, view.top, view.columns, view.group_by, view.depth
    ascending, width = view.ascending, view.width

    if group_by is not None:
        groups = roll_up(table, group_by, depth=depth)
        return _render_groups(groups, group_by, depth, top, sort, ascending, columns, width)
    table, aside = ranked(table, sort, ascending, view.bookkeeping)
    explicit = columns is not None
    roofline = not explicit and sort in ROOFLINE_SORTS and "limit" in table.columns and (table["limit"] != "").any()
    chosen = default_columns(table, device_timer)
    if roofline:  # the nodes with the most time above their roof: say how far, and which roof
        at = chosen.index("iqr_ms") + 1 if "iqr_ms" in chosen else len(chosen)
        chosen[at:at] = [c for c in ROOFLINE_SHOWN if c not in chosen]
    columns = _known_columns(table, columns if columns is not None else chosen, "columns")

    flags = spread_flags(table)
    count = _rows(top)
    shown = table if count is None else table.head(count)
    rows = shown[columns].copy()
    if not explicit and "scope" in rows and not (rows["scope"] != "").any():
        rows = rows.drop(columns=["scope"])
    if (flags != "").any():
        rows["spread"] = flags.loc[shown.index]
    extra, extra_note = outside if outside is not None else (pd.DataFrame(), "")
    if len(extra):  # after every node row, in no ranking; the rows then add up to the model's own run
        rows = pd.concat([rows, extra.reindex(columns=[c for c in rows.columns if c in extra.columns])]).reindex(columns=rows.columns)

    keep = {"pct", "spread"} | ({sort} if sort else set()) | ({"limit", "roof_pct"} if roofline else set())
    lines = [render_table(rows, width, keep=keep)]
    hidden = len(table) - len(shown)
    if hidden > 0:
        rest = float(table["pct"].iloc[len(shown):].sum())
        lines.append(f"... {hidden} more nodes ({rest:.1f}% of node time)")
    notes = (aside.splitlines() + ([extra_note] if len(extra) and extra_note else []) + spread_notes(flags, shown.index)
             + (roofline_notes(table) if roofline else []))
    lines.extend(textwrap.fill(note, width, subsequent_indent="  ") if width else note for note in notes)
    return "\n".join(lines)


def roofline_notes(table: pd.DataFrame) -> list[str]:
    """What the roofline columns say, in one footer line."""
    by_limit = table.groupby("limit", observed=True)["headroom_ms"].sum()
    parts = [f"{limit} {format_ms(by_limit[limit])}" for limit in ("compute", "memory", "overhead") if limit in by_limit.index]
    return [f"roofline: roof = the least time at the machine peaks, max(flops / compute rate, bytes / bandwidth); "
            f"roof_pct = roof over median (100: at the roof); headroom = median - roof; time above the roof by limit: "
            f"{', '.join(parts)} (docs/roofline.md)"]


def _render_groups(groups: pd.DataFrame, key: str, depth: int, top: int | None, sort: str | None = "pct",
                   ascending: bool = False, columns: Iterable[str] | None = None, width: int | None = None) -> str:
    from ..core.profile import sort_table

    groups = sort_table(groups, sort, ascending, what="a roll-up")
    if columns is None:
        columns = [c for c in groups.columns if not (c in ("flops", "flops_pct") and groups["flops"].isna().all())
                   and not (c in ("roof_ms", "headroom_ms") and groups[c].isna().all())
                   and c not in ("mem_temp_bytes", "mem_live_bytes", "mem_saved_bytes")]
    columns = _known_columns(groups, columns, "roll-up columns")
    count = _rows(top)
    shown = groups if count is None else groups.head(count)
    title = f"time by {key}" + (f" (depth {depth})" if key == "scope" else "")
    lines = [title, render_table(shown[columns], width, keep={"pct", sort or "pct"})]
    hidden = len(groups) - len(shown)
    if hidden > 0:
        lines.append(f"... {hidden} more groups ({groups['pct'].iloc[len(shown):].sum():.1f}% of node time)")
    return "\n".join(lines)


def _b_against_a(speedup: float) -> str:
    """``b 1.44x slower (speed-up a/b 0.70x)``: the words of plain compare's headline (b against
    a), then the number the ``speedup`` column holds per block (issue 47 #14: plain compare said
    ``b 1.44x slower`` where this said only ``speed-up a/b 0.70x`` for the same pair)."""
    from .headline import ratio_words

    words = ratio_words(1.0 / speedup) if speedup and math.isfinite(speedup) and speedup > 0 else ""
    # "#": three significant figures with their trailing zeros ("2.00x", not "2x" beside "b 2.00x faster")
    return (f"b {words} (speed-up a/b {speedup:#.3g}x)" if words else f"speed-up a/b {speedup:#.3g}x")


def render_blocks(blocks: pd.DataFrame, label_a: str = "a", label_b: str = "b",
                  view: ViewOptions = ViewOptions(sort=None)) -> str:
    """A per-block comparison (``fxprof.compare(a, b, by="scope")``) as text: the totals and
    speed-up, then one row a block (``compare``'s order unless ``view.sort``; ``view.columns``
    chosen, ``view.top`` rows, fitted to ``view.width``)."""
    from ..core.profile import sort_table

    columns: Sequence[str] | None
    top, sort, ascending, columns, width = view.top, view.sort, view.ascending, view.columns, view.width
    attrs = dict(blocks.attrs)
    blocks = sort_table(blocks, sort, ascending, what="a comparison by scope")
    if columns is not None:
        blocks = blocks[_known_columns(blocks, columns, "comparison columns")]
    lines = [
        f"fxprof compare by scope (depth {attrs.get('depth', 1)}): a = {label_a}",
        f"                b = {label_b}",
    ]
    if attrs.get("run_speedup"):  # the headline: the runs first (fxprof.views.headline)
        runs = (f"median run a {format_ms(attrs['a_run_ms'])}, b {format_ms(attrs['b_run_ms'])}: "
                if attrs.get("a_run_ms") is not None else "median run ")
        lines.append(f"run: {runs}{_b_against_a(attrs['run_speedup'])}")
    lines += [
        f"blocks (sum of node or kernel medians, without the time between them): a "
        f"{format_ms(attrs.get('a_total_ms', float('nan')))}, b {format_ms(attrs.get('b_total_ms', float('nan')))}: "
        f"{_b_against_a(attrs.get('speedup', float('nan')))}",
        "",
    ]
    count = _rows(top)
    shown = blocks if count is None else blocks.head(count)
    lines.append(render_table(shown, width, keep={c for c in ("a_ms", "b_ms", "speedup") if c in shown.columns}))
    if len(blocks) > len(shown):
        lines.append(f"... {len(blocks) - len(shown)} more blocks")
    lines.extend(textwrap.fill(f"folded: {note}", width, subsequent_indent="  ") if width else f"folded: {note}"
                 for note in attrs.get("notes", []))
    for side, other in (("a", "b"), ("b", "a")):
        only = attrs.get("one_sided", {}).get(side, [])
        if only:
            note = (f"only in {side}: {', '.join(only[:6])}{', ...' if len(only) > 6 else ''} (no row of {other} and no "
                    f"kernel of {other} computes their work: {other} does not run it, e.g. an eval dropout compiled away)")
            lines.append(textwrap.fill(note, width, subsequent_indent="  ") if width else note)
    return "\n".join(lines)


def render_ranks(ranks: pd.DataFrame, width: int | None = None) -> str:
    """The per-rank table of ``group_by("rank")`` (:func:`fxprof.core.ranks.rank_table`)."""
    return "time by rank (medians over each rank's runs)\n" + render_table(ranks, width, keep={"median_ms", "vs_median"})


def render_compare(diff: pd.DataFrame, label_a: str = "a", label_b: str = "b",
                   view: ViewOptions = ViewOptions(sort=None)) -> str:
    """A comparison from :func:`fxprof.compare` as text: totals, the whole run's ratio with its
    interval, the verdict counts, comparability warnings, the table, one-sided nodes.

    Rows keep ``compare``'s order (largest absolute change first) unless ``view.sort`` names a
    column (descending unless ``view.ascending``); ``view.columns`` picks the columns shown."""
    columns: Sequence[str] | None
    top, sort, ascending, columns, width = view.top, view.sort, view.ascending, view.columns, view.width
    from .headline import compare_headline

    lines = [
        f"fxprof compare: a = {label_a}",
        f"                b = {label_b}",
        *compare_headline(diff),
    ]
    if "verdict" in diff.columns and (diff["verdict"] != "").any():
        counts = diff["verdict"].value_counts()
        lines.append(
            f"verdicts: {int(counts.get('slower', 0))} slower, {int(counts.get('faster', 0))} faster, "
            f"{int(counts.get('same', 0))} same"
            + (f", {int(counts.get('noisy', 0))} noisy (samples in two modes or spread beyond the change: held back, "
               f"the noise column says why)" if counts.get("noisy", 0) else "")
            + (f", {int(counts.get('too few runs', 0))} too few runs to tell" if counts.get("too few runs", 0) else "")
            + f" ({diff.attrs.get('test', '')})"
        )
    elif diff.attrs.get("test"):
        lines.append(f"verdicts: none ({diff.attrs['test']})")
    lines += [f"warning: {w}" for w in diff.attrs.get("warnings", [])]
    if width:  # prose lines wrap; only the table is fitted
        lines = [textwrap.fill(line, width, subsequent_indent="  ") for line in lines]
    lines.append("")
    from ..core.profile import sort_table

    diff = sort_table(diff, sort, ascending, what="a comparison")
    if columns is None:
        columns = list(COMPARE_DEFAULT)
        if "phase" in diff.columns and (diff["phase"] != "forward").any():  # training steps only
            columns.insert(3, "phase")
        if "verdict" in diff.columns and (diff["verdict"] == "noisy").any():
            columns.append("noise")  # why a verdict was held back
        columns = [c for c in columns if c in diff.columns]  # a comparison read from an older fxprof
    columns = _known_columns(diff, columns, "comparison columns")
    count = _rows(top)
    shown = diff if count is None else diff.head(count)
    reasons: list[str] = []
    if width and "noise" in columns and "verdict" in shown.columns and (shown["verdict"] == "noisy").any():
        # the reasons are sentences: below the table, whole, rather than cut to fit a column
        columns = [c for c in columns if c != "noise"]
        reasons = [textwrap.fill(f"noisy {node}: {shown.at[node, 'noise']}", width, subsequent_indent="  ")
                   for node in shown.index[shown["verdict"] == "noisy"]]
    lines.append(render_table(shown[columns], width, keep={"delta_ms", "ratio", "verdict", sort or "delta_ms"}))
    lines += reasons
    hidden = len(diff) - len(shown)
    if hidden > 0:
        lines.append(f"... {hidden} more nodes" + (" (smaller changes)" if sort is None else ""))
    for status, side in (("only_a", "a"), ("only_b", "b")):
        names = list(diff.index[diff["status"] == status])
        if names:
            more = f", ... ({len(names) - 20} more)" if len(names) > 20 else ""
            lines.append(f"only in {side}: {', '.join(names[:20])}{more}")
    return "\n".join(lines)
