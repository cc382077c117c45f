"""``fxprof peaks``: this machine's compute rate and memory bandwidth (the roofline's roofs)."""

from __future__ import annotations

import argparse
from typing import Any

from .common import bad, echo

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
                "Measure (once; then read from the cache) the best rate of several large GEMMs and convolutions in --dtype, "
                "the bandwidth curve of add and copy (bytes read plus written) from a few KiB to far beyond the caches, "
                "with the cache levels where it drops, a check of the roofs against plain ops, "
                "and the least time of one op, with --threads threads. Peaks measured on a busy machine are not cached. fxprof profile uses them for the roofline "
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
        raise bad(f"bad --threads {args.threads}: must be >= 1")


def run(args: argparse.Namespace) -> int:
    from ..core.roofline import FLOOR_MULTIPLE
    from ..measure.passes.peaks import machine_peaks, peaks_source_line
    from .models import device_option, float_dtype

    dtype = float_dtype(args.dtype)
    device = device_option(args.device, usable=False)  # machine_peaks says what a missing GPU means
    found = machine_peaks(device, dtype, args.threads, sizes="quick" if args.quick else "full", refresh=args.refresh)
    echo(f"fxprof peaks: {found.device_name} ({found.device}), {found.dtype}"
           + (f", {found.threads} thread(s)" if found.threads else "") + f", torch {found.torch}")
    echo(f"  compute    {found.flops_per_s / 1e12:.4g} TFLOP/s   (best GEMM or convolution)")
    echo(f"  bandwidth  {found.bytes_per_s / 1e9:.4g} GB/s      (main memory: the curve beyond its last cache level; bytes read + written)")
    echo(f"  op floor   {found.overhead_s * 1e6:.3g} us          (one-element add as the timer sees it: roof below it, median under {FLOOR_MULTIPLE:g} floors: 'overhead')")
    echo(f"  ridge      {found.ridge:.3g} FLOP/byte  (below: memory-limited at the roof; above: compute-limited)")
    details = found.details
    for name, rate in details.get("compute_flops_per_s", {}).items():
        echo(f"    {name:<30} {rate / 1e12:.4g} TFLOP/s")
    for line in curve_lines(found):
        echo(line)
    echo("  " + peaks_source_line(found))
    return 0


def curve_lines(found: Any) -> list[str]:
    """The bandwidth curve of ``fxprof peaks``: per size of the data an op reads, the rate of
    add and copy, the roof a node of that size is held to (and its level), how far the point's
    two best rounds are apart; then the levels and the check against plain ops."""
    from ..core.roofline import ROOF_CHECK_PCT, roof_for, size_text

    details = found.details
    curve = details.get("curve") or []
    if not curve:
        return []
    stability = details.get("curve_stability") or {}
    rise = stability.get("last_rise")
    spread = stability.get("roof_spread")
    how = f"fastest of {stability.get('rounds', '?')} interleaved rounds"
    if rise is not None:
        how += f"; the last raised no point by more than {rise:.1%}"
    if spread is not None:
        how += f"; the points that set a roof repeat within {spread:.1%} (their two best rounds)"
        if not stability.get("stable", True):
            how += f", NOT stable (at {size_text(stability.get('roof_spread_at') or 0)} read): measure again on a quieter machine"
    lines = [f"  bandwidth curve (GB/s of bytes read + written, by the bytes an op reads; {how})",
             f"    {'reads':>10}  {'add':>7}  {'copy':>7}  {'in place':>8}  {'roof':>7}  {'level':<6}  spread (2 best rounds)"]
    rows: dict[int, dict[str, Any]] = {}
    for point in curve:
        rows.setdefault(int(point["bytes"]), {})[point["kernel"]] = point
    for reads, kernels in sorted(rows.items()):
        roof, level = roof_for(reads, found.bytes_per_s, found.caches)
        rates = [f"{kernels[k]['bytes_per_s'] / 1e9:{w}.1f}" if k in kernels else " " * w for k, w in (("add", 7), ("copy", 7), ("in place", 8))]
        spreads = [kernels[k]["spread"] for k in kernels if kernels[k].get("spread") is not None]
        lines.append(f"    {size_text(reads):>10}  {rates[0]}  {rates[1]}  {rates[2]}  {roof / 1e9:7.1f}  {level:<6}  "
                     + (f"{max(spreads):.1%}" if spreads else ""))
    levels = [f"{lv['level']} up to {size_text(lv['bytes'])} ({size_text(lv['bytes'] * 0.75)} read) {lv['bytes_per_s'] / 1e9:.3g} GB/s"
              for lv in found.caches]
    lines.append("  levels (where the curve drops): " + "; ".join([*levels, f"memory {found.bytes_per_s / 1e9:.3g} GB/s"]))
    check = details.get("check") or []
    if check:
        worst = max(check, key=lambda r: r["pct"])
        raised = [r for r in check if r.get("raised")]
        line = (f"  check: {len(check)} plain ops ({', '.join(sorted({r['op'] for r in check}))} at {len({r['elements'] for r in check})} "
                f"sizes between the curve's) reach at most {worst['pct']:.0f}% of their roof ({worst['op']} of {worst['elements']} elements)")
        if raised:
            line += (f"; {len(raised)} ran above {ROOF_CHECK_PCT:g}%, and raised their roof to their rate: "
                     + ", ".join(f"{r['level']} by {r['op']} of {r['elements']} elements ({r['pct']:.0f}%)" for r in raised))
        lines.append(line)
    return lines
