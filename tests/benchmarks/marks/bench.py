"""Interleaved timing: the user's compiled model (plain), fxprof's copy with the clock-mark
instrumentation, fxprof's copy after the instrumentation is removed, and today's way (a compile
with cpp.enable_kernel_profile under torch.profiler). Medians over N cycles; ratios to fxprof's own copy run plain (ours_after), which goes through the same dynamo cache entry.

    PYTHONPATH=$PWD nice -n 19 python tests/benchmarks/marks/bench.py mlp1 [N] [--profiler]
"""

from __future__ import annotations

import os
import sys
import time

os.environ.setdefault("TORCHINDUCTOR_FX_GRAPH_CACHE", "0")
os.environ.setdefault("TORCHINDUCTOR_AUTOGRAD_CACHE", "0")

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(__file__))
from ktimer import KernelTimer, capturing_backend, mark_cost_ns  # noqa: E402
from models import make  # noqa: E402


def main() -> None:
    which = sys.argv[1] if len(sys.argv) > 1 else "mlp1"
    n = int(sys.argv[2]) if len(sys.argv) > 2 and sys.argv[2].isdigit() else 300
    with_profiler = "--profiler" in sys.argv
    torch.set_num_threads(int(os.environ.get("THREADS", "1")))
    model, x = make(which)
    args = x if isinstance(x, tuple) else (x,)
    torch.manual_seed(0)

    with torch.no_grad():
        user = torch.compile(model)                      # the user's program: default inductor
        want = user(*args)
        alone = []  # the user's program before any other compile of this forward
        for _ in range(20):
            user(*args)
        for _ in range(n):
            user(*args)
            t0 = time.perf_counter_ns()
            user(*args)
            alone.append((time.perf_counter_ns() - t0) / 1e3)
        load0 = os.getloadavg()
        store: list = []
        from torch._inductor import config as ic
        with ic.patch({"trace.provenance_tracking_level": 1}):
            ours = torch.compile(model, backend=capturing_backend(store))  # fxprof's own copy
            ours(*args)
        today = None
        if with_profiler:  # what fxprof compiles today: C++ kernels as profiler ranges
            with ic.patch({"cpp.enable_kernel_profile": True, "trace.provenance_tracking_level": 1}):
                today = torch.compile(model, backend=capturing_backend([]))
                today(*args)
        timers = [KernelTimer(g) for g in store]
        modes = [t.install(os.environ.get("KT_MODE")) for t in timers]
        got = ours(*args)
        for t in timers:
            t.remove()
        same = torch.equal(want, got) if isinstance(want, torch.Tensor) else all(torch.equal(a, b) for a, b in zip(want, got))
        print(f"{which}: graphs={len(timers)} sites={[len(t.sites) for t in timers]} install={modes} bitwise_equal={same}")

        def plain_user():
            return user(*args)

        def plain_ours():
            return ours(*args)

        def timed_ours():
            return ours(*args)

        variants = {"plain": plain_user, "ours_after": plain_ours, "instrumented": timed_ours}

        def profiled():
            with prof.profile(activities=[prof.ProfilerActivity.CPU]):
                today(*args)  # the first call after the profiler starts runs cold, as fxprof's cycles know
                t0 = time.perf_counter_ns()
                today(*args)
                return time.perf_counter_ns() - t0

        prof = torch.profiler
        for _ in range(20):
            for f in variants.values():
                f()

        def phase(names: list[str], cycles: int) -> dict[str, list[float]]:
            times: dict[str, list[float]] = {k: [] for k in names}
            for i in range(cycles):
                order = names[i % len(names):] + names[:i % len(names)]  # rotate who goes first
                for name in order:
                    if name == "profiler":
                        ns = profiled()
                    else:
                        f = variants[name]
                        if name == "instrumented":  # switched in and out outside the timed call
                            for t in timers:
                                t.install(os.environ.get("KT_MODE"))
                        f()  # one untimed call first, for every variant alike
                        if name == "instrumented":
                            for t in timers:
                                t.rows.clear()
                        t0 = time.perf_counter_ns()
                        f()
                        ns = time.perf_counter_ns() - t0
                        if name == "instrumented":
                            for t in timers:
                                t.keep_run()
                                t.remove()
                    times[name].append(ns / 1e3)
            return times

        def report(title: str, times: dict[str, list[float]]) -> None:
            load = os.getloadavg()
            med = {k: float(np.median(v)) for k, v in times.items()}
            base = "ours_after" if "ours_after" in times else "plain"
            print(f"{title}: load={load[0]:.2f},{load[1]:.2f} threads={torch.get_num_threads()} cycles={n}")
            for k, v in med.items():
                print(f"  {k:13s} median {v:9.1f} us  ratio {v / med[base]:.3f}  "
                      f"p25 {np.percentile(times[k], 25):9.1f} p75 {np.percentile(times[k], 75):9.1f}  "
                      f"paired/{base} {np.median(np.asarray(v) / np.asarray(times[base])):.3f}")

        print(f"mark_pair_ns={mark_cost_ns():.0f}")
        print(f"phase 0 (user's program alone, before fxprof's compile): load={load0[0]:.2f} median {np.median(alone):.1f} us "
              f"p25 {np.percentile(alone, 25):.1f} p75 {np.percentile(alone, 75):.1f}")
        times_a = phase(["plain", "ours_after", "instrumented"], n)
        report("phase A (no profiler)", times_a)
        if today is not None:
            report("phase B (profiler cycles, as fxprof today)", phase(["ours_after", "profiler"], n))
        # the per-site table of the instrumented runs
        for gi, t in enumerate(timers):
            d = t.durations_ns()
            total = float(np.median(d.sum(axis=1))) / 1e3 if d.size else 0.0
            print(f"  graph {gi}: {len(t.sites)} sites, calls per run {sorted(set(t.calls_per_run()))}, "
                  f"median sum of kernel spans {total:.1f} us, median graph call {np.median(t.call_ns()) / 1e3:.1f} us, "
                  f"median model run {np.median(times_a['instrumented']):.1f} us")
            for s, col in list(zip(t.sites, d.T))[:12]:
                print(f"    {s.index:3d} {s.kind:9s} {s.kernel:40s} {s.handle:36s} {np.median(col) / 1e3:8.2f} us  pre={list(s.pre)}")
            if len(t.sites) > 12:
                print(f"    ... {len(t.sites) - 12} more")
            missing = [s.kernel for s in t.sites if not s.pre]
            print(f"    sites without dynamo nodes: {missing}")


if __name__ == "__main__":
    main()
