"""A session's runs, read back: each run's step and input signature, and roll-ups per signature.

:mod:`fxprof.measure.session.session` keeps the step and the input signature of every run in the
profile's ``meta`` (``run_steps``, ``run_signatures``: one entry per run; ``signatures``: what
each signature's inputs are), not as columns of the runs table, so that the saved formats
(JSON, ``.npz``, their schema) stay as they are. These functions join them back. No torch here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pandas as pd

from .rollup import group_by

if TYPE_CHECKING:
    from .profile import Profile

__all__ = ["session_runs", "by_signature"]


def session_runs(profile: "Profile") -> pd.DataFrame:
    """:attr:`Profile.runs` with each run's ``step``, ``signature`` and ``inputs`` (from a
    session's ``meta``; a profile from :func:`fxprof.profile` gets none of them). In a profile
    gathered over ``torch.distributed`` ranks, each run's entries are its own rank's (the
    ``rank_run``-th of that rank's lists; signature numbers are per rank)."""
    runs = profile.runs
    meta = profile.meta
    if meta.get("run_steps") is None or meta.get("run_signatures") is None:
        return runs
    if "rank_run" in runs.columns:  # gathered: per-rank lists where the ranks differ
        per_rank = {int(m.get("rank", i)): m for i, m in enumerate(meta.get("per_rank", []))}
        steps, sigs, inputs = [], [], []
        for rank, own in zip(runs["rank"].astype(int), runs["rank_run"].astype(int)):
            m = per_rank.get(rank, {})
            rank_steps, rank_sigs = m.get("run_steps", meta["run_steps"]), m.get("run_signatures", meta["run_signatures"])
            if own >= len(rank_steps) or own >= len(rank_sigs):
                return runs
            steps.append(rank_steps[own])
            sigs.append(rank_sigs[own])
            inputs.append(_inputs(m.get("signatures", meta.get("signatures", []))).get(rank_sigs[own], ""))
        return runs.assign(step=steps, signature=sigs, inputs=inputs)
    steps, sigs = meta["run_steps"], meta["run_signatures"]
    if len(steps) != len(runs) or len(sigs) != len(runs):
        return runs
    described = _inputs(meta.get("signatures", []))
    return runs.assign(step=steps, signature=sigs, inputs=[described.get(s, "") for s in sigs])


def _inputs(signatures: list) -> dict[int, str]:
    return {s["id"]: "; ".join(s["inputs"]) for s in signatures}


def by_signature(profile: "Profile", key: str | None = None, depth: int = 1) -> pd.DataFrame:
    """Roll a session's profile up per input signature.

    With ``key=None``: one row per signature (index ``signature``): ``runs``, ``steps`` (the
    steps its runs came from), ``median_total_ms``, ``mean_total_ms``, ``inputs``. With a
    :meth:`Profile.group_by` key (``"op"``, ``"scope"``...): that roll-up computed on each
    signature's runs alone, rows indexed by ``(signature, key)``.
    """
    runs = session_runs(profile)
    if "signature" not in runs.columns:
        raise ValueError("this profile has no per-run signatures: it was not made by fxprof.session")
    if key is None:
        grouped = runs.groupby("signature", sort=True)
        return pd.DataFrame({
            "runs": grouped.size(),
            "steps": grouped["step"].agg(lambda s: list(map(int, s))),
            "median_total_ms": grouped["total_ms"].median(),
            "mean_total_ms": grouped["total_ms"].mean(),
            "inputs": grouped["inputs"].first(),
        })
    parts = []
    for sig, rows in runs.groupby("signature", sort=True):
        table = profile.table_of_runs(rows["run"])
        parts.append(pd.concat({sig: group_by(table, key, depth)}, names=["signature"]))
    return pd.concat(parts)
