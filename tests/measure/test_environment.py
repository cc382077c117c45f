"""What a measurement depended on: profile.meta["env"], the header line, compare's warning, warmup_ms."""

from __future__ import annotations

import warnings

import pytest
import torch
from torch import nn

import fxprof
from fxprof.core.environment import differences
from fxprof.measure.passes.environment import environment
from fxprof.views.environment import env_line


def test_environment_records_the_numerics_settings():
    env = environment([torch.device("cpu")])
    assert env["devices"] == ["cpu"]
    assert env["float32_matmul_precision"] == torch.get_float32_matmul_precision()
    assert env["cudnn_benchmark"] == torch.backends.cudnn.benchmark
    assert env["autocast"] == "off" and env["threads"] == torch.get_num_threads()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert environment()["autocast"] == "cpu bfloat16"
    previous = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("high")
    try:
        assert environment()["float32_matmul_precision"] == "high"
    finally:
        torch.set_float32_matmul_precision(previous)


def test_profile_keeps_the_environment_and_prints_it():
    prof = fxprof.profile(nn.Linear(4, 4), torch.randn(2, 4), warmup=1, iters=2, anatomy=False)
    assert prof.meta["env"]["float32_matmul_precision"] == torch.get_float32_matmul_precision()
    assert prof.meta["warmup_runs"] == 1 and prof.meta["warmup_ms"] == 0.0  # no time-based warm-up on the CPU
    assert "env: matmul precision " in prof.summary()


def test_warmup_ms_warms_up_for_at_least_that_long():
    import time

    from fxprof.measure.eager.loop import _warm_up

    runs, steps = [], []
    t0 = time.perf_counter()
    done = _warm_up(lambda: (runs.append(1), time.sleep(0.001)), 1, 30, lambda: steps.append(1))
    assert time.perf_counter() - t0 >= 0.030
    assert done == len(runs) >= 2 and len(steps) == done  # more runs than the count asked, each counted
    assert _warm_up(lambda: runs.append(1), 3, 0, lambda: None) == 3  # no time asked: the count
    prof = fxprof.profile(nn.Linear(4, 4), torch.randn(2, 4), warmup=1, warmup_ms=30, iters=1, anatomy=False)
    assert prof.meta["warmup_runs"] >= 1 and prof.meta["warmup_ms"] == 30
    assert f"{prof.meta['warmup_runs']} warm-up + 1 timed runs" in prof.summary()


def test_compare_warns_when_profiles_were_measured_differently(tmp_path):
    x = torch.randn(2, 4)
    model = nn.Linear(4, 4)
    a = fxprof.profile(model, x, warmup=0, iters=2, anatomy=False)
    previous = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("medium")
    try:
        b = fxprof.profile(model, x, warmup=0, iters=2, anatomy=False)
    finally:
        torch.set_float32_matmul_precision(previous)
    differ = differences(a.meta, b.meta)
    assert f"float32_matmul_precision: {previous!r} vs 'medium'" in differ
    # below "highest", matmul precision turns TF32 matmuls on: the flag differs too
    assert differ == [d for d in differ if d.startswith(("tf32_matmul", "float32_matmul_precision"))]
    with pytest.warns(UserWarning, match="float32 matmul precision"):  # in words (issue 32)
        fxprof.compare(a, b)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fxprof.compare(a, a)  # same settings: silent
    # saved and loaded profiles keep what they were measured with
    a.save(tmp_path / "a.json")
    b.save(tmp_path / "b.json")
    with pytest.warns(UserWarning, match="float32 matmul precision"):  # in words (issue 32)
        fxprof.compare(fxprof.load(tmp_path / "a.json"), fxprof.load(tmp_path / "b.json"))


def test_env_line_for_a_gpu_profile():
    meta = {"env": {"devices": ["cuda:0 NVIDIA H200 (sm 9.0)"], "cuda": "13.0", "cudnn": "91300", "tf32_matmul": False,
                    "tf32_cudnn": True, "float32_matmul_precision": "highest", "cudnn_benchmark": True,
                    "cudnn_deterministic": False, "autocast": "off"}}
    assert env_line(meta) == ("env: cuda:0 NVIDIA H200 (sm 9.0) | CUDA 13.0, cuDNN 91300 | TF32 matmul off, cuDNN on | "
                              "cudnn.benchmark on | matmul precision highest | autocast off")
    assert env_line({}) == ""
