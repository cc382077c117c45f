"""Verdicts of fxprof.compare on real profiles: A/A pairs, and one node made 2x slower.

    python tests/benchmarks/verdicts.py [--models resnet18] [--size 64] [--pairs 5] [--iters 20]

A/A: a model is profiled twice back to back, in one process, ``--pairs`` times; each pair is
compared and the share of nodes whose verdict is not "same" is reported, at fxprof's minimum
effect and, to show what the minimum effect buys, with significance alone (min_effect=0). The
whole run's ratio and its 95% bootstrap interval are reported per pair too.

2x slower: the same model with one convolution (``layer3.0.conv1`` in resnets, else the
heaviest conv by median time) wrapped so that it runs twice per call (a leaf module: still one
node, about twice its time); baseline and slowed profiles are taken back to back and compared.
"""

from __future__ import annotations

import argparse

import numpy as np
import torch
from common import build, env, print_table, write_json
from torch import nn

import fxprof
from fxprof.core.compare import MIN_EFFECT


class Twice(nn.Module):
    """Runs the wrapped module twice (the second result is returned): one node, double cost."""

    def __init__(self, inner: nn.Module):
        super().__init__()
        self.inner = inner

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.inner(x)
        return self.inner(x)


def _flagged(diff) -> float:
    both = diff[diff["status"] == "both"]
    return float((both["verdict"].isin(["faster", "slower"])).mean() * 100)


def _compare(a, b, **kw):
    return fxprof.compare(a, b, warn=False, **kw)  # the same model: nothing to warn about but its name


def aa(name: str, size: int, pairs: int, iters: int, device: str) -> list[dict]:
    model, x = build(name, size, device)
    rows = []
    for i in range(pairs):
        a = fxprof.profile(model, x, warmup=3, iters=iters, anatomy=False, memory=False)
        b = fxprof.profile(model, x, warmup=3, iters=iters, anatomy=False, memory=False)
        diff = _compare(a, b)
        sig_only = _compare(a, b, min_effect=0.0)
        run = diff.attrs["run_ratio"]
        rows.append({
            "model": name, "pair": i, "nodes": int((diff["status"] == "both").sum()),
            "flagged_pct": _flagged(diff), "flagged_sig_only_pct": _flagged(sig_only),
            "p_lt_0.05_raw_pct": float((diff["p_value"] < 0.05).mean() * 100),
            "run_ratio": run["ratio"], "run_low": run["low"], "run_high": run["high"],
            "run_outside_interval": not (run["low"] <= 1.0 <= run["high"]),
            "outlier_runs": len(a.outlier_runs) + len(b.outlier_runs),
        })
    return rows


def slowed(name: str, size: int, iters: int, device: str) -> dict:
    model, x = build(name, size, device)
    base = fxprof.profile(model, x, warmup=3, iters=iters, anatomy=False, memory=False)
    convs = base.df[base.df["kind"] == "conv2d"]
    target = "layer3.0.conv1" if "layer3_0_conv1" in convs.index else str(convs["median_ms"].idxmax()).replace("_", ".")
    parent_name, _, leaf = target.rpartition(".")
    parent = model.get_submodule(parent_name)
    original = getattr(parent, leaf)
    setattr(parent, leaf, Twice(original))
    try:
        slow = fxprof.profile(model, x, warmup=3, iters=iters, anatomy=False, memory=False, leaf_modules=[Twice])
    finally:
        setattr(parent, leaf, original)
    diff = _compare(base, slow)
    node = target.replace(".", "_")
    others = diff[(diff["status"] == "both") & (diff.index != node)]
    return {
        "model": name, "node": node, "ratio": float(diff.loc[node, "ratio"]), "p_value": float(diff.loc[node, "p_value"]),
        "verdict": diff.loc[node, "verdict"],
        "others_flagged_pct": float(others["verdict"].isin(["faster", "slower"]).mean() * 100),
    }


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default="resnet18")
    parser.add_argument("--size", type=int, default=64)
    parser.add_argument("--pairs", type=int, default=5)
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--json")
    args = parser.parse_args(argv)
    names = args.models.split(",")
    aa_rows = [row for n in names for row in aa(n, args.size, args.pairs, args.iters, args.device)]
    slow_rows = [slowed(n, args.size, args.iters, args.device) for n in names]
    flagged = [r["flagged_pct"] for r in aa_rows]
    summary = [{"min_effect": MIN_EFFECT, "pairs": len(aa_rows), "flagged_median_pct": float(np.median(flagged)),
                "flagged_max_pct": float(np.max(flagged)),
                "sig_only_median_pct": float(np.median([r["flagged_sig_only_pct"] for r in aa_rows]))}]
    print(env(args.device))
    print_table(f"A/A: two profiles back to back, 1x3x{args.size}x{args.size}, {args.iters} runs each", aa_rows)
    print_table("A/A summary (share of nodes flagged faster or slower)", summary)
    print_table("one node made 2x slower", slow_rows)
    payload = {"env": env(args.device), "aa": aa_rows, "aa_summary": summary, "slowed": slow_rows}
    write_json(args.json, payload)
    return payload


if __name__ == "__main__":
    main()
