"""The pieces of the HTML report that every section is built of: a figure, a sortable table, a
section with its title, a row of cards, a note. Every text is HTML-escaped where it is a name."""

from __future__ import annotations

import html
from typing import TYPE_CHECKING

import pandas as pd

from .report_figures import CONFIG
from .tables import display_name, formatter_for

if TYPE_CHECKING:
    import plotly.graph_objects as go

__all__ = ["figure_html", "table_html", "section_html", "cards_html", "note_html"]


def figure_html(fig: "go.Figure | None", div_id: str) -> str:
    """``fig`` as a div of the page (its data inside; plotly.js is the page's), or "" for None."""
    if fig is None:
        return ""
    return f'<div class="fx-figure">{fig.to_html(full_html=False, include_plotlyjs=False, div_id=div_id, config=CONFIG)}</div>'


def table_html(frame: pd.DataFrame, table_id: str, caption: str = "") -> str:
    """``frame`` (index first) as a sortable, filterable HTML table: every cell formatted as the
    text tables format it (times with units), each numeric cell carrying its raw value
    (``data-v``) to sort by. Every name is HTML-escaped."""
    index_name = frame.index.name or "node"
    columns = list(frame.columns)
    formats = {c: formatter_for(c, frame[c].dtype) for c in columns}
    head = f'<th data-num="0" title="{html.escape(index_name)}">{html.escape(index_name)}</th>'
    head += "".join(f'<th data-num="{int(formats[c] is not None)}" title="{html.escape(c)}">{html.escape(display_name(c))}</th>'
                    for c in columns)
    rows = []
    values = {c: frame[c].to_numpy(dtype=object) for c in columns}
    for i, name in enumerate(frame.index):
        cells = [f"<td>{html.escape(str(name))}</td>"]
        for c in columns:
            v = values[c][i]
            missing = v is None or (not isinstance(v, str) and bool(pd.isna(v)))
            fmt = formats[c]
            if fmt is None:
                cells.append(f"<td>{'' if missing else html.escape(str(v))}</td>")
            else:
                raw = "" if missing else repr(float(v))
                cells.append(f'<td class="n" data-v="{raw}">{"" if missing else html.escape(fmt(v))}</td>')
        rows.append("<tr>" + "".join(cells) + "</tr>")
    filter_box = (f'<div class="fx-filter"><input type="search" placeholder="filter rows (any text: conv, layer2, backward)" '
                  f'data-table="{table_id}" aria-label="filter {html.escape(caption)}"> '
                  f'<span class="fx-count" id="{table_id}-count">{len(frame)} rows</span> '
                  f"<span class=\"fx-hint\">click a column's header to sort</span></div>")
    return (f'{filter_box}<div class="fx-scroll"><table class="fx-table" id="{table_id}"><thead><tr>{head}</tr></thead>'
            f"<tbody>{''.join(rows)}</tbody></table></div>")


def section_html(anchor: str, title: str, what: str, *content: str) -> str:
    return (f'<section id="{anchor}"><h2>{html.escape(title)}</h2>'
            + (f'<p class="what">{what}</p>' if what else "") + "".join(c for c in content if c) + "</section>")


def cards_html(items: list[tuple[str, str]]) -> str:
    return '<div class="cards">' + "".join(f"<div class=\"card\"><b>{html.escape(v)}</b><span>{html.escape(k)}</span></div>"
                                           for k, v in items) + "</div>"


def note_html(text: str) -> str:
    return f'<div class="note">{html.escape(text)}</div>' if text else ""
