"""Walking nested values (tuples, lists, namedtuples, dicts) for the tensors inside them."""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["tensors_in", "clone_tensors"]


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
    """``value`` with every tensor cloned, keeping the structure (namedtuples included)."""
    if isinstance(value, torch.Tensor):
        return value.clone()
    if isinstance(value, tuple) and hasattr(value, "_fields"):
        return type(value)(*(clone_tensors(v) for v in value))
    if isinstance(value, (list, tuple)):
        return type(value)(clone_tensors(v) for v in value)
    if isinstance(value, dict):
        return {k: clone_tensors(v) for k, v in value.items()}
    return value
