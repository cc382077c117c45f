"""HTML rendering of a profile, for Jupyter (``Profile._repr_html_``), built on pandas' Styler.

Renderers format; they never time anything. The header is :func:`~fxprof.views.text.render_header`'s
text, so the notebook and the terminal state the same facts. The table is made to be read on a
notebook page: one name column (the node; a module node's scope is the node itself, so its
``scope`` cell is left empty), the operation in plain words (``kind``: ``conv2d``, ``add``), times
with units that suit their size, text left-aligned under left-aligned headers, numbers right,
and the share drawn as a bar scaled to the largest share in the table. Inline CSS only, no
JavaScript.
"""

from __future__ import annotations

import hashlib
import html
from typing import TYPE_CHECKING

import pandas as pd

from .tables import display_name, formatter_for
from .text import default_columns, is_device_timer, ranked, render_header, spread_flags, spread_notes

if TYPE_CHECKING:
    from ..core.profile import Profile

__all__ = ["render_html", "html_columns", "TOP"]

#: rows shown by ``Profile._repr_html_``; the rest are counted in a footer
TOP = 20
_BAR = "#f4a261"
#: the notebook table's columns (``range`` only when a node has one; host time and bound
#: with the CUDA timers)
HTML_COLUMNS = ("kind", "scope", "range", "median_ms", "iqr_ms", "pct", "cum_pct")
_CELL = "padding:1px 8px;white-space:nowrap"


#: the roofline columns the notebook shows, after ``iqr_ms``, when the profile has machine peaks
HTML_ROOFLINE = ("headroom_ms", "roof_pct", "limit")


def html_columns(table: pd.DataFrame, device_timer: bool) -> list[str]:
    """The notebook table's columns: :func:`~fxprof.views.text.default_columns` from
    :data:`HTML_COLUMNS`, and :data:`HTML_ROOFLINE` when the table has roofline verdicts."""
    columns = default_columns(table, device_timer, HTML_COLUMNS)
    if "limit" in table.columns and (table["limit"] != "").any():
        at = columns.index("iqr_ms") + 1
        columns[at:at] = list(HTML_ROOFLINE)
    return list(dict.fromkeys(columns))  # the text table's roofline columns are among these


def render_html(profile: "Profile", top: int | None = TOP, sort: str | None = "pct") -> str:
    """The profile as an HTML fragment: the header, then the first ``top`` nodes by ``sort``
    (None or 0: all; sorted, the ``record_function`` enter/exit nodes are left out and their
    cost stated on a line, see :func:`~fxprof.views.text.ranked`). The ``pct`` cell carries a
    bar scaled to the largest share in the table; the ``spread`` column carries :func:`~fxprof.views.text.spread_flags` (``high``, ``tail``).
    Every name, target and header line is HTML-escaped."""
    head, *facts = render_header(profile).splitlines()
    parts = [
        '<div class="fxprof-profile" style="max-width:100%;overflow-x:auto">',
        f"<div><strong>{html.escape(head)}</strong></div>",
        *(f'<div style="font-size:smaller">{html.escape(line)}</div>' for line in facts),
    ]
    table, aside = ranked(profile.df, sort)  # a ranking leaves the ranges' enter/exit nodes out, and says so
    if table.empty:
        parts += ["<p>no nodes</p>", *([f"<div>{html.escape(aside)}</div>"] if aside else []), "</div>"]
        return "\n".join(parts)

    columns = html_columns(table, is_device_timer(profile))
    flags = spread_flags(table)
    noisy = flags != ""
    shown = table if not top else table.head(max(int(top), 0))
    view = shown[columns].copy()
    if "scope" in view and not (view["scope"] != "").any():
        view = view.drop(columns=["scope"])
    if noisy.any():
        view["spread"] = flags.loc[shown.index].to_numpy()
    view = view.reset_index()
    parts.append(_styled(view, float(table["pct"].max())))
    hidden = len(table) - len(shown)
    if hidden > 0:
        rest = float(table["pct"].iloc[len(shown):].sum())
        parts.append(
            f"<div>... {hidden} more nodes ({rest:.1f}% of node time); "
            f"<code>profile.to_dataframe(sort=&quot;pct&quot;)</code> has them all</div>"
        )
    parts += [f"<div>{html.escape(note)}</div>" for note in aside.splitlines() + spread_notes(flags, shown.index)]
    parts.append("</div>")
    return "\n".join(parts)


def _styled(view: pd.DataFrame, largest_pct: float) -> str:
    """The table through pandas' Styler: formats, alignment, the share bar."""
    formats = {}
    numeric = []
    for col in view.columns:
        fmt = formatter_for(col, view[col].dtype) if col != "node" else None
        if fmt is not None:
            formats[col] = fmt
            numeric.append(col)
    text = [c for c in view.columns if c not in numeric]
    # a stable id from the content: equal tables render equally, different ones do not clash
    uuid = "fxprof_" + hashlib.sha1(view.to_csv().encode()).hexdigest()[:10]
    styler = (
        view.style.format(formats, escape="html")
        .format_index(display_name, axis=1, escape="html")
        .hide(axis="index")
        .set_uuid(uuid)
        .set_properties(**{"text-align": "right"}, subset=numeric)
        .set_properties(**{"text-align": "left"}, subset=text)
        .set_properties(**{"max-width": "22em", "overflow": "hidden", "text-overflow": "ellipsis"},
                        subset=[c for c in ("node", "scope", "range") if c in view.columns])
        .set_table_styles(
            [
                {"selector": "", "props": "border-collapse:collapse;font-variant-numeric:tabular-nums;font-size:12px"},
                {"selector": "td, th", "props": _CELL},
                *({"selector": f"th.col_heading.col{i}", "props": f"text-align:{'right' if c in numeric else 'left'}"}
                  for i, c in enumerate(view.columns)),
            ]
        )
    )
    if "pct" in view.columns and largest_pct > 0:
        styler = styler.bar(subset=["pct"], color=_BAR, vmin=0.0, vmax=largest_pct, height=70, width=100)
    return styler.to_html()
