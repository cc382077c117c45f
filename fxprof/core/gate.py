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
from typing import Sequence

import numpy as np
import pandas as pd

from ..vocab import FAIL_ON, GATE_EXIT
from .compare import ALPHA, MIN_EFFECT, TOO_FEW

__all__ = ["RunVerdict", "run_verdict", "gate", "FAIL_ON", "GATE_EXIT"]


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

    @property
    def speedup(self) -> float:
        """``1 / ratio``: above 1, b is faster."""
        return 1.0 / self.ratio if self.ratio > 0 else float("nan")


def run_verdict(a_totals: Sequence[float], b_totals: Sequence[float], alpha: float = ALPHA,
                min_effect: float = MIN_EFFECT) -> RunVerdict:
    """The verdict on ``b``'s run times against ``a``'s (milliseconds, one value a run), by
    compare's rules for a node: ``"slower"``/``"faster"`` when the two-sided Mann-Whitney U
    p-value is below ``alpha`` and the median moved by at least ``min_effect`` (``ratio >=
    1 + min_effect``, or ``<= 1 / (1 + min_effect)``); ``"too few runs"`` when the run counts
    cannot give ``p < alpha`` at all; ``""`` with fewer than 2 runs a side; else ``"same"``."""
    from .compare import _verdicts
    from .stats import node_p_values, ratio_interval, smallest_p_value

    xa = np.asarray(a_totals, dtype=np.float64)
    xb = np.asarray(b_totals, dtype=np.float64)
    xa, xb = xa[np.isfinite(xa)], xb[np.isfinite(xb)]
    ratio, low, high = ratio_interval(xa, xb)
    raw, _ = node_p_values([(xa, xb)])
    p = float(raw[0])
    too_few = pd.Series([bool(smallest_p_value(len(xa), len(xb)) >= alpha)]) if len(xa) >= 2 and len(xb) >= 2 else None
    verdict = _verdicts(pd.Series([p]), pd.Series([ratio]), alpha, min_effect, too_few).iloc[0]
    return RunVerdict(ratio=ratio, low=low, high=high, p_value=p, verdict=str(verdict), a_runs=len(xa), b_runs=len(xb))


def gate(diff: pd.DataFrame, fail_on: str, run: RunVerdict | None) -> tuple[bool, str]:
    """Whether the comparison ``diff`` (:func:`fxprof.compare`, per node) fails ``fail_on``
    (one of :data:`FAIL_ON`), and a sentence saying why or why not. ``run`` is the whole run's
    verdict (:func:`run_verdict`), needed for ``"slower"``."""
    if fail_on not in FAIL_ON:
        raise ValueError(f"fail_on is one of {', '.join(FAIL_ON)}, got {fail_on!r}")
    effect = f"{diff.attrs.get('min_effect', MIN_EFFECT):.0%}"
    if run is not None and run.verdict == "":  # saved profiles, but under 2 runs a side: no test can decide
        return False, (f"pass (undecided): too few runs to tell: {run.a_runs} and {run.b_runs} run(s), and a verdict "
                       f"needs at least 2 a side; profile with more --iters")
    if fail_on == "slower":
        if run is None:
            raise ValueError("the whole run's verdict needs the runs of both sides: compare saved profiles (.json or .npz), "
                             "not per-node CSV tables")
        words = (f"b's median run is {run.ratio:.3f}x a's (95% interval {run.low:.3f} to {run.high:.3f}, "
                 f"p = {run.p_value:.2g}, {run.a_runs} and {run.b_runs} runs)")
        if run.verdict == "slower":
            return True, f"FAIL: b is slower than a: {words}, beyond noise and at least {effect}"
        if run.verdict == TOO_FEW:
            return False, f"pass (undecided): too few runs to tell: {words}; profile with more --iters"
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
