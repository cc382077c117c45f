"""How much of FSDP's all-gathers ran behind other work, per layer (no torch).

An FSDP2 profile (``fxprof.profile`` of a ``fully_shard``-ed model, forward or ``backward=True``)
has, for every call of every FSDP module, an ``all_gather`` row (``unshard``: the collective
issued) and a ``wait`` row (``wait_for_unshard``: what was still waited for, and FSDP's copy-out
of the gathered parameters), each charged to its layer (``scope``). Where FSDP prefetches a
layer's parameters (``set_modules_to_forward_prefetch``, the backward's implicit prefetch), the
issue comes in another layer's pre-forward and other work runs before the wait.

Per pair of rows in a run, by the timer's own marks (``start_ms``, ``time_ms``):

``issue_ms``
    the issue itself. Where the all-gather is not asynchronous (``async_op=False``, FSDP's
    default ``unshard_async_op``) on the CPU, gloo runs the whole collective in this call: it
    blocks, nothing of it is hidden.
``ahead_ms``
    from the end of the issue to the start of the wait: the other work that ran while the
    collective was in flight (0 for a blocking issue: it was over before).
``waited_ms``
    the wait: what the layer still waited for (with FSDP's copy-out).
``exposed_ms``
    ``issue_ms + waited_ms``: the time the layer's gather kept everything else waiting.
``hidden_pct``
    ``ahead_ms / (ahead_ms + waited_ms)``: the share of the collective's time in flight (from
    its issue to the end of its wait) during which other work ran; 0 where it blocked. Where the
    wait is near 0 the collective ended somewhere in the ``ahead`` window and all of it was
    hidden; where the wait is longer, it was in flight for the whole window.

On a GPU the timer's marks are on the compute stream and FSDP runs the all-gather on its own
stream, so the same rules read the device's timeline: the issue takes no stream time and the
wait is the compute stream's wait for the all-gather.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping

import numpy as np
import pandas as pd

from .roles import fsdp_steps as steps_of

if TYPE_CHECKING:
    from .profile import Profile

__all__ = ["OVERLAP_COLUMNS", "fsdp_steps", "overlap", "overlap_notes", "overlap_totals"]

#: the table's columns, in order
OVERLAP_COLUMNS = ("gathers", "issue_ms", "ahead_ms", "waited_ms", "exposed_ms", "hidden_pct", "blocking",
                   "reduce_scatter_ms")

def fsdp_steps(profile: "Profile") -> dict[str, str]:
    """The FSDP step rows of ``profile`` (role ``fsdp``, set where the rows are made): node
    name -> step (``all_gather``, ``wait``, ``reshard``, ``reduce_scatter``)."""
    return steps_of(profile.nodes)


def _async(meta: Mapping[str, Any]) -> dict[str, bool]:
    """Per FSDP module path: whether its all-gathers are issued asynchronously."""
    found = (meta.get("fsdp") or {}).get("unshard_async_op") or {}
    return {str(k): bool(v) for k, v in found.items()}


def _pairs(profile: "Profile", steps: dict[str, str]) -> pd.DataFrame:
    """One row per all-gather matched with its wait, per run: run, rank, layer, phase, issue,
    ahead, waited (ms); and one per reduce-scatter (its time in ``reduce_scatter``)."""
    info = {n.name: n for n in profile.nodes if n.name in steps}
    samples = profile.kept_samples()
    samples = samples[samples["node"].astype(str).isin(info)]
    if samples.empty:
        return pd.DataFrame()
    if "rank" not in samples.columns:
        samples = samples.assign(rank=-1)
    samples = samples.assign(node=samples["node"].astype(str)).sort_values(["run", "start_ms"], kind="stable")
    rows = []
    for (run, rank), part in samples.groupby(["run", "rank"], sort=False):
        pending: dict[tuple[str, str], list[tuple[float, float]]] = {}
        for name, start, time in zip(part["node"], part["start_ms"].to_numpy(float), part["time_ms"].to_numpy(float)):
            node = info[name]
            key = (node.scope, node.phase or "forward")
            step = steps[name]
            if step == "all_gather":
                pending.setdefault(key, []).append((start, time))
            elif step == "wait" and pending.get(key):
                g_start, g_time = pending[key].pop(0)
                ahead = max(start - (g_start + g_time), 0.0)
                rows.append((run, rank, key[0], key[1], g_time, ahead, time, np.nan))
            elif step == "reduce_scatter":
                rows.append((run, rank, key[0], key[1], np.nan, np.nan, np.nan, time))
    return pd.DataFrame(rows, columns=["run", "rank", "layer", "phase", "issue_ms", "ahead_ms", "waited_ms", "reduce_scatter_ms"])


def overlap(profile: "Profile") -> pd.DataFrame:
    """Per FSDP layer and phase: its all-gathers' issue, the work ahead of their waits, the
    waits, the time exposed and the share hidden (the module docs define each), and its
    reduce-scatters' time: medians over the kept runs (of every rank) of each run's sums.

    Index ``(layer, phase)``, the layer as its module path (``""`` for the root); with ranks, a
    ``most_waited_rank`` column names the rank whose median wait is the longest. Empty for a
    profile without FSDP's rows."""
    from .profile import Profile

    if not isinstance(profile, Profile):
        raise TypeError(f"fxprof.overlap needs a Profile with its samples (fxprof.profile, a session, or fxprof.load of a "
                        f".json/.npz file), got {type(profile).__name__}: a per-node table (.csv) has no runs to pair "
                        f"an all-gather with its wait in")
    steps = fsdp_steps(profile)
    pairs = _pairs(profile, steps) if steps else pd.DataFrame()
    if pairs.empty:  # the columns' own dtypes, as a table with rows has them
        dtypes = {c: "bool" if c == "blocking" else "int64" if c == "gathers" else "float64" for c in OVERLAP_COLUMNS}
        empty = pd.DataFrame({c: pd.Series(dtype=t) for c, t in dtypes.items()},
                             index=pd.MultiIndex.from_tuples([], names=["layer", "phase"]))
        empty.attrs["notes"] = overlap_notes(profile) if steps else []
        return empty
    on_cpu = str(profile.meta.get("device", "cpu")) == "cpu"
    asyncs = _async(profile.meta)
    keys = ["layer", "phase"]
    gathers = pairs[pairs["issue_ms"].notna()]
    per_run = pairs.groupby(["run", "rank", *keys], sort=False).agg(
        gathers=("issue_ms", "count"), issue_ms=("issue_ms", "sum"), ahead_ms=("ahead_ms", "sum"),
        waited_ms=("waited_ms", "sum"), reduce_scatter_ms=("reduce_scatter_ms", lambda v: v.sum(min_count=1)))
    table = per_run.groupby(level=keys, sort=False).median()
    table["gathers"] = table["gathers"].round().astype(np.int64)
    table["blocking"] = [on_cpu and not asyncs.get(layer, False) for layer, _ in table.index]
    table.loc[table["blocking"], "ahead_ms"] = 0.0
    table["exposed_ms"] = table["issue_ms"] + table["waited_ms"]
    flight = table["ahead_ms"] + table["waited_ms"]
    table["hidden_pct"] = np.where(table["blocking"] | (flight <= 0), 0.0, 100.0 * table["ahead_ms"] / flight.where(flight > 0, 1.0))
    no_gather = ~table.index.isin(gathers.set_index(keys).index.unique())
    table.loc[no_gather, ["issue_ms", "ahead_ms", "waited_ms", "exposed_ms", "hidden_pct"]] = np.nan
    table = table[list(OVERLAP_COLUMNS)]
    if (pairs["rank"] >= 0).any() and pairs["rank"].nunique() > 1:
        by_rank = gathers.groupby(["run", "rank", *keys], sort=False)["waited_ms"].sum().groupby(level=["rank", *keys]).median()
        worst = by_rank.reset_index().sort_values("waited_ms", ascending=False, kind="stable").drop_duplicates(keys)
        table["most_waited_rank"] = worst.set_index(keys)["rank"].reindex(table.index).astype("Int64")
    table.attrs["notes"] = overlap_notes(profile)
    return table


def overlap_notes(profile: "Profile") -> list[str]:
    """FSDP step rows left with no timed call (every run that held them left out, as busy or as
    outliers): their layers are missing from :func:`overlap`'s table, and this says why
    (:func:`fxprof.core.contention.emptied_words`). ``overlap(profile).attrs["notes"]``."""
    from .contention import emptied_words

    steps = fsdp_steps(profile)
    return emptied_words(profile, only=set(steps)) if steps and profile.num_runs else []


def overlap_totals(profile: "Profile") -> dict[str, Any] | None:
    """The whole run's all-gathers: medians over runs of each run's sums (``issue_ms``,
    ``ahead_ms``, ``waited_ms``, ``exposed_ms``), ``hidden_pct``, ``blocking`` (every gather
    blocked; ``some_blocking``: some did), and the layer and phase whose gathers exposed the most
    time (``most_exposed``: ``((layer, phase), ms)``). None without
    FSDP all-gather rows."""
    steps = fsdp_steps(profile)
    pairs = _pairs(profile, steps) if steps else pd.DataFrame()
    if pairs.empty or not pairs["issue_ms"].notna().any():
        return None
    gathers = pairs[pairs["issue_ms"].notna()].copy()
    on_cpu = str(profile.meta.get("device", "cpu")) == "cpu"
    asyncs = _async(profile.meta)
    gathers["blocking"] = [on_cpu and not asyncs.get(layer, False) for layer in gathers["layer"]]
    gathers.loc[gathers["blocking"], "ahead_ms"] = 0.0
    per_run = gathers.groupby(["run", "rank"])[["issue_ms", "ahead_ms", "waited_ms"]].sum()
    medians = per_run.median()
    flight = medians["ahead_ms"] + medians["waited_ms"]
    table = overlap(profile)
    exposed = table["exposed_ms"].dropna()
    most = exposed.idxmax() if len(exposed) and exposed.max() > 0 else None
    return {
        "issue_ms": float(medians["issue_ms"]), "ahead_ms": float(medians["ahead_ms"]),
        "waited_ms": float(medians["waited_ms"]), "exposed_ms": float(medians["issue_ms"] + medians["waited_ms"]),
        "hidden_pct": float(100.0 * medians["ahead_ms"] / flight) if flight > 0 else 0.0,
        "blocking": bool(gathers["blocking"].all()), "some_blocking": bool(gathers["blocking"].any()),
        "most_exposed": (most, float(exposed.loc[most])) if most is not None else None,
    }
