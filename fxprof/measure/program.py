"""The one capture entry: a model, its inputs and the options -> the program to time.

Every mode gets what it times from :func:`capture_program`: ``fxprof.profile`` (forward passes and
training steps) and :class:`fxprof.measure.session.session.Session` (the user's loop) alike, so a fix to
what a capture runs (call patterns, instance forwards, a compiled model) reaches every mode. The
entry decides *which* program a request means, in this order:

``compiled``  a ``torch.compile``d model (an ``OptimizedModule``, captured ``"auto"``) or
              ``compile=``: the compiled program's kernels. In a loop,
              :class:`~fxprof.measure.compiled.in_session.LoopCompiledCapture`; ``fxprof.profile`` runs
              :func:`fxprof.measure.compiled.mode.profile_compiled_model` (compiled mode times whole runs
              with ``torch.profiler``, not node by node), which :func:`wants_compiled` tells it to.
              Both build the program with :func:`fxprof.measure.compiled.mode.compiled_program`, compile
              it with :func:`~fxprof.measure.compiled.mode.first_call` and make the profile with
              :func:`~fxprof.measure.compiled.mode.profile_from_events`; what differs is who drives the
              runs (compiled mode's profiler cycles with unprofiled runs between, or the loop).
``training``  ``backward=True``: forward and backward graphs from AOTAutograd
              (:mod:`fxprof.measure.capture.training`; in a loop :mod:`fxprof.measure.capture.training_loop`);
              a model with a parallel layout whose own work is timed as rows (FSDP2, DDP) gets that
              layout's training capture, and the layout's notes in its metadata.
``eager``     the model's graphs (:func:`fxprof.measure.capture.captures.capture_model`: symbolic tracing,
              dynamo or export), with the call's pattern of optional inputs and the forward the
              model really runs (an instance forward included).

Before any but the compiled program, the model's parallel layouts (:mod:`fxprof.measure.parallel`)
refuse what fxprof cannot yet profile on them: one check, :func:`fxprof.measure.parallel.layouts.refuse`.

The returned :class:`~fxprof.measure.capture.captures.Capture` is the program, its nodes and (through
``readable_names``) their names.
"""

from __future__ import annotations

from typing import Any, Callable

import torch
from torch import nn

from .capture.captures import Capture, DynamoCapture, capture_model
from .capture.dynamo import fxprof_backend
from .compiled.compiling import compiled_forward, is_compiled_function
from .compiled.mode import is_compiled
from .parallel.layouts import note_layouts, refuse, training_capture

__all__ = ["capture_program", "wants_compiled", "COMPILED_BACKWARD"]

COMPILED_BACKWARD = ("backward=True times the backward graphs of an eager model (AOTAutograd through fxprof's own "
                     "backend); a session of a torch.compile'd model times its compiled forward kernels. Leave "
                     "backward=True out, or pass the eager model (model._orig_mod) for backward=True")


def wants_compiled(model: nn.Module, compile: Any = None, capture: str = "auto", forward: Any = None) -> bool:
    """Does the request mean the compiled program (``compile=`` given, or a compiled model taken
    as it is: an ``OptimizedModule``, or a module whose forward is compiled in place)?
    ``compile=False`` or an explicit eager ``capture`` asks for the eager graphs. ``forward``: the
    forward a session runs (it replaces the instance attribute with its own). A forward compiled in
    place (``model.forward = torch.compile(model.forward)``) means its compiled program: dynamo cannot
    capture eager graphs through it (``capture='dynamo'`` compiled no graph of such a model)."""
    if compile:
        return True
    in_place = is_compiled_function(forward) or compiled_forward(model) is not None
    return compile is None and (is_compiled(model) or in_place) and capture == "auto"


def capture_program(model: nn.Module, args: tuple, kwargs: dict, *, capture: str = "auto", backward: bool = False,
                    loss_fn: Callable[[Any], torch.Tensor] | None = None, optimizer: Any = None, mode: str = "timed",
                    concrete_args: dict[str, Any] | None = None, leaf_modules: Any = (), trace_into: Any = (),
                    compile: Any = None, loop: bool = False, forward: Any = None) -> Capture:
    """The program ``model(*args, **kwargs)`` runs, captured for timing (see the module docs).

    ``loop``: for a session, whose graphs run inside the model's own ``__call__`` (the session put
    its forward on the instance; ``forward`` is the one it replaced, what the model runs). A
    non-loop compiled request is not a :class:`Capture`: check :func:`wants_compiled` first."""
    if wants_compiled(model, compile, capture, forward if loop else None):
        if not loop:
            raise ValueError("the compiled program is profiled by fxprof.measure.compiled.mode.profile_compiled_model")
        if backward:
            raise ValueError(COMPILED_BACKWARD)
        from .compiled.in_session import LoopCompiledCapture

        return LoopCompiledCapture(model, forward)
    refuse(model, capture, backward=backward, session=loop)  # what fxprof cannot yet time on a parallel layout
    if backward:
        if torch.is_inference_mode_enabled():
            raise ValueError(
                "backward=True was called inside torch.inference_mode(), where no gradient can be computed "
                "(tensors made there can never take part in autograd); call fxprof.profile outside the "
                "inference_mode() block. (Inside torch.no_grad() fxprof turns gradients on for the steps itself.)"
            )
        if loop:
            from .capture.training_loop import LoopTrainingCapture

            # a layout's own work (FSDP2's, DDP's all-reduce) timed as rows
            loop_cls = training_capture(model, True, LoopTrainingCapture)
            return note_layouts(model, loop_cls(model, forward if forward is not None else model.forward))
        from .capture.training import TrainingCapture, capture_training

        # a layout's own work (FSDP2's, DDP's all-reduce) timed as rows
        cls = training_capture(model, False, TrainingCapture)
        return note_layouts(model, capture_training(model, capture, mode, loss_fn, optimizer, cls))
    if loss_fn is not None or optimizer is not None:
        raise ValueError("loss_fn and optimizer apply to training steps: pass backward=True as well")
    captured = capture_model(model, args, kwargs, capture, concrete_args=concrete_args, leaf_modules=leaf_modules,
                             trace_into=trace_into, root_hooks_run=loop, forward=forward)
    if loop and isinstance(captured, DynamoCapture) and forward is not None:
        # compile the forward the model runs: its __call__ now leads to the session's forward
        captured.compiled = torch.compile(forward, backend=fxprof_backend)
    if loop and isinstance(captured, DynamoCapture):
        captured.loop = True
    return captured
