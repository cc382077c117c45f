"""The profiling interpreter: runs a GraphModule node by node and times every node.

Per node, :meth:`ProfilingInterpreter.run_node` fetches the node's arguments first (untimed),
then takes a timer mark and a host clock reading, runs the node, and takes them again. Only
the raw marks are kept during the run; they are turned into milliseconds after the run's one
synchronization point (``timer.end_run()``), so the CUDA timer never stalls the host between
nodes.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Any, Iterator

import numpy as np
import torch
from torch import fx

from .bridge import RANGE_PREFIX

from .errors import NodeExecutionError, describe_value
from .nodes import target_name
from .timers import CpuTimer, Timer

__all__ = ["ProfilingInterpreter", "Recorder", "Recording", "append_marks"]


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


class ProfilingInterpreter(fx.Interpreter):
    """An ``fx.Interpreter`` that times every node of every run.

    Args:
        module: the ``GraphModule`` to run.
        timer: a :class:`~fxprof.timers.Timer`; defaults to the CPU clock.
        garbage_collect_values: free intermediate values once their last user ran (as eager
            execution would), passed to ``fx.Interpreter``.
        recorder: share a :class:`Recorder` with other graphs (default: a new one).
        prefix: prepended to node names in the recording (``"g1:"`` for a second graph).

    Every call of :meth:`run` appends one sample per executed node to :attr:`recording` and
    returns exactly what the module returns. Inside a run the recorder already began (another
    graph's caller opened it), nodes join that run. A node that raises is re-raised as
    :class:`~fxprof.errors.NodeExecutionError` naming the node, its op and target and what it
    received; runs that completed before stay in :attr:`recording`.
    """

    def __init__(
        self,
        module: fx.GraphModule,
        timer: Timer | None = None,
        garbage_collect_values: bool = True,
        recorder: Recorder | None = None,
        prefix: str = "",
    ):
        super().__init__(module, garbage_collect_values=garbage_collect_values)
        self.recorder = recorder if recorder is not None else Recorder(timer)
        self.timer: Timer = self.recorder.timer
        self.prefix = prefix
        # Everything the timed path needs, looked up once: names, clocks, the append.
        self._names = {n: prefix + n.name for n in module.graph.nodes}
        self._mark = self.timer.mark
        self._host_ns = self.timer.host_ns
        self._append = self.recorder.append
        if self.recorder.node_ranges:  # only then: the plain path stays as short as it is
            self.run_node = self._run_node_in_range  # type: ignore[method-assign]
        # The graph position is already in our error message; torch.fx's own
        # "While executing ..." suffix would repeat it.
        self.extra_traceback = False

    @property
    def recording(self) -> Recording:
        return self.recorder.recording

    def reset(self) -> None:
        """Forget every recorded run (used after warm-up)."""
        self.recorder.reset()

    def run(self, *args: Any, **kwargs: Any) -> Any:
        if self.recorder.active:
            return super().run(*args, **kwargs)
        with self.recorder.run():
            return super().run(*args, **kwargs)

    def run_node(self, n: fx.Node) -> Any:
        set_current = getattr(self, "_set_current_node", None)
        with set_current(n) if set_current is not None else contextlib.nullcontext():
            args, kwargs = self.fetch_args_kwargs_from_env(n)
            method = getattr(self, n.op)
            mark, host_ns = self._mark, self._host_ns
            m0 = mark()
            h0 = host_ns()
            try:
                result = method(n.target, args, kwargs)
            except Exception as exc:
                raise _node_error(n, args, kwargs, exc) from exc
            h1 = host_ns()
            m1 = mark()
            self._append((self._names[n], m0, m1, h0, h1))
            return result


    def _run_node_in_range(self, n: fx.Node) -> Any:
        # The range opens before the first mark and closes after the last, so its own cost
        # (about 10 us of host time) stays out of the node's time.
        with torch.profiler.record_function(RANGE_PREFIX + self._names[n]):
            return ProfilingInterpreter.run_node(self, n)


def _node_error(n: fx.Node, args: tuple, kwargs: dict, exc: Exception) -> NodeExecutionError:
    if isinstance(exc, NodeExecutionError):  # raised by a nested interpreter: keep it
        return exc
    inputs = [f"arg{i}: {describe_value(a)}" for i, a in enumerate(args)]
    inputs += [f"{k}: {describe_value(v)}" for k, v in kwargs.items()]
    target = target_name(n)
    lines = [
        f"node {n.name!r} ({n.op} {target}) raised {type(exc).__name__}: {str(exc).strip()}",
        f"it received {', '.join(inputs)}" if inputs else "it received no arguments",
        "check that the inputs have the shapes, dtypes and devices the model expects "
        "(and match the example used for tracing)",
    ]
    if "CUDA" in str(exc) or "cuda" in " ".join(inputs):
        lines.append(
            "CUDA reports kernel errors asynchronously, so the failing kernel may belong to an "
            "earlier node: re-run with timer='sync' or CUDA_LAUNCH_BLOCKING=1 to pin it down"
        )
    return NodeExecutionError("\n".join(lines), node=n.name, op=n.op, target=target, inputs=inputs)
