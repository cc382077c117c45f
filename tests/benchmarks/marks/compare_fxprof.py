"""The marks' per-kernel times against fxprof's compiled-mode rows today (torch.profiler), for
the same model: do the two timers agree kernel by kernel? fxprof profiles its own compile; the
marks time a second compile of the same model; kernels matched by call order (both follow
inductor's provenance keys), medians over runs.

    PYTHONPATH=$PWD nice -n 19 python tests/benchmarks/marks/compare_fxprof.py mlp1
"""
import os
import sys
import time

os.environ.setdefault("TORCHINDUCTOR_FX_GRAPH_CACHE", "0")
os.environ.setdefault("TORCHINDUCTOR_AUTOGRAD_CACHE", "0")
import numpy as np
import torch

sys.path.insert(0, os.path.dirname(__file__))
from ktimer import KernelTimer, capturing_backend  # noqa: E402
from models import make  # noqa: E402

import fxprof  # noqa: E402

torch.set_num_threads(1)
which = sys.argv[1] if len(sys.argv) > 1 else "mlp1"
iters = int(sys.argv[2]) if len(sys.argv) > 2 else 100
model, x = make(which)
args = x if isinstance(x, tuple) else (x,)
t0 = time.time()
prof = fxprof.profile(torch.compile(model), *args, iters=iters, warmup=5, memory=False)
df = prof.to_dataframe()
print(f"fxprof compiled mode ({time.time() - t0:.0f} s): {prof.meta['compiled'].get('kernel_source')}")
cols = [c for c in ("node", "target", "op", "median_ms", "mean_ms", "calls") if c in df.columns]
store: list = []
from torch._inductor import config as ic  # noqa: E402

with torch.no_grad():
    with ic.patch({"trace.provenance_tracking_level": 1}):
        ours = torch.compile(model, backend=capturing_backend(store))
        ours(*args)
    timers = [KernelTimer(g) for g in store]
    for _ in range(iters):
        ours(*args)  # a plain call, then a marked one
        for t in timers:
            t.install()
        ours(*args)
        for t in timers:
            t.keep_run()
            t.remove()
marks = [(s, float(np.median(col)) / 1e6) for t in timers for s, col in zip(t.sites, t.durations_ns().T)]
kernel_rows = df[df["role"] == "kernel"] if "role" in df.columns else df
print(f"fxprof rows: {len(df)} ({len(kernel_rows)} kernel rows); mark sites: {len(marks)}; load {os.getloadavg()[0]:.2f}")
med = "median_ms" if "median_ms" in df.columns else [c for c in df.columns if c.endswith("_ms")][0]
print(f"{'mark site':58s} {'marks ms':>9s}   fxprof row (by call order)             {med:>9s}")
rows = list(kernel_rows.itertuples())  # kernel rows come in call order
for i, (s, ms) in enumerate(marks):
    r = rows[i] if i < len(rows) else None
    name = getattr(r, "target", "") if r is not None else ""
    print(f"{s.handle[:58]:58s} {ms:9.4f}   {str(name)[:38]:38s} {getattr(r, med, float('nan')) if r is not None else float('nan'):9.4f}")
total_m = sum(ms for _, ms in marks)
print(f"sum of kernels: marks {total_m:.4f} ms, fxprof kernel rows {kernel_rows[med].sum():.4f} ms")
print(f"fxprof's profiled run {np.median(prof.total_ms):.4f} ms vs its unprofiled runs {np.median(prof.meta['compiled']['unprofiled_ms']):.4f} ms")
others = df[df["role"] != "kernel"] if "role" in df.columns else df.iloc[0:0]
for r in others.itertuples():
    print(f"  fxprof row {r.Index}: {r.target} {getattr(r, med):.4f} ms")
