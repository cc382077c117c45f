"""Statistics that survive a noisy machine: outlier runs, and the tests behind compare's verdicts.

Every function here reads raw samples or run totals and returns numbers; nothing is stored in
place of the samples, and nothing here formats output. The rules, and why they were chosen, are
written out in docs/methodology.md ("Statistics on a noisy machine").

- Outlier runs: a timed run whose total time is above both Tukey's far-out fence of the run
  totals (third quartile plus 3 interquartile ranges) and :data:`OUTLIER_MIN_RATIO` times the
  median run. Such runs (a preemption, a page-cache flush, another process taking the cores) are
  left out of the derived statistics by default; their samples stay in ``Profile.samples``.
- Per-node tests: the two-sided Mann-Whitney U test (``scipy.stats.mannwhitneyu``) on the two
  sets of samples, then the Benjamini-Hochberg correction (``scipy.stats.false_discovery_control``)
  over every node tested.
- The whole run: a percentile-bootstrap confidence interval (``scipy.stats.bootstrap``) for the
  ratio of median run totals.

scipy is imported on first use, so ``import fxprof`` works where it is missing.
"""

from __future__ import annotations

import functools
import inspect
from typing import Any, Sequence

import numpy as np
import pandas as pd
from numpy.typing import ArrayLike

__all__ = [
    "OUTLIER_FENCE_IQR",
    "OUTLIER_MIN_RATIO",
    "OUTLIER_MIN_RUNS",
    "outlier_fence",
    "outlier_mask",
    "node_p_values",
    "ratio_interval",
]

#: a run is an outlier when its total exceeds Q3 + OUTLIER_FENCE_IQR x IQR of the run totals...
OUTLIER_FENCE_IQR = 3.0
#: ...and also OUTLIER_MIN_RATIO x the median run (so a tight, quiet profile flags nothing)
OUTLIER_MIN_RATIO = 1.2
#: with fewer timed runs than this no run is called an outlier (quartiles of 4 values say little)
OUTLIER_MIN_RUNS = 5


def outlier_fence(total_ms: ArrayLike) -> float:
    """The run time above which a run is an outlier (NaN with fewer than :data:`OUTLIER_MIN_RUNS` runs).

    ``max(Q3 + 3 IQR, 1.2 median)`` of the finite run totals.
    """
    totals = np.asarray(total_ms, dtype=np.float64)
    totals = totals[np.isfinite(totals)]
    if len(totals) < OUTLIER_MIN_RUNS:
        return float("nan")
    q1, med, q3 = np.percentile(totals, [25, 50, 75])
    return float(max(q3 + OUTLIER_FENCE_IQR * (q3 - q1), OUTLIER_MIN_RATIO * med))


def outlier_mask(total_ms: ArrayLike) -> np.ndarray:
    """One boolean per run: True where the run's total is above :func:`outlier_fence`."""
    totals = np.asarray(total_ms, dtype=np.float64)
    fence = outlier_fence(totals)
    if np.isnan(fence):
        return np.zeros(len(totals), dtype=bool)
    with np.errstate(invalid="ignore"):
        return totals > fence


def node_p_values(pairs: Sequence[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    """Mann-Whitney U p-values for each (a samples, b samples) pair, raw and BH-adjusted.

    A pair where either side has fewer than 2 samples gets NaN (not tested) and takes no part in
    the correction. Two sides made of one identical value (a fake clock) get p = 1.

    Pairs are tested in batches, one ``mannwhitneyu(..., axis=1)`` call per (size of a, size
    of b, ties or not): a profile's nodes mostly share their run counts, so 10,000 nodes take a
    few calls instead of 10,000. Batching by ties keeps scipy's choice of method (exact for
    small samples without ties, else the normal approximation) what it is for each pair alone,
    so the p-values equal those of one call per pair.
    """
    from scipy.stats import false_discovery_control, mannwhitneyu

    raw = np.full(len(pairs), np.nan)
    # pairs of the same sizes are checked together, one chunk of rows at a time (a profile's
    # nodes mostly share their run counts: 10,000 nodes, a few dozen numpy calls); a pair
    # with a non-finite value changes size once cleaned, and goes through _batch_one
    by_size: dict[tuple[int, int], list[int]] = {}
    for i, (xa, xb) in enumerate(pairs):
        by_size.setdefault((len(xa), len(xb)), []).append(i)
    batches: dict[tuple[int, int, bool], list[int]] = {}
    clean: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    for (size_a, size_b), rows in by_size.items():
        if size_a < 2 or size_b < 2:  # too few samples even before cleaning: not tested
            continue
        step = max(1, _CHUNK // (size_a + size_b))
        for first in range(0, len(rows), step):
            chunk = np.asarray(rows[first:first + step])
            a = np.stack([np.asarray(pairs[i][0], dtype=np.float64) for i in chunk])
            b = np.stack([np.asarray(pairs[i][1], dtype=np.float64) for i in chunk])
            finite = np.isfinite(a).all(axis=1) & np.isfinite(b).all(axis=1)
            for i in chunk[~finite]:
                _batch_one(int(i), pairs[int(i)], raw, batches, clean)
            if not finite.any():
                continue
            chunk, a, b = chunk[finite], a[finite], b[finite]
            # all ties: no evidence of any difference
            same = np.minimum(a.min(axis=1), b.min(axis=1)) == np.maximum(a.max(axis=1), b.max(axis=1))
            raw[chunk[same]] = 1.0
            chunk, a, b = chunk[~same], a[~same], b[~same]
            if min(size_a, size_b) <= 8:  # ties decide scipy's method only here (exact vs normal)
                ties = (np.diff(np.sort(np.concatenate([a, b], axis=1), axis=1), axis=1) == 0).any(axis=1)
            else:
                ties = np.zeros(len(chunk), dtype=bool)
            for tied in (False, True):
                rows_with = ties == tied
                if rows_with.any():
                    raw[chunk[rows_with]] = _mann_whitney(mannwhitneyu, a[rows_with], b[rows_with])
    for (size_a, size_b, _), rows in batches.items():
        # in chunks of about _CHUNK values: the stacked copies and scipy's ranking temporaries
        # stay bounded however many samples the profiles hold (rows are independent: the
        # p-values are the same as in one call)
        step = max(1, _CHUNK // (size_a + size_b))
        for first in range(0, len(rows), step):
            batch = rows[first:first + step]
            a = np.stack([clean[i][0] for i in batch])
            b = np.stack([clean[i][1] for i in batch])
            raw[batch] = _mann_whitney(mannwhitneyu, a, b)
    adjusted = np.full(len(pairs), np.nan)
    tested = ~np.isnan(raw)
    if tested.any():
        adjusted[tested] = false_discovery_control(raw[tested], method="bh")
    return raw, adjusted


#: values (both sides) per mannwhitneyu call in :func:`node_p_values`
_CHUNK = 1 << 18


def _mann_whitney(mannwhitneyu: Any, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Two-sided p-values of rows of ``a`` against rows of ``b`` (copies, sorted here in place).
    The test is of ranks, so the order of a side's values does not change it (the ranks are
    halves and whole numbers, summed exactly in any order); sorted, each row scipy ranks is two
    sorted runs, which its stable sort merges in one pass instead of sorting from scratch."""
    a.sort(axis=1)
    b.sort(axis=1)
    return mannwhitneyu(a, b, axis=1, alternative="two-sided").pvalue


def _batch_one(i: int, pair: tuple[Any, Any], raw: np.ndarray, batches: dict[tuple[int, int, bool], list[int]],
               clean: dict[int, tuple[np.ndarray, np.ndarray]]) -> None:
    """A pair with a non-finite value, cleaned and sorted into a batch (or its p-value set)."""
    xa, xb = _finite(pair[0]), _finite(pair[1])
    if len(xa) < 2 or len(xb) < 2:
        return
    if min(xa.min(), xb.min()) == max(xa.max(), xb.max()):  # all ties: no evidence of any difference
        raw[i] = 1.0
        return
    small = min(len(xa), len(xb)) <= 8
    ties = small and bool((np.diff(np.sort(np.concatenate([xa, xb]))) == 0).any())
    batches.setdefault((len(xa), len(xb), ties), []).append(i)
    clean[i] = (xa, xb)


def _finite(values: Any) -> np.ndarray:
    array = np.asarray(values, dtype=np.float64)
    finite = np.isfinite(array)
    return array if finite.all() else array[finite]


@functools.lru_cache(maxsize=256)
def smallest_p_value(n_a: int, n_b: int) -> float:
    """The smallest two-sided Mann-Whitney U p-value that samples of sizes ``n_a`` and ``n_b``
    can give at all (every value of one side above every value of the other, no ties): with 3
    samples a side it is 0.1, so no change of any size can reach a 0.05 level."""
    from scipy.stats import mannwhitneyu

    if n_a < 2 or n_b < 2:
        return float("nan")
    return float(mannwhitneyu(np.arange(n_a, dtype=np.float64), np.arange(n_a, n_a + n_b, dtype=np.float64),
                              alternative="two-sided").pvalue)


def paired_ratio(a: ArrayLike, b: ArrayLike, confidence: float = 0.95, resamples: int = 2000,
                 seed: int = 0) -> tuple[float, float, float, float, int]:
    """Runs taken in pairs (run ``i`` of ``a`` and of ``b`` in the same round, as ``fxprof ab``
    interleaves them): ``(ratio, low, high, p_value, pairs)``. The ratio is the median of the
    rounds' ``b/a``; its percentile-bootstrap interval resamples whole rounds
    (``scipy.stats.bootstrap``, fixed seed); the p-value is the two-sided sign test of that
    median (``scipy.stats.binomtest`` on how many rounds b was the slower, ties left out). Drift
    that slows both runs of a round cancels in its ratio, where two independent samples keep it
    as spread; a round in which another process took the CPU from one run counts as one sign,
    where a rank test (Wilcoxon's signed-rank) gives it the largest weight (a 1.49x slower change
    read p = 0.014 in 30 rounds at load 3.6). NaN with fewer than 2 finite pairs."""
    xa = np.asarray(a, dtype=np.float64)
    xb = np.asarray(b, dtype=np.float64)
    n = min(len(xa), len(xb))
    xa, xb = xa[:n], xb[:n]
    keep = np.isfinite(xa) & np.isfinite(xb) & (xa > 0) & (xb > 0)
    logs = np.log(xb[keep] / xa[keep])
    nan = float("nan")
    if len(logs) < 2:
        return nan, nan, nan, nan, len(logs)
    from scipy.stats import binomtest, bootstrap

    ratio = float(np.exp(np.median(logs)))
    result = bootstrap((logs,), lambda x, axis=-1: np.median(x, axis=axis), vectorized=True, confidence_level=confidence,
                       n_resamples=resamples, method="percentile", **_seed(seed))
    signs = logs[logs != 0]
    p = float(binomtest(int((signs > 0).sum()), len(signs), 0.5).pvalue) if len(signs) else 1.0
    return (ratio, float(np.exp(result.confidence_interval.low)), float(np.exp(result.confidence_interval.high)), p,
            len(logs))


def smallest_paired_p_value(pairs: int) -> float:
    """The smallest two-sided sign-test p-value that ``pairs`` pairs can give (every difference of
    one sign): ``2 / 2**pairs``; 5 pairs cannot reach 0.05."""
    return 2.0 / 2.0 ** pairs if pairs >= 1 else float("nan")


def ratio_interval(a: ArrayLike, b: ArrayLike, confidence: float = 0.95,
                   resamples: int = 2000, seed: int = 0) -> tuple[float, float, float]:
    """``median(b) / median(a)`` and its percentile-bootstrap confidence interval.

    Runs of ``a`` and of ``b`` are resampled independently (``scipy.stats.bootstrap``, fixed
    seed, so the same profiles always give the same interval). Returns (ratio, low, high); NaN
    where a side has fewer than 2 finite values or a median of 0.
    """
    xa = np.asarray(a, dtype=np.float64)
    xb = np.asarray(b, dtype=np.float64)
    xa, xb = xa[np.isfinite(xa)], xb[np.isfinite(xb)]
    nan = float("nan")
    if len(xa) < 2 or len(xb) < 2 or np.median(xa) <= 0:
        return nan, nan, nan
    ratio = float(np.median(xb) / np.median(xa))
    from scipy.stats import bootstrap

    def statistic(sa: np.ndarray, sb: np.ndarray, axis: int = -1) -> np.ndarray:
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.median(sb, axis=axis) / np.median(sa, axis=axis)

    result = bootstrap((xa, xb), statistic, vectorized=True, paired=False, confidence_level=confidence,
                       n_resamples=resamples, method="percentile", **_seed(seed))
    return ratio, float(result.confidence_interval.low), float(result.confidence_interval.high)


def _seed(seed: int) -> dict[str, Any]:
    """scipy 1.15 renamed bootstrap's ``random_state`` to ``rng``."""
    from scipy.stats import bootstrap

    name = "rng" if "rng" in inspect.signature(bootstrap).parameters else "random_state"
    return {name: np.random.default_rng(seed)}


def shares(table: pd.DataFrame) -> pd.Series:
    """Percent of the summed median node times (robust: one slow sample barely moves a median);
    of the summed means when every median is 0. NaN (nodes that never ran) count as 0."""
    for col in ("median_ms", "mean_ms"):
        total = float(table[col].sum())  # NaN (nodes that never ran) are skipped
        if total > 0:
            return (table[col] / total * 100.0).fillna(0.0)
    return pd.Series(0.0, index=table.index)
