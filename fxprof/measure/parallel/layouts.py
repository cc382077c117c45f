"""The layouts fxprof knows, and the questions the capture entry asks of a model's layouts
(:mod:`fxprof.measure.parallel.base` says what each answers)."""

from __future__ import annotations

from typing import Any, Callable

from torch import nn

from .base import Layout
from .ddp import DDP
from .fsdp import FSDP2
from .tensor_parallel import TensorParallel

__all__ = ["LAYOUTS", "layouts_of", "refuse", "training_capture", "note_layouts"]

#: every layout, first asked first (FSDP2 first: it may sit over tensor parallelism)
LAYOUTS: tuple[Layout, ...] = (FSDP2(), DDP(), TensorParallel())


def layouts_of(model: nn.Module) -> list[Layout]:
    """The layouts ``model`` has, in the order they are asked."""
    return [layout for layout in LAYOUTS if layout.applies(model)]


def refuse(model: nn.Module, capture: str = "symbolic", backward: bool = False, session: bool = False) -> None:
    """The one refusal check: each of ``model``'s layouts raises for what fxprof cannot yet profile."""
    for layout in layouts_of(model):
        layout.refuse(model, capture, backward, session)


def training_capture(model: nn.Module, loop: bool, default: Callable[..., Any]) -> Callable[..., Any]:
    """The training capture class for ``model``: the first of its layouts that has one, else ``default``."""
    for layout in layouts_of(model):
        cls = layout.training(loop)
        if cls is not None:
            return cls
    return default


def note_layouts(model: nn.Module, captured: Any) -> Any:
    """``captured`` (a training capture) with each of ``model``'s layouts' notes in its metadata."""
    for layout in layouts_of(model):
        note = layout.notes(model)
        if note is not None:
            captured.notes.add(layout.name, note)
    return captured
