"""Memory in words: the header line of the run's peak, and bytes as a reader reads them."""

from __future__ import annotations

import math
from typing import Any

from ..columns import COLUMNS

__all__ = ["format_bytes", "memory_line", "memory_columns", "MEMORY_COLUMNS"]

#: the per-node memory columns, in the order tables show them (docs/memory.md)
MEMORY_COLUMNS = tuple(c.name for c in COLUMNS if c.source == "memory")


def format_bytes(value: Any, sign: bool = False) -> str:
    """Bytes in decimal units to 3 figures: ``412 MB``, ``1.05 GB``, ``512 B``; ``""`` when missing."""
    try:
        v = float(value)
    except (TypeError, ValueError):
        return ""
    if math.isnan(v):
        return ""
    size = abs(v)
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if size >= scale:
            scaled = v / scale
            digits = max(0, 2 - math.floor(math.log10(abs(scaled))))
            text = f"{scaled:.{digits}f} {unit}"
            break
    else:
        text = f"{int(v)} B"
    return f"+{text}" if sign and v > 0 else text


def memory_line(profile: Any) -> list[str]:
    """``memory: peak 412 MB during layer3_0_conv1 (activations 300 MB, parameters 45 MB)``, or
    nothing without the memory pass."""
    summary = profile.memory
    if summary is None:
        return []
    parts = ", ".join(f"{name.replace('_', ' ')} {format_bytes(size)}" for name, size in summary.largest(2))
    line = f"memory: peak {format_bytes(summary.peak_bytes)} during {summary.peak_node}" + (f" ({parts})" if parts else "")
    if summary.peak_again:  # the same level again later: say so, or a reader of the table sees another node first
        shown = summary.peak_again[:3]
        more = f" and {len(summary.peak_again) - 3} more" if len(summary.peak_again) > 3 else ""
        line += f"; reached first there, the same level again during {', '.join(shown)}{more}"
    if summary.saved_bytes is not None:
        line += f"; saved for backward {format_bytes(summary.saved_bytes)}"
    if summary.shards:  # DTensors counted by their local shards: a reader must not take them for the whole model's
        line += "; parameters, gradients and optimizer state are this rank's shards"
    return [line]


def memory_columns(table: Any) -> list[str]:
    """The memory columns a summary shows by default: the node's peak and what the run holds
    after it; with a backward pass, what autograd saved. None without the memory pass."""
    if "mem_peak_bytes" not in table.columns or not table["mem_peak_bytes"].notna().any():
        return []
    shown = ["mem_peak_bytes", "mem_live_bytes"]
    if "mem_saved_bytes" in table.columns and table["mem_saved_bytes"].notna().any():
        shown.append("mem_saved_bytes")
    return shown
