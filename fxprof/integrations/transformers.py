"""fxprof in Hugging Face's ``Trainer``: :class:`FxprofCallback`, a ``transformers.TrainerCallback``
that profiles the Trainer's own training steps through :func:`fxprof.session`::

    from fxprof.integrations.transformers import FxprofCallback

    callback = FxprofCallback()
    trainer = Trainer(model=model, args=args, train_dataset=data, callbacks=[callback])
    trainer.train()
    callback.profiles                                 # a fxprof.Profile per cycle of the schedule

The session is opened on the model at ``on_train_begin`` and stepped at ``on_step_end``, once per
optimizer step: every micro-batch's forward and backward of a gradient-accumulation step belongs to
that step. Each profile is saved under ``args.output_dir/fxprof/`` (JSON and the HTML report, on
rank 0), kept in :attr:`FxprofCallback.profiles`, and its figures
(:func:`fxprof.integrations.common.figures`, with the optimizer's and the scheduler's median wall
time, rank 0's own under torchrun) go into the Trainer's next log: ``trainer.state.log_history``
and every callback that logs after this one (:meth:`CallbackMethods.log_before_reporters` puts it
ahead of ``report_to``'s loggers). See docs/integrations.md.

Importing this module does not import transformers; :class:`FxprofCallback` does, on first use
(a missing transformers is one line naming ``pip install 'fxprof[hf]'``).
"""

from __future__ import annotations

import gc
import os
import warnings
from typing import TYPE_CHECKING, Any

from .common import TrainingProfiler, missing_framework

__all__ = ["FxprofCallback", "CallbackMethods", "trainer_model"]

#: the callback's class, made on first use (it subclasses transformers.TrainerCallback)
_CLASS: Any = None


class CallbackMethods:
    """What :class:`FxprofCallback` does, without transformers (the class adds
    ``transformers.TrainerCallback`` as a base when it is first used).

    Args:
        schedule: ``fxprof.schedule(...)``; default :data:`fxprof.integrations.common.DEFAULT_SCHEDULE`
            (4 eager steps, 2 warm-up, 3 timed, once), counted in optimizer steps.
        save: save each profile under ``args.output_dir/fxprof/`` (rank 0). Default True.
        html: beside the JSON, the HTML report (where plotly is installed). Default True.
        log: add the figures to the Trainer's next log. Default True.
        backward: time the backward too (``fxprof.session(backward=True)``). Default: True, but
            False under ``torch_compile=True`` (a session of a compiled model times its forward kernels).
        session_options: the rest of ``fxprof.session``'s keywords (``capture``, ``timer``,
            ``memory``, ``name``, ``gather``...).
    """

    def __init__(self, schedule: Any = None, *, save: bool = True, html: bool = True, log: bool = True,
                 backward: bool | None = None, **session_options: Any):
        self.backward = backward
        self.log = log
        self.profiler = TrainingProfiler(schedule, save=save, html=html, **session_options)
        self.profiler.on_profile = self._ready
        self.profiler.annotate = self._annotate
        self._notes: list[str] = []  # what the Trainer's arguments add to every profile's notes
        #: the figures of the profiles made since the Trainer last logged
        self.pending: dict[str, float] = {}

    @property
    def profiles(self) -> list:
        """Every profile made so far (``fxprof.Profile``; on rank 0 the ranks' gathered ones)."""
        return self.profiler.profiles

    @property
    def paths(self) -> list[str]:
        """The files written so far (JSON, HTML)."""
        return self.profiler.paths

    def log_before_reporters(self, trainer: Any) -> None:
        """Move this callback ahead of ``report_to``'s loggers in ``trainer``'s callbacks (right after
        ``DefaultFlowCallback``). The Trainer calls the callbacks it is given after its loggers, and
        the figures this callback adds to a log reach only those after it (and
        ``trainer.state.log_history``); moved, they reach TensorBoard, W&B, MLflow... too."""
        callbacks = trainer.callback_handler.callbacks
        if self in callbacks:
            callbacks.remove(self)
        first = next((i + 1 for i, cb in enumerate(callbacks) if type(cb).__name__ == "DefaultFlowCallback"), 0)
        callbacks.insert(first, self)

    def close(self) -> None:
        """Close the session: ``Trainer.train()`` calls ``on_train_end``, which does it, but not after
        an error in the loop; call this in an ``except``/``finally`` then (the model's forward is put
        back, the cycle under way kept, marked incomplete)."""
        self.profiler.close()

    # ------------------------------------------------------------ the Trainer's events
    def on_train_begin(self, args: Any, state: Any, control: Any, model: Any = None, **kwargs: Any) -> None:
        if self.profiler.is_open:  # train() began again after an error that skipped on_train_end
            self.profiler.close()
        if model is None:
            return
        target = trainer_model(model, args)
        backward = self.backward
        if getattr(args, "torch_compile", False) and target is not model:  # the compiled model the Trainer calls
            if backward:
                warnings.warn("fxprof: FxprofCallback(backward=True) under torch_compile=True times the compiled "
                              "forward only (a session of a compiled model cannot time its backward)", stacklevel=2)
            backward = False
        elif backward is None:
            backward = True
        self.profiler.session_options["backward"] = backward
        self._notes = trainer_notes(args)
        self.profiler.open(target, os.path.join(args.output_dir, "fxprof"))

    def on_pre_optimizer_step(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.profiler.begin_phase("optimizer")

    def on_optimizer_step(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.profiler.end_phase("optimizer")
        self.profiler.begin_phase("scheduler")  # lr_scheduler.step() and model.zero_grad(), up to on_step_end

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.profiler.end_phase("scheduler")
        self.profiler.step()

    def on_log(self, args: Any, state: Any, control: Any, logs: dict | None = None, **kwargs: Any) -> None:
        if not self.pending or logs is None:
            return
        figures, self.pending = self.pending, {}
        logs.update(figures)  # the callbacks after this one (the progress bar or printer) see them
        history = getattr(state, "log_history", None)
        if history and history[-1].get("step") == state.global_step:
            history[-1].update(figures)  # Trainer.log appended a copy of logs before the callbacks ran

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.profiler.close()

    def _annotate(self, profile: Any) -> None:
        profile.meta.setdefault("notes", []).extend(self._notes)

    def _ready(self, profile: Any) -> None:
        if self.log:
            self.pending.update(self.profiler.figures(profile))


def trainer_model(model: Any, args: Any) -> Any:
    """The module the Trainer calls for ``model``: the ``torch.compile`` wrapper that Accelerate made
    of it under ``torch_compile=True``, the ``DistributedDataParallel`` wrapper under torchrun, or
    ``model`` itself. Callbacks are handed the model, not the wrapper: a session on the model inside
    a compiled wrapper would be traced by dynamo, and inside DDP it would miss DDP's gradient
    all-reduce. The wrapper is looked up once, among the live objects, only where there is one."""
    import torch

    kinds: list[type] = []
    if getattr(args, "torch_compile", False):
        kinds.append(torch._dynamo.eval_frame.OptimizedModule)
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        kinds.append(torch.nn.parallel.DistributedDataParallel)
    if not kinds:
        return model
    inner = {"OptimizedModule": "_orig_mod", "DistributedDataParallel": "module"}
    found: dict[int, Any] = {}  # id(wrapped module) -> its wrapper
    # type(), not isinstance(): isinstance reads __class__, which some objects of the heap answer with a warning
    for obj in gc.get_objects():
        kind = type(obj)
        if any(issubclass(kind, k) for k in kinds):
            found[id(obj.__dict__.get("_modules", {}).get(inner.get(kind.__name__, "module")))] = obj
    outer = model
    while id(outer) in found:  # a compiled DDP model, or DDP of a compiled one: the outermost
        outer = found.pop(id(outer))
    return outer


def trainer_notes(args: Any) -> list[str]:
    """What the Trainer's arguments change in a profile that its header cannot see."""
    notes = ["Hugging Face Trainer: a step is one optimizer step (gradient_accumulation_steps="
             f"{getattr(args, 'gradient_accumulation_steps', 1)}): each micro-batch's forward and backward is a run of it"]
    for flag, dtype in (("bf16", "bfloat16"), ("fp16", "float16")):
        if getattr(args, flag, False):
            notes.append(f"mixed precision {flag}: the Trainer runs the forward under Accelerate's torch.autocast({dtype}), "
                         f"entered inside the model's forward, so the rows are the autocast ops (its casts are the _to_copy "
                         f"rows) while the env line, read around the forward, says autocast off")
    return notes


def callback_class() -> Any:
    """``FxprofCallback``: :class:`CallbackMethods` on ``transformers.TrainerCallback``, made once."""
    global _CLASS
    if _CLASS is None:
        try:
            from transformers import TrainerCallback
        except ImportError as exc:
            raise missing_framework("transformers", "hf", "fxprof.integrations.transformers.FxprofCallback") from exc
        _CLASS = type("FxprofCallback", (CallbackMethods, TrainerCallback),
                      {"__module__": __name__, "__qualname__": "FxprofCallback", "__doc__": __doc__})
    return _CLASS


if TYPE_CHECKING:  # FxprofCallback is made on first use (module __getattr__), not at import
    FxprofCallback = CallbackMethods


def __getattr__(name: str) -> Any:
    if name == "FxprofCallback":
        return callback_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
