"""A node's own time: does a profiled run look like the real run, and do node times add up?

    python tests/benchmarks/own_time.py [--threads 1] [--rounds 15] [--models a,b] [--json out.json]

Four parts, each in one process with its variants interleaved (every round runs each variant
in turn, so drifts of the machine hit all alike), figures are medians:

1. **chain**: a chain of cheap ops (adds and relus on a 1x8 tensor), per run: the GraphModule's
   own forward, a plain ``torch.fx.Interpreter``, the PyTorch FX tutorial's profiler
   (``time.time()`` around ``Interpreter.run_node``), ``torch.profiler`` (CPU) around the
   GraphModule, and fxprof (``ProfilingInterpreter.run``). Ratios to the GraphModule forward.
2. **depth**: the same ``nn.ReLU`` on a 1x8 tensor called directly (two clock reads around the
   call), as a ``call_module`` node one level deep and six levels deep.
3. **models**: per torchvision classification model at 1x3xSxS: the sum of fxprof's node
   medians over the eager model's median, and coverage (node time over run time).
4. **export**: the share of node time in ``get_attr`` nodes under ``capture="export"``.

Targets (issue 10): chain <= 1.5x the GraphModule and faster than fx.Interpreter; a cheap
module within 15% of itself one level deep at any depth and within 30% of the direct call;
sum of node medians / eager <= 1.10; get_attr <= 1% of node time under export.
"""

from __future__ import annotations

import argparse
import statistics
import time
from contextlib import nullcontext
from typing import Any, Callable

import torch
import torchvision
from common import env, print_table, write_json
from torch import fx, nn

import fxprof
from fxprof.measure.timing.timers import CpuTimer

DEFAULT_MODELS = ("mobilenet_v3_small", "mnasnet0_5", "shufflenet_v2_x0_5", "resnet18", "squeezenet1_0",
                  "efficientnet_b0", "regnet_y_400mf", "vit_b_16")


class TutorialProfiler(fx.Interpreter):
    """The profiler of the PyTorch FX tutorial ("Profiling with FX"): time.time() around
    ``run_node``, a list of runtimes per node."""

    def __init__(self, gm: fx.GraphModule):
        super().__init__(gm)
        self.runtimes_sec: dict[fx.Node, list[float]] = {}

    def run_node(self, n: fx.Node) -> Any:
        t0 = time.time()
        result = super().run_node(n)
        self.runtimes_sec.setdefault(n, []).append(time.time() - t0)
        return result


def _rounds(variants: dict[str, tuple[Callable[[], Any], Callable[[], Any]]], rounds: int, calls: int,
            ) -> dict[str, list[float]]:
    """Per variant ``(context factory, call)``: ``rounds`` medians of ``calls`` timed calls
    (ms), variants interleaved; the context (a profiler session) is entered outside the timing."""
    out: dict[str, list[float]] = {k: [] for k in variants}
    for make_context, fn in variants.values():  # warm-up
        with make_context():
            for _ in range(3):
                fn()
    for _ in range(rounds):
        for name, (make_context, fn) in variants.items():
            times = []
            with make_context():
                for _ in range(calls):
                    t0 = time.perf_counter_ns()
                    fn()
                    times.append((time.perf_counter_ns() - t0) / 1e6)
            out[name].append(statistics.median(times))
    return out


def _torch_profiler():
    from torch.profiler import ProfilerActivity, profile

    return profile(activities=[ProfilerActivity.CPU])


def chain(length: int, rounds: int, calls: int) -> list[dict]:
    graph = fx.Graph()
    value = graph.placeholder("x")
    for i in range(length - 2):
        value = graph.call_function(torch.relu if i % 2 else torch.add, (value,) if i % 2 else (value, 1.0))
    graph.output(value)
    gm = fx.GraphModule(nn.Module(), graph)
    nodes = len(gm.graph.nodes)
    x = torch.zeros(1, 8)
    plain, tutorial = fx.Interpreter(gm), TutorialProfiler(gm)
    prof = fxprof.ProfilingInterpreter(gm, CpuTimer())

    def fxprof_run() -> None:
        prof.run(x)
        if prof.recording.runs >= 50:
            prof.reset()

    def tutorial_run() -> None:
        tutorial.run(x)
        tutorial.runtimes_sec.clear()

    variants = {
        "graphmodule": (nullcontext, lambda: gm(x)),
        "fx.Interpreter": (nullcontext, lambda: plain.run(x)),
        "FX tutorial profiler": (nullcontext, tutorial_run),
        "torch.profiler + graphmodule": (_torch_profiler, lambda: gm(x)),
        "fxprof": (nullcontext, fxprof_run),
    }
    with torch.no_grad():
        results = _rounds(variants, rounds, calls)
    base = statistics.median(results["graphmodule"])
    return [{"variant": k, "nodes": nodes, "median_ms": statistics.median(v),
             "ratio_to_graphmodule": statistics.median(v) / base,
             "us_per_node_over_graphmodule": (statistics.median(v) - base) * 1000 / nodes}
            for k, v in results.items()]


class _Nest(nn.Module):
    def __init__(self, inner: nn.Module):
        super().__init__()
        self.inner = inner

    def forward(self, x):
        return self.inner(x)


class _Depths(nn.Module):
    def __init__(self, deep: int):
        super().__init__()
        self.shallow = nn.ReLU()
        inner: nn.Module = nn.ReLU()
        for _ in range(deep - 1):
            inner = _Nest(inner)
        self.deep = inner

    def forward(self, x):
        return self.deep(self.shallow(x))


def depth(rounds: int, deep: int = 6) -> list[dict]:
    model = _Depths(deep)
    gm = fxprof.trace(model)
    leaves = [n for n in gm.graph.nodes if n.op == "call_module"]
    shallow = next(n.name for n in leaves if n.target == "shallow")
    deep_node = next(n.name for n in leaves if n.target != "shallow")
    relu, x = nn.ReLU(), torch.randn(1, 8)
    prof = fxprof.ProfilingInterpreter(gm, CpuTimer())
    direct: list[float] = []
    clock = time.perf_counter_ns
    with torch.no_grad():
        for _ in range(20):
            prof.run(x), relu(x)
        prof.reset()
        for _ in range(rounds * 40):
            t0 = clock()
            relu(x)
            t1 = clock()
            direct.append((t1 - t0) / 1e6)
            prof.run(x)
    rec = prof.recording
    times: dict[str, list[float]] = {}
    for name, t in zip(rec.node, rec.time_ms):
        times.setdefault(name, []).append(t)
    d = statistics.median(direct)
    one = statistics.median(times[shallow])
    rows = [{"call": "nn.ReLU called directly", "median_us": d * 1000, "vs_direct": 1.0, "vs_depth_1": d / one}]
    for label, node in (("call_module node, depth 1", shallow), (f"call_module node, depth {deep}", deep_node)):
        med = statistics.median(times[node])
        rows.append({"call": label, "median_us": med * 1000, "vs_direct": med / d, "vs_depth_1": med / one})
    return rows


def build(name: str, size: int) -> tuple[nn.Module, torch.Tensor]:
    torch.manual_seed(0)
    kwargs = {"image_size": size} if name.startswith("vit") else {}
    return torchvision.models.get_model(name, weights=None, **kwargs).eval(), torch.randn(1, 3, size, size)


def models(names: list[str], size: int, rounds: int, calls: int) -> list[dict]:
    rows = []
    for name in names:
        model, x = build(name, 224 if name.startswith("vit") and size % 16 else size)
        size_used = x.shape[-1]
        gm = fxprof.trace(model)
        prof = fxprof.ProfilingInterpreter(gm, CpuTimer())
        variants = {"eager": (nullcontext, lambda: model(x)), "graphmodule": (nullcontext, lambda: gm(x)),
                    "fxprof": (nullcontext, lambda: prof.run(x))}
        with torch.no_grad():
            results = _rounds(variants, rounds, calls)
        rec = prof.recording  # every profiled run of the rounds (and the warm-up's, dropped below)
        keep = [r >= 3 for r in rec.run]
        samples: dict[str, list[float]] = {}
        for k, name_, t in zip(keep, rec.node, rec.time_ms):
            if k:
                samples.setdefault(name_, []).append(t)
        node_medians = sum(statistics.median(v) for v in samples.values())
        node_means = sum(statistics.fmean(v) for v in samples.values())
        runs = rec.run_total_ms[3:]
        eager = statistics.median(results["eager"])
        rows.append({
            "model": name, "input": f"1x3x{size_used}x{size_used}", "nodes": len(gm.graph.nodes),
            "eager_ms": eager, "graphmodule_ms": statistics.median(results["graphmodule"]),
            "fxprof_run_ms": statistics.median(results["fxprof"]),
            "sum_node_medians_ms": node_medians, "sum_over_eager": node_medians / eager,
            "coverage": node_means / statistics.fmean(runs),
        })
    return rows


def export_get_attr(names: list[str], size: int, iters: int) -> list[dict]:
    rows = []
    for name in names:
        model, x = build(name, 224 if name.startswith("vit") and size % 16 else size)
        prof = fxprof.profile(model, x, capture="export", warmup=3, iters=iters, anatomy=False)
        df = prof.df
        by_op = df.groupby("op")["pct"].sum()
        rows.append({"model": name, "input": "1x3x%dx%d" % tuple(x.shape[-2:]), "get_attr_nodes": int((df["op"] == "get_attr").sum()),
                     "get_attr_pct": float(by_op.get("get_attr", 0.0)), "placeholder_pct": float(by_op.get("placeholder", 0.0)),
                     "coverage": prof.coverage})
    return rows


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--calls", type=int, default=10)
    parser.add_argument("--chain", type=int, default=202)
    parser.add_argument("--models", default=",".join(DEFAULT_MODELS))
    parser.add_argument("--size", type=int, default=96)
    parser.add_argument("--export-models", default="resnet18,vit_b_16")
    parser.add_argument("--json")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    payload: dict[str, Any] = {"env": env("cpu"), "args": vars(args)}
    print(payload["env"])
    payload["chain"] = chain(args.chain, args.rounds, args.calls * 2)
    print_table(f"a chain of {args.chain} cheap nodes, per run", payload["chain"])
    payload["depth"] = depth(args.rounds)
    print_table("one cheap module (nn.ReLU, 1x8) directly and as a node", payload["depth"])
    names = [m for m in args.models.split(",") if m]
    payload["models"] = models(names, args.size, args.rounds, args.calls) if names else []
    print_table(f"node times against the model's own time ({args.threads} thread(s))", payload["models"])
    export_names = [m for m in args.export_models.split(",") if m]
    payload["export"] = export_get_attr(export_names, args.size, args.rounds * 2) if export_names else []
    print_table("parameter reads under capture='export'", payload["export"])
    write_json(args.json, payload)
    return payload


if __name__ == "__main__":
    main()
