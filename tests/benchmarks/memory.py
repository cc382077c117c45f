"""Memory per sample: what fxprof.measure.budget.BYTES_PER_SAMPLE should be.

    python tests/benchmarks/memory.py [--iters 2000] [--nodes 20]

Profiles a chain of tiny ReLUs under tracemalloc and prints the peak Python-allocated bytes
over the run (recording, then the Profile built from it) divided by the samples kept. The
tensors are tiny, so the samples dominate.
"""

from __future__ import annotations

import argparse
import tracemalloc

import torch
from torch import nn

import fxprof
from fxprof.measure import budget


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--iters", type=int, default=2000)
    parser.add_argument("--nodes", type=int, default=20)
    args = parser.parse_args()
    model = nn.Sequential(*[nn.ReLU() for _ in range(args.nodes)])
    x = torch.ones(1, 4)
    fxprof.profile(model, x, warmup=1, iters=2, anatomy=False)  # imports and first-call costs
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    prof = fxprof.profile(model, x, warmup=0, iters=args.iters, anatomy=False)
    samples = len(prof.samples)
    prof.df  # the derived table is built on demand: count it too
    peak = tracemalloc.get_traced_memory()[1] - base
    tracemalloc.stop()
    print(f"samples {samples}, peak {peak / 1e6:.1f} MB, {peak / samples:.0f} bytes a sample "
          f"(budget assumes {budget.BYTES_PER_SAMPLE})")


if __name__ == "__main__":
    main()
