"""Walking nested values (tuples, lists, namedtuples, dicts) for the tensors inside them."""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["tensors_in", "clone_tensors", "describe_value"]


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
