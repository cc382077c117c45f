"""What a profile gathered from several ranks shows in its header and its report."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..core.ranks import STRAGGLER_MARGIN, STRAGGLER_RUNS, barrier_skew, rank_inputs, straggler

if TYPE_CHECKING:
    from ..core.profile import Profile

__all__ = ["rank_header", "rank_lines", "ranks_panel"]


def rank_header(profile: "Profile") -> list[str]:
    """Header lines for a profile with ranks: the ranks, the barrier skew, the straggler."""
    meta = profile.meta
    ranks = profile.ranks
    lines = [f"ranks: {len(ranks)} of world size {meta.get('world_size', len(ranks))} "
             f"({meta.get('backend', '?')}); node statistics are over all ranks, "
             f"rank_min_ms/rank_max_ms/slowest_rank compare the ranks' medians"]
    skew = barrier_skew(profile)
    if skew is not None:
        lines.append(f"barrier before each run: the ranks arrived a median {skew['median_ms']:.3f} ms apart "
                     f"(max {skew['max_ms']:.3f} ms)")
    found = straggler(profile)
    differ = rank_inputs(meta)
    if differ:
        lines.append("inputs differ between ranks: " + "; ".join(f"rank {r}: {', '.join(v) or 'none'}" for r, v in differ.items())
                     + "; the ranks did different work, so no straggler is named (compare busy times knowing that)")
    elif found is not None:
        lines.append(
            f"straggler: rank {found['rank']}: busy {found['busy_ms']:.3f} ms per run (median; run time "
            f"minus collectives), {found['ratio']:.2f}x the other ranks' {found['others_ms']:.3f} ms, "
            f"busiest in {found['slowest_runs']} of {found['runs']} runs (rule: median above "
            f"{1 + STRAGGLER_MARGIN:.2f}x the others' and busiest in {STRAGGLER_RUNS:.0%} of runs or more)"
        )
    elif len(ranks) > 1 and not profile.runs.empty and not differ:
        lines.append(f"straggler: none (no rank's median busy time, run minus collectives, is above "
                     f"{1 + STRAGGLER_MARGIN:.2f}x the other ranks' while busiest in {STRAGGLER_RUNS:.0%} of runs)")
    if meta.get("rank_graphs"):
        lines.append(f"note: {meta['rank_graphs']}")
    return lines


def rank_lines(profile: "Profile") -> list[str]:
    """The header's ranks section (:func:`rank_header`); nothing for a profile without ranks."""
    return rank_header(profile) if profile.ranks else []


def ranks_panel(profile: "Profile") -> str:
    """The report's ranks section: each rank's time, the straggler named; "" without ranks."""
    if not profile.ranks:
        return ""
    from .html_parts import figure_html, section_html, table_html
    from .report_figures import ranks_figure

    ranks = profile.group_by("rank")
    return section_html("ranks", "Time by rank", "Medians over each rank's runs; the straggler is named.",
                        figure_html(ranks_figure(profile), "fx-ranks"), table_html(ranks, "fx-ranks-table", "ranks"))
