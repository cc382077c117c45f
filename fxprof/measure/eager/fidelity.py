"""Fidelity: the model's own forward timed beside the profiled runs, and the aten ops that the
model and the captured program dispatch, compared once per capture.

- :class:`OwnRuns` times the model's own forward (the eager ``model(*args, **kwargs)``,
  uninstrumented), a few times, interleaved with the profiled runs (:func:`own_run_slots`),
  on the same clock as the profiled runs' totals: CUDA events on the current stream for the
  event timers, the host clock (with a synchronize on each side under the sync timer)
  otherwise. Its runs go to ``meta["own_runs_ms"]``; :mod:`fxprof.core.fidelity` derives the
  header's ratio and the ``(outside the graph)`` row from them.
- :func:`count_aten_ops` counts the aten ops a call dispatches (``torch.profiler``'s CPU ops);
  :func:`dispatch_note` compares one eager forward with one run of the captured program and
  says, by name and count, where they differ (a model that takes another path while traced,
  SDPA given a mask the eager call did not pass).
"""

from __future__ import annotations

import time
from collections import Counter
from typing import Any, Callable, Iterable

import torch

from ...core.fidelity import describe_differences, dispatch_differences
from ...vocab import TIMER_NAMES
from ..common.tree import clone_tensors

__all__ = ["OwnRuns", "EagerSteps", "own_run_slots", "count_aten_ops", "dispatch_note", "OWN_RUNS_MAX"]

#: at most this many own runs a profile (a few are enough for a median; the test suite runs
#: hundreds of profiles)
OWN_RUNS_MAX = 5


def own_run_slots(iters: int, most: int = OWN_RUNS_MAX) -> set[int]:
    """The profiled runs (0-based) before which an own run goes: about one in four, at least
    three, at most ``most``, spread evenly over the runs."""
    count = min(most, max(3, iters // 4), max(iters, 1))
    return {round(i * iters / count) for i in range(count)}


class OwnRuns:
    """Times the model's own call ``model(*args, **kwargs)`` on the clock of ``timer`` (inputs
    cloned before the clock starts, as the profiled runs' are); :attr:`ms` holds each run. A
    forward that fails stops the own runs and keeps the reason in :attr:`failed` (the profile
    goes on without them)."""

    def __init__(self, model: Callable[..., Any], args: tuple, kwargs: dict, timer: Any,
                 devices: Iterable[torch.device] = ()):
        self.model, self.args, self.kwargs = model, tuple(args), dict(kwargs)
        self.ms: list[float] = []
        self.failed = ""
        #: measures what each timed own run lost to other processes (set by the run loop), into :attr:`lost_ms`
        self.meter: Any = None
        self.lost_ms: list[float] = []
        name = getattr(timer, "name", "")
        self._cuda = [d for d in devices if d.type == "cuda"] if torch.cuda.is_available() else []
        self._events = bool(self._cuda) and name in ("cuda", "kernel")
        self._sync = bool(self._cuda) and not self._events
        self._pending: list[tuple[Any, Any]] = []
        # the timer's host clock (perf_counter_ns for fxprof's timers; a thread CPU clock where a
        # harness times nodes on one): own runs and rows must be read on one clock to compare
        self._clock = getattr(timer, "host_ns", None) or time.perf_counter_ns

    @classmethod
    def for_profile(cls, model: Callable[..., Any], captured: Any, inputs: tuple[tuple, dict], bound: tuple[tuple, dict],
                    timer: Any, devices: Iterable[torch.device], backward: bool, mode: str) -> "OwnRuns | None":
        """The own runs of a profile, or None where there are none: only with fxprof's own timers
        (a Timer of the user's may count something else than time), forward profiles (a training
        step's own run is the user's loop) and whole runs (not isolated mode). A GraphModule the
        user passed takes the inputs bound to its placeholders (``bound``), any other model the
        user's (``inputs``)."""
        if getattr(timer, "name", None) not in TIMER_NAMES or backward or mode != "timed":
            return None
        args, kwargs = bound if getattr(captured, "kind", "") == "graphmodule" else inputs
        return cls(model, args, kwargs, timer, devices)

    def call(self) -> Any:
        """One untimed forward of the model on fresh copies of the inputs."""
        a, k = clone_tensors((self.args, self.kwargs))
        return self.model(*a, **k)

    def run(self) -> None:
        if self.failed:
            return
        try:
            # one untimed call first: the profiled run before it left the eager forward's code and data cold
            # (HF ViT's own runs read 1.19-1.22x the ones timed back to back outside the profile, 0.95 with it)
            a, k = clone_tensors((self.args, self.kwargs))
            if self._events:
                self.call()
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                self.model(*a, **k)
                end.record()
                self._pending.append((start, end))  # read after the run's own synchronize
                return

            def warm() -> None:
                self.call()
                if self._sync:
                    for d in self._cuda:
                        torch.cuda.synchronize(d)

            if self.meter is not None:  # the untimed call after the meter's syscalls, which leave the run cold too
                self.meter.around(lambda: self._timed(a, k), into=self.lost_ms, warm=warm)
            else:
                warm()
                self._timed(a, k)
        except Exception as exc:  # the profile does not depend on it
            self.failed = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"

    def _timed(self, a: tuple, k: dict) -> None:
        t0 = self._clock()
        self.model(*a, **k)
        if self._sync:
            for d in self._cuda:
                torch.cuda.synchronize(d)
        self.ms.append((self._clock() - t0) / 1e6)

    def collect(self) -> list[float]:
        """Every own run in ms (CUDA events are read here, once the device is done)."""
        for start, end in self._pending:
            end.synchronize()
            self.ms.append(float(start.elapsed_time(end)))
        self._pending.clear()
        return list(self.ms)

    def describe(self, meta: dict[str, Any]) -> dict[str, Any]:
        """``meta`` with the own runs and, if the forward failed, a note saying why there are none."""
        runs = self.collect()
        out = dict(meta)
        if runs:
            out["own_runs_ms"] = [round(v, 6) for v in runs]
        if self.failed:
            out["notes"] = list(out.get("notes", [])) + [
                f"the model's own forward could not be timed beside the profiled runs ({self.failed}): no fidelity line"]
        return out


# ----------------------------------------------------------------- aten ops dispatched
#: ops that move no work (aliases, allocations, scalar reads): left out of the comparison
_NEUTRAL = frozenset({"aten::detach", "aten::detach_", "aten::alias", "aten::lift_fresh", "aten::_local_scalar_dense",
                      "aten::item", "aten::empty", "aten::empty_like", "aten::empty_strided", "aten::resolve_conj",
                      "aten::resolve_neg", "aten::view", "aten::_unsafe_view", "aten::as_strided", "aten::_reshape_alias",
                      "aten::reshape", "aten::expand", "aten::t", "aten::transpose", "aten::permute", "aten::select",
                      "aten::slice", "aten::unsqueeze", "aten::squeeze", "aten::split", "aten::chunk", "aten::unbind",
                      "aten::narrow", "aten::flatten", "aten::dim", "aten::size", "aten::stride", "aten::is_nonzero",
                      "aten::_assert_tensor_metadata", "aten::_assert_async", "aten::_assert_scalar",
                      "aten::sym_constrain_range", "aten::sym_constrain_range_for_size", "aten::_functional_assert_async"})


def count_aten_ops(call: Callable[[], Any]) -> tuple[Counter[str], dict[str, set[str]]]:
    """The aten ops one ``call()`` dispatches, read from ``torch.profiler``'s CPU ops (composite ops
    and the ops they run both counted, so an op is named as the user knows it): ``({"aten::name":
    calls}, {"aten::name": {the aten ops it ran inside}})``. Views, aliases and allocations are
    left out: they move no work, and a capture may add or drop them freely; an in-place op counts
    as its out-of-place twin (``x += y`` traced runs ``aten::add`` where the model runs ``aten::add_``)."""
    from torch.profiler import ProfilerActivity, profile

    from ..device.bridge import kineto_quiet

    with kineto_quiet():
        prof = profile(activities=[ProfilerActivity.CPU])
        prof.__enter__()
    try:
        call()
    finally:
        with kineto_quiet():
            prof.__exit__(None, None, None)
    counts: Counter[str] = Counter()
    parents: dict[str, set[str]] = {}
    for event in prof.events():
        name = event.name
        if not name.startswith("aten::") or name in _NEUTRAL:
            continue
        name = name[:-1] if name.endswith("_") and not name.endswith("__") else name  # add_ and add: the same work
        counts[name] += 1
        parent = event.cpu_parent
        while parent is not None and not parent.name.startswith("aten::"):
            parent = parent.cpu_parent
        above = parent.name if parent is not None else ""
        parents.setdefault(name, set()).add(above[:-1] if above.endswith("_") and not above.endswith("__") else above)
    return counts, parents


def _roots(differences: list[tuple[str, int, int]], parents: dict[str, set[str]]) -> list[tuple[str, int, int]]:
    """The differences that are not inside another differing op (``aten::bmm`` under a differing
    ``aten::_scaled_dot_product_attention_math`` follows from it): those name the change."""
    differing = {op for op, _, _ in differences}
    roots = [d for d in differences if not (parents.get(d[0], {""}) <= differing)]
    return roots or differences


def dispatch_note(eager: tuple[Counter[str], dict[str, set[str]]], captured: tuple[Counter[str], dict[str, set[str]]]
                  ) -> tuple[str, list[tuple[str, int, int]]]:
    """Compare the aten ops of one eager forward with one run of the captured program (each as
    :func:`count_aten_ops` gives them): the sentence for the header and notes ("" when they
    agree), and the differences ``(op, eager, captured)``."""
    (a, a_parents), (b, b_parents) = eager, captured
    differences = dispatch_differences(a, b)
    parents = {op: a_parents.get(op, set()) | b_parents.get(op, set()) for op in set(a_parents) | set(b_parents)}
    return describe_differences(_roots(differences, parents)), differences


class EagerSteps:
    """A session's own runs: the model's forward at the schedule's eager steps (``wait``,
    ``skip_first``), timed as the user's loop runs it (fxprof runs no extra forward in someone
    else's loop), kept per input signature, the last :data:`OWN_RUNS_MAX` * 4 of each. A cold
    call (the loop's first forward, or the first after instrumented steps: its code and data
    left the caches) is run but not kept. On CUDA an event pair on the current stream brackets
    the call (no synchronize in the user's loop); they are read when a profile is made."""

    def __init__(self) -> None:
        self._runs: dict[tuple, list[Any]] = {}
        self._lost: dict[tuple, list[float]] = {}
        self._cold: dict[tuple, int] = {}  # the cold calls of each signature: run, not kept

    def call(self, forward: Callable[..., Any], args: tuple, kwargs: dict, key: tuple, cold: bool = False,
             meter: Any = None) -> Any:
        """``forward(*args, **kwargs)``, timed unless ``cold``; its result or its exception,
        untouched. ``meter`` (a :class:`~fxprof.measure.timing.contention.ContentionMeter`) keeps what
        the call lost to other processes."""
        if cold:
            self._cold[key] = self._cold.get(key, 0) + 1
            return forward(*args, **kwargs)
        cuda = torch.cuda.is_available() and torch.cuda.is_initialized()
        lost: list[float] = []
        box: list[Any] = []

        def timed() -> None:
            if cuda:
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                box.append(forward(*args, **kwargs))
                end.record()
                box.append((start, end))
            else:
                t0 = time.perf_counter_ns()
                box.append(forward(*args, **kwargs))
                box.append((time.perf_counter_ns() - t0) / 1e6)

        if meter is not None:
            meter.around(timed, into=lost)
        else:
            timed()
        out, mark = box
        runs = self._runs.setdefault(key, [])
        runs.append(mark)
        del runs[:-4 * OWN_RUNS_MAX]
        if meter is not None and not cuda:
            kept = self._lost.setdefault(key, [])
            kept.extend(lost)
            del kept[:-4 * OWN_RUNS_MAX]
        return out

    def lost_of(self, keys: list[tuple]) -> list[float]:
        """What the kept eager steps of the one signature in ``keys`` lost to other processes
        (``[]`` where not measured: CUDA, several signatures)."""
        return list(self._lost.get(keys[0], [])) if len(keys) == 1 else []

    def describe(self, meta: dict[str, Any], keys: list[tuple]) -> dict[str, Any]:
        """``meta`` with ``own_runs_ms`` (the eager steps of the cycle's one input signature), or
        a note saying why there are none."""
        out = dict(meta)
        marks = self._runs.get(keys[0], []) if len(keys) == 1 else []
        ms = []
        for mark in marks:
            if isinstance(mark, tuple):
                mark[1].synchronize()
                ms.append(float(mark[0].elapsed_time(mark[1])))
            else:
                ms.append(float(mark))
        if ms:
            out["own_runs_ms"] = [round(v, 6) for v in ms]
            return out
        cold = self._cold.get(keys[0], 0) if len(keys) == 1 else 0
        why = ("its timed runs had several input signatures" if len(keys) > 1 else
               f"the {cold} eager step(s) of the schedule (wait, skip_first) that ran a batch of this shape each came "
               f"first in the loop or right after instrumented steps, so none is kept" if cold else
               "no eager step of the schedule (wait, skip_first) ran a batch of this shape before the profile was made")
        out["notes"] = list(out.get("notes", [])) + [
            f"no fidelity line: a session times the model's own forward at the schedule's eager steps, and {why} "
            f"(its first eager step after instrumented ones runs cold and is not kept: fxprof.schedule(wait=4, ...) gives it the three a ratio needs)"]
        return out
