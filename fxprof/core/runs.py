"""Choosing runs by a short text: ``representative``, ``all``, ``3``, ``0-4``, ``0,5,9``, ``first:N``,
``last:N``, ``median``.

``representative`` (the Chrome trace's default) is the fastest, the median and the slowest run by
whole-run time (``total_ms``; the median of an even count is the lower middle run): a trace of
every run of a long profile is mostly repetition and too big for the viewers.

Used by the Chrome trace (``Profile.to_chrome_trace(runs=...)``, ``fxprof profile --trace-runs``).
Imports no torch and no pandas, so the command line can check a spec before anything runs.
"""

from __future__ import annotations

import math
from typing import Any, Iterable, Sequence

__all__ = ["parse_runs", "select_runs", "run_labels", "NAMED"]

#: the selections named by a word
NAMED = ("representative", "all", "median")


def parse_runs(spec: Any, limit: int | None = None) -> tuple:
    """A run selection, checked: ``("representative",)``, ``("all",)``, ``("median",)``, ``("first", n)``, ``("last", n)``
    or ``("list", (i, j, ...))``. Takes a text spec, an int, or an iterable of ints. With
    ``limit`` (the number of runs), a run number ``>= limit`` is refused before a range is
    expanded: ``0-99999999999`` costs nothing.

    Raises ValueError saying what is accepted."""
    if spec is None:
        return ("representative",)
    if isinstance(spec, bool):
        raise ValueError(f"runs must be a spec or run indices, not {spec!r}")
    if isinstance(spec, int):
        return _indices([spec], limit)
    if not isinstance(spec, str):
        return _indices(list(spec), limit)
    text = spec.strip().lower()
    if text in NAMED:
        return (text,)
    head, colon, count = text.partition(":")
    if colon:
        if head not in ("first", "last") or not count.isdigit() or int(count) < 1:
            raise ValueError("expected first:N or last:N with N >= 1, e.g. last:3")
        return (head, int(count))
    indices: list[int] = []
    for part in text.split(","):
        lo, dash, hi = part.strip().partition("-")
        if not lo.isdigit() or (dash and not hi.isdigit()):
            raise ValueError("expected representative, all, median, first:N, last:N, a run (3), a range (0-4) or a list (0,5,9)")
        a, b = int(lo), int(hi) if dash else int(lo)
        if b < a:
            raise ValueError(f"the range {part.strip()} runs backwards; write {b}-{a}")
        if limit is not None and b >= limit:
            raise ValueError(f"run {b} is past the last run: {limit} run(s) make runs 0 to {limit - 1}")
        indices.extend(range(a, b + 1))
    return _indices(indices, limit)


def _indices(values: Iterable[Any], limit: int | None = None) -> tuple:
    out = []
    for v in values:
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise ValueError(f"run indices are integers >= 0, got {v!r}")
        if limit is not None and v >= limit:
            raise ValueError(f"run {v} is past the last run: {limit} run(s) make runs 0 to {limit - 1}")
        out.append(v)
    if not out:
        raise ValueError("no runs chosen")
    return ("list", tuple(sorted(set(out))))


def select_runs(selection: tuple, runs: Sequence[int], totals: Sequence[float]) -> list[int]:
    """The run indices ``selection`` picks among ``runs`` (with their ``totals``), in run order.

    Raises ValueError for indices the profile does not have."""
    return sorted(run_labels(selection, runs, totals))


def run_labels(selection: tuple, runs: Sequence[int], totals: Sequence[float]) -> dict[int, str]:
    """The runs ``selection`` picks, each with its label: ``"fastest"``, ``"median"``,
    ``"slowest"`` (joined by ``/`` when one run is several), ``""`` for runs picked by number
    or position. Runs without a finite total are never fastest, median or slowest."""
    runs = [int(r) for r in runs]
    kind = selection[0]
    if kind == "all":
        return {r: "" for r in runs}
    if kind == "first":
        return {r: "" for r in runs[: selection[1]]}
    if kind == "last":
        return {r: "" for r in runs[-selection[1]:]}
    if kind in ("median", "representative"):
        timed = [i for i in range(len(runs)) if math.isfinite(float(totals[i]))]
        if not timed:
            return {r: "" for r in runs} if kind == "representative" else {}
        order = sorted(timed, key=lambda i: (float(totals[i]), runs[i]))
        picks = [("median", (len(order) - 1) // 2)]
        if kind == "representative":
            picks = [("fastest", 0)] + picks + [("slowest", len(order) - 1)]
        labels: dict[int, list[str]] = {}
        for label, position in picks:
            labels.setdefault(runs[order[position]], []).append(label)
        return {r: "/".join(labels[r]) for r in sorted(labels)}
    known = set(runs)
    missing = [i for i in selection[1] if i not in known]
    if missing:
        raise ValueError(f"the profile has no run(s) {', '.join(map(str, missing))}; its runs are {runs[0] if runs else '-'}..{runs[-1] if runs else '-'}")
    return {r: "" for r in selection[1]}
