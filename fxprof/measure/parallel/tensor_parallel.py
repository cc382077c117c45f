"""Tensor parallelism (``parallelize_module``) as a parallel layout: a symbolic forward capture has
its tensor-parallel modules split into their redistributions and their computation
(:func:`fxprof.measure.capture.tensor_parallel.split_tensor_parallel`, which the symbolic captures
of :mod:`fxprof.measure.capture.captures` apply, FSDP2's over tensor parallelism included).
Nothing is refused; training steps are the plain ones."""

from __future__ import annotations

from torch import nn

from ..distributed.tensor_parallel import is_tensor_parallel
from .base import Layout

__all__ = ["TensorParallel"]


class TensorParallel(Layout):
    """A model with tensor-parallel modules (see the module docs)."""

    name = "tensor_parallel"

    def applies(self, model: nn.Module) -> bool:
        return is_tensor_parallel(model)
