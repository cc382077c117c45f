"""The GPU path. Real-GPU tests skip without CUDA; the event timer's mechanics are also checked
on the CPU with a stand-in for torch.cuda.Event."""

from __future__ import annotations

import pytest
import torch
from torch import fx, nn

import fxprof
from fxprof.timers import CudaEventTimer

from conftest import FakeClock, requires_cuda

_SLEEP_CYCLES = 10_000_000  # a long kernel: a few milliseconds on current GPUs


def long_kernel(x):
    torch.cuda._sleep(_SLEEP_CYCLES)
    return x


fx.wrap("long_kernel")


class LongThenCheap(nn.Module):
    def forward(self, x):
        y = long_kernel(x)
        y = y + 1
        y = y * 2
        return torch.relu(y)


# ----------------------------------------------------- CPU checks of the event timer
class _FakeEvent:
    clock: FakeClock
    synced: list  # set by the fake synchronize: elapsed times are readable only after it

    def __init__(self, enable_timing: bool = False) -> None:
        assert enable_timing
        self.t = None
        self.stream = None

    def record(self, stream=None) -> None:
        self.t = self.clock.now_ns
        self.stream = stream
        self.synced.clear()

    def elapsed_time(self, end: "_FakeEvent") -> float:
        assert self.synced, "elapsed_time read before the run's synchronize"
        return (end.t - self.t) / 1e6


def test_event_timer_records_on_the_stream_and_synchronizes_once_per_run(monkeypatch, clock):
    syncs = []
    created = []

    class Event(_FakeEvent):
        def __init__(self, enable_timing=False):
            super().__init__(enable_timing)
            created.append(self)

    Event.clock = clock
    Event.synced = []
    monkeypatch.setattr(torch.cuda, "Event", Event)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: f"stream of {device}")
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: (syncs.append(device), Event.synced.append(1)))

    timer = CudaEventTimer(torch.device("cuda", 0))

    class Costly(nn.Module):
        def forward(self, x):
            clock.advance(2.5)
            return x + 1

    gm = fxprof.trace(nn.Sequential(Costly(), nn.ReLU()), leaf_modules=[Costly])
    interp = fxprof.ProfilingInterpreter(gm, timer)
    for _ in range(3):
        interp.run(torch.ones(2))
    assert syncs == [torch.device("cuda", 0)] * 3  # one per run, none per node
    nodes = len(gm.graph.nodes)
    assert len(created) == 2 * nodes + 2  # pooled: reused on every later run
    assert {e.stream for e in created} == {"stream of cuda:0"}  # recorded on the device's current stream
    rec = interp.recording
    times = dict(zip(rec.node[:nodes], rec.time_ms[:nodes]))
    assert times["_0"] == 2.5 and times["_1"] == 0.0
    assert rec.run_total_ms.tolist() == [2.5, 2.5, 2.5]


# ----------------------------------------------------------------- real GPU tests
def _calibrated_sleep_ms() -> float:
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda._sleep(_SLEEP_CYCLES)  # warm
    start.record()
    torch.cuda._sleep(_SLEEP_CYCLES)
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end)


@requires_cuda
@pytest.mark.parametrize("timer", ["cuda", "sync"])
def test_long_kernel_time_lands_on_its_node_although_the_host_runs_ahead(timer):
    expected = _calibrated_sleep_ms()
    assert expected > 1.0
    prof = fxprof.profile(LongThenCheap(), torch.ones(1024, device="cuda"), warmup=2, iters=10, timer=timer)
    df = prof.df
    long = df.loc["long_kernel", "median_ms"]
    assert long == pytest.approx(expected, rel=0.1)
    for cheap in ["add", "mul", "relu"]:
        assert df.loc[cheap, "median_ms"] < 0.05 * expected, cheap
    if timer == "cuda":
        # the host only launched the kernel: its own time is far below the device time, and
        # the whole run took the host far less than the kernel (it ran ahead, no sync per node)
        assert df.loc["long_kernel", "host_mean_ms"] < 0.5 * long
        assert prof.runs["host_ms"].median() < 0.5 * expected
    assert prof.meta["timer"] == timer and prof.meta["device"].startswith("cuda")


@requires_cuda
def test_cpu_timer_on_the_gpu_sees_only_the_launch():
    expected = _calibrated_sleep_ms()
    with pytest.warns(UserWarning):
        prof = fxprof.profile(LongThenCheap(), torch.ones(1024, device="cuda"), warmup=2, iters=5, timer="cpu")
    assert prof.df.loc["long_kernel", "median_ms"] < 0.5 * expected


@requires_cuda
def test_cuda_timer_does_not_synchronize_inside_a_run(monkeypatch):
    calls = []
    real = torch.cuda.synchronize
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: (calls.append(1), real(device))[1])
    fxprof.profile(LongThenCheap(), torch.ones(8, device="cuda"), warmup=1, iters=4, timer="cuda")
    assert len(calls) == 5


@requires_cuda
def test_cuda_and_sync_agree_on_resnet18():
    import torchvision

    model = torchvision.models.resnet18(weights=None).eval().cuda()
    x = torch.randn(64, 3, 224, 224, device="cuda")  # large enough that kernels, not launches, dominate
    with torch.no_grad():
        expected = model(x)
    cuda = fxprof.profile(model, x, warmup=5, iters=20, timer="cuda")
    sync = fxprof.profile(model, x, warmup=5, iters=20, timer="sync")
    total_cuda = cuda.df["median_ms"].sum()
    total_sync = sync.df["median_ms"].sum()
    assert total_cuda == pytest.approx(total_sync, rel=0.10)
    # the heaviest nodes agree one by one as well (sync adds a fixed cost per node)
    heavy = cuda.df[cuda.df["pct"] > 4].index
    assert len(heavy) > 0
    for node in heavy:
        assert cuda.df.loc[node, "median_ms"] == pytest.approx(sync.df.loc[node, "median_ms"], rel=0.15), node
    with torch.no_grad():
        torch.testing.assert_close(fxprof.ProfilingInterpreter(fxprof.trace(model)).run(x), expected)


# ------------------------------------------------------------------ kernel-time mode
def test_kernel_timer_is_refused_on_the_cpu_with_a_reason():
    if torch.cuda.is_available():
        pytest.skip("checks the message without a GPU")
    with pytest.raises(fxprof.TimerUnavailableError, match="timer='kernel' attributes CUDA kernel time.*no kernels"):
        fxprof.profile(nn.Linear(2, 2), torch.ones(2), timer="kernel")


def test_kernel_times_are_matched_to_their_node_and_run():
    # the k-th range of a node in the profiler's events belongs to the node's k-th sample
    from types import SimpleNamespace

    from fxprof.api import _attach_kernel_times
    from fxprof.interpreter import Recording

    def event(name, start, cpu_us, dev_us, device="DeviceType.CPU"):
        return SimpleNamespace(name=name, time_range=SimpleNamespace(start=start), cpu_time_total=cpu_us,
                               device_time_total=dev_us, device_type=device)

    events = [
        event("fxprof::b", 30, 5, 700), event("fxprof::a", 10, 5, 100), event("fxprof::a", 50, 5, 300),
        event("fxprof::b", 70, 5, 900), event("fxprof::a", 10, 0, 0, device="DeviceType.CUDA"),  # mirrored range
        event("aten::mm", 11, 4, 100),
    ]
    rec = Recording(node=["a", "b", "a", "b"], run=[0, 0, 1, 1])
    _attach_kernel_times(rec, events)
    assert rec.kernel_ms.tolist() == [0.1, 0.7, 0.3, 0.9]


@requires_cuda
def test_kernel_timer_attributes_kernel_time_without_idle_gaps():
    expected = _calibrated_sleep_ms()
    prof = fxprof.profile(LongThenCheap(), torch.ones(1024, device="cuda"), warmup=2, iters=5, timer="kernel")
    df = prof.df
    assert df.loc["long_kernel", "kernel_median_ms"] == pytest.approx(expected, rel=0.1)
    assert df.loc["long_kernel", "median_ms"] == pytest.approx(expected, rel=0.1)  # event time alongside
    for cheap in ["add", "mul", "relu"]:
        assert df.loc[cheap, "kernel_median_ms"] < 0.05 * expected
    assert prof.samples["kernel_ms"].notna().all()
