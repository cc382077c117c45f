"""Contention: how much of each run the threads that did its work spent waiting for a CPU that
another process held.

A shared machine (a laptop, a CI runner, a server other jobs run on) takes CPU time away from
the profiled process in scheduler slices of a few milliseconds. The wall clock cannot tell that
from the model's own time: a run that lost 4 ms to another process just looks 4 ms slower, and
the time between nodes looks like the interpreter's. :class:`ContentionMeter` reads, before and
after each run (outside every node's marks), two clocks the kernel keeps per thread:

- the thread's **CPU time** (``time.thread_time_ns`` for the thread that runs the model: exact to
  the nanosecond; ``/proc/self/task/TID/schedstat``'s first field for the others), so a thread's
  **time off the CPU** in the run is its wall time less its CPU time;
- the time it spent **runnable but waiting on a run queue** (schedstat's ``run_delay``).

A run's lost time is the largest run-queue wait of a thread that ran in it, each thread's
wait bounded by its own time off the CPU, and the whole bounded by the calling thread's time off
the CPU (``wall - thread CPU time``): a thread that never left the CPU lost nothing, and a run
cannot have lost more than the time its calling thread spent off the CPU. Both bounds matter:
on a virtual machine at load 10-20 a thread's ``run_delay`` grew by 8-40 ms over 1.1-1.6 ms
forwards that never left the CPU (shared/FACTS.md, seventh round), and the idle threads of
torch's pool wait on run queues while the run does not wait for them. Proved against an
independent ground truth (the competing processes' own record of when they ran) in
``tests/benchmarks/contention_truth.py``; the table is in docs/methodology.md.

Where schedstat cannot be read (another system, a kernel without scheduler statistics) the meter
falls back on ``getrusage``: with involuntary context switches in a run, the calling thread's
time off the CPU.

The figures go to ``meta["contention"]`` (:meth:`ContentionMeter.describe`); what counts as a
busy run, and what the header says, is :mod:`fxprof.core.contention` (no torch).
"""

from __future__ import annotations

import os
import resource
import threading
import time
from typing import Any, Callable, TypeVar

from ..common.machine import machine_load, usable_cores

__all__ = ["ContentionMeter", "RunWatch", "Snapshot", "lost_between", "clock_excludes_other_processes", "cpu_clock_record"]

T = TypeVar("T")

#: the clocks that count only this thread's or process's CPU time: a timer reading one of them
#: holds no time lost to other processes, so its runs are never called busy nor corrected
_CPU_CLOCKS = frozenset({time.thread_time_ns, time.thread_time, time.process_time_ns, time.process_time})


def clock_excludes_other_processes(timer: Any) -> bool:
    """Whether ``timer`` (a fxprof ``Timer``) reads a CPU-time clock (its ``host_ns`` or ``mark``
    is this thread's or process's CPU clock), or says so itself (``excludes_other_processes``):
    time lost to other processes never enters its figures."""
    said = getattr(timer, "excludes_other_processes", None)
    if said is not None:
        return bool(said)
    return any(getattr(timer, name, None) in _CPU_CLOCKS for name in ("host_ns", "mark"))


def cpu_clock_record() -> dict[str, Any]:
    """``meta["contention"]`` of runs timed on a CPU-time clock: the load and cores, and
    ``clock: "cpu"`` in place of lost times (:mod:`fxprof.core.contention` says so)."""
    return {"clock": "cpu", "load": [machine_load()], "cores": usable_cores(), "cpus": os.cpu_count() or usable_cores()}


class _Threads:
    """The CPU time and run-queue wait of this process's threads, read with one ``pread`` per
    thread on files opened once (about 0.6 us a thread: reading ``/proc`` afresh around a 0.1 ms
    compiled call cost it a third of its time, in cold caches)."""

    def __init__(self) -> None:
        self.fds: dict[int, int] = {}
        self.rescan()

    def rescan(self) -> None:
        """Open the threads started since the last scan, forget the ones that ended."""
        try:
            tids = {int(t) for t in os.listdir("/proc/self/task")}
        except OSError:
            return
        for tid in set(self.fds) - tids:
            self._close(tid)
        for tid in tids - set(self.fds):
            try:
                self.fds[tid] = os.open(f"/proc/self/task/{tid}/schedstat", os.O_RDONLY)
            except OSError:
                continue

    def _close(self, tid: int) -> None:
        fd = self.fds.pop(tid, None)
        if fd is not None:
            try:
                os.close(fd)
            except OSError:
                pass

    def read(self) -> dict[int, tuple[int, int]]:
        """``{thread id: (ns on a CPU, ns waiting on a run queue)}``."""
        found: dict[int, tuple[int, int]] = {}
        for tid, fd in list(self.fds.items()):
            try:
                fields = os.pread(fd, 96, 0).split()
                found[tid] = (int(fields[0]), int(fields[1]))
            except (OSError, IndexError, ValueError):
                self._close(tid)  # a thread that ended
        return found

    def close(self) -> None:
        for tid in list(self.fds):
            self._close(tid)

    def __del__(self) -> None:
        self.close()


#: one reading: (wall ns, the calling thread's id, its CPU ns, every thread's (CPU ns, wait ns)
#: or None, the process's involuntary context switches: 0 where every thread's waits were read)
Snapshot = tuple[int, int, int, "dict[int, tuple[int, int]] | None", int]


def lost_between(before: Snapshot, after: Snapshot) -> float:
    """The milliseconds lost to other processes between two snapshots taken on one thread: the
    largest run-queue wait of any thread that was on a CPU in between (each at most its own time
    off the CPU), at most the calling thread's time off the CPU; without per-thread waits, the
    calling thread's time off the CPU where it was switched out involuntarily, else 0."""
    wall = after[0] - before[0]
    off = wall - (after[2] - before[2]) if after[1] == before[1] else wall
    off = max(off, 0)
    a, b = before[3], after[3]
    if a is None or b is None:
        return off / 1e6 if after[4] > before[4] else 0.0
    waits = [0]
    for tid, (cpu, wait) in b.items():
        old = a.get(tid)
        if old is None:
            continue
        ran = cpu - old[0]
        if ran <= 0 and tid != after[1]:
            continue  # a thread that never ran held nothing up (torch's idle pool waits on queues too)
        waits.append(min(wait - old[1], max(wall - ran, 0)))
    return max(0, min(max(waits), off)) / 1e6


def _off_ms(before: Snapshot, after: Snapshot) -> float:
    """The calling thread's time off the CPU between two snapshots (ms; the whole time if the
    thread changed)."""
    wall = after[0] - before[0]
    return max(wall - (after[2] - before[2]) if after[1] == before[1] else wall, 0) / 1e6


class ContentionMeter:
    """Measures, around each call of :meth:`around`, the milliseconds the calling thread's run
    lost to other processes (:func:`lost_between`); :attr:`lost_ms` keeps one value per measured
    call (in order), and the load average and usable cores are read at the start and at
    :meth:`describe`. :attr:`windows`, where a harness sets it to a list, keeps each measured call's start and
    end (``time.perf_counter_ns``) beside what it was charged, for checking the meter against a
    ground truth (tests/benchmarks/contention_truth.py).

    ``source`` is ``"schedstat"`` (per-thread CPU time and run-queue waits from the kernel),
    ``"rusage"`` (involuntary switches and the calling thread's CPU time) or ``""`` when neither
    can be read (then nothing is measured and :meth:`describe` says so by leaving the figures
    out)."""

    def __init__(self) -> None:
        self._threads = _Threads()
        self.source = "schedstat" if self._threads.read() else ("rusage" if hasattr(resource, "RUSAGE_THREAD") else "")
        self.load_start = machine_load()
        self.cores = usable_cores()
        self.lost_ms: list[float] = []
        #: the model's own (unprofiled) runs' lost time, where the caller measures them with this meter
        self.own_lost_ms: list[float] = []
        #: (start ns, end ns, lost ms, ``id`` of the list the value went to; 0 for :meth:`lost_since`,
        #: -1 for a recorder's run read by a :class:`RunWatch`, -2 for a whole window
        #: (:meth:`window_since`); the calling thread's ms off the CPU)
        #: of every measured call, in order; None (the default): not kept, a harness that holds the
        #: meter against a ground truth sets a list (a long session would otherwise grow it every run)
        self.windows: list[tuple[int, int, float, int, float]] | None = None
        self._window: Snapshot | None = None

    # ------------------------------------------------------------------ one measurement
    def _snapshot(self, end: bool = False) -> Snapshot:
        """One reading. The calling thread's two clocks are read next to each other, on the side
        of the syscalls nearest the measured call (last before it, first after it): a process that
        has used up its slice is switched out at a syscall, and a wait there lies outside the
        call's window and must stay outside its time off the CPU, which bounds what it is charged."""
        if end:
            wall, cpu = time.perf_counter_ns(), time.thread_time_ns()
            threads = self._threads.read() if self.source == "schedstat" else None
            return wall, threading.get_native_id(), cpu, threads, self._switches(threads)
        threads = self._threads.read() if self.source == "schedstat" else None
        switches = self._switches(threads)
        tid = threading.get_native_id()
        cpu = time.thread_time_ns()
        return time.perf_counter_ns(), tid, cpu, threads, switches

    @staticmethod
    def _switches(threads: dict[int, tuple[int, int]] | None) -> int:
        """The process's involuntary context switches, read only where there are no per-thread
        waits (:func:`lost_between` reads them only then): a syscall less on each side of a run."""
        return 0 if threads is not None else resource.getrusage(resource.RUSAGE_SELF).ru_nivcsw

    def _lost(self, before: Snapshot, after: Snapshot) -> float:
        if not self.source:
            return float("nan")
        return lost_between(before, after)

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
        t1, c1 = before[0], before[2]
        try:
            if warm is not None:
                warm()
                c1, t1 = time.thread_time_ns(), time.perf_counter_ns()  # two clock reads, no /proc
            return call()
        finally:
            after = self._snapshot(end=True)
            own = (after[0] - t1) / 1e6
            lost, off = self._lost(before, after), _off_ms(before, after)
            if warm is not None and after[1] == before[1]:
                # the call's own time off the CPU bounds what it lost: the window's waits may have
                # fallen in the warm-up call (a share in proportion read 0.1 off the truth)
                off = max(own - (after[2] - c1) / 1e6, 0.0)
                lost = min(lost, off)
            lost = min(lost, own)  # a wait before the call began is not its
            target = self.lost_ms if into is None else into
            target.append(lost)
            if self.windows is not None:
                self.windows.append((t1, after[0], lost, id(target), off))

    def mark(self) -> Snapshot:
        """Where a call that is not a callable here begins (a forward pre-hook): give it to
        :meth:`lost_since` where it ends, on the same thread."""
        return self._snapshot()

    def lost_since(self, mark: Snapshot) -> float:
        """What the run since :meth:`mark` lost to other processes (ms), at most the time since."""
        after = self._snapshot(end=True)
        lost = min(self._lost(mark, after), (after[0] - mark[0]) / 1e6)
        if self.windows is not None:
            self.windows.append((mark[0], after[0], lost, 0, _off_ms(mark, after)))
        return lost

    def rescan(self) -> None:
        """Take in the threads started since the meter was made (torch's pools start on first use)."""
        self._threads.rescan()

    def start_window(self) -> Snapshot:
        """Start measuring a whole window (the timed runs and everything between them); threads
        started since the meter was made (torch's pools start on first use) are taken in. The
        reading is kept for :meth:`window_lost_ms` and returned for :meth:`window_since`."""
        self._threads.rescan()
        self._window = self._snapshot()
        return self._window

    def window_since(self, mark: Snapshot) -> tuple[float, float]:
        """``(ms lost to other processes, wall ms)`` over the window since ``mark`` (a
        :meth:`start_window` or :meth:`mark` reading on this thread): what the process lost
        between the runs as well as in them (:func:`fxprof.core.contention.shared_window`); kept
        in :attr:`windows` (tag -2) where a harness holds the meter against a ground truth. The
        figures are NaN without per-thread run-queue waits: ``getrusage``'s fallback counts a
        thread's whole time off the CPU, which over a long window holds its sleeps and syncs."""
        if self.source != "schedstat":  # getrusage's fallback would count every sleep and sync of a long window
            return float("nan"), float("nan")
        after = self._snapshot(end=True)
        wall = (after[0] - mark[0]) / 1e6
        lost = min(self._lost(mark, after), wall)
        if self.windows is not None:
            self.windows.append((mark[0], after[0], lost, -2, _off_ms(mark, after)))
        return lost, wall

    def window_lost_ms(self) -> tuple[float, float]:
        """:meth:`window_since` the :meth:`start_window` reading; ``(NaN, NaN)`` if not started."""
        if self._window is None:
            return float("nan"), float("nan")
        return self.window_since(self._window)

    # ------------------------------------------------------------------ the record
    def describe(self, meta: dict[str, Any], lost_ms: list[float] | None = None, **extra: Any) -> dict[str, Any]:
        """``meta`` with ``meta["contention"]``: ``source``, ``load`` ([at start, now]), ``cores``,
        ``cpus`` (the machine's) and ``lost_ms``: what each timed run lost (default: each call
        :meth:`around` measured into :attr:`lost_ms`); ``extra`` adds more figures (the own
        runs' lost time, the window's; a NaN is left out: not measured)."""
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
            if isinstance(value, float) and value != value:
                continue  # not measured (a window with a compile in it, or without scheduler statistics)
            found[name] = [round(v, 6) for v in value] if isinstance(value, list) else value
        return {**meta, "contention": found}


class RunWatch:
    """A :class:`ContentionMeter` hooked on a :class:`~fxprof.measure.timing.recorder.Recorder`
    (``recorder.watch``): a snapshot right before each run's first mark and right after its last,
    so what a run is charged is measured over the run itself, not over the call around it (a
    session's dynamo-captured decode step ran 1.3 ms inside a 7 ms call, and was charged what the
    whole call lost; a training step's run ends after the loop's backward, which a window around
    the forward left out). Only runs of the recordings given to :meth:`track` are kept; two
    stretches of one run (a run joined over several forwards) add up."""

    def __init__(self, meter: ContentionMeter) -> None:
        self.meter = meter
        self._tracked: dict[int, Any] = {}
        self._lost: dict[tuple[int, int], float] = {}
        self._before: Snapshot | None = None

    def track(self, recording: Any) -> None:
        self._tracked[id(recording)] = recording

    def begin(self) -> None:
        self._before = self.meter._snapshot() if self.meter.source else None

    def abort(self) -> None:
        self._before = None

    def end(self, recording: Any, run: int) -> None:
        before, self._before = self._before, None
        if before is None or self._tracked.get(id(recording)) is not recording:
            return
        after = self.meter._snapshot(end=True)
        lost = min(self.meter._lost(before, after), (after[0] - before[0]) / 1e6)
        key = (id(recording), run)
        self._lost[key] = self._lost.get(key, 0.0) + lost
        if self.meter.windows is not None:
            self.meter.windows.append((before[0], after[0], lost, -1, _off_ms(before, after)))

    def lost_of(self, recording: Any) -> list[float]:
        """What each run of ``recording`` lost (ms), in run order, 0 for a run not watched, each at
        most the run's own time on the host clock (``recording.run_host_ms``): a run joined over
        several stretches (a training step's, read through the loop's backward) adds what each
        stretch lost, and beside three busy loops per core that sum charged a 2.8 ms run 11.9 ms
        (tests/measure/test_busy.py). The recording is no longer watched after (a session's watch
        would keep every cycle's alive)."""
        key = id(recording)
        found = [self._lost.pop((key, i), 0.0) for i in range(recording.runs)]
        for i, own in enumerate(recording.run_host_ms[:len(found)]):
            if own >= 0:  # not NaN
                found[i] = min(found[i], float(own))
        self._tracked.pop(key, None)
        for k in [k for k in self._lost if k[0] == key]:
            del self._lost[k]
        return found
