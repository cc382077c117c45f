"""Walking nested values (tuples, lists, namedtuples, dicts) for the tensors inside them, and a
graph node's arguments as the model's own code builds them (:class:`PlainContainers`)."""

from __future__ import annotations

from typing import Any

import torch
from torch import fx

__all__ = ["tensors_in", "clone_tensors", "describe_value", "node_values", "PlainContainers"]


def tensors_in(value: Any) -> list[torch.Tensor]:
    """Every tensor in ``value``, depth first, in order."""
    found: list[torch.Tensor] = []
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, torch.Tensor):
            found.append(item)
        elif isinstance(item, (list, tuple)):
            stack.extend(reversed(item))
        elif isinstance(item, dict):
            stack.extend(reversed(list(item.values())))
    return found


def clone_tensors(value: Any) -> Any:
    """``value`` with every tensor cloned, keeping the structure (namedtuples included).

    Each clone is a new leaf, cut from the original's autograd graph (it requires grad when the
    original does): a backward through the clone fills the clone's ``.grad``, never the
    caller's tensor."""
    if isinstance(value, torch.Tensor):
        clone = value.detach().clone()
        return clone.requires_grad_() if value.requires_grad else clone
    if isinstance(value, tuple) and hasattr(value, "_fields"):
        return type(value)(*(clone_tensors(v) for v in value))
    if isinstance(value, (list, tuple)):
        return type(value)(clone_tensors(v) for v in value)
    if isinstance(value, dict):
        return {k: clone_tensors(v) for k, v in value.items()}
    return value


def describe_value(value: Any) -> str:
    """A one-line description of a node input: shape, dtype and device for tensors."""
    if isinstance(value, torch.Tensor):
        return (
            f"Tensor(shape={list(value.shape)}, dtype={str(value.dtype).replace('torch.', '')}, "
            f"device={value.device})"
        )
    if isinstance(value, (list, tuple)):
        inner = ", ".join(describe_value(v) for v in value[:4])
        more = ", ..." if len(value) > 4 else ""
        open_, close = ("[", "]") if isinstance(value, list) else ("(", ")")
        return f"{open_}{inner}{more}{close}"
    if isinstance(value, dict):
        inner = ", ".join(f"{k!r}: {describe_value(v)}" for k, v in list(value.items())[:4])
        return "{" + inner + (", ..." if len(value) > 4 else "") + "}"
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def node_values(arg: Any, env: dict[fx.Node, Any], user: fx.Node | None = None) -> Any:
    """``arg`` (a node's ``args`` or ``kwargs``) with each ``fx.Node`` replaced by its value in
    ``env``, and every list and dict a plain ``list`` and ``dict``, as the model's own code builds
    them. ``torch.fx``'s ``map_arg`` hands out ``immutable_list`` and ``immutable_dict``
    instead: a callee that appends to the list it was given, or a loop that adds its loss to the
    model's output dict, would raise under fxprof and not without it."""
    if isinstance(arg, fx.Node):
        try:
            return env[arg]
        except KeyError:
            raise RuntimeError(f"Node {user} referenced nonexistent value {arg}! Run Graph.lint() "
                               f"to diagnose such issues") from None
    if isinstance(arg, tuple):
        values = [node_values(a, env, user) for a in arg]
        return type(arg)(*values) if hasattr(arg, "_fields") else tuple(values)
    if isinstance(arg, list):
        return [node_values(a, env, user) for a in arg]
    if isinstance(arg, dict):
        return {k: node_values(v, env, user) for k, v in arg.items()}
    if isinstance(arg, slice):
        return slice(node_values(arg.start, env, user), node_values(arg.stop, env, user),
                     node_values(arg.step, env, user))
    return arg


class PlainContainers:
    """Mixin for an ``fx.Interpreter`` (put it first among the bases): nodes, and the caller of
    the graph's output, get plain lists and dicts (:func:`node_values`), never torch.fx's
    immutable ones."""

    env: dict[fx.Node, Any]

    def map_nodes_to_values(self, args: Any, n: fx.Node) -> Any:
        return node_values(args, self.env, n)
