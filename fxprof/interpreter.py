"""The profiling interpreter: runs a GraphModule node by node and times every node.

Per node, :meth:`ProfilingInterpreter.run_node` fetches the node's arguments first (untimed),
then takes a timer mark and a host clock reading, runs the node, and takes them again. Only
the raw marks are kept during the run; they are turned into milliseconds after the run's one
synchronization point (``timer.end_run()``), so the CUDA timer never stalls the host between
nodes.
"""

from __future__ import annotations

import contextlib
from typing import Any

import torch
from torch import fx

from .bridge import RANGE_PREFIX
from .errors import NodeExecutionError, describe_value
from .nodes import target_name
from .recording import Recorder, Recording, append_marks
from .timers import Timer

__all__ = ["ProfilingInterpreter", "Recorder", "Recording", "append_marks"]


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
