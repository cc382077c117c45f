"""The recorder: raw timer marks of every node of every run, turned into a Recording's columns.

The interpreter hands the recorder one raw ``(name, m0, m1, h0, h1)`` tuple per executed node
(timer marks and host clock readings); nothing is converted while the run is going. After the
run's one synchronization point (``timer.end_run()``) the marks become milliseconds in bulk and
land in the :class:`~fxprof.core.recording.Recording`'s columns.
"""

from __future__ import annotations

import contextlib
from typing import Any, Iterator

import numpy as np

from ..core.recording import Recording
from .timers import CpuTimer, Timer

__all__ = ["Recorder", "Recording", "append_marks"]


def append_marks(rec: Recording, timer: Timer, marks: list[tuple[str, Any, Any, int, int]], runs: Any,
                 start: Any, host_start: int) -> None:
    """Turn raw ``(name, m0, m1, h0, h1)`` marks into samples of ``rec``, in bulk. Call only
    after the marks are readable (after ``timer.end_run()``). ``runs`` is the run index of
    every mark (a sequence, or one int for all); ``start``/``host_start`` are the marks the
    samples' ``start_ms``/``host_start_ms`` count from."""
    if not marks:
        return
    names, m0s, m1s, h0s, h1s = zip(*marks)
    count = len(names)
    h0 = np.asarray(h0s, dtype=np.int64)
    rec.add(
        rec.intern(names),
        runs if isinstance(runs, (int, np.integer)) else np.asarray(runs, dtype=np.int32),
        np.asarray(timer.elapsed_ms_many(m0s, m1s), dtype=np.float64),
        (np.asarray(h1s, dtype=np.int64) - h0) / 1e6,
        np.asarray(timer.elapsed_ms_many((start,) * count, m0s), dtype=np.float64),
        (h0 - host_start) / 1e6,
    )


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
        if rec.origin_ns is None:
            rec.origin_ns = host_start
        append_marks(rec, timer, self._marks, rec.runs, start, host_start)
        rec.add_run(timer.elapsed_ms(start, end), (host_end - host_start) / 1e6, (host_start - rec.origin_ns) / 1e6)
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
