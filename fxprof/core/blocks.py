"""Two profiles lined up by module path: eager against compiled, per block.

:func:`compare_blocks` (``fxprof.compare(a, b, by="scope")``) sums each side's node (or kernel)
times by module path cut to ``depth`` parts (the ``scope`` roll-up, :mod:`fxprof.core.rollup`),
so a profile of the eager graph and one of the compiled program's kernels, whose rows never
match one to one, can be compared where they mean the same thing: the block.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Union

import numpy as np
import pandas as pd

from .memory import MEMORY_CHANGE_COLUMNS, memory_changes
from .rollup import PLUMBING, ROOT, rollup_labels

if TYPE_CHECKING:
    from .profile import Profile

__all__ = ["compare_blocks", "BLOCK_COLUMNS", "BLOCK_BREAK_COLUMNS", "is_compiled_side", "use_blocks_instead"]

BLOCK_COLUMNS = ("a_ms", "b_ms", "delta_ms", "speedup", "a_nodes", "b_nodes", "folded", "fused", "a_pct", "b_pct",
                 *MEMORY_CHANGE_COLUMNS)
#: columns a block comparison has when ``b`` is a compiled profile with graph breaks
BLOCK_BREAK_COLUMNS = ("breaks",)


def _table(item: Union["Profile", pd.DataFrame], keep_outliers: bool | None) -> pd.DataFrame:
    return item if isinstance(item, pd.DataFrame) else item.to_dataframe(keep_outliers=keep_outliers)


def _fusions(table: pd.DataFrame, labels: pd.Series) -> pd.Series:
    """Per block, what fused together: each fused kernel's origins joined by ``+``, ``; ``
    between kernels ("" where nothing fused)."""
    if "origins" not in table.columns:
        return pd.Series("", index=labels.unique())
    fused = table["kind"].eq("fused") & table["origins"].ne("")
    text = table["origins"].where(fused, "").str.replace(",", "+", regex=False)
    return text.groupby(labels, sort=False).agg(lambda s: "; ".join(v for v in s if v))


def _spanning(table: pd.DataFrame, depth: int) -> dict[str, list[str]]:
    """``{module path above depth: origins}`` for the rows that compute the work of several
    modules (a compiled kernel charged to their common module, ``""`` for the root:
    ``scope_source`` ``common``; its ``origins`` name the eager nodes it computes)."""
    if "scope_source" not in table.columns:
        return {}
    common = table.loc[table["scope_source"].eq("common") & ~table["op"].isin(["placeholder", "get_attr", "output"])]
    origins = common["origins"] if "origins" in common.columns else pd.Series("", index=common.index)
    parents: dict[str, list[str]] = {}
    for scope, names in zip(common["scope"], origins):
        if not scope or len(scope.split(".")) < depth:
            parents.setdefault(scope, []).extend(n for n in str(names).split(",") if n)
    return parents


def _covered(child: str, origins: list[str], named: set[str]) -> bool:
    """Is a child block's work among a kernel's origins? An origin is named from its module
    path and op (``embeddings_word_embeddings``, ``block_bn``: see
    :func:`fxprof.core.compiled.readable_names`), or is a row of the other profile in that child."""
    stem = child.replace(".", "_")
    return any(o == stem or o.startswith(stem + "_") or o in named for o in origins)


def _fold(labels: pd.Series, folds: dict[str, str]) -> pd.Series:
    return labels.map(lambda v: folds.get(v, v)) if folds else labels


def _folds(tables: tuple[pd.DataFrame, pd.DataFrame], labels: tuple[pd.Series, pd.Series],
           parents: dict[str, list[str]]) -> dict[str, str]:
    """``{block label: label it folds into}``: the blocks under a spanning parent whose work
    its kernels compute (all of them when the kernels name no origins), folded into the
    outermost such parent (the root's label is ``(root)``)."""
    folds: dict[str, str] = {}
    every = (set(labels[0].unique()) | set(labels[1].unique())) - {ROOT, PLUMBING}
    for parent in sorted(parents, key=lambda p: -1 if not p else p.count(".")):
        into = parent or ROOT
        origins = parents[parent]
        for child in sorted(every):
            if child == parent or child in folds or (parent and not child.startswith(parent + ".")):
                continue
            named = {n for t, l in zip(tables, labels) for n in t.index[l == child]}
            if not origins or _covered(child, origins, named):
                folds[child] = folds.get(into, into)
    return folds


def _group(table: pd.DataFrame, labels: pd.Series) -> pd.DataFrame:
    grouped = table.groupby(labels.rename("scope"), sort=False)
    out = pd.DataFrame({"median_ms": grouped["median_ms"].sum(), "nodes": grouped.size(), "pct": grouped["pct"].sum()})
    if "mem_peak_bytes" in table.columns:  # a block's peak is its highest node's (as group_by rolls it up)
        out["mem_peak_bytes"] = grouped["mem_peak_bytes"].max()
    return out


def compare_blocks(a: Union["Profile", pd.DataFrame], b: Union["Profile", pd.DataFrame], depth: int = 1,
                   keep_outliers: bool | None = None) -> pd.DataFrame:
    """Per module path (``scope`` cut to ``depth`` parts), ``a``'s time against ``b``'s.

    Index ``scope`` (``layer1``; ``(root)`` for work at the model's root, ``(graph)`` for graph
    plumbing), sorted by ``a_ms`` (largest first). Columns: ``a_ms``, ``b_ms`` (the block's
    summed median node or kernel times; 0 where a side has none), ``delta_ms`` (``b - a``),
    ``speedup`` (``a_ms / b_ms``: above 1, ``b`` is faster; NaN where ``b_ms`` is 0),
    ``a_nodes``, ``b_nodes`` (rows summed), ``fused`` (``b``'s fused kernels in the block, each
    as its origins joined by ``+``), ``a_pct``, ``b_pct`` (the block's share of its side), and,
    when a side is a compiled profile with graph breaks, ``breaks`` (``b``'s in the block:
    reason, place, count a run, time, which ``b_ms`` includes; ``a``'s after ``a: ``).
    A kernel whose origins lie in several blocks counts to their common module (its ``scope``),
    so at a depth below that module it lands in the parent's row; the children whose work it
    computes (its ``origins``) are then folded into that row on both sides (``folded``: how
    many child blocks it holds), so a side's time is never in a child while the other's is in its parent. Every
    depth's ``a_ms`` and ``b_ms`` add up to the two totals.

    ``DataFrame.attrs``: ``a_total_ms``, ``b_total_ms`` (summed medians), ``speedup`` (their
    ratio), ``run_speedup`` (median run of ``a`` over median run of ``b``; None for tables),
    ``a_run_ms``, ``b_run_ms`` (the two median runs),
    ``folded`` (``{parent: [child blocks folded into it]}``), ``notes`` (one line per fold,
    a kernel spanning top-level blocks folds them into ``(root)``) and ``one_sided``
    (``{"a": [...], "b": [...]}``: blocks with time on that side and no row on the other, nor a
    kernel whose origins name them: work the other program does not run, such as an eval-mode
    dropout that compilation removed).
    """
    ta, tb = _table(a, keep_outliers), _table(b, keep_outliers)
    la, lb = rollup_labels(ta, "scope", depth), rollup_labels(tb, "scope", depth)
    pa, pb = _spanning(ta, depth), _spanning(tb, depth)
    parents = {p: pa.get(p, []) + pb.get(p, []) for p in set(pa) | set(pb)}
    folds = _folds((ta, tb), (la, lb), parents)
    la, lb = _fold(la, folds), _fold(lb, folds)
    folded: dict[str, list[str]] = {}
    for child, parent in sorted(folds.items()):
        folded.setdefault(parent, []).append(child)
    ga, gb = _group(ta, la), _group(tb, lb)
    index = pd.Index(list(ga.index) + [s for s in gb.index if s not in ga.index], name="scope")
    out = pd.DataFrame(index=index)
    out["a_ms"] = ga["median_ms"].reindex(index).fillna(0.0)
    out["b_ms"] = gb["median_ms"].reindex(index).fillna(0.0)
    out["delta_ms"] = out["b_ms"] - out["a_ms"]
    out["speedup"] = out["a_ms"] / out["b_ms"].where(out["b_ms"] > 0)
    out["a_nodes"] = ga["nodes"].reindex(index).fillna(0).astype(np.int64)
    out["b_nodes"] = gb["nodes"].reindex(index).fillna(0).astype(np.int64)
    out["fused"] = _fusions(tb, lb).reindex(index).fillna("").astype(str)
    out["folded"] = pd.Series({p: len(c) for p, c in folded.items()}, dtype="int64").reindex(index).fillna(0).astype(np.int64)
    out["a_pct"] = ga["pct"].reindex(index).fillna(0.0)
    out["b_pct"] = gb["pct"].reindex(index).fillna(0.0)
    out = out.join(memory_changes(ga.reindex(index), gb.reindex(index)))  # fxprof.core.memory: the blocks' peaks
    out = out.sort_values("a_ms", ascending=False, kind="stable")
    columns = list(BLOCK_COLUMNS)
    breaks_b = block_breaks(tb, lb)  # in the blocks as folded: a break counts where its block's time is
    breaks_a = block_breaks(ta, la)
    if len(breaks_a) or len(breaks_b):  # the graph breaks inside each block: what its time is made of beside kernels
        text_b = breaks_b.reindex(out.index).fillna("").astype(str)
        text_a = ("a: " + breaks_a.reindex(out.index).fillna("").astype(str)).where(breaks_a.reindex(out.index).notna(), "")
        out["breaks"] = [("; ".join(t for t in (tb_, ta_) if t)) for tb_, ta_ in zip(text_b, text_a)]
        columns.append("breaks")
    a_total, b_total = float(out["a_ms"].sum()), float(out["b_ms"].sum())
    run = ra = rb = None
    if not isinstance(a, pd.DataFrame) and not isinstance(b, pd.DataFrame) and a.num_runs and b.num_runs:
        ra, rb = float(np.median(a.kept_totals(keep_outliers))), float(np.median(b.kept_totals(keep_outliers)))
        run = float(ra / rb) if rb > 0 else None
    held = [(p, c) for p, c in sorted(folded.items(), key=lambda pc: -float(out.at[pc[0], "a_ms"])) if c]
    notes = [f"{len(held)} block(s) hold their child blocks (column folded: how many), because a kernel there computes "
             f"the work of several children, so only the block's total compares: "
             + ", ".join(f"{p} ({len(c)})" for p, c in held[:6]) + (", ..." if len(held) > 6 else "")] if held else []
    # blocks one side runs and the other has no row of, nor a kernel whose origins name them: the
    # compiled program dropped their work (an eval-mode dropout), so their speed-up has no number
    named = (out.index != ROOT) & (out.index != PLUMBING)
    one_sided = {side: [str(s) for s in out.index[named & (out[f"{side}_nodes"] > 0) & (out[f"{other}_nodes"] == 0)
                                                   & (out[f"{side}_ms"] > 0)]]
                 for side, other in (("a", "b"), ("b", "a"))}
    out.attrs.update(a_total_ms=a_total, b_total_ms=b_total, speedup=a_total / b_total if b_total > 0 else float("nan"),
                     run_speedup=run, a_run_ms=ra, b_run_ms=rb, depth=depth, folded={p: c for p, c in folded.items() if c},
                     notes=notes, one_sided=one_sided)
    return out[columns]


def block_breaks(table: pd.DataFrame, labels: pd.Series) -> pd.Series:
    """Per block, the graph breaks of a compiled profile's rows in it (:mod:`fxprof.core.breaks`):
    ``print at model.py:42 x2 a run, 55 us``, ``; `` between breaks; empty when there are none."""
    from .breaks import BREAK

    if "op" not in table.columns or not table["op"].eq(BREAK).any():
        return pd.Series(dtype=str)
    rows = table[table["op"].eq(BREAK)]
    text = []
    for _, r in rows.iterrows():
        count = float(r["calls_per_run"])
        times = "" if count == 1 else f" x{count:g} a run"
        text.append(f"{str(r['raw_name']).split(' in ')[0]}{times}, {float(r['median_ms']) * 1000:.0f} us")
    return pd.Series(text, index=rows.index).groupby(labels[rows.index], sort=False).agg("; ".join)



def is_compiled_side(item: Union["Profile", pd.DataFrame]) -> bool:
    """Is this a profile of a compiled program's kernels (``compile=True``)? For a per-node
    table (no meta): does it have kernel rows?"""
    if isinstance(item, pd.DataFrame):
        return "op" in item.columns and bool(item["op"].isin(["kernel", "extern"]).any())
    # also a profile whose meta carries compiled mode's facts under another capture name
    return item.is_compiled or "compiled" in item.meta


def use_blocks_instead(a: Union["Profile", pd.DataFrame], b: Union["Profile", pd.DataFrame], in_both: int,
                       rows: int) -> str:
    """The one line a node-by-node comparison of an eager profile with a compiled one gives
    instead of its list of differences ("" when both sides are of one kind): their rows are
    nodes on one side and kernels on the other, so they compare per module."""
    ca, cb = is_compiled_side(a), is_compiled_side(b)
    if ca == cb:
        return ""
    eager, compiled = ("b", "a") if ca else ("a", "b")
    return (f"{eager} is the eager graph and {compiled} the compiled program's kernels: their rows do not match one to "
            f"one ({in_both} of {rows} names in both), so compare them per module: fxprof compare A B --by scope "
            f"(add --depth 2 for blocks inside them), or fxprof.compare(a, b, by=\"scope\")")
