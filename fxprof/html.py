"""HTML rendering of a profile, for Jupyter (``Profile._repr_html_``).

Renderers format; they never time anything. The header is :func:`~fxprof.render.render_header`'s
text, so the notebook and the terminal state the same facts. Inline CSS only, no JavaScript.
"""

from __future__ import annotations

import html
from typing import TYPE_CHECKING

import pandas as pd

from .render import default_columns, is_device_timer, render_header, spread_flags, spread_notes

if TYPE_CHECKING:
    from .profile import Profile

__all__ = ["render_html", "TOP"]

#: rows shown by ``Profile._repr_html_``; the rest are counted in a footer
TOP = 20
_BAR = "#f4a261"
_CELL = "padding:1px 8px"


def render_html(profile: "Profile", top: int | None = TOP, sort: str | None = "pct") -> str:
    """The profile as an HTML fragment: the header, then the first ``top`` nodes by ``sort``.

    The ``pct`` cell carries a bar whose length is the node's share of node time (a full cell
    is 100%; ``pct`` is the share of summed median times). The ``spread`` column carries
    :func:`~fxprof.render.spread_flags` (``high``, ``tail``).
    Every name, target and header line is HTML-escaped.
    """
    head, *facts = render_header(profile).splitlines()
    parts = [
        '<div class="fxprof-profile">',
        f"<div><strong>{html.escape(head)}</strong></div>",
        *(f'<div style="font-size:smaller">{html.escape(line)}</div>' for line in facts),
    ]
    table = profile.to_dataframe(sort=sort)
    if table.empty:
        parts += ["<p>no nodes</p>", "</div>"]
        return "\n".join(parts)

    columns = default_columns(table, is_device_timer(profile))
    flags = spread_flags(table)
    noisy = flags != ""
    shown = table if top is None else table.head(max(int(top), 0))

    header = "".join(f'<th style="{_CELL}">{html.escape(c)}</th>' for c in ["node", *columns])
    if noisy.any():
        header += f'<th style="{_CELL}">spread</th>'
    rows = []
    for node, row in shown.iterrows():
        cells = [f'<td style="{_CELL};text-align:left">{html.escape(str(node))}</td>']
        cells += [_cell(c, row[c]) for c in columns]
        if noisy.any():
            cells.append(f'<td style="{_CELL}">{html.escape(flags[node])}</td>')
        rows.append("<tr>" + "".join(cells) + "</tr>")
    parts += [
        '<table style="border-collapse:collapse;font-variant-numeric:tabular-nums">',
        f"<thead><tr>{header}</tr></thead>",
        "<tbody>",
        *rows,
        "</tbody></table>",
    ]
    hidden = len(table) - len(shown)
    if hidden > 0:
        rest = float(table["pct"].iloc[len(shown):].sum())
        parts.append(
            f"<div>... {hidden} more nodes ({rest:.1f}% of node time); "
            f"<code>profile.to_dataframe(sort=&quot;pct&quot;)</code> has them all</div>"
        )
    parts += [f"<div>{html.escape(note)}</div>" for note in spread_notes(flags)]
    parts.append("</div>")
    return "\n".join(parts)


def _cell(column: str, value: object) -> str:
    if isinstance(value, float) and pd.isna(value):
        return f'<td style="{_CELL}"></td>'
    if column == "pct":
        width = min(max(float(value), 0.0), 100.0)
        bar = f"background:linear-gradient(90deg, {_BAR} {width:.2f}%, transparent {width:.2f}%)"
        return f'<td style="{_CELL};text-align:right;min-width:8em;{bar}">{value:.1f}</td>'
    if column == "cum_pct":
        return f'<td style="{_CELL};text-align:right">{value:.1f}</td>'
    if isinstance(value, float):
        return f'<td style="{_CELL};text-align:right">{value:.4f}</td>'
    return f'<td style="{_CELL};text-align:left">{html.escape(str(value))}</td>'
