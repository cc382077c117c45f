"""Profiles of several ranks built from rank profiles (no torch): :func:`with_ranks` tags a
profile's runs with their rank, :func:`profile_parts` and :func:`merge` make one profile of every
rank's (:func:`fxprof.gather`), :func:`rank_profile` takes one rank's back out. The statistics
over ranks and the straggler rule are :mod:`fxprof.core.ranks`'s."""

from __future__ import annotations

import datetime as _dt
from typing import Any, Sequence

import numpy as np
import pandas as pd

from .nodes import NodeInfo
from .profile import RUN_COLUMNS, SAMPLE_COLUMNS, Profile
from .ranks import ISOLATED_UNDER_RANKS

__all__ = ["with_ranks", "profile_parts", "merge", "merged_notes", "rank_names", "rank_profile"]

# ------------------------------------------------------------------------ building
def _anatomy_records(profile: Profile) -> dict[str, dict[str, Any]]:
    frame = profile.anatomy
    return {
        node: {col: value for col, value in row.items() if not (value is pd.NA or (isinstance(value, float) and np.isnan(value)))}
        for node, row in frame.to_dict(orient="index").items()
    }


def with_ranks(profile: Profile, run_ranks: Sequence[int], barrier_ms: Sequence[float | None] | None = None,
               rank_runs: Sequence[int] | None = None) -> Profile:
    """A copy of ``profile`` whose runs carry a ``rank``, the rank's own run number ``rank_run``
    (default: the run number) and ``barrier_ms``; samples get their rank through their run."""
    runs = profile.runs[list(RUN_COLUMNS)].copy()
    runs["rank"] = np.asarray(run_ranks, dtype=np.int64)
    runs["rank_run"] = np.asarray(rank_runs if rank_runs is not None else runs["run"], dtype=np.int64)
    waits = [np.nan if v is None else float(v) for v in (barrier_ms if barrier_ms is not None else [None] * len(runs))]
    runs["barrier_ms"] = np.asarray(waits, dtype=np.float64)
    return Profile(profile.nodes, profile.columns, runs, profile.meta, _anatomy_records(profile))


def profile_parts(profile: Profile) -> tuple[list[NodeInfo], pd.DataFrame, pd.DataFrame, dict[str, Any], dict[str, dict[str, Any]]]:
    """What :func:`gather` sends of one rank's profile: ``(nodes, samples, runs, meta, anatomy)``."""
    runs = profile.runs
    return (list(profile.nodes), profile.samples[list(SAMPLE_COLUMNS)], runs[[*RUN_COLUMNS, *(c for c in ("rank", "rank_run", "barrier_ms") if c in runs.columns)]],
            dict(profile.meta), _anatomy_records(profile))


def merge(parts: Sequence[tuple[list[NodeInfo], pd.DataFrame, pd.DataFrame, dict[str, Any], dict[str, dict[str, Any]]]]) -> Profile:
    """One profile from each rank's ``(nodes, samples, runs, meta, anatomy)``, in rank order.
    Runs are renumbered so that every (rank, run) has its own run number; ``rank_run`` keeps the
    rank's own."""
    if any(p[3].get("mode") == "isolated" for p in parts):
        raise ValueError(ISOLATED_UNDER_RANKS)
    same_graph = all([n for n in p[0]] == [n for n in parts[0][0]] for p in parts)
    nodes: list[NodeInfo] = []
    samples, runs = [], []
    anatomy: dict[str, dict[str, Any]] = {}
    offset = 0
    for nodes_r, samples_r, runs_r, meta_r, anatomy_r in parts:
        rank = int(meta_r.get("rank", 0))
        runs_r = runs_r.copy()
        if "rank" not in runs_r.columns:
            runs_r["rank"], runs_r["rank_run"], runs_r["barrier_ms"] = rank, runs_r["run"], np.nan
        renumber = {int(r): offset + i for i, r in enumerate(runs_r["run"])}
        offset += len(runs_r)
        runs_r["run"] = runs_r["run"].map(renumber).astype(np.int64)
        samples_r = samples_r.assign(run=samples_r["run"].map(renumber).astype(np.int64), node=samples_r["node"].astype(str))
        if same_graph:
            if not nodes:
                nodes = list(nodes_r)
                anatomy = dict(anatomy_r)
        else:
            prefix = f"r{rank}:"
            nodes += [NodeInfo(**{**_fields(n), "name": prefix + n.name}) for n in nodes_r]
            anatomy.update({prefix + k: v for k, v in anatomy_r.items()})
            samples_r = samples_r.assign(node=prefix + samples_r["node"])
        samples.append(samples_r)
        runs.append(runs_r)
    meta = _merged_meta([p[3] for p in parts], same_graph)
    return Profile(nodes, pd.concat(samples, ignore_index=True), pd.concat(runs, ignore_index=True), meta, anatomy)


def _fields(n: NodeInfo) -> dict[str, Any]:
    import dataclasses

    return dataclasses.asdict(n)


#: meta keys that differ per rank by nature; kept per rank, left out of the merged header
_PER_RANK_KEYS = ("rank", "local_rank", "hostname", "device", "gpu", "created")


def _merged_meta(metas: Sequence[dict[str, Any]], same_graph: bool) -> dict[str, Any]:
    base = {k: v for k, v in metas[0].items() if k not in ("rank", "local_rank")}
    differ = sorted({k for m in metas for k in set(m) | set(metas[0]) if m.get(k) != metas[0].get(k)} - {"rank", "local_rank", "created"})
    base["ranks"] = [int(m.get("rank", i)) for i, m in enumerate(metas)]
    base["world_size"] = int(metas[0].get("world_size", len(metas)))
    base["per_rank"] = [{k: m.get(k) for k in dict.fromkeys([*_PER_RANK_KEYS, *differ]) if k in m} for m in metas]
    base["gathered"] = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    notes = merged_notes(metas)
    for key in _FOLDED_NOTES:  # the ranks' differ: each rank's is in the notes, naming it (merged_notes)
        if any(m.get(key) != metas[0].get(key) for m in metas):
            base.pop(key, None)
    if notes:
        base["notes"] = notes
    else:
        base.pop("notes", None)
    if not same_graph:
        base["rank_graphs"] = "different graphs on different ranks: node names carry an rN: prefix"
    return base


def rank_names(ranks: Sequence[int]) -> str:
    """``rank 1``, ``ranks 0-3``, ``ranks 0, 2-3``: the ranks in order, runs of consecutive ones
    joined."""
    found = sorted(set(int(r) for r in ranks))
    spans: list[list[int]] = []
    for r in found:
        if spans and r == spans[-1][1] + 1:
            spans[-1][1] = r
        else:
            spans.append([r, r])
    text = ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in spans)
    return ("rank " if len(found) == 1 else "ranks ") + text


def merged_notes(metas: Sequence[dict[str, Any]]) -> list[str]:
    """Every rank's notes (``meta["notes"]``, and a capture's note where the ranks' differ), each
    once, in the order the ranks hold them: a note every rank holds as it is, any other after the
    ranks that hold it (``rank 1: ...``, ``ranks 0-1: ...``). A note of one rank (its unprofiled run
    raised, a pass was skipped there) is that rank's and must not be lost when rank 0's header
    stands for them all."""
    ranks = [int(m.get("rank", i)) for i, m in enumerate(metas)]
    held: dict[str, list[int]] = {}
    for rank, meta in zip(ranks, metas):
        own = [str(n) for n in meta.get("notes") or ()]
        for key in _FOLDED_NOTES:  # one capture's note, shown on its own line when every rank has the same
            if meta.get(key) and any(m.get(key) != meta.get(key) for m in metas):
                own.append(str(meta[key]))
        for note in own:
            on = held.setdefault(note, [])
            if rank not in on:
                on.append(rank)
    everyone = set(ranks)
    return [note if set(on) == everyone else f"{rank_names(on)}: {note}" for note, on in held.items()]


#: single-note keys the header shows on their lines; where the ranks' differ, each rank's goes into the merged notes
_FOLDED_NOTES = ("capture_note", "nested_compile_note")


def rank_profile(profile: Profile, rank: int) -> Profile:
    """One rank's samples and runs of a gathered profile, as a plain (rank-less) profile."""
    runs = profile.runs
    runs = runs[runs["rank"] == rank]
    samples = profile.samples
    samples = samples[samples["run"].isin(runs["run"])][list(SAMPLE_COLUMNS)]
    return Profile(profile.nodes, samples, runs[list(RUN_COLUMNS)], {**profile.meta, "rank": rank}, _anatomy_records(profile))
