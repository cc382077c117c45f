"""The parallel-layout plug-in interface: what the capture entry asks of a layout.

A :class:`Layout` is one way a model is spread over ranks (FSDP2, DDP, tensor parallelism).
The capture entry (:func:`fxprof.measure.program.capture_program`, and a session when it is made)
asks the layouts a model has (:func:`fxprof.measure.parallel.layouts.layouts_of`):

``refuse``          what fxprof cannot yet profile faithfully: raises with the reason (one check
                    for every layout: :func:`fxprof.measure.parallel.layouts.refuse`);
``training``        the training captures (``fxprof.profile`` and a session's loop) that time the
                    layout's own work as rows (or None: the plain ones);
``notes``           a typed note for a training capture's metadata, under the layout's ``name``
                    (or None);

A forward capture (``backward=False``) is not asked here: the symbolic captures of
:mod:`fxprof.measure.capture.captures`, a layer below, capture an FSDP2 model's layers with FSDP's
work as nodes (noting FSDP's the same way) and split tensor-parallel modules themselves.

The layouts themselves live in this package (``fsdp``, ``ddp``, ``tensor_parallel``), listed in
:mod:`fxprof.measure.parallel.layouts`, first asked first.
"""

from __future__ import annotations

from typing import Any, Callable

from torch import nn

__all__ = ["Layout"]


class Layout:
    """One parallel layout (see the module docs); a subclass overrides what it has."""

    #: the layout's name (``fsdp``, ``ddp``, ``tensor_parallel``)
    name = ""

    def applies(self, model: nn.Module) -> bool:
        """Whether ``model`` is laid out this way."""
        raise NotImplementedError

    def refuse(self, model: nn.Module, capture: str, backward: bool, session: bool) -> None:
        """Raise ValueError for a request fxprof cannot yet profile on this layout; else nothing."""

    def training(self, loop: bool) -> Callable[..., Any] | None:
        """The training capture class whose steps time the layout's work as rows (``loop``: a
        session's), or None for the plain one."""
        return None

    def notes(self, model: nn.Module) -> Any:
        """A typed note (with ``meta()``: the dict the metadata holds) for a training capture, or None."""
        return None
