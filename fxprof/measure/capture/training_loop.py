"""Training inside the user's loop: the forward graph timed when the model is called, the
backward graph timed when the user's ``loss.backward()`` runs it, both in one run.

:class:`fxprof.measure.session.session.Session` with ``backward=True`` captures the model's forward with
fxprof's training backend (``torch.compile`` + AOTAutograd, as :mod:`fxprof.measure.capture.training`
does for ``fxprof.profile(..., backward=True)``), but without a loss or an optimizer of its own:
the user's loop computes the loss and calls ``backward()``. A run begins when the forward starts
and ends when the backward graph of every forward graph that ran has finished (or, when no
backward comes, at the next forward or ``step()``). The run's total therefore includes the
user's loss and whatever the loop did between forward and backward: that is outside every node
(lower coverage), never inside one.
"""

from __future__ import annotations

import contextlib
import inspect
from typing import Any, Callable

import torch
from torch import nn

from ...core.nodes import NodeInfo
from ..common.tree import tensors_in
from ..distributed.ddp import bucket_limit_error
from ..timing.recorder import Recorder
from .captures import Capture
from .graph import ModulePaths
from .training import ACTIVE, TrainingGraphRunner, TrainingSession, training_backend

__all__ = ["LoopTrainingCapture"]


class LoopSession(TrainingSession):
    """The training session of a loop: it keeps a run open until the backward graphs of the
    forward graphs that ran in it have run."""

    def __init__(self, model_type: type):
        super().__init__(model_type)
        #: backward executions still owed in the open run, per forward graph (pair): a graph that
        #: ran twice (two forwards feeding one loss) owes two; None: no open run
        self.waiting: dict[int, int] | None = None
        #: graph executions of the open run, and of the last run that ended: (forward, backward)
        self.counts = [0, 0]
        self.last_counts: tuple[int, int] = (0, 0)

    def begin(self) -> None:
        self.waiting = {}
        self.counts = [0, 0]

    def run_graph(self, runner: TrainingGraphRunner, args: tuple) -> Any:
        if runner.which == "backward" and (self.waiting is None or not self.waiting.get(id(runner.pair))):
            self.label(runner)  # described, but a backward outside a run is not timed
            return runner.gm(*args)
        out = super().run_graph(runner, args)
        if self.waiting is not None:
            key = id(runner.pair)
            if runner.which == "forward":
                self.counts[0] += 1
                self.waiting[key] = self.waiting.get(key, 0) + 1
            else:
                self.counts[1] += 1
                self.waiting[key] -= 1
                if not any(self.waiting.values()):
                    self.end_run()
        return out

    def end_run(self) -> None:
        """End the open run (its samples are kept)."""
        if self.waiting is None:
            return
        self.waiting = None
        self.last_counts = (self.counts[0], self.counts[1])
        if self.recorder is not None and self.recorder.active:
            self.recorder.end_run()

    def abort_run(self) -> None:
        if self.waiting is None:
            return
        self.waiting = None
        if self.recorder is not None and self.recorder.active:
            self.recorder.abort_run()


def _first_parameter(forward: Any) -> str:
    """The name of a forward's first parameter (``self`` by convention, not by rule)."""
    try:
        return next(iter(inspect.signature(forward).parameters), "self")
    except (TypeError, ValueError):
        return "self"


class LoopTrainingCapture(Capture):
    """The model's forward compiled for training (forward and backward graphs from
    AOTAutograd), run by the user's loop. Node names: ``fw0:...``, ``bw0:...``; the ``phase``
    column says ``forward`` or ``backward``."""

    kind = "aot"

    def __init__(self, model: nn.Module, forward: Callable[..., Any], rows: Any = None):
        super().__init__("backward=True: forward and backward graphs from AOTAutograd (torch.compile), "
                         "the backward timed inside the loop's own loss.backward()")
        if not any(p.requires_grad for p in model.parameters()):
            raise ValueError(f"{type(model).__name__} has no parameter that requires grad, so backward=True has nothing "
                             f"to time in a backward; unfreeze parameters (p.requires_grad_(True)) or use backward=False")
        self.model = model
        #: the rows a parallel layout's own work adds (as in :class:`fxprof.measure.capture.training.TrainingCapture`)
        self.layout_rows = rows
        self.compiled = torch.compile(forward, backend=training_backend)
        self.session = LoopSession(type(model))
        self.session.root_name = _first_parameter(type(model).forward)
        self.session.modules = ModulePaths(model)
        self._activation: contextlib.ExitStack | None = contextlib.ExitStack()
        self._activation.enter_context(ACTIVE.active(self.session))  # the runners dispatch here until the session ends

    @property
    def nodes(self) -> list[NodeInfo]:
        return list(self.session.nodes) + (self.layout_rows.nodes if self.layout_rows is not None else [])

    def nodes_in(self, recorded: set[str]) -> tuple[list[NodeInfo], str]:
        ran = {n.graph for n in self.session.nodes if n.name in recorded}
        kept = [n for n in self.session.nodes if n.graph in ran]
        dropped = sorted({n.graph for n in self.session.nodes} - ran)
        note = f"graphs compiled but not run in the timed runs, left out: {', '.join(dropped)}" if dropped else ""
        if self.layout_rows is not None:
            return self.layout_rows.nodes_in(kept, note, recorded)
        return kept, note

    @property
    def module(self) -> nn.Module:
        return self.model

    @property
    def run_open(self) -> bool:
        """A run is waiting for its backward."""
        return self.session.waiting is not None

    def run(self, recorder: Recorder, args: tuple, kwargs: dict, join: bool = False, begun: bool = False) -> Any:
        """One forward; its run ends when every backward it and the forwards joined to it owe has
        run. ``join``: add this forward to the open run (several forwards feeding one loss).
        ``begun``: ``recorder``'s run was begun already, for work the model's ``__call__`` did
        before this forward (FSDP2's pre-forward all-gather: :mod:`fxprof.measure.capture.fsdp_loop`)."""
        session = self.session
        if not (join and self.run_open):
            self.settle()
            session.recorder, session.make_pass = recorder, None
            if not begun:
                recorder.begin_run()
            session.begin()
        owed = dict(session.waiting or {})
        try:
            out = self.compiled(*args, **kwargs)
        except BaseException as exc:
            session.abort_run()
            limit = bucket_limit_error(exc, self.model) if isinstance(exc, AssertionError) else None
            if limit is not None:  # torch's bare assertion on a small DDP bucket cap, in words
                raise limit from exc
            raise
        wants_backward = torch.is_grad_enabled() and any(t.requires_grad for t in tensors_in(out))
        if not wants_backward and session.waiting is not None:
            session.waiting = owed  # no backward will come for this forward (no_grad, or nothing to differentiate)
            if not any(owed.values()):
                session.end_run()
        return out

    def settle(self) -> None:
        """End a run still waiting for a backward that did not come."""
        self.session.end_run()

    def abort(self) -> None:
        """Drop a run still waiting (the loop failed between forward and backward)."""
        self.session.abort_run()

    def close(self) -> None:
        self.session.abort_run()
        self.session.close()
        if self._activation is not None:
            self._activation.close()
            self._activation = None
