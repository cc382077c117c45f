"""Which graph nodes launch nothing on a device: they need no CUDA event of their own.

The event timers (``"cuda"``, ``"kernel"``) record one event per node *boundary*
(:mod:`fxprof.measure.capture.interpreter`): a node's end mark is the next node's start mark. A node
that enqueues nothing on the stream needs no boundary at all: its device time is 0 by
construction and the boundary moves on to the next node that launches. An event costs about
as much as a kernel launch on the host (4-9 us, ../shared/FACTS.md), so on BERT, where most
nodes are views, getitems and size reads, leaving them out halves the events again.

Only nodes that launch nothing *whatever their inputs* are left out, decided from the graph
alone (the plan is built before the first run, and the anatomy pass's aten-op record comes
after the timed runs):

- reads: ``placeholder``, ``get_attr``, ``output``;
- view and metadata calls, as ``call_method`` or ``call_function`` (``x.view``,
  ``torch.permute``...): :data:`VIEW_NAMES`; every one of them returns a view of its input or a
  Python value, whatever the input's strides;
- ``getitem`` with a constant index (ints, slices of ints, ``None``, ``...``: a tuple element or a
  basic-indexing view); an index that is a node may be a tensor (advanced indexing gathers: a kernel);
- ``getattr`` (``x.shape``, ``x.dtype``) and an ``nn.Identity`` submodule;
- functional dropout whose ``training`` argument is the constant ``False`` (dynamo's graphs of a
  model in eval mode: it returns its input);
- in aten graphs (AOTAutograd's forward and backward, export): an op whose schema says it is
  a view (``aten.t``, ``aten.view``, ``aten.expand``...), and metadata/aliasing ops
  (``aten.sym_size``, ``aten.detach``, ``aten._unsafe_view``...).

``reshape``, ``flatten``, ``contiguous``, ``type_as``/``to`` stay timed: they copy when the
input's strides (or dtype) ask for it, which the graph does not say. A view-like node that is
timed costs one event; a launching node left out would hand its kernel time to the next node,
so the rule errs on the timed side. :func:`launch_check` compares the choice with the anatomy
pass's count of aten ops that do work, after the runs.
"""

from __future__ import annotations

import builtins
import operator
from typing import Any, Iterable

import torch
from torch import fx, nn

__all__ = ["VIEW_NAMES", "launches_nothing", "launch_check"]

#: methods and functions that return a view of their input or a Python value, never a copy
VIEW_NAMES = frozenset({
    "view", "view_as", "permute", "transpose", "t", "expand", "expand_as", "unsqueeze", "squeeze",
    "size", "dim", "numel", "narrow", "select", "unbind", "split", "chunk", "split_with_sizes", "detach",
    "unflatten", "movedim", "moveaxis", "swapaxes", "swapdims", "as_strided", "diagonal", "unfold",
    "tensor_split", "hsplit", "vsplit", "dsplit", "is_contiguous", "is_floating_point", "stride",
    "element_size", "nelement", "ndimension", "get_device", "data_ptr",
})

#: aten ops that are not views by their schema but launch nothing either (metadata, aliasing)
_ATEN_NO_LAUNCH = frozenset({"sym_size", "sym_stride", "sym_numel", "sym_storage_offset", "dim", "size", "stride",
                             "alias", "detach", "_unsafe_view", "_reshape_alias", "lift_fresh"})

_READS = ("placeholder", "get_attr", "output")
_F = torch.nn.functional
_DROPOUTS = frozenset({_F.dropout, _F.dropout1d, _F.dropout2d, _F.dropout3d, _F.alpha_dropout, _F.feature_alpha_dropout})
_NAMESPACES = (torch, torch.Tensor, torch.nn.functional)


def _constant_index(index: Any) -> bool:
    if index is None or index is Ellipsis:
        return True
    if type(index) is int:
        return True
    if type(index) is slice:
        return all(v is None or type(v) is int for v in (index.start, index.stop, index.step))
    if type(index) is tuple:
        return all(_constant_index(i) for i in index)
    return False


def launches_nothing(node: fx.Node, module: nn.Module | None = None) -> bool:
    """True when ``node`` enqueues nothing on any device stream, whatever its inputs (the
    rule in the module docs); False when it may launch."""
    op = node.op
    if op in _READS:
        return True
    target = node.target
    if op == "call_method":
        return str(target) in VIEW_NAMES
    if op == "call_function":
        if target is operator.getitem:
            return len(node.args) == 2 and _constant_index(node.args[1])
        if target is builtins.getattr:
            return True
        if isinstance(target, torch._ops.OpOverload):  # aten graphs (AOTAutograd, export)
            return bool(getattr(target, "is_view", False)) or target._opname in _ATEN_NO_LAUNCH
        name = getattr(target, "__name__", None)
        if any(target is d for d in _DROPOUTS):  # in eval (training=False, a constant of the graph) dropout returns its input
            training = node.kwargs.get("training", node.args[2] if len(node.args) > 2 else True)
            return training is False
        return name in VIEW_NAMES and any(getattr(ns, name, None) is target for ns in _NAMESPACES)
    if op == "call_module" and module is not None:
        try:
            sub = module.get_submodule(str(target))
        except AttributeError:
            return False
        return type(sub) is nn.Identity
    return False


def launch_check(unmarked: Iterable[str], records: dict[str, dict[str, Any]]) -> list[str]:
    """Notes for the profile: nodes given no event (``unmarked``) whose aten ops did launch
    work in the anatomy pass (``records[name]["device_ops"] > 0``): their device time went to
    the next timed node. Empty when the static rule held (the usual case)."""
    wrong = [name for name in unmarked if (records.get(name) or {}).get("device_ops")]
    if not wrong:
        return []
    shown = ", ".join(wrong[:5]) + (f" and {len(wrong) - 5} more" if len(wrong) > 5 else "")
    return [f"{len(wrong)} node(s) taken for launch-free got no CUDA event but ran device work ({shown}): "
            f"their device time is in the next timed node's"]
