"""Per-rank statistics of a profile's samples, and which nodes are communication (no torch).

Used by the per-node table itself (a gathered profile's ``rank_min_ms``, ``rank_max_ms`` and
``slowest_rank`` columns) and by :mod:`fxprof.core.ranks`' analyses; it imports neither, so the
table and the analyses do not import each other.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

import numpy as np
import pandas as pd

from ..columns import rank_dtypes
from ..vocab import COLLECTIVE_KINDS
from .roles import is_communication, is_plumbing

if TYPE_CHECKING:
    from .profile import Profile

__all__ = ["RANK_TABLE_COLUMNS", "COLLECTIVE_KINDS", "is_communication", "is_plumbing", "comm_labels", "rank_stats", "rank_spread"]


#: per-node columns a profile with ranks adds to :attr:`Profile.df`, with their dtypes
RANK_TABLE_COLUMNS: dict[str, str] = rank_dtypes()  # declared in fxprof/columns.py




# ------------------------------------------------------------------------- analysis
def rank_stats(profile: "Profile", runs: Sequence[int] | None) -> dict[int, pd.DataFrame]:
    """Per rank: the per-node statistics (:meth:`SampleColumns.node_stats`'s columns) over that
    rank's runs among ``runs`` (None: all): the same values, the same rules (calls within a
    run summed, outlier runs left out) as the profile's own table."""
    table = profile.runs
    if "rank" not in table.columns:
        table = table.assign(rank=int(profile.meta.get("rank", 0)))
    kept = None if runs is None else set(int(r) for r in runs)
    out: dict[int, pd.DataFrame] = {}
    for rank, rows in table.groupby("rank", observed=True)["run"]:
        chosen = tuple(int(r) for r in rows if kept is None or int(r) in kept)
        out[int(rank)] = profile.columns.compute_stats(chosen)  # not cached: the profile's own key stays
    return out


def rank_spread(profile: "Profile", runs: Sequence[int] | None = None) -> pd.DataFrame:
    """Per node: the smallest and largest per-rank median time and the rank with the largest
    (index ``node``; columns :data:`RANK_TABLE_COLUMNS`); ``<NA>`` for a node with no time."""
    medians = pd.DataFrame({rank: stats["median_ms"] for rank, stats in rank_stats(profile, runs).items()})
    timed = medians.notna().any(axis=1)
    slowest = pd.Series(pd.NA, index=medians.index, dtype="Int64")
    if timed.any():
        slowest[timed] = medians[timed].idxmax(axis=1).astype("int64")
    out = pd.DataFrame({"rank_min_ms": medians.min(axis=1), "rank_max_ms": medians.max(axis=1), "slowest_rank": slowest},
                       index=medians.index)
    out.index.name = "node"
    return out


def comm_labels(table: pd.DataFrame) -> pd.Series:
    """``communication``, ``computation`` or ``(graph)`` (plumbing) per row of a per-node table."""
    labels = pd.Series(np.where(is_communication(table), "communication", "computation"), index=table.index, dtype=str)
    return labels.mask(is_plumbing(table), "(graph)")
