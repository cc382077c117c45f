"""``DistributedDataParallel`` as a parallel layout: training steps with DDP's gradient all-reduce
timed as rows (:mod:`fxprof.measure.capture.ddp_training`; in a session's loop
:mod:`fxprof.measure.capture.ddp_loop`). Nothing is refused; a forward capture is the ordinary one."""

from __future__ import annotations

from typing import Any, Callable

from torch import nn

from ..distributed.ddp import is_ddp
from .base import Layout

__all__ = ["DDP"]


class DDP(Layout):
    """A ``DistributedDataParallel`` wrapper with its reducer (see the module docs)."""

    name = "ddp"

    def applies(self, model: nn.Module) -> bool:
        return is_ddp(model)

    def training(self, loop: bool) -> Callable[..., Any] | None:
        if loop:
            from ..capture.ddp_loop import DDPLoopTrainingCapture

            return DDPLoopTrainingCapture
        from ..capture.ddp_training import DDPTrainingCapture

        return DDPTrainingCapture
