"""One mark per node boundary with the event timers (issue 39 item 3), checked on the CPU with a
stand-in event timer that drives the real generated plan, and on a GPU with CUDA events."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torchvision
from conftest import requires_cuda
from standin_timer import StandInEventTimer
from torch import nn

import fxprof
from fxprof import ProfilingInterpreter
from fxprof.measure.timing.launches import launch_check, launches_nothing
from fxprof.measure.timing.recorder import Recorder
from fxprof.measure.timing.timers import CpuTimer


class Chain(nn.Module):
    """Five launching nodes with views, a size read and getitems between them."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(8, 8)

    def forward(self, x):
        a = self.lin(x)                      # launches
        b = a.view(2, 4, 8).permute(0, 2, 1)  # views
        c = torch.relu(b)                    # launches
        n = c.size(0)                        # size read
        d = c.transpose(1, 2)[0]             # view, getitem with a constant index
        e = d * 2.0                          # launches
        f = e.unsqueeze(0).squeeze(0) + n    # views, then an add that launches
        return torch.tanh(f), torch.split(f, 2)[1]  # launches, split + getitem launch nothing


LAUNCHING = 5


def _interp(timer, **kw):
    torch.manual_seed(0)
    gm = fxprof.trace(Chain().eval())
    return gm, ProfilingInterpreter(gm, timer=timer, **kw)


def _ns(values) -> np.ndarray:
    return np.rint(np.asarray(values) * 1e6).astype(np.int64)


def _check_run_layout(rec, unmarked: set[str], runs: int) -> None:
    """Views read 0 device time, every node starts where the one before it ended, and the
    nodes of a run add up to its span exactly."""
    names = np.array(rec.node)
    time_ns, start_ns = _ns(rec.time_ms), _ns(rec.start_ms)
    for run in range(runs):
        sel = rec.run == run
        t, s, n = time_ns[sel], start_ns[sel], names[sel]
        assert all(t[i] == 0 for i in range(len(n)) if n[i] in unmarked), dict(zip(n, t))
        assert (s[1:] == s[:-1] + t[:-1]).all(), "gaps or overlaps between nodes"  # no gaps, no overlaps
        assert t.sum() == _ns(rec.run_total_ms[run]) - s[0], (t.sum(), rec.run_total_ms[run])


def test_the_plan_takes_one_mark_per_boundary_and_none_for_views():
    gm, interp = _interp(StandInEventTimer())
    x = torch.randn(8, 8)
    with torch.no_grad():
        interp.run(x)
    source = interp._compiled.source
    assert source.count("mark()") == LAUNCHING + 1, source
    nodes = {n.name: n for n in gm.graph.nodes}
    assert {name for name in nodes if not launches_nothing(nodes[name], gm)} == {
        "lin", "relu", "mul", "add", "tanh"}
    assert interp.unmarked == {n for n in nodes} - {"lin", "relu", "mul", "add", "tanh"}
    # the run's own first and last marks are the plan's first and last boundaries
    assert interp.timer.count == LAUNCHING + 1


def test_views_read_zero_device_time_and_nodes_tile_the_run_exactly():
    timer = StandInEventTimer()
    gm, interp = _interp(timer)
    x = torch.randn(8, 8)
    with torch.no_grad():
        for _ in range(4):
            out = interp.run(x)
            expected = gm(x)
            assert all(torch.equal(a, b) for a, b in zip(out, expected))  # bit-identical to eager
    rec = interp.recording
    assert rec.runs == 4 and len(rec) == 4 * len(gm.graph.nodes)
    _check_run_layout(rec, set(interp.unmarked), 4)
    names = np.array(rec.node)
    host = dict(zip(names, rec.host_ms))
    assert host["permute"] > 0 and host["size"] > 0  # a view's host time is still measured
    assert (rec.time_ms[np.isin(names, ["lin", "relu", "mul", "add", "tanh"])] > 0).all()


def test_the_generic_loop_takes_one_mark_per_boundary_too():
    timer = StandInEventTimer()
    recorder = Recorder(timer, node_ranges=True)  # the kernel timer's loop: a range per node
    gm, _ = _interp(timer)
    interp = ProfilingInterpreter(gm, recorder=recorder)
    assert not interp.lean and interp.boundaries
    x = torch.randn(8, 8)
    with torch.no_grad():
        for _ in range(3):
            out = interp.run(x)
            assert timer.count == LAUNCHING + 1
    assert all(torch.equal(a, b) for a, b in zip(out, gm(x)))
    _check_run_layout(interp.recording, set(interp.unmarked), 3)


def test_a_graph_inside_a_run_opened_by_its_caller_takes_its_own_first_mark():
    # graphs split by breaks run inside one run with eager code between them: each call of a
    # graph starts at a mark of its own, not at the run's first one
    timer = StandInEventTimer()
    gm, interp = _interp(timer)
    x = torch.randn(8, 8)
    with torch.no_grad(), interp.recorder.run():
        torch.randn(8, 8) @ torch.randn(8, 8)  # work before the graph, in the run
        interp.run(x)
    assert timer.count == LAUNCHING + 1 + 2  # + the run's own first and last marks
    rec = interp.recording
    time_ns = _ns(rec.time_ms)
    assert time_ns.sum() <= _ns(rec.run_total_ms[0])
    assert rec.start_ms[0] > 0  # the graph's first node starts after the eager work


def test_the_cpu_timer_keeps_two_marks_per_node():
    gm, interp = _interp(CpuTimer())
    with torch.no_grad():
        interp.run(torch.randn(8, 8))
    assert not interp.boundaries and not interp.unmarked
    assert interp._compiled.source.count("mark()") == 2 * len(gm.graph.nodes)


def test_a_subclass_with_its_own_hooks_keeps_two_marks_per_node():
    class Logged(ProfilingInterpreter):
        def fetch_args_kwargs_from_env(self, n):  # might enqueue device work between nodes
            return super().fetch_args_kwargs_from_env(n)

    timer = StandInEventTimer()
    gm = fxprof.trace(Chain().eval())
    interp = Logged(gm, timer=timer)
    with torch.no_grad():
        interp.run(torch.randn(8, 8))
    assert not interp.boundaries
    assert timer.count == 2 * len(gm.graph.nodes) + 2


def test_reshape_flatten_and_tensor_indexing_stay_timed():
    class MayCopy(nn.Module):
        def forward(self, x, i):
            a = x.t().reshape(-1)  # a copy: t() is not contiguous
            b = torch.flatten(x.t())
            c = x.contiguous()
            return a, b, c, x[i], x[0, 1:]

    gm = fxprof.trace(MayCopy())
    timed = {n.name for n in gm.graph.nodes if not launches_nothing(n, gm)}
    assert {"reshape", "flatten", "contiguous", "getitem"} <= timed  # x[i]: i may be a tensor
    assert "getitem_1" not in timed  # x[0, 1:]: basic indexing, a view


def test_dropout_launches_nothing_only_when_the_graph_says_training_is_false():
    class Drops(nn.Module):
        def forward(self, x):
            a = nn.functional.dropout(x, 0.1, training=False)
            b = nn.functional.dropout(a, 0.1, False)
            c = nn.functional.dropout(b, 0.1, training=True)
            return nn.functional.dropout(c, 0.1)  # training defaults to True

    gm = fxprof.trace(Drops())
    free = {n.name: launches_nothing(n, gm) for n in gm.graph.nodes if n.op == "call_function"}
    assert free == {"dropout": True, "dropout_1": True, "dropout_2": False, "dropout_3": False}


def test_resnet18_profile_with_the_stand_in_matches_the_launching_nodes():
    torch.manual_seed(0)
    model = torchvision.models.resnet18(weights=None).eval()
    x = torch.randn(1, 3, 32, 32)
    timer = StandInEventTimer()
    prof = fxprof.profile(model, x, timer=timer, warmup=1, iters=3, anatomy=True, memory=False, peaks=None)
    gm = fxprof.trace(model)
    launching = sum(not launches_nothing(n, gm) for n in gm.graph.nodes)
    assert timer.count == launching + 1  # one profile run: launching nodes + 1 events
    assert not any("no CUDA event" in note for note in prof.meta.get("notes", []))  # the anatomy pass agrees
    assert prof.df.loc["x", "median_ms"] == 0 and prof.df.loc["output", "median_ms"] == 0


def test_launch_check_names_nodes_left_unmarked_that_did_work():
    records = {"view": {"device_ops": 0}, "reshape": {"device_ops": 1}, "relu": {"device_ops": 1}}
    assert launch_check({"view"}, records) == []
    (note,) = launch_check({"view", "reshape"}, records)
    assert "1 node(s)" in note and "reshape" in note


def test_training_step_with_the_stand_in_keeps_its_layout():
    # AOTAutograd's aten graphs: views by their schema (aten.t, aten.view, aten.expand, aten.detach)
    # get no mark; each graph call (forward, backward) starts at a mark of its own
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2))
    timer = StandInEventTimer()
    prof = fxprof.profile(model, torch.randn(4, 8), timer=timer, warmup=1, iters=2, backward=True,
                          loss_fn=lambda out: out.sum(), memory=False, peaks=None)
    df = prof.df
    views = ["fw0:t", "bw0:view", "bw0:expand", "bw0:detach_1"]
    assert (df.loc[views, "median_ms"] == 0).all()
    assert (df.loc[["fw0:addmm", "bw0:mm", "bw0:threshold_backward"], "median_ms"] > 0).all()
    forward, backward = 4, 6  # addmm relu addmm_1 sum_1 | mm mm_1 sum_2 threshold_backward mm_2 sum_3
    assert timer.count == (forward + 1) + (backward + 1) + 2
    samples = prof.samples
    for run, total in zip(prof.runs["run"], prof.runs["total_ms"]):
        assert samples.loc[samples["run"] == run, "time_ms"].sum() <= total + 1e-9


def test_isolated_mode_with_the_stand_in():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2))
    prof = fxprof.profile(model, torch.randn(4, 8), timer=StandInEventTimer(), mode="isolated", iters=3,
                          memory=False, peaks=None)
    assert (prof.df.loc[["_0", "_1", "_2"], "median_ms"] > 0).all()


@pytest.mark.parametrize("node_ranges", [False, True])
def test_the_cuda_event_timer_reads_each_event_once_and_tiles_the_run(monkeypatch, node_ranges):
    # the real CudaEventTimer on the CPU, with events that read a fake clock: a run records
    # launching nodes + 1 events, and converting it reads each event once (not twice a node)
    from conftest import FakeClock

    from fxprof.measure.timing.timers import CudaEventTimer

    clock, created, reads, synced = FakeClock(), [], [], []

    class Event:
        def __init__(self, enable_timing=False):
            self.t = None
            created.append(self)

        def record(self, stream=None):
            self.t = clock.now_ns
            clock.advance(0.001)  # recording costs the stream a microsecond

        def elapsed_time(self, end):
            assert synced, "read before the run's synchronize"
            reads.append(end)
            return (end.t - self.t) / 1e6

    class Costly(nn.Module):
        def forward(self, x):
            clock.advance(1.5)
            return x + 1

    monkeypatch.setattr(torch.cuda, "Event", Event)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: "stream")
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: synced.append(1))

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = Costly(), Costly()

        def forward(self, x):
            return self.b(self.a(x).view(-1).unsqueeze(0)).size(1)

    gm = fxprof.trace(Net(), leaf_modules=[Costly])
    timer = CudaEventTimer(torch.device("cuda", 0))
    interp = ProfilingInterpreter(gm, recorder=Recorder(timer, node_ranges=node_ranges))
    assert interp.lean is not node_ranges
    for _ in range(3):
        synced.clear()
        reads.clear()
        assert interp.run(torch.ones(2)) == 2
        assert timer._next == 2 + 1  # a, b and the first boundary
        assert len(reads) == 2 + 1  # each event once against the first (+ the run's total)
    assert len(created) == 3  # pooled
    rec = interp.recording
    _check_run_layout(rec, set(interp.unmarked), 3)
    times = dict(zip(rec.node[:len(gm.graph.nodes)], rec.time_ms[:len(gm.graph.nodes)]))
    assert times["a"] == pytest.approx(1.501) and times["b"] == pytest.approx(1.501)
    assert times["view"] == times["unsqueeze"] == times["size"] == 0.0


# ----------------------------------------------------------------------------------- CUDA
@requires_cuda
def test_cuda_resnet18_records_launching_nodes_plus_one_events_per_run():
    torch.manual_seed(0)
    model = torchvision.models.resnet18(weights=None).eval().cuda()
    x = torch.randn(2, 3, 64, 64, device="cuda")
    gm = fxprof.trace(model)
    from fxprof.measure.timing.timers import CudaEventTimer

    timer = CudaEventTimer(device="cuda")
    interp = ProfilingInterpreter(gm, timer=timer)
    with torch.no_grad():
        for _ in range(3):
            out = interp.run(x)
            assert timer._next == len(gm.graph.nodes) - len(interp.unmarked) + 1
        torch.testing.assert_close(out, gm(x))
    rec = interp.recording
    for run in range(3):
        sel = rec.run == run
        node_sum = float(rec.time_ms[sel].sum())
        assert node_sum == pytest.approx(float(rec.run_total_ms[run]) - float(rec.start_ms[sel][0]), rel=1e-4, abs=1e-3)
    names = np.array(rec.node)
    assert (rec.time_ms[np.isin(names, list(interp.unmarked))] == 0).all()


@requires_cuda
def test_cuda_kernel_timer_takes_one_event_per_boundary_and_says_the_input_copies():
    from fxprof.measure.timing.timers import KernelTimer

    torch.manual_seed(0)
    model = torchvision.models.resnet18(weights=None).eval().cuda()
    x = torch.randn(2, 3, 64, 64, device="cuda")
    timer = KernelTimer(devices=[torch.device("cuda", torch.cuda.current_device())])
    prof = fxprof.profile(model, x, timer=timer, warmup=1, iters=3, memory=False, peaks=None)
    gm = fxprof.trace(model)
    launching = sum(not launches_nothing(n, gm) for n in gm.graph.nodes)
    assert timer._next == launching + 1  # the generic loop (a range per node) shares boundaries too
    notes = prof.meta.get("notes", [])
    assert not any("could not be given to a node" in note for note in notes), notes
    assert any("copies of the inputs" in note for note in notes), notes  # the clone of x, each run
    assert (prof.df.loc[["x", "output"], "median_ms"] == 0).all()
    assert prof.df["kernel_median_ms"].notna().all()
