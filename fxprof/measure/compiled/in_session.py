"""A ``torch.compile``d model inside the user's loop: the compiled program's kernels timed, as
compiled mode times them.

``fxprof.session(torch.compile(model))`` used to time the eager dynamo graph of the model (symbolic
tracing fails on an ``OptimizedModule`` and fell back to dynamo), not the program the loop runs.
:class:`LoopCompiledCapture` is :mod:`fxprof.measure.compiled.mode` for a session: the model is compiled
again with the user's own backend and options (read from the ``OptimizedModule``) through
:class:`~fxprof.measure.compiled.compiling.CompiledSession`, which keeps every graph with its module stacks,
under the same inductor settings (kernel ranges, provenance, no caches; patched only while fxprof's
calls run). The session's warm-up steps compile it. Each timed call then runs with fxprof's marks
in the generated code (:mod:`fxprof.measure.compiled.wrapper_timer`: a clock read around every
kernel call), put in after the call that compiled each graph and taken out when the session ends, and
the cycle's profile is built from them, rows being kernels charged to the eager nodes and modules
they compute. Where the marks cannot go (a GPU, inductor's cpp_wrapper) ``torch.profiler`` records
from the first timed step of a cycle on, every timed call in an ``fxprof::run`` range, and the
profile is built from the kernel calls inside those ranges
(:func:`fxprof.measure.compiled.spans.spans_from_events`). Warm-up steps run fxprof's copy as the
timed steps do, marks and all (their rows dropped), so the timed steps find it warm; ``wait`` steps
and the steps after the last cycle run the user's own compiled model.

The session times forwards only: a backward the loop runs executes outside the runs' ranges.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import time
import warnings
from typing import Any, Callable

import torch
from torch import nn

from ...core.nodes import NodeInfo
from ...core.profile import Profile
from ...errors import TraceError
from ..capture.captures import Capture
from ..device.bridge import events_from_kineto, kineto_quiet
from ..device.cupti import refuse_teardown
from ..timing.recorder import Recorder
from .compiling import CallSettings
from .loop import run_range
from .mode import compiled_program, first_call, marks_for, profile_from_events, profile_from_marks
from .profiler_cost import calibrate
from .wrapper_timer import WrapperTimer

__all__ = ["LoopCompiledCapture"]


class LoopCompiledCapture(Capture):
    """The compiled program of a ``torch.compile``d model, run by the user's loop (see the module docs)."""

    kind = "compiled"

    def __init__(self, optimized: nn.Module, forward: Any = None):
        super().__init__("a torch.compile'd model: the compiled program's kernels, timed in each timed step and charged "
                         "to the eager nodes they compute (as compiled mode)")
        self.root, self.described, self.graphs, self.compiled = compiled_program(optimized, forward=forward)
        root = self.root
        self.catcher = self.graphs.kept.catcher  # a program compiled before in this process keeps its code and provenance
        self._call_settings = CallSettings(root)  # made once: entered around every call
        self.compile_s = 0.0
        self.compiled_first: int | None = None
        self.on_cuda = any(t.is_cuda for t in [*root.parameters(), *root.buffers()])
        if self.on_cuda:  # a profiler cycle per timed step, CUPTI's kernels
            refuse_teardown("a session of a compiled model on a GPU")
        self._profiler: Any = None
        self._probed: Any = None  # the probes' ProfilerCost, before any cycle's in_situ scale
        self._quiet: contextlib.ExitStack | None = None
        #: the marks' timers per graph, once the first timed step chose them; why not, where torch.profiler times
        self._timers: dict[str, WrapperTimer] = {}
        self._not_marked: str | None = None
        self._unmarked: list[str] = []  # graphs compiled after the first timed call that the marks could not take
        self._graphs_seen = 0  # the compiled graphs the marks were chosen for
        self._timed_once = False  # a timed call ran with the marks' choice: it is final
        self._bounds: list[tuple[int, int]] = []  # this cycle's marked runs
        self._rows: list[dict[str, list[list[int]]]] = []

    @property
    def nodes(self) -> list[NodeInfo]:
        return []

    @property
    def module(self) -> nn.Module:
        return self.root

    @contextlib.contextmanager
    def _settings(self) -> Any:
        """What fxprof's compiled program runs under (its trace catcher, inductor's settings, room
        to compile): entered around a timed call's run range, never inside it (its cost is fxprof's)."""
        logger = logging.getLogger("torch.__trace")
        logger.addHandler(self.catcher)
        try:
            with self._call_settings:
                yield
        finally:
            logger.removeHandler(self.catcher)

    def _call(self, args: tuple, kwargs: dict) -> Any:
        """One call of the compiled program, inside :meth:`_settings`; the first one compiles."""
        if self.compiled_first is not None:
            return self.compiled(*args, **kwargs)
        sync = torch.cuda.synchronize if self.on_cuda else (lambda: None)
        out, self.compile_s, self.compiled_first = first_call(
            self.root, self.graphs, self.described, lambda: (self.compiled(*args, **kwargs), sync())[0],
            "profile it eagerly instead (fxprof.session(model._orig_mod); for a forward "
            "compiled in place, fxprof.session(model, capture='dynamo'))")
        return out

    def run(self, recorder: Recorder, args: tuple, kwargs: dict) -> Any:
        """An untimed call (a warm-up; a new input signature's first call, which compiles). It runs
        what the timed steps run: the marks of every graph compiled before it are in, and the
        graphs it compiled get theirs after it, so the marks' code and fxprof's work to make it
        (parsing and compiling each wrapper, milliseconds) are behind the timed steps, not before
        their first ones (a compiled decode step's first timed steps read 1.1-0.7 ms against 0.4 ms
        after them). Its rows are dropped."""
        try:
            with self._settings():
                out = self._call(args, kwargs)
        finally:
            for timer in self._timers.values():
                timer.take_rows()
        self._mark_graphs()  # after a call that returned: the model's own error goes out as it came
        return out

    def _unmark(self) -> None:
        """Inductor's own code again in every graph (the session's end, or torch.profiler chosen
        instead). Between cycles the marks stay: only fxprof's calls run fxprof's copy."""
        for timer in self._timers.values():
            timer.remove()

    def _mark_graphs(self, timed: bool = False) -> None:
        """The marks of every graph compiled so far, chosen and put in. Until the first timed call
        the choice is the whole program's: a graph that cannot be marked sends every graph to
        ``torch.profiler`` (as a choice made at that call would). After it, a graph compiled since
        (a new input signature) that cannot be marked runs unmarked (its time in the rows around its
        calls, and a note says so), and the others keep theirs."""
        if self._not_marked:  # torch.profiler times this program
            return
        if self._not_marked is None or self._graphs_seen < len(self.graphs.order):
            self._graphs_seen = len(self.graphs.order)
            timers, why = marks_for(self.graphs, self.catcher, self.on_cuda, self.described, self._timers)
            if why and not self._timed_once:
                self._unmark()
                self._timers, self._not_marked = {}, why
                return
            if why:
                self._unmarked.extend(g for g in self.graphs.order if g not in self._timers and g not in self._unmarked)
            else:
                self._timers = timers
            self._not_marked = ""
        self._timed_once = self._timed_once or timed
        for timer in self._timers.values():
            timer.install()

    def run_timed(self, recorder: Recorder, args: tuple, kwargs: dict) -> Any:
        """A timed call: with the marks in the generated code, else recorded by ``torch.profiler``
        in an ``fxprof::run`` range."""
        self._mark_graphs(timed=True)
        if not self._not_marked:
            return self._run_marked(recorder, args, kwargs)
        if self._profiler is None:
            self._start()
        with self._settings():
            with recorder.run(), run_range():
                out = self._call(args, kwargs)
                if self.on_cuda:
                    torch.cuda.synchronize()
        return out

    def _run_marked(self, recorder: Recorder, args: tuple, kwargs: dict) -> Any:
        clock = time.perf_counter_ns
        # the marks stay in from one call to the next, to the session's end (put in by _mark_graphs): swapping the
        # code in and out around each step made each step a first call of the swapped code (3% of a decode step)
        try:
            with self._settings():
                with recorder.run():
                    t0 = clock()
                    out = self._call(args, kwargs)
                    if self.on_cuda:
                        torch.cuda.synchronize()
                    t1 = clock()
        except BaseException:  # a failed run's rows are no run's
            for timer in self._timers.values():
                timer.take_rows()
            raise
        self._bounds.append((t0, t1))
        self._rows.append({g: t.take_rows() for g, t in self._timers.items()})
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
        if self._bounds or self._not_marked == "":
            return self._build_marked(meta, name)
        events = self._stop()
        if self._probed is None:  # the profiler's own cost per event, probed once per session
            kept = self.graphs.profiler_cost  # a program compiled before keeps its probes' figures (maybe scaled)
            self._probed = (dataclasses.replace(kept, scale=1.0, nested_scale=1.0, measured=0.0, scale_reason="")
                            if kept is not None else calibrate(self.on_cuda))
        self.graphs.profiler_cost = self._probed  # each cycle scales the probes' figures afresh (in_situ)
        # the user's own compiled forward at the schedule's eager steps (wait, skip_first), of the
        # cycle's one input signature (fxprof.measure.eager.fidelity.EagerSteps): the yardstick that
        # compiled mode times itself, here timed as the loop ran it; on the CPU it measures the
        # profiler's cost per event in this program's runs (profiler_cost.in_situ), as compiled mode does
        plain = [] if self.on_cuda else [float(v) for v in meta.get("own_runs_ms") or []]
        contention = meta.get("contention") or {}
        lost = None
        if plain and contention.get("lost_ms") is not None and contention.get("own_lost_ms") is not None:
            lost = ([float(v) for v in contention["lost_ms"]], [float(v) for v in contention["own_lost_ms"]])
            meta = {**meta, "contention": {**contention, "unprofiled_lost_ms": contention["own_lost_ms"]}}
        described = {**self.described, "kernel_source_reason": self._not_marked} if self._not_marked else dict(self.described)
        profile = profile_from_events(self.root, self.graphs, self.catcher, events, self.on_cuda, plain, self.compile_s,
                                      described, self.compiled_first or 0, meta, name, lost=lost)
        return self._noted(profile, plain)

    def can_build_later(self) -> bool:
        """Runs the marks timed since the last build (a cycle timed by ``torch.profiler`` is built
        at once: its events are read when the profiler stops)."""
        return bool(self._bounds)

    def build_later(self, name: str | None) -> Callable[[dict[str, Any]], Profile]:
        """:meth:`build` in two parts: the cycle's marked runs taken now (the next cycle's are its
        own), the profile made when the returned function is given the cycle's meta."""
        bounds, rows, self._bounds, self._rows = self._bounds, self._rows, [], []
        unmarked = list(self._unmarked)
        return lambda meta: self._build_marked(meta, name, (bounds, rows, unmarked))

    def _build_marked(self, meta: dict[str, Any], name: str | None,
                      taken: tuple[list[tuple[int, int]], list[dict[str, list[list[int]]]], list[str]] | None = None) -> Profile:
        """The cycle's profile from its marked runs (``taken``: taken before, by :meth:`build_later`)."""
        if taken is None:
            taken = (self._bounds, self._rows, list(self._unmarked))
            self._bounds, self._rows = [], []
        bounds, rows, unmarked = taken
        if not bounds:
            raise TraceError("the cycle ran no timed step of the compiled model, so there is nothing to profile; "
                             "give the schedule an active step (fxprof.schedule(active=...))")
        plain = [float(v) for v in meta.get("own_runs_ms") or []]
        contention = meta.get("contention") or {}
        if plain and contention.get("own_lost_ms") is not None:
            meta = {**meta, "contention": {**contention, "unprofiled_lost_ms": contention["own_lost_ms"]}}
        described = {**self.described, "unmarked_graphs": unmarked} if unmarked else dict(self.described)
        profile = profile_from_marks(self.root, self.graphs, self.catcher, self._timers, rows, bounds, plain,
                                     self.compile_s, described, self.compiled_first or 0, meta, name)
        return self._noted(profile, plain)

    def _noted(self, profile: Profile, plain: list[float]) -> Profile:
        profile.meta["capture_reason"] = self.reason
        profile.meta.setdefault("notes", []).append(
            "a session of a compiled model times the compiled program's forward kernels in each timed step (as compiled "
            "mode does), and a backward the loop runs is not timed; " + (
                f"the {len(plain)} unprofiled runs it holds them against are the model's own compiled forward at the "
                f"schedule's eager steps (wait, skip_first) with this input signature" if plain else
                "no eager step of the schedule (wait, skip_first) ran this input signature, so there are no unprofiled "
                "runs to hold them against (fxprof.schedule(wait=4, ...) gives some)"))
        return profile

    def close(self) -> None:
        self._unmark()
        self._stop()
