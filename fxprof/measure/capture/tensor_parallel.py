"""Tensor-parallel modules in a symbolic capture: each split into its input redistribution, its
computation and its output redistribution, the collectives named by a probe run
(:mod:`fxprof.measure.distributed.tensor_parallel` says which nodes and why)."""

from __future__ import annotations

from typing import Any

import torch

from ..common.state import preserved_buffers, preserved_rng
from ..distributed.tensor_parallel import parallel_modules, split_parallel_modules
from .base import GraphCapture, bind_inputs
from .graph import op_kind

__all__ = ["split_tensor_parallel"]


def split_tensor_parallel(captured: GraphCapture, args: tuple, kwargs: dict) -> GraphCapture:
    """``captured`` with its tensor-parallel modules split (unchanged when it has none).

    The new graph runs once (no gradients; RNG and buffers kept), every rank together, to learn
    which collective each redistribution issues (``CommDebugMode``): that names its node's kind."""
    gm = captured.gm
    found = parallel_modules(gm)
    if not found:
        return captured
    from torch.distributed.tensor.debug import CommDebugMode

    paths = ", ".join(str(n.target) for n in found)
    steps = split_parallel_modules(gm, {n.name: op_kind(gm, n) for n in found})

    def probe(step: Any, step_args: tuple, step_kwargs: dict) -> Any:
        mode = CommDebugMode()
        with mode:
            out = step.run(*step_args, **step_kwargs)
        step.note_collectives([str(op).split(".")[-1] for op in mode.get_comm_counts()])
        return out

    for step in steps:
        step.probe = probe
    try:
        with torch.no_grad(), preserved_rng(), preserved_buffers(gm):
            torch.fx.Interpreter(gm).run(*bind_inputs(gm, args, kwargs))
    finally:
        for step in steps:
            step.probe = None
    gm.recompile()
    return GraphCapture(gm, captured.kind, f"{captured.reason}; tensor-parallel module(s) {paths}: their input and "
                                          f"output redistributions timed as nodes of their own")
