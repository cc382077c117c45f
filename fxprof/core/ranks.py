"""Profiles of several ranks: the merge, per-rank statistics and the straggler rule (no torch).

The measuring side lives in :mod:`fxprof.measure.distributed.ranks`. Under an initialized process group
(``torchrun``, or ``init_process_group`` by hand: gloo on the CPU, NCCL on GPUs)
:func:`fxprof.profile` on every rank:

- checks that every rank asked for the same runs (``warmup``, ``warmup_ms``, ``iters``,
  ``mode``), so that no rank waits forever for a barrier another rank never reaches;
- takes together what a rank would decide alone (:meth:`RankSync.agree`): the end of warm-up by
  time, and a stop by one rank's memory budget;
- meets the other ranks at a barrier before each timed run (an all-reduce of a flag that also
  carries the budget's verdict), outside the run's marks, so the ranks' runs
  start together, and records how long this rank waited there (``barrier_ms`` in
  :attr:`Profile.runs`): a rank that arrives late waits little, the ranks that wait for it
  wait long, so the spread of the waits in one run is how far apart the ranks arrived (skew);
- tags its samples and runs with its ``rank``.

:func:`gather` then collects every rank's profile on one rank (``dst``) as one profile whose
samples and runs carry a ``rank`` column. Its per-node table keeps the usual columns (over all
ranks) and adds ``rank_min_ms``, ``rank_max_ms`` and ``slowest_rank``;
:meth:`Profile.by_rank` has one row per (node, rank); ``group_by("rank")`` one row per rank;
``group_by("comm")`` separates communication (collective nodes) from computation.

The straggler rule (:func:`straggler`): each rank's *busy* time in a run is the run's time
minus the time of its collective nodes (the ranks that wait for a slow rank wait inside the
collectives, so their run times grow too; what is left is their own work, including Python
between graphs). The rank with the largest median busy time is named the straggler when that
median exceeds the median of the other ranks' medians by more than :data:`STRAGGLER_MARGIN`
(10%) and it was the busiest rank in at least :data:`STRAGGLER_RUNS` (three quarters) of the
runs. Medians, and most runs, so that a few runs disturbed by something else name no rank.

Building profiles of ranks (the merge, a rank's own profile) is :mod:`fxprof.core.rankmerge`'s.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from .rankstats import COLLECTIVE_KINDS, RANK_TABLE_COLUMNS, comm_labels, is_communication, is_plumbing, rank_spread, rank_stats
from .stats import shares

if TYPE_CHECKING:
    from .profile import Profile

__all__ = [
    "straggler",
    "by_rank",
    "rank_table",
    "rank_spread",
    "is_communication",
    "COLLECTIVE_KINDS",
    "comm_labels",
    "STRAGGLER_MARGIN",
    "STRAGGLER_RUNS",
    "RANK_TABLE_COLUMNS",
]

#: a rank is the straggler when its median busy time per run (run minus collectives) exceeds
#: the median of the other ranks' medians by more than this fraction
STRAGGLER_MARGIN = 0.10
#: ... and it was the busiest rank in at least this fraction of the runs
STRAGGLER_RUNS = 0.75

#: why ``mode="isolated"`` is refused under a process group (a deliberate limit): an isolated
#: profile has no runs, and runs are what carry a rank through :func:`gather`
ISOLATED_UNDER_RANKS = (
    "mode='isolated' cannot be used under torch.distributed (torchrun): it re-runs each node on its own, "
    "so it has no timed runs, and the gathered profile keeps each rank's samples by its runs; every rank "
    "refuses it before running. Use mode='timed' (--mode timed) under torchrun, or profile one process "
    "without torchrun for isolated times"
)



def node_frame(profile: Profile) -> pd.DataFrame:
    """The profile's nodes as a DataFrame (index ``node``) with ``op``, ``kind``, ``target``, ``scope``, ``role``."""
    return pd.DataFrame(
        {"op": [n.op for n in profile.nodes], "kind": [n.kind for n in profile.nodes],
         "target": [n.target for n in profile.nodes], "scope": [n.scope for n in profile.nodes],
         "role": [n.role for n in profile.nodes]},
        index=pd.Index([n.name for n in profile.nodes], name="node", dtype=str),
    )


def by_rank(profile: Profile) -> pd.DataFrame:
    """One row per (node, rank), graph order then rank order, over the runs the profile's
    statistics use (outlier runs left out unless kept).

    Index (``node``, ``rank``). Columns: ``op``, ``kind``, ``scope``, ``calls``, ``mean_ms``,
    ``median_ms``, ``min_ms``, ``max_ms``, ``host_mean_ms`` (times in ms, a node's calls in a
    run summed, as in :attr:`Profile.df`), ``pct`` (the node's share of that rank's summed
    median node time, as ``df``'s ``pct``) and ``vs_median`` (the rank's median over the
    median of the ranks' medians for that node: 1.0 is a typical rank).
    """
    parts = []
    for rank, stats in rank_stats(profile, profile.kept_runs()).items():
        stats = stats[["calls", "mean_ms", "median_ms", "min_ms", "max_ms", "host_mean_ms"]].copy()
        stats["pct"] = shares(stats)
        parts.append(stats.assign(rank=rank).set_index("rank", append=True))
    stats = pd.concat(parts)
    typical = stats.groupby(level="node", observed=True)["median_ms"].transform("median")
    stats["vs_median"] = stats["median_ms"] / typical.where(typical > 0)
    info = node_frame(profile)
    order = {name: i for i, name in enumerate(info.index)}
    stats = stats.reset_index()
    stats = stats.assign(_order=stats["node"].map(order)).sort_values(["_order", "rank"], kind="stable").drop(columns="_order")
    stats = stats.join(info[["op", "kind", "scope"]], on="node")
    stats["rank"] = stats["rank"].astype(np.int64)
    columns = ["op", "kind", "scope", "calls", "mean_ms", "median_ms", "min_ms", "max_ms", "host_mean_ms", "pct", "vs_median"]
    return stats.set_index(["node", "rank"])[columns]


def _per_run(profile: Profile) -> pd.DataFrame:
    """Per (rank, run): summed computation, communication and plumbing node time, the run's
    time (``run_ms``; NaN in isolated mode) and ``busy_ms`` (the run's time minus communication)."""
    samples = profile.samples
    if "rank" not in samples.columns:
        samples = samples.assign(rank=int(profile.meta.get("rank", 0)))
    info = node_frame(profile)
    comm = is_communication(info)
    plumbing = is_plumbing(info)
    part = np.where(comm, "comm_ms", np.where(plumbing, "graph_ms", "compute_ms"))
    samples = samples.assign(part=samples["node"].astype(str).map(pd.Series(part, index=info.index)))
    table = samples.pivot_table(index=["rank", "run"], columns="part", values="time_ms", aggfunc="sum", fill_value=0.0, observed=True)
    for col in ("compute_ms", "comm_ms", "graph_ms"):
        if col not in table.columns:
            table[col] = 0.0
    runs = profile.runs
    if "rank" not in runs.columns:
        runs = runs.assign(rank=int(profile.meta.get("rank", 0)))
    totals = runs.set_index(["rank", "run"])["total_ms"]
    table["run_ms"] = totals.reindex(table.index).to_numpy() if len(totals) else np.nan
    table["busy_ms"] = table["run_ms"] - table["comm_ms"]
    table = table[["run_ms", "busy_ms", "compute_ms", "comm_ms", "graph_ms"]]
    # index by each rank's own run number, so that run k of every rank lines up
    own = runs.set_index("run")["rank_run"] if "rank_run" in runs.columns else None
    if own is not None:
        table.index = pd.MultiIndex.from_arrays([table.index.get_level_values("rank"),
                                                 own.reindex(table.index.get_level_values("run")).to_numpy()], names=["rank", "run"])
    return table


def rank_table(profile: Profile) -> pd.DataFrame:
    """One row per rank (index ``rank``), for ``group_by("rank")``.

    Columns (times are medians over the rank's runs, in ms): ``runs``, ``run_ms`` (whole run),
    ``busy_ms`` (the run minus its collectives: the rank's own work), ``compute_ms`` (summed
    non-collective node time), ``comm_ms`` (summed collective node time), ``barrier_ms`` (the
    wait in the barrier before the run; NaN without one), ``pct`` (the rank's share of all
    ranks' summed node time), ``vs_median`` (``busy_ms`` over the median of the ranks'
    ``busy_ms``) and ``straggler`` ("yes" for the rank :func:`straggler` names).
    """
    runs = profile.runs
    if "rank" not in runs.columns:
        runs = runs.assign(rank=int(profile.meta.get("rank", 0)), barrier_ms=np.nan)
    per_run = _per_run(profile)
    medians = per_run.groupby(level="rank", observed=True).median()
    summed = per_run.groupby(level="rank", observed=True).sum()
    node_total = summed[["compute_ms", "comm_ms", "graph_ms"]].sum(axis=1)
    by_rank_runs = runs.groupby("rank", observed=True)
    out = pd.DataFrame(
        {
            "runs": by_rank_runs["run"].count(),
            "run_ms": by_rank_runs["total_ms"].median(),
            "busy_ms": medians["busy_ms"],
            "compute_ms": medians["compute_ms"],
            "comm_ms": medians["comm_ms"],
            "barrier_ms": by_rank_runs["barrier_ms"].median(),
        }
    )
    out["pct"] = node_total / node_total.sum() * 100.0 if node_total.sum() > 0 else 0.0
    typical = float(out["busy_ms"].median())
    out["vs_median"] = out["busy_ms"] / typical if typical > 0 else np.nan
    found = straggler(profile)
    out["straggler"] = ["yes" if found and r == found["rank"] else "" for r in out.index]
    out.index = out.index.astype(np.int64)
    out.index.name = "rank"
    return out


def rank_inputs(meta: dict[str, Any]) -> dict[int, list[str]]:
    """Each rank's inputs when the ranks of a gathered profile were given different inputs
    (shapes, dtypes), else ``{}``."""
    per_rank = meta.get("per_rank") or []
    if not any("inputs" in m for m in per_rank):
        return {}
    found = {int(m.get("rank", i)): list(m.get("inputs") or []) for i, m in enumerate(per_rank)}
    return found if len({tuple(v) for v in found.values()}) > 1 else {}


def straggler(profile: Profile) -> dict[str, Any] | None:
    """The rank that holds the others up, by the rule in this module's docstring, or None.
    None as well when the ranks were given different inputs (:func:`rank_inputs`): their busy
    times are then not of the same work, and a rank with a larger batch is no straggler.

    Returns ``{"rank", "busy_ms", "others_ms", "ratio", "slowest_runs", "runs"}``: the rank's
    median busy time per run, the median of the other ranks' medians, their ratio, and in how
    many of the runs (that every rank completed) it was the busiest rank.
    """
    if len(profile.ranks) < 2 or profile.runs.empty or rank_inputs(profile.meta):
        return None
    per_run = _per_run(profile)["busy_ms"].unstack("rank").dropna()
    if per_run.empty:
        return None
    medians = per_run.median()
    slow = int(medians.idxmax())
    others = float(medians.drop(slow).median())
    if not others > 0:
        return None
    ratio = float(medians[slow]) / others
    slowest_runs = int((per_run.idxmax(axis=1) == slow).sum())
    if ratio <= 1.0 + STRAGGLER_MARGIN or slowest_runs < STRAGGLER_RUNS * len(per_run):
        return None
    return {"rank": slow, "busy_ms": float(medians[slow]), "others_ms": others, "ratio": ratio,
            "slowest_runs": slowest_runs, "runs": len(per_run)}


def barrier_skew(profile: Profile) -> dict[str, float] | None:
    """How far apart the ranks reached the barrier before each run: per run, the largest minus
    the smallest wait over the ranks; returns its median and maximum (ms), or None."""
    runs = profile.runs
    if "barrier_ms" not in runs.columns or len(profile.ranks) < 2 or runs["barrier_ms"].isna().all():
        return None
    waits = runs.pivot_table(index="rank_run", columns="rank", values="barrier_ms", observed=True).dropna()
    if waits.empty:
        return None
    skew = waits.max(axis=1) - waits.min(axis=1)
    return {"median_ms": float(skew.median()), "max_ms": float(skew.max())}
