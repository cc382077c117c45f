"""Graphs from anywhere: per-run numbers when a node runs several times per model call,
dynamo scopes from the root model, inferred scopes for other tools' GraphModules, nested
torch.compile."""

from __future__ import annotations

import logging
import warnings

import pandas as pd
import pytest
import torch
from conftest import HoldsCompiled
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

import fxprof
from fxprof.core.nodes import NodeInfo
from fxprof.core.profile import Profile
from fxprof.measure.capture.graph import describe_graph

torch._logging.set_logs(dynamo=logging.ERROR)  # graph-break warnings are expected here


# --------------------------------------------------------------- 1. per-run numbers
def test_a_node_called_several_times_per_run_is_stated_per_run():
    nodes = [NodeInfo("x", "placeholder", "x", "", "", "", kind="placeholder"),
             NodeInfo("f", "call_function", "f", "", "blk", "", kind="f")]
    samples = pd.DataFrame({
        "node": ["x", "f", "f", "f", "x", "f", "f", "f"],
        "run": [0, 0, 0, 0, 1, 1, 1, 1],
        "time_ms": [1.0, 2.0, 2.0, 2.0, 1.0, 3.0, 3.0, 3.0],
        "host_ms": [1.0, 2.0, 2.0, 2.0, 1.0, 3.0, 3.0, 3.0],
    })
    runs = pd.DataFrame({"run": [0, 1], "total_ms": [10.0, 14.0]})
    prof = Profile(nodes, samples, runs, {}, {"f": {"flops": 300}, "x": {"flops": 0}})
    assert prof.samples["call"].tolist() == [0, 0, 1, 2, 0, 0, 1, 2]
    df = prof.df
    assert df.loc["f", "calls"] == 6 and df.loc["f", "calls_per_run"] == 3.0
    assert df.loc["x", "calls_per_run"] == 1.0
    assert df.loc["f", "mean_ms"] == 7.5 and df.loc["f", "min_ms"] == 6.0 and df.loc["f", "max_ms"] == 9.0
    assert df.loc["f", "total_ms"] == 15.0
    assert df.loc["f", "pct"] == pytest.approx(7.5 / 8.5 * 100)
    assert prof.coverage == pytest.approx(8.5 / 12.0)
    groups = prof.group_by("scope")
    assert groups.loc["blk", "mean_ms"] == 7.5


class Block(nn.Module):
    """A block with a graph break inside: dynamo compiles its forward as a frame of its own."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(32, 32)

    def forward(self, x):
        y = self.fc(x)
        if y.sum().item() > -1e9:
            y = torch.relu(y)
        return y


class Repeated(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList([Block() for _ in range(2)])
        self.shared = Block()

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        for _ in range(3):  # one module applied three times
            x = self.shared(x)
        return x


@pytest.fixture(scope="module")
def repeated_profile():
    torch.manual_seed(0)
    model = Repeated().eval()
    x = torch.randn(4, 32)
    with FlopCounterMode(display=False) as counter, torch.no_grad():
        model(x)
    prof = fxprof.profile(model, x, warmup=1, iters=3, capture="dynamo")
    return model, prof, counter.get_total_flops()


def test_dynamo_scopes_are_paths_of_the_root_model_and_repeated_blocks_stay_distinct(repeated_profile):
    model, prof, _ = repeated_profile
    df = prof.df
    for scope in set(df["scope"]):
        model.get_submodule(scope)  # raises if it is not a module path of the model
    linear = df[df["kind"] == "linear"]
    assert sorted(linear["scope"]) == ["blocks.0.fc", "blocks.1.fc", "shared.fc"]
    assert linear.index.is_unique and len(set(linear["graph"])) == 1  # one graph, three places
    # the relu runs after the break, in code that has no module stack: the block it ran in
    relu = df[df["kind"] == "relu"]
    assert sorted(relu["scope"]) == ["blocks.0", "blocks.1", "shared"]
    assert set(relu["scope_source"]) == {"frame"}
    assert set(linear["scope_source"]) == {"recorded"}


def test_dynamo_per_run_numbers_count_every_call(repeated_profile):
    _, prof, eager_flops = repeated_profile
    df = prof.df
    per_run = df.set_index("scope")["calls_per_run"]
    linear = df[df["kind"] == "linear"].set_index("scope")
    assert linear.loc["shared.fc", "calls_per_run"] == 3.0
    assert linear.loc["blocks.0.fc", "calls_per_run"] == 1.0
    assert linear.loc["shared.fc", "flops"] == 3 * linear.loc["blocks.0.fc", "flops"]
    assert int(df["flops"].sum()) == eager_flops
    assert (per_run >= 1).all()
    # coverage is the node medians (each a run's calls summed) over the median run, every call included
    samples = prof.samples
    node_ms = samples.groupby(["node", "run"], observed=True)["time_ms"].sum().groupby("node", observed=True).median().sum()
    assert prof.coverage == pytest.approx(node_ms / prof.runs["total_ms"].median())
    blocks = prof.group_by("scope", depth=2)
    assert {"blocks.0", "blocks.1", "shared"} <= set(blocks.index)


# ------------------------------------------------------------- 3. inferred scopes
def _adds(df: pd.DataFrame) -> pd.DataFrame:
    return df[df["kind"].isin(["add", "add_relu"])]


def test_feature_extractor_graph_gets_inferred_scopes(resnet18, small_image):
    from torchvision.models.feature_extraction import create_feature_extractor

    extractor = create_feature_extractor(resnet18, {"layer4": "features", "fc": "logits"})
    prof = fxprof.profile(extractor, small_image, warmup=0, iters=1, anatomy=False)
    adds = _adds(prof.df)
    assert adds["scope"].tolist() == ["layer1.0", "layer1.1", "layer2.0", "layer2.1",
                                      "layer3.0", "layer3.1", "layer4.0", "layer4.1"]
    assert set(adds["scope_source"]) == {"inferred"}
    df = prof.df
    assert set(df.loc[df["op"] == "call_module", "scope_source"]) == {"recorded"}
    assert df.loc["flatten", "scope"] == "" and df.loc["flatten", "scope_source"] == ""
    assert prof.group_by("scope", depth=2).loc["layer2.0", "nodes"] == 9  # 8 module calls (relu twice) and the add


def test_convert_fx_graph_gets_inferred_scopes(resnet18, small_image):
    from torch.ao.quantization import get_default_qconfig_mapping
    from torch.ao.quantization.quantize_fx import convert_fx, prepare_fx

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        prepared = prepare_fx(resnet18, get_default_qconfig_mapping("fbgemm"), (small_image,))
        prepared(small_image)
        quantized = convert_fx(prepared)
    infos = {n.name: n for n in describe_graph(quantized)}
    adds = [n for n in infos.values() if n.kind == "add_relu"]
    assert [n.scope for n in adds] == ["layer1.0", "layer1.1", "layer2.0", "layer2.1",
                                       "layer3.0", "layer3.1", "layer4.0", "layer4.1"]
    assert {n.scope_source for n in adds} == {"inferred"}


def test_own_symbolic_trace_never_infers(resnet18, small_image):
    prof = fxprof.profile(resnet18, small_image, warmup=0, iters=1, anatomy=False)
    adds = _adds(prof.df)
    assert set(adds["scope_source"]) == {"recorded"}
    assert "inferred" not in set(prof.df["scope_source"])


# --------------------------------------------------------------- 5. nested compile
def test_nested_compile_is_noted_with_the_way_to_keep_it_one_node():
    torch.manual_seed(0)
    model = HoldsCompiled().eval()
    x = torch.randn(2, 8)
    prof = fxprof.profile(model, x, warmup=0, iters=1, anatomy=False)  # auto: symbolic fails
    assert prof.meta["capture"] == "dynamo"
    assert "torch.compile'd submodule" in prof.meta["capture_reason"]
    assert prof.meta["nested_compile"] == ["b"]
    assert "leaf_modules=['b']" in prof.meta["nested_compile_note"]
    assert "profiled uncompiled" in prof.summary()
    kept = fxprof.profile(model, x, warmup=0, iters=1, anatomy=False, capture="symbolic", leaf_modules=["b"])
    assert "nested_compile" not in kept.meta
    assert kept.df.loc["b", "op"] == "call_module"
