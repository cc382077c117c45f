"""Does a process run its model slower after a profile? (GPU; issue 60's "no slowdown after the
profile", and fxprof.generate's own-step yardstick.) Run once with TEARDOWN_CUPTI unset and once
with TEARDOWN_CUPTI=1 (kineto then detaches CUPTI when a profiler stops), each in a fresh process:

    python tests/benchmarks/gpu_after_profiler.py eager      # resnet18 bs1: plain, CPU-only profiler, plain, CPU+CUDA profiler, plain
    python tests/benchmarks/gpu_after_profiler.py generate   # 160M Llama: own decode steps before and after fxprof.generate

Medians of plain runs (each synchronized), in us, and their ratio to the first phase.
"""
from __future__ import annotations

import os
import sys
import time

import numpy as np
import torch


def plain(f, n: int) -> float:
    times = []
    for _ in range(n):
        torch.cuda.synchronize()
        t0 = time.perf_counter_ns()
        f()
        torch.cuda.synchronize()
        times.append((time.perf_counter_ns() - t0) / 1e3)
    return float(np.median(times))


def eager() -> None:
    import torchvision
    from torch.profiler import ProfilerActivity, profile

    model = torchvision.models.resnet18(weights=None).eval().cuda()
    x = torch.randn(1, 3, 224, 224, device="cuda")
    with torch.no_grad():
        f = lambda: model(x)  # noqa: E731
        for _ in range(20):
            f()
        base = plain(f, 200)
        print(f"eager resnet18 bs1: plain {base:.1f} us", flush=True)
        for name, acts in (("CPU-only profiler", [ProfilerActivity.CPU]),
                           ("CPU+CUDA profiler", [ProfilerActivity.CPU, ProfilerActivity.CUDA])):
            with profile(activities=acts):
                for _ in range(3):
                    f()
                torch.cuda.synchronize()
            after = plain(f, 200)
            print(f"  after a {name}: plain {after:.1f} us ({after / base:.3f}x)", flush=True)


def generate() -> None:
    sys.path.insert(0, os.path.dirname(__file__))
    from gpu_models import llama_decoder

    import fxprof
    from fxprof.generate import _own_calls

    model = llama_decoder().cuda().half()
    ids = torch.randint(0, 32000, (1, 128), device="cuda", generator=torch.Generator("cuda").manual_seed(0))
    kw = {"do_sample": False}
    with torch.no_grad():
        tokens = model.generate(ids, max_new_tokens=16, **kw)
        tokens = model.generate(ids, max_new_tokens=16, **kw)
    own, _, _ = _own_calls(model, ids, 16, kw, tokens)
    before_pre, before = own[0], float(np.median(own[1:]))
    print(f"generate: own steps before fxprof: prefill {before_pre:.1f} ms, decode median {before:.2f} ms", flush=True)
    g = fxprof.generate(model, ids, 16, timer="cuda")
    print("\n".join(g.fidelity_lines()), flush=True)
    own, _, _ = _own_calls(model, ids, 16, kw, tokens)
    print(f"generate: own steps after fxprof: prefill {own[0]:.1f} ms, decode median {np.median(own[1:]):.2f} ms "
          f"({np.median(own[1:]) / before:.2f}x before); profiler enabled: {torch.autograd._profiler_enabled()}; "
          f"hooks left: {sum(len(m._forward_hooks) + len(m._forward_pre_hooks) for m in model.modules())}", flush=True)
    own, _, _ = _own_calls(model, ids, 16, kw, tokens)
    print(f"generate: own steps again: prefill {own[0]:.1f} ms, decode median {np.median(own[1:]):.2f} ms", flush=True)


if __name__ == "__main__":
    print(f"TEARDOWN_CUPTI={os.environ.get('TEARDOWN_CUPTI')!r} torch {torch.__version__}", flush=True)
    {"eager": eager, "generate": generate}[sys.argv[1]]()
