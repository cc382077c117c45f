"""Kernel attribution: the flat pass over raw Kineto events against reading Event records first.

    python tests/benchmarks/attribution.py [--nodes 71] [--runs 20] [--ops 4]

Builds a synthetic trace shaped like a kernel-timer profile (per node and run: an ``fxprof::``
range, ``--ops`` aten ops, a launch and its kernel) from tests/measure/test_bridge.py's stand-ins for
Kineto's events, and prints the median of 5 of ``attribute_kineto`` and of
``attribute_events(events_from_kineto(...))`` (the record path: the same core after building an
``Event`` per Kineto event), which give the same result.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "measure"))  # test_bridge's stand-ins

from test_bridge import call, op, rng, work  # noqa: E402

from fxprof.measure.device.bridge import attribute_events, attribute_kineto, events_from_kineto  # noqa: E402


def trace(nodes: int, runs: int, ops: int) -> list:
    events, c = [], 0
    for r in range(runs):
        for n in range(nodes):
            t = (r * nodes + n) * 100.0
            events.append(rng(f"n{n}", t, 50))
            events += [op(f"aten::op{k}", t + 1 + k, 1, correlation=10**7 + c + k) for k in range(ops)]
            c += 10
            events += [call("cudaLaunchKernel", t + 10, c), work(f"kernel{n}", t + 60, 5, c)]
    return events


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=71)
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--ops", type=int, default=4)
    args = parser.parse_args()
    events = trace(args.nodes, args.runs, args.ops)
    print(f"{len(events)} events ({args.nodes} nodes x {args.runs} runs, {args.ops} aten ops a node)")
    for label, fn in (("record path", lambda: attribute_events(events_from_kineto(events))),
                      ("flat pass", lambda: attribute_kineto(events))):
        times = []
        for _ in range(5):
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
        print(f"{label:<12} median {statistics.median(times) * 1000:.1f} ms")


if __name__ == "__main__":
    main()
