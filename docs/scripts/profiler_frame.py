"""The profiler's cost around a compiled frame, against the probes' (docs/performance.md 11c):

    taskset -c 1 python docs/scripts/profiler_frame.py

A two-Linear model (16 wide, batch 4) eager and ``torch.compile``d, and one ``torch.addmm``,
each called in a loop with ``torch.profiler`` off and on (the fastest of 7 rounds of 300 calls,
interleaved), with the events recorded per call: the on-off difference per event is what an
event costs in that code. The compiled call's events cost 2-3x an eager op's, and with
``torch._dynamo.config.record_runtime_overhead`` off (one range fewer, and none of its Python)
the difference fell by 0.9 and 3.6 us a call in two runs here.
"""

import time

import torch
from torch.profiler import ProfilerActivity, profile

torch.set_num_threads(1)
m = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.Linear(16, 16)).eval()
x = torch.randn(4, 16)
c = torch.compile(m)


def counts(fn):
    with profile(activities=[ProfilerActivity.CPU]) as p:
        for _ in range(100):
            fn()
    return len(p.events()) / 100


def loop(fn, n=300):
    t = time.perf_counter_ns()
    for _ in range(n):
        fn()
    return (time.perf_counter_ns() - t) / n / 1e3


def onoff(fn, rounds=7):
    offs, ons = [], []
    for _ in range(rounds):
        offs.append(loop(fn))
        with profile(activities=[ProfilerActivity.CPU]):
            loop(fn, 50)
            ons.append(loop(fn))
    return min(offs), min(ons)


if __name__ == "__main__":
    import torch._dynamo.config as dynamo_config

    with torch.no_grad():
        for _ in range(5):
            c(x)
        tests = {"eager": lambda: m(x), "compiled": lambda: c(x),
                 "addmm": lambda: torch.addmm(m[0].bias, x, m[0].weight.t())}
        for name, fn in tests.items():
            events = counts(fn)
            off, on = onoff(fn)
            print(f"{name:24s} events {events:5.1f}  off {off:7.2f} us  on {on:7.2f} us  "
                  f"on-off {on - off:6.2f} us  per event {(on - off) / events:5.2f} us")
        with dynamo_config.patch(record_runtime_overhead=False):
            events = counts(tests["compiled"])
            off, on = onoff(tests["compiled"])
            print(f"{'compiled, no AOT range':24s} events {events:5.1f}  off {off:7.2f} us  on {on:7.2f} us  "
                  f"on-off {on - off:6.2f} us")
