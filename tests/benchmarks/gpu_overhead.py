"""GPU overhead side by side: the model's own forward, its GraphModule, a plain fx.Interpreter,
fxprof (each timer) and torch.profiler, each in a fresh process (issue 39 item 5).

    python tests/benchmarks/gpu_overhead.py [--models resnet50,resnet18,bert] [--runs 30] [--json out.json]

On a CUDA machine: resnet50 bs32 fp16, resnet18 bs1 fp32, HF BERT-base-sized bs8 s128 fp16 (from a
config, no download), in under 3 minutes. On the CPU (no GPU here) it measures the same variants
at small sizes and says so in its first line. Every variant runs in its own process (a profiler
that ran once slows the plain forward of its process afterwards: FACTS.md, fifth round); figures
are the median wall per forward (synchronized on CUDA) and its ratio to the model's own.

Variants: ``model`` (the eager forward), ``graphmodule`` (the captured graph's generated code),
``interpreter`` (a plain ``torch.fx.Interpreter``), ``fxprof-<timer>`` (one ``fxprof.profile``:
the median profiled run, the profile's own fidelity ratio, and the whole profile's wall per
run), ``torch.profiler`` (CPU + CUDA activities around the plain forward).

It also prints the events a run records with two CUDA events a node against one a node boundary
and none for nodes that launch nothing (issue 39 item 3), counted on the CPU for each model.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from typing import Any

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))  # tests/: the stand-in event timer

ON_GPU_MODELS = ("resnet50", "resnet18", "bert")


def _build(name: str, cuda: bool, small: bool) -> tuple[Any, tuple]:
    import torch

    torch.manual_seed(0)
    device = "cuda" if cuda else "cpu"
    half = torch.float16 if cuda else torch.float32
    if name == "tiny":  # the smoke test's model: seconds on any machine
        from torch import nn

        model = nn.Sequential(nn.Conv2d(3, 8, 3), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 4))
        return model.eval().to(device, half), (torch.randn(1, 3, 16, 16, device=device, dtype=half),)
    if name == "bert":
        import transformers

        if cuda and not small:
            config = transformers.BertConfig(num_hidden_layers=12, hidden_size=768, num_attention_heads=12,
                                             intermediate_size=3072)
            batch, seq = 8, 128
        else:
            config = transformers.BertConfig(num_hidden_layers=2, hidden_size=128, num_attention_heads=2,
                                             intermediate_size=256, vocab_size=2000)
            batch, seq = 1, 32
        model = transformers.BertModel(config).eval().to(device, half)
        return model, (torch.randint(0, config.vocab_size, (batch, seq), device=device),)
    import torchvision

    model = torchvision.models.get_model(name, weights=None).eval().to(device, half)
    batch, size = ((32, 224) if name == "resnet50" else (1, 224)) if cuda and not small else (1, 64)
    return model, (torch.randn(batch, 3, size, size, device=device, dtype=half),)


def _graph(model: Any, inputs: tuple, interpreter: bool) -> Any:
    """The captured program as a callable: symbolic tracing where it works, else dynamo with a
    backend that runs the GraphModule (or an fx.Interpreter over it)."""
    import torch
    from torch import fx

    try:
        gm = fx.symbolic_trace(model)
        return fx.Interpreter(gm).run if interpreter else gm
    except Exception:
        backend = (lambda gm, ex: fx.Interpreter(gm).run) if interpreter else (lambda gm, ex: gm.forward)
        return torch.compile(model, backend=backend)


def child(variant: str, name: str, runs: int, small: bool) -> dict[str, Any]:
    """One variant in this (fresh) process: median wall per forward, ms."""
    import torch

    cuda = torch.cuda.is_available()
    model, inputs = _build(name, cuda, small)

    def timed(fn: Any) -> float:
        times = []
        for _ in range(3):
            fn()
        for _ in range(runs):
            if cuda:
                torch.cuda.synchronize()
            t0 = time.perf_counter_ns()
            fn()
            if cuda:
                torch.cuda.synchronize()
            times.append((time.perf_counter_ns() - t0) / 1e6)
        return statistics.median(times)

    out: dict[str, Any] = {"variant": variant, "model": name}
    with torch.no_grad():
        if variant == "model":
            out["ms"] = timed(lambda: model(*inputs))
        elif variant in ("graphmodule", "interpreter"):
            graph = _graph(model, inputs, variant == "interpreter")
            out["ms"] = timed(lambda: graph(*inputs))
        elif variant == "torch.profiler":
            from torch.profiler import ProfilerActivity, profile

            activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
            with profile(activities=activities):
                out["ms"] = timed(lambda: model(*inputs))
        elif variant.startswith("fxprof-"):
            import fxprof
            from fxprof.core.fidelity import fidelity

            timer = variant.split("-", 1)[1]
            t0 = time.perf_counter()
            prof = fxprof.profile(model, *inputs, timer=timer, iters=runs, peaks=None, anatomy=False, progress=False)
            wall = time.perf_counter() - t0
            found = fidelity(prof.meta, prof.kept_totals(), prof.df["median_ms"].tolist())
            out.update(ms=statistics.median(prof.kept_totals()), own_ms=found.own_ms if found else None,
                       fidelity=found.ratio if found else None, profile_ms_per_run=wall * 1000 / runs,
                       nodes=len(prof.df))
            if "kernel_median_ms" in prof.df.columns and prof.df["kernel_median_ms"].notna().any():
                out["kernel_ms"] = float(prof.df["kernel_median_ms"].sum())
        else:
            raise SystemExit(f"unknown variant {variant!r}")
    return out


#: an event's host cost, all in, on the H100/H200 hosts (../shared/FACTS.md, fifth round; issue 39)
EVENT_US = 4.6


def event_counts(name: str) -> dict[str, Any]:
    """The events a run records before and after one event per node boundary (issue 39 item 3),
    counted on the CPU with a stand-in event timer driving the real plan: the model's full
    architecture at a small input (node counts do not depend on the input's size). Also the
    anatomy pass's verdict: nodes that dispatched no aten op doing work."""
    import torch
    from standin_timer import StandInEventTimer  # tests/standin_timer.py

    import fxprof

    torch.manual_seed(0)
    if name == "bert":
        import transformers

        model = transformers.BertModel(transformers.BertConfig()).eval()  # BERT-base: 12 layers, 768 wide
        inputs: tuple = (torch.randint(0, 1000, (1, 16)),)
    elif name == "tiny":
        model, inputs = _build("tiny", False, True)
    else:
        import torchvision

        model = torchvision.models.get_model(name, weights=None).eval()
        inputs = (torch.randn(1, 3, 64, 64),)
    timer = StandInEventTimer()
    prof = fxprof.profile(model, *inputs, timer=timer, warmup=0, iters=1, memory=False, peaks=None, progress=False)
    df = prof.df
    nodes = len(df)
    unmarked = df.index[df["median_ms"] == 0]  # host clock marks: a node with a mark of its own never reads 0 ns
    ops = prof.anatomy["device_ops"].reindex(df.index)
    quiet = df.index[ops.fillna(0) == 0]
    return {"variant": "events", "model": name, "capture": prof.meta.get("capture"), "nodes": nodes,
            "no_event": len(unmarked), "anatomy_launch_free": len(quiet),
            "no_event_but_launched": len(set(unmarked) - set(quiet)),
            "launch_free_but_timed": len(set(quiet) - set(unmarked)),
            "before": 2 * nodes + 2, "after": timer.count}


def print_event_counts(rows: list[dict[str, Any]]) -> None:
    print(f"# events per run: before = 2 a node + the run's 2; after = one per boundary of a launching node + 1 "
          f"(counted on the CPU; host cost at {EVENT_US} us an event)")
    print(f"{'model':<10} {'capture':<9} {'nodes':>6} {'no event':>9} {'anatomy: no work':>17} {'events before':>14} "
          f"{'after':>6} {'host ms before':>15} {'after':>6}")
    for r in rows:
        print(f"{r['model']:<10} {str(r['capture']):<9} {r['nodes']:>6} {r['no_event']:>9} {r['anatomy_launch_free']:>17} "
              f"{r['before']:>14} {r['after']:>6} {r['before'] * EVENT_US / 1000:>15.2f} {r['after'] * EVENT_US / 1000:>6.2f}")
        if r["no_event_but_launched"] or r["launch_free_but_timed"]:
            print(f"#   {r['model']}: {r['no_event_but_launched']} node(s) without an event did device work; "
                  f"{r['launch_free_but_timed']} launch-free node(s) kept an event (reshape/flatten/contiguous: may copy)")


def variants(cuda: bool) -> list[str]:
    fxprof_timers = ["fxprof-cuda", "fxprof-kernel"] if cuda else ["fxprof-cpu"]
    return ["model", "graphmodule", "interpreter", *fxprof_timers, "torch.profiler"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default=",".join(ON_GPU_MODELS))
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--small", action="store_true", help="small sizes on the GPU too (a smoke run)")
    parser.add_argument("--json", default=None)
    parser.add_argument("--child", nargs=2, metavar=("VARIANT", "MODEL"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        found = event_counts(args.child[1]) if args.child[0] == "events" else child(args.child[0], args.child[1], args.runs, args.small)
        print(json.dumps(found))
        return
    import torch

    cuda = torch.cuda.is_available()
    where = torch.cuda.get_device_name(0) if cuda else "the CPU (no CUDA device: CPU sizes and timers)"
    print(f"# gpu_overhead: ran on {where}; torch {torch.__version__}; one fresh process per variant; "
          f"median wall per forward over {args.runs} runs")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([os.path.dirname(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__)))), os.environ.get("PYTHONPATH", "")])}
    rows = []
    counts = []
    began = time.perf_counter()
    for name in args.models.split(","):
        done = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", "events", name], capture_output=True,
                              text=True, env={**env, "CUDA_VISIBLE_DEVICES": ""}, timeout=600)
        if done.returncode == 0:
            counts.append(json.loads(done.stdout.strip().splitlines()[-1]))
        else:
            print(f"# events of {name}: failed: {' '.join(done.stderr.strip().splitlines()[-1:])}")
        base = None
        for variant in variants(cuda):
            cmd = [sys.executable, os.path.abspath(__file__), "--child", variant, name, "--runs", str(args.runs)]
            if args.small:
                cmd.append("--small")
            done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
            if done.returncode != 0:
                rows.append({"model": name, "variant": variant, "error": done.stderr.strip().splitlines()[-1:]})
                continue
            row = json.loads(done.stdout.strip().splitlines()[-1])
            if variant == "model":
                base = row["ms"]
            row["x_model"] = row["ms"] / base if base else None
            rows.append(row)
    print(f"{'model':<10} {'variant':<15} {'ms/forward':>11} {'x model':>8} {'fidelity':>9} {'profile ms/run':>15} {'kernels ms':>11}")
    for row in rows:
        if "error" in row:
            print(f"{row['model']:<10} {row['variant']:<15} failed: {' '.join(row['error'])}")
            continue

        def f(key: str, fmt: str) -> str:
            value = row.get(key)
            width = int(fmt.split(".")[0])
            return format(value, fmt) if isinstance(value, (int, float)) else "-".rjust(width)

        print(f"{row['model']:<10} {row['variant']:<15} {f('ms', '11.3f')} {f('x_model', '8.2f')} {f('fidelity', '9.2f')} "
              f"{f('profile_ms_per_run', '15.1f')} {f('kernel_ms', '11.3f')}")
    print_event_counts(counts)
    print(f"# {time.perf_counter() - began:.0f} s in all")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"device": where, "rows": rows, "events": counts}, fh, indent=1)


if __name__ == "__main__":
    main()
