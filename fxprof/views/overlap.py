"""The header line and the report section of an FSDP2 profile: its all-gathers' time exposed and hidden
(:mod:`fxprof.core.overlap` defines each figure)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from ..core.overlap import overlap_totals

if TYPE_CHECKING:
    from ..core.profile import Profile

__all__ = ["overlap_lines", "overlap_text", "overlap_frame", "overlap_panel"]


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
    return [head + body + tail + "; per layer: fxprof.overlap(prof)" + _per_layer_sums(profile, found)]


#: how far (relative) the per-layer medians' sum may be from the run's median before the line says why
_SUMS_DIFFER = 0.10


def _per_layer_sums(profile: "Profile", found: dict) -> str:
    """Where the per-layer table's medians do not add up to the line's figures (each a median over
    runs of a run's sum): the table's sums and why they differ."""
    from ..core.overlap import overlap

    table = overlap(profile)
    sums = {key: float(table[key].sum()) for key in ("issue_ms", "waited_ms")}
    if all(abs(sums[k] - found[k]) <= _SUMS_DIFFER * max(abs(found[k]), 1e-9) for k in sums):
        return ""
    return (f" (its rows, each layer's own medians over runs, add up to {sums['issue_ms']:.3f} ms issuing and "
            f"{sums['waited_ms']:.3f} ms waited: the figures here are medians of each run's sums, and a median of sums "
            f"is not the sum of medians when the slow gathers fall on different layers from run to run, as when "
            f"the time a rank waits for the others moves between layers)")


def overlap_text(profile: "Profile") -> str:
    """:func:`overlap_frame` as a text table (times in ms, us, ns)."""
    from tabulate import tabulate

    from ..core.overlap import overlap_notes
    from .tables import format_ms

    table = overlap_frame(profile)
    notes = "".join(f"\nnote: {note}" for note in overlap_notes(profile))
    if table.empty:
        if notes:  # the rows are there, but no timed call of them is left
            return "no FSDP all-gather left in the runs the figures keep" + notes
        return "no FSDP all-gathers in this profile (fxprof.overlap needs a profile of a fully_shard-ed model)"
    ranked = "most_waited_rank" in table.columns
    rows = []
    for layer, row in table.iterrows():
        cells = [layer, row["phase"], int(row["gathers"])]
        cells += ["" if pd.isna(row[c]) else format_ms(row[c])
                  for c in ("issue_ms", "ahead_ms", "waited_ms", "exposed_ms")]
        cells += ["" if pd.isna(row["hidden_pct"]) else f"{row['hidden_pct']:.0f}", row["blocking"],
                  "" if pd.isna(row["reduce_scatter_ms"]) else format_ms(row["reduce_scatter_ms"])]
        if ranked:
            cells.append("" if pd.isna(row["most_waited_rank"]) else int(row["most_waited_rank"]))
        rows.append(cells)
    headers = ["layer", "phase", "gathers", "issue", "ahead", "waited", "exposed", "hidden_pct", "blocking", "reduce_scatter"]
    headers += ["most_waited_rank"] if ranked else []
    return tabulate(rows, headers=headers, disable_numparse=True, colalign=("left", "left") + ("right",) * (len(headers) - 2)) + notes


def overlap_frame(profile: "Profile") -> "pd.DataFrame":
    """:func:`fxprof.core.overlap.overlap` for a page: indexed by layer (``(root)`` for the root),
    the phase a column, ``hidden_pct`` rounded to whole percent, ``blocking`` in words (blank where
    the layer and phase have no all-gather)."""
    from ..core.overlap import overlap

    table = overlap(profile).reset_index()
    if table.empty:
        return table.set_index("layer")
    table["layer"] = table["layer"].replace("", "(root)")
    table["hidden_pct"] = table["hidden_pct"].round(0)
    table["blocking"] = ["" if not g else ("yes" if b else "no") for g, b in zip(table["gathers"], table["blocking"])]
    return table.set_index("layer")


def overlap_panel(profile: "Profile") -> str:
    """The report's FSDP section: each layer's all-gathers, exposed and hidden
    (:mod:`fxprof.core.overlap`); "" without FSDP's all-gather rows."""
    gathers = overlap_frame(profile)
    if gathers.empty:
        return ""
    from .html_parts import note_html, section_html, table_html

    return section_html("overlap", "FSDP all-gathers per layer: exposed and hidden",
                        "Per layer and phase, medians over the runs: the call that issues the all-gather, the work "
                        "that ran before its wait (ahead), the wait, the time the layer was kept waiting (exposed = "
                        "issue + waited), and the share of the collective's time in flight that other work ran "
                        "beside (hidden_pct); blocking: FSDP issued it synchronously, so on the CPU it ran inside "
                        "the issue (docs/distributed.md).",
                        table_html(gathers, "fx-overlap", "overlap"), note_html(" ".join(overlap_lines(profile))))
