"""A report to look at: one self-contained interactive HTML file per profile or per comparison.

Built with plotly (an optional dependency: ``pip install 'fxprof[report]'``), as
HolisticTraceAnalysis draws its figures. The file holds everything it needs: plotly.js, every
figure's data, the styles and a small script that sorts and filters the tables. It makes no
network request when opened; it opens by double-click, offline.

What a profile's report shows (each derived from the DataFrame API, like every other view):

- the header facts (:func:`~fxprof.views.text.render_header`: model, device, timer, runs,
  coverage and interpreter overhead, outlier runs, environment) and a few key numbers;
- the module tree as an icicle sized by median time: root > stages > blocks > layers > nodes,
  functional nodes included, the phases of a training step on top; click a box to zoom.
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
from collections import defaultdict
from typing import TYPE_CHECKING, Any, Union

import numpy as np
import pandas as pd

from ..core.compare import MIN_EFFECT, compare, compare_blocks
from ..core.profile import Profile
from ..core.rollup import PLUMBING, bookkeeping_note, group_by, is_bookkeeping
from ..vocab import __version__
from .tables import change_label, display_name, format_ms, formatter_for
from .options import ViewOptions
from .memory_plot import memory_figure
from .text import ranked, render_compare, render_header

if TYPE_CHECKING:
    import plotly.graph_objects as go

__all__ = [
    "MISSING_PLOTLY", "Report", "show_report", "render_report", "render_compare_report", "write_report",
    "write_compare_report", "tree_figure", "distribution_figure", "runs_figure", "groups_figure", "ranks_figure", "compare_figure",
    "blocks_figure", "kind_colors",
]

MISSING_PLOTLY = ("fxprof's HTML report needs plotly: pip install plotly "
                  "(in a checkout of fxprof: pip install -e '.[report]')")

#: nodes whose per-run distributions are drawn; changes drawn in a comparison
TOP_DISTRIBUTIONS = 15
TOP_CHANGES = 25
#: levels of the tree shown at once (click a box to go deeper)
TREE_DEPTH = 5
#: the label of the box that holds a module's record_function enter/exit nodes
BOOKKEEPING = "(range bookkeeping)"

#: the node table's first columns (``range`` and ``phase`` when they vary); every other column follows
_FIRST_COLUMNS = ("phase", "kind", "scope", "range", "median_ms", "mean_ms", "iqr_ms", "pct", "cum_pct")
_MODULE = "#e8edf3"
_BOOKKEEPING = "#cfcfcf"
_OTHER = "#b8b8b8"
_SIDES = ("#4c72b0", "#dd8452")
_VERDICT = {"faster": "#2a9d8f", "slower": "#d1495b", "same": "#9aa5b1", "noisy": "#e9c46a", "": "#9aa5b1"}
_FONT = "system-ui, -apple-system, 'Segoe UI', Roboto, 'Helvetica Neue', Arial, sans-serif"
_CONFIG = {"displaylogo": False, "responsive": True}

ProfileOrTable = Union[Profile, pd.DataFrame]


def _go() -> Any:
    try:
        import plotly.graph_objects as go
    except ImportError as exc:
        raise ImportError(MISSING_PLOTLY) from exc
    return go


def _per_node(item: ProfileOrTable) -> pd.DataFrame:
    if isinstance(item, Profile):
        return item.df
    if isinstance(item, pd.DataFrame) and {"pct", "kind", "median_ms", "scope", "op"} <= set(item.columns):
        return item
    raise TypeError(f"expected a Profile or its per-node DataFrame (profile.df), got {type(item).__name__}")


def _model(item: Any) -> str:
    return str(item.meta.get("model", "model")) if isinstance(item, Profile) else "profile"


def _layout(fig: "go.Figure", title: str, height: int, **extra: Any) -> "go.Figure":
    fig.update_layout(title={"text": html.escape(title), "x": 0.0, "xanchor": "left", "font": {"size": 15}},
                      height=height, margin={"l": 10, "r": 20, "t": 48, "b": 40}, font={"family": _FONT, "size": 12},
                      paper_bgcolor="white", plot_bgcolor="white", **extra)
    return fig


# ---------------------------------------------------------------------------- colours
def kind_colors(table: pd.DataFrame) -> dict[str, str]:
    """A colour per op kind, the kinds with the most time first (colourblind-safe palette,
    then a second one); kinds beyond both are grey, record_function bookkeeping light grey."""
    _go()  # plotly present (its palettes), or the message that says how to install it
    from plotly.colors import qualitative

    palette = list(qualitative.Safe[:-1]) + list(qualitative.Pastel[:-1])
    work = table.loc[~is_bookkeeping(table) & ~_plumbing(table)]
    kinds = work.groupby("kind", sort=False)["pct"].sum().sort_values(ascending=False, kind="stable").index
    colors = {kind: palette[i] if i < len(palette) else _OTHER for i, kind in enumerate(kinds)}
    for kind in table.loc[_plumbing(table), "kind"]:
        colors.setdefault(kind, _OTHER)
    for kind in table.loc[is_bookkeeping(table), "kind"]:
        colors[kind] = _BOOKKEEPING
    return colors


def _plumbing(table: pd.DataFrame) -> pd.Series:
    return table["op"].isin(["placeholder", "get_attr", "output"])


# ---------------------------------------------------------------------------- the tree
def _label(prefixes: tuple[str, ...], i: int) -> str:
    """A module box's label: its last path part, with its parent's when that part is a
    number (``layer1.0``, not ``0``)."""
    part = prefixes[i].rsplit(".", 1)[-1]
    if part.isdigit() and "." in prefixes[i]:
        return ".".join(prefixes[i].rsplit(".", 2)[-2:])
    return part


def _scope_parts(scope: str) -> tuple[str, ...]:
    bits = scope.split(".") if scope else []
    return tuple(".".join(bits[: i + 1]) for i in range(len(bits)))


def tree_figure(profile: ProfileOrTable, depth: int = TREE_DEPTH) -> "go.Figure":
    """The module tree as an icicle, each box as wide as its median time (``median_ms``).

    Root (the model) > phase (a training step's ``forward``, ``loss``, ``backward``,
    ``optimizer``) > stages > blocks > layers > nodes, by each node's ``scope``; functional
    nodes (a residual ``add``) sit in the module they run in, nodes at the root under the
    model, graph plumbing (inputs, outputs) under ``(graph)``, and the enter/exit nodes of
    ``record_function`` ranges in a grey ``(range bookkeeping)`` box of their module. A module
    called once, as one node, is that node's box. Nodes are coloured by op kind
    (:func:`kind_colors`); hovering shows the node, its kind, time and share of node time;
    clicking zooms into a box. ``depth`` levels are shown at once.
    """
    go = _go()
    table = _per_node(profile)
    value = table["median_ms"].fillna(0.0).clip(lower=0.0)
    pct = table["pct"].fillna(0.0)
    colors = kind_colors(table)
    phases = table["phase"] if "phase" in table.columns else pd.Series("forward", index=table.index)
    several_phases = phases.nunique() > 1
    bookkeeping = is_bookkeeping(table)
    plumbing = _plumbing(table)

    root = "m"
    boxes: dict[str, dict[str, Any]] = {root: {"label": _model(profile), "parent": "", "name": _model(profile)}}
    child_boxes: dict[str, list[str]] = defaultdict(list)
    nodes_in: dict[str, list[str]] = defaultdict(list)

    def box(chain: list[tuple[str, str]]) -> str:  # [(id part, label)] under the root
        parent = root
        for key, label in chain:
            bid = f"{parent}/{key}"
            if bid not in boxes:
                boxes[bid] = {"label": label, "parent": parent, "name": key}
                child_boxes[parent].append(bid)
            parent = bid
        return parent

    for node in table.index:
        chain: list[tuple[str, str]] = [(str(phases[node]), str(phases[node]))] if several_phases else []
        if plumbing[node]:
            chain.append((PLUMBING, PLUMBING))
        else:
            parts = _scope_parts(str(table.at[node, "scope"]))
            chain += [(p, _label(parts, i)) for i, p in enumerate(parts)]
            if bookkeeping[node]:
                chain.append((BOOKKEEPING, BOOKKEEPING))
        nodes_in[box(chain)].append(node)

    totals: dict[str, float] = defaultdict(float)  # a box's summed time and share, for its hover
    shares: dict[str, float] = defaultdict(float)
    for bid, members in nodes_in.items():
        walk = bid
        while walk:
            totals[walk] += float(value[members].sum())
            shares[walk] += float(pct[members].sum())
            walk = boxes[walk]["parent"]

    ids, labels, parents, values, fill, custom = [], [], [], [], [], []

    def leaf(sector: str, label: str, parent: str, node: str) -> None:
        ids.append(sector), labels.append(label), parents.append(parent), values.append(float(value[node]))
        fill.append(colors.get(table.at[node, "kind"], _OTHER))
        custom.append([node, str(table.at[node, "kind"]), format_ms(value[node]), f"{pct[node]:.1f}%"])

    for bid, info in boxes.items():
        members = nodes_in.get(bid, [])
        if (len(members) == 1 and not child_boxes.get(bid) and bid != root
                and table.at[members[0], "op"] == "call_module"):  # a module called once, as one node: the node
            leaf(bid, info["label"], info["parent"], members[0])
            continue
        ids.append(bid), labels.append(info["label"]), parents.append(info["parent"])
        values.append(0.0)  # branchvalues="remainder": a box is the sum of what it holds
        fill.append(_BOOKKEEPING if info["name"] == BOOKKEEPING else _MODULE)
        custom.append([info["name"], "module" if bid != root else "model", format_ms(totals[bid]), f"{shares[bid]:.1f}%"])
        for node in members:
            leaf(f"{bid}//{node}", _node_label(table, node), bid, node)
    if isinstance(profile, Profile) and profile.num_runs:  # the root is the median run: add the time in no node
        from .headline import outside_words, run_figures

        figures = run_figures(profile, table)
        custom[ids.index(root)][2] = f"median run {format_ms(figures.run_ms)}"
        if figures.outside_ms > 0:
            ids.append(f"{root}/{OUTSIDE}"), labels.append(OUTSIDE), parents.append(root), values.append(figures.outside_ms)
            fill.append(_BOOKKEEPING)
            custom.append([OUTSIDE, outside_words(profile.meta), format_ms(figures.outside_ms),
                           f"{figures.outside_ms / figures.run_ms * 100:.1f}% of the median run"])
    fig = go.Figure(go.Icicle(
        ids=ids, labels=labels, parents=parents, values=values, branchvalues="remainder", sort=False,
        marker={"colors": fill, "line": {"color": "white", "width": 1}}, customdata=custom, maxdepth=depth,
        tiling={"orientation": "v"}, pathbar={"visible": True, "side": "top"},
        texttemplate="%{label}<br>%{customdata[2]}", textfont={"size": 11},
        hovertemplate="<b>%{customdata[0]}</b><br>%{customdata[1]}<br>median %{customdata[2]}, "
                      "%{customdata[3]} of node time<extra></extra>",
    ))
    roof = _roof_colors(table, ids, fill)
    if roof is not None:  # a switch between op kinds and how close each node runs to its roof
        fig.update_layout(updatemenus=[{
            "type": "buttons", "direction": "right", "x": 0.9, "xanchor": "right", "y": 1.12, "yanchor": "bottom",
            "buttons": [{"label": "colour: op kind", "method": "restyle", "args": [{"marker.colors": [fill]}]},
                        {"label": "colour: % of roof", "method": "restyle", "args": [{"marker.colors": [roof]}]}]}])
    what = "phase > module > node" if several_phases else "module > node"
    return _layout(fig, f"{_model(profile)}: where the time goes ({what}; width = median time; click to zoom)", 560)


#: the tree's box for the time in no node (the interpreter between nodes, Python between graphs)
OUTSIDE = "(outside every node)"


def _roof_colors(table: pd.DataFrame, ids: list[str], fill: list[str]) -> list[str] | None:
    """The tree's colours by ``roof_pct`` (red far below the roof, green at it; grey for
    modules and nodes without a roof), or None when the profile has no roofline."""
    if "roof_pct" not in table.columns or not table["roof_pct"].notna().any():
        return None
    from plotly.colors import sample_colorscale

    out = []
    for sector, colour in zip(ids, fill):
        node = sector.split("//")[-1] if "//" in sector else None
        if node is None and sector.rsplit("/", 1)[-1] in table.index:  # a module called once, as its node
            node = sector.rsplit("/", 1)[-1]
        pct = table.at[node, "roof_pct"] if node is not None and node in table.index else np.nan
        if node is None or not np.isfinite(pct):
            out.append(colour if colour in (_MODULE, _BOOKKEEPING) else _MODULE)
        else:
            out.append(sample_colorscale("RdYlGn", [min(max(float(pct), 0.0), 100.0) / 100.0])[0])
    return out


def _node_label(table: pd.DataFrame, node: str) -> str:
    """A leaf's label: the node's name; for a range's enter/exit node, which range it opens or closes."""
    if is_bookkeeping(table.loc[[node]]).iloc[0]:
        which = "exit" if "exit" in str(table.at[node, "target"]) else "enter"
        return f"{which} {table.at[node, 'range']}" if table.at[node, "range"] else which
    return node


# ----------------------------------------------------------------- the other figures
def distribution_figure(profile: Profile, n: int = TOP_DISTRIBUTIONS) -> "go.Figure":
    """Per-run times of the ``n`` nodes with the largest share (``record_function`` enter/exit
    nodes not ranked): one box per node over its per-run times (a node's calls within a run
    summed; outlier runs left out unless ``profile.keep_outliers``), every run a point."""
    go = _go()
    if not isinstance(profile, Profile):
        raise TypeError(f"distribution_figure needs a Profile (its per-run samples), got {type(profile).__name__}")
    table, _ = ranked(profile.df, "pct")
    top = list(table.head(n).index)
    samples = profile.kept_samples()
    per_run = samples[samples["node"].isin(top)].groupby(["node", "run"], observed=True)["time_ms"].sum()
    colors = kind_colors(profile.df)
    fig = go.Figure()
    for node in top:
        times = per_run.loc[node].to_numpy() if node in per_run.index.get_level_values(0) else np.empty(0)
        kind = str(table.at[node, "kind"])
        fig.add_trace(go.Box(x=times, name=node, orientation="h", boxpoints="all", jitter=0.4, pointpos=0,
                             marker={"size": 4, "color": colors.get(kind, _OTHER), "line": {"width": 0.5, "color": "#555"}},
                             line={"color": "#444", "width": 1}, fillcolor="rgba(0,0,0,0)",
                             hovertemplate=f"{html.escape(node)} ({html.escape(kind)})<br>%{{x:.4g}} ms<extra></extra>"))
    runs = int(samples["run"].nunique())
    fig.update_yaxes(autorange="reversed", automargin=True)
    fig.update_xaxes(title_text="time per run (ms)", rangemode="tozero", gridcolor="#eee", zeroline=False)
    return _layout(fig, f"per-run times of the top {len(top)} nodes ({runs} runs)", 110 + 30 * max(len(top), 1),
                   showlegend=False)


def runs_figure(profile: Profile) -> "go.Figure | None":
    """Each timed run's total time in order (drift, warm-up left over), outlier runs marked
    (left out of the statistics unless ``profile.keep_outliers``), the median of the kept runs
    as a line; one colour per rank in a gathered profile. None in isolated mode (no runs)."""
    go = _go()
    runs = profile.runs
    if runs.empty:
        return None
    fig = go.Figure()
    groups = runs.groupby("rank", sort=True) if "rank" in runs.columns else [(None, runs)]
    for rank, rows in groups:
        fig.add_trace(go.Scatter(x=rows["run"], y=rows["total_ms"], mode="lines+markers",
                                 name="run total" if rank is None else f"rank {rank}",
                                 marker={"size": 5}, line={"width": 1},
                                 hovertemplate="run %{x}: %{y:.4g} ms<extra></extra>"))
    out = runs[runs["outlier"]]
    if not out.empty:
        fig.add_trace(go.Scatter(x=out["run"], y=out["total_ms"], mode="markers", name="outlier run (left out)"
                                 if not profile.keep_outliers else "outlier run (kept)",
                                 marker={"size": 11, "symbol": "x", "color": "#d1495b"},
                                 hovertemplate="outlier run %{x}: %{y:.4g} ms<extra></extra>"))
    kept = profile.kept_totals()
    if kept:
        median = float(np.median(kept))
        fig.add_hline(y=median, line={"dash": "dot", "color": "#555", "width": 1},
                      annotation_text=f"median {format_ms(median)}", annotation_position="top left")
    fig.update_xaxes(title_text="timed run", gridcolor="#eee")
    fig.update_yaxes(title_text="run total (ms)", gridcolor="#eee", rangemode="tozero")
    return _layout(fig, f"run totals over time ({len(runs)} runs)", 330,
                   legend={"orientation": "h", "y": -0.25, "x": 0})


def groups_figure(profile: ProfileOrTable, key: str = "op", n: int = 15, depth: int = 1) -> "go.Figure":
    """Node time rolled up by ``key`` (:meth:`Profile.group_by`), the ``n`` largest groups as
    bars of their share, labelled with their summed median time. By op kind (the default) the
    bars carry the tree's colours, so this figure is its colour key."""
    go = _go()
    table = _per_node(profile)
    groups = group_by(table, key, depth=depth)
    shown = groups.head(n)
    colors = kind_colors(table) if key == "op" else {}
    fig = go.Figure(go.Bar(
        x=shown["pct"], y=[str(g) for g in shown.index], orientation="h",
        marker={"color": [colors.get(str(g), _SIDES[0]) for g in shown.index] if colors else _SIDES[0]},
        text=[f"{format_ms(ms)}  ({p:.1f}%)" for ms, p in zip(shown["median_ms"], shown["pct"])], textposition="outside",
        cliponaxis=False, hovertemplate="%{y}: %{x:.1f}% of node time<extra></extra>",
    ))
    fig.update_yaxes(autorange="reversed", automargin=True)
    upper = max(float(shown["pct"].max()) * 1.3, 1)  # room for the labels outside the bars
    ticks = {"tickmode": "array", "tickvals": list(range(0, 101, 20))} if upper > 100 else {}  # a share is at most 100%
    fig.update_xaxes(title_text="share of node time (%)", gridcolor="#eee", range=[0, upper], **ticks)
    more = f", top {len(shown)} of {len(groups)}" if len(shown) < len(groups) else ""
    label = {"op": "op kind", "range": "record_function range", "phase": "training phase"}.get(key, key)
    return _layout(fig, f"node time by {label}{more}", 90 + 26 * max(len(shown), 1), showlegend=False)


def ranks_figure(profile: Profile) -> "go.Figure | None":
    """One bar per ``torch.distributed`` rank (:meth:`Profile.group_by` ``"rank"``): its median
    computation, communication (collectives) and barrier wait per run, stacked, the straggler
    named. None for a profile without ranks."""
    go = _go()
    if not profile.ranks:
        return None
    ranks = profile.group_by("rank")
    names = [f"rank {r}" + (" (straggler)" if str(ranks.at[r, "straggler"]) == "yes" else "") for r in ranks.index]
    fig = go.Figure()
    for column, label, color in (("compute_ms", "computation", _SIDES[0]), ("comm_ms", "communication", _SIDES[1]),
                                 ("barrier_ms", "barrier wait", "#9aa5b1")):
        values = ranks[column].fillna(0.0)
        if column == "barrier_ms" and not (values > 0).any():
            continue
        fig.add_trace(go.Bar(y=names, x=values, name=label, orientation="h", marker={"color": color},
                             hovertemplate=f"%{{y}}: {label} %{{x:.4g}} ms (median per run)<extra></extra>"))
    fig.update_yaxes(autorange="reversed", automargin=True)
    fig.update_xaxes(title_text="median per run (ms)", gridcolor="#eee")
    return _layout(fig, f"time per rank ({len(ranks)} ranks)", 120 + 34 * len(ranks), barmode="stack",
                   legend={"orientation": "h", "y": 1.0, "x": 0.5, "xanchor": "center", "yanchor": "bottom"})


def compare_figure(diff: pd.DataFrame, n: int = TOP_CHANGES, label_a: str = "a", label_b: str = "b") -> "go.Figure":
    """The ``n`` largest changes of a comparison (:func:`fxprof.compare`'s order): each node's
    median time in ``a`` and ``b`` side by side, ``b``'s bar labelled with the change in words
    (``6.4x faster``, ``1.3x slower``, ``0.98x the time``: :func:`~fxprof.views.tables.change_label`)."""
    go = _go()
    shown = diff.head(n)
    names = [str(node) + {"only_a": f" (only in {label_a})", "only_b": f" (only in {label_b})"}.get(s, "")
             for node, s in shown["status"].items()]
    verdicts = shown["verdict"] if "verdict" in shown.columns else pd.Series("", index=shown.index)
    words = [change_label(r, v) for r, v in zip(shown["ratio"], verdicts)]
    fig = go.Figure()
    fig.add_trace(go.Bar(y=names, x=shown["a_ms"].fillna(0.0), name=label_a, orientation="h", marker={"color": _SIDES[0]},
                         hovertemplate=f"{html.escape(label_a)}: %{{x:.4g}} ms<extra></extra>"))
    fig.add_trace(go.Bar(y=names, x=shown["b_ms"].fillna(0.0), name=label_b, orientation="h", marker={"color": _SIDES[1]},
                         text=words, textposition="outside", cliponaxis=False,
                         textfont={"color": [_VERDICT.get(v, "#555") for v in verdicts]},
                         hovertemplate=f"{html.escape(label_b)}: %{{x:.4g}} ms, %{{text}}<extra></extra>"))
    fig.update_yaxes(autorange="reversed", automargin=True)
    top = float(np.nanmax(shown[["a_ms", "b_ms"]].to_numpy(dtype=float))) if len(shown) else 1.0
    fig.update_xaxes(title_text="median time (ms)", gridcolor="#eee", range=[0, (top if np.isfinite(top) and top > 0 else 1.0) * 1.35])
    return _layout(fig, f"the {len(shown)} largest changes per node", 120 + 34 * max(len(shown), 1), barmode="group",
                   legend={"orientation": "h", "y": 1.0, "x": 0.5, "xanchor": "center", "yanchor": "bottom"})


def blocks_figure(blocks: pd.DataFrame, n: int = 20, label_a: str = "a", label_b: str = "b",
                  min_effect: float = MIN_EFFECT) -> "go.Figure":
    """The change per block (:func:`fxprof.core.compare.compare_blocks`), largest first, as
    bars of ``delta_ms`` (b minus a), green where time was saved, red where it grew, labelled
    with the change in words and how many of the block's nodes were judged faster/slower. A
    block has no test of its own: it is called faster or slower when its summed time moved by
    at least ``min_effect`` (as a node's verdict needs) and at least one of its nodes was judged
    so, else ``1.02x the time`` (``its nodes: 3 same`` when every judged node was within noise)."""
    go = _go()
    shown = blocks.head(n)
    words = []
    same_counts = shown["same"] if "same" in shown.columns else pd.Series(0, index=shown.index)
    for ratio, fast, slow, same in zip(shown["ratio"], shown["faster"], shown["slower"], same_counts):
        verdict = "faster" if ratio <= 1 / (1 + min_effect) and fast else "slower" if ratio >= 1 + min_effect and slow else ""
        counted = ", ".join(t for t in (f"{fast} faster" if fast else "", f"{slow} slower" if slow else "") if t)
        if not counted and same:
            counted = f"its nodes: {same} same"
        words.append(change_label(ratio, verdict) + (f" ({counted})" if counted else ""))
    fig = go.Figure(go.Bar(
        x=shown["delta_ms"], y=[str(b) for b in shown.index], orientation="h", text=words, textposition="outside",
        cliponaxis=False, marker={"color": [_VERDICT["faster"] if d < 0 else _VERDICT["slower"] for d in shown["delta_ms"]]},
        customdata=np.c_[shown["a_ms"], shown["b_ms"]],
        hovertemplate=f"%{{y}}: {html.escape(label_a)} %{{customdata[0]:.4g}} ms, {html.escape(label_b)} "
                      f"%{{customdata[1]:.4g}} ms<extra></extra>",
    ))
    fig.update_yaxes(autorange="reversed", automargin=True)
    span = float(shown["delta_ms"].abs().max()) if len(shown) else 1.0
    span = span if np.isfinite(span) and span > 0 else 1.0
    fig.update_xaxes(title_text=f"change in summed median time, {label_b} minus {label_a} (ms)", gridcolor="#eee",
                     zeroline=True, zerolinecolor="#888", range=[-span * 1.6, span * 1.6])
    return _layout(fig, f"change per block (module scope, {len(shown)} largest)", 100 + 28 * max(len(shown), 1),
                   showlegend=False)


def _totals_figure(a: Profile, b: Profile, label_a: str, label_b: str) -> "go.Figure":
    go = _go()
    fig = go.Figure()
    for prof, label, color in ((a, label_a, _SIDES[0]), (b, label_b, _SIDES[1])):
        fig.add_trace(go.Box(x=prof.kept_totals(), name=label, orientation="h", boxpoints="all", jitter=0.4, pointpos=0,
                             marker={"color": color, "size": 5}, line={"color": color},
                             hovertemplate=f"{html.escape(label)}: %{{x:.4g}} ms<extra></extra>"))
    fig.update_yaxes(autorange="reversed", automargin=True)
    fig.update_xaxes(title_text="run total (ms), outlier runs left out", gridcolor="#eee", rangemode="tozero")
    return _layout(fig, "run totals of both profiles", 230, showlegend=False)


# --------------------------------------------------------------------------- the page
def _figure_html(fig: "go.Figure | None", div_id: str) -> str:
    if fig is None:
        return ""
    return f'<div class="fx-figure">{fig.to_html(full_html=False, include_plotlyjs=False, div_id=div_id, config=_CONFIG)}</div>'


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
""" % {"font": _FONT}


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


def _section(anchor: str, title: str, what: str, *content: str) -> str:
    return (f'<section id="{anchor}"><h2>{html.escape(title)}</h2>'
            + (f'<p class="what">{what}</p>' if what else "") + "".join(c for c in content if c) + "</section>")


def _cards(items: list[tuple[str, str]]) -> str:
    return '<div class="cards">' + "".join(f"<div class=\"card\"><b>{html.escape(v)}</b><span>{html.escape(k)}</span></div>"
                                           for k, v in items) + "</div>"


def _note(text: str) -> str:
    return f'<div class="note">{html.escape(text)}</div>' if text else ""


def _roofs_section(profile: Profile) -> str:
    """The bandwidth curve the roofs come from, when the profile's peaks have one."""
    from .roofs_plot import bandwidth_figure, curve_note

    try:
        figure = bandwidth_figure(profile.meta.get("peaks"))
    except (TypeError, ValueError):  # unreadable peaks: the header says so
        return ""
    if figure is None:
        return ""
    return _section("roofs", "The bandwidth roofs", "The rate of add, copy and an in-place op as the data an op reads grows, the fastest of "
                    "interleaved rounds, and the roof each size is held to (red): a node whose reads fit a level is held to "
                    "its rate (docs/roofline.md).", _figure_html(figure, "fx-roofs"), _note(curve_note(profile.meta["peaks"])))


def render_report(profile: Profile, title: str | None = None) -> str:
    """The whole report of ``profile`` as one self-contained HTML document (see the module's
    docstring for what it shows)."""
    _go()
    if not isinstance(profile, Profile):
        raise TypeError(f"render_report needs a Profile (fxprof.profile or fxprof.load), got {type(profile).__name__}")
    model = _model(profile)
    table = profile.df
    header = render_header(profile).splitlines()
    totals = profile.kept_totals()
    cards = [("nodes", f"{len(table)}"), ("timed runs", f"{profile.num_runs}")]
    if totals:  # one headline: the median run, then what the node medians sum to and the rest (fxprof.views.headline)
        from .headline import run_figures

        figures = run_figures(profile, table)
        cards[0:0] = [("median run", format_ms(figures.run_ms)),
                      ("sum of node medians", format_ms(figures.nodes_ms)),
                      ("outside every node", format_ms(figures.outside_ms))]
        cards.append(("coverage (node medians / median run)", f"{profile.coverage * 100:.1f}%"))
        cards.append(("outlier runs left out" if not profile.keep_outliers else "outlier runs (kept)", f"{len(profile.outlier_runs)}"))
        found = profile.contention  # the machine, as the header's machine line says it (fxprof.core.contention)
        if found is not None:
            busy = int(found.busy.sum())
            cards.append(("machine", "quiet" if not busy else
                          f"BUSY: {busy} of {len(found.runs)} runs lost time to other processes"
                          + (" (left out)" if found.left_out and not profile.keep_outliers else " (in the figures)")))
    book = is_bookkeeping(table)
    if book.any():
        cards.append(("record_function bookkeeping", f"{table.loc[book, 'pct'].sum():.1f}%"))
    nav = [("tree", "module tree"), ("kinds", "op kinds")]
    body = [_cards(cards)]
    from .lookfirst import look_here_first

    first_panel = look_here_first(table)
    if first_panel:
        body.append(_section("first", "Look here first: the most time above the roof",
                             "The nodes with the most headroom (median time above their roof, the least time the "
                             "machine's peaks allow), which roof limits each and how close it runs to it (docs/roofline.md).",
                             first_panel))
        nav.insert(0, ("first", "look here first"))
    body.append(_section(
        "tree", "Where the time goes: the module tree",
        "Each box is as wide as its median time; a module holds its layers and its functional nodes; the root is the "
        "median run, and its grey box (outside every node) the time no node holds, so the tree adds up to the run. "
        "Click a box to zoom in, the bar on top to zoom out. Colours are op kinds (key below)"
        + ("; the buttons switch to % of roof (red: far below the roof, green: at it)." if first_panel else "."),
        _figure_html(tree_figure(profile), "fx-tree")))
    kinds = [_figure_html(groups_figure(profile, "op"), "fx-kinds")]
    body.append(_section("kinds", "Time by op kind", "", *kinds))
    extra = []
    if (table["range"] != "").any():
        extra.append(_section("ranges", "Time by record_function range",
                              "Each range's nodes, its enter and exit nodes included.",
                              _figure_html(groups_figure(profile, "range"), "fx-ranges"), _note(bookkeeping_note(table))))
        nav.append(("ranges", "ranges"))
    if "phase" in table.columns and table["phase"].nunique() > 1:
        extra.append(_section("phases", "Time by training phase", "", _figure_html(groups_figure(profile, "phase"), "fx-phases")))
        nav.append(("phases", "phases"))
    if profile.ranks:
        ranks = profile.group_by("rank")
        extra.append(_section("ranks", "Time by rank", "Medians over each rank's runs; the straggler is named.",
                              _figure_html(ranks_figure(profile), "fx-ranks"), table_html(ranks, "fx-ranks-table", "ranks")))
        nav.append(("ranks", "ranks"))
    body += extra
    if (profile.meta.get("compiled") or {}).get("breaks"):  # a compiled model's graph breaks (fxprof.views.breaks)
        from .breaks import breaks_table

        body.append(_section("breaks", "Graph breaks, biggest first", "Each is the Python that runs between two compiled graphs "
                             "and the resume: where dynamo broke the graph, why, how often a run, its median time a run and its "
                             "share of the compiled model's own run.", table_html(breaks_table(profile), "fx-breaks", "breaks")))
        nav.append(("breaks", "breaks"))
    if profile.num_runs:
        body.append(_section("dist", "Per-run times of the top nodes",
                             "Every timed run is a point; the box spans the middle half of the runs, the line is the median. "
                             "Ranked by share of node time; record_function enter/exit nodes are not ranked.",
                             _figure_html(distribution_figure(profile), "fx-dist")))
        body.append(_section("runs", "Run totals over time",
                             "A trend is drift (clocks, heat, other work on the machine); crosses are outlier runs.",
                             _figure_html(runs_figure(profile), "fx-runs")))
        nav += [("dist", "distributions"), ("runs", "runs")]
    memory = memory_figure(profile)  # fxprof.views.memory_plot
    if memory is not None:
        body.append(_section("memory", "Memory over the run", "What the run holds after each node, in run order, by category; "
                             "the dotted line is each node's own peak (temporaries included); the run's peak is marked.",
                             _figure_html(memory, "fx-memory")))
        nav.append(("memory", "memory"))
    roofs = _roofs_section(profile)  # the bandwidth curve behind the roofs (fxprof.views.roofs_plot)
    if roofs:
        body.append(roofs)
        nav.append(("roofs", "roofs"))
    first = [c for c in _FIRST_COLUMNS if c in table.columns and (c not in ("range", "phase") or table[c].nunique() > 1)]
    body.append(_section("table", "Every node", "Every column of profile.df, in graph order, the times and shares first; times "
                         "with units (the CSV and profile.df keep milliseconds at full precision).",
                         table_html(table[first + [c for c in table.columns if c not in first]], "fx-nodes", "nodes")))
    nav.append(("table", "table"))
    return _page(title or f"fxprof: {model}", header, nav, body)


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
    _go()
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
    body = [_cards(cards)]
    body.append(_section("nodes", "The nodes that moved most",
                         f"Median time per node in {html.escape(label_a)} and {html.escape(label_b)}, the largest absolute "
                         "change first; the label says the change in words, coloured by the verdict (green faster, red "
                         "slower, grey within noise).", _figure_html(compare_figure(diff, label_a=label_a, label_b=label_b), "fx-changes")))
    blocks = compare_blocks(diff, depth=2)
    body.append(_section("blocks", "The blocks that moved most",
                         "Summed median node times per module scope (two levels deep, as layer1.0), the largest change first.",
                         _figure_html(blocks_figure(blocks, label_a=label_a, label_b=label_b,
                                                    min_effect=diff.attrs.get("min_effect", MIN_EFFECT)), "fx-blocks"),
                         table_html(blocks, "fx-blocks-table", "blocks")))
    nav = [("nodes", "nodes"), ("blocks", "blocks")]
    if isinstance(a, Profile) and isinstance(b, Profile) and a.num_runs and b.num_runs:
        body.append(_section("runs", "Run totals", "", _figure_html(_totals_figure(a, b, label_a, label_b), "fx-totals")))
        nav.append(("runs", "runs"))
    body.append(_section("table", "Every node", "Every column of fxprof.compare, the largest change first.",
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
