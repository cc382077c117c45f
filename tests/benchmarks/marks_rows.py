"""Compiled mode's rows under fxprof's marks against the same profile timed by torch.profiler, on
zoo models (issue 60: kernel rows per call site and FLOPs unchanged).

    PYTHONPATH=$PWD nice -n 19 python tests/benchmarks/marks_rows.py [--models resnet18,timm_convnext_atto,hf_bert | all]

Per model (tests/benchmarks/zoo_models.py, weights=None, one thread): ``fxprof.profile(model, x,
compile=True)`` timed by the marks, then the same compiled program (reused: no second compile)
timed by torch.profiler. Printed: kernel rows of each, whether their names, origins, FLOPs and
calls a run are the same, the unmatched rows of each, and the kernels' summed medians of each over
the compiled model's own run. It asserts nothing.
"""

from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402
from zoo_models import CI_COMPILED, ZOO  # noqa: E402

import fxprof  # noqa: E402
from fxprof.core.compiled import quiet_own_run_ms  # noqa: E402
from fxprof.measure.compiled import mode  # noqa: E402


def profiled(model, args, kwargs, by_profiler: bool):
    real = mode.not_marked_reason
    if by_profiler:
        mode.not_marked_reason = lambda *a, **k: "asked by the benchmark"
    try:
        return fxprof.profile(model, *args, compile=True, warmup=3, iters=10, memory=False, **kwargs)
    finally:
        mode.not_marked_reason = real


def kernels_over_own(p) -> float:
    """The kernels' time a run (median over the runs of their summed samples) over the compiled
    model's own run, as the header's ``kernels:`` line."""
    kernels = p.df.index[p.df["role"] == "kernel"]
    samples = p.kept_samples()
    samples = samples[samples["node"].isin(kernels)]
    own, _ = quiet_own_run_ms(p.meta)
    per_run = samples.groupby("run", observed=True)["time_ms"].sum().median()
    return float(per_run / own) if own else float("nan")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(CI_COMPILED), help="comma-separated zoo names, or all (but ddp_resnet18)")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    print(f"torch {torch.__version__}, 1 thread, load {os.getloadavg()[0]:.1f}")
    print(f"{'model':<22} {'kernels':>7} {'same rows':>9} {'origins':>7} {'flops':>5} {'calls':>5} {'unmatched':>9} "
          f"{'k/own marks':>11} {'k/own prof':>10}")
    names = [n for n in ZOO if n != "ddp_resnet18"] if args.models == "all" else args.models.split(",")
    for name in names:
        try:
            model, inputs, kwargs = ZOO[name].build()
            with torch.no_grad():
                marks = profiled(model, inputs, kwargs, False)
                prof = profiled(model, inputs, kwargs, True)
        except Exception as exc:  # said per model, and the others still run
            print(f"{name:<22} failed: {type(exc).__name__}: {str(exc).splitlines()[0][:160] if str(exc) else ''}", flush=True)
            continue
        if marks.meta["timer"] != "marks":
            print(f"{name:<22} not marked: {marks.meta['compiled'].get('kernel_source_reason')}", flush=True)
            continue
        a, b = marks.df[marks.df["role"] == "kernel"], prof.df[prof.df["role"] == "kernel"]
        same = list(a.index) == list(b.index)
        col = (lambda c: a[c].astype(str).tolist() == b[c].astype(str).tolist()) if same else (lambda c: False)
        unmatched = f"{int((marks.df['role'] == 'unmatched').sum())}/{int((prof.df['role'] == 'unmatched').sum())}"
        print(f"{name:<22} {len(a):>3}/{len(b):<3} {str(same):>9} {str(col('origins')):>7} {str(col('flops')):>5} "
              f"{str(col('calls_per_run')):>5} {unmatched:>9} {kernels_over_own(marks):>11.3f} {kernels_over_own(prof):>10.3f}",
              flush=True)
        if not same:
            print("   only under the marks:", sorted(set(a.index) - set(b.index))[:8])
            print("   only under the profiler:", sorted(set(b.index) - set(a.index))[:8])
    print(f"load at the end {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
