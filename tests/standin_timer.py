"""A stand-in for the CUDA event timers on the CPU, shared by the tests (test_boundary_marks.py,
test_bound.py) and the GPU overhead benchmark's event counts (benchmarks/gpu_overhead.py)."""

from __future__ import annotations

import time

from fxprof.measure.timing.timers import Timer


class StandInEventTimer(Timer):
    """The event timers' capability (one mark may end a node and start the next) with marks that
    are host clock readings (ints, exact arithmetic); counts the marks of each run."""

    name = "standin"
    measures_device = True
    boundary_marks = True

    def __init__(self) -> None:
        self.count = 0

    def begin_run(self) -> None:
        self.count = 0

    def mark(self) -> int:
        self.count += 1
        return time.perf_counter_ns()

    def elapsed_ms(self, start: int, end: int) -> float:
        return (end - start) / 1e6
