"""Agreement with torch.profiler, node by node.

    python tests/benchmarks/agreement.py [--models ...] [--size 64] [--device cpu|cuda]

fxprof's per-node medians (cpu timer; on the GPU, cuda event time) against the same nodes'
times from torch.profiler: on the CPU, the CPU time of a record_function range around each
node; on the GPU, the summed CUDA kernel time launched inside the range. The two come from
separate runs of the same graph that alternate in rounds (fxprof's runs are never under the
profiler).
Per model: median relative error over all nodes and over the hot nodes (>= 1% of the time),
time-weighted error (sum |a-b| / sum b), and Spearman rank correlation over nodes. On the CPU a
profiler range also holds its own enter/exit cost; that floor is estimated from the nodes that
do nothing (placeholders, outputs: profiler time minus fxprof time) and the hot-node and
time-weighted errors are also given after subtracting it ("corrected").

On a GPU the figures are split by fxprof's ``bound`` verdict (a short ``timer="cuda"`` profile of
the same model): on device-bound nodes event time and kernel time measure the same thing and
must agree; on launch-bound nodes the event interval holds the GPU's idle wait for the host
by design, so their "error" (490% on an H100, issue 40) is the launch cost, not a disagreement.
"""

from __future__ import annotations

import argparse
from collections import defaultdict

import numpy as np
import pandas as pd
import torch
from common import MODELS, build, env, print_table, spearman, write_json
from torch.profiler import ProfilerActivity

import fxprof
from fxprof.measure.capture.interpreter import ProfilingInterpreter
from fxprof.measure.device.bridge import times_from_events
from fxprof.measure.timing.recorder import Recorder
from fxprof.measure.timing.timers import CpuTimer, CudaEventTimer


def pair(name: str, size: int, iters: int, device: str, rounds: int = 4) -> tuple[pd.DataFrame, list[str]]:
    """Per node: fxprof's median (cpu timer, or cuda events on a GPU) and the profiler's median
    (the range's CPU time, or the kernel time launched inside it on a GPU), from two
    interpreters over the same graph that alternate in ``rounds``: fxprof's runs are never
    under the profiler, and machine drift hits both alike."""
    model, x = build(name, size, device)
    gm = fxprof.trace(model)
    cuda = device.startswith("cuda")
    timer = CudaEventTimer(device) if cuda else CpuTimer()
    plain = ProfilingInterpreter(gm, recorder=Recorder(timer))
    ranged = ProfilingInterpreter(gm, recorder=Recorder(timer, node_ranges=True))
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    per_round = max(1, iters // rounds)
    theirs: dict[str, list[float]] = defaultdict(list)
    with torch.no_grad():
        for _ in range(3):
            plain.run(x)
            ranged.run(x)
        plain.reset()
        for _ in range(rounds):
            for _ in range(per_round):
                plain.run(x)
            with torch.profiler.profile(activities=activities) as prof:
                for _ in range(per_round):
                    ranged.run(x)
            for node, values in times_from_events(prof.events()).items():
                theirs[node] += [dev if cuda else cpu for cpu, dev in values]
    rec = plain.recording
    ours = pd.DataFrame({"node": rec.node, "ms": rec.time_ms}).groupby("node")["ms"].median()
    profiler = pd.Series({k: float(np.median(v)) for k, v in theirs.items()})
    # on the CPU a range holds its own enter/exit cost; kernel time (CUPTI) has no such floor
    trivial = [] if cuda else [n.name for n in gm.graph.nodes if n.op in ("placeholder", "output")]
    return pd.concat([ours, profiler], axis=1, keys=["fxprof_ms", "profiler_ms"]).dropna(), trivial


def bound_of(name: str, size: int, device: str) -> pd.Series:
    """fxprof's ``bound`` verdict per node ("device", "launch", "sync" or ""), from a short
    profile with the cuda event timer."""
    model, x = build(name, size, device)
    return fxprof.profile(model, x, warmup=3, iters=10, timer="cuda").df["bound"]


def summarize(name: str, pair: pd.DataFrame, trivial: list[str]) -> dict:
    pair = pair[pair["profiler_ms"] > 0]
    rel = (pair["fxprof_ms"] - pair["profiler_ms"]) / pair["profiler_ms"]
    share = pair["profiler_ms"] / pair["profiler_ms"].sum()
    hot = share >= 0.01
    floor = float((pair["profiler_ms"] - pair["fxprof_ms"]).reindex(trivial).dropna().median()) if trivial else 0.0
    floor = 0.0 if np.isnan(floor) else floor
    corrected = (pair["profiler_ms"] - floor).clip(lower=1e-9)
    rel_c = (pair["fxprof_ms"] - corrected) / corrected
    return {
        "model": name, "nodes": len(pair),
        "median_rel_err_all_pct": float(rel.median() * 100),
        "median_rel_err_hot_pct": float(rel[hot].median() * 100), "hot_nodes": int(hot.sum()),
        "time_weighted_err_pct": float((pair["fxprof_ms"] - pair["profiler_ms"]).abs().sum() / pair["profiler_ms"].sum() * 100),
        "range_floor_us": floor * 1000,
        "median_rel_err_hot_corrected_pct": float(rel_c[hot].median() * 100),
        "time_weighted_err_corrected_pct": float((pair["fxprof_ms"] - corrected).abs().sum() / corrected.sum() * 100),
        "spearman": spearman(pair["fxprof_ms"], pair["profiler_ms"]),
    }


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--size", type=int, default=64)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--json")
    args = parser.parse_args(argv)
    rows = []
    for name in args.models.split(","):
        table, trivial = pair(name, args.size, args.iters, args.device)
        rows.append(summarize(name, table, trivial))
        if args.device.startswith("cuda"):
            bound = bound_of(name, args.size, args.device).reindex(table.index).fillna("")
            for verdict in ("device", "launch"):
                part = table[bound == verdict]
                if len(part):
                    rows.append(summarize(f"{name} [{verdict}-bound]", part, trivial))
    what = "profiler kernel time (CUPTI) vs fxprof cuda event time" if args.device.startswith("cuda") else "profiler range CPU time vs fxprof cpu timer"
    print(env(args.device))
    print_table(f"agreement with torch.profiler: {what}, 1x3x{args.size}x{args.size}", rows)
    payload = {"env": env(args.device), "agreement": rows}
    write_json(args.json, payload)
    return payload


if __name__ == "__main__":
    main()
