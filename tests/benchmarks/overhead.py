"""How much does fxprof add on top of running the graph? Run on purpose, not by pytest:

    python tests/benchmarks/overhead.py [--model resnet18] [--size 64] [--repeats 15] [--json out.json]

In one process, interleaved (each repeat runs every variant once, in turn), it times:
  eager        model(x)
  graphmodule  the traced GraphModule's generated forward
  interpreter  a plain torch.fx.Interpreter
  fxprof-cpu   fxprof's ProfilingInterpreter with the CPU timer (one run = one profiled run)
and prints, per variant, the median over repeats of the median call time, the ratio to the
GraphModule forward, and the added microseconds per node.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time

import torch
import torchvision
from torch import fx

import fxprof


def _median_call_ms(fn, calls: int) -> float:
    times = []
    for _ in range(calls):
        t0 = time.perf_counter_ns()
        fn()
        times.append((time.perf_counter_ns() - t0) / 1e6)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="resnet18")
    parser.add_argument("--size", type=int, default=64, help="image side (input 1x3xSxS)")
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--calls", type=int, default=5, help="calls per variant per repeat")
    parser.add_argument("--json", help="also write the figures here")
    args = parser.parse_args()

    torch.manual_seed(0)
    model = torchvision.models.get_model(args.model, weights=None).eval()
    x = torch.randn(1, 3, args.size, args.size)
    gm = fxprof.trace(model)
    nodes = len(gm.graph.nodes)
    plain = fx.Interpreter(gm)
    prof = fxprof.ProfilingInterpreter(gm)
    variants = {
        "eager": lambda: model(x),
        "graphmodule": lambda: gm(x),
        "interpreter": lambda: plain.run(x),
        "fxprof-cpu": lambda: prof.run(x),
    }
    per_variant: dict[str, list[float]] = {k: [] for k in variants}
    with torch.no_grad():
        for fn in variants.values():  # warm-up
            for _ in range(3):
                fn()
        for _ in range(args.repeats):
            for name, fn in variants.items():
                per_variant[name].append(_median_call_ms(fn, args.calls))
                prof.reset()

    base = statistics.median(per_variant["graphmodule"])
    interp = statistics.median(per_variant["interpreter"])
    rows = []
    for name, values in per_variant.items():
        med = statistics.median(values)
        rows.append({
            "variant": name,
            "median_ms": round(med, 4),
            "ratio_to_graphmodule": round(med / base, 3),
            "us_per_node_over_graphmodule": round((med - base) * 1000 / nodes, 2),
            "us_per_node_over_interpreter": round((med - interp) * 1000 / nodes, 2),
        })
    env = {
        "model": args.model, "input": list(x.shape), "nodes": nodes, "repeats": args.repeats,
        "calls": args.calls, "threads": torch.get_num_threads(), "torch": torch.__version__,
        "python": platform.python_version(), "machine": platform.machine(),
    }
    print(" ".join(f"{k}={v}" for k, v in env.items()))
    header = list(rows[0])
    print(" | ".join(header))
    for row in rows:
        print(" | ".join(str(row[h]) for h in header))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"env": env, "rows": rows}, f, indent=2)


if __name__ == "__main__":
    main()
