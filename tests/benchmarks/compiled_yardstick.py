"""Compiled mode's yardstick against the compiled model in a plain loop (issue 45, item 4).

A compiled profile holds its rows against the compiled model's own run time, its unprofiled
runs (``meta["compiled"]["unprofiled_ms"]``). This times, in rounds that alternate, the same
compiled model in a plain loop of the user's (``calls`` calls after two settling ones, median)
and the median of a compiled profile's unprofiled runs, and prints each round's ratio and the
median ratio. Taken between the profiler's cycles (the yardstick before), they read 8-21% slower
than the plain loop; the plain loop before and after the cycles should read within 5%.

    PYTHONPATH=$PWD taskset -c 1 python tests/benchmarks/compiled_yardstick.py --rounds 5
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
import warnings

import torch
from torch import nn

import fxprof


class TwoLinear(nn.Module):
    """Two Linears with a graph break between them (the header example of docs/compiled.md)."""

    def __init__(self, width: int = 256):
        super().__init__()
        self.a = nn.Linear(width, width)
        self.b = nn.Linear(width, width)

    def forward(self, x):
        x = torch.relu(self.a(x))
        print(end="")  # a graph break
        return self.b(x)


def plain_loop(compiled, x: torch.Tensor, calls: int) -> float:
    for _ in range(2):
        compiled(x.clone())
    times = []
    for _ in range(calls):
        fresh = x.clone()
        t0 = time.perf_counter_ns()
        compiled(fresh)
        times.append((time.perf_counter_ns() - t0) / 1e6)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--calls", type=int, default=50)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    torch.manual_seed(0)
    model = TwoLinear().eval()
    x = torch.randn(16, 256)
    compiled = torch.compile(model)
    rows = []
    with torch.no_grad():
        compiled(x)
        fxprof.profile(compiled, x, iters=2, warmup=1, peaks=None, memory=False)  # fxprof's compile, once
        for r in range(args.rounds):
            plain = plain_loop(compiled, x, args.calls)
            prof = fxprof.profile(compiled, x, iters=args.iters, warmup=2, peaks=None, memory=False)
            own = statistics.median(prof.meta["compiled"]["unprofiled_ms"])
            rows.append({"round": r, "plain_loop_ms": plain, "yardstick_ms": own, "ratio": own / plain,
                         "load": os.getloadavg()[0], "busy_runs": len(prof.busy_runs)})
            print(f"round {r}: plain loop {plain * 1e3:.1f} us, fxprof's yardstick {own * 1e3:.1f} us, ratio "
                  f"{own / plain:.3f} (load {os.getloadavg()[0]:.1f}, {len(prof.busy_runs)} busy runs)", flush=True)
    ratio = statistics.median(r["ratio"] for r in rows)
    print(f"median ratio yardstick / plain loop over {len(rows)} rounds: {ratio:.3f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"compiled_yardstick": rows, "median_ratio": ratio}, f, indent=1)


if __name__ == "__main__":
    main()
