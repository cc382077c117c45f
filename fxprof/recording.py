"""The recording: raw timer marks of every node of every run, turned into samples.

The interpreter hands the recorder one raw ``(name, m0, m1, h0, h1)`` tuple per executed node
(timer marks and host clock readings); nothing is converted while the run is going. After the
run's one synchronization point (``timer.end_run()``) the marks become milliseconds in bulk.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Any, Iterator

import numpy as np

from .timers import CpuTimer, Timer

__all__ = ["Recorder", "Recording", "append_marks"]


@dataclass
class Recording:
    """Raw samples: one entry per executed node per run, plus one per run for the whole run.

    Columns are parallel lists. ``time_ms`` comes from the timer (device time for the CUDA
    timers), ``host_ms`` from the host clock. ``start_ms`` and ``host_start_ms`` place each
    sample on its run's timeline (timer and host clock, from the run's first mark);
    ``run_start_ms`` places each run on the host clock, from the first recorded run's start.
    """

    node: list[str] = field(default_factory=list)
    run: list[int] = field(default_factory=list)
    time_ms: list[float] = field(default_factory=list)
    host_ms: list[float] = field(default_factory=list)
    start_ms: list[float] = field(default_factory=list)
    host_start_ms: list[float] = field(default_factory=list)
    run_total_ms: list[float] = field(default_factory=list)
    run_host_ms: list[float] = field(default_factory=list)
    run_start_ms: list[float] = field(default_factory=list)
    #: CUDA kernel time per sample (``timer="kernel"``), aligned with ``node``; empty otherwise
    kernel_ms: list[float] = field(default_factory=list)
    #: host clock reading (ns) at the start of the first recorded run
    origin_ns: int | None = None

    @property
    def runs(self) -> int:
        return len(self.run_total_ms)


def append_marks(rec: Recording, timer: Timer, marks: list[tuple[str, Any, Any, int, int]], runs: list[int],
                 start: Any, host_start: int) -> None:
    """Turn raw ``(name, m0, m1, h0, h1)`` marks into samples of ``rec``, in bulk. Call only
    after the marks are readable (after ``timer.end_run()``). ``start``/``host_start`` are the
    marks the samples' ``start_ms``/``host_start_ms`` count from."""
    if not marks:
        return
    names, m0s, m1s, h0s, h1s = zip(*marks)
    count = len(names)
    rec.node.extend(names)
    rec.run.extend(runs)
    rec.time_ms.extend(timer.elapsed_ms_many(m0s, m1s))
    rec.start_ms.extend(timer.elapsed_ms_many((start,) * count, m0s))
    rec.host_ms.extend(((np.asarray(h1s, dtype=np.int64) - np.asarray(h0s, dtype=np.int64)) / 1e6).tolist())
    rec.host_start_ms.extend(((np.asarray(h0s, dtype=np.int64) - host_start) / 1e6).tolist())


class Recorder:
    """Run bookkeeping shared by every graph that runs inside one profiled run.

    ``begin_run`` takes the run's first mark; graphs add raw node marks with :attr:`append`;
    ``end_run`` takes the last mark, synchronizes once (``timer.end_run()``) and only then
    turns every mark into milliseconds. One recorder can serve several graphs (the pieces of
    a model split by graph breaks), so their nodes share one timeline and one run index.
    """

    def __init__(self, timer: Timer | None = None, node_ranges: bool = False):
        self.timer: Timer = timer if timer is not None else CpuTimer()
        #: wrap every node in a ``record_function("fxprof::<node>")`` range (for torch.profiler)
        self.node_ranges = node_ranges
        self.recording = Recording()
        self.active = False
        # One list for the life of the recorder, so graphs can bind its append once.
        self._marks: list[tuple[str, Any, Any, int, int]] = []
        #: ``append((name, m0, m1, h0, h1))``: record one node's raw marks in the current run
        self.append = self._marks.append
        self._start: Any = None
        self._host_start = 0

    def reset(self) -> None:
        """Forget every recorded run (used after warm-up)."""
        self.recording = Recording()

    def begin_run(self) -> None:
        self._marks.clear()
        self.timer.begin_run()
        self._start, self._host_start = self.timer.mark(), self.timer.host_ns()
        self.active = True

    def abort_run(self) -> None:
        """Drop the marks of a failed run. The device is allowed to settle, but a second
        (asynchronous CUDA) error from that synchronization never replaces the error that
        is on its way out."""
        self.active = False
        self._marks.clear()
        with contextlib.suppress(Exception):
            self.timer.end_run()

    def end_run(self) -> None:
        timer = self.timer
        host_end = timer.host_ns()
        end = timer.mark()
        timer.end_run()  # the one synchronization of the run
        self.active = False
        start, host_start = self._start, self._host_start
        rec = self.recording
        index = rec.runs
        if rec.origin_ns is None:
            rec.origin_ns = host_start
        append_marks(rec, timer, self._marks, [index] * len(self._marks), start, host_start)
        rec.run_total_ms.append(timer.elapsed_ms(start, end))
        rec.run_host_ms.append((host_end - host_start) / 1e6)
        rec.run_start_ms.append((host_start - rec.origin_ns) / 1e6)
        self._marks.clear()

    @contextlib.contextmanager
    def run(self) -> Iterator[None]:
        """One profiled run: ``begin_run``, then ``end_run`` if the body completed, else
        ``abort_run`` (a failed run leaves no partial samples)."""
        self.begin_run()
        try:
            yield
        except BaseException:
            self.abort_run()
            raise
        self.end_run()
