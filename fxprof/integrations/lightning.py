"""fxprof in Lightning's ``Trainer``: ``Trainer(callbacks=[FxprofCallback()])`` profiles the training
steps the trainer runs, through one :func:`fxprof.session` (:class:`~.common.TrainingProfiler`).

One session step is one *optimizer* step: the callback steps the session in ``on_train_batch_end``
when ``trainer.global_step`` moved during the batch, so ``accumulate_grad_batches=N`` makes N
forwards (and backwards) one step, and manual optimization is stepped by the module's own
``optimizer.step()`` calls (Lightning counts them in ``global_step``).

What is instrumented: the module whose ``forward`` ``training_step`` calls. By default the
``LightningModule`` itself where its class defines ``forward`` (``training_step`` calls
``self(x)``), else its one direct child that holds parameters (``training_step`` calls
``self.model(x)``); ``module="model"`` (an attribute path) or ``module=lambda pl_module: ...`` says
it. Validation (and the sanity check) runs the model's own forward: the callback takes the
session's forward off the module from ``on_validation_start`` to ``on_validation_end``. Once a
``fxprof.schedule`` with a finite ``repeat`` has no step left to warm up or time, the session is
closed there and then: the rest of the fit runs the module's own forward, as without the callback.

Profiles go to :attr:`FxprofCallback.profiles`, are saved under ``<trainer.log_dir>/fxprof/`` (the
first logger's directory, or ``default_root_dir`` without a logger; ``fxprof/fit2/``... for the
second and later fits of one callback) on rank 0, and their figures
(:func:`~.common.figures`) go to every logger's ``log_metrics`` at the trainer's ``global_step``.

Lightning is imported when :class:`FxprofCallback` is first used (the class subclasses
``lightning.pytorch.Callback``, so it is made then, by the module's ``__getattr__``): importing
``fxprof`` or this module never imports it, and a missing Lightning is one line naming
``pip install 'fxprof[lightning]'``.
"""

from __future__ import annotations

import os
import warnings
from typing import TYPE_CHECKING, Any, Callable

from torch import nn

from ..session import check_keywords
from ..session import session as open_session
from .common import NEVER_CALLED, TrainingProfiler, missing_framework

__all__ = ["FxprofCallback", "check_options", "resolve_module"]

if TYPE_CHECKING:  # made on first access (module __getattr__), a subclass of lightning.pytorch.Callback
    FxprofCallback: type

_MISSING = object()
_made: dict[str, type] = {}


def _lightning() -> Any:
    try:
        import lightning.pytorch as pl
    except ImportError as exc:
        raise missing_framework("lightning", "lightning", "fxprof.integrations.lightning.FxprofCallback") from exc
    return pl


def __getattr__(name: str) -> Any:
    if name == "FxprofCallback":
        cls = _made.get(name)
        if cls is None:
            cls = _made[name] = _make_callback(_lightning())
        return cls
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def resolve_module(pl_module: nn.Module, module: str | Callable[[Any], nn.Module] | None, base_forward: Any) -> nn.Module:
    """The module the session instruments: ``module`` (an attribute path or a function of the
    LightningModule), else ``pl_module`` where its class defines ``forward`` (``base_forward`` is
    ``LightningModule.forward``), else its one direct child holding parameters."""
    if callable(module):
        found = module(pl_module)
    elif isinstance(module, str):
        found = pl_module.get_submodule(module)
    elif getattr(type(pl_module), "forward", base_forward) is not base_forward:
        found = pl_module
    else:
        held = [(name, child) for name, child in pl_module.named_children() if any(True for _ in child.parameters())]
        if len(held) != 1:
            names = ", ".join(name for name, _ in held) or "none"
            raise ValueError(f"fxprof: {type(pl_module).__name__} defines no forward and has {len(held)} child module(s) with "
                             f"parameters ({names}): say which one training_step calls, FxprofCallback(module='<attribute>')")
        found = held[0][1]
    if not isinstance(found, nn.Module):
        raise TypeError(f"fxprof: module must name an nn.Module of the LightningModule, got {type(found).__name__}")
    return found


def check_options(schedule: Any, session_options: dict[str, Any]) -> None:
    """``fxprof.session``'s keywords checked when the callback is made, not at the start of training:
    a name the session does not take, and what :func:`fxprof.session.check_keywords` refuses."""
    import inspect

    taken = set(inspect.signature(open_session).parameters) - {"model", "schedule", "on_ready"}
    unknown = sorted(set(session_options) - taken)
    if unknown:
        raise TypeError(f"FxprofCallback got {', '.join(map(repr, unknown))}, which fxprof.session does not take "
                        f"(its keywords: {', '.join(sorted(taken))})")
    check_keywords(nn.Module(), schedule, None, session_options.get("capture", "auto"), session_options.get("timer", "auto"))


#: a LightningModule given to fit as torch.compile(model): the callback leaves that fit alone
COMPILED_MODULE = ("fxprof: FxprofCallback does not profile a LightningModule passed to fit as torch.compile(model): "
                   "Lightning compiles training_step itself, and the session's forward would run inside that compiled "
                   "step; this fit runs unprofiled. Profile the uncompiled module (trainer.fit(model)), or a compiled "
                   "model in a loop of your own with fxprof.session(torch.compile(model)) (docs/session.md)")


def never_called(module: nn.Module) -> str:
    """The callback's warning where ``training_step`` never called the instrumented module."""
    return (f"fxprof: FxprofCallback timed nothing: training_step never called {type(module).__name__}'s forward while "
            f"the session was open (it calls another module: pass FxprofCallback(module='<attribute>') or "
            f"module=lambda pl_module: ..., the module training_step calls)")


def _make_callback(pl: Any) -> type:
    class FxprofCallback(pl.Callback):
        """Profile the training steps of a Lightning ``Trainer`` with :func:`fxprof.session`.

        ``schedule``: ``fxprof.schedule(...)`` in optimizer steps (default: 4 eager steps, 2
        warm-up, 3 timed, once); ``module``: which module ``training_step`` calls (attribute path
        or function of the LightningModule; default: see :mod:`fxprof.integrations.lightning`);
        ``save``/``html``: write each profile (JSON, and the HTML report where plotly is installed);
        ``log``: send each profile's figures to the trainer's loggers; ``session_options``:
        ``fxprof.session``'s keywords (``backward=True`` times the backward graph too,
        ``capture``, ``timer``, ``memory``, ``name``...).

        Attributes: ``profiles`` (every profile, in order: on rank 0 the gathered one under DDP,
        nothing on the other ranks), ``paths`` (the files written), ``folder``, ``metrics`` (the
        figures logged, per profile)."""

        def __init__(self, schedule: Any = None, *, module: str | Callable[[Any], nn.Module] | None = None,
                     save: bool = True, html: bool = True, log: bool = True, **session_options: Any):
            super().__init__()
            check_options(schedule, session_options)
            self.profiler = TrainingProfiler(schedule, save=save, html=html, **session_options)
            self.module = module
            self.log = log
            self.metrics: list[dict[str, float]] = []
            self._trainer: Any = None
            self._target: nn.Module | None = None
            self._own_forward: Any = _MISSING  # what the instrumented module held as `forward` before the session
            self._hook: Any = None  # the session's forward, off the module while validation runs
            self._global_step = 0
            self._over = False  # the schedule is over and the session closed: the hooks do nothing more
            self._fits = 0  # the fits this callback has profiled

        @property
        def profiles(self) -> list:
            return self.profiler.profiles

        @property
        def paths(self) -> list[str]:
            return self.profiler.paths

        @property
        def folder(self) -> str | None:
            return self.profiler.folder

        # ------------------------------------------------------------- training
        def on_train_start(self, trainer: Any, pl_module: Any) -> None:
            if getattr(pl_module, "_compiler_ctx", None) is not None:
                # trainer.fit(torch.compile(model)): Lightning compiles training_step itself, and dynamo would trace
                # the session's forward inside it (torch 2.14 fails there); the fit runs unprofiled instead
                warnings.warn(COMPILED_MODULE, stacklevel=2)
                self._over = True
                return
            target = resolve_module(pl_module, self.module, pl.LightningModule.forward)
            folder = os.path.join(trainer.log_dir or trainer.default_root_dir, "fxprof")  # log_dir: every rank calls it
            self._fits += 1
            if self._fits > 1:  # a second fit's session counts its cycles and steps from 0 again: its files go apart
                folder = os.path.join(folder, f"fit{self._fits}")
            self._trainer = trainer
            self._over = False
            self._target = target
            self._own_forward = target.__dict__.get("forward", _MISSING)
            self.profiler.on_profile = self._logged
            self.profiler.open(target, folder)
            self._hook = target.__dict__.get("forward")
            self._global_step = trainer.global_step

        def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int) -> None:
            if not self._over:
                self._global_step = trainer.global_step

        def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
            # one session step per optimizer step: accumulation's micro-batches and manual optimization's own
            # optimizer.step() calls are both counted by global_step
            if not self._over and trainer.global_step != self._global_step:
                self._global_step = trainer.global_step
                # once a fxprof.schedule is over, step() closes the session (common.TrainingProfiler): the module
                # gets its own forward back, the rest of the fit runs as without the callback, and the hooks stop here
                self._said(self.profiler.step)
                if not self.profiler.is_open:
                    self._close()
                    self._over = True

        def on_train_end(self, trainer: Any, pl_module: Any) -> None:
            self._close()

        def on_exception(self, trainer: Any, pl_module: Any, exception: BaseException) -> None:
            self._close(exception)

        def teardown(self, trainer: Any, pl_module: Any, stage: str) -> None:
            self._close()

        # ----------------------------------------------------------- validation
        def on_validation_start(self, trainer: Any, pl_module: Any) -> None:
            self._pause()

        def on_validation_end(self, trainer: Any, pl_module: Any) -> None:
            self._resume()

        # -------------------------------------------------------------- helpers
        def _pause(self) -> None:
            """The module's own forward while validation runs: an eval forward is neither timed nor
            captured, and the session's step count is untouched."""
            target = self._target
            if target is None or not self.profiler.is_open or target.__dict__.get("forward") is not self._hook:
                return
            if self._own_forward is _MISSING:
                target.__dict__.pop("forward", None)
            else:
                target.forward = self._own_forward

        def _resume(self) -> None:
            target = self._target
            if target is None or not self.profiler.is_open:
                return
            current = target.__dict__.get("forward", _MISSING)
            if current is self._own_forward:  # nothing else set a forward meanwhile
                target.forward = self._hook

        def _close(self, error: BaseException | None = None) -> None:
            if self.profiler.is_open:
                self._resume()  # the session puts back what it found, from its own forward
                self._said(lambda: self.profiler.close(error))
            self._target = None
            self._hook = None

        def _said(self, call: Callable[[], Any]) -> None:
            """``call()``, the session's warnings passed on; the one for a model never called is said
            in the trainer's terms (which module training_step calls), not a loop's (call step())."""
            target = self._target
            with warnings.catch_warnings(record=True) as said:
                warnings.simplefilter("always")
                call()
            for w in said:
                never = NEVER_CALLED in str(w.message) and target is not None
                warnings.warn_explicit(never_called(target) if never else w.message,  # type: ignore[arg-type]
                                       w.category, w.filename, w.lineno)

        def _logged(self, profile: Any) -> None:
            metrics = self.profiler.figures(profile)
            self.metrics.append(metrics)
            trainer = self._trainer
            if not self.log or trainer is None:
                return
            # the loggers, not pl_module.log: a profile is also ready in on_train_end (an incomplete cycle), where
            # self.log is refused, and self.log would reduce a one-off figure over steps and epochs
            for logger in trainer.loggers:
                try:
                    logger.log_metrics(metrics, step=trainer.global_step)
                except Exception as exc:  # a logger that refuses a figure must not stop the training
                    warnings.warn(f"fxprof: {type(logger).__name__} did not take the profile's figures ({type(exc).__name__}: "
                                  f"{exc}); the profile is in FxprofCallback.profiles and its files", stacklevel=2)

    FxprofCallback.__module__ = __name__
    FxprofCallback.__qualname__ = "FxprofCallback"
    return FxprofCallback

