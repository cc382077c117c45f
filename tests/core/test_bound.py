"""The ``bound`` verdict on a simulated GPU stream: exact host and device timelines on the CPU.

``SimStream`` is a FIFO device queue driven by a fake host clock: a launch costs host time and
queues a kernel that starts when both the launch is done and the device is free; an event
"completes" when the device reaches it. That is the semantics of CUDA events on one stream,
so the real interpreter, recorder and verdict run unchanged on top of it.
"""

from __future__ import annotations

import pandas as pd
import pytest
import torch
from conftest import FakeClock
from torch import fx, nn

import fxprof
from fxprof.core.bound import LAUNCH_IDLE_SHARE, bound_verdicts
from fxprof.measure.timing.timers import Timer


class SimStream:
    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock
        self.free_ns = 0  # when the device has finished everything queued so far

    def launch(self, host_ms: float, kernel_ms: float) -> None:
        self.clock.advance(host_ms)  # the host's cost of issuing the work
        start = max(self.clock.now_ns, self.free_ns)
        self.free_ns = start + round(kernel_ms * 1e6)

    def synchronize(self) -> None:
        self.clock.now_ns = max(self.clock.now_ns, self.free_ns)


class SimEventTimer(Timer):
    """Event marks on the simulated stream; named "cuda" so the profile reads it as one."""

    name = "cuda"
    measures_device = True

    def __init__(self, stream: SimStream) -> None:
        self.stream = stream

    def mark(self) -> int:
        return max(self.stream.clock.now_ns, self.stream.free_ns)  # when the device reaches it

    def end_run(self) -> None:
        self.stream.synchronize()

    def elapsed_ms(self, start: int, end: int) -> float:
        return (end - start) / 1e6

    def host_ns(self) -> int:
        return self.stream.clock.now_ns


SIM: SimStream | None = None


def launch(x, host_ms, kernel_ms):
    SIM.launch(host_ms, kernel_ms)
    return x * 1  # one aten op that does work: the anatomy pass sees a launching node


def wait(x, host_ms):
    SIM.clock.advance(host_ms)
    SIM.synchronize()  # like .item(): the host waits for everything queued
    return x * 1


fx.wrap("launch")
fx.wrap("wait")


class HostAhead(nn.Module):
    """A long kernel, then cheap launches behind it, then a node that synchronizes."""

    def forward(self, x):
        y = launch(x, 0.01, 5.0)  # long kernel, quick launch: device-bound
        y = launch(y, 0.05, 0.01)  # slow launch, but 5 ms of work queued ahead: never starves the GPU
        y = launch(y, 0.05, 0.01)
        y = wait(y, 0.01)  # waits ~5 ms for the queue
        parts = y.chunk(2)  # a view: launches nothing
        return parts[0]


class LaunchBoundChain(nn.Module):
    def forward(self, x):
        for _ in range(4):
            x = launch(x, 0.05, 0.005)  # the GPU finishes each kernel long before the next launch
        return x


def _profile(model: nn.Module, **kwargs) -> fxprof.Profile:
    global SIM
    SIM = SimStream(FakeClock())
    return fxprof.profile(model, torch.ones(4), warmup=1, iters=4, timer=SimEventTimer(SIM), **kwargs)


def test_a_slow_launch_behind_queued_work_is_device_bound_and_a_wait_is_not_launch():
    prof = _profile(HostAhead())
    df = prof.df
    assert df.loc["launch", "bound"] == "device"
    # the old ratio rule (host >= 0.8 x event time) called these launch-bound: 0.05 ms host, 0.01 ms event time
    assert df.loc["launch_1", "host_mean_ms"] > df.loc["launch_1", "median_ms"]
    assert df.loc["launch_1", "bound"] == "device" and df.loc["launch_2", "bound"] == "device"
    # the synchronizing node waited for the queue: on the CPU the anatomy cannot count CUDA
    # syncs, but the measurement alone already refuses "launch" (the device was ahead of it)
    assert df.loc["wait", "bound"] == "device" and df.loc["wait", "host_mean_ms"] > 4.0
    # no device work: no verdict
    for node in ("x", "chunk", "getitem", "output"):
        assert df.loc[node, "bound"] == "", node
    assert prof.launch_bound_pct == 0.0


def test_a_chain_of_cheap_launches_on_an_idle_device_is_launch_bound():
    prof = _profile(LaunchBoundChain())
    df = prof.df
    chain = ["launch", "launch_1", "launch_2", "launch_3"]
    assert (df.loc[chain, "bound"] == "launch").all()
    # the event interval holds the idle wait: about the host time, not the 5 us kernel
    assert df.loc["launch_1", "median_ms"] == pytest.approx(0.05, abs=1e-9)
    assert "launch-bound: " in prof.summary()


def test_without_the_anatomy_every_measured_node_gets_a_verdict():
    df = _profile(HostAhead(), anatomy=False).df
    assert df.loc["chunk", "bound"] in ("launch", "device")  # cannot tell a view from work


def launch_directly(x, host_ms, kernel_ms):
    SIM.launch(host_ms, kernel_ms)  # a kernel with no aten op (torch.cuda._sleep, an extension's)
    return x


fx.wrap("launch_directly")


class DirectLaunch(nn.Module):
    def forward(self, x):
        y = launch_directly(x, 0.01, 3.0)  # long kernel, no aten op: device work all the same
        y = launch_directly(y, 0.01, 0.0)  # the call launches nothing
        return y.view(-1)


def test_a_kernel_launched_without_an_aten_op_is_device_work():
    """issue 40: torch.cuda._sleep in a node got bound "" on an H100, because the anatomy saw
    no aten op; its stream time says the device was busy inside it."""
    prof = _profile(DirectLaunch())
    df = prof.df
    assert prof.anatomy.loc["launch_directly", "device_ops"] == 0
    assert df.loc["launch_directly", "median_ms"] == pytest.approx(3.0, rel=0.05)
    assert df.loc["launch_directly", "bound"] == "device"
    for node in ("launch_directly_1", "view", "x", "output"):
        assert df.loc[node, "bound"] == "", node


def _table(calls, device_ops, syncs, kernel=None):
    index = pd.Index([f"n{i}" for i in range(len(calls))], name="node")
    return pd.DataFrame({"calls": calls, "device_ops": device_ops, "syncs": syncs,
                         "kernel_median_ms": kernel if kernel is not None else [float("nan")] * len(calls)}, index=index)


def _samples(rows):
    return pd.DataFrame(rows, columns=["node", "run", "time_ms", "host_ms", "start_ms", "host_start_ms", "kernel_ms"])


def test_the_rule_on_medians():
    samples = _samples([
        # node, run, time, host, device start, host start
        ("n0", 0, 0.10, 0.09, 0.000, 0.000, None),  # idle 0.09 of 0.10: launch
        ("n1", 0, 0.10, 0.09, 1.000, 0.100, None),  # queue 0.9 ms ahead: device
        ("n2", 0, 2.00, 2.00, 1.100, 0.190, None),  # synchronized (anatomy counted a sync): sync
        ("n3", 0, 0.01, 0.01, 3.100, 2.190, None),  # launched nothing: blank
        ("n4", 0, 0.10, 0.05, 3.110, 3.100, None),  # idle 0.04 of 0.10: under the share: device
    ])
    table = _table(calls=[1, 1, 1, 1, 1], device_ops=[1, 1, 1, 0, 1], syncs=[0, 0, 1, 0, 0])
    verdict = bound_verdicts(samples, table)
    assert list(verdict) == ["launch", "device", "sync", "", "device"]
    assert LAUNCH_IDLE_SHARE == 0.5
    # device activity attributed by the kernel timer counts as launching work too
    table = _table(calls=[1] * 5, device_ops=[pd.NA] * 5, syncs=[pd.NA] * 5, kernel=[0.01, 0.01, 0.0, 0.0, 0.01])
    assert list(bound_verdicts(samples, table)) == ["launch", "device", "", "", "device"]


def test_a_node_given_no_event_gets_no_verdict_without_the_anatomy():
    """One event per boundary (issue 39 item 3): a view is given no event, so its device time is
    0 by construction. With the anatomy off nothing else says it launched nothing, and its zero
    read as "device"; the nodes given no event are kept (meta no_event_nodes) and get ""."""
    samples = _samples([
        ("n0", 0, 0.10, 0.09, 1.000, 0.100, None),
        ("n1", 0, 0.00, 0.01, 1.100, 0.190, None),  # a view: no event, zero device time
    ])
    table = _table(calls=[1, 1], device_ops=[pd.NA] * 2, syncs=[pd.NA] * 2)
    assert list(bound_verdicts(samples, table)) == ["device", "device"]  # what it said before
    assert list(bound_verdicts(samples, table, no_event=["n1"])) == ["device", ""]


def test_a_profile_keeps_the_nodes_its_event_timer_gave_no_event():
    from standin_timer import StandInEventTimer
    from test_boundary_marks import Chain

    prof = fxprof.profile(Chain(), torch.randn(8, 8), timer=StandInEventTimer(), warmup=1, iters=2, anatomy=False,
                          memory=False, peaks=None)
    kept = set(prof.meta["no_event_nodes"])
    assert kept and kept <= set(prof.df.index)
    assert (prof.df.loc[sorted(kept), "median_ms"] == 0).all()
    assert "no_event_nodes" not in fxprof.profile(Chain(), torch.randn(8, 8), warmup=1, iters=2, anatomy=False,
                                                  memory=False, peaks=None).meta  # the CPU timer marks every node
