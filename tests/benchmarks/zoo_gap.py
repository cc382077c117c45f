"""Where does invariant (d) fall short? (issue 31, item 4). Per model, one process, interleaved:

- ``own``: the eager model's call, unprofiled;
- ``graphs``: the same call through the graph(s) fxprof captures, run as plain GraphModules
  (symbolic: fxprof.trace's GraphModule; dynamo: ``torch.compile`` with a backend returning
  ``gm.forward``), with the time spent *inside* the graphs summed per call (``in_graphs``);
  ``own - in_graphs`` is what the graphs do not contain (the model's Python between dynamo's
  graphs, dynamo's guards and frame entry);
- ``interp``: the same graphs run by an untimed ``torch.fx.Interpreter`` (``in_interp``: time
  inside them): ``in_interp - in_graphs`` is the interpreter's own cost between nodes;
- then ``fxprof.profile`` before and after the interleaved block: its median run (``profiled``)
  and the median per-run sum of its rows (``rows``).

    PYTHONPATH=$PWD python tests/benchmarks/zoo_gap.py --models mobilenet_v3_small,hf_bert,hf_gpt2
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import warnings
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import torch  # noqa: E402
import zoo  # noqa: E402
from torch import fx  # noqa: E402
from zoo_models import ZOO  # noqa: E402

import fxprof  # noqa: E402
from fxprof.measure.timing.timers import CpuTimer  # noqa: E402

_STATE = {"interp": False, "inside_ns": 0}
#: the clock of every figure: this thread's CPU time (``--clock thread``, default) leaves out the
#: time the thread waits for a core, which on a loaded machine is most of a wall-clock figure;
#: with one intra-op thread all of the model's work runs on this thread
CLOCK = {"ns": time.thread_time_ns}


class ThreadClockTimer(CpuTimer):
    """fxprof's CPU timer on this thread's CPU clock (marks from ``time.thread_time_ns``)."""

    name = "cpu"

    def __init__(self) -> None:
        self.mark = self.host_ns = CLOCK["ns"]  # node marks and run totals on the one clock


def _backend(gm: fx.GraphModule, example_inputs: list):
    interp = fx.Interpreter(gm)

    def call(*args):
        t0 = CLOCK["ns"]()
        try:
            return interp.run(*args) if _STATE["interp"] else gm.forward(*args)
        finally:
            _STATE["inside_ns"] += CLOCK["ns"]() - t0

    return call


def gap(name: str, repeats: int, calls: int, iters: int) -> dict[str, float]:
    spec = ZOO[name]
    model, args, kwargs = spec.build()
    with zoo.quiet(), torch.no_grad():
        p0 = fxprof.profile(model, *args, warmup=3, iters=iters, model_kwargs=kwargs, peaks=None, anatomy=False,
                            timer=ThreadClockTimer())
        capture = p0.meta.get("capture")
        if capture == "symbolic":
            gm = fxprof.trace(model)
            interp = fx.Interpreter(gm)

            def graphs():
                t0 = CLOCK["ns"]()
                gm(*args, **kwargs)
                _STATE["inside_ns"] += CLOCK["ns"]() - t0

            def interpreted():
                t0 = CLOCK["ns"]()
                interp.run(*args, *kwargs.values())
                _STATE["inside_ns"] += CLOCK["ns"]() - t0
        else:
            torch._dynamo.reset()
            compiled = torch.compile(model, backend=_backend)

            def graphs():
                _STATE["interp"] = False
                compiled(*args, **kwargs)

            def interpreted():
                _STATE["interp"] = True
                compiled(*args, **kwargs)

        variants = {"own": lambda: model(*args, **kwargs), "graphs": graphs, "interp": interpreted}
        for fn in variants.values():
            for _ in range(3):
                fn()
        walls: dict[str, list[float]] = {k: [] for k in variants}
        inside: dict[str, list[float]] = {k: [] for k in variants}
        for _ in range(repeats):
            for key, fn in variants.items():
                w, i = [], []
                for _ in range(calls):
                    _STATE["inside_ns"] = 0
                    t0 = CLOCK["ns"]()
                    fn()
                    w.append((CLOCK["ns"]() - t0) / 1e6)
                    i.append(_STATE["inside_ns"] / 1e6)
                walls[key].append(statistics.median(w))
                inside[key].append(statistics.median(i))
        p1 = fxprof.profile(model, *args, warmup=3, iters=iters, model_kwargs=kwargs, peaks=None, anatomy=False,
                            timer=ThreadClockTimer())
        torch._dynamo.reset()
    med = statistics.median
    out = {
        "own": med(walls["own"]), "graphs_wall": med(walls["graphs"]), "in_graphs": med(inside["graphs"]),
        "interp_wall": med(walls["interp"]), "in_interp": med(inside["interp"]),
        "profiled": med(list(p0.total_ms) + list(p1.total_ms)),
        "rows": med([zoo.rows_per_run_ms(p0), zoo.rows_per_run_ms(p1)]),
        "nodes": len(p0.df), "capture": capture,
    }
    return out


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--models", default="mobilenet_v3_small,hf_bert,hf_gpt2")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--calls", type=int, default=10)
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--clock", choices=["thread", "wall"], default="thread")
    opts = parser.parse_args()
    if opts.clock == "wall":
        CLOCK["ns"] = time.perf_counter_ns
    torch.set_num_threads(opts.threads)
    warnings.simplefilter("ignore")
    print("| model | capture | nodes | own | graphs: wall / inside | fx.Interpreter: wall / inside | fxprof run | fxprof rows "
          "| rows / own | Python dynamo leaves out (own - graphs wall) | outside the graphs (graphs wall - inside) "
          "| fx.Interpreter between nodes | fxprof between nodes (run - rows - outside) |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for name in opts.models.split(","):
        r = gap(name, opts.repeats, opts.calls, opts.iters)
        own = r["own"]
        left_out = own - r["graphs_wall"]
        outside = r["graphs_wall"] - r["in_graphs"] if r["capture"] != "symbolic" else 0.0
        interp = r["in_interp"] - r["in_graphs"]
        ours = r["profiled"] - r["rows"] - outside
        pct = lambda v: f"{v:.2f} ({v / own:.0%})"  # noqa: E731
        print(f"| {name} | {r['capture']} | {r['nodes']} | {own:.2f} | {r['graphs_wall']:.2f} / {r['in_graphs']:.2f} | "
              f"{r['interp_wall']:.2f} / {r['in_interp']:.2f} | {r['profiled']:.2f} | {r['rows']:.2f} | {r['rows'] / own:.2f} | "
              f"{pct(left_out)} | {pct(outside)} | {pct(interp)} | {pct(ours)} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
