"""FSDP2 (``fully_shard``) as a parallel layout: the requests fxprof refuses
(:func:`fxprof.measure.distributed.fsdp.refuse_unsupported`), the forward captured with FSDP's
all-gathers, waits and reshards as nodes (:func:`fxprof.measure.capture.fsdp.capture_fsdp`, which
the symbolic captures of :mod:`fxprof.measure.capture.captures` choose), and
training steps with FSDP's work as rows (:mod:`fxprof.measure.capture.fsdp_training`; in a
session's loop :mod:`fxprof.measure.capture.fsdp_loop`)."""

from __future__ import annotations

from typing import Any, Callable

from torch import nn

from ..distributed.fsdp import FSDPNotes, fsdp_modules, is_fsdp, refuse_unsupported
from .base import Layout

__all__ = ["FSDP2"]


class FSDP2(Layout):
    """A model with ``fully_shard``-ed modules (see the module docs)."""

    name = "fsdp"

    def applies(self, model: nn.Module) -> bool:
        return is_fsdp(model)

    def refuse(self, model: nn.Module, capture: str, backward: bool, session: bool) -> None:
        refuse_unsupported(model, capture, backward=backward, session=session)

    def training(self, loop: bool) -> Callable[..., Any] | None:
        if loop:
            from ..capture.fsdp_loop import FSDPLoopTrainingCapture

            return FSDPLoopTrainingCapture
        from ..capture.fsdp_training import FSDPTrainingCapture

        return FSDPTrainingCapture

    def notes(self, model: nn.Module) -> Any:
        return FSDPNotes.of(fsdp_modules(model))  # read by fxprof.core.overlap
