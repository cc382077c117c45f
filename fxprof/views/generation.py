"""``fxprof.generate``'s result as one self-contained HTML page: the summary, the time per token
against position with the memory floor (an inline SVG, no plotting library), the share of each
part of the model per phase, the per-layer split of both phases and the per-token table."""

from __future__ import annotations

import html
import math
from typing import TYPE_CHECKING

import pandas as pd

if TYPE_CHECKING:
    from ..core.generation import Generation

__all__ = ["write_generation_html", "token_curve_svg"]


def token_curve_svg(result: "Generation", width: int = 1000, height: int = 320) -> str:
    """Time per token (ms) against position: the prefill as one orange point, the decode steps as
    a blue line, each step's memory floor as a dashed grey line (when the bandwidth is known)."""
    pt = result.per_token
    if pt.empty:
        return ""
    left, right, top, bottom = 56, 12, 12, 36
    xs = pt["position"].astype(float).tolist()
    ys = pt["time_ms"].astype(float).tolist()
    floors = [f for f in pt["floor_ms"].astype(float).tolist() if math.isfinite(f)]
    x_lo, x_hi = min(xs), max(xs) if max(xs) > min(xs) else min(xs) + 1
    y_hi = max(ys + floors) * 1.08 or 1.0

    def px(x: float) -> float:
        return left + (x - x_lo) / (x_hi - x_lo) * (width - left - right)

    def py(y: float) -> float:
        return height - bottom - y / y_hi * (height - top - bottom)

    parts = [f"<svg xmlns='http://www.w3.org/2000/svg' viewBox='0 0 {width} {height}' width='100%' "
             f"style='max-width:{width}px' font-size='11' font-family='system-ui,sans-serif'>",
             f"<line x1='{left}' y1='{height - bottom}' x2='{width - right}' y2='{height - bottom}' stroke='#333'/>",
             f"<line x1='{left}' y1='{top}' x2='{left}' y2='{height - bottom}' stroke='#333'/>"]
    for k in range(5):  # y ticks
        y = y_hi * k / 4
        parts.append(f"<text x='{left - 4}' y='{py(y) + 4:.1f}' text-anchor='end'>{y:.3g}</text>"
                     f"<line x1='{left}' y1='{py(y):.1f}' x2='{width - right}' y2='{py(y):.1f}' stroke='#eee'/>")
    for x in sorted({xs[0], xs[len(xs) // 2], xs[-1]}):
        parts.append(f"<text x='{px(x):.1f}' y='{height - bottom + 14}' text-anchor='middle'>{x:.0f}</text>")
    parts.append(f"<text x='{(left + width - right) / 2}' y='{height - 4}' text-anchor='middle'>position</text>"
                 f"<text x='12' y='{top + (height - top - bottom) / 2}' transform='rotate(-90 12 "
                 f"{top + (height - top - bottom) / 2})' text-anchor='middle'>ms per token</text>")
    decode = pt[pt["phase"] == "decode"]
    busy = set(result.busy_steps())
    if len(decode):
        points = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in zip(decode["position"], decode["time_ms"]))
        parts.append(f"<polyline points='{points}' fill='none' stroke='#1f77b4' stroke-width='1.5'/>")
        for token, x, y, lost in zip(decode["token"], decode["position"], decode["time_ms"], decode["lost_ms"]):
            if int(token) in busy:  # a step that lost time to other processes: a red ring, and how much
                parts.append(f"<circle class='busy' cx='{px(x):.1f}' cy='{py(y):.1f}' r='5' fill='none' stroke='#d62728' "
                             f"stroke-width='2'><title>position {x}: {y:.4g} ms, of which {lost:.3g} ms lost to other "
                             f"processes</title></circle>")
            else:
                parts.append(f"<circle cx='{px(x):.1f}' cy='{py(y):.1f}' r='2' fill='#1f77b4'><title>position {x}: "
                             f"{y:.4g} ms</title></circle>")
        if decode["floor_ms"].notna().all():
            floor = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in zip(decode["position"], decode["floor_ms"]))
            parts.append(f"<polyline points='{floor}' fill='none' stroke='#888' stroke-dasharray='4 3'/>")
    prefill = pt[pt["phase"] == "prefill"]
    for token, x, y, lost in zip(prefill["token"], prefill["position"], prefill["time_ms"], prefill["lost_ms"]):
        ring = (" stroke='#d62728' stroke-width='2' class='busy'" if int(token) in busy else "")
        note = f", of which {lost:.3g} ms lost to other processes" if int(token) in busy else ""
        parts.append(f"<circle cx='{px(x):.1f}' cy='{py(y):.1f}' r='4' fill='#ff7f0e'{ring}><title>prefill: {y:.4g} ms"
                     f"{note}</title></circle>")
    parts.append("</svg>")
    return "".join(parts)


def write_generation_html(result: "Generation", path: str, title: str = "") -> None:
    """One page: the summary, the time-per-token curve, the shares per phase, the per-layer
    split of both phases and the per-token table. Written atomically."""
    from ..io.atomic import atomic_write

    name = title or str(result.meta.get("model", "model"))
    parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>fxprof generate: {html.escape(name)}</title>",
             "<style>body{font-family:system-ui,sans-serif;margin:2em}table{border-collapse:collapse;font-size:13px}"
             "td,th{padding:3px 8px;border-bottom:1px solid #ddd;text-align:right}th{background:#f4f4f4}"
             "pre{font-size:12px;background:#fafafa;padding:1em;white-space:pre-wrap;overflow-wrap:anywhere}"
             "</style></head><body>",
             f"<h1>fxprof generate: {html.escape(name)}</h1>",
             "<h2>Time per token against position</h2>",
             "<p>Orange: the prefill (the prompt's forward, which makes the first new token); blue: each decode "
             "step's timed run; dashed grey: each decode step's memory floor (the bytes it must read over the "
             "memory bandwidth); a red ring: a step that lost at least 5% of its time to other processes "
             "(the machine line of the summary).</p>",
             token_curve_svg(result),
             "<h2>Share of node time per phase</h2>", _frame(result.shares())]
    for phase in ("prefill", "decode"):
        if result.phase_profile(phase) is not None:
            parts += [f"<h2>Per layer: {phase}</h2>", _frame(result.layer_table(phase))]
    parts += ["<h2>Summary</h2>", f"<pre>{html.escape(result.summary(rows=len(result.per_token)))}</pre>",
              "</body></html>"]
    text = "\n".join(parts)
    atomic_write(path, lambda handle: handle.write(text))


def _formatter(column: str):
    """A cell's text with its unit: times in ns/us/ms/s, bytes in B/kB/MB, shares in %, FLOPs."""
    from .memory import format_bytes
    from .tables import format_ms

    if column == "pct" or column.endswith("_pct"):
        return lambda v: f"{v:.1f}%"
    if column.endswith("_ms"):
        return format_ms
    if column.endswith("bytes"):
        return format_bytes
    if column == "flops":
        return lambda v: f"{v / 1e9:.3g} GFLOP" if v >= 1e9 else f"{v / 1e6:.3g} MFLOP"
    if column in ("kv_tokens_kept",):
        return lambda v: f"{v:.0f} tokens"
    return "{:.4g}".format


def _frame(frame: pd.DataFrame) -> str:
    """A table with every number in its unit (the column name says which)."""
    formats = {c: _formatter(c) for c in frame.columns if pd.api.types.is_numeric_dtype(frame[c])}
    return frame.style.format(formats, na_rep="").to_html()
