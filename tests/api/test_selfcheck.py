"""fxprof.selfcheck and `fxprof selfcheck`: real runs against known costs on this machine."""

from __future__ import annotations

import io
import subprocess
import sys

import torch
from conftest import requires_cuda

import fxprof
from fxprof.measure.timing.timers import CpuTimer
from fxprof.selfcheck import SPIN_TOLERANCE_MS, SPIN_TOLERANCE_REL


def test_selfcheck_passes_on_the_cpu_with_known_costs():
    out = io.StringIO()
    result = fxprof.selfcheck("cpu", iters=10, file=out)
    rows = result.rows.set_index("node")
    assert set(rows.index) >= {"spin", "spin_1", "spin_2", "add", "mul", "relu", "(output)"}
    for node, known in (("spin", 0.5), ("spin_1", 1.0), ("spin_2", 2.0)):
        assert rows.loc[node, "known_ms"] == known
        assert rows.loc[node, "stopwatch_ms"] >= known  # a stopwatch never reads a spin short
        assert rows.loc[node, "measured_ms"] <= rows.loc[node, "median_ms"]  # the fastest run
        assert abs(rows.loc[node, "error_ms"]) <= SPIN_TOLERANCE_MS + SPIN_TOLERANCE_REL * known
    assert rows.loc["spin", "ok"] and rows.loc["spin_1", "ok"] and rows.loc["spin_2", "ok"], str(result)
    assert rows.loc["(output)", "ok"]
    # the roofs: 16 plain ops (x + y, add into out, copy, in-place ReLU at 4 sizes) held to at most 105% of their roof
    roofs = result.rows[result.rows["timer"] == "roofs"]
    assert len(roofs) == 16 and roofs["check"].str.contains(r"% of the roof \(at most 105%\)").all(), str(result)
    assert (roofs["ok"] == (roofs["median_ms"] >= roofs["known_ms"] / 1.05)).all()
    text = out.getvalue()
    assert "timer cpu" in text and " measured " in text  # times carry their unit: the header drops _ms
    # on a quiet machine every check passes; on one so busy that a stopwatch reads a 2 ms spin
    # 10% long, cheap nodes (tens of microseconds) are at the mercy of preemptions
    if rows.loc["spin_2", "stopwatch_ms"] < 2.2:
        assert result.passed, str(result)
        assert text.rstrip().endswith("PASS: every measurement matched its known cost")


class HalfTimer(CpuTimer):
    """A broken clock that reports half of every duration."""

    name = "half"

    def elapsed_ms(self, start, end):
        return super().elapsed_ms(start, end) / 2

    def elapsed_ms_many(self, starts, ends):
        return [t / 2 for t in super().elapsed_ms_many(starts, ends)]


def test_selfcheck_fails_a_timer_that_is_wrong():
    result = fxprof.selfcheck("cpu", iters=5, timers={"half": HalfTimer()}, file=None)
    assert not result.passed
    failed = set(result.rows.loc[~result.rows["ok"], "node"])
    assert {"spin", "spin_1", "spin_2"} <= failed
    assert str(result).splitlines()[-1].startswith("FAIL: ") and "half/spin_2" in str(result)


def test_selfcheck_command_exit_status():
    done = subprocess.run([sys.executable, "-m", "fxprof", "selfcheck", "--device", "cpu", "--iters", "5"],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == (0 if "PASS" in done.stdout else 1), done.stdout + done.stderr
    assert "timer cpu" in done.stdout and ("PASS" in done.stdout or "FAIL" in done.stdout)
    if not torch.cuda.is_available():
        done = subprocess.run([sys.executable, "-m", "fxprof", "selfcheck", "--device", "cuda"],
                              capture_output=True, text=True, timeout=600)
        assert done.returncode == 2 and "needs a CUDA GPU" in done.stderr


@requires_cuda
def test_selfcheck_passes_on_the_gpu():
    result = fxprof.selfcheck("cuda", iters=10, file=None)
    assert result.passed, str(result)
    rows = result.rows
    assert set(rows["timer"]) == {"cuda", "sync", "kernel", "cpu", "roofs"}  # roofs: issue 48's plain ops
