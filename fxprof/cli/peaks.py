"""``fxprof peaks``: this machine's compute rate and memory bandwidth (the roofline's roofs)."""

from __future__ import annotations

import argparse
from typing import Any

from .common import _bad, _print

USAGE = "peaks"
SUMMARY = "measure (or show the cached) compute rate and memory bandwidth of this machine"

PEAKS_EXAMPLES = """\
examples:
  fxprof peaks                          # this CPU, float32, torch's thread count (cached after the first time)
  fxprof peaks --threads 1 --refresh    # measure again, one thread
  fxprof peaks --device cuda --dtype bfloat16
"""


def add_parser(command: Any) -> argparse.ArgumentParser:
    e = command("peaks", "measure this machine's compute rate and memory bandwidth (the roofline's roofs)",
                "Measure (once; then read from the cache) the best rate of several large GEMMs and convolutions in --dtype, the best "
                "bandwidth of copy, add and triad over buffers far larger than the caches (bytes read plus written), "
                "and the least time of one op, with --threads threads. fxprof profile uses them for the roofline "
                "columns (roof_ms, roof_pct, headroom_ms, limit).", PEAKS_EXAMPLES)
    e.add_argument("--device", default="cpu", help="cpu, cuda, cuda:1 (default: cpu)")
    e.add_argument("--dtype", default="float32", help="the compute kernels' dtype: float32, float16, bfloat16, float64 (default: float32)")
    e.add_argument("--threads", type=int, default=None, metavar="N", help="CPU threads (default: torch's choice, as fxprof profile)")
    e.add_argument("--quick", action="store_true", help="small kernels and buffers: a rough figure in about a second")
    e.add_argument("--refresh", action="store_true",
                   help="measure again even if cached; the cache keeps the better of the new and earlier figures "
                        "(a busy machine only lowers a roof)")
    return e


def check(args: argparse.Namespace) -> None:
    if args.threads is not None and args.threads < 1:
        raise _bad(f"bad --threads {args.threads}: must be >= 1")


def run(args: argparse.Namespace) -> int:
    from ..core.roofline import FLOOR_MULTIPLE
    from ..measure.peaks import machine_peaks, peaks_source_line
    from .models import device_option, float_dtype

    dtype = float_dtype(args.dtype)
    device = device_option(args.device, usable=False)  # machine_peaks says what a missing GPU means
    found = machine_peaks(device, dtype, args.threads, sizes="quick" if args.quick else "full", refresh=args.refresh)
    _print(f"fxprof peaks: {found.device_name} ({found.device}), {found.dtype}"
           + (f", {found.threads} thread(s)" if found.threads else "") + f", torch {found.torch}")
    _print(f"  compute    {found.flops_per_s / 1e12:.4g} TFLOP/s   (best GEMM or convolution)")
    _print(f"  bandwidth  {found.bytes_per_s / 1e9:.4g} GB/s      (best of copy, add, triad; bytes read + written)")
    _print(f"  op floor   {found.overhead_s * 1e6:.3g} us          (one-element add as the timer sees it: roof below it, median under {FLOOR_MULTIPLE:g} floors: 'overhead')")
    _print(f"  ridge      {found.ridge:.3g} FLOP/byte  (below: memory-limited at the roof; above: compute-limited)")
    details = found.details
    for name, rate in details.get("compute_flops_per_s", {}).items():
        _print(f"    {name:<30} {rate / 1e12:.4g} TFLOP/s")
    for name, rate in details.get("bandwidth_bytes_per_s", {}).items():
        _print(f"    {name:<30} {rate / 1e9:.4g} GB/s")
    for level in found.caches:
        _print(f"    {level['level'] + ' (' + format(level['bytes'] / 2**20, '.3g') + ' MiB; data that fits)':<30} {level['bytes_per_s'] / 1e9:.4g} GB/s")
    _print("  " + peaks_source_line(found))
    return 0
