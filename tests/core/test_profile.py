"""fxprof.profile on real models, the derived table, and the fake-clock golden table."""

from __future__ import annotations

import collections
import copy
import os
import pathlib

import numpy as np
import pandas as pd
import pytest
import torch
from conftest import FakeCostModel
from torch import nn
from torch.profiler import record_function

import fxprof

GOLDEN = pathlib.Path(__file__).parents[1] / "golden"


def test_resnet18_every_node_present_with_every_sample(resnet18, small_image):
    prof = fxprof.profile(resnet18, small_image, warmup=1, iters=4)
    df = prof.df
    assert len(df) == 71
    assert list(df.index) == [n.name for n in fxprof.trace(resnet18).graph.nodes]
    adds = df[df["target"] == "operator.add"]
    assert len(adds) == 8 and (adds["op"] == "call_function").all()
    assert df.loc["flatten", "target"] == "torch.flatten"
    kept = prof.kept_runs()  # a run that lost time to other processes is left out of df (issue 45)
    assert (df["calls"] == (4 if kept is None else len(kept))).all()
    samples = prof.samples
    assert len(samples) == 71 * 4
    assert samples.groupby("node", observed=True).size().eq(4).all()
    assert sorted(samples["run"].unique()) == [0, 1, 2, 3]
    assert len(prof.total_ms) == 4


def test_columns_and_their_meaning(resnet18, small_image):
    prof = fxprof.profile(resnet18, small_image, warmup=1, iters=5)
    prof.keep_outliers = True  # every run, so the statistics can be checked against all samples
    df = prof.df
    for col in ["op", "target", "module_type", "scope", "range", "calls", "mean_ms", "median_ms", "std_ms",
                "min_ms", "max_ms", "total_ms", "host_mean_ms", "pct", "cum_pct"]:
        assert col in df.columns
    assert df.index.name == "node"
    assert df["pct"].sum() == pytest.approx(100.0)
    assert df["cum_pct"].iloc[-1] == pytest.approx(100.0)
    assert (np.diff(df["cum_pct"]) >= -1e-9).all()
    # statistics really come from the samples
    s = prof.samples.groupby("node", observed=True)["time_ms"]
    pd_mean = s.mean().reindex(df.index)
    np.testing.assert_allclose(df["mean_ms"], pd_mean)
    np.testing.assert_allclose(df["total_ms"], s.sum().reindex(df.index))
    assert (df["min_ms"] <= df["median_ms"]).all() and (df["median_ms"] <= df["max_ms"]).all()
    # module facts
    assert df.loc["layer1_0_conv1", "module_type"] == "Conv2d"
    assert df.loc["layer1_0_conv1", "scope"] == "layer1.0.conv1"
    assert df.loc["add", "scope"] == "layer1.0"          # the residual add of the first block
    assert df.loc["add", "module_type"] == ""
    assert df.loc["flatten", "scope"] == ""               # at the root
    # sorted view: cum_pct follows the order, first row is the biggest
    hot = prof.to_dataframe(sort="pct")
    assert hot["pct"].is_monotonic_decreasing and hot["cum_pct"].iloc[-1] == pytest.approx(100.0)
    assert 0.3 < prof.coverage <= 1.05


def test_profiling_leaves_outputs_parameters_and_inputs_untouched(resnet18, small_image):
    model = copy.deepcopy(resnet18).train()  # training mode: batch-norm statistics would move
    before = {k: v.clone() for k, v in model.state_dict().items()}
    x = torch.cat([small_image, small_image.flip(-1)])  # batch 2: batch-norm needs it in training
    original_x = x.clone()
    with torch.no_grad():
        expected = copy.deepcopy(model)(x)
    fxprof.profile(model, x, warmup=2, iters=3)
    after = model.state_dict()
    for key, value in before.items():
        assert torch.equal(after[key], value), key
    assert torch.equal(x, original_x)
    with torch.no_grad():
        torch.testing.assert_close(model(x), expected, rtol=0, atol=0)


def test_graph_module_outputs_equal_eager(resnet18, small_image):
    gm = fxprof.trace(resnet18)
    interp = fxprof.ProfilingInterpreter(gm)
    with torch.no_grad():
        torch.testing.assert_close(interp.run(small_image), resnet18(small_image), rtol=0, atol=0)


def test_in_place_model_does_not_change_the_callers_input():
    class InPlace(nn.Module):
        def forward(self, x):
            x.add_(1)
            return x * 2

    x = torch.zeros(3)
    fxprof.profile(InPlace(), x, warmup=2, iters=3)
    assert torch.equal(x, torch.zeros(3))


@record_function("helper")
def _helper(x):
    return torch.relu(x)


def test_record_function_ranges_reach_the_range_column():
    class Ranged(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(4, 4)

        def forward(self, x):
            with record_function("encode"):
                x = self.fc(x)
                with record_function("squash"):
                    x = torch.tanh(x)
            x = _helper(x)
            return x.sum()

    prof = fxprof.profile(Ranged(), torch.randn(2, 4), warmup=0, iters=2)
    df = prof.df
    assert df.loc["fc", "range"] == "encode"
    assert df.loc["tanh", "range"] == "squash"
    assert df.loc["relu", "range"] == "helper"  # decorator form
    assert df.loc["sum_1", "range"] == ""
    assert "range" in prof.summary()


def test_ranges_closed_out_of_order_are_attributed_by_their_handle():
    class Interleaved(nn.Module):
        def forward(self, x):
            a = record_function("A")
            b = record_function("B")
            a.__enter__()
            x = x + 1
            b.__enter__()
            x = x * 2
            a.__exit__(None, None, None)  # A closes while B is open (not LIFO)
            x = torch.sigmoid(x)
            b.__exit__(None, None, None)
            return torch.relu(x)

    df = fxprof.profile(Interleaved(), torch.ones(2), warmup=0, iters=1).df
    assert df.loc["add", "range"] == "A"
    assert df.loc["mul", "range"] == "B"
    assert df.loc["sigmoid", "range"] == "B"  # still inside B after A closed
    assert df.loc["relu", "range"] == ""


def test_kwargs_defaults_varargs_and_namedtuples_are_bound():
    class Kw(nn.Module):
        def forward(self, x, scale=2.0, bias=None):
            y = x * scale
            return y if bias is None else y + bias

    model = Kw()
    gm = fxprof.trace(model, concrete_args={"bias": None})
    prof = fxprof.profile(gm, torch.ones(2), scale=3.0, bias=None)  # the specialised keyword too
    assert prof.meta["inputs"][1:] == ["3.0", "None"]
    prof = fxprof.profile(model, torch.ones(2), 2.0, torch.ones(2), warmup=0, iters=1)  # all positional
    assert "add" in prof.df.index
    with pytest.raises(ValueError, match="unexpected keyword input\\(s\\) 'nope'; the model's inputs are x, scale, bias_1"):
        fxprof.profile(gm, torch.ones(2), nope=1)
    with pytest.raises(ValueError, match="takes 3 input\\(s\\) \\(x, scale, bias_1\\) but 4 positional"):
        fxprof.profile(gm, torch.ones(2), 1.0, None, 5)

    class VarArgs(nn.Module):
        def forward(self, *xs):
            return xs[0] - xs[1]

    out = fxprof.profile(VarArgs(), torch.ones(2), torch.zeros(2), warmup=0, iters=1)
    assert out.meta["inputs"] == ["Tensor(shape=[2], dtype=float32, device=cpu)"] * 2

    Pair = collections.namedtuple("Pair", "a b")

    class TakesPair(nn.Module):
        def forward(self, p):
            return p.a * p.b

    pair = Pair(torch.ones(2), torch.full((2,), 3.0))
    fxprof.profile(TakesPair(), pair, warmup=1, iters=1)
    assert torch.equal(pair.b, torch.full((2,), 3.0))


def test_a_keyword_that_is_both_option_and_model_input_is_refused():
    class Named(nn.Module):
        def forward(self, x, name: str = "none"):
            return x * 2

    with pytest.raises(TypeError, match="'name' is both an option of fxprof.profile and an input of the model"):
        fxprof.profile(Named(), torch.ones(2), name="mine")
    prof = fxprof.profile(Named(), torch.ones(2), name="mine", model_kwargs={"name": "input"}, warmup=0, iters=1)
    assert prof.meta["model"] == "mine" and prof.meta["inputs"][1] == "'input'"
    with pytest.raises(TypeError, match="unknown option\\(s\\) 'nme'"):
        fxprof.profile(Named(), torch.ones(2), model_kwargs={}, nme="typo")


@pytest.mark.parametrize("kwargs, error", [
    ({"iters": 0}, ValueError),
    ({"warmup": -1}, ValueError),
    ({"iters": 2.5}, TypeError),
    ({"iters": True}, TypeError),
])
def test_iters_and_warmup_are_checked(kwargs, error):
    with pytest.raises(error, match="iters|warmup"):
        fxprof.profile(nn.Linear(2, 2), torch.ones(2), **kwargs)


def test_failure_during_timed_runs_keeps_completed_runs():
    class FailsOnThird(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(2, 2)
            self.count = 0

        def forward(self, x):
            return self.fc(x)

    model = FailsOnThird()
    calls = []

    def hook(module, inputs):
        import inspect

        if not any("measure/capture/" in f.filename.replace("\\", "/") for f in inspect.stack()):
            return  # the model's own forward (fxprof times it beside the profiled runs)
        calls.append(1)
        if len(calls) == 1 + 1 + 3:  # one warm-up, the captured run of the dispatch check, then the third timed run
            raise KeyboardInterrupt

    model.fc.register_forward_pre_hook(hook)
    with pytest.raises(KeyboardInterrupt) as info:
        fxprof.profile(model, torch.ones(2), warmup=1, iters=5)
    partial = info.value.profile
    assert partial.num_runs == 2 and partial.meta["incomplete"] is True
    assert partial.meta["requested_iters"] == 5
    assert (partial.df["calls"] == 2).all()


def _fake_profile(clock, fake_timer) -> fxprof.Profile:
    from conftest import Work

    prof = fxprof.profile(FakeCostModel(clock), torch.ones(2, 3), warmup=0, iters=4, timer=fake_timer,
                          leaf_modules=[Work], name="FakeCostModel", memory=False)  # golden: time only
    # the environment varies between machines; pin it for the golden text
    prof.meta.update(torch="X", threads=1, device="cpu", inputs=["Tensor(shape=[2, 3])"], env={})
    return prof


def test_fake_clock_gives_exact_statistics(clock, fake_timer):
    prof = _fake_profile(clock, fake_timer)
    df = prof.df
    assert df.loc["stem", "median_ms"] == 1.0 and df.loc["stem", "std_ms"] == 0.0
    assert df.loc["head", "mean_ms"] == 3.0 and df.loc["head", "median_ms"] == 3.0
    assert df.loc["head", "min_ms"] == 2.0 and df.loc["head", "max_ms"] == 4.0
    assert df.loc["head", "iqr_ms"] == pytest.approx(0.5)
    assert df.loc["head", "pct"] == pytest.approx(75.0) and df.loc["stem", "pct"] == pytest.approx(25.0)
    assert df.loc["add", "pct"] == 0.0 and df.loc["flatten", "mean_ms"] == 0.0
    assert prof.total_ms == [4.0, 3.0, 5.0, 4.0]
    assert prof.coverage == pytest.approx(1.0)


def test_fake_clock_golden_table(clock, fake_timer):
    text = _fake_profile(clock, fake_timer).summary() + "\n"
    golden = GOLDEN / "fake_summary.txt"
    if os.environ.get("FXPROF_UPDATE_GOLDEN"):
        golden.write_text(text)
    assert text == golden.read_text(), "regenerate on purpose with FXPROF_UPDATE_GOLDEN=1"


def test_top_and_sort_in_summary(clock, fake_timer):
    prof = _fake_profile(clock, fake_timer)
    text = prof.summary(top=2)
    assert "... 6 more nodes (0.0% of node time)" in text
    lines = text.splitlines()
    first_row = lines[lines.index(next(l for l in lines if l.startswith("----"))) + 1]
    assert first_row.startswith("head")
    with pytest.raises(ValueError, match="cannot sort by .nope.; its columns are: node, op"):
        prof.summary(sort="nope")
    assert str(prof) == prof.summary()
    assert "FakeCostModel: 8 nodes x 4 runs" in repr(prof)


def test_a_profile_keeps_what_was_recorded_when_the_recording_goes_on():
    """A profile holds the recording's columns without copying them; a recording only appends,
    so runs recorded after the profile was built change nothing in it."""
    gm = fxprof.trace(nn.Sequential(nn.Linear(4, 4), nn.ReLU()))
    interp = fxprof.ProfilingInterpreter(gm)
    for _ in range(3):
        interp.run(torch.randn(2, 4))
    nodes = [fxprof.NodeInfo(n.name, n.op, str(n.target), "", "", "") for n in gm.graph.nodes]
    prof = fxprof.Profile.from_recording(nodes, interp.recording)
    before = prof.samples.copy()
    for _ in range(50):  # enough to make the recording grow (and move) its buffers
        interp.run(torch.randn(2, 4))
    pd.testing.assert_frame_equal(prof.samples, before)
    assert prof.num_runs == 3 and len(interp.recording) == 53 * len(nodes)
    with pytest.raises(ValueError):  # read-only: nothing outside changes a profile's samples
        prof.columns.time_ms[0] = 1.0


def test_the_timed_runs_reserve_exactly_the_room_they_need(resnet18, small_image):
    """After the first timed run the recording makes room for all of them, so the profile's
    columns (the recording's own) carry no growth room: 40 bytes a sample."""
    prof = fxprof.profile(resnet18, small_image, warmup=0, iters=20, anatomy=False)  # beyond the first 1024
    columns = prof.columns
    for array in (columns.node, columns.run, columns.time_ms, columns.host_ms):
        assert array.base is not None and len(array.base) == len(columns) == 20 * len(prof.nodes)
    assert columns.nbytes == 40 * len(columns)
