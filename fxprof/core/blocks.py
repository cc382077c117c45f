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
from .rollup import group_by

if TYPE_CHECKING:
    from .profile import Profile

__all__ = ["compare_blocks", "BLOCK_COLUMNS", "BLOCK_BREAK_COLUMNS"]

BLOCK_COLUMNS = ("a_ms", "b_ms", "delta_ms", "speedup", "a_nodes", "b_nodes", "fused", "a_pct", "b_pct", *MEMORY_CHANGE_COLUMNS)
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
    so at a depth below that module it lands in the parent's row.

    ``DataFrame.attrs``: ``a_total_ms``, ``b_total_ms`` (summed medians), ``speedup`` (their
    ratio) and ``run_speedup`` (median run of ``a`` over median run of ``b``; None for tables).
    """
    ta, tb = _table(a, keep_outliers), _table(b, keep_outliers)
    ga, gb = group_by(ta, "scope", depth), group_by(tb, "scope", depth)
    index = pd.Index(list(ga.index) + [s for s in gb.index if s not in ga.index], name="scope")
    out = pd.DataFrame(index=index)
    out["a_ms"] = ga["median_ms"].reindex(index).fillna(0.0)
    out["b_ms"] = gb["median_ms"].reindex(index).fillna(0.0)
    out["delta_ms"] = out["b_ms"] - out["a_ms"]
    out["speedup"] = out["a_ms"] / out["b_ms"].where(out["b_ms"] > 0)
    out["a_nodes"] = ga["nodes"].reindex(index).fillna(0).astype(np.int64)
    out["b_nodes"] = gb["nodes"].reindex(index).fillna(0).astype(np.int64)
    from .rollup import _labels

    out["fused"] = _fusions(tb, _labels(tb, "scope", depth)).reindex(index).fillna("").astype(str)
    out["a_pct"] = ga["pct"].reindex(index).fillna(0.0)
    out["b_pct"] = gb["pct"].reindex(index).fillna(0.0)
    out = out.join(memory_changes(ga.reindex(index), gb.reindex(index)))  # fxprof.core.memory: the blocks' peaks
    out = out.sort_values("a_ms", ascending=False, kind="stable")
    columns = list(BLOCK_COLUMNS)
    breaks_b = block_breaks(tb, _labels(tb, "scope", depth))
    breaks_a = block_breaks(ta, _labels(ta, "scope", depth))
    if len(breaks_a) or len(breaks_b):  # the graph breaks inside each block: what its time is made of beside kernels
        text_b = breaks_b.reindex(out.index).fillna("").astype(str)
        text_a = ("a: " + breaks_a.reindex(out.index).fillna("").astype(str)).where(breaks_a.reindex(out.index).notna(), "")
        out["breaks"] = [("; ".join(t for t in (tb_, ta_) if t)) for tb_, ta_ in zip(text_b, text_a)]
        columns.append("breaks")
    a_total, b_total = float(out["a_ms"].sum()), float(out["b_ms"].sum())
    run = None
    if not isinstance(a, pd.DataFrame) and not isinstance(b, pd.DataFrame):
        ra, rb = np.median(a.kept_totals(keep_outliers)), np.median(b.kept_totals(keep_outliers))
        run = float(ra / rb) if rb > 0 else None
    out.attrs.update(a_total_ms=a_total, b_total_ms=b_total, speedup=a_total / b_total if b_total > 0 else float("nan"),
                     run_speedup=run, depth=depth)
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
