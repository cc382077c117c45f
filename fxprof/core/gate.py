"""The whole run's verdict and the CI gate.

:func:`fxprof.compare` gives every node a verdict (faster, slower, same, too few runs) and the
whole run only a ratio with its interval. A gate in CI, and ``fxprof.whatif``, need a verdict
for the whole run too: :func:`run_verdict` gives it from the two sides' run totals by the same
rules as a node's (a two-sided Mann-Whitney U test, ``p < alpha`` **and** a change of at least
``min_effect``; "too few runs" when no outcome of that many runs could reach ``alpha``).
:func:`gate` says whether a comparison fails a ``--fail-on`` condition, and why.

numpy, pandas and scipy only (no torch): gating two saved profiles needs no torch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Sequence

import numpy as np
import pandas as pd
from numpy.typing import ArrayLike

from ..vocab import FAIL_ON, GATE_EXIT, HOST_CLOCK_TIMERS
from .compare import ALPHA, MIN_EFFECT, TOO_FEW

if TYPE_CHECKING:
    from .profile import Profile

__all__ = ["RunVerdict", "run_verdict", "paired_run_verdict", "less_lost", "gate", "gate_totals", "busy_sides_words", "BUSY_DRIFT", "FAIL_ON", "GATE_EXIT"]


@dataclass(frozen=True)
class RunVerdict:
    """``b``'s whole run against ``a``'s: ``ratio`` (median run of b over median run of a),
    ``low``/``high`` (its 95% bootstrap interval), ``p_value`` (Mann-Whitney U on the run
    totals; NaN when a side has fewer than 2 runs), ``verdict`` and the run counts."""

    ratio: float
    low: float
    high: float
    p_value: float
    verdict: str
    a_runs: int
    b_runs: int
    #: the runs were taken in pairs, one of each side a round (:func:`paired_run_verdict`):
    #: ``ratio`` is the median round's b/a, ``p_value`` a sign test test's
    paired: bool = False

    @property
    def speedup(self) -> float:
        """``1 / ratio``: above 1, b is faster."""
        return 1.0 / self.ratio if self.ratio > 0 else float("nan")


def run_verdict(a_totals: ArrayLike, b_totals: ArrayLike, alpha: float = ALPHA,
                min_effect: float = MIN_EFFECT) -> RunVerdict:
    """The verdict on ``b``'s run times against ``a``'s (milliseconds, one value a run), by
    compare's rules for a node: ``"slower"``/``"faster"`` when the two-sided Mann-Whitney U
    p-value is below ``alpha`` and the median moved by at least ``min_effect`` (``ratio >=
    1 + min_effect``, or ``<= 1 / (1 + min_effect)``); ``"too few runs"`` when the run counts
    cannot give ``p < alpha`` at all; ``""`` with fewer than 2 runs a side; else ``"same"``."""
    from .compare import verdict_series
    from .stats import node_p_values, ratio_interval, smallest_p_value

    xa = np.asarray(a_totals, dtype=np.float64)
    xb = np.asarray(b_totals, dtype=np.float64)
    xa, xb = xa[np.isfinite(xa)], xb[np.isfinite(xb)]
    ratio, low, high = ratio_interval(xa, xb)
    raw, _ = node_p_values([(xa, xb)])
    p = float(raw[0])
    too_few = pd.Series([bool(smallest_p_value(len(xa), len(xb)) >= alpha)]) if len(xa) >= 2 and len(xb) >= 2 else None
    verdict = verdict_series(pd.Series([p]), pd.Series([ratio]), alpha, min_effect, too_few).iloc[0]
    return RunVerdict(ratio=ratio, low=low, high=high, p_value=p, verdict=str(verdict), a_runs=len(xa), b_runs=len(xb))


def paired_run_verdict(a_totals: ArrayLike, b_totals: ArrayLike, alpha: float = ALPHA,
                       min_effect: float = MIN_EFFECT) -> RunVerdict:
    """The verdict on ``b``'s runs against ``a``'s where run ``i`` of both was taken in the same
    round (``fxprof ab``: interleaved in one process): by :func:`run_verdict`'s rules (``p <
    alpha`` and a change of at least ``min_effect``), on the rounds' ratios
    (:func:`fxprof.core.stats.paired_ratio`: their median, a sign-test p-value, an
    interval over rounds). A round in which another process took the CPU from one of the two
    runs gives one outlying ratio, where it widens two independent samples' spread."""
    from .compare import verdict_series
    from .stats import paired_ratio, smallest_paired_p_value

    ratio, low, high, p, pairs = paired_ratio(a_totals, b_totals)
    if pairs < 2:
        return RunVerdict(ratio=ratio, low=low, high=high, p_value=p, verdict="", a_runs=pairs, b_runs=pairs, paired=True)
    too_few = pd.Series([bool(smallest_paired_p_value(pairs) >= alpha)])
    verdict = verdict_series(pd.Series([p]), pd.Series([ratio]), alpha, min_effect, too_few).iloc[0]
    return RunVerdict(ratio=ratio, low=low, high=high, p_value=p, verdict=str(verdict), a_runs=pairs, b_runs=pairs,
                      paired=True)


#: a paired verdict of "same" whose interval reaches past the smallest change of interest
UNDECIDED = "undecided"


def resolved_paired_verdict(run: RunVerdict, min_effect: float = MIN_EFFECT) -> RunVerdict:
    """``run`` (:func:`paired_run_verdict`) with "same" only where the 95% interval of b/a lies
    inside the band of ``min_effect`` (between ``1 / (1 + min_effect)`` and ``1 + min_effect``):
    a "same" whose interval reaches past it cannot rule out the change it was asked about, and
    is :data:`UNDECIDED`. Beside three busy loops per core a real 1.45x slowdown read "same",
    and a 1.14x one "same" with an interval of 0.72 to 1.12 while no call lost time to other
    processes (calls shorter than a slice run whole, and the load average lags the loops)."""
    import dataclasses

    inside = 1.0 / (1.0 + min_effect) <= run.low and run.high <= 1.0 + min_effect
    if run.verdict == "same" and not inside:
        return dataclasses.replace(run, verdict=UNDECIDED)
    return run


def less_lost(times: Sequence[float], lost: Sequence[float] | None) -> tuple[list[float], int]:
    """Each call's time less what it lost to other processes (``lost``, ms, one a call; None or
    another length: the times as they are), and how many calls were busy
    (:func:`fxprof.core.contention.busy_mask`, a profile's rule for its runs). Interleaved rounds on a busy machine: the second call of a round is the one
    preempted (an A/A pair read 1.10-1.40x in rounds where b went second, 0.84-1.06x where it
    went first, at load 3 with a busy loop on each core), which the paired ratios alone cannot
    cancel when preemption is that regular."""
    if lost is None or len(lost) != len(times):
        return [float(t) for t in times], 0
    from .contention import busy_mask

    busy = int(busy_mask(lost, times).sum())
    from .contention import less_lost_ms

    return [less_lost_ms(t, w) for t, w in zip(times, lost)], busy


def gate_totals(profile: "Profile", keep_outliers: bool | None = None) -> list[float]:
    """The run times (ms) a gate holds a profile to: the runs its statistics keep (outliers and,
    where enough quiet runs remain, busy runs left out: :mod:`fxprof.core.contention`), and on
    the host clock (``timer="cpu"``, or a compiled profile's marks) each busy run still among them less the time it lost to
    other processes, so that a baseline taken on a quiet machine and a candidate on a busy one
    (or the other way round) compare the model's time, not the machine's load."""
    totals = profile.kept_totals(keep_outliers)
    found = profile.contention
    if found is None or not found.busy.any() or profile.meta.get("timer") not in HOST_CLOCK_TIMERS:
        return totals
    kept = profile.kept_runs(keep_outliers)
    runs = found.runs if kept is None else np.asarray(kept, dtype=np.int64)
    lost = dict(zip(found.runs.tolist(), np.where(found.busy, found.lost_ms, 0.0).tolist()))
    from .contention import less_lost_ms

    return [less_lost_ms(t, lost.get(int(r), 0.0)) for t, r in zip(totals, runs)]


#: the drift of a model's run time between two processes on a busy machine, measured: A/A pairs
#: beside other work (load 4-6 on 2 cores) read 0.90x to 1.14x (tests/benchmarks/gate_aa.py, docs/ci.md)
BUSY_DRIFT = 0.15


def gate(diff: pd.DataFrame, fail_on: str, run: RunVerdict | None, busy: str = "") -> tuple[bool, str]:
    """Whether the comparison ``diff`` (:func:`fxprof.compare`, per node) fails ``fail_on``
    (one of :data:`FAIL_ON`), and a sentence saying why or why not. ``run`` is the whole run's
    verdict (:func:`run_verdict`), needed for ``"slower"``. ``busy``: why a side was profiled
    on a busy machine (:func:`busy_sides_words`); then a change within :data:`BUSY_DRIFT` (what
    separate processes drift by there) passes as undecided instead of failing."""
    if fail_on not in FAIL_ON:
        raise ValueError(f"fail_on is one of {', '.join(FAIL_ON)}, got {fail_on!r}")
    failed, line = _gate(diff, fail_on, run)
    if not (failed and busy):
        return failed, line
    ratio = run.ratio if fail_on == "slower" and run is not None else float("nan")
    if fail_on == "slower" and ratio >= 1 + BUSY_DRIFT:
        return failed, line + f" (and beyond the {BUSY_DRIFT:.0%} that processes drift on a busy machine: {busy})"
    return False, (f"pass (undecided): {busy}: there, separate processes drift by up to {BUSY_DRIFT:.0%} in run time "
                   f"(docs/ci.md), more than this change; profile both sides on a quiet machine (or one pinned core each). "
                   f"Without the busy machine it would read: {line}")


def busy_sides_words(a: "Profile", b: "Profile") -> str:
    """Which side of a comparison was profiled on a busy machine, in words ("" if neither)."""
    from .contention import busy_machine

    said = [f"{side} was profiled on a busy machine ({why})" for side, prof in (("a", a), ("b", b))
            for why in [busy_machine(prof.meta, prof.stored_runs)] if why]
    return "; ".join(said)


def _gate(diff: pd.DataFrame, fail_on: str, run: RunVerdict | None) -> tuple[bool, str]:
    effect = f"{diff.attrs.get('min_effect', MIN_EFFECT):.0%}"
    if run is not None and run.verdict == "":  # saved profiles, but under 2 runs a side: no test can decide
        return False, (f"pass (undecided): too few runs to tell: {run.a_runs} and {run.b_runs} run(s), and a verdict "
                       f"needs at least 2 a side; {'run' if run.paired else 'profile'} with more --iters")
    if fail_on == "slower":
        if run is None:
            raise ValueError("the whole run's verdict needs the runs of both sides: compare saved profiles (.json or .npz), "
                             "not per-node CSV tables")
        words = (f"b's median run is {run.ratio:.3f}x a's (95% interval {run.low:.3f} to {run.high:.3f}, "
                 f"p = {run.p_value:.2g}, {run.a_runs} and {run.b_runs} runs)") if not run.paired else (
                 f"b/a is {run.ratio:.3f} in the median of {run.a_runs} interleaved rounds (95% interval {run.low:.3f} to "
                 f"{run.high:.3f}, sign test p = {run.p_value:.2g})")
        if run.verdict == "slower":
            return True, f"FAIL: b is slower than a: {words}, beyond noise and at least {effect}"
        if run.verdict == TOO_FEW:
            return False, f"pass (undecided): too few runs to tell: {words}; {'run' if run.paired else 'profile'} with more --iters"
        if run.verdict == UNDECIDED:
            return False, (f"pass (undecided): the 95% interval reaches past {effect}, so a change that size is not ruled "
                           f"out: {words}; run more rounds (--iters), on a quiet machine or one pinned core, to decide")
        return False, f"pass: b is not significantly slower than a by {effect} or more ({run.verdict}): {words}"
    verdicts = diff["verdict"] if "verdict" in diff.columns else pd.Series(dtype=str)
    if not (verdicts != "").any():
        raise ValueError("node verdicts need the samples of both sides: compare saved profiles (.json or .npz), "
                         "not per-node CSV tables")
    other = diff.attrs.get("other_op") or {}  # matched by name, another kind of work: not the same node's time
    slower = diff.index[(verdicts == "slower") & ~diff.index.isin(list(other))]
    unjudged = (f"; {len(other)} node(s) matched by name do another kind of work in b and are not judged (see the "
                f"warnings: two different models?)") if other else ""
    if len(slower):
        names = ", ".join(f"{n} ({diff.at[n, 'ratio']:.2f}x)" for n in slower[:10])
        more = f" and {len(slower) - 10} more" if len(slower) > 10 else ""
        return True, f"FAIL: {len(slower)} node(s) slower in b, beyond noise and at least {effect}: {names}{more}{unjudged}"
    return False, (f"pass: no node is significantly slower in b by {effect} or more ({int((verdicts != '').sum())} nodes "
                   f"tested){unjudged}")
