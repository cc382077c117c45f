"""When a node's change is not to be trusted: samples in two clusters, or spread wider than the change.

A Mann-Whitney test on a busy machine can call a node "7.6x faster" while its baseline runs
took 3 ms or 7 ms at random (two modes) or scattered over more than the change itself.
:func:`noise_reason` says why such a node's verdict is held back ("noisy") in words a reader
can check; :func:`fxprof.core.compare.compare` applies it to every node judged faster or
slower. Pure numpy, no torch.
"""

from __future__ import annotations

import numpy as np

__all__ = ["NOISY", "MODE_GAP", "modes", "noise_reason"]

#: the verdict of a node whose samples cannot carry a faster/slower verdict
NOISY = "noisy"
#: two clusters of samples count as two modes when the upper one starts this many times above
#: where the lower one ends (3 ms and 7 ms: 2.3x)
MODE_GAP = 1.5


def modes(samples: np.ndarray) -> tuple[float, float] | None:
    """The medians of two clusters when ``samples`` fall into two (each at least 2 samples and
    a fifth of them, the upper starting :data:`MODE_GAP` times above the lower's end), else None."""
    x = np.sort(np.asarray(samples, dtype=np.float64)[np.isfinite(samples)])
    n = len(x)
    least = max(2, int(np.ceil(0.2 * n)))
    if n < 2 * least or x[0] <= 0:
        return None
    cuts = np.arange(least, n - least + 1)
    ratios = x[cuts] / x[cuts - 1]
    best = int(np.argmax(ratios))
    if ratios[best] < MODE_GAP:
        return None
    cut = int(cuts[best])
    return float(np.median(x[:cut])), float(np.median(x[cut:]))


def _ms(value: float) -> str:
    """A time in ms with a unit that suits it, 3 figures (the views' format, without importing them)."""
    for unit, scale in (("s", 1000.0), ("ms", 1.0), ("us", 1e-3), ("ns", 1e-6)):
        if abs(value) >= scale:
            return f"{value / scale:.3g} {unit}"
    return "0" if value == 0 else f"{value / 1e-6:.3g} ns"


def noise_reason(a: np.ndarray, b: np.ndarray, fmt=_ms) -> str:
    """Why the change from samples ``a`` to ``b`` is noise rather than a verdict, or "".

    Noisy when either side has two modes (:func:`modes`), or when either side's interquartile
    range is wider than the change of the medians."""
    reasons = []
    for side, x in (("a", a), ("b", b)):
        found = modes(x)
        if found:
            reasons.append(f"{side} has two modes ({fmt(found[0])} and {fmt(found[1])})")
    if not reasons:
        change = abs(float(np.median(b)) - float(np.median(a)))
        for side, x in (("a", a), ("b", b)):
            q1, q3 = np.percentile(np.asarray(x, dtype=np.float64), [25, 75])
            spread = float(q3 - q1)
            if spread > change:
                reasons.append(f"{side}'s IQR {fmt(spread)} is wider than the change {fmt(change)}")
                break
    return "; ".join(reasons)
