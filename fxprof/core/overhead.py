"""fxprof's own cost between the timed runs (no torch).

The run loop records the wall time of the timed runs and everything between them
(``meta["timed_wall_ms"]``). Inside that window are the runs themselves (their host time), the
model's own unprofiled runs that the fidelity line needs (``meta["own_wall_ms"]``: they are the
model's work, not fxprof's), time the process lost to other processes between runs
(``meta["contention"]["window_lost_ms"]`` less what the runs and the own runs lost), and the
rest: fxprof's bookkeeping (marks into samples, the progress bar, input copies).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np
import pandas as pd

from .contention import between_runs_lost_ms

__all__ = ["BetweenRuns", "between_runs"]


@dataclass(frozen=True)
class BetweenRuns:
    """``between_ms``: fxprof's own time between the runs; ``runs_ms``: the runs' summed host
    time; ``own_ms``: the model's own runs in the window; ``lost_ms``: time lost to other
    processes between runs (0 where not measured)."""

    between_ms: float
    runs_ms: float
    own_ms: float
    lost_ms: float

    @property
    def share(self) -> float:
        """``between_ms`` over the runs' own time."""
        return self.between_ms / self.runs_ms if self.runs_ms > 0 else math.nan


def _finite(value: Any) -> float:
    return float(value) if isinstance(value, (int, float)) and math.isfinite(value) else 0.0


def between_runs(meta: Mapping[str, Any], runs: pd.DataFrame) -> BetweenRuns | None:
    """fxprof's time between the timed runs of a profile, or None where the window was not
    measured (another clock, several ranks, isolated mode)."""
    wall = meta.get("timed_wall_ms")
    if not isinstance(wall, (int, float)) or "host_ms" not in runs.columns or "rank" in runs.columns or not len(runs):
        return None
    inside = float(np.nansum(runs["host_ms"].to_numpy(dtype=np.float64)))
    if inside <= 0:
        return None
    own = _finite(meta.get("own_wall_ms"))
    lost = _finite(between_runs_lost_ms(meta.get("contention") or {}))
    return BetweenRuns(between_ms=max(0.0, float(wall) - inside - own - lost), runs_ms=inside, own_ms=own, lost_ms=lost)
