"""Isolated mode: each node re-run on its real inputs; unsafe nodes skipped with a reason."""

from __future__ import annotations

import math

import pytest
import torch
from conftest import FakeClock, FakeTimer, Work
from torch import nn
from torch.profiler import record_function

import fxprof


class Costed(nn.Module):
    def __init__(self, clock: FakeClock):
        super().__init__()
        self.stem = Work(clock, [1.0])
        self.head = Work(clock, [3.0])
        self.act = nn.ReLU(inplace=True)
        self.drop = nn.Dropout(0.5)

    def forward(self, x):
        with record_function("block"):
            y = self.stem(x)
        y = self.act(y)
        y = self.drop(y)
        z = y.clone()
        z.mul_(2)
        return self.head(z + 1)


@pytest.fixture
def isolated(clock):
    model = Costed(clock).train()  # dropout active: a random node
    return fxprof.profile(model, torch.ones(2, 3), warmup=1, iters=4, timer=FakeTimer(clock), mode="isolated",
                          leaf_modules=[Work])


def test_each_safe_node_is_repeated_and_timed_exactly(isolated):
    df = isolated.df
    assert df.loc["stem", "calls"] == 4 and df.loc["head", "calls"] == 4
    assert df.loc["stem", "median_ms"] == 1.0 and df.loc["head", "median_ms"] == 3.0
    assert df.loc["stem", "std_ms"] == 0.0
    assert df.loc["head", "pct"] == pytest.approx(75.0)
    for node in ("clone", "add"):
        assert df.loc[node, "calls"] == 4 and df.loc[node, "skip_reason"] == ""


def test_unsafe_nodes_are_skipped_with_the_reason(isolated):
    reasons = isolated.df["skip_reason"]
    assert reasons["act"].startswith("modifies its inputs in place")   # ReLU(inplace=True)
    assert reasons["mul_"].startswith("modifies its inputs in place")  # a tensor method
    assert reasons["drop"].startswith("random")
    assert reasons["_record_function_enter_new"].startswith("impure")
    assert reasons["x"].startswith("placeholder") and reasons["output"].startswith("output")
    assert (isolated.df.loc[reasons != "", "calls"] == 0).all()
    assert "skipped, see skip_reason" in isolated.summary()


def test_isolated_profiles_have_no_whole_runs(isolated, tmp_path):
    assert isolated.meta["mode"] == "isolated"
    assert math.isnan(isolated.coverage)
    with pytest.raises(ValueError, match="no timeline"):
        isolated.to_chrome_trace(tmp_path / "t.json")
    isolated.to_csv(tmp_path / "i.csv")
    assert fxprof.read_csv(tmp_path / "i.csv")["skip_reason"]["drop"].startswith("random")


def test_isolated_mode_leaves_the_model_and_random_state_alone(resnet18):
    import copy

    model = copy.deepcopy(resnet18).train()
    before = copy.deepcopy(model.state_dict())
    x = torch.randn(2, 3, 32, 32)
    torch.manual_seed(123)
    fxprof.profile(model, x, warmup=0, iters=2, mode="isolated", anatomy=False)
    after_profile = torch.rand(1)
    for key, value in model.state_dict().items():  # batch-norm statistics restored
        assert torch.equal(value, before[key]), key
    torch.manual_seed(123)
    assert torch.equal(torch.rand(1), after_profile)


def test_isolated_pass_restores_the_random_generator():
    model = nn.Sequential(nn.Linear(4, 4), nn.Dropout(0.5)).train()  # dropout draws random numbers
    torch.manual_seed(7)
    expected = torch.rand(3)
    torch.manual_seed(7)
    fxprof.profile(model, torch.ones(2, 4), warmup=0, iters=3, mode="isolated", anatomy=False)
    assert torch.equal(torch.rand(3), expected)


def test_isolated_mode_on_a_real_model(resnet18):
    prof = fxprof.profile(resnet18, torch.randn(1, 3, 32, 32), warmup=1, iters=3, mode="isolated")
    df = prof.df
    convs = df[df["kind"] == "conv2d"]
    assert len(convs) == 20 and (convs["calls"] == 3).all()
    assert (df.loc[df["kind"] == "relu", "skip_reason"].str.startswith("modifies its inputs")).all()
    assert df["pct"].sum() == pytest.approx(100.0)


def test_bad_mode_and_kernel_with_isolated_are_refused():
    with pytest.raises(ValueError, match="unknown mode 'fast'"):
        fxprof.profile(nn.Linear(2, 2), torch.ones(2), mode="fast")


def test_dropout_in_eval_mode_is_not_random_and_is_re_run():
    model = nn.Sequential(nn.Linear(4, 4), nn.Dropout(0.5))
    evaluating = fxprof.profile(model.eval(), torch.ones(2, 4), warmup=0, iters=3, mode="isolated", anatomy=False)
    assert evaluating.df.loc["_1", "skip_reason"] == "" and evaluating.df.loc["_1", "calls"] == 3
    training = fxprof.profile(model.train(), torch.ones(2, 4), warmup=0, iters=3, mode="isolated", anatomy=False)
    assert training.df.loc["_1", "skip_reason"].startswith("random")

    class Functional(nn.Module):
        def forward(self, x):
            return torch.nn.functional.dropout(x, 0.5, False) + torch.nn.functional.dropout(x, 0.5, True)

    df = fxprof.profile(Functional(), torch.ones(2, 4), warmup=0, iters=2, mode="isolated", anatomy=False).df
    assert df.loc["dropout", "skip_reason"] == "" and df.loc["dropout_1", "skip_reason"].startswith("random")


def test_isolated_mode_keeps_the_host_ahead_of_a_device_timer(clock):
    # a device timer that can hold the device gets a hold before every node's repeats, sized
    # from the host time of the node's real run, so repeats are never paced by the launches
    from conftest import FakeTimer

    from fxprof.measure.eager.isolated import HOLD_FACTOR, HOLD_MARGIN_MS

    holds = []

    class HoldingTimer(FakeTimer):
        def hold_device(self, ms):
            holds.append(ms)

    class Slow(nn.Module):
        def forward(self, x):
            clock.advance(0.5)
            return x + 1

    prof = fxprof.profile(nn.Sequential(Slow(), nn.ReLU()), torch.ones(3), warmup=0, iters=4, mode="isolated",
                          timer=HoldingTimer(clock), leaf_modules=[Slow])
    assert holds[0] == pytest.approx(HOLD_FACTOR * 0.5 * 4 + HOLD_MARGIN_MS)
    assert len(holds) == 2  # the two nodes that were re-run
    assert any("spin kernel" in n for n in prof.meta["notes"])
    assert "spin kernel" in prof.summary()


def test_a_node_that_fails_in_isolated_mode_is_named_with_its_inputs():
    class Bad(nn.Module):
        def forward(self, x):
            return torch.relu(x) @ torch.ones(5, 5)

    with pytest.raises(RuntimeError, match=r"(?s)node .matmul. .*it received arg0: Tensor\(shape=\[2, 3\]"):
        fxprof.profile(Bad(), torch.ones(2, 3), iters=2, mode="isolated")
