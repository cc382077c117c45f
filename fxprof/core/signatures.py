"""A session's runs, read back: each run's step and input signature, and roll-ups per signature.

:mod:`fxprof.measure.session` keeps the step and the input signature of every run in the
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
    session's ``meta``; a profile from :func:`fxprof.profile` gets none of them)."""
    runs = profile.runs
    steps, sigs = profile.meta.get("run_steps"), profile.meta.get("run_signatures")
    if steps is None or sigs is None or len(steps) != len(runs):
        return runs
    inputs = {s["id"]: "; ".join(s["inputs"]) for s in profile.meta.get("signatures", [])}
    return runs.assign(step=steps, signature=sigs, inputs=[inputs.get(s, "") for s in sigs])


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
        table = profile._build_table(tuple(int(r) for r in rows["run"]))
        parts.append(pd.concat({sig: group_by(table, key, depth)}, names=["signature"]))
    return pd.concat(parts)
