"""Device activity by correlation, on recorded event fixtures built on the CPU.

The fixtures follow the structure of ``prof.profiler.kineto_results.events()`` on a GPU (read
from PyTorch's profiler_kineto.cpp / collection.cpp): host events (``cpu_op``,
``user_annotation``, ``cuda_runtime``) carry the host's system thread id in
``device_resource_id()``; device activities (``kernel``, ``gpu_memcpy``, ``gpu_memset``) carry
the stream there and the device in ``device_index()``; a runtime call and the activity it
launched share ``correlation_id()`` (CUPTI's id), while a ``cpu_op``'s ``correlation_id()`` is
the op's own id, which can have the same value (so ops must never be taken as launchers).
"""

from __future__ import annotations

import math
import sys

import pytest
import torch
from torch import nn

import fxprof
from fxprof.core.recording import Recording
from fxprof.measure.device.bridge import (
    KINETO_LINE,
    attribute_events,
    events_from_kineto,
    kernel_ms_per_sample,
    kineto_quiet,
    memory_by_range,
)
from fxprof.measure.eager.loop import _attach_kernel_times

THREAD = 7001
US = 1000  # ns


class KinetoEvent:
    """Mimics ``torch._C._autograd._KinetoEvent``: every field is read through a method."""

    def __init__(self, name, activity, start_us, dur_us, correlation=0, device="DeviceType.CPU", index=-1,
                 resource=THREAD, nbytes=0, with_activity_type=True):
        self._v = dict(name=name, activity_type=activity, start_ns=int(start_us * US), end_ns=int((start_us + dur_us) * US),
                       duration_ns=int(dur_us * US), correlation_id=correlation, linked_correlation_id=0,
                       device_type=device, device_index=index, device_resource_id=resource, start_thread_id=1,
                       nbytes=nbytes, is_user_annotation=activity == "user_annotation")
        if not with_activity_type:
            del self._v["activity_type"]

    def __getattr__(self, item):
        if item in self.__dict__.get("_v", {}):
            return lambda: self._v[item]
        raise AttributeError(item)


def rng(node, start, dur, **kw):
    return KinetoEvent(f"fxprof::{node}", "user_annotation", start, dur, correlation=int(start), **kw)


def op(name, start, dur, correlation, **kw):
    return KinetoEvent(name, "cpu_op", start, dur, correlation=correlation, **kw)


def call(name, start, correlation, **kw):
    return KinetoEvent(name, "cuda_runtime", start, 2, correlation=correlation, **kw)


def work(name, start, dur, correlation, kind="kernel", stream=7, device=0, **kw):
    return KinetoEvent(name, kind, start, dur, correlation=correlation, device="DeviceType.CUDA", index=device,
                       resource=stream, **kw)


def one_run(t0: float, corr0: int, with_activity_type: bool = True) -> list[KinetoEvent]:
    """One run of: sleep (direct launch), add (aten op), copy (memcpy), graph (CUDA graph replay)."""
    k = dict(with_activity_type=with_activity_type)
    c = corr0
    return [
        # a direct launch: torch.cuda._sleep is no aten op, so no cpu_op sits between the range and the call
        rng("sleep", t0, 20, **k), call("cudaLaunchKernel", t0 + 5, c + 1, **k),
        work("sleep_kernel", t0 + 30, 5000, c + 1, **k),
        work("fxprof::sleep", t0 + 30, 5000, 0, kind="gpu_user_annotation", **k),  # device mirror of the range
        # an aten op launching a kernel; the op's own id equals the next call's CUPTI id (aliasing)
        rng("add", t0 + 30, 20, **k), op("aten::add", t0 + 32, 15, correlation=c + 3, **k),
        call("cudaLaunchKernel", t0 + 35, c + 2, **k), work("add_kernel", t0 + 5030, 10, c + 2, **k),
        # a copy and a memset
        rng("copy", t0 + 60, 20, **k), call("cudaMemcpyAsync", t0 + 62, c + 3, **k),
        work("Memcpy DtoD", t0 + 5040, 40, c + 3, kind="gpu_memcpy", **k),
        call("cudaMemsetAsync", t0 + 70, c + 4, **k), work("Memset", t0 + 5080, 2, c + 4, kind="gpu_memset", **k),
        # a CUDA graph replay: one runtime call, three kernels with its correlation id
        rng("graph", t0 + 90, 20, **k), call("cudaGraphLaunch", t0 + 95, c + 5, **k),
        *[work(f"graph_kernel_{i}", t0 + 5100 + 100 * i, 100, c + 5, **k) for i in range(3)],
    ]


def test_every_device_activity_reaches_the_node_that_launched_it():
    events = events_from_kineto(one_run(0, 100) + one_run(10_000, 200))
    result = attribute_events(events)
    assert result.per_node["sleep"] == [5.0, 5.0]  # the direct launch is not lost
    assert result.per_node["add"] == [0.01, 0.01]
    assert result.per_node["copy"] == [pytest.approx(0.042)] * 2  # memcpy + memset
    assert result.per_node["graph"] == [pytest.approx(0.3)] * 2  # every kernel of the replay
    assert result.activities == result.attributed == 2 * 7
    assert result.unlinked == result.outside == 0 and result.notes() == []


def test_what_cannot_be_attributed_is_counted_and_said():
    events = one_run(0, 100) + [
        work("orphan", 6000, 50, 999),  # no runtime call with its id in the trace
        call("cudaLaunchKernel", 200, 150), work("between", 6100, 30, 150),  # launched between nodes
        call("cudaLaunchKernel", 96, 151), work("side", 6200, 70, 151, stream=13),  # on a side stream, inside "graph"
    ]
    result = attribute_events(events_from_kineto(events))
    assert result.unlinked == 1 and result.unlinked_ms == pytest.approx(0.05)
    assert result.outside == 1 and result.outside_ms == pytest.approx(0.03)
    assert result.per_node["graph"] == [pytest.approx(0.37)]
    assert result.streams == {0: {7, 13}}
    notes = " ".join(result.notes())
    assert "2 of 10 device activities (0.080 ms)" in notes and "2 streams" in notes


def test_releases_without_activity_types_are_read_by_names():
    events = events_from_kineto(one_run(0, 100, with_activity_type=False))
    kinds = {e.name: e.kind for e in events if e.device_type == "CPU"}
    assert kinds["fxprof::sleep"] == "range" and kinds["cudaLaunchKernel"] == "runtime"
    assert kinds["aten::add"] == "other"
    assert [e.kind for e in events if e.name == "sleep_kernel"] == ["device"]
    assert sum(e.kind == "device" for e in events) == 7  # the range's device mirror is not work
    assert attribute_events(events).per_node["sleep"] == [5.0]


def test_samples_get_their_own_range_of_their_own_run():
    events = events_from_kineto(one_run(0, 100) + one_run(10_000, 200)[:3])  # run 1 has no ranges but "sleep"
    rec = Recording(node=["sleep", "add", "sleep", "add"], run=[0, 0, 1, 1])
    notes = _attach_kernel_times(rec, attribute_events(events))
    assert rec.kernel_ms[:3].tolist() == [5.0, 0.01, 5.0] and math.isnan(rec.kernel_ms[3])
    assert notes == []
    assert kernel_ms_per_sample([], attribute_events(events)) == []


def test_memory_by_range_tracks_the_peak_inside_each_node():
    mem = lambda t, n, device="DeviceType.CUDA", index=0: KinetoEvent("[memory]", "cpu_instant_event", t, 0, device=device,
                                                                    index=index, nbytes=n)
    events = events_from_kineto([
        rng("a", 0, 100), mem(10, 400), mem(20, 600), mem(30, -600), mem(40, 100, index=1),
        rng("b", 200, 100), mem(210, -400), mem(220, 50, device="DeviceType.CPU", index=-1),
    ])
    assert memory_by_range(events, {("cuda", 0)}) == {"a": {"delta": 400, "peak": 1000}, "b": {"delta": -400, "peak": 0}}
    both = memory_by_range(events, {("cuda", 0), ("cuda", 1)})
    assert both["a"] == {"delta": 500, "peak": 1100}
    assert memory_by_range(events, {("cpu", -1)})["b"] == {"delta": 50, "peak": 50}


def test_real_cpu_profiler_events_keep_their_structure():
    # the same reader on a real (CPU) torch.profiler trace: the ranges and the allocations
    from torch.profiler import ProfilerActivity, profile, record_function

    x = torch.randn(64, 64)
    with kineto_quiet(), profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        with record_function("fxprof::mm"):
            y = x @ x
    del y
    events = events_from_kineto(prof.profiler.kineto_results.events())
    ranges = [e for e in events if e.kind == "range"]
    assert [e.name for e in ranges] == ["fxprof::mm"]
    ops = [e for e in events if e.name == "aten::mm"]
    assert ops and ops[0].thread == ranges[0].thread  # one host thread id for ranges and ops
    assert memory_by_range(events, {("cpu", -1)})["mm"] == {"delta": 64 * 64 * 4, "peak": 64 * 64 * 4}


def test_kineto_log_lines_are_kept_off_the_terminal(capfd):
    import os

    with kineto_quiet():
        os.write(2, b"USDT:2026-11-21 16:41:03 8071:8071 SyncActivityProfilerHandler.cpp:39] profiler_start\n")
        os.write(2, b"ERROR:2026-11-21 16:41:03 8071:8071 DeviceProperties.cpp:56] gpuGetDeviceCount failed with code 35\n")
        os.write(2, b"the user's own message\n")
    err = capfd.readouterr().err
    assert "USDT" not in err and "gpuGetDeviceCount" not in err
    assert "the user's own message" in err
    assert KINETO_LINE.match("STAGE:2026-01-01 10:00:00.123 1:1 ActivityProfilerController.cpp:311] Completed Stage")


def test_the_memory_pass_leaves_no_kineto_lines_and_resets_nothing(capfd, monkeypatch):
    # nothing may reset the user's statistics: make any reset fail loudly
    monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", lambda *a, **k: pytest.fail("reset the user's peaks"))

    class Temp(nn.Module):
        def forward(self, x):
            big = x.repeat(256, 1)  # 256 x the input, freed before the node returns
            return big.sum(0, keepdim=True) + x

    x = torch.randn(1, 1024)
    prof = fxprof.profile(Temp(), x, warmup=0, iters=1, memory=True)
    df = prof.df
    assert df.loc["repeat", "mem_delta_bytes"] == 256 * 1024 * 4
    assert df.loc["sum_1", "mem_peak_bytes"] >= 1024 * 4
    assert df.loc["x", "mem_delta_bytes"] == 0
    err = capfd.readouterr().err
    assert "USDT" not in err and "gpuGetDeviceCount" not in err, err
    print(err, file=sys.stderr)


# ------------------------------------------------- the flat pass (issue 39 item 4)
from fxprof.measure.device.bridge import attribute_kineto  # noqa: E402


def _same(a, b) -> None:
    assert a.per_node.keys() == b.per_node.keys()
    for node in a.per_node:
        assert a.per_node[node] == pytest.approx(b.per_node[node])
    assert (a.activities, a.attributed, a.unlinked, a.outside) == (b.activities, b.attributed, b.unlinked, b.outside)
    assert a.unlinked_ms == pytest.approx(b.unlinked_ms) and a.outside_ms == pytest.approx(b.outside_ms)
    assert a.streams == b.streams and a.notes() == b.notes()


@pytest.mark.parametrize("with_activity_type", [True, False])
def test_the_flat_pass_gives_what_the_event_records_give(with_activity_type):
    events = one_run(0, 100, with_activity_type) + one_run(10_000, 200, with_activity_type) + [
        work("orphan", 16000, 50, 999, with_activity_type=with_activity_type),
        call("cudaLaunchKernel", 10_200, 450, with_activity_type=with_activity_type),
        work("between", 16100, 30, 450, with_activity_type=with_activity_type),
        call("cudaLaunchKernel", 96, 451, with_activity_type=with_activity_type),
        work("side", 6200, 70, 451, stream=13, with_activity_type=with_activity_type),
    ]
    flat = attribute_kineto(events)
    _same(flat, attribute_events(events_from_kineto(events)))
    assert flat.per_node["sleep"] == [5.0, 5.0] and flat.unlinked == 1 and flat.outside == 1


def test_the_flat_pass_touches_an_aten_op_twice_at_most():
    """The aten ops (most of a trace) cost a name() and a device_type() call each, nothing more."""
    calls = []

    class Counted(KinetoEvent):
        def __getattr__(self, item):
            if item in self.__dict__.get("_v", {}):
                calls.append((self._v["name"], item))
            return super().__getattr__(item)

    events = [Counted("fxprof::a", "user_annotation", 0, 100, correlation=1)]
    events += [Counted("aten::add", "cpu_op", 10 + i, 1, correlation=100 + i) for i in range(50)]
    attribute_kineto(events)
    per_op = [item for name, item in calls if name == "aten::add"]
    # the first aten::add also decides once whether that name is a runtime call
    assert len(per_op) <= 2 * 50 + 1


# ------------------------------------------------- the input copies (issue 40 6(c))
from fxprof.measure.device.bridge import INPUT_COPIES_RANGE  # noqa: E402


@pytest.mark.parametrize("with_activity_type", [True, False])
def test_input_copies_are_reported_as_such_not_outside_every_node(with_activity_type):
    # before each run the loop clones the inputs inside a range of its own: the copies' kernels
    # are neither a node's time nor "launched outside every node"
    k = dict(with_activity_type=with_activity_type)
    copies = [KinetoEvent(INPUT_COPIES_RANGE, "user_annotation", -50, 20, correlation=1, **k),
              op("aten::clone", -48, 15, correlation=9, **k),
              call("cudaMemcpyAsync", -45, 90, **k), work("Memcpy DtoD", -40, 30, 90, kind="gpu_memcpy", **k),
              call("cudaLaunchKernel", -40, 91, **k), work("copy_kernel", -30, 20, 91, **k)]
    events = copies + one_run(0, 100, **k) + [call("cudaLaunchKernel", 200, 150, **k), work("between", 6100, 30, 150, **k)]
    for result in (attribute_kineto(events), attribute_events(events_from_kineto(events))):
        assert result.input_copies == 2 and result.input_copies_ms == pytest.approx(0.05)
        assert result.outside == 1 and result.outside_ms == pytest.approx(0.03)  # still said: a real stray launch
        assert INPUT_COPIES_RANGE[len("fxprof::"):] not in result.per_node and None not in result.per_node
        assert result.per_node["sleep"] == [5.0] and result.attributed == 7
        notes = " ".join(result.notes())
        assert "2 device activities (0.050 ms) were the copies of the inputs" in notes
        assert "1 of 10 device activities (0.030 ms) could not be given to a node" in notes
    kinds = {e.name: e.kind for e in events_from_kineto(copies)}
    assert kinds[INPUT_COPIES_RANGE] == "copies"


@pytest.mark.filterwarnings("ignore:CUDA is not available")
def test_the_kernel_timer_makes_its_input_copies_inside_their_range(monkeypatch):
    # the run loop clones the inputs inside the copies' range for every run when the timer
    # wants kernel time (on the CPU: a stand-in event timer that asks for it)
    import contextlib
    import time

    from fxprof.measure.eager import loop
    from fxprof.measure.timing.timers import Timer

    class StandInKernelTimer(Timer):
        name, measures_device, boundary_marks, wants_kernel_time = "standin", True, True, True
        mark = staticmethod(time.perf_counter_ns)

        def elapsed_ms(self, start, end):
            return (end - start) / 1e6

    inside, fresh = [False], []

    @contextlib.contextmanager
    def copies_range():
        inside[0] = True
        try:
            yield
        finally:
            inside[0] = False

    real = loop._fresh
    monkeypatch.setattr(loop, "input_copies_range", copies_range)
    monkeypatch.setattr(loop, "_fresh", lambda values: (fresh.append(inside[0]), real(values))[1])
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU())
    prof = fxprof.profile(model, torch.randn(2, 4), timer=StandInKernelTimer(), warmup=1, iters=3, memory=False, peaks=None)
    runs = 1 + prof.meta["profiler_warmup_runs"] + 3  # warm-up, the profiler's warm-up, the timed runs
    assert fresh[:runs] == [True] * runs and not any(fresh[runs:])  # the untimed passes copy outside it


def test_one_helper_says_whether_an_outer_profiler_runs():
    from torch.profiler import ProfilerActivity, profile

    from fxprof.measure.device.bridge import profiler_running

    assert not profiler_running()
    with kineto_quiet(), profile(activities=[ProfilerActivity.CPU]):
        assert profiler_running()
    assert not profiler_running()


def test_a_real_trace_names_the_input_copies_range():
    from torch.profiler import ProfilerActivity, profile

    from fxprof.measure.device.bridge import input_copies_range

    x = torch.randn(64, 64)
    with kineto_quiet(), profile(activities=[ProfilerActivity.CPU]) as prof:
        with input_copies_range():
            x.clone()
    kinds = [e.kind for e in events_from_kineto(prof.profiler.kineto_results.events()) if e.name == INPUT_COPIES_RANGE]
    assert kinds == ["copies"]
