"""What Python run between a compiled model's steps costs the next step (issue 60: fxprof.generate's
compiled decode step). The tiny Llama of docs/scripts/generate_models.py, its forward compiled in
place, a static cache, plain greedy ``model.generate`` (16 new tokens), one thread. A forward
pre-hook runs ``--work`` microseconds of plain Python before each model call (dict and string
reads over 20,000 small dicts, as bookkeeping does), then the call is timed from a second
pre-hook to a forward hook, so the work itself is outside the time. Rounds interleave the work
sizes; printed: the median decode step per size, and its ratio to no work. No fxprof runs here:
it asks how much of a profiled step's excess the profiler's own work between steps can explain
(fxprof's session did about 290 us of it a decode step before 29 November, about 150 us after).

    PYTHONPATH=$PWD python tests/benchmarks/marks/step_pollution.py [--rounds 40] [--work 0,50,100,200,300]
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "..", "docs", "scripts"))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from generate_cost import timed_calls  # noqa: E402
from generate_models import tiny_llama  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--work", default="0,50,100,200,300", help="microseconds of Python before each step")
    args = parser.parse_args()
    sizes = [int(v) for v in args.work.split(",")]
    torch.set_num_threads(1)
    model = tiny_llama().eval()
    ids = torch.randint(0, 1000, (1, 16), generator=torch.Generator().manual_seed(0))
    model.forward = torch.compile(model.forward)

    def generate() -> None:
        model.generate(ids, max_new_tokens=16, do_sample=False, cache_implementation="static")

    generate()
    generate()  # compiled, and each position's first eager call is behind us
    junk = [{"a": i, "b": str(i)} for i in range(20000)]

    def work(us: int):
        def hook(*_):
            end = time.perf_counter_ns() + us * 1000
            i = 0
            while time.perf_counter_ns() < end:
                _ = junk[(i * 7919) % 20000]["b"]
                i += 1
        return hook

    steps: dict[int, list[float]] = {us: [] for us in sizes}
    for _ in range(args.rounds):
        for us in sizes:
            handle = model.register_forward_pre_hook(work(us)) if us else None
            try:
                calls = timed_calls(model, generate)  # its pre-hook registered after the work's: the work is not timed
            finally:
                if handle is not None:
                    handle.remove()
            steps[us].append(statistics.median(calls[1:]))  # the decode steps (the first call is the prefill)
    base = statistics.median(steps[sizes[0]])
    print(f"torch {torch.__version__}, 1 thread, {args.rounds} rounds, load {os.getloadavg()[0]:.2f}")
    for us in sizes:
        m = statistics.median(steps[us])
        print(f"{us:4d} us of Python before each step: decode step {m * 1e3:6.1f} us, {m / base:.3f}x")


if __name__ == "__main__":
    main()
