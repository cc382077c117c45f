"""Training steps (``backward=True``) of a ``DistributedDataParallel`` model, with DDP's gradient
all-reduce as rows.

The step is captured as any training step is (:mod:`fxprof.measure.capture.training`); dynamo
splits a DDP model's graph at DDP's buckets (its ``DDPOptimizer``), and DDP's C++ reducer
all-reduces each bucket's gradients from autograd hooks during the backward, then waits for them
all at its end. :class:`DDPTrainingCapture` times that work
(:class:`fxprof.measure.distributed.ddp.TimedBuckets`) as rows of phase ``backward``, graph
``ddp``, both communication (``group_by("comm")``):

``ddp:bucket<k>_all_reduce``  kind ``all_reduce``: bucket ``k``'s all-reduce issued (the call on
                              autograd's thread; the collective then runs behind the backward's
                              compute), charged to the innermost module holding the bucket's
                              layers (its target names them)
``ddp:all_reduce_wait``       kind ``wait``: what the step still waited for its buckets after its
                              last backward graph and its last issue (0 when the collectives were
                              over by then), charged to the whole model

Only with a host clock (``timer="cpu"``): a bucket's completion is read on the thread that
completes it, which an event timer on a device stream cannot do. With another timer the rows are
left out and the profile's note says so.
"""

from __future__ import annotations

from typing import Any

from torch import nn

from ...core.nodes import NodeInfo
from ...vocab import DDP
from ..distributed.ddp import TimedBuckets, bucket_modules
from ..timing.recorder import Recorder
from .graph import ModulePaths
from .training import TrainingCapture, TrainingSession

__all__ = ["DDPTrainingCapture", "DDPRows", "DDP_GRAPH"]

#: the graph (node-name prefix) of DDP's rows
DDP_GRAPH = "ddp"


class DDPRows:
    """The rows of DDP's all-reduces in a step: a component of :class:`DDPTrainingCapture` and of
    the session's :class:`fxprof.measure.capture.ddp_loop.DDPLoopTrainingCapture`, given to the
    training capture they build on (its ``layout_rows``), which adds :attr:`nodes` to its own and
    passes its kept nodes through :meth:`nodes_in`. ``buckets`` times the all-reduces."""

    def __init__(self, model: nn.Module):
        self.model = model
        self.rows: dict[str, NodeInfo] = {}
        #: per bucket: (gradient values, the modules it holds), read again when the buckets change
        self.layers: list[tuple[int, list[str]]] | None = None
        self.buckets = TimedBuckets(model, lambda: 0)
        #: a timed run had a timer other than a host clock: no rows, said in the note
        self.unclocked = False

    @property
    def nodes(self) -> list[NodeInfo]:
        return list(self.rows.values())

    def nodes_in(self, kept: list[NodeInfo], note: str, recorded: set[str]) -> tuple[list[NodeInfo], str]:
        """The capture's ``kept`` nodes and ``note``, with the rows recorded and what the rows tell."""
        said = ""
        if self.unclocked:
            said = ("DDP's gradient all-reduce has no rows: they need a host clock (timer='cpu'); its time is in the "
                    "run's time outside every node")
        elif self.buckets.unavailable:
            said = f"DDP's gradient all-reduce could not be timed with this torch ({self.buckets.unavailable}): no rows"
        elif getattr(self.model, "_comm_hooks", None):
            said = ("DDP runs a comm hook of its own: its collectives are not timed (their time is in the run's time "
                    "outside every node)")
        if said:
            note = f"{note}; {said}" if note else said
        return kept + [info for name, info in self.rows.items() if name in recorded], note

    def add_rows(self, recorder: Recorder, taken: list[tuple[int, int, int, int]], backward_end: int) -> None:
        """Each bucket's issue, and the wait after ``backward_end`` (the last backward graph's end)."""
        if self.layers is None or [n for n, _ in self.layers] != [e[3] for e in taken]:  # DDP rebuilds its buckets
            self.layers = bucket_modules(self.model)  # after the first backward, in the order gradients became ready
        for k, (t0, t1, _, numel) in enumerate(taken):
            size, paths = self.layers[k] if k < len(self.layers) else (-1, [])
            paths = paths if size == numel else []  # a bucket DDP did not report as issued: no layers claimed
            held = f"{', '.join(p or '(root)' for p in paths[:4])}{', ...' if len(paths) > 4 else ''}" if paths else "?"
            self._row(recorder, f"bucket{k}_all_reduce", "all_reduce",
                      f"ddp.all_reduce(bucket {k}: {numel} gradient values of {held})", t0, t1, _common(paths))
        start = max(taken[-1][1], backward_end)
        end = max(start, max(t2 for _, _, t2, _ in taken))
        self._row(recorder, "all_reduce_wait", "wait", "ddp.wait(all buckets)", start, end, "")

    def _row(self, recorder: Recorder, name: str, kind: str, target: str, t0: int, t1: int, scope: str) -> None:
        full = f"{DDP_GRAPH}:{name}"
        recorder.append((full, t0, t1, t0, t1))
        self.rows[full] = NodeInfo(name=full, op="call_function", target=target, module_type="", scope=scope,
                                   range="", kind=kind, graph=DDP_GRAPH, phase="backward", role=DDP)


class _DDPSession(TrainingSession):
    """A training session that notes when its last backward graph ended (host clock)."""

    backward_end = 0
    clock: Any = None

    def run_graph(self, runner: Any, args: tuple) -> Any:
        out = super().run_graph(runner, args)
        if self.clock is not None and getattr(runner, "which", "") == "backward":
            self.backward_end = self.clock()
        return out


class DDPTrainingCapture(TrainingCapture):
    """A training step of a DDP model (see the module docs)."""

    def __init__(self, model: nn.Module, loss_fn: Any = None, optimizer: Any = None):
        super().__init__(model, loss_fn, optimizer, rows=DDPRows(model))
        self.session = _DDPSession(type(model))
        self.session.modules = ModulePaths(model)
        self.timing = False

    def backward(self, loss: Any, recorder: Recorder | None) -> None:
        """The backward with DDP's all-reduces timed (the reducer's group swapped for the backward
        only: DDP's forward, where dynamo traces, keeps its own), then their rows."""
        timer = recorder.timer if recorder is not None else None
        rows = self.layout_rows
        self.timing = bool(timer is not None and getattr(timer, "shares_host_clock", False))
        rows.unclocked = rows.unclocked or (recorder is not None and not self.timing)
        if not self.timing:  # an untimed pass, or a timer that is not a host clock: DDP exactly as it is
            loss.backward()
            return
        rows.buckets.clock = self.session.clock = timer.host_ns  # type: ignore[union-attr]
        self.session.backward_end = 0
        try:
            with rows.buckets:
                loss.backward()
        finally:
            taken = rows.buckets.take()  # a failed backward's too: none is left for the next run
            self.session.clock = None
        if recorder is not None and taken:
            rows.add_rows(recorder, taken, self.session.backward_end)


def _common(paths: list[str]) -> str:
    """The innermost module holding every path (``layers`` for ``layers.5`` and ``layers.2``)."""
    if not paths:
        return ""
    parts = paths[0].split(".") if paths[0] else []
    for path in paths[1:]:
        other = path.split(".") if path else []
        n = 0
        while n < min(len(parts), len(other)) and parts[n] == other[n]:
            n += 1
        parts = parts[:n]
    return ".".join(parts)
