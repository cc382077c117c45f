"""A ``torch.compile``d model inside the user's loop: the compiled program's kernels timed, as
compiled mode times them.

``fxprof.session(torch.compile(model))`` used to time the eager dynamo graph of the model (symbolic
tracing fails on an ``OptimizedModule`` and fell back to dynamo), not the program the loop runs.
:class:`LoopCompiledCapture` is :mod:`fxprof.measure.compiled.mode` for a session: the model is compiled
again with the user's own backend and options (read from the ``OptimizedModule``) through
:class:`~fxprof.measure.compiled.compiling.CompiledSession`, which keeps every graph with its module stacks,
under the same inductor settings (kernel ranges, provenance, no caches; patched only while fxprof's
calls run). The session's warm-up steps compile it; from the first timed step of a cycle on,
``torch.profiler`` records, and every timed call runs in an ``fxprof::run`` range; when the cycle
ends the profiler stops and the cycle's profile is built from the kernel calls inside those ranges
(:func:`fxprof.measure.compiled.spans.spans_from_events`), rows being kernels charged to the eager nodes
and modules they compute. Untimed steps (``wait``, after the last cycle) run the user's own
compiled model.

The session times forwards only: a backward the loop runs executes outside the runs' ranges.
"""

from __future__ import annotations

import contextlib
import logging
import warnings
from typing import Any

import torch
from torch import nn

from ...core.nodes import NodeInfo
from ...core.profile import Profile
from ..device.bridge import events_from_kineto, kineto_quiet
from ..capture.captures import Capture
from .compiling import _inductor_settings, _recursion_limit_kept, room_to_compile
from .mode import compiled_program, first_call, profile_from_events
from .runs import run_range
from .profiler_cost import calibrate
from ..timing.recorder import Recorder

__all__ = ["LoopCompiledCapture"]


class LoopCompiledCapture(Capture):
    """The compiled program of a ``torch.compile``d model, run by the user's loop (see the module docs)."""

    kind = "compiled"

    def __init__(self, optimized: nn.Module, forward: Any = None):
        super().__init__("a torch.compile'd model: the compiled program's kernels, timed by torch.profiler in each timed "
                         "step and charged to the eager nodes they compute (as compiled mode)")
        self.root, self.described, self.graphs, self.compiled = compiled_program(optimized, forward=forward)
        root = self.root
        self.catcher = self.graphs.kept.catcher  # a program compiled before in this process keeps its code and provenance
        self.compile_s = 0.0
        self.compiled_first: int | None = None
        self.on_cuda = any(t.is_cuda for t in [*root.parameters(), *root.buffers()])
        self._profiler: Any = None
        self._quiet: contextlib.ExitStack | None = None

    @property
    def nodes(self) -> list[NodeInfo]:
        return []

    @property
    def module(self) -> nn.Module:
        return self.root

    def _call(self, args: tuple, kwargs: dict) -> Any:
        logger = logging.getLogger("torch.__trace")
        logger.addHandler(self.catcher)
        try:
            with _recursion_limit_kept(), room_to_compile(self.root), _inductor_settings():
                if self.compiled_first is not None:
                    return self.compiled(*args, **kwargs)
                sync = torch.cuda.synchronize if self.on_cuda else (lambda: None)
                out, self.compile_s, self.compiled_first = first_call(
                    self.root, self.graphs, self.described, lambda: (self.compiled(*args, **kwargs), sync())[0],
                    "profile it eagerly instead (fxprof.session(model._orig_mod); for a forward "
                    "compiled in place, fxprof.session(model, capture='dynamo'))")
                return out
        finally:
            logger.removeHandler(self.catcher)

    def run(self, recorder: Recorder, args: tuple, kwargs: dict) -> Any:
        """An untimed call (warm-up; the first one compiles)."""
        return self._call(args, kwargs)

    def run_timed(self, recorder: Recorder, args: tuple, kwargs: dict) -> Any:
        """A timed call: recorded by ``torch.profiler`` in an ``fxprof::run`` range."""
        if self._profiler is None:
            self._start()
        with recorder.run(), run_range():
            out = self._call(args, kwargs)
            if self.on_cuda:
                torch.cuda.synchronize()
        return out

    def _start(self) -> None:
        from torch.profiler import ProfilerActivity, profile

        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if self.on_cuda else [])
        self._profiler = profile(activities=activities)
        with kineto_quiet():
            self._profiler.__enter__()

    def _stop(self) -> list[Any]:
        prof, self._profiler = self._profiler, None
        if prof is None:
            return []
        with kineto_quiet(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            prof.__exit__(None, None, None)
        return events_from_kineto(prof.profiler.kineto_results.events())

    def build(self, meta: dict[str, Any], name: str | None) -> Profile:
        """The cycle's profile: the kernel calls inside its timed runs (the profiler stops here)."""
        events = self._stop()
        if self.graphs.profiler_cost is None:  # the profiler's own cost per event, once per session
            self.graphs.profiler_cost = calibrate(self.on_cuda)
        profile = profile_from_events(self.root, self.graphs, self.catcher, events, self.on_cuda, [], self.compile_s,
                                      dict(self.described), self.compiled_first or 0, meta, name)
        profile.meta["capture_reason"] = self.reason
        profile.meta.setdefault("notes", []).append(
            "a session of a compiled model times the compiled program's forward kernels in each timed step (as compiled "
            "mode does); there are no unprofiled runs to hold them against, and a backward the loop runs is not timed")
        return profile

    def close(self) -> None:
        self._stop()
