"""The roofline in the header and the report: the header's ``roofline:`` lines (the roofs, the
nodes above them) and the report's bandwidth curve, the rate of add and copy by the bytes an op
reads and the roof each size is held to (plotly). Drawn from the peaks a profile keeps
(``meta["peaks"]``); no curve for peaks without one (given by the user, or measured before
fxprof measured one).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping

from ..core.roofline import Peaks, roof_for

if TYPE_CHECKING:
    from ..core.profile import Profile

__all__ = ["bandwidth_figure", "curve_note", "peaks_line", "roofline_lines", "roofs_panel"]

KERNEL_COLORS = {"add": "#4c72b0", "copy": "#dd8452", "in place": "#55a868"}


def bandwidth_figure(peaks: Mapping[str, Any] | Peaks | None) -> Any:
    """The curve of ``peaks`` (a :class:`Peaks` or its dict) as a plotly figure, or None."""
    import plotly.graph_objects as go

    if peaks is None:
        return None
    found = peaks if isinstance(peaks, Peaks) else Peaks.from_dict(peaks)
    curve = found.details.get("curve") or []
    if not curve:
        return None
    fig = go.Figure()
    for kernel, colour in KERNEL_COLORS.items():
        points = [p for p in curve if p["kernel"] == kernel]
        fig.add_trace(go.Scatter(x=[p["bytes"] for p in points], y=[p["bytes_per_s"] / 1e9 for p in points], mode="markers+lines",
                                 name=kernel, marker={"color": colour, "size": 7}, line={"color": colour, "width": 1}))
    sizes = sorted({p["bytes"] for p in curve})
    roofs = [roof_for(size, found.bytes_per_s, found.caches) for size in sizes]
    fig.add_trace(go.Scatter(x=sizes, y=[r / 1e9 for r, _level in roofs], mode="lines", name="roof", line={"color": "#c44e52", "width": 3, "shape": "hv"},
                             text=[level for _r, level in roofs], hovertemplate="%{x:.3s}B read: roof %{y:.1f} GB/s (%{text})<extra></extra>"))
    for level in found.caches:  # where each level ends
        fig.add_vline(x=level["bytes"] * 0.75, line={"color": "#8c8c8c", "dash": "dot"},
                      annotation_text=f"{level['level']} {level['bytes_per_s'] / 1e9:.3g} GB/s", annotation_position="top left")
    fig.update_xaxes(type="log", title="bytes an op reads")
    fig.update_yaxes(title="GB/s (bytes read + written)", rangemode="tozero")
    fig.update_layout(height=380, margin={"l": 10, "r": 20, "t": 30, "b": 40}, paper_bgcolor="white", plot_bgcolor="white",
                      legend={"orientation": "h"})
    return fig


def curve_note(peaks: Mapping[str, Any] | Peaks) -> str:
    """One sentence under the figure: the levels, main memory, and the check against plain ops."""
    found = peaks if isinstance(peaks, Peaks) else Peaks.from_dict(peaks)
    levels = "; ".join(f"{lv['level']} {lv['bytes_per_s'] / 1e9:.3g} GB/s" for lv in found.caches)
    check = found.details.get("check") or []
    text = f"Levels where the curve drops: {levels or 'none'}; main memory {found.bytes_per_s / 1e9:.3g} GB/s."
    if check:
        worst = max(r["pct"] for r in check)
        raised = sum(1 for r in check if r.get("raised"))
        text += (f" Plain ops (add, copy, x + y) between the curve's sizes reached at most {worst:.0f}% of their roof"
                 + (f"; {raised} above 105% raised their roof." if raised else "."))
    if found.load.get("busy"):
        text += " Measured on a busy machine: the roofs may be low."
    return text


def peaks_line(peaks: Mapping[str, Any]) -> str:
    """The roofs the roofline columns are against (``roof_ms``, ``roof_pct``, ``limit``)."""
    try:
        return f"roofline: {Peaks.from_dict(peaks).describe()}"
    except (TypeError, ValueError) as exc:
        return f"roofline: unreadable peaks in the profile ({exc})"


def roofline_lines(profile: "Profile") -> list[str]:
    """The header's roofline section: the roofs (:func:`peaks_line`), then the roofline's verdicts:
    nodes on empty tensors, nodes above their roof (core.roofline). Nothing without peaks."""
    if not profile.meta.get("peaks"):
        return []
    from ..core.roofline import roofline_notes

    return [peaks_line(profile.meta["peaks"])] + roofline_notes(profile.df, profile.meta.get("peaks"), profile.meta.get("inputs"))


def roofs_panel(profile: "Profile") -> str:
    """The report's roofs section: the bandwidth curve the roofs come from, when the profile's
    peaks have one; "" otherwise."""
    from .html_parts import figure_html, note_html, section_html

    try:
        figure = bandwidth_figure(profile.meta.get("peaks"))
    except (TypeError, ValueError):  # unreadable peaks: the header says so
        return ""
    if figure is None:
        return ""
    return section_html("roofs", "The bandwidth roofs", "The rate of add, copy and an in-place op as the data an op reads grows, the fastest of "
                        "interleaved rounds, and the roof each size is held to (red): a node whose reads fit a level is held to "
                        "its rate (docs/roofline.md).", figure_html(figure, "fx-roofs"), note_html(curve_note(profile.meta["peaks"])))
