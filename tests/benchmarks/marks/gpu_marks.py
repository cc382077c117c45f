"""The GPU event marks, on a real GPU (issue 60, item 8 of FINDINGS.md): for each model, fxprof's
own compile (provenance on) is run plain and with the prototype's event marks (a pair per launch,
and one event per boundary), interleaved, one synchronize per run; the sum of the marked kernel
spans is set against CUPTI's kernel time of one torch.profiler run of the same program. The
generated wrappers are written to OUT_DIR/wrappers.tar.gz (fixtures for the package's GPU path).

    PYTHONPATH=$PWD python tests/benchmarks/marks/gpu_marks.py OUT_DIR [--models mlp1,resnet50] [--n 60]
"""
from __future__ import annotations

import argparse
import os
import sys
import tarfile
import time
import traceback

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from ktimer import KernelTimer, capturing_backend  # noqa: E402


def make(which: str):
    from torch import nn

    torch.manual_seed(0)
    dev = "cuda"
    if which.startswith("mlp"):
        batch = int(which[3:] or 1)
        m = nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 512), nn.GELU(), nn.Linear(512, 256),
                          nn.LayerNorm(256)).eval().to(dev)
        return m, (torch.randn(batch, 256, device=dev),)
    if which == "resnet18":
        import torchvision

        return torchvision.models.resnet18(weights=None).eval().to(dev), (torch.randn(1, 3, 224, 224, device=dev),)
    if which == "resnet50":
        import torchvision

        m = torchvision.models.resnet50(weights=None).eval().to(dev).half()
        return m, (torch.randn(32, 3, 224, 224, device=dev, dtype=torch.float16),)
    if which == "bert":
        from gpu_models import bert_base

        m = bert_base().to(dev).half()
        return m, (torch.randint(0, 1000, (8, 128), device=dev),)
    raise ValueError(which)


def study(which: str, n: int, out_dir: str) -> None:
    model, args = make(which)
    store: list = []
    from torch._inductor import config as ic

    t0 = time.perf_counter()
    with torch.no_grad():
        with ic.patch({"trace.provenance_tracking_level": 1}):
            ours = torch.compile(model, backend=capturing_backend(store))
            want = ours(*args)
        torch.cuda.synchronize()
        print(f"[{which}] compiled in {time.perf_counter() - t0:.1f} s: {len(store)} graph(s)", flush=True)
        for i, g in enumerate(store):
            with open(os.path.join(out_dir, f"{which}_{i}.py"), "w") as f:
                f.write(g.source_code)
            with open(os.path.join(out_dir, f"{which}_{i}.provenance.json"), "w") as f:
                f.write(getattr(g, "inductor_provenance_mapping_str", None) or "{}")
        ev = lambda: torch.cuda.Event(enable_timing=True)  # noqa: E731
        layouts = {}
        for layout in ("pairs", "boundaries"):
            try:
                layouts[layout] = [KernelTimer(g, event=ev, marks=layout) for g in store]
            except Exception:
                print(f"[{which}] {layout}: timer failed\n{traceback.format_exc()}", flush=True)
        for layout, timers in layouts.items():
            print(f"[{which}] {layout}: sites {[len(t.sites) for t in timers]} kinds "
                  f"{sorted({s.kind for t in timers for s in t.sites})} unkeyed "
                  f"{sum(1 for t in timers for s in t.sites if not s.handle)}", flush=True)

        def run_plain():
            ours(*args)
            torch.cuda.synchronize()

        times: dict[str, list[float]] = {"plain": [], **{k: [] for k in layouts}}
        for _ in range(5):
            run_plain()
        names = list(times)
        same = {}
        for i in range(n):
            for name in names[i % len(names):] + names[:i % len(names)]:
                timers = layouts.get(name, [])
                for t in timers:
                    t.install("code")
                ours(*args)  # one untimed call, as fxprof's loop
                torch.cuda.synchronize()
                for t in timers:
                    t.events.read()
                t0 = time.perf_counter_ns()
                got = ours(*args)
                torch.cuda.synchronize()
                times[name].append((time.perf_counter_ns() - t0) / 1e3)
                for t in timers:
                    t.keep_run()
                    t.remove()
                if timers and name not in same:
                    same[name] = (torch.equal(want, got) if isinstance(want, torch.Tensor)
                                  else all(torch.equal(a, b) for a, b in zip(want.values() if hasattr(want, "values") else want,
                                                                             got.values() if hasattr(got, "values") else got)
                                           if isinstance(a, torch.Tensor)))
        base = float(np.median(times["plain"]))
        for name, v in times.items():
            print(f"[{which}] {name:10s} median {np.median(v):9.1f} us  ratio {np.median(v) / base:.3f}  "
                  f"p25 {np.percentile(v, 25):9.1f} p75 {np.percentile(v, 75):9.1f}  equal {same.get(name)}", flush=True)
        # CUPTI's kernel time of one run of the same program, against the marks' spans
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            for _ in range(3):
                ours(*args)
            torch.cuda.synchronize()
        kernels = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
        cupti = sum(e.device_time for e in kernels) / 3.0  # us a run
        print(f"[{which}] CUPTI: {len(kernels) / 3:.0f} GPU ops a run, {cupti:.1f} us a run", flush=True)
        for name, timers in layouts.items():
            spans = sum(np.median(t.durations_ns().sum(axis=1)) for t in timers) / 1e3
            calls = sum(np.median(t.call_ns()) for t in timers) / 1e3
            print(f"[{which}] {name}: marked kernel spans {spans:.1f} us a run ({spans / cupti:.3f}x CUPTI), "
                  f"graph calls first-to-last mark {calls:.1f} us", flush=True)
            t = timers[0]
            d = np.median(t.durations_ns(), axis=0) / 1e3
            top = np.argsort(-d)[:6]
            for j in top:
                s = t.sites[j]
                print(f"    {s.kind:8s} {s.kernel[:60]:60s} {s.handle[:40]:40s} {d[j]:8.2f} us", flush=True)
        # plain runs after the profile (and after the marks), against before
        after = []
        for _ in range(n):
            t0 = time.perf_counter_ns()
            run_plain()
            after.append((time.perf_counter_ns() - t0) / 1e3)
        print(f"[{which}] plain after the profiler: median {np.median(after):.1f} us ({np.median(after) / base:.3f}x before)",
              flush=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--models", default="mlp1,mlp32,resnet18,resnet50")
    ap.add_argument("--n", type=int, default=60)
    a = ap.parse_args()
    wr = os.path.join(a.out, "wrappers")
    os.makedirs(wr, exist_ok=True)
    print(f"torch {torch.__version__} on {torch.cuda.get_device_name()}", flush=True)
    try:
        for which in a.models.split(","):
            try:
                study(which, a.n, wr)
            except Exception:
                print(f"[{which}] failed\n{traceback.format_exc()}", flush=True)
    finally:
        with tarfile.open(os.path.join(a.out, "wrappers.tar.gz"), "w:gz") as tar:
            tar.add(wr, arcname="wrappers")


if __name__ == "__main__":
    main()
