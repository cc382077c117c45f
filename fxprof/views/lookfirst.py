"""The report's "look here first" panel: the nodes with the most time above their roof.

The roofline's answer (:mod:`fxprof.core.roofline`: ``headroom_ms`` = median minus the least
time the machine's peaks allow, ``limit`` = the roof that binds, ``roof_pct`` = roof over
median) ranks the nodes by what could be won, which the share of time alone does not: a conv
at 90% of its roof is done, a small copy at 5% is not. Plain HTML, no plotly: it reads first.
"""

from __future__ import annotations

import html
from typing import Any

import numpy as np
import pandas as pd

from .tables import format_ms

__all__ = ["look_here_first", "first_panel", "LOOK_FIRST"]

#: how many nodes the panel lists
LOOK_FIRST = 5
_CELL = "text-align:left;padding:2px 14px 2px 0;font-variant-numeric:tabular-nums"
#: what a header means, as its tooltip: roof_pct is the roof's time over the node's (100%: at the roof)
_TITLES = {"roof / median": "the least time the machine's peaks allow, over the node's median: 100% runs at the "
                            "roof, 10% takes ten times the roof's time",
           "headroom": "median minus roof: the time a node at its roof would save"}


def look_here_first(table: pd.DataFrame, n: int = LOOK_FIRST) -> str:
    """An HTML table of the ``n`` nodes with the most ``headroom_ms`` (their kind, scope,
    median, roof, roof over median and limit) and one line with the total headroom by limit; ""
    when the profile has no roofline (no peaks, or no anatomy pass)."""
    if "headroom_ms" not in table.columns or not table["headroom_ms"].notna().any():
        return ""
    from ..core.names import is_weight_input
    from ..core.rollup import is_bookkeeping

    ranked = table.loc[~is_bookkeeping(table) & ~is_weight_input(table) & table["headroom_ms"].notna()]
    top = ranked.sort_values("headroom_ms", ascending=False, kind="stable").head(n)
    if top.empty or not (top["headroom_ms"] > 0).any():
        return ""
    rows = []
    for node, row in top.iterrows():
        pct = row.get("roof_pct", np.nan)
        rows.append("<tr>" + "".join(f'<td style="{_CELL}">{html.escape(str(v))}</td>' for v in (
            node, row.get("kind", ""), row.get("scope", ""), format_ms(row["median_ms"]), format_ms(row.get("roof_ms")),
            "" if not np.isfinite(pct) else f"{pct:.0f}%", format_ms(row["headroom_ms"]), row.get("limit", ""))) + "</tr>")
    heads = ("node", "kind", "scope", "median", "roof", "roof / median", "headroom", "limit")
    by_limit = table.groupby("limit", observed=True)["headroom_ms"].sum()
    total = ", ".join(f"{limit} {format_ms(by_limit[limit])}" for limit in ("compute", "memory", "overhead")
                      if limit in by_limit.index and by_limit[limit] > 0)
    return ('<table class="lookfirst" style="border-collapse:collapse"><thead><tr>'
            + "".join(f'<th style="{_CELL};border-bottom:1px solid #ccc" title="{html.escape(_TITLES.get(h, ""))}">{h}</th>'
                      for h in heads) + "</tr></thead><tbody>"
            + "".join(rows) + "</tbody></table>"
            + (f'<div class="note">time above the roof, all nodes, by limit: {html.escape(total)}</div>' if total else ""))


def first_panel(profile: Any) -> str:
    """The report's first section (:func:`look_here_first`), or "" when no node has headroom."""
    panel = look_here_first(profile.df)
    if not panel:
        return ""
    from .html_parts import section_html

    return section_html("first", "Look here first: the most time above the roof",
                        "The nodes with the most headroom (median time above their roof, the least time the "
                        "machine's peaks allow), which roof limits each and how close it runs to it (docs/roofline.md).",
                        panel)
