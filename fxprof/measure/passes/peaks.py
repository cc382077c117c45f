"""Machine peaks, measured: the compute rate and memory bandwidth a node can at best reach.

:func:`machine_peaks` times, on this device, in the dtype and with the thread count asked for:

- compute: several large GEMMs (square and oblong) and convolutions (on the CPU they run in
  oneDNN, GEMMs in the BLAS: here a 7x7 convolution ran at twice the best GEMM's rate); the
  best rate is the roof. A peak must be a roof (no node may run meaningfully above it), so it
  is the best of several kernels, not one.
- bandwidth: a curve of sizes. ``add`` (``torch.add(x, y, out=z)``) and ``copy``
  (``z.copy_(x)``), the kernels profiled ops run, each counted as bytes read plus written, on
  working sets from a few KiB to far beyond the caches (views of buffers allocated and touched
  before timing: a fresh ``clone()`` measures page faults, 3 GB/s where ``copy_`` does 19), in
  interleaved rounds until a round raises no point by more than 1%. The roof at a size is the
  curve's upper envelope there (no larger working set is faster); where the envelope drops, a
  cache level ends (:func:`fxprof.core.roofline.roofs_from_curve`): the levels are those this
  process reaches on this machine, named after the ones sysfs reports (a virtual machine's
  process can reach more cache, or less, than ``/sys/devices/system/cpu/cpu0/cache`` says;
  a GPU's L2 from ``torch.cuda.get_device_properties``). A node whose data fits a level is
  held to it.
- a check: plain ops (``add`` into a given output, ``copy``, ``x + y`` into a new tensor) at
  sizes between the curve's; one above 105% of the roof it would be held to raises that roof
  (``details["check"]`` says which).
- the per-op floor: the median time of a one-element add into a preallocated output, each
  call timed on its own as the node timers time a node (events around it on a GPU): the least
  a node costs as the timer sees it.

Each kernel runs in interleaved rounds and the fastest round counts (noise only slows a kernel
down). Peaks measured while other processes used more than 10% of the CPUs (``Peaks.load``) are
never written to the cache (kept for this process only), and say so. The result is cached per machine, device name, dtype, threads, matmul precision and
torch version in the user's cache directory (``$XDG_CACHE_HOME/fxprof/peaks.json``, else
``~/.cache/fxprof/peaks.json``): a second call costs nothing.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import glob
import json
import os
import platform
import tempfile
import time
import warnings
from typing import Any, Iterator

import torch

from ...core.roofline import Peaks, load_text, parse_peaks, peaks_off, roof_for, roofs_from_curve
from .bandwidth import Clock, check_plain_ops, measure_curve, raise_roofs, roof_points
from .load import LOAD_BUSY, Load, cache_busy

__all__ = ["machine_peaks", "resolve_peaks", "cache_path", "cache_levels", "peaks_source_line", "roof_for", "Peaks", "FULL", "QUICK"]

#: default sizes: GEMM shapes (m, k, n), convolutions (batch, in channels, out channels, kernel,
#: stride, input height = width), the bandwidth curve's sizes (elements per buffer: 2**lo to 2**hi,
#: doubling), its rounds (at least, at most) and the seconds each curve point is timed per round
FULL = {
    "cpu": {"gemms": ((2048, 2048, 2048), (1024, 1024, 1024), (4096, 1024, 1024), (1024, 4096, 1024)),
            "convs": ((1, 3, 64, 7, 2, 224), (1, 64, 64, 3, 1, 56), (1, 256, 256, 3, 1, 14)),
            "curve": (13, 26), "curve_rounds": (4, 12), "point_seconds": 0.02, "rounds": 3, "seconds": 0.5},
    "cuda": {"gemms": ((8192, 8192, 8192), (4096, 4096, 4096), (16384, 4096, 4096), (4096, 16384, 4096)),
             "convs": ((64, 3, 64, 7, 2, 224), (64, 64, 64, 3, 1, 56), (64, 256, 256, 3, 1, 14)),
             "curve": (14, 28), "curve_rounds": (4, 10), "point_seconds": 0.01, "rounds": 5, "seconds": 0.2},
}
#: small sizes for a quick look (tests): GEMMs still large enough to use the vector units, a
#: shorter curve (up to 3 buffers of 32 MiB in float32 on a CPU); less exact than ``FULL``, and
#: the roofs still upper bounds up to its largest size
QUICK = {
    "cpu": {"gemms": ((1024, 1024, 1024), (1024, 512, 512)), "convs": ((1, 3, 64, 7, 2, 112), (1, 64, 64, 3, 1, 28)),
            "curve": (12, 23), "curve_rounds": (3, 8), "point_seconds": 0.004, "rounds": 3, "seconds": 0.1},
    "cuda": {"gemms": ((4096, 4096, 4096), (2048, 2048, 2048)), "convs": ((16, 64, 64, 3, 1, 56),),
             "curve": (14, 26), "curve_rounds": (3, 6), "point_seconds": 0.003, "rounds": 3, "seconds": 0.05},
}



#: 2: the bandwidth roofs come from a curve of sizes and are checked against plain ops; entries
#: of version 1 (one buffer size, levels from sysfs: not always upper bounds) are measured again
_CACHE_VERSION = 2

#: peaks measured on a busy machine in this process (never written to the cache): a second
#: profile in the same process does not measure them again
_BUSY: dict[tuple[str, str], Peaks] = {}

#: the environment variable that sets the share of the CPUs other processes may use during a
#: measurement before its peaks count as busy (default :data:`OTHERS_BUSY`); ``off`` (or 1)
#: caches peaks whatever the load (a machine that is never quiet, a test suite)

def cache_path() -> str:
    """Where measured peaks are kept: ``$XDG_CACHE_HOME/fxprof/peaks.json`` (else
    ``~/.cache/fxprof/peaks.json``; ``%LOCALAPPDATA%\\fxprof`` on Windows). Written by hand, not
    with platformdirs: one path is not worth a dependency."""
    base = os.environ.get("XDG_CACHE_HOME") or (os.environ.get("LOCALAPPDATA") if os.name == "nt" else None)
    if not base:
        base = os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "fxprof", "peaks.json")


def machine_peaks(
    device: str | torch.device = "cpu",
    dtype: torch.dtype = torch.float32,
    threads: int | None = None,
    *,
    sizes: str = "full",
    cache: bool = True,
    refresh: bool = False,
) -> Peaks:
    """The achievable compute rate and memory bandwidth of ``device``, measured (or cached).

    Args:
        device: ``"cpu"``, ``"cuda"``, ``"cuda:1"``...
        dtype: the GEMMs' dtype (``torch.float32``, ``float16``, ``bfloat16``, ``float64``). On a
            GPU, float32 GEMMs run as TF32 when ``torch.backends.cuda.matmul.allow_tf32`` (or
            ``torch.set_float32_matmul_precision``) allows it; the peaks then say ``tfloat32``.
        threads: CPU threads to measure with (default: ``torch.get_num_threads()``, the count a
            profile uses); restored afterwards.
        sizes: ``"full"`` (default; about 2-5 s on a 2-core CPU the first time) or ``"quick"``
            (small GEMMs and buffers: a rough roof, for tests and a first look). Quick and full
            peaks are cached apart.
        cache: read and write the cache (:func:`cache_path`).
        refresh: measure again even if cached. The cache then keeps the better of the new and
            the earlier figures (a busy machine only lowers a roof; ``details["measurements"]``
            counts the tries); delete the cache file to forget them.

    Returns:
        :class:`~fxprof.core.roofline.Peaks` with ``flops_per_s``, ``bytes_per_s``,
        ``overhead_s`` and, in ``details``, every kernel's rate, the sizes and the seconds the
        measurement took.
    """
    device = torch.device(device)
    if device.type not in ("cpu", "cuda"):
        raise ValueError(f"machine_peaks measures 'cpu' or 'cuda' devices, not {device.type!r}")
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(f"machine_peaks(device={str(device)!r}): torch.cuda.is_available() is False on this machine; use device='cpu'")
        device = torch.device("cuda", torch.cuda.current_device() if device.index is None else device.index)
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise ValueError(f"machine_peaks: dtype must be a floating torch.dtype (torch.float32, torch.float16...), got {dtype!r}")
    if sizes not in ("full", "quick"):
        raise ValueError(f"machine_peaks: sizes must be 'full' or 'quick', got {sizes!r}")
    if threads is not None and (isinstance(threads, bool) or not isinstance(threads, int) or threads < 1):
        raise ValueError(f"machine_peaks: threads must be an integer >= 1, got {threads!r}")
    threads = threads or torch.get_num_threads()
    label = _dtype_label(dtype, device)
    name = _device_name(device)
    # a GPU's key says its kernels are timed queued behind a spin kernel: entries timed from an
    # idle device (the launch latency inside every call, roofs up to 11% low) are measured again
    key = "|".join([platform.node(), name, f"{device} queued" if device.type == "cuda" else "cpu", label,
                    f"threads={threads}" if device.type == "cpu" else "", torch.__version__, sizes])
    plan = (FULL if sizes == "full" else QUICK)[device.type]
    cached = _cached(key) if cache else None
    if cached is not None and not refresh:
        return dataclasses.replace(cached, origin="cache")
    memo = (cache_path(), key)
    if not refresh and memo in _BUSY:  # measured busy earlier in this process (and not cached)
        return _BUSY[memo]
    with _threads(threads if device.type == "cpu" else None), Load(device, threads) as load:
        measured = _measure(device, dtype, plan)
    peaks = Peaks(**{**measured, "device": str(device), "device_name": name, "dtype": label,
                     "threads": threads if device.type == "cpu" else None, "torch": torch.__version__,
                     "measured_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                     "load": load.record})
    earlier = cached or _BUSY.get(memo)
    if earlier is not None:  # noise only lowers a roof: keep the best of this and earlier measurements
        peaks = _merge(peaks, earlier, device)
    note: dict[str, Any] = {"path": cache_path(), "written": False, "error": "not asked (cache=False)"}
    if cache and peaks.load.get("busy") and not cache_busy():
        note = {"path": cache_path(), "written": False, "error": f"the machine was busy ({load_text(peaks.load)})"}
        _BUSY[memo] = dataclasses.replace(peaks, origin="process", details={**peaks.details, "cache": note})
    elif cache:
        error = _write_cache(key, peaks.to_dict())
        note = {"path": cache_path(), "written": not error, "error": error}
        _BUSY.pop(memo, None)
    # where they went: read by fxprof peaks, not kept in the cache itself
    return dataclasses.replace(peaks, origin="now", details={**peaks.details, "cache": note})


def _merge(new: Peaks, old: Peaks, device: torch.device) -> Peaks:
    """The better of two measurements: the best compute rate, the least floor, and the roofs of
    the curve whose every point is the faster of the two (then checked again)."""
    tries = int(old.details.get("measurements", 1)) + 1
    curve = {(p["kernel"], p["elements"]): p for p in old.details.get("curve", ())}
    for p in new.details.get("curve", ()):
        if (p["kernel"], p["elements"]) not in curve or p["bytes_per_s"] > curve[(p["kernel"], p["elements"])]["bytes_per_s"]:
            curve[(p["kernel"], p["elements"])] = p
    details = {**new.details, "measurements": tries}
    bytes_per_s, caches = max(new.bytes_per_s, old.bytes_per_s), new.caches
    if curve:
        points = sorted(curve.values(), key=lambda p: (p["bytes"], p["kernel"]))
        bytes_per_s, levels = roofs_from_curve(roof_points(points), cache_levels(device))
        bytes_per_s, levels, check = raise_roofs(bytes_per_s, levels, [*new.details.get("check", ()), *old.details.get("check", ())])
        caches, details["curve"], details["check"] = tuple(levels), points, check
    return dataclasses.replace(new, flops_per_s=max(new.flops_per_s, old.flops_per_s), bytes_per_s=bytes_per_s,
                               overhead_s=min(new.overhead_s, old.overhead_s), caches=caches, details=details)


def peaks_source_line(peaks: Peaks) -> str:
    """Where ``fxprof peaks``' figures come from, and whether they were cached: ``measured now
    (5.7 s); cached in ~/.cache/fxprof/peaks.json``, ``measured now (5.7 s); not cached
    (cannot write ...: Permission denied)`` or ``from the cache, measured 2026-11-24 20:45 UTC on
    this machine (fxprof peaks --refresh to measure again)``."""
    line = peaks.provenance("measured now")
    tries = peaks.details.get("measurements", 1)
    if tries and tries > 1:
        line += f", best of {tries} measurements"
    note = peaks.details.get("cache")
    if peaks.origin == "cache":
        return line + f"; cache {cache_path()}"
    if isinstance(note, dict):
        if note.get("written"):
            return line + f"; cached in {note.get('path')}"
        if peaks.load.get("busy"):
            return line + (f"; not cached: the machine was busy ({load_text(peaks.load)}), so the roofs may be low; "
                           f"measured again next time (fxprof peaks --refresh on a quiet machine)")
        return line + f"; not cached ({note.get('path')}: {note.get('error')}): measured again next time"
    return line


def _cached(key: str) -> Peaks | None:
    found = _read_cache().get(key)
    if found is None:
        return None
    try:
        return Peaks.from_dict(found)
    except (TypeError, ValueError):  # a damaged entry is measured again
        return None


def resolve_peaks(peaks: Any, device: torch.device | str = "cpu", dtype: torch.dtype = torch.float32,
                  threads: int | None = None) -> Peaks | None:
    """What ``fxprof.profile(peaks=...)`` asked for: ``"auto"`` (measured or cached for
    ``device``, ``dtype`` and ``threads``; the environment variable ``FXPROF_PEAKS`` may say
    ``off``, ``quick`` or ``TFLOPS,GBPS`` instead), ``"quick"``, ``None``/``False``/``"off"``
    (no roofline; ``"off"`` is the CLI's spelling), a :class:`~fxprof.core.roofline.Peaks`,
    ``(tflops, gbps)`` or ``"TFLOPS,GBPS"``. Given numbers are checked without measuring anything."""
    if isinstance(peaks, str) and peaks == "auto":
        peaks = os.environ.get(ENV, "").strip() or "auto"
        if peaks.lower() in ("off", "none", "0", "false"):
            return None
    if peaks_off(peaks):
        return None
    if isinstance(peaks, Peaks):
        return _used_at(peaks, threads)
    if isinstance(peaks, str) and peaks in ("auto", "quick"):
        return _used_at(machine_peaks(device, dtype, threads, sizes="full" if peaks == "auto" else "quick"), threads)
    if isinstance(peaks, str):
        return parse_peaks(peaks)
    if isinstance(peaks, (tuple, list)) and len(peaks) in (2, 3) and not any(isinstance(v, (str, bool)) for v in peaks):
        return parse_peaks(",".join(map(str, peaks)))
    raise ValueError(f"peaks must be 'auto', 'quick', None (or 'off'), (TFLOPS, GBPS), 'TFLOPS,GBPS' or a fxprof Peaks; "
                     f"got {peaks!r}")


def _used_at(peaks: Peaks, threads: int | None) -> Peaks:
    """Peaks measured on a busy machine, used now: how busy the machine is now (the 1-minute
    load average, which covers the profile's runs just before, over the CPUs, less the profile's
    own threads), kept in ``details["used_at_load"]``, so that a profile taken on a quiet
    machine says its roofs may be too low (:meth:`Peaks.describe`)."""
    if not peaks.load.get("busy"):
        return peaks
    try:
        loadavg = os.getloadavg()[0]
    except (OSError, AttributeError):
        return peaks
    cpus = os.cpu_count() or 1
    quiet = (loadavg - (threads or 1)) / cpus <= LOAD_BUSY
    return dataclasses.replace(peaks, details={**peaks.details, "used_at_load": {"loadavg": round(loadavg, 2), "cpus": cpus, "quiet": quiet}})


#: the environment variable that overrides ``peaks="auto"``: ``off``, ``quick``, ``TFLOPS,GBPS``
ENV = "FXPROF_PEAKS"


# ---------------------------------------------------------------------- measuring
def _measure(device: torch.device, dtype: torch.dtype, plan: dict[str, Any]) -> dict[str, Any]:
    began = time.perf_counter()
    clock = Clock(device)
    rounds, budget = int(plan["rounds"]), float(plan["seconds"])
    compute: dict[str, float] = {}
    gen = torch.Generator(device=device)  # its own: the user's random stream is left where it was
    gen.manual_seed(0)
    for m, k, n in plan["gemms"]:
        a = torch.randn(m, k, device=device, generator=gen).to(dtype)
        b = torch.randn(k, n, device=device, generator=gen).to(dtype)
        c = torch.empty(m, n, device=device, dtype=dtype)
        seconds = clock.best(lambda: torch.mm(a, b, out=c), rounds, budget)  # noqa: F821 (run here, before the del below)
        compute[f"mm {m}x{k}x{n}"] = 2.0 * m * k * n / seconds
        del a, b, c
    # convolutions too: on the CPU they run in oneDNN, matrix products in the BLAS, and the two
    # need not reach the same rate (here a 7x7 convolution ran at twice the best GEMM's)
    for batch, c_in, c_out, kernel, stride, size in plan.get("convs", ()):
        x = torch.randn(batch, c_in, size, size, device=device, generator=gen).to(dtype)
        w = torch.randn(c_out, c_in, kernel, kernel, device=device, generator=gen).to(dtype)
        out_size = (size + 2 * (kernel // 2) - kernel) // stride + 1
        seconds = clock.best(lambda: torch.nn.functional.conv2d(x, w, stride=stride, padding=kernel // 2), rounds, budget)  # noqa: F821 (run here, before the del below)
        # FlopCounterMode's count: 2 x multiply-adds
        flops = 2.0 * batch * c_out * c_in * kernel * kernel * out_size * out_size
        compute[f"conv {batch}x{c_in}x{size}x{size} {c_out}x{kernel}x{kernel}/{stride}"] = flops / seconds
        del x, w
    curve, stability = measure_curve(device, dtype, plan, clock)
    bytes_per_s, levels = roofs_from_curve(roof_points(curve), cache_levels(device))
    check = check_plain_ops(device, dtype, plan, clock)
    bytes_per_s, levels, check = raise_roofs(bytes_per_s, levels, check)
    largest = max(p["elements"] for p in curve)
    bandwidth = {p["kernel"]: p["bytes_per_s"] for p in curve if p["elements"] == largest}
    one, out = torch.ones(1, device=device, dtype=dtype), torch.empty(1, device=device, dtype=dtype)
    # the cheapest op the node timers can see: no allocation (a preallocated output), each
    # call timed on its own as a node is (on a GPU: events around it, not a back-to-back rate,
    # which is the host's launch rate: 9.3 us on an H100 host where cheap nodes timed 3.5 us)
    floor = clock.each_median(lambda: torch.add(one, one, out=out), 200)
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return {
        "flops_per_s": max(compute.values()),
        "bytes_per_s": bytes_per_s,
        "overhead_s": floor,
        "caches": tuple(levels),
        "details": {
            "compute_flops_per_s": compute,
            "bandwidth_bytes_per_s": bandwidth,
            "buffer_bytes": largest * torch.empty((), dtype=dtype).element_size(),
            "curve": curve,
            "curve_stability": stability,
            "check": check,
            "op_floor": "median of a one-element add into a preallocated output, each call timed on its own",
            "seconds": round(time.perf_counter() - began, 3),
        },
    }


def cache_levels(device: torch.device | str = "cpu") -> list[tuple[str, int]]:
    """The data cache levels of ``device`` as ``(name, bytes)``, smallest first: on a CPU from
    ``/sys/devices/system/cpu/cpu0/cache`` (Linux; none elsewhere), L1 left out (a torch op's
    fixed cost hides its bandwidth); on a GPU its L2 (``get_device_properties().L2_cache_size``)."""
    device = torch.device(device)
    if device.type == "cuda":
        size = int(getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 0) or 0)
        return [("L2", size)] if size > 0 else []
    found: dict[str, int] = {}
    for folder in sorted(glob.glob("/sys/devices/system/cpu/cpu0/cache/index*")):
        try:
            with open(os.path.join(folder, "level"), encoding="utf-8") as handle:
                level = int(handle.read().strip())
            with open(os.path.join(folder, "type"), encoding="utf-8") as handle:
                kind = handle.read().strip()
            with open(os.path.join(folder, "size"), encoding="utf-8") as handle:
                text = handle.read().strip().upper()
        except (OSError, ValueError):
            continue
        scale = {"K": 2**10, "M": 2**20, "G": 2**30}.get(text[-1:], 1)
        try:
            size = int(text.rstrip("KMG")) * scale
        except ValueError:
            continue
        if kind in ("Data", "Unified") and level >= 2 and size > 0:
            found[f"L{level}"] = max(found.get(f"L{level}", 0), size)
    return sorted(found.items(), key=lambda item: item[1])

@contextlib.contextmanager
def _threads(threads: int | None) -> Iterator[None]:
    before = torch.get_num_threads()
    if threads is not None and threads != before:
        torch.set_num_threads(threads)
    try:
        yield
    finally:
        if torch.get_num_threads() != before:
            torch.set_num_threads(before)


def _dtype_label(dtype: torch.dtype, device: torch.device) -> str:
    label = str(dtype).removeprefix("torch.")
    if device.type == "cuda" and dtype == torch.float32 and torch.backends.cuda.matmul.allow_tf32:
        return "tfloat32"
    return label


def _device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    with contextlib.suppress(OSError):
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            for line in handle:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine() or "cpu"


# -------------------------------------------------------------------------- cache
def _read_cache() -> dict[str, Any]:
    try:
        with open(cache_path(), encoding="utf-8") as handle:
            data = json.load(handle)
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict) or data.get("version") != _CACHE_VERSION or not isinstance(data.get("peaks"), dict):
        return {}
    return data["peaks"]


def _write_cache(key: str, record: dict[str, Any]) -> str:
    """Add one entry, atomically (a temporary file renamed over the cache); returns "" or why it
    could not. A cache that cannot be written costs a warning: the peaks were measured and are
    returned all the same."""
    path = cache_path()
    entries = _read_cache()
    record = {k: v for k, v in record.items() if k != "origin"}
    record["details"] = {k: v for k, v in record.get("details", {}).items() if k != "cache"}
    entries[key] = record
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".peaks-", suffix=".tmp", dir=os.path.dirname(path))
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump({"version": _CACHE_VERSION, "peaks": entries}, handle, indent=1)
        os.replace(tmp, path)
    except OSError as exc:
        warnings.warn(f"fxprof: cannot cache the machine peaks in {path!r} ({exc.strerror or exc}); they will be measured again next time",
                      stacklevel=3)
        return str(exc.strerror or exc)
    return ""
