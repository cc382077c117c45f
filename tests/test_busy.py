"""Every statement a profile prints holds beside another process that competes for the core
(issue 45): a busy loop pinned to the profiled process's core, in eager, compiled and session
mode; the header (tests/header_check.py) agrees with itself and the tables, says the machine was
busy, and puts none of the lost time down to the interpreter. The same check on the machine as
it is (quiet or not)."""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
import time
import warnings

import numpy as np
import pytest
import torch
from torch import nn

import fxprof
from header_check import assert_consistent, header_problems

pytestmark = pytest.mark.skipif(not hasattr(os, "sched_setaffinity") or not os.path.exists("/proc/self/task"),
                                reason="needs Linux's affinity and scheduler statistics")


@contextlib.contextmanager
def busy_core():
    """This process and a busy loop pinned to one core, torch on one thread; all put back after."""
    cores = sorted(os.sched_getaffinity(0))
    core = cores[-1]
    threads = torch.get_num_threads()
    loop = subprocess.Popen([sys.executable, "-c", f"import os\nos.sched_setaffinity(0, {{{core}}})\nwhile True: pass"])
    try:
        os.sched_setaffinity(0, {core})
        torch.set_num_threads(1)
        time.sleep(0.3)  # the loop is running
        yield core
    finally:
        loop.kill()
        loop.wait()
        os.sched_setaffinity(0, set(cores))
        torch.set_num_threads(threads)


@contextlib.contextmanager
def crowded(per_core: int = 3):
    """``per_core`` busy loops on every core, this process pinned to one core, torch on one
    thread (issue 56: several busy loops per core, not only one); all put back after."""
    cores = sorted(os.sched_getaffinity(0))
    threads = torch.get_num_threads()
    loops = [subprocess.Popen([sys.executable, "-c", f"import os\nos.sched_setaffinity(0, {{{c}}})\nwhile True: pass"])
             for c in cores for _ in range(per_core)]
    try:
        os.sched_setaffinity(0, {cores[-1]})
        torch.set_num_threads(1)
        time.sleep(0.3)
        yield cores[-1]
    finally:
        for p in loops:
            p.kill()
        for p in loops:
            p.wait()
        os.sched_setaffinity(0, set(cores))
        torch.set_num_threads(threads)


class Mlp(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(256, 256)
        self.b = nn.Linear(256, 256)

    def forward(self, x):
        return self.b(torch.relu(self.a(x))) + x


def _profile(model, x, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return fxprof.profile(model, x, peaks=None, **kwargs)


def test_eager_header_holds_beside_a_busy_loop(resnet18):
    x = torch.randn(1, 3, 64, 64)
    with busy_core():
        prof = _profile(resnet18, x, warmup=2, iters=12)
    assert prof.contention is not None and prof.contention.source in ("schedstat", "rusage")
    runs = prof.runs
    assert runs["lost_ms"].max() > 1.0  # a slice of several ms went to the loop in some run
    assert prof.busy_runs, runs
    text = prof.summary(top=0)
    assert "machine: BUSY:" in text and "load" in text
    assert_consistent(prof)
    # no busy run is in the statistics unless every page says the times include lost time
    kept = prof.kept_runs()
    if kept is not None and not set(kept) & set(prof.busy_runs):
        assert "left out of the statistics" in text
    else:
        assert "time lost to other processes" in text.split("machine:")[0]  # the run line says it


def test_the_same_profile_kept_whole_names_the_lost_time(resnet18):
    with busy_core():
        prof = _profile(resnet18, torch.randn(1, 3, 32, 32), warmup=1, iters=8)
    prof.keep_outliers = True  # every run in the statistics, busy ones too
    text = prof.summary(top=0)
    assert "outside every node (interpreter overhead between nodes, and time lost to other processes" in text, text
    assert_consistent(prof)


def test_header_holds_on_the_machine_as_it_is(resnet18):
    prof = _profile(resnet18, torch.randn(1, 3, 32, 32), warmup=1, iters=8)
    assert prof.contention is not None
    assert_consistent(prof)


def test_between_runs_leaves_out_the_models_own_runs():
    """README's example said fxprof took 105 ms between 20 runs, of which 101.5 ms were the
    model's own 5 runs (issue 45): the own runs are the model's work, not fxprof's."""
    model = nn.Sequential(*[nn.Linear(512, 512) for _ in range(8)]).eval()
    prof = _profile(model, torch.randn(64, 512), warmup=1, iters=8)
    own = prof.meta["own_wall_ms"]
    assert own >= sum(prof.meta["own_runs_ms"])  # each own run and its settling call
    from fxprof.core.overhead import between_runs

    found = between_runs(prof.meta, prof.runs)
    inside = float(prof.runs["host_ms"].sum())
    assert found.between_ms <= prof.meta["timed_wall_ms"] - inside - own + 1e-6
    assert found.between_ms < own  # the bookkeeping of 8 runs costs less than 3 runs of this model and their calls
    assert_consistent(prof)


def test_session_header_holds_beside_a_busy_loop():
    model = Mlp().eval()
    x = torch.randn(32, 256)
    with busy_core(), torch.no_grad(), fxprof.session(model, schedule=fxprof.schedule(wait=4, warmup=1, active=6)) as s:
        for _ in range(11):
            model(x)
            s.step()
    prof = s.profiles[0]
    assert prof.contention is not None and len(prof.meta["contention"]["lost_ms"]) == prof.num_runs
    assert len(prof.meta["contention"]["own_lost_ms"]) == len(prof.meta["own_runs_ms"]) == 3
    assert "(outside the graph)" not in prof.summary()  # a symbolic capture holds the whole model
    assert_consistent(prof)


@pytest.mark.slow  # a compile: CI runs it in its slow pass
@pytest.mark.usefixtures("inductor_cache")
def test_compiled_header_holds_beside_a_busy_loop():
    model = Mlp().eval()
    x = torch.randn(32, 256)
    with busy_core():
        prof = _profile(model, x, compile=True, warmup=2, iters=12)
    contention = prof.meta["contention"]
    assert len(contention["lost_ms"]) == prof.num_runs
    assert len(contention["unprofiled_lost_ms"]) == len(prof.meta["compiled"]["unprofiled_ms"])
    assert "machine: " in prof.summary(top=0)
    assert_consistent(prof)


def test_the_checker_finds_what_issue_45_saw(resnet18, monkeypatch):
    """The checker can fail: each contradiction issue 45 reported, put back into the views the
    way fxprof printed it before, is found on a profile taken beside a busy loop."""
    with busy_core():
        prof = _profile(resnet18, torch.randn(1, 3, 32, 32), warmup=1, iters=8)
    prof.keep_outliers = True  # busy runs in the statistics
    assert prof.busy_runs and header_problems(prof) == []
    from fxprof.core import overhead
    from fxprof.core.fidelity import Fidelity
    from fxprof.views import headline

    # 1. the lost time put down to the interpreter
    monkeypatch.setattr(headline, "outside_words", lambda meta, busy=False: "interpreter overhead between nodes")
    assert any("put down to fxprof or the model alone" in p for p in header_problems(prof))
    monkeypatch.undo()
    # 2. fxprof's time between runs counting the model's own runs
    real = overhead.between_runs

    def counting_own_runs(meta, runs):
        found = real(meta, runs)
        return overhead.BetweenRuns(found.between_ms + found.own_ms, found.runs_ms, 0.0, found.lost_ms)

    monkeypatch.setattr(overhead, "between_runs", counting_own_runs)
    assert any("counts more than the window" in p for p in header_problems(prof))
    monkeypatch.undo()
    # 3. a fidelity ratio stated from preempted runs
    from fxprof.views import fidelity as fidelity_view

    found = fidelity_view.profile_fidelity(prof)
    assert found.unreliable  # the profiled runs the statistics keep lost time to other processes
    monkeypatch.setattr(fidelity_view, "fidelity_lines", lambda profile: [
        f"fidelity: profiled run {found.ratio:.2f} x the model's own (1.00 ms, median of 3 unprofiled runs between the profiled ones)"])
    assert any(p.startswith("fidelity stated though") for p in header_problems(prof))


def test_the_real_gpu_profiles_read_consistently():
    """The header checker on the real H100/H200 profiles of ../shared/gpu (taken before contention
    was measured: no machine line, and their own runs were in the time between runs)."""
    import glob
    import pathlib

    found = sorted(glob.glob(str(pathlib.Path(__file__).resolve().parents[2] / "shared" / "gpu" / "*.json")))
    if not found:
        pytest.skip("../shared/gpu is not beside this checkout")
    for path in found:
        prof = fxprof.load(path)
        assert header_problems(prof) == [], path


def test_a_warmed_window_charges_the_call_its_share_of_the_lost_time(monkeypatch):
    """``ContentionMeter.around(call, warm=...)``: the warm-up runs first inside the window, after
    the snapshot's syscalls, and the call is charged its share of what the window lost."""
    from fxprof.measure.timing.contention import ContentionMeter

    meter = ContentionMeter()
    order = []
    snapshot = meter._snapshot
    monkeypatch.setattr(meter, "_snapshot", lambda: order.append("snapshot") or snapshot())
    monkeypatch.setattr(meter, "_lost", lambda a, b: 1.0)  # the window lost 1 ms
    lost = []
    meter.around(lambda: (order.append("call"), time.sleep(0.03)), into=lost,
                 warm=lambda: (order.append("warm"), time.sleep(0.03)))
    assert order == ["snapshot", "warm", "call", "snapshot"]
    assert 0.3 < lost[0] < 0.7, lost  # about half: the call took about half the window
    meter.around(lambda: time.sleep(0.002), into=lost)  # without a warm-up: all of it (the call took 2 ms)
    meter.around(lambda: None, into=lost)  # but never more than the call's own wall time
    assert lost[1] == 1.0 and lost[2] < 0.5, lost


def test_every_own_run_of_a_compiled_model_follows_an_untimed_call_after_the_meters_syscalls(monkeypatch):
    """Issue 45, item 4: the meter's snapshot right before a 0.1 ms compiled run left it 8-11%
    slower than the same model in a plain loop (docs/performance.md section 13; measured by
    tests/benchmarks/compiled_yardstick.py). Every timed run, unprofiled and profiled, now has an
    untimed call between the snapshot and itself."""
    from fxprof.measure.compiled.runs import _interleaved_runs
    from fxprof.measure.timing.contention import ContentionMeter

    log = []
    meter = ContentionMeter()
    snapshot = meter._snapshot
    monkeypatch.setattr(meter, "_snapshot", lambda: (log.append("snapshot"), snapshot())[1])

    def call(fresh=None):
        log.append("timed" if fresh is not None else "call")
        return torch.ones(2) + 1

    _interleaved_runs(call, lambda: None, 4, (torch.ones(2),), {}, False, meter)
    timed = [i for i, what in enumerate(log) if what == "timed"]
    assert len(timed) == 4 + 6
    for i in timed:
        last = max(j for j in range(i) if log[j] == "snapshot")
        assert "call" in log[last + 1:i], log[max(0, i - 4):i + 1]


# ---------------------------------------------------------------------- the meter against its bounds (issue 56)
def _snap(wall_ns, cpu_ns, threads, tid=1, switches=0):
    """A meter snapshot: wall clock, the calling thread's id and CPU time, every thread's (CPU, run-queue wait)."""
    return (wall_ns, tid, cpu_ns, threads, switches)


def test_a_thread_that_never_left_the_cpu_lost_nothing_whatever_its_run_delay_says():
    """On a virtual machine at load 10-20 a thread's schedstat run_delay grew by 8-40 ms over
    1.1-1.6 ms forwards whose wall time equalled its CPU time (shared/FACTS.md, seventh round):
    the meter charged them their whole wall time. It is bounded by the time off the CPU now."""
    from fxprof.measure.timing.contention import lost_between

    ms = 1_000_000
    before = _snap(0, 0, {1: (0, 0), 2: (0, 0)})
    after = _snap(int(1.2 * ms), int(1.2 * ms) - 3_000, {1: (int(1.2 * ms), 40 * ms), 2: (0, 30 * ms)})
    assert lost_between(before, after) <= 0.003 + 1e-9


def test_an_idle_pool_thread_waiting_on_a_queue_is_not_charged_to_the_run():
    from fxprof.measure.timing.contention import lost_between

    ms = 1_000_000
    # the calling thread was preempted for 2 ms (its wait says so); a pool thread that never ran waited 9 ms
    before = _snap(0, 0, {1: (0, 0), 2: (5 * ms, 0)})
    after = _snap(10 * ms, 8 * ms, {1: (8 * ms, 2 * ms), 2: (5 * ms, 9 * ms)})
    assert lost_between(before, after) == pytest.approx(2.0)


def test_a_worker_held_up_by_another_process_is_charged_up_to_the_calling_threads_time_off_the_cpu():
    """Intra-op threads: the calling thread sleeps at the join while a worker waits for its core."""
    from fxprof.measure.timing.contention import lost_between

    ms = 1_000_000
    before = _snap(0, 0, {1: (0, 0), 2: (0, 0)})
    after = _snap(10 * ms, 7 * ms, {1: (7 * ms, 0), 2: (6 * ms, 3 * ms)})
    assert lost_between(before, after) == pytest.approx(3.0)
    # a worker's wait beyond its own time off the CPU, or beyond the calling thread's, is not the run's
    after = _snap(10 * ms, 9 * ms, {1: (9 * ms, 0), 2: (6 * ms, 8 * ms)})
    assert lost_between(before, after) == pytest.approx(1.0)


def test_without_scheduler_statistics_the_time_off_the_cpu_counts_only_with_involuntary_switches():
    from fxprof.measure.timing.contention import lost_between

    ms = 1_000_000
    assert lost_between(_snap(0, 0, None, switches=5), _snap(10 * ms, 6 * ms, None, switches=5)) == 0.0
    assert lost_between(_snap(0, 0, None, switches=5), _snap(10 * ms, 6 * ms, None, switches=7)) == pytest.approx(4.0)


def test_lost_time_never_exceeds_the_calling_threads_time_off_the_cpu_beside_busy_loops():
    """Issue 56, item 1: for a one-thread run, lost <= wall - thread CPU time, always; checked on
    real runs beside three busy loops per core, with the thread's CPU clock read around each."""
    from fxprof.measure.timing.contention import ContentionMeter

    cores = sorted(os.sched_getaffinity(0))
    loops = [subprocess.Popen([sys.executable, "-c", f"import os\nos.sched_setaffinity(0, {{{c}}})\nwhile True: pass"])
             for c in cores for _ in range(3)]
    try:
        time.sleep(0.3)
        meter = ContentionMeter()
        bounds = []
        for _ in range(40):
            t0, c0 = time.perf_counter_ns(), time.thread_time_ns()
            meter.around(lambda: sum(i * i for i in range(20_000)))
            bounds.append(((time.perf_counter_ns() - t0) - (time.thread_time_ns() - c0)) / 1e6)
    finally:
        for p in loops:
            p.kill()
            p.wait()
    # the two clocks are read a few microseconds apart outside the window
    assert all(lost <= bound + 0.02 for lost, bound in zip(meter.lost_ms, bounds)), [
        (lost, bound) for lost, bound in zip(meter.lost_ms, bounds) if lost > bound]
    assert sum(meter.lost_ms) > 0  # three loops per core took the core from some of the 40 calls


def test_the_meter_agrees_with_a_competitors_own_record_of_when_it_ran():
    """Ground truth independent of the meter: a busy loop pinned to the profiled core records its
    own stretches on the CPU (tests/benchmarks/contention_truth.py); the lost share fxprof's
    eager runs report is within 0.1 of the share of their wall time that loop held the core."""
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "benchmarks"))
    import contention_truth as truth

    cores = sorted(os.sched_getaffinity(0))
    core, threads = cores[-1], torch.get_num_threads()
    os.sched_setaffinity(0, {core})
    torch.set_num_threads(1)
    try:
        with truth.competitors([(0.5, core)]) as files:
            found = truth.run_eager(30)
        records = [np.load(f) for f in files]
    finally:
        os.sched_setaffinity(0, set(cores))
        torch.set_num_threads(threads)
    r = truth.row("eager", "duty 50%", "runs", found["runs"], records)
    assert r["truth"] > 0.05, r  # the loop did take the core
    assert r["err"] <= 0.1, r


def test_a_thread_clock_is_never_called_busy_and_its_runs_are_not_corrected():
    """Issue 56, item 2: a timer on the thread's CPU clock (as tests/benchmarks/zoo.py uses) holds
    no lost time: beside three busy loops per core its profile read "BUSY 100%", "own 0" and
    withheld its ratio."""
    from fxprof.measure.timing.timers import CpuTimer

    class ThreadClock(CpuTimer):
        name = "cpu"

        def __init__(self):
            self.mark = self.host_ns = time.thread_time_ns

    with crowded():
        prof = _profile(Mlp().eval(), torch.randn(8, 256), warmup=2, iters=12, timer=ThreadClock())
    text = prof.summary(top=0)
    assert prof.contention is None and not prof.busy_runs
    assert "BUSY" not in text
    assert "machine: the timer reads the thread's CPU time" in text, text
    fidelity = [line for line in text.splitlines() if line.startswith("fidelity:")]
    own = re.search(r"the model's own \(?([0-9.]+) (ns|us|ms)", fidelity[0] if fidelity else "")
    assert own and float(own.group(1)) > 0, text  # a ratio, or "not stated" for a spread: never "own 0"
    assert_consistent(prof)
