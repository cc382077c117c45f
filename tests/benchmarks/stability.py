"""Coverage and stability: how much of a run the nodes explain, and how repeatable they are.

    python tests/benchmarks/stability.py [--models ...] [--size 64] [--profiles 5] [--iters 20]

Per model: several independent profiles in one process. Coverage is summed mean node time
over mean run time (median over profiles). Stability is the spread of each node's median
across the profiles, as (max - min) / median of the per-profile medians: the median of that
over nodes, and its time-weighted mean (big nodes count more).
"""

from __future__ import annotations

import argparse

import pandas as pd
from common import MODELS, build, env, print_table, write_json

import fxprof


def measure(name: str, size: int, profiles: int, iters: int, device: str) -> dict:
    model, x = build(name, size, device)
    medians, coverages = [], []
    for _ in range(profiles):
        prof = fxprof.profile(model, x, warmup=3, iters=iters, anatomy=False, memory=False)
        medians.append(prof.df["median_ms"])
        coverages.append(prof.coverage)
    table = pd.concat(medians, axis=1)
    center = table.median(axis=1)
    spread = ((table.max(axis=1) - table.min(axis=1)) / center).where(center > 0)
    weights = center / center.sum()
    return {
        "model": name, "nodes": len(table), "profiles": profiles, "iters": iters,
        "coverage_median_pct": float(pd.Series(coverages).median() * 100),
        "node_spread_median_pct": float(spread.median() * 100),
        "node_spread_time_weighted_pct": float((spread * weights).sum() * 100),
        "run_median_ms": float(center.sum()),
    }


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--size", type=int, default=64)
    parser.add_argument("--profiles", type=int, default=5)
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--json")
    args = parser.parse_args(argv)
    rows = [measure(n, args.size, args.profiles, args.iters, args.device) for n in args.models.split(",")]
    print(env(args.device))
    print_table(f"coverage and stability, 1x3x{args.size}x{args.size}", rows)
    payload = {"env": env(args.device), "stability": rows}
    write_json(args.json, payload)
    return payload


if __name__ == "__main__":
    main()
