"""The recorder: raw timer marks of every node of every run, turned into a Recording's columns.

Two ways in, both converting nothing while the run is going:

- A compiled plan (:mod:`fxprof.measure.capture.interpreter`) writes its nodes' marks straight into
  preallocated buffers (:meth:`Recorder.plan_buffers`): a list of two slots a node per graph
  call, reused run after run (a store into a list slot is the cheapest write Python has:
  measured against an ``array('q')`` column, the 202-node chain ran at 1.05x the
  GraphModule instead of 1.11x). A plan's nodes and their order are fixed, so their ids are
  looked up once per recording, not per mark. Nothing per node is allocated in a run beyond
  the clock's own integers (no tuple, no list growth), so the garbage collector has nothing
  new to walk either.
- The generic loop (subclasses, ``torch.profiler`` ranges, ``initial_env``) and the training
  step hand over one raw ``(name, m0, m1, h0, h1)`` tuple per executed node (:attr:`Recorder.append`).

After the run's one synchronization point (``timer.end_run()``) the marks become milliseconds
in bulk (a few numpy operations per graph call) and land in the
:class:`~fxprof.core.recording.Recording`'s columns, in the order the nodes ran.
"""

from __future__ import annotations

import contextlib
import time
from typing import Any, Iterator, Sequence

import numpy as np

from ...core.recording import Recording
from .timers import CpuTimer, Timer

__all__ = ["Recorder", "Recording", "PlanSlots", "append_marks"]


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


#: the plain CPU clock's runs are written into the recording this many at a time (or sooner,
#: at :data:`_BATCH_SAMPLES` held-back samples, or whenever the recording is read)
_BATCH_RUNS = 64
_BATCH_SAMPLES = 1 << 18


class PlanSlots:
    """The nodes a compiled plan marks, in the order it marks them (slot ``k`` of a buffer
    holds node ``names[k // 2]``'s start mark at ``2k`` and end mark at ``2k + 1``)."""

    __slots__ = ("names", "__weakref__")

    def __init__(self, names: Sequence[str]):
        self.names = tuple(names)

    def __len__(self) -> int:
        return len(self.names)

    def __repr__(self) -> str:
        return f"<PlanSlots of {len(self.names)} nodes>"


class Recorder:
    """Run bookkeeping shared by every graph that runs inside one profiled run.

    ``begin_run`` takes the run's first mark; graphs write their node marks into
    :meth:`plan_buffers` (compiled plans) or add raw tuples with :attr:`append` (the generic
    loop); ``end_run`` takes the last mark, synchronizes once (``timer.end_run()``) and only
    then turns every mark into milliseconds. One recorder can serve several graphs (the pieces
    of a model split by graph breaks), so their nodes share one timeline and one run index.
    """

    def __init__(self, timer: Timer | None = None, node_ranges: bool = False):
        self.timer: Timer = timer if timer is not None else CpuTimer()
        #: wrap every node in a ``record_function("fxprof::<node>")`` range (for torch.profiler)
        self.node_ranges = node_ranges
        self.recording = Recording()
        self.active = False
        #: what watches each run from outside its marks (a :class:`~fxprof.measure.timing.contention.RunWatch`:
        #: the time the run lost to other processes, read right before its first mark and right after its last)
        self.watch: Any = None
        #: nodes that the graphs' plans give no mark of their own (event timers: they launch
        #: nothing, :mod:`fxprof.measure.timing.launches`), checked against the anatomy pass afterwards
        self.unmarked: set[str] = set()
        # One list for the life of the recorder, so graphs can bind its append once.
        self._marks: list[tuple[str, Any, Any, int, int]] = []
        #: ``append((name, m0, m1, h0, h1))``: record one node's raw marks in the current run
        self.append = self._marks.append
        self._start: Any = None
        self._host_start = 0
        timer = self.timer
        #: one clock for marks and host time (the CPU timer): a plan takes one reading each side
        self.one_clock = bool(getattr(timer, "shares_host_clock", False))
        # marks that are perf_counter_ns integers are converted with numpy alone; anything else
        # (CUDA events, a test's clock) by the timer, after the run
        self._ns_marks = getattr(timer, "mark", None) is time.perf_counter_ns
        self._ns_host = getattr(timer, "host_ns", None) is time.perf_counter_ns
        # the CPU timer as it is (no subclass converting marks its own way): columns are written
        # straight from the readings (Recording.add_clock_marks)
        self._plain_clock = (self.one_clock and self._ns_marks and self._ns_host
                             and type(timer).elapsed_ms_many is CpuTimer.elapsed_ms_many)
        #: this run's graph calls, in order: (marks appended before it, plan, mark buffer, host buffer)
        self._pieces: list[tuple[int, PlanSlots, Any, Any]] = []
        self._free: dict[PlanSlots, list[tuple[Any, Any]]] = {}
        self._ids: tuple[Recording | None, dict[PlanSlots, np.ndarray]] = (None, {})
        # completed runs of the plain CPU clock held back to be written many at once:
        # (plan, mark buffer, run, start reading), in order, for self._batch_rec
        self._batch: list[tuple[PlanSlots, Any, int, int]] = []
        self._batch_samples = 0
        self._batch_rec: Recording | None = None

    def reset(self) -> None:
        """Forget every recorded run (used after warm-up)."""
        self._settle()  # the old recording gets what it was owed, should anyone still hold it
        self.recording = Recording()

    def _settle(self) -> None:
        if self._batch_rec is not None:
            self._batch_rec._settled()

    def plan_buffers(self, plan: PlanSlots) -> tuple[Any, Any]:
        """Buffers for one call of ``plan`` in the current run: ``(marks, host)``, two slots a
        node each (``host`` is None with one clock). They come from a pool, so after the first
        run nothing is allocated; they are read at :meth:`end_run`."""
        free = self._free.get(plan)
        if free:
            marks, host = free.pop()
        else:
            size = 2 * len(plan)
            marks = [0] * size
            host = None if self.one_clock else [0] * size
        self._pieces.append((len(self._marks), plan, marks, host))
        return marks, host

    def begin_run(self) -> None:
        self._release()
        if self.watch is not None:
            self.watch.begin()
        self.timer.begin_run()
        if self.one_clock:  # one reading is both
            self._start = self._host_start = self.timer.mark()
        else:
            self._start, self._host_start = self.timer.mark(), self.timer.host_ns()
        self.active = True

    @property
    def start_mark(self) -> Any:
        """The current run's first mark (taken by :meth:`begin_run`)."""
        return self._start

    def abort_run(self) -> None:
        """Drop the marks of a failed run. The device is allowed to settle, but a second
        (asynchronous CUDA) error from that synchronization never replaces the error that
        is on its way out."""
        self.active = False
        if self.watch is not None:
            self.watch.abort()
        self._release()
        with contextlib.suppress(Exception):
            self.timer.end_run()

    def end_run(self, last: Any = None) -> None:
        """End the run. ``last``: a mark already taken after the run's last work, with nothing
        enqueued since (an event timer's last node boundary), used as the run's end mark
        instead of a new one."""
        timer = self.timer
        host_end = timer.host_ns()
        end = host_end if self.one_clock else (last if last is not None else timer.mark())
        if self.watch is not None:
            self.watch.end(self.recording, self.recording.runs)
        timer.end_run()  # the one synchronization of the run
        self.active = False
        start, host_start = self._start, self._host_start
        rec = self.recording
        if rec.origin_ns is None:
            rec.origin_ns = host_start
        run, marks, done = rec.runs, self._marks, 0
        pieces = self._pieces
        if self._plain_clock and len(pieces) == 1 and not marks and (self._batch_rec is None or self._batch_rec is rec):
            # the usual run (one graph, the CPU clock): held back, written with the next ones
            _, plan, mark_buf, _ = pieces.pop()
            self._plan_ids(rec, plan)  # names get their ids now, in the order they ran
            self._batch.append((plan, mark_buf, run, start))
            self._batch_samples += len(plan)
            self._batch_rec = rec
            rec.defer(len(plan), self._write_batch)
            rec.add_run(timer.elapsed_ms(start, end), (host_end - host_start) / 1e6, (host_start - rec.origin_ns) / 1e6)
            if len(self._batch) >= _BATCH_RUNS or self._batch_samples >= _BATCH_SAMPLES:
                rec._settled()
            return
        self._settle()  # held-back runs first: samples stay in the order they ran
        try:
            for before, plan, mark_buf, host_buf in self._pieces:  # in the order the nodes ran
                if before > done:
                    append_marks(rec, timer, marks[done:before], run, start, host_start)
                    done = before
                self._add_plan(rec, plan, mark_buf, host_buf, run, start, host_start)
            append_marks(rec, timer, marks[done:] if done else marks, run, start, host_start)
            rec.add_run(timer.elapsed_ms(start, end), (host_end - host_start) / 1e6, (host_start - rec.origin_ns) / 1e6)
        finally:
            self._release()

    def _write_batch(self) -> None:
        """Write the held-back runs into their recording: a few numpy operations for up to
        :data:`_BATCH_RUNS` runs of one graph, instead of for each run."""
        batch, rec = self._batch, self._batch_rec
        self._batch, self._batch_samples, self._batch_rec = [], 0, None
        first = 0
        while first < len(batch):
            plan = batch[first][0]
            last = first
            while last < len(batch) and batch[last][0] is plan:
                last += 1
            group, count = batch[first:last], len(plan)
            marks = np.array([buf for _, buf, _, _ in group], dtype=np.int64).reshape(-1, 2)
            runs = np.repeat(np.array([r for _, _, r, _ in group], dtype=np.int32), count)
            starts = np.repeat(np.array([s for _, _, _, s in group], dtype=np.int64), count)
            rec.add_clock_marks(np.tile(self._plan_ids(rec, plan), len(group)), runs, marks, starts, starts)
            self._free.setdefault(plan, []).extend((buf, None) for _, buf, _, _ in group)
            first = last

    def _release(self) -> None:
        """Return this run's buffers to the pool and forget its tuple marks."""
        for _, plan, mark_buf, host_buf in self._pieces:
            self._free.setdefault(plan, []).append((mark_buf, host_buf))
        self._pieces.clear()
        self._marks.clear()

    def _plan_ids(self, rec: Recording, plan: PlanSlots) -> np.ndarray:
        """The node ids of ``plan``'s slots in ``rec``, looked up once per recording."""
        owner, ids = self._ids
        if owner is not rec:
            ids = {}
            self._ids = (rec, ids)
        found = ids.get(plan)
        if found is None:
            found = ids[plan] = rec.intern(plan.names)
        return found

    def _add_plan(self, rec: Recording, plan: PlanSlots, mark_buf: Any, host_buf: Any, run: int, start: Any,
                  host_start: int) -> None:
        """One graph call's marks into ``rec``: a few numpy operations, no loop over nodes."""
        if self._plain_clock:
            rec.add_clock_marks(self._plan_ids(rec, plan), run, np.array(mark_buf, dtype=np.int64).reshape(-1, 2),
                                start, host_start)
            return
        timer = self.timer
        count = len(plan)
        if self._ns_marks:
            both = np.array(mark_buf, dtype=np.int64)
            m0, m1 = both[0::2], both[1::2]
            starts: Any = np.full(count, start, dtype=np.int64)
        else:
            m0, m1 = mark_buf[0::2], mark_buf[1::2]
            starts = (start,) * count
        if host_buf is None:  # one clock: the marks are the host readings
            h = np.asarray(mark_buf, dtype=np.int64) if not self._ns_marks else both
        else:
            h = np.array(host_buf, dtype=np.int64)
        h0 = h[0::2]
        rec.add(
            self._plan_ids(rec, plan),
            run,
            np.asarray(timer.elapsed_ms_many(m0, m1), dtype=np.float64),
            (h[1::2] - h0) / 1e6,
            np.asarray(timer.elapsed_ms_many(starts, m0), dtype=np.float64),
            (h0 - host_start) / 1e6,
        )

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
