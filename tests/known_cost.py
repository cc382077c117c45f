"""A kernel of known cost, for holding fxprof's timers to a ground truth: ``spin(x, us)`` is a
custom op (``fxprof_known::spin``) that holds the CPU for ``us`` microseconds of wall time,
whatever else runs, then copies ``x``; inductor calls it from its generated code as an extern
op. Used by tests/measure/test_wrapper_marks.py and tests/benchmarks/marks_truth.py."""

from __future__ import annotations

import time

import torch

__all__ = ["spin"]


@torch.library.custom_op("fxprof_known::spin", mutates_args=())
def spin(x: torch.Tensor, us: int) -> torch.Tensor:
    until = time.perf_counter_ns() + us * 1000
    while time.perf_counter_ns() < until:
        pass
    return x.clone()


@spin.register_fake
def _(x: torch.Tensor, us: int) -> torch.Tensor:
    return torch.empty_like(x)
