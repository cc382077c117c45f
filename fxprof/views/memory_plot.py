"""The report's memory timeline: what the run holds after each node, in run order (plotly).

Stacked by category: what is held before the run starts (``parameters``, ``buffers``,
``optimizer_state``, ``inputs``: constant) and what the run allocated and still holds
(``activations``, and ``gradients`` in a training step). A line above marks each node's own
peak (what it held at its highest, temporaries included); the run's peak is annotated.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .memory import format_bytes

__all__ = ["memory_figure", "memory_panel", "CATEGORY_COLORS"]

#: one colour per category, the same in every figure
CATEGORY_COLORS = {"parameters": "#4c72b0", "buffers": "#8172b3", "optimizer_state": "#937860", "inputs": "#8c8c8c",
                   "activations": "#dd8452", "peak": "#c44e52"}


def memory_figure(profile: Any) -> Any:
    """The timeline figure of ``profile``, or None without the memory pass."""
    import plotly.graph_objects as go

    summary = profile.memory
    table = profile.df
    if summary is None or "mem_live_bytes" not in table.columns or not table["mem_live_bytes"].notna().any():
        return None
    rows = table[table["mem_live_bytes"].notna()]
    x = list(range(len(rows)))
    names = list(rows.index)
    live = rows["mem_live_bytes"].astype("float64").to_numpy()
    held = {c: float(summary.breakdown.get(c, 0)) for c in ("parameters", "buffers", "optimizer_state")}
    held["inputs"] = max(0.0, float(summary.held_bytes) - sum(held.values()))
    allocated = np.maximum(live - float(summary.held_bytes), 0.0)
    # a node's own peak: what the run held before it (live after it, less what it kept) plus its rise
    before = live - rows["mem_delta_bytes"].astype("float64").fillna(0.0).to_numpy()
    peak = before + rows["mem_peak_bytes"].astype("float64").fillna(0.0).to_numpy()
    fig = go.Figure()
    hover = "%{customdata}<br>%{fullData.name}: %{y:.4s}B<extra></extra>"
    for cat, value in held.items():
        if value > 0:
            fig.add_trace(go.Scatter(x=x, y=[value] * len(x), name=cat.replace("_", " "), stackgroup="held", mode="lines",
                                     line={"width": 0.5, "color": CATEGORY_COLORS[cat]}, customdata=names, hovertemplate=hover))
    label = "activations and gradients" if "phase" in rows.columns and (rows["phase"] == "backward").any() else "activations"
    fig.add_trace(go.Scatter(x=x, y=allocated, name=label, stackgroup="held", mode="lines",
                             line={"width": 0.5, "color": CATEGORY_COLORS["activations"]}, customdata=names, hovertemplate=hover))
    fig.add_trace(go.Scatter(x=x, y=peak, name="node's peak (temporaries included)", mode="lines",
                             line={"width": 1, "color": CATEGORY_COLORS["peak"], "dash": "dot"}, customdata=names,
                             hovertemplate=hover))
    if summary.peak_node in names:
        at = names.index(summary.peak_node)
        fig.add_trace(go.Scatter(x=[at], y=[summary.peak_bytes], mode="markers", name="run's peak",
                                 marker={"color": CATEGORY_COLORS["peak"], "size": 10, "symbol": "triangle-down"},
                                 customdata=[summary.peak_node], hovertemplate=hover))
        fig.add_annotation(x=at, y=summary.peak_bytes, text=f"peak {format_bytes(summary.peak_bytes)}<br>{summary.peak_node}",
                           showarrow=True, arrowhead=2, ax=40, ay=-30, font={"size": 11})
    fig.update_xaxes(title_text="node, in run order", gridcolor="#eee")
    title = f"memory over the run: {format_bytes(summary.peak_bytes)} at the peak"
    base = float(summary.held_bytes)
    top = max(float(np.nanmax(peak)) if len(peak) else 0.0, float(summary.peak_bytes))
    if base > 0 and top - base < 0.25 * base:
        # inference: what the run holds from the start (parameters, inputs) would fill the scale and the
        # activations would be a line on top of it; the axis starts near that level instead, and says so
        low = max(0.0, base - (top - base))
        fig.update_yaxes(range=[low, top + 0.15 * (top - base) + 1.0])
        title += f" (axis from {format_bytes(low)}: the {format_bytes(base)} held from the start fill the rest)"
    else:
        fig.update_yaxes(rangemode="tozero")
    fig.update_yaxes(title_text="bytes held after the node", gridcolor="#eee", tickformat=".3s")
    fig.update_layout(title={"text": title,
                             "x": 0.0, "xanchor": "left", "font": {"size": 15}},
                      height=380, margin={"l": 10, "r": 20, "t": 48, "b": 40}, paper_bgcolor="white",
                      plot_bgcolor="white", legend={"orientation": "h", "y": -0.25})
    return fig


def memory_panel(profile: Any) -> str:
    """The report's memory section (:func:`memory_figure`); "" without the memory pass."""
    memory = memory_figure(profile)
    if memory is None:
        return ""
    from .html_parts import figure_html, section_html

    return section_html("memory", "Memory over the run", "What the run holds after each node, in run order, by category; "
                        "the dotted line is each node's own peak (temporaries included); the run's peak is marked.",
                        figure_html(memory, "fx-memory"))
