"""A report to look at: one self-contained interactive HTML file per profile or per comparison.

Built with plotly (an optional dependency: ``pip install 'fxprof[report]'``), as
HolisticTraceAnalysis draws its figures. The file holds everything it needs: plotly.js, every
figure's data, the styles and a small script that sorts and filters the tables. It makes no
network request when opened; it opens by double-click, offline.

What a profile's report shows (each derived from the DataFrame API, like every other view), its
sections in the order of :data:`fxprof.views.sections.REPORT`:

- the header facts (:func:`~fxprof.views.text.render_header`: model, device, timer, runs,
  coverage and interpreter overhead, outlier runs, environment) and a few key numbers;
- the module tree as an icicle sized by median time: root > stages > blocks > layers > nodes,
  functional nodes included, the phases of a training step on top, a box per rank of a
  gathered profile (each its rank's own runs); click a box to zoom.
  Nodes are coloured by op kind; the enter/exit nodes of ``record_function`` ranges are
  folded into a grey "range bookkeeping" box of their module;
- time by op kind (the tree's colour key), by ``record_function`` range, by training phase,
  by ``torch.distributed`` rank, when the profile has them;
- per-run time distributions of the top nodes, and the run totals over time (drift, outlier
  runs marked);
- the full node table (every column of ``profile.df``, times with units), sortable and
  filterable.

A comparison's report shows the verdict counts and the whole run's ratio, the nodes and the
blocks that moved most (changes in words: ``6.4x faster``), both profiles' run totals, and the
comparison table.

The figure functions (:func:`tree_figure`, :func:`distribution_figure`, :func:`runs_figure`,
:func:`groups_figure`, :func:`compare_figure`, :func:`blocks_figure`) return plotly figures,
which Jupyter shows interactively; :func:`show_report` gives the whole report in a notebook.
"""

from __future__ import annotations

import datetime
import html
import os
from typing import Any

import numpy as np
import pandas as pd

from ..core.compare import MIN_EFFECT, compare, compare_blocks
from ..core.profile import Profile
from ..vocab import __version__
from .headline import report_cards
from .html_parts import cards_html, figure_html, section_html, table_html
from .options import ViewOptions
from .report_figures import (
    FONT,
    MISSING_PLOTLY,
    blocks_figure,
    compare_figure,
    distribution_figure,
    groups_figure,
    kind_colors,
    plotly_go,
    ranks_figure,
    runs_figure,
    totals_figure,
    tree_figure,
)
from .sections import REPORT
from .tables import format_ms, model_label
from .text import render_compare, render_header

__all__ = [
    "MISSING_PLOTLY", "Report", "show_report", "render_report", "render_compare_report", "write_report",
    "write_compare_report", "tree_figure", "distribution_figure", "runs_figure", "groups_figure", "ranks_figure", "compare_figure",
    "blocks_figure", "kind_colors",
]

# Written by hand because no plotting library sorts and filters an HTML table, and the report's
# only dependency is plotly: click a header to sort (numbers by their raw value, missing last),
# type to keep the rows that contain the text.
_SCRIPT = """
(function () {
  function sortBy(table, col, th) {
    var body = table.tBodies[0], rows = Array.prototype.slice.call(body.rows);
    var numeric = th.getAttribute('data-num') === '1';
    var down = th.getAttribute('data-dir') !== 'desc';
    if (!numeric && !th.hasAttribute('data-dir')) down = false;
    Array.prototype.forEach.call(th.parentNode.children, function (h) { h.removeAttribute('data-dir'); });
    th.setAttribute('data-dir', down ? 'desc' : 'asc');
    function key(row) {
      var cell = row.cells[col];
      if (!numeric) return cell.textContent;
      var v = cell.getAttribute('data-v');
      return v === '' || v === null ? NaN : parseFloat(v);
    }
    rows.sort(function (a, b) {
      var x = key(a), y = key(b);
      if (numeric) {
        if (isNaN(x)) return isNaN(y) ? 0 : 1;
        if (isNaN(y)) return -1;
        return down ? y - x : x - y;
      }
      return down ? y.localeCompare(x) : x.localeCompare(y);
    });
    rows.forEach(function (r) { body.appendChild(r); });
  }
  document.querySelectorAll('table.fx-table').forEach(function (table) {
    Array.prototype.forEach.call(table.tHead.rows[0].cells, function (th, col) {
      th.addEventListener('click', function () { sortBy(table, col, th); });
    });
  });
  document.querySelectorAll('.fx-filter input').forEach(function (input) {
    input.addEventListener('input', function () {
      var table = document.getElementById(input.getAttribute('data-table'));
      var words = input.value.toLowerCase().split(/\\s+/).filter(Boolean), shown = 0;
      Array.prototype.forEach.call(table.tBodies[0].rows, function (row) {
        var text = row.textContent.toLowerCase();
        var keep = words.every(function (w) { return text.indexOf(w) >= 0; });
        row.style.display = keep ? '' : 'none';
        if (keep) shown += 1;
      });
      document.getElementById(table.id + '-count').textContent = shown + ' of ' + table.tBodies[0].rows.length + ' rows';
    });
  });
})();
"""

_STYLE = """
:root { color-scheme: light; }
body { font-family: %(font)s; margin: 0; color: #1f2933; background: #f6f7f9; }
main { max-width: 1240px; margin: 0 auto; padding: 16px 24px 40px; }
header { background: #1f2933; color: #f5f7fa; padding: 18px 24px 14px; }
header .inner { max-width: 1240px; margin: 0 auto; }
header h1 { font-size: 20px; margin: 0 0 6px; font-weight: 600; }
header .facts { font-size: 12.5px; line-height: 1.5; color: #cbd2d9; white-space: pre-wrap; overflow-wrap: anywhere; }
nav { font-size: 13px; margin: 10px 0 0; }
nav a { color: #9fd3ff; margin-right: 14px; text-decoration: none; }
.cards { display: flex; flex-wrap: wrap; gap: 10px; margin: 16px 0 4px; }
.card { background: white; border: 1px solid #e1e5ea; border-radius: 6px; padding: 8px 14px; min-width: 120px; }
.card b { display: block; font-size: 18px; font-variant-numeric: tabular-nums; }
.card span { font-size: 12px; color: #52606d; }
section { background: white; border: 1px solid #e1e5ea; border-radius: 6px; margin: 16px 0; padding: 12px 16px; }
section h2 { font-size: 16px; margin: 2px 0 6px; }
section p.what { font-size: 13px; color: #52606d; margin: 0 0 8px; }
.note { font-size: 12.5px; color: #52606d; margin: 4px 0; }
.fx-figure { width: 100%%; }
.fx-filter { margin: 6px 0; font-size: 12.5px; }
.fx-filter input { width: 340px; max-width: 60%%; padding: 4px 8px; border: 1px solid #c8ced6; border-radius: 4px; }
.fx-count { color: #52606d; margin-left: 8px; }
.fx-hint { color: #8895a3; margin-left: 8px; }
.fx-scroll { max-height: 70vh; overflow: auto; border: 1px solid #e1e5ea; }
table.fx-table { border-collapse: collapse; font-size: 12px; font-variant-numeric: tabular-nums; width: max-content; }
table.fx-table th { position: sticky; top: 0; background: #eef1f5; cursor: pointer; text-align: left; padding: 4px 8px;
                    border-bottom: 1px solid #c8ced6; white-space: nowrap; user-select: none; }
table.fx-table th[data-num="1"] { text-align: right; }
table.fx-table th[data-dir="desc"]::after { content: " \\25BC"; }
table.fx-table th[data-dir="asc"]::after { content: " \\25B2"; }
table.fx-table td { padding: 2px 8px; border-bottom: 1px solid #f0f2f5; white-space: nowrap; max-width: 28em;
                    overflow: hidden; text-overflow: ellipsis; }
table.fx-table td.n { text-align: right; }
table.fx-table tbody tr:hover { background: #fff7e6; }
footer { font-size: 12px; color: #7b8794; margin-top: 18px; }
""" % {"font": FONT}


def _page(title: str, head_lines: list[str], nav: list[tuple[str, str]], body: list[str]) -> str:
    from plotly.offline import get_plotlyjs

    facts = html.escape("\n".join(head_lines))
    links = "".join(f'<a href="#{anchor}">{html.escape(text)}</a>' for anchor, text in nav)
    made = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    return (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
        f"<meta name=\"generator\" content=\"fxprof {__version__}\"><title>{html.escape(title)}</title>"
        f"<style>{_STYLE}</style>"
        f"<script>{get_plotlyjs()}</script></head><body>"
        f"<header><div class=\"inner\"><h1>{html.escape(title)}</h1><div class=\"facts\">{facts}</div>"
        f"<nav>{links}</nav></div></header><main>{''.join(body)}"
        f"<footer>fxprof {__version__}, {made}. One self-contained file: plotly.js and every figure's data are "
        "inside it; it makes no network request.</footer></main>"
        f"<script>{_SCRIPT}</script></body></html>\n"
    )


def render_report(profile: Profile, title: str | None = None) -> str:
    """The whole report of ``profile`` as one self-contained HTML document (see the module's
    docstring for what it shows): the header's lines, the cards, then every section of
    :data:`fxprof.views.sections.REPORT` that the profile has, in order, each linked."""
    plotly_go()
    if not isinstance(profile, Profile):
        raise TypeError(f"render_report needs a Profile (fxprof.profile or fxprof.load), got {type(profile).__name__}")
    body = [cards_html(report_cards(profile))]
    nav = []
    for section in REPORT:
        shown = section.html(profile)
        if shown:
            body.append(shown)
            nav.append((section.anchor, section.link))
    return _page(title or f"fxprof: {model_label(profile)}", render_header(profile).splitlines(), nav, body)


def render_compare_report(
    a: Profile | pd.DataFrame,
    b: Profile | pd.DataFrame,
    label_a: str = "a",
    label_b: str = "b",
    diff: pd.DataFrame | None = None,
    title: str | None = None,
    **compare_options: Any,
) -> str:
    """A comparison of ``a`` and ``b`` (profiles, or per-node tables) as one self-contained HTML
    document: the totals, the whole run's ratio and the verdict counts, the nodes and the
    blocks that moved most, both run-total distributions (profiles only) and the whole table.
    ``diff`` is :func:`fxprof.compare`'s result when already computed; else it is computed
    with ``compare_options`` (``alpha``, ``min_effect``, ``keep_outliers``)."""
    plotly_go()
    if diff is None:
        diff = compare(a, b, warn=False, **compare_options)
    text = render_compare(diff, label_a, label_b, ViewOptions(sort=None, top=1))
    head = text.split("\n\n", 1)[0].splitlines()
    both = diff[diff["status"] == "both"]
    counts = diff["verdict"].value_counts() if "verdict" in diff.columns else pd.Series(dtype=int)
    a_total, b_total = float(diff["a_ms"].sum()), float(diff["b_ms"].sum())
    cards = []
    run = diff.attrs.get("run_ratio")
    if run and np.isfinite(run["ratio"]):  # the headline: the runs' ratio first (fxprof.views.headline)
        if "a_median_ms" in run:
            cards += [(f"median run, {label_a}", format_ms(run["a_median_ms"])), (f"median run, {label_b}", format_ms(run["b_median_ms"]))]
        cards.append(("median run b/a (95% interval)", f"{run['ratio']:.3f} ({run['low']:.3f}-{run['high']:.3f})"))
    cards += [(f"sum of node medians, {label_a}", format_ms(a_total)), (f"sum of node medians, {label_b}", format_ms(b_total)),
              ("sum of node medians b/a", f"{b_total / a_total:.3f}" if a_total > 0 else "")]
    cards += [("nodes faster", str(int(counts.get("faster", 0)))), ("nodes slower", str(int(counts.get("slower", 0)))),
              ("nodes same", str(int(counts.get("same", 0)))), ("nodes in both", str(len(both)))]
    if int(counts.get("noisy", 0)):  # a verdict the samples could not carry (fxprof.core.noise)
        cards.append(("nodes noisy (two modes or spread beyond the change)", str(int(counts.get("noisy", 0)))))
    if int(counts.get("too few runs", 0)):  # sample sizes that no p-value below alpha can come from
        cards.append(("nodes: too few runs to tell", str(int(counts.get("too few runs", 0)))))
    body = [cards_html(cards)]
    body.append(section_html("nodes", "The nodes that moved most",
                         f"Median time per node in {html.escape(label_a)} and {html.escape(label_b)}, the largest absolute "
                         "change first; the label says the change in words, coloured by the verdict (green faster, red "
                         "slower, grey within noise).", figure_html(compare_figure(diff, label_a=label_a, label_b=label_b), "fx-changes")))
    blocks = compare_blocks(diff, depth=2)
    body.append(section_html("blocks", "The blocks that moved most",
                         "Summed median node times per module scope (two levels deep, as layer1.0), the largest change first.",
                         figure_html(blocks_figure(blocks, label_a=label_a, label_b=label_b,
                                                    min_effect=diff.attrs.get("min_effect", MIN_EFFECT)), "fx-blocks"),
                         table_html(blocks, "fx-blocks-table", "blocks")))
    nav = [("nodes", "nodes"), ("blocks", "blocks")]
    if isinstance(a, Profile) and isinstance(b, Profile) and a.num_runs and b.num_runs:
        body.append(section_html("runs", "Run totals", "", figure_html(totals_figure(a, b, label_a, label_b), "fx-totals")))
        nav.append(("runs", "runs"))
    body.append(section_html("table", "Every node", "Every column of fxprof.compare, the largest change first.",
                         table_html(diff, "fx-diff", "comparison")))
    nav.append(("table", "table"))
    return _page(title or f"fxprof compare: {label_a} vs {label_b}", head, nav, body)


# --------------------------------------------------------------------------- writing
def write_report(profile: Profile, path: str | os.PathLike, title: str | None = None) -> None:
    """Write :func:`render_report` to ``path`` atomically (``-``: standard output)."""
    from ..io import atomic_write

    page = render_report(profile, title)
    atomic_write(path, lambda f: f.write(page))


def write_compare_report(a: Any, b: Any, path: str | os.PathLike, label_a: str = "a", label_b: str = "b",
                         diff: pd.DataFrame | None = None, **compare_options: Any) -> None:
    """Write :func:`render_compare_report` to ``path`` atomically (``-``: standard output)."""
    from ..io import atomic_write

    page = render_compare_report(a, b, label_a, label_b, diff=diff, **compare_options)
    atomic_write(path, lambda f: f.write(page))


class Report:
    """A report in a notebook: Jupyter shows the whole page (in a frame, offline: plotly.js is
    inside it); :attr:`html` is the document, :meth:`save` writes it, :attr:`figures` holds the
    same plotly figures to show or change one by one."""

    def __init__(self, page: str, figures: dict[str, Any]) -> None:
        self.html = page
        self.figures = figures

    def save(self, path: str | os.PathLike) -> None:
        from ..io import atomic_write

        atomic_write(path, lambda f: f.write(self.html))

    def _repr_html_(self) -> str:
        return (f'<iframe srcdoc="{html.escape(self.html, quote=True)}" style="width:100%;height:900px;border:1px solid #ddd" '
                'sandbox="allow-scripts" title="fxprof report"></iframe>')

    def __repr__(self) -> str:
        return f"<fxprof.Report: {len(self.html) / 1e6:.1f} MB, figures {', '.join(self.figures)}>"


def show_report(a: Profile, b: Profile | None = None, label_a: str = "a", label_b: str = "b", **compare_options: Any) -> Report:
    """The report of profile ``a`` (or, with ``b``, of the comparison of ``a`` and ``b``) for a
    notebook: displaying the result shows the interactive page; ``.figures`` holds its plotly
    figures (``tree``, ``kinds``, ``distributions``, ``runs``; ``changes`` and ``blocks`` for
    a comparison) and ``.save(path)`` writes the file."""
    if b is None:
        figures = {"tree": tree_figure(a), "kinds": groups_figure(a, "op")}
        if isinstance(a, Profile) and a.num_runs:
            figures.update(distributions=distribution_figure(a), runs=runs_figure(a))
        return Report(render_report(a), figures)
    diff = compare(a, b, warn=False, **compare_options)
    figures = {"changes": compare_figure(diff, label_a=label_a, label_b=label_b),
               "blocks": blocks_figure(compare_blocks(diff), label_a=label_a, label_b=label_b)}
    return Report(render_compare_report(a, b, label_a, label_b, diff=diff), figures)
