"""What torch.profiler alone costs a compiled decode step: the floor of any profile that reads a
compiled program's kernels from it (compiled mode, a session of a compiled model, fxprof.generate).

    python tests/benchmarks/profiler_floor.py [--hidden 128] [--layers 2] [--new-tokens 24] [--rounds 5]

The tiny Llama of generate_cost.py, its forward compiled in place with a static cache; each round
runs plain greedy ``generate`` twice, in turn: once as it is, once inside ``torch.profiler.profile``
(CPU activity, nothing else of fxprof), every model call timed from a forward pre-hook to a forward
hook. Per round the median decode step of each (the first two calls left out); printed: both
medians over rounds and their ratio. It asserts nothing.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, os.path.dirname(__file__))

from generate_cost import build  # noqa: E402


def decode_step_ms(model, ids, new_tokens: int, profiled: bool) -> float:
    times: list[int] = []

    def before(*_):
        times.append(-time.perf_counter_ns())

    def after(*_):
        times[-1] += time.perf_counter_ns()

    handles = [model.register_forward_pre_hook(before), model.register_forward_hook(after)]
    try:
        with torch.no_grad():
            if profiled:
                with profile(activities=[ProfilerActivity.CPU]):
                    model.generate(ids, max_new_tokens=new_tokens, do_sample=False, cache_implementation="static")
            else:
                model.generate(ids, max_new_tokens=new_tokens, do_sample=False, cache_implementation="static")
    finally:
        for h in handles:
            h.remove()
    return statistics.median(times[2:]) / 1e6


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--new-tokens", type=int, default=24)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    model = build(args.hidden, args.layers)
    model.forward = torch.compile(model.forward)
    ids = torch.randint(0, 2000, (1, 16), generator=torch.Generator().manual_seed(0))
    decode_step_ms(model, ids, 8, False)  # compiles
    plain, profiled = [], []
    for _ in range(args.rounds):
        plain.append(decode_step_ms(model, ids, args.new_tokens, False))
        profiled.append(decode_step_ms(model, ids, args.new_tokens, True))
    p, q = statistics.median(plain), statistics.median(profiled)
    print(f"compiled decode step (Llama hidden {args.hidden}, {args.layers} layers, static cache, 1 thread, torch "
          f"{torch.__version__}): plain {p:.4f} ms, under torch.profiler {q:.4f} ms: {q / p:.3f}x "
          f"(medians of {args.rounds} rounds; load {os.getloadavg()[0]:.2f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
