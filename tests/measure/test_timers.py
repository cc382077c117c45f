"""Timer choice and failure before anything runs."""

from __future__ import annotations

import pytest
import torch
from conftest import FakeClock, FakeTimer, requires_cuda
from torch import nn

import fxprof
from fxprof.measure.timing.timers import CpuTimer, CudaEventTimer, SyncTimer, resolve_timer

no_cuda = pytest.mark.skipif(torch.cuda.is_available(), reason="checks behaviour without a GPU")


class Counting(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.calls = 0

    def forward(self, x):
        return self.lin(x)


def test_auto_is_cpu_for_cpu_tensors():
    assert isinstance(resolve_timer("auto", nn.Linear(2, 2), [torch.ones(2)]), CpuTimer)


def test_unknown_timer_name_is_refused():
    with pytest.raises(ValueError, match="unknown timer 'gpu'.*auto, cpu, cuda, sync"):
        resolve_timer("gpu", nn.Linear(2, 2), [])


def test_injected_timer_is_used_as_is():
    timer = FakeTimer(FakeClock())
    assert resolve_timer(timer, nn.Linear(2, 2), []) is timer


@no_cuda
@pytest.mark.parametrize("name", ["cuda", "sync"])
def test_cuda_timer_without_gpu_fails_before_running(name):
    model = Counting()
    runs = []
    model.lin.register_forward_hook(lambda *a: runs.append(1))
    with pytest.raises(fxprof.TimerUnavailableError) as info:
        fxprof.profile(model, torch.randn(2, 4), timer=name)
    assert runs == []  # nothing ran
    message = str(info.value)
    assert f"timer={name!r} needs a CUDA GPU" in message and "timer='cpu'" in message


@requires_cuda
def test_cuda_timer_on_cpu_tensors_is_refused():
    with pytest.raises(fxprof.TimerUnavailableError, match="Move the model and inputs to CUDA"):
        resolve_timer("cuda", nn.Linear(2, 2), [torch.ones(2)])


@requires_cuda
def test_auto_is_cuda_for_cuda_tensors():
    timer = resolve_timer("auto", nn.Linear(2, 2).cuda(), [torch.ones(2, device="cuda")])
    assert isinstance(timer, CudaEventTimer) and timer.device.type == "cuda"
    assert isinstance(resolve_timer("sync", nn.Linear(2, 2).cuda(), []), SyncTimer)


@requires_cuda
def test_cpu_timer_on_cuda_tensors_warns():
    with pytest.warns(UserWarning, match="measures only the time to launch"):
        fxprof.profile(nn.Linear(4, 4).cuda(), torch.randn(2, 4, device="cuda"), timer="cpu", warmup=0, iters=1)
