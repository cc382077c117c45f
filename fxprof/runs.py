"""Choosing runs by a short text: ``all``, ``3``, ``0-4``, ``0,5,9``, ``first:N``, ``last:N``, ``median``.

Used by the Chrome trace (``Profile.to_chrome_trace(runs=...)``, ``fxprof profile --trace-runs``).
Imports no torch and no pandas, so the command line can check a spec before anything runs.
"""

from __future__ import annotations

from typing import Any, Iterable, Sequence

__all__ = ["parse_runs", "select_runs"]


def parse_runs(spec: Any) -> tuple:
    """A run selection, checked: ``("all",)``, ``("median",)``, ``("first", n)``, ``("last", n)``
    or ``("list", (i, j, ...))``. Takes a text spec, an int, or an iterable of ints.

    Raises ValueError saying what is accepted."""
    if spec is None:
        return ("all",)
    if isinstance(spec, bool):
        raise ValueError(f"runs must be a spec or run indices, not {spec!r}")
    if isinstance(spec, int):
        return _indices([spec])
    if not isinstance(spec, str):
        return _indices(list(spec))
    text = spec.strip().lower()
    if text in ("all", "median"):
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
            raise ValueError("expected all, median, first:N, last:N, a run (3), a range (0-4) or a list (0,5,9)")
        a, b = int(lo), int(hi) if dash else int(lo)
        if b < a:
            raise ValueError(f"the range {part.strip()} runs backwards; write {b}-{a}")
        indices.extend(range(a, b + 1))
    return _indices(indices)


def _indices(values: Iterable[Any]) -> tuple:
    out = []
    for v in values:
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise ValueError(f"run indices are integers >= 0, got {v!r}")
        out.append(v)
    if not out:
        raise ValueError("no runs chosen")
    return ("list", tuple(sorted(set(out))))


def select_runs(selection: tuple, runs: Sequence[int], totals: Sequence[float]) -> list[int]:
    """The run indices ``selection`` picks among ``runs`` (with their ``totals``, for median).

    Raises ValueError for indices the profile does not have."""
    runs = list(runs)
    kind = selection[0]
    if kind == "all":
        return runs
    if kind == "first":
        return runs[: selection[1]]
    if kind == "last":
        return runs[-selection[1]:]
    if kind == "median":
        if not runs:
            return []
        order = sorted(range(len(runs)), key=lambda i: (totals[i], runs[i]))
        return [runs[order[(len(order) - 1) // 2]]]
    missing = [i for i in selection[1] if i not in set(runs)]
    if missing:
        raise ValueError(f"run(s) {', '.join(map(str, missing))} not in the profile; it has runs {runs[0] if runs else '-'}..{runs[-1] if runs else '-'}")
    return list(selection[1])
