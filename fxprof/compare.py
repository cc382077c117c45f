"""Comparing two profiles node by node (two runs, two machines, before and after a change)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Union

import numpy as np
import pandas as pd

if TYPE_CHECKING:
    from .profile import Profile

__all__ = ["compare", "COMPARE_COLUMNS"]

COMPARE_COLUMNS = ("status", "op", "kind", "scope", "phase", "a_ms", "b_ms", "delta_ms", "ratio", "a_pct", "b_pct", "delta_pct")

ProfileOrTable = Union["Profile", pd.DataFrame]


def _table(item: ProfileOrTable) -> pd.DataFrame:
    table = item if isinstance(item, pd.DataFrame) else item.df
    missing = [c for c in ("op", "kind", "scope", "median_ms", "pct") if c not in table.columns]
    if missing:
        raise ValueError(f"cannot compare a table without the column(s) {', '.join(missing)}; pass a Profile or Profile.df")
    return table


def compare(a: ProfileOrTable, b: ProfileOrTable) -> pd.DataFrame:
    """Per-node comparison of ``a`` and ``b`` (profiles, or per-node tables from ``read_csv``).

    Nodes are matched by name. Returns a DataFrame indexed by ``node``, sorted by the absolute
    change in time (largest first), with columns:

    - ``status``: ``"both"``, ``"only_a"`` or ``"only_b"`` (nodes on one side are kept);
    - ``op``, ``kind``, ``scope``, ``phase``: from whichever side has the node;
    - ``a_ms``, ``b_ms``: median node time on each side (NaN where absent);
    - ``delta_ms``: ``b_ms - a_ms`` (a missing side counts as 0);
    - ``ratio``: ``b_ms / a_ms`` (NaN unless both sides have the node and ``a_ms > 0``);
    - ``a_pct``, ``b_pct``, ``delta_pct``: each side's share of its own node time, and the
      change in share in percentage points.
    """
    ta, tb = _table(a), _table(b)
    index = pd.Index(list(ta.index) + [n for n in tb.index if n not in ta.index], name="node", dtype=str)
    ia, ib = ta.reindex(index), tb.reindex(index)
    in_a = pd.Series(index.isin(ta.index), index=index)
    in_b = pd.Series(index.isin(tb.index), index=index)
    out = pd.DataFrame(index=index)
    out["status"] = pd.Series(np.where(in_a & in_b, "both", np.where(in_a, "only_a", "only_b")), index=index, dtype=str)
    for col in ("op", "kind", "scope"):
        out[col] = ia[col].where(in_a, ib[col]).fillna("").astype(str)
    phase_a = ia["phase"] if "phase" in ia.columns else pd.Series("forward", index=index)
    phase_b = ib["phase"] if "phase" in ib.columns else pd.Series("forward", index=index)
    out["phase"] = phase_a.where(in_a, phase_b).fillna("forward").astype(str)
    out["a_ms"] = ia["median_ms"].astype("float64")
    out["b_ms"] = ib["median_ms"].astype("float64")
    out["delta_ms"] = out["b_ms"].fillna(0.0) - out["a_ms"].fillna(0.0)
    out["ratio"] = (out["b_ms"] / out["a_ms"].where(out["a_ms"] > 0)).where(in_a & in_b)
    out["a_pct"] = ia["pct"].astype("float64")
    out["b_pct"] = ib["pct"].astype("float64")
    out["delta_pct"] = out["b_pct"].fillna(0.0) - out["a_pct"].fillna(0.0)
    order = out["delta_ms"].abs().sort_values(ascending=False, kind="stable").index
    return out.loc[order, list(COMPARE_COLUMNS)]
