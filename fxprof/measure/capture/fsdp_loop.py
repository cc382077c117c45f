"""A session's training steps (``fxprof.session(model, backward=True)``) of an FSDP2 model.

The loop's own forward, ``loss.backward()`` and optimizer run as they do without fxprof; what a
run times is what :class:`fxprof.measure.capture.fsdp_training.FSDPTrainingCapture` times in
``fxprof.profile(model, x, backward=True)``, by the same means: the model's forward compiled with
the training backend (:class:`fxprof.measure.capture.training_loop.LoopTrainingCapture`), each
graph call placed by (graph, FSDP module) (:class:`FSDPPlacement`), and FSDP's all-gathers, waits,
reshards and reduce-scatters timed as rows charged to their layer by FSDP's parameter-group
methods wrapped on each group (:class:`fxprof.measure.distributed.fsdp.TrainingSteps`).

What a loop changes, and how this module meets it:

* **The root's forward all-gather comes before the session's forward.** FSDP's pre-forward hook
  of the root runs in the model's ``__call__``, before the forward the session put on the
  instance. The wrappers are therefore on for the whole session (from the first instrumented call
  to the session's end, where they are removed, also when the loop raised), and in a step that
  the schedule instruments the run begins when the outermost FSDP module's forward begins
  (:meth:`FSDPLoopTrainingCapture._outermost`). A call the session does not instrument after all
  (a validation pass) drops that run when the forward ends. In the schedule's other steps the
  wrappers time nothing (one attribute check per FSDP call).
* **FSDP's backward work goes on after the last backward graph**: the first layer's
  reduce-scatter runs in its post-backward hook, the root's in FSDP's final callback. The run
  ends in an autograd final callback of its own, queued when the last backward graph owed has
  run, so after FSDP's (:meth:`_FSDPLoopSession.end_run`).
* Fully sharded bare torch.nn modules (a ``Linear``) run their forward compiled with the training
  backend during an instrumented forward only; the other steps run the model as it is.
"""

from __future__ import annotations

import contextlib
from typing import Any, Callable

from torch import nn

from ..distributed.fsdp import TrainingSteps, fsdp_modules
from ..timing.recorder import Recorder
from .fsdp_training import Clock, FSDPPlacement, FSDPRows, current_phase
from .training import ACTIVE
from .training_loop import LoopSession, LoopTrainingCapture

__all__ = ["FSDPLoopTrainingCapture"]


class _FSDPLoopSession(LoopSession):
    """A loop's training session (a run waits for its backward graphs) whose graph calls are
    placed by FSDP module (its component :class:`~fxprof.measure.capture.fsdp_training.FSDPPlacement`,
    as in :class:`~fxprof.measure.capture.fsdp_training.FSDPSession`), and whose runs end after
    autograd's final callbacks, FSDP's among them."""

    def __init__(self, model_type: type, running: Callable[[], str], ended: Callable[[bool], None]):
        super().__init__(model_type)
        self.fsdp = FSDPPlacement(running)
        self.ended = ended
        self._queued = False

    def place(self, runner: Any) -> tuple[Any, str]:
        return self.fsdp.place(self, runner)

    def label(self, runner: Any) -> str:
        return self.place(runner)[1]  # a backward outside a run: placed as in a run, so its calls stay paired

    def begin(self) -> None:
        super().begin()
        self.fsdp.new_step()
        self._queued = False

    def end_run(self) -> None:
        if self.waiting is None:
            return
        if current_phase() == "backward":  # the last graph owed ran; FSDP's own backward work has not ended yet
            if not self._queued:
                self._queued = True
                from torch.autograd import Variable

                Variable._execution_engine.queue_callback(self._after_backward)
            return
        self._end()

    def _after_backward(self) -> None:
        if self._queued:
            self._end()

    def _end(self) -> None:
        self._queued = False
        super().end_run()
        self.ended(False)

    def abort_run(self) -> None:
        self._queued = False
        super().abort_run()
        self.ended(True)


class FSDPLoopTrainingCapture(LoopTrainingCapture):
    """The training steps of a session's loop on an FSDP2 model (see the module docs)."""

    def __init__(self, model: nn.Module, forward: Callable[..., Any]):
        modules = fsdp_modules(model)
        super().__init__(model, forward, rows=FSDPRows(modules))
        self.reason = ("backward=True on an FSDP2 model: forward and backward graphs from AOTAutograd, the backward "
                       "timed inside the loop's own loss.backward(); FSDP's hooks run as in training, its all-gathers "
                       "and reduce-scatters timed as rows; each run from the outermost FSDP module's pre-forward (the root's "
                       "all-gather) to FSDP's final backward callback (the last reduce-scatters)")
        self.modules = modules
        #: what a run spans, in the session's backward note (fxprof.measure.session.cycle)
        self.run_span = ("from the outermost FSDP module's pre-forward (the root's all-gather, before the forward "
                         "itself) to FSDP's final backward callback (after the last reduce-scatters)")
        # the plain loop session LoopTrainingCapture made is replaced by one that places calls by FSDP module
        root_name, paths = self.session.root_name, self.session.modules
        self._activation.close()  # type: ignore[union-attr]
        self.session.close()
        self.steps = _Steps(self, self.modules, Clock(self), current_phase)
        self.session = _FSDPLoopSession(type(model), lambda: self.steps.running[-1] if self.steps.running else "",
                                        self._ended)
        self.session.root_name, self.session.modules = root_name, paths
        self._activation = contextlib.ExitStack()
        self._activation.enter_context(ACTIVE.active(self.session))
        #: whether the session's current step is instrumented (set by the session: :meth:`follow`)
        self._instrumented: Callable[[], bool] = lambda: True
        #: the recorder of the last run, and whether a run was begun on it for a forward not yet given to :meth:`run`
        self._recorder: Recorder | None = None
        self._early = False
        self.steps.__enter__()  # last: nothing can fail after the wrappers are on (close() removes them)

    # ------------------------------------------------------------ what the clock records into
    @property
    def timing(self) -> Recorder | None:
        """The recorder while one of this capture's runs is on (begun early, or by :meth:`run`), else None."""
        recorder = self._recorder
        if recorder is None or not recorder.active or not (self._early or self.run_open):
            return None
        return recorder

    def follow(self, instrumented: Callable[[], bool]) -> None:
        """``instrumented()``: whether the session's current step runs the model through fxprof (warm-up or
        active); in the others, no run begins at the root's pre-forward."""
        self._instrumented = instrumented

    def _outermost(self, entering: bool) -> None:
        """The outermost FSDP module's forward begins (``entering``) or ends."""
        recorder = self._recorder
        if entering:
            if recorder is not None and not self.run_open and self._instrumented():
                recorder.begin_run()  # the root's all-gather, in FSDP's pre-forward hook, is the run's first work
                self._early = True
                self.steps.new_run()
        elif self._early:  # begun for a forward the session ran eagerly (a validation pass): nothing to keep
            self._early = False
            if recorder is not None and recorder.active and not self.run_open:
                recorder.abort_run()

    def _ended(self, aborted: bool) -> None:
        """A run ended (``aborted``: dropped, the loop or the model raised)."""
        self._early = False
        if aborted:  # a forward that raised never ran FSDP's post-forward: its modules are not running any more
            self.steps.running.clear()

    # ------------------------------------------------------------------- runs
    def run(self, recorder: Recorder, args: tuple, kwargs: dict, join: bool = False) -> Any:
        early = self._early and recorder is self._recorder and recorder.active
        if not early and not (join and self.run_open):
            self.steps.new_run()
        self._recorder = recorder
        self._early = False
        with self.layout_rows.leaves_compiled():
            return super().run(recorder, args, kwargs, join=join, begun=early)

    def close(self) -> None:
        try:
            self.steps.__exit__(None, None, None)
        finally:
            if self._early and self._recorder is not None and self._recorder.active:
                self._recorder.abort_run()
            self._early = False
            super().close()


class _Steps(TrainingSteps):
    """:class:`TrainingSteps` that also tell the capture when the outermost FSDP module's forward
    begins and ends, and that go straight to FSDP's method while no run is on (the wrappers stay
    on for the whole session)."""

    def __init__(self, capture: FSDPLoopTrainingCapture, *args: Any):
        super().__init__(*args)
        self.capture = capture

    def _wrap(self, path: str, group: Any, name: str, method: Any) -> Any:
        wrapped = super()._wrap(path, group, name, method)
        if name == "pre_forward":
            def pre_forward(*args: Any, **kwargs: Any) -> Any:
                if not self.running:
                    self.capture._outermost(True)
                return wrapped(*args, **kwargs)
            return pre_forward
        if name == "post_forward":
            def post_forward(*args: Any, **kwargs: Any) -> Any:
                try:
                    return wrapped(*args, **kwargs)
                finally:
                    if not self.running:
                        self.capture._outermost(False)
            return post_forward
        capture = self.capture

        def timed(*args: Any, **kwargs: Any) -> Any:
            if capture.timing is None:  # no run on (the schedule's eager steps): FSDP's own method, nothing more
                return method(*args, **kwargs)
            return wrapped(*args, **kwargs)
        return timed


