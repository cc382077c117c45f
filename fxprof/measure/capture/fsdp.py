"""The capture of an FSDP2 model: its layers traced past FSDP's hooks, FSDP's work as nodes
(:mod:`fxprof.measure.distributed.fsdp` says which nodes and why)."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from ...errors import TraceError
from ..common.state import preserved_buffers, preserved_rng
from ..distributed.fsdp import FSDPNotes, bypass_types, fsdp_modules, insert_fsdp_steps, refuse_unsupported
from .base import GraphCapture
from .tensor_parallel import split_tensor_parallel
from .tracer import trace

__all__ = ["capture_fsdp"]




def capture_fsdp(model: nn.Module, args: tuple, kwargs: dict, capture: str, concrete_args: Any = None,
                 leaf_modules: Any = (), trace_into: Any = ()) -> GraphCapture:
    """One graph of ``model``'s layers with FSDP's all-gathers, waits and reshards as nodes.

    The model's own forward runs once first (no gradients; RNG and buffers kept): that is how
    FSDP initializes itself (which module is the root, what it reshards after forward), as it
    would on the first step of training."""
    refuse_unsupported(model, capture)
    modules = fsdp_modules(model)
    kept = [p or "(root)" for p, m in modules.items()
            if p in {v for v in leaf_modules if isinstance(v, str)}
            or isinstance(m, tuple(v for v in leaf_modules if isinstance(v, type)))]
    if kept:
        raise ValueError(
            f"leaf_modules names FSDP2 module(s) {', '.join(kept)}: fxprof traces into every fully_shard-ed module, "
            f"since FSDP's all-gathers are rows of their own; as one node it would hold them unseen. Leave them out of "
            f"leaf_modules (their own torch.nn submodules stay leaves).")
    with torch.no_grad(), preserved_rng(), preserved_buffers(model):
        model(*args, **kwargs)
    refuse_unsupported(model, capture)  # FSDP's groups are complete once it initialized itself
    try:
        with preserved_buffers(model):
            gm = trace(model, concrete_args=concrete_args, leaf_modules=leaf_modules, trace_into=trace_into,
                       past_hooks=bypass_types())
    except TraceError as exc:
        raise TraceError(
            f"cannot trace FSDP2 model {type(model).__name__} symbolically: {exc}\n(An FSDP2 model is profiled from "
            f"its traced layers with FSDP's all-gathers as nodes; dynamo and export cannot see FSDP's work.)"
        ) from exc.__cause__
    insert_fsdp_steps(gm, modules, model)
    captured = GraphCapture(gm, "symbolic", f"FSDP2 model (fully_shard on {', '.join(p or '(root)' for p in modules)}): "
                                            f"layers traced, FSDP's all-gathers timed as nodes")
    captured = split_tensor_parallel(captured, args, kwargs)  # FSDP over tensor parallelism (2D)
    captured.notes.fsdp = FSDPNotes.of(modules)  # read by fxprof.core.overlap
    return captured
