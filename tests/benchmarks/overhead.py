"""Overhead: eager vs GraphModule vs fx.Interpreter vs fxprof with each timer.

    python tests/benchmarks/overhead.py [--models resnet18,...] [--sizes 64,128] [--device cpu]

Per model and input size, in one process and interleaved: the median over repeats of the
median call time of each variant, its ratio to the GraphModule's forward, and the added
microseconds per node over the GraphModule and over a plain torch.fx.Interpreter. An fxprof
variant is one profiled run (ProfilingInterpreter.run: every node timed, marks converted).
"""

from __future__ import annotations

import argparse
import statistics

import torch
from common import MODELS, build, env, interleaved, print_table, write_json
from torch import fx

import fxprof
from fxprof.measure.timing.timers import CpuTimer, CudaEventTimer, SyncTimer


def measure(name: str, size: int, device: str, repeats: int, calls: int) -> list[dict]:
    model, x = build(name, size, device)
    gm = fxprof.trace(model)
    nodes = len(gm.graph.nodes)
    plain = fx.Interpreter(gm)
    timers = {"fxprof-cpu": CpuTimer()}
    if device.startswith("cuda"):
        timers = {"fxprof-cuda": CudaEventTimer(device), "fxprof-sync": SyncTimer(device), "fxprof-cpu": CpuTimer()}
    profiled = {k: fxprof.ProfilingInterpreter(gm, t) for k, t in timers.items()}
    variants = {"eager": lambda: model(x), "graphmodule": lambda: gm(x), "interpreter": lambda: plain.run(x)}
    variants.update({k: (lambda p=p: p.run(x)) for k, p in profiled.items()})
    with torch.no_grad():
        results = interleaved(variants, repeats, calls, device, after=lambda: [p.reset() for p in profiled.values()])
    base = statistics.median(results["graphmodule"])
    interp = statistics.median(results["interpreter"])
    rows = []
    for variant, values in results.items():
        med = statistics.median(values)
        rows.append({
            "model": name, "input": f"1x3x{size}x{size}", "nodes": nodes, "variant": variant,
            "median_ms": med, "ratio_to_gm": med / base,
            "us_per_node_over_gm": (med - base) * 1000 / nodes,
            "us_per_node_over_interp": (med - interp) * 1000 / nodes,
        })
    return rows


def chain_rows(length: int, device: str, repeats: int, calls: int) -> list[dict]:
    """fxprof's own cost, free of model noise: a chain of ``length`` adds on a 1-element tensor,
    so each node costs only a few microseconds and the difference between variants is
    interpreter and timer work."""
    import operator

    graph = fx.Graph()
    value = graph.placeholder("x")
    for _ in range(length):
        value = graph.call_function(operator.add, (value, 1))
    graph.output(value)
    gm = fx.GraphModule(torch.nn.Module(), graph)
    nodes = len(gm.graph.nodes)
    x = torch.zeros(1, device=device)
    plain = fx.Interpreter(gm)
    prof = fxprof.ProfilingInterpreter(gm, CudaEventTimer(device) if device.startswith("cuda") else CpuTimer())
    variants = {"graphmodule": lambda: gm(x), "interpreter": lambda: plain.run(x), "fxprof": lambda: prof.run(x)}
    with torch.no_grad():
        results = interleaved(variants, repeats, calls, device, after=prof.reset)
    base, interp = statistics.median(results["graphmodule"]), statistics.median(results["interpreter"])
    return [{
        "variant": v, "nodes": nodes, "median_ms": statistics.median(r),
        "us_per_node_over_gm": (statistics.median(r) - base) * 1000 / nodes,
        "us_per_node_over_interp": (statistics.median(r) - interp) * 1000 / nodes,
    } for v, r in results.items()]


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--sizes", default="64,128", help="small and medium image sides")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--repeats", type=int, default=11)
    parser.add_argument("--calls", type=int, default=5)
    parser.add_argument("--chain", type=int, default=300, help="length of the cheap-node chain (0: skip)")
    parser.add_argument("--json")
    args = parser.parse_args(argv)
    chain = chain_rows(args.chain, args.device, max(args.repeats, 15), 20) if args.chain else []
    rows = []
    for name in args.models.split(","):
        for size in (int(s) for s in args.sizes.split(",")):
            rows += measure(name, size, args.device, args.repeats, args.calls)
    print(env(args.device))
    if chain:
        print_table(f"fxprof's own cost per node: a chain of {args.chain} cheap adds", chain)
    print_table("overhead", rows)
    payload = {"env": env(args.device), "overhead": rows, "chain": chain}
    write_json(args.json, payload)
    return payload


if __name__ == "__main__":
    main()
