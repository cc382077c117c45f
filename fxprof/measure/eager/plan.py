"""A profile's plan: :func:`fxprof.profile`'s options, checked once, as the one object every mode takes.

:meth:`ProfilePlan.checked` refuses a bad option before anything runs (a count out of range, an
unknown capture or mode, a malformed ``peaks=``, isolated mode under ``torch.distributed``, a
profile of a model inside its own open session) and keeps which options the caller gave
(``given``: compiled mode refuses the ones it cannot honour). The eager run
(:mod:`fxprof.measure.eager_mode`), its loop (:mod:`fxprof.measure.eager.loop`: warm-up, timed runs,
isolated re-runs, training steps), compiled mode (:mod:`fxprof.measure.compiled.mode`) and a
session (:class:`fxprof.measure.session.session.Session`: the options it shares with
``fxprof.profile``, its own checks first) read it; a new option is a field here and a line in
the mode that uses it.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from torch import nn

from ...core.ranks import ISOLATED_UNDER_RANKS
from ...vocab import CAPTURES, MODES
from ..common.state import refuse_inside_session
from ..distributed.ranks import is_initialized

__all__ = ["ProfilePlan", "DEFAULT_GPU_WARMUP_MS"]

#: default ``warmup_ms`` on CUDA: long enough for a GPU to leave its idle clocks (a choice, to be
#: checked on a GPU: docs/performance.md)
DEFAULT_GPU_WARMUP_MS = 200.0


@dataclass(frozen=True)
class ProfilePlan:
    """What :func:`fxprof.profile` was asked for (its options, documented there), checked.
    ``given``: the names of the options the caller set; ``warmup_ms`` is None until the run
    knows its device (:meth:`for_device`)."""

    warmup: int = 5
    iters: int = 20
    timer: Any = "auto"
    no_grad: bool = True
    concrete_args: Any = None
    leaf_modules: Any = ()
    name: str | None = None
    anatomy: bool = True
    memory: bool | None = None
    progress: Any = False
    capture: str = "auto"
    mode: str = "timed"
    warmup_ms: float | None = None
    backward: bool = False
    loss_fn: Any = None
    optimizer: Any = None
    trace_into: Any = ()
    compile: Any = None
    peaks: Any = "auto"
    given: frozenset = frozenset()

    @classmethod
    def checked(cls, model: Any, given: set[str] | frozenset = frozenset(), **options: Any) -> "ProfilePlan":
        """The plan of ``options`` for ``model``; raises TypeError or ValueError saying what was
        wrong and what is accepted, before anything runs."""
        plan = cls(**options, given=frozenset(given))
        _count("warmup", plan.warmup, minimum=0)
        _count("iters", plan.iters, minimum=1)
        ms = plan.warmup_ms
        if ms is not None and (isinstance(ms, bool) or not isinstance(ms, (int, float)) or not ms >= 0):
            raise ValueError(f"warmup_ms must be a number of milliseconds >= 0, got {ms!r}")
        if not isinstance(model, nn.Module):
            raise TypeError(f"fxprof.profile takes an nn.Module or fx.GraphModule, got {type(model).__name__}")
        refuse_inside_session(model, "fxprof.profile")
        if plan.capture not in CAPTURES:
            raise ValueError(f"unknown capture {plan.capture!r}; choose one of {', '.join(CAPTURES)}")
        if plan.mode not in MODES:
            raise ValueError(f"unknown mode {plan.mode!r}; choose one of {', '.join(MODES)}")
        if plan.mode == "isolated" and is_initialized():
            raise ValueError(ISOLATED_UNDER_RANKS)
        peaks = plan.peaks
        if not (peaks is None or peaks is False or (isinstance(peaks, str) and peaks in ("auto", "quick"))):
            from ..passes.peaks import resolve_peaks

            plan = dataclasses.replace(plan, peaks=resolve_peaks(peaks))  # the user's numbers, checked now
        return plan

    def for_device(self, on_cuda: bool) -> "ProfilePlan":
        """The plan with ``warmup_ms`` settled (its default: 200 on CUDA, 0 on the CPU), and
        gradients on for a training step."""
        ms = self.warmup_ms if self.warmup_ms is not None else (DEFAULT_GPU_WARMUP_MS if on_cuda else 0.0)
        return dataclasses.replace(self, warmup_ms=float(ms), no_grad=self.no_grad and not self.backward)


def _count(label: str, value: Any, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{label} must be an integer, got {value!r}")
    if value < minimum:
        raise ValueError(f"{label} must be >= {minimum}, got {value}")
