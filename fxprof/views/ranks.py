"""What a profile gathered from several ranks shows: its header lines and its Chrome trace events."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..core.ranks import STRAGGLER_MARGIN, STRAGGLER_RUNS, barrier_skew, rank_inputs, rank_profile, straggler

if TYPE_CHECKING:
    from ..core.profile import Profile

__all__ = ["rank_header", "trace_events"]


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


def trace_events(profile: "Profile", runs: Any = "representative") -> list[dict[str, Any]]:
    """Chrome trace events of a profile with ranks: one trace process per rank (pid rank + 1),
    each with the runs ``runs`` picks among that rank's (see :func:`fxprof.export.trace_runs`).
    Runs named by number are each rank's own run numbers (``rank_run``: 0 to iters - 1 on every
    rank), as under ``torchrun`` every rank counted them.

    Each rank's runs start at its own first run's start; the barrier before that run lines the
    ranks up to within the barrier skew shown in the header.
    """
    from ..views.trace import chrome_trace_events
    from ..core.runs import parse_runs

    selection = parse_runs(runs)
    events: list[dict[str, Any]] = []
    for rank in profile.ranks:
        one = rank_profile(profile, rank)
        chosen: Any = runs
        if selection[0] == "list":  # the rank's own run numbers -> this profile's run numbers
            mine = profile.runs[profile.runs["rank"] == rank]
            own = dict(zip(mine["rank_run"].astype(int), mine["run"].astype(int)))
            missing = [r for r in selection[1] if r not in own]
            if missing:
                raise ValueError(f"rank {rank} has no run(s) {', '.join(map(str, missing))}; its runs are 0..{len(own) - 1}")
            chosen = [own[r] for r in selection[1]]
        for event in chrome_trace_events(one, chosen):
            event = {**event, "pid": rank + 1}
            if event.get("ph") == "M" and event.get("name") == "process_name":
                event["args"] = {"name": f"fxprof: {profile.meta.get('model', 'model')} rank {rank}"}
                events.append(event)
                events.append({"ph": "M", "name": "process_sort_index", "pid": rank + 1, "tid": 0, "args": {"sort_index": rank}})
                continue
            events.append(event)
    return events
