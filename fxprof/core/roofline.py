"""The per-node roofline: how far each node runs from the machine's roofs. No torch.

A node that does ``flops`` floating-point operations and moves ``bytes`` bytes cannot take less
than ``max(flops / compute rate, bytes / bandwidth)`` on a machine with those peaks (Williams,
Waterman and Patterson, "Roofline", CACM 2009). That least time is the node's ``roof_ms``; its
median over it says how close it runs to the hardware, and the median minus it is the time that
better code could win back (``headroom_ms``).

The peaks are measured by :func:`fxprof.measure.passes.peaks.machine_peaks` (or given by the user); a
profile keeps the ones it used in ``meta["peaks"]`` (:meth:`Peaks.to_dict`), so a saved profile
recomputes the same columns without torch. The byte count is the anatomy pass's ``bytes``
(tensor inputs plus outputs: a lower bound, see docs/roofline.md).
"""

from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass, field
from typing import Any, Mapping

import numpy as np
import pandas as pd

__all__ = ["Peaks", "ROOFLINE_COLUMNS", "LIMITS", "roofline_columns", "parse_peaks", "peaks_differ", "DEFAULT_OVERHEAD_S",
           "FLOOR_MULTIPLE", "NO_WORK_FRACTION", "CACHE_FIT", "node_bandwidth", "roofline_notes", "ABOVE_ROOF_PCT",
           "roofs_from_curve", "roof_for", "CURVE_STEP", "ROOF_CHECK_PCT", "load_text", "peaks_off"]

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

#: a node is ``overhead``-limited only while its median is under this many op floors: one that
#: takes several times the floor is not limited by it, whatever its roof (a GPU batch norm at
#: 34-64 us against a 9.3 us floor and an 8.5 us roof is memory-limited at 13-25% of its roof)
FLOOR_MULTIPLE = 3.0

#: a node's data "fits" a cache level when it reads at most this fraction of the level's size
CACHE_FIT = 0.75

#: a node whose roof is under this fraction of the op floor does next to no work: ``overhead``
#: whatever its median
NO_WORK_FRACTION = 0.01

#: a node whose roof_pct is above this "ran above its roof" (the header counts them)
ABOVE_ROOF_PCT = 110.0

#: the bandwidth curve's levels: a new level starts where the curve's upper envelope drops more
#: than this fraction below the current level's rate (a cache level's drop is 1.5x or more;
#: noise between neighbouring sizes is a few percent)
CURVE_STEP = 0.20

#: after measuring, a plain op (add, add into out, copy) may reach at most this percent of its
#: roof; one above it raises the roof it was held to (fxprof.measure.passes.peaks)
ROOF_CHECK_PCT = 105.0


@dataclass(frozen=True)
class Peaks:
    """What this device can do at best: the roofs of the roofline.

    Attributes:
        flops_per_s: achievable compute rate (the best of several large GEMMs and convolutions in ``dtype``).
        bytes_per_s: main memory's bandwidth, bytes read plus written: the bandwidth curve's
            rate past its last cache level (:func:`roofs_from_curve`; the curve of add, copy
            and an in-place op is in ``details["curve"]``).
        overhead_s: the least time one op takes whatever its size (the median of a one-element
            add): a node whose roof time is below it is ``overhead``-limited.
        device, device_name, dtype, threads, torch: what was measured (``dtype`` is
            ``tfloat32`` for float32 matrix products that may use TF32 on a GPU).
        source: ``"measured"`` or ``"given"`` (the user's numbers, e.g. a datasheet's).
        details: how they were measured: each kernel's rate, sizes, seconds spent.
        caches: the cache-aware roofs: one ``{"level": "L2", "bytes": capacity, "bytes_per_s":
            rate}`` per cache level, the bandwidth measured with a working set that fits it. A
            node whose data fits a level is held to that level's bandwidth (``bytes_per_s`` is
            main memory's). Empty for given peaks and peaks cached before fxprof measured them.
        measured_at: when they were measured (ISO 8601, UTC; "" unknown).
        load: how busy the machine was while they were measured (``busy``, ``others_cpu``: the
            share of all CPUs other processes used, ``own_cpu``: this process's CPU time over
            wall time and threads, ``loadavg``, ``cpus``, ``why``); {} when not recorded.
        origin: where these came from this time: ``"now"`` (just measured), ``"cache"`` (read
            from the peaks cache), ``"process"`` (measured on a busy machine earlier in this
            process: not cached), "" (given, or saved before fxprof said).
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
    caches: tuple = ()
    measured_at: str = ""
    load: dict[str, Any] = field(default_factory=dict)
    origin: str = ""

    def __post_init__(self) -> None:
        levels: list[dict[str, Any]] = []
        for level in self.caches or ():
            try:
                levels.append({"level": str(level["level"]), "bytes": int(level["bytes"]), "bytes_per_s": float(level["bytes_per_s"])})
            except (KeyError, TypeError, ValueError) as exc:
                raise ValueError(f"peaks: a cache level needs level, bytes and bytes_per_s, got {level!r}") from exc
            if not (levels[-1]["bytes"] > 0 and math.isfinite(levels[-1]["bytes_per_s"]) and levels[-1]["bytes_per_s"] > 0):
                raise ValueError(f"peaks: a cache level's bytes and bytes_per_s must be positive, got {level!r}")
        object.__setattr__(self, "caches", tuple(sorted(levels, key=lambda lv: lv["bytes"])))
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
        data = asdict(self)
        data["caches"] = [dict(level) for level in self.caches]
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "Peaks":
        known = {k: data[k] for k in cls.__dataclass_fields__ if k in data}
        return cls(**known)

    def describe(self, now: str = "measured while profiling") -> str:
        """One line for a profile's header: ``peaks 0.118 TFLOP/s, 40.3 GB/s, op floor 0.84 us
        (float32, 1 thread; ridge 2.9 FLOP/byte); caches L2 1 MiB 95 GB/s, L3 32 MiB 61 GB/s;
        from the cache, measured 2026-11-24 20:45 UTC on this machine (...)``. ``now`` is
        what "just measured" is called (``fxprof peaks`` says "measured now")."""
        what = []  # measured or given: provenance() says
        if self.dtype:
            what.append(self.dtype)
        if self.threads:
            what.append(f"{self.threads} thread{'s' if self.threads != 1 else ''}")
        line = (f"peaks {self.flops_per_s / 1e12:.3g} TFLOP/s, {self.bytes_per_s / 1e9:.3g} GB/s, "
                f"op floor {self.overhead_s * 1e6:.3g} us ({', '.join(what)}; ridge {self.ridge:.3g} FLOP/byte)")
        if self.caches:
            line += "; caches " + ", ".join(f"{lv['level']} {size_text(lv['bytes'])} {lv['bytes_per_s'] / 1e9:.3g} GB/s" for lv in self.caches)
        line += "; " + self.provenance(now)
        if self.load.get("busy"):
            line += f"; measured on a busy machine ({load_text(self.load)})"
            used = self.details.get("used_at_load")
            if isinstance(used, dict) and used.get("quiet"):
                line += (f" while this profile ran on a quiet one (load average {used.get('loadavg', 0):.2f} on "
                         f"{used.get('cpus')} CPUs): the roofs may be too low and nodes read above them; "
                         f"fxprof peaks --refresh on a quiet machine")
        return line

    def provenance(self, now: str = "measured now") -> str:
        """Where these peaks come from: ``measured now (5.7 s)``, ``from the cache, measured
        2026-11-24 20:45 UTC on this machine (fxprof peaks --refresh to measure again)``, or
        ``given``."""
        if self.source == "given":
            return "given by the user"
        when = _when(self.measured_at)
        if self.origin == "now":
            seconds = self.details.get("seconds")
            return f"{now} ({seconds:.1f} s)" if isinstance(seconds, (int, float)) else now
        if self.origin == "process":  # measured busy earlier in this process, not cached
            return f"measured earlier in this process, {when or 'at a time not recorded'}"
        if self.origin == "cache":
            return (f"from the cache, measured {when or 'at a time not recorded (before fxprof kept it)'} on this machine "
                    f"(fxprof peaks --refresh to measure again)")
        return f"measured {when}" if when else "measured"


def load_text(load: Mapping[str, Any]) -> str:
    """``other processes used 45% of the 2 CPUs, this one 71% of its 2 threads' time, load
    average 3.1``: how busy the machine was during a measurement."""
    parts = []
    if isinstance(load.get("others_cpu"), (int, float)):
        parts.append(f"other processes used {load['others_cpu']:.0%} of the {load.get('cpus')} CPUs")
    if isinstance(load.get("own_cpu"), (int, float)):
        threads = load.get("threads") or 1
        whose = f"{threads} threads'" if threads != 1 else "1 thread's"
        parts.append(f"this one {load['own_cpu']:.0%} of its {whose} time")
    if isinstance(load.get("loadavg"), (int, float)):
        parts.append(f"load average {load['loadavg']:.2f}")
    usable, threads = load.get("usable_cores"), load.get("threads") or 1
    if isinstance(usable, int) and threads > usable:
        parts.append(f"{threads} threads on {usable} usable core(s)")
    return ", ".join(parts) or "load not recorded"


def roofs_from_curve(points: Any, named: Any = (), step: float = CURVE_STEP) -> tuple[float, list[dict[str, Any]]]:
    """Main memory's bandwidth and the cache levels, from a bandwidth curve.

    ``points`` are ``(bytes read, bytes_per_s)`` pairs: the rate of a kernel (copy, add) whose
    operands take that many bytes, at several sizes. The roof at a size is the curve's upper
    envelope there (the best rate at that size or any larger one: a larger working set is never
    faster), so no kernel of the curve beats the roof it is held to. Sizes where the envelope
    drops more than ``step`` start a new level; each level holds the nodes that read at most
    the first size of the next level (``bytes`` is that size over :data:`CACHE_FIT`, so that
    :func:`node_bandwidth`'s rule lands there), at the rate of its own smallest size. A node
    between two measured sizes gets the smaller size's rate: above what it can reach, never
    below. The last level is main memory's (its rate is returned first).

    ``named`` are ``(name, bytes)`` of the caches the system reports (sysfs, a GPU's L2):
    smallest first, a level takes the name of the smallest one not yet taken within a factor of
    4 of its size, else ``X+``, ``X+2``... after a named level ``X`` (``L?1``... before any).
    """
    best: dict[int, float] = {}
    for size, rate in points:
        size, rate = int(size), float(rate)
        if size > 0 and math.isfinite(rate) and rate > 0:
            best[size] = max(best.get(size, 0.0), rate)
    if not best:
        raise ValueError("roofs_from_curve: no point with a positive size and rate")
    sizes = sorted(best)
    envelope = [best[s] for s in sizes]
    for i in range(len(envelope) - 2, -1, -1):
        envelope[i] = max(envelope[i], envelope[i + 1])
    starts = [0]
    for i in range(1, len(sizes)):
        if envelope[i] < (1.0 - step) * envelope[starts[-1]]:
            starts.append(i)
    levels: list[dict[str, Any]] = [{"level": "", "bytes": int(math.ceil(sizes[starts[j + 1]] / CACHE_FIT)), "bytes_per_s": envelope[s]}
              for j, s in enumerate(starts[:-1])]
    free = sorted(((int(b), str(n)) for n, b in named if int(b) > 0))
    # smallest first: a level takes the smallest reported cache not yet named within 4x of it
    for lv in levels:
        for j, (size, name) in enumerate(free):
            if size / 4 <= lv["bytes"] <= 4 * size:
                lv["level"] = name
                del free[: j + 1]
                break
    base, extra = "", 0
    for lv in levels:
        if lv["level"]:
            base, extra = lv["level"], 0
        else:
            extra += 1
            lv["level"] = (f"{base}+" if extra == 1 else f"{base}+{extra}") if base else f"L?{extra}"
    return envelope[starts[-1]], levels


def roof_for(reads: float, bytes_per_s: float, levels: Any) -> tuple[float, str]:
    """The bandwidth a node reading ``reads`` bytes is held to, and the level's name ("memory"
    for main memory): :func:`node_bandwidth`'s rule for one node."""
    rate, name = float(bytes_per_s), "memory"
    for lv in levels:
        if reads <= CACHE_FIT * lv["bytes"] and lv["bytes_per_s"] > rate:
            rate, name = float(lv["bytes_per_s"]), lv["level"]
    return rate, name


def peaks_off(peaks: object) -> bool:
    """Whether ``peaks=`` asks for no roofline: ``None``, ``False``, or ``"off"``/``"none"`` (the
    CLI's and ``FXPROF_PEAKS``' spelling, any case), which the Python functions take as ``None``."""
    return peaks is None or peaks is False or (isinstance(peaks, str) and peaks.strip().lower() in ("off", "none"))


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
      too small for either roof to explain its time), unless the node takes ``FLOOR_MULTIPLE``
      floors or more while its roof is at least ``NO_WORK_FRACTION`` of the floor (a node that
      takes several times the floor is not limited by it, but a one-element add slowed by a
      busy machine still is); "" when there
      are no peaks, no byte count (anatomy off) or the node never ran.

    The bandwidth a node is held to is :func:`node_bandwidth`'s: the fastest cache level its
    data fits in (a cache-aware roofline), else main memory's.

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
    bandwidth = node_bandwidth(table, peaks)
    with np.errstate(divide="ignore", invalid="ignore"):
        compute_ms = flops / peaks.flops_per_s * 1e3
        memory_ms = nbytes / bandwidth * 1e3
        roof = np.fmax(compute_ms, memory_ms)
        roof = np.where(np.isnan(nbytes), np.nan, roof)
        intensity = np.where(nbytes > 0, flops / nbytes, np.nan)
        pct = np.where(median > 0, roof / median * 100.0, np.nan)
    headroom = median - roof
    known = ~np.isnan(roof) & ~np.isnan(median)
    limit = np.where(compute_ms >= memory_ms, "compute", "memory").astype(object)
    floor_ms = peaks.overhead_s * 1e3
    # below the floor and not several times it, or with next to no work (under 1% of a floor: a
    # one-element add on a busy machine): the fixed cost of an op explains the node's time
    small = (roof < NO_WORK_FRACTION * floor_ms) | ~(median >= FLOOR_MULTIPLE * floor_ms)
    limit[(roof < floor_ms) & small] = "overhead"
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


def size_text(nbytes: float) -> str:
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if nbytes >= scale:
            return f"{nbytes / scale:.3g} {unit}"
    return f"{nbytes:.0f} B"


def _when(iso: str) -> str:
    """``2026-11-24T20:45:12+00:00`` -> ``2026-11-24 20:45 UTC``."""
    match = re.match(r"(\d{4}-\d\d-\d\d)T(\d\d:\d\d)", iso or "")
    return f"{match.group(1)} {match.group(2)} UTC" if match else ""


def node_bandwidth(table: pd.DataFrame, peaks: Peaks) -> np.ndarray:
    """The bandwidth (bytes/s) each node of ``table`` is held to: the best rate of the cache
    levels its data fits in, main memory's included (a cache-aware roofline, as Intel Advisor
    draws one). A node's data is what it reads, ``bytes - out_bytes`` (what it writes is new;
    an in-place op reads its operand once): a ReLU whose 25.7 MB input was just written by
    the batch norm before it finds that input in a 50 MB L2. Without cache levels, or without
    ``out_bytes``, every node gets main memory's bandwidth. "Fits" is at most
    :data:`CACHE_FIT` of the level: the rest holds other data (and a GPU's L2 is split in
    partitions: layer1's ReLUs, reading 51.4 MB, ran at 95% of HBM's roof in a 50 MiB L2)."""
    rate = np.full(len(table), float(peaks.bytes_per_s))
    if not peaks.caches or "bytes" not in table.columns:
        return rate
    nbytes = table["bytes"].astype("float64").to_numpy()
    written = table["out_bytes"].astype("float64").to_numpy() if "out_bytes" in table.columns else np.zeros(len(table))
    reads = np.where(np.isnan(written), nbytes, np.clip(nbytes - np.nan_to_num(written), 0.0, None))
    for level in peaks.caches:  # a level's rate counts for every node whose reads fit it (and every smaller node)
        fits = reads <= CACHE_FIT * level["bytes"]
        rate = np.where(fits, np.fmax(rate, level["bytes_per_s"]), rate)
    return rate


_SHAPE = re.compile(r"\[([\d, ]*)\]")


def _empty_shape(text: Any) -> bool:
    """True when a shape text (``[0, 3, 32, 32]``, ``([2, 0], [4])``) has a zero-size dimension."""
    return isinstance(text, str) and any("0" in [d.strip() for d in group.split(",")] for group in _SHAPE.findall(text))


def roofline_notes(table: pd.DataFrame, peaks: Mapping[str, Any] | Peaks | None = None,
                   inputs: Any = None) -> list[str]:
    """The header's verdicts on the roofline columns: nodes on empty tensors (no data, no
    arithmetic, so no roof explains their time; "the input is degenerate" when one of the
    model's ``inputs``, as ``meta["inputs"]`` describes them, is empty), then the nodes that ran
    above their roof (``roof_pct`` over :data:`ABOVE_ROOF_PCT`) with the likely reasons."""
    if "roof_pct" not in table.columns:
        return []
    lines = []
    empty = pd.Series(False, index=table.index)
    if "output_shape" in table.columns:  # not input_shapes: a padding argument [0, 0] is no tensor
        empty |= table["output_shape"].map(_empty_shape).astype(bool)
    if "op" in table.columns:
        empty &= ~table["op"].isin(["placeholder", "output"])
    if empty.any():
        first = empty[empty].index[0]
        shape = table.loc[first, "output_shape"] if "output_shape" in table.columns else ""
        degenerate = any(_empty_shape(str(text)) for text in (inputs if isinstance(inputs, (list, tuple)) else []))
        why = "the input is degenerate (an empty tensor: an empty batch?); " if degenerate else ""
        lines.append(f"roofline: {int(empty.sum())} node(s) ran on empty tensors (a zero-size dimension: {first} "
                     f"{shape}): {why}such nodes move no data and do no arithmetic, so their time is each op's "
                     f"fixed cost, not a cache's or a busy machine's")
    above = table[(table["roof_pct"] > ABOVE_ROOF_PCT) & ~empty]
    if not above.empty:
        worst = above["roof_pct"].idxmax()
        if peaks is not None and not isinstance(peaks, Peaks):
            try:
                peaks = Peaks.from_dict(peaks)
            except (TypeError, ValueError):
                peaks = None
        where = ("their data sat in a cache nearer than the level they were held to" if peaks is not None and peaks.caches
                 else "their data sat in a cache (these peaks have no cache-aware roofs: fxprof peaks --refresh measures them)")
        lines.append(f"roofline: {len(above)} node(s) ran above their roof (roof_pct > {ABOVE_ROOF_PCT:g}; {worst} at "
                     f"{above.loc[worst, 'roof_pct']:.0f}%): {where}, or the peaks were measured on a busy "
                     f"machine (measure again: fxprof peaks --refresh)")
    return lines
