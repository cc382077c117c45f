"""How close a profiled run is to the model's own: the figures behind the header's fidelity line
and the ``(outside the graph)`` row (no torch).

Every profile times the model's own forward too, uninstrumented and interleaved with the
profiled runs (:mod:`fxprof.measure.eager.fidelity`), and keeps each of those runs in
``meta["own_runs_ms"]``; a compiled profile's unprofiled runs are
``meta["compiled"]["unprofiled_ms"]``. From them:

- the **ratio**: the median profiled run over the median own run (1.00: profiling cost nothing);
- the time **outside every node**: the own run's median minus the summed median node times,
  where the graph lacks work the model does (the eager Python between dynamo's graphs) and the
  interpreter's own steps between small nodes. It is measured on unprofiled runs, so the rows
  of a table plus it add up to the model's own run.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np

__all__ = ["iqr_share", "OWN_RUNS", "GPU_RATIO_LIMIT", "OUTSIDE_MIN_SHARE", "OWN_SPREAD_LIMIT", "OWN_RUNS_MIN", "Fidelity", "own_runs_ms", "fidelity", "outside_label",
           "dispatch_differences", "describe_differences"]

#: ``meta`` key: the model's own forward times (ms), each unprofiled run in the order it ran
OWN_RUNS = "own_runs_ms"
#: above this ratio on a GPU the header says what to do
GPU_RATIO_LIMIT = 1.2
#: the outside row is shown when it is at least this share of the own run
OUTSIDE_MIN_SHARE = 0.01


def _median(values: Sequence[float]) -> float:
    ordered = sorted(float(v) for v in values if v == v)
    if not ordered:
        return math.nan
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2.0


def own_runs_ms(meta: Mapping[str, Any]) -> list[float]:
    """The model's own (unprofiled) run times of a profile, in ms: ``meta["own_runs_ms"]``, or a
    compiled profile's unprofiled runs; ``[]`` when none were measured."""
    runs = meta.get(OWN_RUNS)
    if not runs:
        runs = (meta.get("compiled") or {}).get("unprofiled_ms") or ()
    return [float(v) for v in runs]


#: own runs whose interquartile range is above this share of their median are too noisy for a ratio
OWN_SPREAD_LIMIT = 0.25
#: fewer own runs than this give no ratio
OWN_RUNS_MIN = 3


@dataclass(frozen=True)
class Fidelity:
    """The profiled run against the model's own.

    ``own_ms``/``profiled_ms``: medians; ``ratio``: profiled over own; ``node_ms``: the summed
    median node times; ``outside_ms``: the own run's time in no node (``own_ms - node_ms``, at
    least 0); ``own_runs``: how many own runs the median is over (the quiet ones where other
    processes took time from some); ``gpu``: the profile ran on a GPU; ``corrected_own``: own runs
    that lost time to other processes, in the median less that time (too few quiet ones);
    ``busy_profiled``: the profiled runs the median is over include busy ones; ``own_spread``:
    the own runs' IQR over their median."""

    own_ms: float
    profiled_ms: float
    node_ms: float
    own_runs: int
    gpu: bool
    corrected_own: int = 0
    busy_profiled: bool = False
    own_spread: float = 0.0

    @property
    def unreliable(self) -> str:
        """Why the ratio and the outside time are not stated ("" when they are): too few own runs,
        own runs too spread, or runs that lost time to other processes."""
        if self.own_runs < OWN_RUNS_MIN:
            return f"only {self.own_runs} unprofiled run(s), fewer than {OWN_RUNS_MIN}"
        if self.busy_profiled:
            return "the profiled runs lost time to other processes (busy machine)"
        if 2 * self.corrected_own > self.own_runs:
            # an estimate, not a measurement: docs/cli.md's run read 0.87x with 4 of its 5 own runs corrected
            return (f"{self.corrected_own} of the {self.own_runs} unprofiled runs lost time to other processes (busy "
                    f"machine), and a ratio would rest on their times less that")
        if self.own_spread > OWN_SPREAD_LIMIT:
            return (f"the unprofiled runs spread {self.own_spread * 100:.0f}% of their median (IQR), above "
                    f"{OWN_SPREAD_LIMIT:.0%}: a noisy machine")
        return ""

    @property
    def ratio(self) -> float:
        return self.profiled_ms / self.own_ms if self.own_ms > 0 else math.nan

    @property
    def outside_ms(self) -> float:
        if not (self.own_ms > 0) or self.node_ms != self.node_ms:
            return math.nan
        return max(self.own_ms - self.node_ms, 0.0)

    @property
    def outside_shown(self) -> bool:
        """Whether the outside row is worth a row: at least :data:`OUTSIDE_MIN_SHARE` of the run,
        from own runs that can be trusted (:attr:`unreliable` empty)."""
        return (self.outside_ms == self.outside_ms and self.outside_ms >= OUTSIDE_MIN_SHARE * self.own_ms
                and not self.unreliable)

    @property
    def too_slow(self) -> bool:
        """Over :data:`GPU_RATIO_LIMIT` on a GPU: fxprof's marks are a visible part of the node times."""
        return self.gpu and self.ratio > GPU_RATIO_LIMIT


def iqr_share(values: Sequence[float]) -> float:
    """Interquartile range over the median (0 with fewer than two values)."""
    if len(values) < 2:
        return 0.0
    q1, middle, q3 = np.percentile(np.asarray(values, dtype=np.float64), [25, 50, 75])
    return float((q3 - q1) / middle) if middle > 0 else math.inf


def fidelity(meta: Mapping[str, Any], run_totals: Sequence[float], node_medians: Sequence[float],
             busy_profiled: bool = False) -> Fidelity | None:
    """The :class:`Fidelity` of a profile from its ``meta``, its kept run totals and its nodes'
    median times (``busy_profiled``: those runs include some that lost time to other
    processes); None when no own run (or no profiled run) was measured. Own runs that lost time
    to other processes are left out where at least three quiet ones remain
    (:func:`fxprof.core.contention.quiet_values`)."""
    from .contention import quiet_values

    own = own_runs_ms(meta)
    if not own or not len(run_totals):
        return None
    contention = meta.get("contention") or {}
    lost = contention.get("own_lost_ms") if meta.get(OWN_RUNS) else contention.get("unprofiled_lost_ms")
    if meta.get("ranks"):
        # a gathered profile's runs are not judged for lost time (fxprof.core.contention): its own
        # runs are not either, or a ratio would hold one side's lost time and not the other's
        # (two ranks on one core: 1.77x against own runs "less the time they lost")
        used, corrected = [float(v) for v in own], 0
    else:
        used, corrected = quiet_values(own, lost)
    gpu = str(meta.get("device", "")).startswith("cuda")
    nodes = [float(v) for v in node_medians if v == v]
    return Fidelity(own_ms=_median(used), profiled_ms=_median(run_totals), node_ms=math.fsum(nodes) if nodes else math.nan,
                    own_runs=len(used), gpu=gpu, corrected_own=corrected, busy_profiled=busy_profiled, own_spread=iqr_share(used))


def outside_label(meta: Mapping[str, Any]) -> str:
    """The name of the row of time in no node: ``(outside the graph)`` where the graphs lack
    some of the model's Python (dynamo's graph breaks, compiled mode), ``(between nodes)`` where
    one graph holds it all (a symbolic trace, in a profile or a session alike)."""
    return "(outside the graph)" if meta.get("capture") in ("dynamo", "compiled") else "(between nodes)"


# ------------------------------------------------------------- same program, or said
def dispatch_differences(eager: Mapping[str, int], captured: Mapping[str, int]) -> list[tuple[str, int, int]]:
    """``(op, eager count, captured count)`` for every aten op that one eager forward and one run of
    the captured program dispatch a different number of times, largest difference first."""
    ops = set(eager) | set(captured)
    found = [(op, int(eager.get(op, 0)), int(captured.get(op, 0))) for op in ops if eager.get(op, 0) != captured.get(op, 0)]
    found.sort(key=lambda t: (-abs(t[1] - t[2]), t[0]))
    return found


def describe_differences(differences: Sequence[tuple[str, int, int]], limit: int = 4) -> str:
    """One sentence naming the ops the captured program runs that the model does not, and the
    other way round ("the captured graph runs aten::_scaled_dot_product_attention_math 12x where
    the model runs aten::_scaled_dot_product_cudnn_attention 12x"), or "" when there is none."""
    if not differences:
        return ""
    extra = [(op, c - e) for op, e, c in differences if c > e]
    missing = [(op, e - c) for op, e, c in differences if e > c]

    def words(items: list[tuple[str, int]]) -> str:
        shown = ", ".join(f"{op} {n}x" for op, n in items[:limit])
        return shown + (f" and {len(items) - limit} more op(s)" if len(items) > limit else "")

    parts = []
    if extra:
        parts.append(f"the captured graph runs {words(extra)}")
    if missing:
        parts.append(("where the model runs " if extra else "the captured graph does not run ") + words(missing))
    return (" ".join(parts) + " (one forward each, counted by aten op): the profile times another program than the "
            "model runs; its node times and memory differ where these ops are")
