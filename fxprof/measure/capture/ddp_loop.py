"""A session's training steps (``fxprof.session(model, backward=True)``) of a ``DistributedDataParallel``
model, with DDP's gradient all-reduce as rows (as :mod:`fxprof.measure.capture.ddp_training` adds them
to ``fxprof.profile``).

What a loop changes, and how this module meets it:

* **The backward is the loop's own** ``loss.backward()``: the reducer's process group is swapped
  for the timing wrapper (:class:`fxprof.measure.distributed.ddp.TimedBuckets`) when a timed run's
  first backward graph starts (DDP issues its buckets after the graphs that produce their
  gradients; DDP's forward, which dynamo traces, never sees the wrapper), and given back when the
  run ends or is dropped, and when the session ends.
* **DDP waits for its buckets after the last backward graph**, in a final callback of autograd's
  that it queues when its last bucket is issued. The run therefore ends in a final callback of its
  own queued from one queued at the last backward graph: callbacks queued while callbacks run come
  after them, so after DDP's.
* With a timer other than the host clock the loop runs DDP as it is, and the note says so.
"""

from __future__ import annotations

import contextlib
from typing import Any, Callable

import torch
from torch import nn

from .ddp_training import DDPRows
from .training import ACTIVE
from .training_loop import LoopSession, LoopTrainingCapture

__all__ = ["DDPLoopTrainingCapture"]


def _in_backward() -> bool:
    return torch._C._current_graph_task_id() != -1


class _DDPLoopSession(LoopSession):
    """A loop's training session whose timed runs time DDP's all-reduces and end after DDP's wait."""

    def __init__(self, model_type: type, capture: "DDPLoopTrainingCapture"):
        super().__init__(model_type)
        self.capture = capture
        self.backward_end = 0
        self._queued = False

    def _clocked(self) -> bool:
        recorder = self.recorder
        return bool(recorder is not None and recorder.active and getattr(recorder.timer, "shares_host_clock", False))

    def begin(self) -> None:
        super().begin()
        self._queued = False
        self.backward_end = 0

    def run_graph(self, runner: Any, args: tuple) -> Any:
        if runner.which == "backward" and self.waiting is not None and self.waiting.get(id(runner.pair)):
            if self._clocked():
                self.capture.swap(self.recorder.timer.host_ns)  # type: ignore[union-attr]
            elif self.recorder is not None and self.recorder.active:
                self.capture.layout_rows.unclocked = True
            out = super().run_graph(runner, args)
            if self.capture.swapped:
                self.backward_end = self.recorder.timer.host_ns()  # type: ignore[union-attr]
            return out
        return super().run_graph(runner, args)

    def end_run(self) -> None:
        if self.waiting is None:
            return
        if self.capture.swapped and _in_backward():  # DDP's wait for its buckets comes in a final callback
            if not self._queued:
                self._queued = True
                from torch.autograd import Variable

                Variable._execution_engine.queue_callback(self._queue_after)
            return
        self._end()

    def _queue_after(self) -> None:
        from torch.autograd import Variable

        Variable._execution_engine.queue_callback(self._after_backward)  # runs after DDP's, queued before this ran

    def _after_backward(self) -> None:
        if self._queued:
            self._end()

    def _end(self) -> None:
        self._queued = False
        taken = self.capture.give_back()
        recorder = self.recorder
        if taken and recorder is not None and recorder.active:
            self.capture.layout_rows.add_rows(recorder, taken, self.backward_end)
        super().end_run()

    def abort_run(self) -> None:
        self._queued = False
        self.capture.give_back()
        super().abort_run()


class DDPLoopTrainingCapture(LoopTrainingCapture):
    """The training steps of a session's loop on a DDP model (see the module docs)."""

    def __init__(self, model: nn.Module, forward: Callable[..., Any]):
        super().__init__(model, forward, rows=DDPRows(model))
        self.buckets = self.layout_rows.buckets
        self.swapped = False
        self.run_span = ("from the forward's start to the end of DDP's wait for its gradient all-reduces (after the "
                         "last backward graph)")
        root_name, paths = self.session.root_name, self.session.modules
        self._activation.close()  # type: ignore[union-attr]
        self.session.close()
        self.session = _DDPLoopSession(type(model), self)
        self.session.root_name, self.session.modules = root_name, paths
        self._activation = contextlib.ExitStack()
        self._activation.enter_context(ACTIVE.active(self.session))

    def swap(self, clock: Callable[[], int]) -> None:
        """The reducer's all-reduces timed with ``clock`` from now until :meth:`give_back`."""
        if not self.swapped:
            self.buckets.clock = clock
            self.buckets.__enter__()
            self.swapped = True

    def give_back(self) -> list[tuple[int, int, int, int]]:
        """The reducer's own process group back; the all-reduces timed since :meth:`swap`."""
        if not self.swapped:
            return []
        self.swapped = False
        self.buckets.__exit__(None, None, None)
        return self.buckets.take()

    def close(self) -> None:
        try:
            self.give_back()
        finally:
            super().close()
