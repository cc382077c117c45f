"""The figures of the HTML report (plotly): the module tree, op kinds and other roll-ups, each
node's runs, the runs, the ranks, and for a comparison the changes by node and by block. Each a
function of a profile or a comparison returning a plotly Figure; the page around them is
fxprof.views.report."""

from __future__ import annotations

import html
from collections import defaultdict
from typing import TYPE_CHECKING, Any, Union

import numpy as np
import pandas as pd

from ..core.compare import MIN_EFFECT
from ..core.profile import Profile
from ..core.roles import is_plumbing
from ..core.rollup import PLUMBING, group_by, is_bookkeeping
from .tables import change_label, format_ms, model_label, ranked

if TYPE_CHECKING:
    import plotly.graph_objects as go

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
FIRST_COLUMNS = ("phase", "kind", "scope", "range", "median_ms", "mean_ms", "iqr_ms", "pct", "cum_pct")
_MODULE = "#e8edf3"
_BOOKKEEPING = "#cfcfcf"
_OTHER = "#b8b8b8"
_SIDES = ("#4c72b0", "#dd8452")
_VERDICT = {"faster": "#2a9d8f", "slower": "#d1495b", "same": "#9aa5b1", "noisy": "#e9c46a", "": "#9aa5b1"}
FONT = "system-ui, -apple-system, 'Segoe UI', Roboto, 'Helvetica Neue', Arial, sans-serif"
CONFIG = {"displaylogo": False, "responsive": True}

ProfileOrTable = Union[Profile, pd.DataFrame]


def plotly_go() -> Any:
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


def _layout(fig: "go.Figure", title: str, height: int, **extra: Any) -> "go.Figure":
    fig.update_layout(title={"text": html.escape(title), "x": 0.0, "xanchor": "left", "font": {"size": 15}},
                      height=height, margin={"l": 10, "r": 20, "t": 48, "b": 40}, font={"family": FONT, "size": 12},
                      paper_bgcolor="white", plot_bgcolor="white", **extra)
    return fig


# ---------------------------------------------------------------------------- colours
def kind_colors(table: pd.DataFrame) -> dict[str, str]:
    """A colour per op kind, the kinds with the most time first (colourblind-safe palette,
    then a second one); kinds beyond both are grey, record_function bookkeeping light grey."""
    plotly_go()  # plotly present (its palettes), or the message that says how to install it
    from plotly.colors import qualitative

    palette = list(qualitative.Safe[:-1]) + list(qualitative.Pastel[:-1])
    work = table.loc[~is_bookkeeping(table) & ~is_plumbing(table)]
    kinds = work.groupby("kind", sort=False)["pct"].sum().sort_values(ascending=False, kind="stable").index
    colors = {kind: palette[i] if i < len(palette) else _OTHER for i, kind in enumerate(kinds)}
    for kind in table.loc[is_plumbing(table), "kind"]:
        colors.setdefault(kind, _OTHER)
    for kind in table.loc[is_bookkeeping(table), "kind"]:
        colors[kind] = _BOOKKEEPING
    return colors


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


class _Sectors:
    """The icicle's sectors, in order: id, label, parent, value, colour, hover data."""

    def __init__(self) -> None:
        self.ids: list[str] = []
        self.labels: list[str] = []
        self.parents: list[str] = []
        self.values: list[float] = []
        self.fill: list[str] = []
        self.custom: list[list[str]] = []

    def box(self, sector: str, label: str, parent: str, custom: list[str], colour: str, value: float = 0.0,
            first: bool = False) -> None:
        at = 0 if first else len(self.ids)
        self.ids.insert(at, sector)
        self.labels.insert(at, label)
        self.parents.insert(at, parent)
        self.values.insert(at, value)
        self.fill.insert(at, colour)
        self.custom.insert(at, custom)


def _add_tree(tree: _Sectors, profile: ProfileOrTable, table: pd.DataFrame, colors: dict[str, str], root: str,
              root_label: str, parent: str, root_kind: str) -> float:
    """``table``'s nodes as boxes under ``root`` (a box under ``parent``), and for a profile
    with runs a box of the time in no node; returns what ``root`` holds, in ms."""
    value = table["median_ms"].fillna(0.0).clip(lower=0.0)
    pct = table["pct"].fillna(0.0)
    phases = table["phase"] if "phase" in table.columns else pd.Series("forward", index=table.index)
    several_phases = phases.nunique() > 1
    bookkeeping = is_bookkeeping(table)
    plumbing = is_plumbing(table)

    boxes: dict[str, dict[str, Any]] = {root: {"label": root_label, "parent": parent, "name": root_label}}
    child_boxes: dict[str, list[str]] = defaultdict(list)
    nodes_in: dict[str, list[str]] = defaultdict(list)

    def box(chain: list[tuple[str, str]]) -> str:  # [(id part, label)] under the root
        at = root
        for key, label in chain:
            bid = f"{at}/{key}"
            if bid not in boxes:
                boxes[bid] = {"label": label, "parent": at, "name": key}
                child_boxes[at].append(bid)
            at = bid
        return at

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
        while walk != parent:
            totals[walk] += float(value[members].sum())
            shares[walk] += float(pct[members].sum())
            walk = boxes[walk]["parent"]

    def leaf(sector: str, label: str, at: str, node: str) -> None:
        tree.box(sector, label, at, [node, str(table.at[node, "kind"]), format_ms(value[node]), f"{pct[node]:.1f}%"],
                 colors.get(table.at[node, "kind"], _OTHER), float(value[node]))

    root_at = len(tree.ids)
    for bid, info in boxes.items():
        members = nodes_in.get(bid, [])
        if (len(members) == 1 and not child_boxes.get(bid) and bid != root
                and table.at[members[0], "op"] == "call_module"):  # a module called once, as one node: the node
            leaf(bid, info["label"], info["parent"], members[0])
            continue
        kind = "module" if bid != root else root_kind
        # branchvalues="remainder": a box is the sum of what it holds
        tree.box(bid, info["label"], info["parent"], [info["name"], kind, format_ms(totals[bid]), f"{shares[bid]:.1f}%"],
                 _BOOKKEEPING if info["name"] == BOOKKEEPING else _MODULE)
        for node in members:
            leaf(f"{bid}//{node}", _node_label(table, node), bid, node)
    held = totals[root]
    if isinstance(profile, Profile) and profile.num_runs:  # the root is the median run: add the time in no node
        from .headline import outside_words, run_figures

        figures = run_figures(profile, table)
        nodes_ms = float(value.sum())  # what the boxes hold: the node medians of this table
        outside = figures.run_ms - nodes_ms
        if outside > 0:
            tree.custom[root_at][2] = f"median run {format_ms(figures.run_ms)}"
            tree.box(f"{root}/{OUTSIDE}", OUTSIDE, root, [OUTSIDE, outside_words(profile.meta), format_ms(outside),
                     f"{outside / figures.run_ms * 100:.1f}% of the median run"], _BOOKKEEPING, outside)
            held = figures.run_ms
        else:  # the nodes' medians add up to more than the median run (medians of runs that vary)
            tree.custom[root_at][2] = f"nodes {format_ms(nodes_ms)} (median run {format_ms(figures.run_ms)})"
    return held


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

    The root is the median run: the nodes' medians and a grey box of the time in no node (when
    the nodes' medians add up to more than the median run, the root says so and what it holds).
    A gathered profile (several ranks) has a box per rank under the root, each its rank's own
    tree over its own runs and its median run; the root is what those boxes hold, the ranks'
    median runs summed: every box's figure is the sum of the boxes inside it.
    """
    go = plotly_go()
    table = _per_node(profile)
    colors = kind_colors(table)
    tree = _Sectors()
    root = "m"
    ranks = profile.ranks if isinstance(profile, Profile) else []
    if len(ranks) > 1:
        from ..core.rankmerge import rank_profile

        held = 0.0
        for rank in ranks:
            part = rank_profile(profile, rank)
            rank_table = part.df
            rank_table = rank_table.loc[rank_table["calls"] > 0]  # different graphs: the other ranks' nodes
            held += _add_tree(tree, part, rank_table, colors, f"{root}/rank {rank}", f"rank {rank}", root, "rank")
        tree.box(root, model_label(profile), "", [model_label(profile), "model",
                 f"{len(ranks)} ranks' median runs summed {format_ms(held)}", "100.0%"], _MODULE, first=True)
    else:
        _add_tree(tree, profile, table, colors, root, model_label(profile), "", "model")
    several_phases = "phase" in table.columns and table["phase"].nunique() > 1
    ids, labels, parents, values, fill, custom = tree.ids, tree.labels, tree.parents, tree.values, tree.fill, tree.custom
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
    what = ("rank > " if len(ranks) > 1 else "") + ("phase > module > node" if several_phases else "module > node")
    return _layout(fig, f"{model_label(profile)}: where the time goes ({what}; width = median time; click to zoom)", 560)


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
    go = plotly_go()
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
    go = plotly_go()
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
    go = plotly_go()
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
    go = plotly_go()
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
    go = plotly_go()
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
    go = plotly_go()
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


def totals_figure(a: Profile, b: Profile, label_a: str, label_b: str) -> "go.Figure":
    go = plotly_go()
    fig = go.Figure()
    for prof, label, color in ((a, label_a, _SIDES[0]), (b, label_b, _SIDES[1])):
        fig.add_trace(go.Box(x=prof.kept_totals(), name=label, orientation="h", boxpoints="all", jitter=0.4, pointpos=0,
                             marker={"color": color, "size": 5}, line={"color": color},
                             hovertemplate=f"{html.escape(label)}: %{{x:.4g}} ms<extra></extra>"))
    fig.update_yaxes(autorange="reversed", automargin=True)
    fig.update_xaxes(title_text="run total (ms), outlier runs left out", gridcolor="#eee", rangemode="tozero")
    return _layout(fig, "run totals of both profiles", 230, showlegend=False)


# --------------------------------------------------------------------------- the page
