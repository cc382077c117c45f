"""Text rendering of a profile. Renderers format; they never time anything."""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterable

import numpy as np
from tabulate import tabulate

if TYPE_CHECKING:
    from .profile import Profile

__all__ = ["render_summary", "render_header", "DEFAULT_COLUMNS", "HIGH_SPREAD"]

DEFAULT_COLUMNS = ("op", "target", "scope", "range", "median_ms", "mean_ms", "iqr_ms", "pct", "cum_pct")
#: a node whose interquartile range exceeds this fraction of its median is flagged
HIGH_SPREAD = 0.25

_FLOAT_FORMATS = {"pct": ".1f", "cum_pct": ".1f"}


def render_header(profile: "Profile") -> str:
    """What was measured, and the run's own time, spread and coverage."""
    meta = profile.meta
    parts = [
        f"fxprof: {meta.get('model', 'model')}",
        f"timer {meta.get('timer', '?')} on {meta.get('device', '?')}",
        f"{meta.get('warmup', '?')} warm-up + {profile.num_runs} timed runs",
        f"threads {meta.get('threads', '?')}",
        f"torch {meta.get('torch', '?')}",
    ]
    lines = [" | ".join(parts)]
    inputs = meta.get("inputs")
    if inputs:
        lines.append("inputs: " + ", ".join(inputs))
    if profile.num_runs:
        totals = np.asarray(profile.total_ms)
        q25, med, q75 = np.percentile(totals, [25, 50, 75])
        lines.append(
            f"run: median {med:.3f} ms (IQR {q75 - q25:.3f} ms) over {len(totals)} runs; "
            f"nodes account for {profile.coverage * 100:.1f}% of it (coverage), "
            f"the rest is interpreter overhead between nodes"
        )
    else:
        lines.append("no timed runs recorded")
    return "\n".join(lines)


def render_summary(
    profile: "Profile",
    sort: str | None = "pct",
    top: int | None = None,
    columns: Iterable[str] | None = None,
) -> str:
    """The header and the per-node table, sorted by ``sort`` (descending), first ``top`` rows."""
    table = profile.to_dataframe(sort=sort)
    if columns is None:
        columns = [c for c in DEFAULT_COLUMNS if c != "range" or (table["range"] != "").any()]
    columns = list(columns)
    missing = [c for c in columns if c not in table.columns]
    if missing:
        raise ValueError(f"unknown columns {missing}; available: {', '.join(table.columns)}")

    noisy = (table["iqr_ms"] > HIGH_SPREAD * table["median_ms"]) & (table["calls"] > 1)
    shown = table if top is None else table.head(max(int(top), 0))
    rows = shown[columns].copy()
    rows.insert(0, "node", shown.index)
    if noisy.any():
        rows["spread"] = np.where(noisy.loc[shown.index], "high", "")
    floatfmt = [_FLOAT_FORMATS.get(c, ".4f") for c in rows.columns]
    body = tabulate(rows.values.tolist(), headers=list(rows.columns), floatfmt=floatfmt, tablefmt="simple", disable_numparse=False)

    lines = [render_header(profile), "", body]
    hidden = len(table) - len(shown)
    if hidden > 0:
        rest = float(table["pct"].iloc[len(shown):].sum())
        lines.append(f"... {hidden} more nodes ({rest:.1f}% of node time)")
    n_noisy = int(noisy.sum())
    if n_noisy:
        lines.append(
            f"spread: {n_noisy} node(s) have an IQR above {HIGH_SPREAD:.0%} of their median "
            f"('high'): noisy machine or too few runs; raise iters or compare medians."
        )
    return "\n".join(lines)
