"""The per-node roofline: how far each node runs from the machine's roofs. No torch.

A node that does ``flops`` floating-point operations and moves ``bytes`` bytes cannot take less
than ``max(flops / compute rate, bytes / bandwidth)`` on a machine with those peaks (Williams,
Waterman and Patterson, "Roofline", CACM 2009). That least time is the node's ``roof_ms``; its
median over it says how close it runs to the hardware, and the median minus it is the time that
better code could win back (``headroom_ms``).

The peaks are measured by :func:`fxprof.measure.peaks.machine_peaks` (or given by the user); a
profile keeps the ones it used in ``meta["peaks"]`` (:meth:`Peaks.to_dict`), so a saved profile
recomputes the same columns without torch. The byte count is the anatomy pass's ``bytes``
(tensor inputs plus outputs: a lower bound, see docs/roofline.md).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any, Mapping

import numpy as np
import pandas as pd

__all__ = ["Peaks", "ROOFLINE_COLUMNS", "LIMITS", "roofline_columns", "parse_peaks", "peaks_differ", "DEFAULT_OVERHEAD_S"]

#: the columns this module adds to the per-node table, with their pandas dtypes (``bytes`` itself
#: is an anatomy column: see fxprof.vocab.ANATOMY_COLUMNS)
ROOFLINE_COLUMNS: dict[str, str] = {
    "intensity": "float64",
    "roof_ms": "float64",
    "roof_pct": "float64",
    "headroom_ms": "float64",
    "limit": "str",
}

#: values of the ``limit`` column ("": no verdict: no peaks, no byte count, or the node never ran)
LIMITS = ("compute", "memory", "overhead", "")

#: per-op floor when the user gives peaks without one (``--peaks TFLOPS,GBPS``): one microsecond,
#: about what a one-element op costs on the CPU (measured peaks carry their own floor)
DEFAULT_OVERHEAD_S = 1e-6


@dataclass(frozen=True)
class Peaks:
    """What this device can do at best: the roofs of the roofline.

    Attributes:
        flops_per_s: achievable compute rate (the best of several large GEMMs and convolutions in ``dtype``).
        bytes_per_s: achievable memory bandwidth, bytes read plus written (the best of copy,
            add and triad over buffers far larger than the caches).
        overhead_s: the least time one op takes whatever its size (the median of a one-element
            add): a node whose roof time is below it is ``overhead``-limited.
        device, device_name, dtype, threads, torch: what was measured (``dtype`` is
            ``tfloat32`` for float32 matrix products that may use TF32 on a GPU).
        source: ``"measured"`` or ``"given"`` (the user's numbers, e.g. a datasheet's).
        details: how they were measured: each kernel's rate, sizes, seconds spent.
    """

    flops_per_s: float
    bytes_per_s: float
    overhead_s: float = DEFAULT_OVERHEAD_S
    device: str = ""
    device_name: str = ""
    dtype: str = ""
    threads: int | None = None
    torch: str = ""
    source: str = "measured"
    details: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name in ("flops_per_s", "bytes_per_s"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
                raise ValueError(f"peaks: {name} must be a positive number, got {value!r}")
        if isinstance(self.overhead_s, bool) or not isinstance(self.overhead_s, (int, float)) or not self.overhead_s >= 0:
            raise ValueError(f"peaks: overhead_s must be a number of seconds >= 0, got {self.overhead_s!r}")

    @property
    def ridge(self) -> float:
        """The intensity (FLOPs per byte) where the two roofs meet: below it a node at its roof
        is memory-limited, above it compute-limited."""
        return self.flops_per_s / self.bytes_per_s

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready, as kept in ``profile.meta["peaks"]`` and in the cache."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "Peaks":
        known = {k: data[k] for k in cls.__dataclass_fields__ if k in data}
        return cls(**known)

    def describe(self) -> str:
        """One line for a profile's header: ``peaks 0.118 TFLOP/s, 40.3 GB/s (measured, float32, 1 thread)``."""
        what = [self.source]
        if self.dtype:
            what.append(self.dtype)
        if self.threads:
            what.append(f"{self.threads} thread{'s' if self.threads != 1 else ''}")
        return (f"peaks {self.flops_per_s / 1e12:.3g} TFLOP/s, {self.bytes_per_s / 1e9:.3g} GB/s, "
                f"op floor {self.overhead_s * 1e6:.3g} us ({', '.join(what)}; ridge {self.ridge:.3g} FLOP/byte)")


def parse_peaks(text: str) -> Peaks:
    """``"TFLOPS,GBPS"`` or ``"TFLOPS,GBPS,US"`` (the per-op floor in microseconds) -> given Peaks:
    ``"0.1,20"`` is 0.1 TFLOP/s and 20 GB/s."""
    parts = [p.strip() for p in str(text).split(",")]
    try:
        numbers = [float(p) for p in parts]
    except ValueError:
        numbers = []
    if len(numbers) not in (2, 3) or not all(math.isfinite(n) and n > 0 for n in numbers[:2]) or (len(numbers) == 3 and not numbers[2] >= 0):
        raise ValueError(f"bad peaks {text!r}: give TFLOPS,GBPS (e.g. 0.1,20 for 0.1 TFLOP/s and 20 GB/s), "
                         f"optionally ,US for the per-op floor in microseconds")
    overhead = numbers[2] * 1e-6 if len(numbers) == 3 else DEFAULT_OVERHEAD_S
    return Peaks(flops_per_s=numbers[0] * 1e12, bytes_per_s=numbers[1] * 1e9, overhead_s=overhead, source="given")


def roofline_columns(table: pd.DataFrame, peaks: Mapping[str, Any] | Peaks | None) -> pd.DataFrame:
    """The roofline columns of a per-node table that has ``flops``, ``bytes`` and ``median_ms``.

    - ``intensity``: FLOPs per byte (NaN without bytes).
    - ``roof_ms``: the least time the node could take at the peaks:
      ``max(flops / flops_per_s, bytes / bytes_per_s)``.
    - ``roof_pct``: ``roof_ms`` over the node's median, in percent (100: at the roof; above 100
      when the data sat in a cache the bandwidth roof does not see).
    - ``headroom_ms``: median minus ``roof_ms``, the time above the roof.
    - ``limit``: ``compute`` or ``memory`` (the roof that binds: the larger of the two times);
      ``overhead`` when the roof time is below the per-op floor (``overhead_s``: the node is
      too small for either roof to explain its time); "" when there are no peaks, no byte
      count (anatomy off) or the node never ran.

    Returns a DataFrame with those columns, indexed like ``table``.
    """
    index = table.index
    empty = pd.DataFrame({c: pd.Series(np.nan if kind == "float64" else "", index=index, dtype="float64" if kind == "float64" else str)
                          for c, kind in ROOFLINE_COLUMNS.items()})
    if peaks is None:
        return empty
    if not isinstance(peaks, Peaks):
        peaks = Peaks.from_dict(peaks)
    flops = table["flops"].astype("float64").fillna(0.0).to_numpy()
    nbytes = table["bytes"].astype("float64").to_numpy()  # NaN: not counted
    median = table["median_ms"].astype("float64").to_numpy()
    with np.errstate(divide="ignore", invalid="ignore"):
        compute_ms = flops / peaks.flops_per_s * 1e3
        memory_ms = nbytes / peaks.bytes_per_s * 1e3
        roof = np.fmax(compute_ms, memory_ms)
        roof = np.where(np.isnan(nbytes), np.nan, roof)
        intensity = np.where(nbytes > 0, flops / nbytes, np.nan)
        pct = np.where(median > 0, roof / median * 100.0, np.nan)
    headroom = median - roof
    known = ~np.isnan(roof) & ~np.isnan(median)
    limit = np.where(compute_ms >= memory_ms, "compute", "memory").astype(object)
    limit[roof < peaks.overhead_s * 1e3] = "overhead"
    limit[~known] = ""
    return pd.DataFrame(
        {"intensity": intensity, "roof_ms": roof, "roof_pct": pct, "headroom_ms": np.where(known, headroom, np.nan),
         "limit": pd.Series(limit, index=index, dtype=str).to_numpy()},
        index=index,
    ).astype(ROOFLINE_COLUMNS)


def peaks_differ(a: Mapping[str, Any] | None, b: Mapping[str, Any] | None, tolerance: float = 0.10) -> str:
    """Why two profiles' roofline columns are not comparable ("" when they are): one has peaks
    and the other not, or a roof differs by more than ``tolerance`` (a fraction)."""
    if not a and not b:
        return ""
    if not a or not b:
        return "only one of the two has machine peaks (roofline columns)"
    diffs = []
    for key, label, scale, unit in (("flops_per_s", "compute", 1e12, "TFLOP/s"), ("bytes_per_s", "bandwidth", 1e9, "GB/s")):
        x, y = float(a.get(key, math.nan)), float(b.get(key, math.nan))
        if not (x > 0 and y > 0) or abs(y - x) / x > tolerance:
            diffs.append(f"{label} {x / scale:.3g} vs {y / scale:.3g} {unit}")
    return ("the machine peaks differ (" + ", ".join(diffs) + "): roof_ms, roof_pct and headroom_ms are against different roofs") if diffs else ""
