"""Graph breaks and overhead rows against the compiled model's own run (issue 33):

    python tests/benchmarks/compiled_breaks.py [--models print,item,branch,shape,nobreak,bert] [--iters 20] [--threads 1]
        [--rounds 1] [--json out.json]

Per model, ``fxprof.profile(model, x, compile=True)``: the compiled model's own median run
(unprofiled, host clock), the profiled run's median, the rows' summed medians (kernels, graph
breaks, overhead, the wrapper's call) over each, the kernels alone over the own run, the
breaks' summed medians and the profiler's own cost taken out of the rows (median a run). The
issue's target: rows within 0.85-1.10 of the own run. ``--rounds N`` profiles every model N
times, round-robin (a drift of a loaded machine reaches every model alike), and prints each
figure's median over the rounds (``rows_over_own_min``/``_max``: its range). Models: two
Linears (16 wide, batch 4) with a ``print`` / ``.item()`` branch / data-dependent branch /
``x[x > 0]`` between them, the same without a break, and HF BERT from a config (2 layers,
hidden 64, 32 tokens).
"""

from __future__ import annotations

import argparse
import io
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402
from common import env, print_table, write_json  # noqa: E402
from torch import nn  # noqa: E402

import fxprof  # noqa: E402
from fxprof.core.compiled import own_run_ms  # noqa: E402

SINK = io.StringIO()


class Two(nn.Module):
    def __init__(self, how: str):
        super().__init__()
        self.how = how
        self.a, self.b = nn.Linear(16, 16), nn.Linear(16, 16)

    def forward(self, x):
        x = self.a(x)
        if self.how == "print":
            print("between", file=SINK)
        elif self.how == "item":
            if x.sum().item() > -1e9:
                x = x * 2
        elif self.how == "branch":
            if x.sum() > -1e9:
                x = x * 2
        elif self.how == "shape":
            return self.b(x) + x[x > 0].sum()
        return self.b(x)


def model_for(name: str):
    torch.manual_seed(0)
    if name == "bert":
        import transformers

        config = transformers.BertConfig(num_hidden_layers=2, hidden_size=64, num_attention_heads=4,
                                         intermediate_size=128, vocab_size=1000)
        return transformers.BertModel(config).eval(), torch.randint(0, 1000, (1, 32))
    return Two(name).eval(), torch.randn(4, 16)


def measure(name: str, iters: int) -> dict:
    model, x = model_for(name)
    torch._dynamo.reset()
    prof = fxprof.profile(model, x, compile=True, warmup=3, iters=iters)
    df = prof.df
    own = own_run_ms(prof.meta)[0]
    rows = float(df["median_ms"].sum())
    kernels = float(df.loc[df["op"].isin(("kernel", "extern", "unmatched")), "median_ms"].sum())
    breaks = float(df.loc[df["op"] == "graph_break", "median_ms"].sum())
    profiled = float(prof.runs.loc[~prof.runs["outlier"], "total_ms"].median())
    return {"model": name, "graphs": prof.meta["compiled"]["graphs"], "breaks": len(prof.meta["compiled"]["breaks"]),
            "own_ms": own, "profiled_ms": profiled, "rows_ms": rows, "rows_over_own": rows / own,
            "rows_over_profiled": rows / profiled, "kernels_over_own": kernels / own, "breaks_ms": breaks,
            "profiler_ms": (prof.meta["compiled"].get("profiler_cost") or {}).get("median_ms"),
            # how much more an event of the compiled program's Python cost in this model's runs than in the
            # probes (measured, then held to 1..MAX_SCALE: fxprof.measure.compiled.profiler_cost.in_situ)
            "scale": (prof.meta["compiled"].get("profiler_cost") or {}).get("scale", 1.0),
            "measured_scale": (prof.meta["compiled"].get("profiler_cost") or {}).get("measured_scale")}


def _median_row(measured: list[dict]) -> dict:
    """One model's figures over several rounds: the median of each, and the range of rows / own."""
    import statistics

    out = {}
    for key, value in measured[0].items():
        values = [m[key] for m in measured if m.get(key) is not None]
        out[key] = statistics.median(values) if isinstance(value, (int, float)) and values else value
    if len(measured) > 1:
        ratios = [m["rows_over_own"] for m in measured]
        out.update(rounds=len(measured), rows_over_own_min=min(ratios), rows_over_own_max=max(ratios))
    return out


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default="print,item,branch,shape,nobreak,bert")
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--json")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    names = args.models.split(",")
    rounds = [[measure(name, args.iters) for name in names] for _ in range(max(args.rounds, 1))]
    rows = [_median_row([r[i] for r in rounds]) for i in range(len(names))]
    print_table("compiled mode: rows (kernels, graph breaks, overhead) against the compiled model's own run", rows)
    payload = {"compiled_breaks": rows, "env": env("cpu")}
    write_json(args.json, payload)
    return payload


if __name__ == "__main__":
    main()
