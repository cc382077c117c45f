"""Contention: how much of each run this process spent waiting for a CPU that another process held.

A shared machine (a laptop, a CI runner, a server other jobs run on) takes CPU time away from
the profiled process in scheduler slices of a few milliseconds. The wall clock cannot tell that
from the model's own time: a run that lost 4 ms to another process just looks 4 ms slower, and
the time between nodes looks like the interpreter's. Linux tells it: every thread's
``/proc/self/task/TID/schedstat`` holds the time it spent runnable but waiting on a run queue
(``run_delay``). :class:`ContentionMeter` reads it before and after each run (outside every
node's marks) and keeps, per run, the time lost to other processes: the largest wait of any of
the process's threads in the run (the threads of one parallel region wait for each other, so
the run loses about the longest wait, not the sum). Where schedstat cannot be read (another
system, a kernel without scheduler statistics) it falls back on ``getrusage``: with involuntary
context switches in a run, the main thread's wall time not spent on a CPU.

The figures go to ``meta["contention"]`` (:meth:`ContentionMeter.describe`); what counts as a
busy run, and what the header says, is :mod:`fxprof.core.contention` (no torch).
"""

from __future__ import annotations

import os
import resource
import time
from typing import Any, Callable, TypeVar

from ..common.machine import machine_load, usable_cores

__all__ = ["ContentionMeter"]

T = TypeVar("T")


class _Waits:
    """The run-queue waits of this process's threads, read with one ``pread`` per thread on files
    opened once (about 0.6 us a thread: reading ``/proc`` afresh around a 0.1 ms compiled call
    cost it a third of its time, in cold caches)."""

    def __init__(self) -> None:
        self.fds: dict[str, int] = {}
        self.rescan()

    def rescan(self) -> None:
        """Open the threads started since the last scan, forget the ones that ended."""
        try:
            tids = set(os.listdir("/proc/self/task"))
        except OSError:
            return
        for tid in set(self.fds) - tids:
            self._close(tid)
        for tid in tids - set(self.fds):
            try:
                self.fds[tid] = os.open(f"/proc/self/task/{tid}/schedstat", os.O_RDONLY)
            except OSError:
                continue

    def _close(self, tid: str) -> None:
        fd = self.fds.pop(tid, None)
        if fd is not None:
            try:
                os.close(fd)
            except OSError:
                pass

    def read(self) -> dict[str, int]:
        """``{thread id: ns spent waiting on a run queue}``."""
        waits: dict[str, int] = {}
        for tid, fd in list(self.fds.items()):
            try:
                waits[tid] = int(os.pread(fd, 96, 0).split()[1])
            except (OSError, IndexError, ValueError):
                self._close(tid)  # a thread that ended
        return waits

    def close(self) -> None:
        for tid in list(self.fds):
            self._close(tid)

    def __del__(self) -> None:
        self.close()


def _schedstat_waits() -> dict[str, int] | None:
    """``{thread id: ns spent waiting on a run queue}`` for every thread of this process, read
    once from scratch, or None where the kernel keeps no scheduler statistics."""
    waits = _Waits()
    try:
        return waits.read() or None
    finally:
        waits.close()


class ContentionMeter:
    """Measures, around each call of :meth:`around`, the milliseconds the process lost to other
    processes; :attr:`lost_ms` keeps one value per measured call (in order), and the load
    average and usable cores are read at the start and at :meth:`describe`.

    ``source`` is ``"schedstat"`` (per-thread run-queue waits from the kernel), ``"rusage"``
    (involuntary switches and the main thread's CPU time) or ``""`` when neither can be read
    (then nothing is measured and :meth:`describe` says so by leaving the figures out)."""

    def __init__(self) -> None:
        self._waits = _Waits()
        self.source = "schedstat" if self._waits.read() else ("rusage" if hasattr(resource, "RUSAGE_THREAD") else "")
        self.load_start = machine_load()
        self.cores = usable_cores()
        self.lost_ms: list[float] = []
        #: the model's own (unprofiled) runs' lost time, where the caller measures them with this meter
        self.own_lost_ms: list[float] = []
        self._window: tuple[Any, int] | None = None

    # ------------------------------------------------------------------ one measurement
    def _snapshot(self) -> tuple[Any, int]:
        switches = resource.getrusage(resource.RUSAGE_SELF).ru_nivcsw
        if self.source == "schedstat":
            return self._waits.read(), switches
        if self.source == "rusage":
            return (time.perf_counter_ns(), time.thread_time_ns()), switches
        return None, switches

    def _lost(self, before: tuple[Any, int], after: tuple[Any, int]) -> tuple[float, int]:
        (a, s0), (b, s1) = before, after
        switches = max(0, s1 - s0)
        if self.source == "schedstat":
            waits = [b[t] - a[t] for t in b if t in a]
            return (max(waits) / 1e6 if waits else 0.0), switches
        if self.source == "rusage":
            wall, cpu = b[0] - a[0], b[1] - a[1]
            return (max(0.0, (wall - cpu) / 1e6) if switches else 0.0), switches
        return float("nan"), switches

    def around(self, call: Callable[[], T], into: list[float] | None = None,
               warm: Callable[[], Any] | None = None) -> T:
        """``call()``, with the time it lost to other processes appended to ``into`` (default
        :attr:`lost_ms`), also when it raises.

        ``warm``, where given, runs first inside the measured window, untimed: reading the
        scheduler's statistics takes syscalls that leave the next call's code and data cold (a
        0.1 ms compiled model read 8-11% slower right after a snapshot, 1% after one call
        between; docs/performance.md section 13). The window's lost time is then shared out in
        proportion: ``call`` is charged the part of it that its share of the window's wall time
        gives."""
        before = self._snapshot()
        t0 = time.perf_counter_ns()
        t1 = t0
        try:
            if warm is not None:
                warm()
                t1 = time.perf_counter_ns()
            return call()
        finally:
            t2 = time.perf_counter_ns()
            wall, own = (t2 - t0) / 1e6, (t2 - t1) / 1e6
            lost, _ = self._lost(before, self._snapshot())
            if warm is not None and wall > 0:
                lost *= own / wall
            (self.lost_ms if into is None else into).append(min(lost, own))  # a wait before the call began is not its

    def mark(self) -> tuple[tuple[Any, int], int]:
        """Where a call that is not a callable here begins (a forward pre-hook): give it to
        :meth:`lost_since` where it ends."""
        return self._snapshot(), time.perf_counter_ns()

    def lost_since(self, mark: tuple[tuple[Any, int], int]) -> float:
        """What the process lost to other processes since :meth:`mark` (ms), at most the time since."""
        before, t0 = mark
        wall = (time.perf_counter_ns() - t0) / 1e6
        return min(self._lost(before, self._snapshot())[0], wall)

    def rescan(self) -> None:
        """Take in the threads started since the meter was made (torch's pools start on first use)."""
        self._waits.rescan()

    def start_window(self) -> None:
        """Start measuring a whole window (the timed runs and everything between them); threads
        started since the meter was made (torch's pools start on first use) are taken in."""
        self._waits.rescan()
        self._window = self._snapshot()

    def window_lost_ms(self) -> float:
        """What the process lost to other processes since :meth:`start_window` (NaN if not started)."""
        if self._window is None:
            return float("nan")
        return self._lost(self._window, self._snapshot())[0]

    # ------------------------------------------------------------------ the record
    def describe(self, meta: dict[str, Any], lost_ms: list[float] | None = None, **extra: Any) -> dict[str, Any]:
        """``meta`` with ``meta["contention"]``: ``source``, ``load`` ([at start, now]), ``cores``,
        ``cpus`` (the machine's) and ``lost_ms``: what each timed run lost (default: each call
        :meth:`around` measured into :attr:`lost_ms`); ``extra`` adds more figures (the own
        runs' lost time, the window's)."""
        if not self.source:
            return meta
        found = dict(meta.get("contention") or {})
        found.update({
            "source": self.source,
            "load": [self.load_start, machine_load()],
            "cores": self.cores,
            "cpus": os.cpu_count() or self.cores,
            "lost_ms": [round(v, 6) for v in (self.lost_ms if lost_ms is None else lost_ms)],
        })
        for name, value in extra.items():
            found[name] = [round(v, 6) for v in value] if isinstance(value, list) else value
        return {**meta, "contention": found}
