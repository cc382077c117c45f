"""``fxprof.whatif``'s result as text (the ranked summary and table) and as one HTML page (the
variants side by side, per block), with pandas' ``Styler`` (no plotly needed)."""

from __future__ import annotations

import html
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from .text import render_table

if TYPE_CHECKING:
    from ..core.whatif import WhatIf

__all__ = ["render_whatif", "block_matrix", "write_whatif_html"]

#: the text table's columns
_SHOWN = ("speedup", "low", "high", "verdict", "p_value", "base_ms", "variant_ms", "samples", "runs")


def _header(result: "WhatIf", title: str) -> list[str]:
    meta = result.meta
    return [f"fxprof whatif: {title} on {meta.get('device', '?')}, {meta.get('threads', '?')} thread(s), torch "
            f"{meta.get('torch', '?')}",
            f"{meta.get('iters', '?')} interleaved rounds (each variant once a round, the order rotating), "
            f"{meta.get('warmup', '?')} warm-up calls each; speed-up = baseline's median time per sample over the "
            f"variant's, [95% bootstrap interval]; verdict: Mann-Whitney U p < {result.alpha:g} and at least "
            f"{result.min_effect:.0%}"] + ([result.machine_line()] if result.machine_line() else [])


def render_whatif(result: "WhatIf", title: str = "model") -> str:
    """The header, the ranked summary (one line a variant, best first), then the table."""
    lines = _header(result, title) + [""] + result.lines() + [""]
    table = result.table
    shown = table[[c for c in _SHOWN]].copy()
    lines.append(render_table(shown, None, keep=set(_SHOWN)))
    return "\n".join(lines)


def block_matrix(result: "WhatIf") -> pd.DataFrame:
    """Per block (rows, the baseline's order), each variant's speed-up (columns): baseline's
    block time over the variant's. NaN where a variant has no profile or no time there."""
    columns = {}
    base_ms = None
    for name in result.table.index:
        blocks = result.blocks(name)
        if blocks is None:
            continue
        columns[name] = blocks["speedup"]
        if base_ms is None:
            base_ms = blocks["a_ms"]
    if base_ms is None:
        return pd.DataFrame()
    out = pd.DataFrame({"baseline_ms": base_ms})
    for name, speedup in columns.items():
        out[name] = speedup.reindex(out.index)
    out = out.drop(index=[i for i in out.index if i == "(graph)"], errors="ignore")
    return out.sort_values("baseline_ms", ascending=False, kind="stable")


def write_whatif_html(result: "WhatIf", path: str, title: str = "model") -> None:
    """One self-contained page: the header, the ranked summary, the variants table, and the
    per-block speed-ups side by side (green: faster than the baseline, red: slower)."""
    from ..io.atomic import atomic_write

    table = result.table
    summary = table.style.format({"speedup": "{:.2f}x", "low": "{:.2f}", "high": "{:.2f}", "p_value": "{:.2g}",
                                  "base_ms": "{:.3f}", "variant_ms": "{:.3f}"}, na_rep="")
    matrix = block_matrix(result)
    parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>fxprof whatif: {html.escape(title)}</title>",
             "<style>body{font-family:system-ui,sans-serif;margin:2em}table{border-collapse:collapse;font-size:13px}"
             "td,th{padding:3px 8px;border-bottom:1px solid #ddd;text-align:right}th{background:#f4f4f4}"
             "li{margin:.2em 0}</style></head><body>",
             f"<h1>fxprof whatif: {html.escape(title)}</h1>"]
    parts += [f"<p>{html.escape(line)}</p>" for line in _header(result, title)]
    parts.append("<h2>Variants, best first</h2><ul>")
    parts += [f"<li>{html.escape(line)}</li>" for line in result.lines()]
    parts.append("</ul>")
    parts.append(summary.to_html())
    if not matrix.empty:
        parts.append("<h2>Per block: speed-up over the baseline</h2>"
                     "<p>Each block's summed median node time in the baseline's profile over the variant's "
                     "(above 1: faster). From one profile per variant, node by node.</p>")
        variants = [c for c in matrix.columns if c != "baseline_ms"]
        styled = matrix.style.format({"baseline_ms": "{:.3f}", **{c: "{:.2f}x" for c in variants}}, na_rep="")
        styled = styled.map(_colour, subset=variants) if hasattr(styled, "map") else styled.applymap(_colour, subset=variants)
        parts.append(styled.to_html())
    parts.append("</body></html>")
    text = "\n".join(parts)
    atomic_write(path, lambda handle: handle.write(text))


def _colour(value: float) -> str:
    """Green for a speed-up, red for a slow-down, stronger the larger (log scale, 4x full)."""
    if value is None or not np.isfinite(value) or value <= 0:
        return ""
    strength = min(1.0, abs(np.log(value)) / np.log(4.0))
    rgb = (220, 255 - int(120 * strength), 255 - int(120 * strength)) if value < 1 else (255 - int(120 * strength), 235, 255 - int(120 * strength))
    return f"background-color: rgb{rgb}"
