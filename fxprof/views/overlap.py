"""The header line of an FSDP2 profile: its all-gathers' time exposed and hidden
(:mod:`fxprof.core.overlap` defines each figure)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ..core.overlap import overlap_totals

if TYPE_CHECKING:
    from ..core.profile import Profile

__all__ = ["overlap_lines", "overlap_text"]


def overlap_lines(profile: "Profile") -> list[str]:
    """One line for a profile with FSDP's all-gather rows; none otherwise."""
    found = overlap_totals(profile)
    if found is None:
        return []
    totals = profile.kept_totals()
    run_ms = float(np.median(totals)) if len(totals) else float("nan")
    share = f", {100 * found['exposed_ms'] / run_ms:.0f}% of the run" if run_ms > 0 else ""
    head = (f"FSDP all-gathers: {found['exposed_ms']:.3f} ms exposed per run (median{share}: {found['issue_ms']:.3f} ms "
            f"issuing, {found['waited_ms']:.3f} ms waited)")
    if found["blocking"]:
        body = ("; none of it hidden behind other work: FSDP's unshard_async_op is off, so on the CPU gloo runs each "
                "all-gather inside the call that issues it")
    else:
        body = (f"; {found['hidden_pct']:.0f}% of their time in flight hidden behind other work "
                f"({found['ahead_ms']:.3f} ms of work ran between issues and waits)")
        if found["some_blocking"]:
            body += "; the layers whose unshard_async_op is off blocked in the issue"
        kept = profile.kept_runs()
        busy = [r for r in profile.busy_runs if kept is None or r in kept]
        if busy:  # time taken by other processes between an issue and its wait reads as work ahead
            body += (f" ({len(busy)} of the runs these medians are over lost time to other processes: the time "
                     f"between issues and waits holds it too)")
    most = found["most_exposed"]
    tail = f"; most exposed: {most[0][0] or '(root)'} ({most[0][1]}, {most[1]:.3f} ms)" if most else ""
    return [head + body + tail + "; per layer: fxprof.overlap(prof)"]


def overlap_text(profile: "Profile") -> str:
    """:func:`fxprof.core.overlap.overlap` as a text table (times in ms, us, ns)."""
    from tabulate import tabulate

    from ..core.overlap import overlap
    from .tables import format_ms

    table = overlap(profile)
    if table.empty:
        return "no FSDP all-gathers in this profile (fxprof.overlap needs a profile of a fully_shard-ed model)"
    rows = []
    for (layer, phase), row in table.iterrows():
        cells = [layer or "(root)", phase, int(row["gathers"])]
        cells += [format_ms(row[c]) for c in ("issue_ms", "ahead_ms", "waited_ms", "exposed_ms")]
        cells += ["" if np.isnan(row["hidden_pct"]) else f"{row['hidden_pct']:.0f}", "" if not row["gathers"] else ("yes" if row["blocking"] else "no"),
                  "" if np.isnan(row["reduce_scatter_ms"]) else format_ms(row["reduce_scatter_ms"])]
        if "most_waited_rank" in table.columns:
            cells.append("" if row["most_waited_rank"] is None or str(row["most_waited_rank"]) == "<NA>" else int(row["most_waited_rank"]))
        rows.append(cells)
    headers = ["layer", "phase", "gathers", "issue", "ahead", "waited", "exposed", "hidden_pct", "blocking", "reduce_scatter"]
    if "most_waited_rank" in table.columns:
        headers.append("most_waited_rank")
    return tabulate(rows, headers=headers, disable_numparse=True, colalign=("left", "left") + ("right",) * (len(headers) - 2))
