"""The run's memory at its peak, from the memory pass (``meta["memory"]``, fxprof.measure.passes.memory).

``profile.memory`` is a :class:`MemorySummary`: the highest the run's held bytes rose
(``peak_bytes``), the node running then (``peak_node``), and what was held at that moment by
category (``breakdown``: ``parameters``, ``buffers``, ``activations``, ``gradients``,
``optimizer_state``, ``temporaries``). None when the memory pass did not run.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from ..columns import COLUMNS

__all__ = ["MemorySummary", "memory_summary", "CATEGORIES"]

#: the breakdown's categories, in the order a reader meets them
CATEGORIES = ("activations", "parameters", "gradients", "optimizer_state", "buffers", "temporaries")


@dataclass(frozen=True)
class MemorySummary:
    peak_bytes: int
    peak_node: str
    breakdown: dict[str, int] = field(default_factory=dict)
    #: bytes held before the run: parameters, buffers, inputs, optimizer state (each storage once)
    held_bytes: int = 0
    #: with a backward pass: all bytes autograd saved for it (None without)
    saved_bytes: int | None = None
    #: other nodes that reach the same peak level while they run, in run order (the peak is
    #: ``peak_node``'s because it reached it first)
    peak_again: tuple[str, ...] = ()
    #: the parameters, gradients and optimizer state were DTensors (FSDP2, tensor parallelism): their
    #: bytes are this rank's local shards, not the whole tensors
    shards: bool = False

    def largest(self, n: int = 2) -> list[tuple[str, int]]:
        """The ``n`` largest categories at the peak, largest first (empty ones left out)."""
        parts = [(c, int(self.breakdown.get(c, 0))) for c in CATEGORIES]
        return sorted((p for p in parts if p[1] > 0), key=lambda p: -p[1])[:n]

    def to_dict(self) -> dict[str, Any]:
        out = {"peak_bytes": self.peak_bytes, "peak_node": self.peak_node, "breakdown": dict(self.breakdown),
               "held_bytes": self.held_bytes}
        if self.saved_bytes is not None:
            out["saved_bytes"] = self.saved_bytes
        if self.peak_again:
            out["peak_again"] = list(self.peak_again)
        if self.shards:
            out["shards"] = True
        return out


def memory_summary(meta: Mapping[str, Any], nodes: Sequence[Any] = ()) -> MemorySummary | None:
    """``meta["memory"]`` as a :class:`MemorySummary`, its peak node under the name the profile
    shows (the pass knows the capture's own name, ``raw_name``)."""
    found = meta.get("memory")
    if not isinstance(found, Mapping) or "peak_bytes" not in found:
        return None
    node = str(found.get("peak_node", ""))
    shown = {getattr(n, "raw_name", "") or n.name: n.name for n in nodes}
    breakdown = {c: int((found.get("breakdown") or {}).get(c, 0) or 0) for c in CATEGORIES}
    saved = found.get("saved_bytes")
    again = tuple(shown.get(str(n), str(n)) for n in found.get("peak_again") or ())
    return MemorySummary(int(found["peak_bytes"]), shown.get(node, node), breakdown, int(found.get("held_bytes", 0) or 0),
                         None if saved is None else int(saved), again, bool(found.get("shards", False)))


#: how a roll-up combines the per-node memory columns: bytes a node adds or saves add up over a
#: group; a peak and what the run holds are the group's highest
#: (declared with each column in fxprof/columns.py; ``sum_known``: <NA> when no node of a group has a value)
ROLLUP = {c.name: c.rollup for c in COLUMNS if c.source == "memory"}


#: what a comparison says about memory, per node (or per block): each side's peak and the change
MEMORY_CHANGE_COLUMNS = ("a_mem_peak_bytes", "b_mem_peak_bytes", "delta_mem_peak_bytes")


def memory_changes(a: Any, b: Any) -> Any:
    """``a``'s and ``b``'s ``mem_peak_bytes`` (tables on one index) and ``b - a``; ``<NA>``
    where a side has no memory pass."""
    import pandas as pd

    def peak(t: Any) -> Any:
        if "mem_peak_bytes" in t.columns:
            return t["mem_peak_bytes"].astype("Int64")
        return pd.Series(pd.NA, index=t.index, dtype="Int64")

    pa, pb = peak(a), peak(b)
    return pd.DataFrame({"a_mem_peak_bytes": pa, "b_mem_peak_bytes": pb, "delta_mem_peak_bytes": pb - pa}, index=a.index)
