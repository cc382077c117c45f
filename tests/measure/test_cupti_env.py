"""TEARDOWN_CUPTI=1 (kineto detaches CUPTI at every profiler stop) breaks the kernel times of
timers that run a torch.profiler cycle per timed run: on an H200, compiled resnet50 read 29.1 ms
of kernels a run against 1.54 ms. Those timers refuse it with what to do; the CPU's compiled mode
(fxprof's marks, no CUPTI) is unaffected."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import fxprof
from fxprof.errors import TimerUnavailableError
from fxprof.measure.device.cupti import TEARDOWN_ENV, refuse_teardown, teardown_refusal

requires_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def test_only_teardown_one_is_refused_and_the_reason_says_what_to_do():
    assert teardown_refusal("x", {}) == ""
    assert teardown_refusal("x", {TEARDOWN_ENV: "0"}) == ""
    why = teardown_refusal("compiled mode on a GPU", {TEARDOWN_ENV: " 1 "})
    assert "compiled mode on a GPU" in why and "Unset TEARDOWN_CUPTI" in why and "timer='cuda'" in why


def test_the_refusal_is_a_timer_error(monkeypatch):
    monkeypatch.setenv(TEARDOWN_ENV, "1")
    with pytest.raises(TimerUnavailableError, match="TEARDOWN_CUPTI=1 is set"):
        refuse_teardown("compiled mode on a GPU")
    monkeypatch.setenv(TEARDOWN_ENV, "0")
    refuse_teardown("compiled mode on a GPU")  # no error


def test_compiled_mode_on_the_cpu_runs_with_it_set(monkeypatch):
    monkeypatch.setenv(TEARDOWN_ENV, "1")
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 8)).eval()
    prof = fxprof.profile(model, torch.randn(2, 16), compile=True, warmup=1, iters=3, memory=False)
    assert prof.is_compiled and prof.meta["timer"] == "marks"
    assert (prof.df["median_ms"] > 0).any()


@requires_cuda
def test_compiled_mode_on_a_gpu_refuses_it_before_compiling(monkeypatch):
    monkeypatch.setenv(TEARDOWN_ENV, "1")
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU()).cuda().eval()
    with pytest.raises(TimerUnavailableError, match="compiled mode on a GPU"):
        fxprof.profile(model, torch.randn(2, 16, device="cuda"), compile=True, warmup=1, iters=3)


@requires_cuda
def test_a_session_of_a_compiled_model_on_a_gpu_refuses_it_before_the_loop(monkeypatch):
    monkeypatch.setenv(TEARDOWN_ENV, "1")
    model = torch.compile(nn.Sequential(nn.Linear(16, 32), nn.ReLU()).cuda().eval())
    with pytest.raises(TimerUnavailableError, match="a session of a compiled model on a GPU"):
        fxprof.session(model)
