"""Accuracy on nodes of known cost.

    python tests/benchmarks/accuracy.py [--device cpu|cuda]

CPU: a graph of nodes that spin for exactly 0.2, 1, 2 and 5 ms (a busy loop on the monotonic
clock, so the cost is known), separated by cheap nodes. For each timed node: the known cost,
fxprof's median, and the error. The cheap nodes' medians show the floor.
GPU: a node launching a torch.cuda._sleep kernel of calibrated length, followed by cheap
nodes: the host runs ahead of the device. Per timer (cpu, sync, cuda, kernel): what the long
node and the cheap nodes get.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from common import env, print_table, write_json
from torch import fx, nn

import fxprof


def spin(x, ms):
    end = time.perf_counter_ns() + int(ms * 1e6)
    while time.perf_counter_ns() < end:
        pass
    return x


fx.wrap("spin")


class Spins(nn.Module):
    def forward(self, x):
        x = spin(x, 0.2)
        x = x + 1
        x = spin(x, 1.0)
        x = x * 2
        x = spin(x, 2.0)
        x = torch.relu(x)
        return spin(x, 5.0)


def cpu_rows(iters: int) -> list[dict]:
    prof = fxprof.profile(Spins(), torch.ones(8), warmup=3, iters=iters, anatomy=False)
    df = prof.df
    known = {"spin": 0.2, "spin_1": 1.0, "spin_2": 2.0, "spin_3": 5.0, "add": 0.0, "mul": 0.0, "relu": 0.0}
    rows = []
    for node, cost in known.items():
        med = float(df.loc[node, "median_ms"])
        rows.append({"node": node, "known_ms": cost, "fxprof_median_ms": med, "error_us": (med - cost) * 1000,
                     "iqr_us": float(df.loc[node, "iqr_ms"]) * 1000})
    return rows


def long_kernel(x, cycles):
    torch.cuda._sleep(cycles)
    return x


fx.wrap("long_kernel")


def gpu_rows(iters: int) -> list[dict]:
    cycles = 20_000_000

    class AsyncModel(nn.Module):
        def forward(self, x):
            y = long_kernel(x, cycles)
            y = y + 1
            y = y * 2
            return torch.relu(y)

    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda._sleep(cycles)
    lengths = []
    for _ in range(5):
        start.record(); torch.cuda._sleep(cycles); end.record(); torch.cuda.synchronize()
        lengths.append(start.elapsed_time(end))
    known = statistics.median(lengths)
    x = torch.ones(1024, device="cuda")
    rows = []
    for timer in ("cpu", "sync", "cuda", "kernel"):
        prof = fxprof.profile(AsyncModel(), x, warmup=3, iters=iters, timer=timer, anatomy=False, memory=False)
        df = prof.df
        col = "kernel_median_ms" if timer == "kernel" else "median_ms"
        rows.append({
            "timer": timer, "known_ms": known, "long_node_ms": float(df.loc["long_kernel", col]),
            "long_error_pct": (float(df.loc["long_kernel", col]) / known - 1) * 100,
            "cheap_nodes_max_ms": float(df.loc[["add", "mul", "relu"], col].max()),
            "long_node_host_ms": float(df.loc["long_kernel", "host_mean_ms"]),
        })
    return rows


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--iters", type=int, default=30)
    parser.add_argument("--json")
    args = parser.parse_args(argv)
    payload = {"env": env(args.device), "accuracy_cpu": cpu_rows(args.iters)}
    print(payload["env"])
    print_table("accuracy on the CPU: spinning nodes of known cost", payload["accuracy_cpu"])
    if args.device.startswith("cuda"):
        payload["accuracy_gpu"] = gpu_rows(args.iters)
        print_table("accuracy on the GPU: a long kernel, then cheap nodes (host runs ahead)", payload["accuracy_gpu"])
    write_json(args.json, payload)
    return payload


if __name__ == "__main__":
    main()
