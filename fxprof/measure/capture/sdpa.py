"""Captured graphs that call attention as the eager model does: an all-True SDPA mask dropped.

A Hugging Face model calls ``scaled_dot_product_attention`` with ``attn_mask=None`` when nothing
is masked; captured by dynamo (transformers 5.17, torch 2.11) the same call gets an expanded
all-True bool mask, and on a GPU torch's backend choice falls from cuDNN attention to the math
path (2.2x the kernel time, 2.06x the memory: docs/performance.md). A mask that is all True masks
nothing, so the call with ``attn_mask=None`` computes the same result; this pass rewrites a
captured graph's SDPA calls whose mask is *provably* all True (made by ``ones``/``full(True)``/
``ones_like``/``new_ones``, then only reshaped, expanded, sliced or cast to bool), so the graph
dispatches the attention kernel eager runs. A mask computed from data is left as it is: the
dispatch check (:mod:`fxprof.measure.eager.fidelity`) names what still differs.
"""

from __future__ import annotations

import operator
from typing import Any

import torch
from torch import fx

__all__ = ["drop_all_true_masks"]

_SDPA = {torch.nn.functional.scaled_dot_product_attention, torch._C._nn.scaled_dot_product_attention}
_MAKERS = {torch.ones, torch.ones_like, torch.full, torch.full_like}
_METHOD_MAKERS = {"new_ones", "new_full"}
#: ops that keep every element's value (or cast it to bool, where True stays True)
_SHAPERS_FN = {torch.reshape, torch.broadcast_to, torch.unsqueeze, torch.squeeze, torch.flatten, operator.getitem,
               torch.transpose, torch.permute}
_SHAPERS_METHOD = {"expand", "expand_as", "view", "reshape", "unsqueeze", "squeeze", "flatten", "transpose", "permute",
                   "contiguous", "bool", "to", "__getitem__", "broadcast_to", "clone"}


def _true_fill(node: fx.Node) -> bool:
    """Whether ``node`` makes a tensor whose every element is nonzero and whose dtype is bool."""
    kwargs = node.kwargs
    if node.op == "call_function" and node.target in (torch.ones, torch.ones_like):
        return kwargs.get("dtype") is torch.bool
    if node.op == "call_function" and node.target in (torch.full, torch.full_like):
        fill = node.args[1] if len(node.args) > 1 else kwargs.get("fill_value")
        return fill is True or (kwargs.get("dtype") is torch.bool and fill not in (0, False, None))
    if node.op == "call_method" and node.target in _METHOD_MAKERS:
        if node.target == "new_full":
            fill = node.args[2] if len(node.args) > 2 else kwargs.get("fill_value")
            return kwargs.get("dtype") is torch.bool and fill not in (0, False, None)
        return kwargs.get("dtype") is torch.bool
    return False


def _all_true(node: Any, depth: int = 0) -> bool:
    """Whether the value of ``node`` is a bool tensor that is provably all True."""
    if not isinstance(node, fx.Node) or depth > 16:
        return False
    if _true_fill(node):
        return True
    if node.op == "call_function" and node.target in _SHAPERS_FN or node.op == "call_method" and node.target in _SHAPERS_METHOD:
        if node.op == "call_method" and node.target == "to":
            dtypes = [a for a in (*node.args[1:], *node.kwargs.values()) if isinstance(a, torch.dtype)]
            if any(d is not torch.bool for d in dtypes):
                return False
        return _all_true(node.args[0] if node.args else None, depth + 1)
    return False


def drop_all_true_masks(gm: fx.GraphModule) -> int:
    """Rewrite ``gm``'s SDPA calls whose ``attn_mask`` is provably all True to pass None; returns
    how many calls changed (the graph is recompiled when any did)."""
    changed = 0
    for node in gm.graph.nodes:
        if node.op != "call_function" or node.target not in _SDPA:
            continue
        mask = node.kwargs.get("attn_mask", node.args[3] if len(node.args) > 3 else None)
        if not _all_true(mask):
            continue
        if "attn_mask" in node.kwargs:
            node.update_kwarg("attn_mask", None)
        else:
            node.update_arg(3, None)
        changed += 1
        _drop_unused(mask)
    if changed:
        gm.recompile()
    return changed


def _drop_unused(node: fx.Node) -> None:
    """Erase the mask's chain of nodes that nothing uses any more (only those: the rest of the
    graph stays as captured)."""
    while isinstance(node, fx.Node) and not node.users and node.op in ("call_function", "call_method"):
        source = node.args[0] if node.args and isinstance(node.args[0], fx.Node) else None
        node.graph.erase_node(node)
        node = source
