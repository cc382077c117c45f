"""Compiled mode against the compiled model's own run time (issue 22):

    python tests/benchmarks/compiled.py [--models resnet18,chain] [--size 64] [--iters 20] [--threads N] [--json out.json]

Per model, ``fxprof.profile(model, x, compile=True)`` compiles it with inductor, times
``iters`` unprofiled calls by the host clock (the compiled model's own run time) and ``iters``
profiled calls, each kernel a sample, interleaved. Reported: the compiled model's own median
run, the median over runs of each run's summed kernel times, their ratio (the done-criterion:
within 15%), the same for the fastest run of each (on a machine shared with other jobs the
medians carry their load; the minima are each side's undisturbed run), the profiled run's
median and coverage; and, for contrast, what the eager dynamo graph's nodes add
up to (what fxprof reported for a compiled model before compiled mode). ``chain`` is the
issue's 20 steps of ``relu(x * 1.01 + 0.1)`` over 4M floats.
"""

from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402
from common import build, env, print_table, write_json  # noqa: E402
from torch import nn  # noqa: E402

import fxprof  # noqa: E402
from fxprof.core.compiled import own_run_ms  # noqa: E402


class Chain(nn.Module):
    def forward(self, x):
        for _ in range(20):
            x = torch.relu(x * 1.01 + 0.1)
        return x


def model_for(name: str, size: int) -> tuple[nn.Module, torch.Tensor]:
    if name == "chain":
        return Chain(), torch.randn(4 * 1024 * 1024)
    return build(name, size)


def measure(name: str, size: int, iters: int) -> dict:
    model, x = model_for(name, size)
    prof = fxprof.profile(model, x, compile=True, warmup=3, iters=iters)
    kernel_rows = prof.df.index[prof.df["op"].isin(("kernel", "extern", "unmatched"))]  # not breaks, not overhead
    samples = prof.kept_samples()
    samples = samples[samples["node"].isin(kernel_rows)]
    per_run = samples.groupby("run", observed=True)["time_ms"].sum()
    compiled = prof.meta["compiled"]
    own = own_run_ms(prof.meta)[0]
    kernels = float(per_run.median())
    eager = fxprof.profile(model, x, capture="dynamo", warmup=2, iters=max(5, iters // 2))
    own_min, kernel_min = min(compiled["unprofiled_ms"]), float(per_run.min())
    return {
        "model": name,
        "kernels": len(kernel_rows),
        "compile_s": compiled["compile_s"],
        "own_median_ms": own,
        "kernel_sum_ms": kernels,
        "kernel_over_own": kernels / own,
        "own_min_ms": own_min,
        "kernel_min_ms": kernel_min,
        "min_over_min": kernel_min / own_min,
        "profiled_median_ms": float(prof.runs.loc[~prof.runs["outlier"], "total_ms"].median()),
        "coverage": prof.coverage,
        "eager_nodes_sum_ms": float(eager.df["median_ms"].sum()),
        "eager_over_own": float(eager.df["median_ms"].sum()) / own,
    }


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default="resnet18,chain")
    parser.add_argument("--size", type=int, default=64)
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--json")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    rows = [measure(name, args.size, args.iters) for name in args.models.split(",")]
    print_table("compiled mode: kernel times against the compiled model's own run", rows)
    payload = {"compiled": rows, "env": env("cpu")}
    write_json(args.json, payload)
    return payload


if __name__ == "__main__":
    main()
