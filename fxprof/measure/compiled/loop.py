"""Compiled mode's run loop (counterpart of :mod:`fxprof.measure.eager.loop`): the unprofiled
runs as a plain loop before and after the timed runs; the timed runs either with fxprof's marks
in the generated code (:func:`marked_runs`) or on torch.profiler's own schedule, each run in an
``fxprof::run`` range (:func:`interleaved_runs`); what each lost to other processes kept beside
it."""

from __future__ import annotations

import statistics
import time
import warnings
from typing import Any

import torch

from ..common.tree import clone_tensors
from ..device.bridge import Event, events_from_kineto, kineto_quiet
from ..timing.contention import ContentionMeter
from .spans import RUN_RANGE
from .wrapper_timer import WrapperTimer, installed

#: the profiler stopped took 0.11 ms, the third 0.04 ms, as in a loop without the profiler; the
#: first recorded call 0.14 ms, the fourth 0.07 ms (docs/performance.md section 11)
SETTLE_CALLS = 2
#: at least this many unprofiled runs (the compiled model's own run time)
PLAIN_RUNS_MIN = 6


def run_range() -> Any:
    """The ``fxprof::run`` range around a timed run: ``_RecordFunctionFast`` (C++ enter and exit,
    about 1 us under the profiler) where torch has it. ``torch.profiler.record_function`` put
    10-25 us of its own Python inside every run (its exit resolves
    ``torch.ops.profiler._record_function_exit`` before the range ends): the largest part of
    the ``compiled_entry`` row of a toy model."""
    fast = getattr(getattr(torch._C, "_profiler", None), "_RecordFunctionFast", None)
    if fast is None:  # pragma: no cover - an old release
        from torch.profiler import record_function

        return record_function(RUN_RANGE)
    return fast(RUN_RANGE)


#: untimed calls before each half of the plain loop: it follows the profiler's calibration or its
#: cycles, whose teardown leaves the model's code and data cold for more than a couple of calls
PLAIN_SETTLE_CALLS = 10
#: on a GPU, unprofiled runs after the profiler this much slower than those before it are left
#: out of the model's own run time: an H200 ran compiled BERT-base in 3.9 ms before
#: torch.profiler (CUPTI) had run in the process and 7.5 ms after it (FACTS.md: eager resnet50
#: 4.1 -> 6.4 ms on an H100)
AFTER_PROFILER_SLOWER = 1.15


def _plain_loop(call: Any, sync: Any, runs: int, args: tuple, kwargs: dict, meter: ContentionMeter, into: list[float],
                lost: list[float]) -> None:
    """``runs`` timed calls of the compiled model with no profiler alive, after
    :data:`PLAIN_SETTLE_CALLS` untimed ones, each after one untimed call of its own (between the
    meter's syscalls and the run): the compiled model's own run time as a plain loop of the
    user's sees it, into ``into`` (ms), what each lost to other processes into ``lost``."""
    for _ in range(PLAIN_SETTLE_CALLS):
        call()
    sync()
    for _ in range(runs):
        fresh = clone_tensors((args, kwargs))

        def timed() -> None:
            t0 = time.perf_counter_ns()
            call(fresh)
            sync()
            into.append((time.perf_counter_ns() - t0) / 1e6)

        # one untimed call after the meter's syscalls and before the run: 1.087x the plain loop
        # without it, 1.010x with it (docs/performance.md section 13)
        meter.around(timed, into=lost, warm=lambda: (call(), sync()))


def interleaved_runs(call: Any, sync: Any, iters: int, args: tuple, kwargs: dict, on_cuda: bool,
                      meter: ContentionMeter | None = None) -> tuple[list[float], list[Event], list[float]]:
    """The unprofiled runs and ``iters`` profiled cycles on ``torch.profiler``'s own schedule
    (wait 1, warm-up 1, active 1): the warm-up call lets the profiler start; while active,
    :data:`SETTLE_CALLS` calls outside every run, then the run, in an ``fxprof::run`` range.

    The unprofiled runs (the compiled model's own run time) are a plain loop, half before the
    profiler is created and half after it is gone (:func:`_plain_loop`): taken between the
    profiler's cycles they read 8-21% slower than the same model in a loop of the user's (the
    profiler's start, stop and trace processing leave the model's code and data cold beyond
    what settling calls warm again; docs/performance.md). ``meter`` keeps what each run, profiled
    and unprofiled, lost to other processes (``lost_ms``; ``meter.own`` for the unprofiled).
    On a GPU, the half after the profiler is left out when it is :data:`AFTER_PROFILER_SLOWER`
    than the half before (CUPTI slows every later launch of the process).
    Returns the unprofiled times (ms), the events, and the runs after the profiler left out."""
    from torch.profiler import ProfilerActivity, profile, schedule

    meter = meter if meter is not None else ContentionMeter()
    meter.rescan()  # the threads the warm-up started
    events: list[Event] = []
    plain: list[float] = []
    plain_lost: list[float] = []
    half = max(PLAIN_RUNS_MIN, iters) // 2
    _plain_loop(call, sync, half, args, kwargs, meter, plain, plain_lost)

    def collect(done: Any) -> None:
        events.extend(events_from_kineto(done.profiler.kineto_results.events()))

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if on_cuda else [])
    quiet = warnings.catch_warnings()  # each cycle's events are collected: its note about clearing them is moot
    quiet.__enter__()
    warnings.filterwarnings("ignore", message=".*Profiler clears events at the end of each cycle")
    try:
        prof = profile(activities=activities, schedule=schedule(wait=1, warmup=1, active=1, repeat=iters),
                       on_trace_ready=collect)
        with kineto_quiet():
            prof.__enter__()
    except BaseException:
        quiet.__exit__(None, None, None)
        raise
    try:
        for _ in range(iters):
            call()  # the wait step: the profiler is off
            sync()
            with kineto_quiet():
                prof.step()  # -> warm-up: the profiler starts
            call()
            sync()
            with kineto_quiet():
                prof.step()  # -> active
            fresh = clone_tensors((args, kwargs))  # outside the run's range

            def settle() -> None:  # recorded, outside every run: the first calls after the start run cold
                for _ in range(SETTLE_CALLS):
                    call()
                sync()

            def run() -> None:
                with run_range():
                    call(fresh)
                    sync()

            meter.around(run, warm=settle)  # the settling calls after the meter's syscalls, not before them
            with kineto_quiet():
                prof.step()  # the cycle's events reach collect()
    finally:
        with kineto_quiet():
            prof.__exit__(None, None, None)
        quiet.__exit__(None, None, None)
    before = len(plain)
    _plain_loop(call, sync, max(PLAIN_RUNS_MIN, iters) - half, args, kwargs, meter, plain, plain_lost)
    after = plain[before:]
    if on_cuda and after and statistics.median(after) > AFTER_PROFILER_SLOWER * statistics.median(plain[:before]):
        # once CUPTI has run, the process launches slower for good: the runs after the profiler
        # are not the model's own (the user's process never ran a profiler)
        del plain[before:], plain_lost[before:]
    else:
        after = []
    meter.own_lost_ms = plain_lost
    return plain, events, after


#: untimed calls with the marks installed before the first marked run: swapping a function's code
#: leaves the interpreter's specialized calls of it cold for a call or two
MARKED_SETTLE_CALLS = 3


def marked_runs(call: Any, sync: Any, iters: int, args: tuple, kwargs: dict, timers: dict[str, WrapperTimer],
                meter: ContentionMeter | None = None) -> tuple[list[float], list[tuple[int, int]], list[dict[str, list[list[int]]]]]:
    """The unprofiled runs (a plain loop, half before and half after, as :func:`interleaved_runs`)
    and ``iters`` runs with the marks installed (:mod:`fxprof.measure.compiled.wrapper_timer`),
    each after one untimed call, bounded by two reads of the marks' clock. No profiler runs.
    Returns the unprofiled times (ms), each marked run's ``(start_ns, end_ns)`` and each's rows
    per graph; the marks are removed after, also on errors."""
    meter = meter if meter is not None else ContentionMeter()
    meter.rescan()
    plain: list[float] = []
    plain_lost: list[float] = []
    half = max(PLAIN_RUNS_MIN, iters) // 2
    _plain_loop(call, sync, half, args, kwargs, meter, plain, plain_lost)
    bounds: list[tuple[int, int]] = []
    rows: list[dict[str, list[list[int]]]] = []
    clock = time.perf_counter_ns

    def drop() -> None:
        for t in timers.values():
            t.take_rows()

    with installed(timers.values()):
        for _ in range(MARKED_SETTLE_CALLS):
            call()
        sync()
        drop()
        for _ in range(iters):
            fresh = clone_tensors((args, kwargs))

            def settle() -> None:
                call()
                sync()
                drop()

            def run() -> None:
                t0 = clock()
                call(fresh)
                sync()
                t1 = clock()
                bounds.append((t0, t1))
                rows.append({g: t.take_rows() for g, t in timers.items()})

            meter.around(run, warm=settle)
    _plain_loop(call, sync, max(PLAIN_RUNS_MIN, iters) - half, args, kwargs, meter, plain, plain_lost)
    meter.own_lost_ms = plain_lost
    return plain, bounds, rows
