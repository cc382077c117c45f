"""Compiled mode: a torch.compile'd model's kernels, timed and charged to its FX nodes.

One small model is compiled in the default run (module-scoped: inductor takes 5-40 s here);
resnet18 and a transformer block are ``slow``. The matching of profiler events to kernels is
also tested without compiling, on events recorded from a real run
(tests/golden/compiled_cpu.json, docs/scripts/record_compiled_fixture.py) and, for the GPU
path, on events laid out as CUPTI and Kineto give them.
"""

from __future__ import annotations

import json
import logging
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

import fxprof
from fxprof.core.compiled import (
    Kernel,
    Span,
    charge_spans,
    common_scope,
    extern_op,
    extern_own_nodes,
    kernel_nodes,
    own_run_ms,
    readable_names,
)
from fxprof.core.nodes import NodeInfo
from fxprof.errors import TraceError
from fxprof.measure.device.bridge import Event

GOLDEN = Path(__file__).parents[1] / "golden"


class Block(nn.Module):
    def __init__(self, c: int = 4):
        super().__init__()
        self.conv = nn.Conv2d(c, c, 3, padding=1)
        self.bn = nn.BatchNorm2d(c)
        self.relu = nn.ReLU()

    def forward(self, x):
        return self.relu(self.bn(self.conv(x))) + x


class Small(nn.Module):
    """A stem conv, a residual conv block, a pooled linear layer and an activation."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 4, 3, padding=1)
        self.block = Block(4)
        self.fc = nn.Linear(4, 8)
        self.act = nn.SiLU()

    def forward(self, x):
        y = self.block(self.stem(x)).mean((2, 3))
        return self.act(self.fc(y)) * 2


@pytest.fixture(scope="module")
def small():
    torch.manual_seed(0)
    return Small().eval(), torch.randn(2, 3, 16, 16)


@pytest.fixture(scope="module")
def compiled_run(small, inductor_cache):
    """The small model profiled compiled, with what was true before and after."""
    from torch._inductor import config

    model, x = small
    before = {"state": {k: v.clone() for k, v in model.state_dict().items()}, "out": model(x).detach(),
              "recursion_limit": sys.getrecursionlimit(),
              "kernel_profile": config.cpp.enable_kernel_profile, "fx_graph_cache": config.fx_graph_cache}
    prof = fxprof.profile(torch.compile(model), x, warmup=2, iters=6)
    return prof, before


# ---------------------------------------------------------------- without compiling
def test_common_scope_and_extern_ops():
    assert common_scope(["layer1.0.conv1", "layer1.0.bn1"]) == "layer1.0"
    assert common_scope(["layer1.0.conv1", "layer2.0"]) == ""
    assert common_scope(["fc"]) == "fc"
    assert extern_op("extern_kernels.addmm") == "addmm"
    assert extern_op("torch.ops.mkldnn._convolution_pointwise.default") == "_convolution_pointwise"


def test_an_extern_call_computes_its_own_op_not_the_producers_of_its_input():
    # inductor's provenance of torchvision FPN's layer_blocks.0 conv: the conv, then the interpolate and add
    post = ["convolution_3", "add_4", "_unsafe_index", "unsqueeze", "iota", "mul_1"]
    assert extern_own_nodes("extern_kernels.convolution", post) == ["convolution_3"]
    assert extern_own_nodes("extern_kernels.addmm", ["addmm", "view_2"]) == ["addmm"]
    assert extern_own_nodes("extern_kernels.mm", ["mm_12", "mm_1x", "addmm_1"]) == ["mm_12"]
    assert extern_own_nodes("torch.ops.mkldnn._convolution_pointwise.default",
                            ["_convolution_pointwise_default_1", "relu"]) == ["_convolution_pointwise_default_1"]
    # no node named for the op (a decomposed or renamed one): all of them, as inductor gave them
    assert extern_own_nodes("extern_kernels.bmm", ["view_3", "expand"]) == ["view_3", "expand"]


def _node(name, scope, kind, op="call_function", module_type=""):
    return NodeInfo(name=name, op=op, target=kind, module_type=module_type, scope=scope, range="", kind=kind)


def test_readable_names_come_from_module_path_and_op():
    nodes = [_node("conv2d", "layer1.0.conv1", "conv2d", module_type="Conv2d"), _node("add", "layer1.0", "add"),
             _node("relu", "layer1.0.relu", "relu"), _node("relu_1", "layer1.0.relu", "relu"),
             _node("flatten", "", "flatten"), _node("l_x_", "", "placeholder", op="placeholder")]
    kinds = {"layer1.0.conv1": "conv2d", "layer1.0.relu": "relu"}
    names = readable_names(nodes, kinds)
    assert names == {"conv2d": "layer1_0_conv1", "add": "layer1_0_add", "relu": "layer1_0_relu",
                     "relu_1": "layer1_0_relu_1", "flatten": "flatten", "l_x_": "x"}  # an input: its own name


def test_kernel_rows_charge_fusions_to_the_common_module():
    nodes = {"0/0": {n.name: n for n in [
        _node("conv2d", "block.conv", "conv2d"), _node("batch_norm", "block.bn", "batch_norm"),
        _node("relu", "block.relu", "relu"), _node("add", "block", "add"), _node("linear", "fc", "linear")]}}
    names = {"0/0": {"conv2d": "block_conv", "batch_norm": "block_bn", "relu": "block_relu", "add": "block_add",
                     "linear": "fc"}}
    kernels = [Kernel("0/0", "extern_kernels.convolution:1", False, "", ("conv2d",)),
               Kernel("0/0", "cpp_fused_add_relu_2:2", True, "graph_0_cpp_fused_add_relu_2", ("add", "relu", "batch_norm")),
               Kernel("0/0", "extern_kernels.addmm:3", False, "", ("linear",))]
    rows = kernel_nodes(kernels, nodes, names, {"block": "Block", "block.conv": "Conv2d", "fc": "Linear"}, "Small")
    conv, fused, fc = rows
    assert (conv.name, conv.kind, conv.scope, conv.op, conv.module_type) == ("block_conv", "conv2d", "block.conv", "extern", "Conv2d")
    # origins in graph order, the scope the innermost module holding them all, and it says so
    assert fused.origins == "block_bn,block_relu,block_add"
    assert (fused.kind, fused.scope, fused.scope_source, fused.module_type) == ("fused", "block", "common", "Block")
    assert fused.raw_name == "graph_0_cpp_fused_add_relu_2" and fused.target == "cpp_fused_add_relu_2"
    assert (fc.name, fc.scope, fc.scope_source) == ("fc", "fc", "recorded")


def test_spans_are_charged_by_name_and_by_extern_order():
    kernels = [Kernel("0/0", "extern_kernels.addmm:1", False, "", ("a",)),
               Kernel("0/0", "cpp_fused_relu_0:2", True, "graph_0_cpp_fused_relu_0", ("b",)),
               Kernel("0/0", "extern_kernels.addmm:3", False, "", ("c",))]
    spans = [Span("0/0", run, name, start, 1.0, call) for run in (0, 1) for call in (0, 1) for name, start in
             (("aten::addmm", 10 * call + 0.0), ("graph_0_cpp_fused_relu_0", 10 * call + 1.0),
              ("aten::addmm", 10 * call + 2.0), ("aten::copy_", 10 * call + 3.0))]
    charged, unmatched = charge_spans(kernels, spans)
    keys = [key for key, _ in charged]
    # each call of the graph in each run: the first addmm is the first extern call, the second the second
    assert keys == ["0/0|extern_kernels.addmm:1", "0/0|cpp_fused_relu_0:2", "0/0|extern_kernels.addmm:3"] * 4
    assert [s.name for s in unmatched] == ["aten::copy_"] * 4


def _fixture_events():
    doc = json.loads((GOLDEN / "compiled_cpu.json").read_text())
    events = [Event(**e) for e in doc["events"]]
    kernels = [Kernel(**{**k, "origins": tuple(k["origins"])}) for k in doc["kernels"]]
    return doc, events, kernels


def test_recorded_cpu_events_charge_every_kernel_once_per_run():
    from fxprof.measure.compiled.mode import spans_from_events

    doc, events, kernels = _fixture_events()
    spans, runs = spans_from_events(events)
    assert len(runs) == 3
    charged, unmatched = charge_spans(kernels, spans)
    assert not unmatched, [s.name for s in unmatched]
    for run in range(3):
        in_run = sorted(key for key, s in charged if s.run == run)
        assert in_run == sorted(k.graph + "|" + k.key for k in kernels)
    for _, span in charged:  # each inside its run
        start, end = runs[span.run]
        assert 0 <= span.start_ms and span.start_ms + span.duration_ms <= (end - start) / 1e6 + 1e-9


def test_gpu_events_charge_device_time_by_correlation():
    """Kineto's shape of a compiled graph's call on a GPU: a Triton kernel launched straight
    from the call (its device kernel carries its name), an extern ``aten::mm`` launching two
    kernels (summed into one span), all on the device's clock."""
    from fxprof.measure.compiled.mode import RUN_RANGE, spans_from_events

    ms = 1_000_000
    host = dict(device_type="CPU", thread=7)
    gpu = dict(device_type="CUDA", thread=0, device=0, kind="device")
    events = [
        Event(RUN_RANGE, "range", 0, 100 * ms, **host),
        Event("Torch-Compiled Region: 0/0", "other", 1 * ms, 90 * ms, **host),
        Event("## Call CompiledFxGraph fabc ##", "other", 2 * ms, 80 * ms, **host),
        Event("cuLaunchKernel", "runtime", 3 * ms, 4 * ms, correlation=11, **host),
        Event("aten::mm", "other", 5 * ms, 20 * ms, **host),
        Event("cudaLaunchKernel", "runtime", 6 * ms, 7 * ms, correlation=12, **host),
        Event("cudaLaunchKernel", "runtime", 8 * ms, 9 * ms, correlation=13, **host),
        Event("triton_poi_fused_add_relu_0", start_ns=30 * ms, end_ns=32 * ms, correlation=11, **gpu),
        Event("sm90_gemm_a", start_ns=33 * ms, end_ns=36 * ms, correlation=12, **gpu),
        Event("splitk_reduce", start_ns=36 * ms, end_ns=37 * ms, correlation=13, **gpu),
    ]
    spans, runs = spans_from_events(events, device=True)
    spans = [s for s in spans if not s.name.startswith("fxprof::")]  # graph breaks and overhead: tests/measure/test_compiled_breaks.py
    assert [(s.name, s.duration_ms) for s in spans] == [("triton_poi_fused_add_relu_0", 2.0), ("aten::mm", 4.0)]
    kernels = [Kernel("0/0", "triton_poi_fused_add_relu_0:1", True, "triton_poi_fused_add_relu_0", ("add", "relu")),
               Kernel("0/0", "extern_kernels.mm:2", False, "", ("linear",))]
    charged, unmatched = charge_spans(kernels, spans)
    assert [k for k, _ in charged] == ["0/0|triton_poi_fused_add_relu_0:1", "0/0|extern_kernels.mm:2"] and not unmatched


def test_bad_compile_options_are_refused_before_anything_runs(small):
    model, x = small
    with pytest.raises(ValueError, match="unknown compile mode 'fast'.*max-autotune"):
        fxprof.profile(model, x, compile={"mode": "fast"})
    with pytest.raises(ValueError, match="unknown compile option.*'modee'"):
        fxprof.profile(model, x, compile={"modee": "default"})
    with pytest.raises(TypeError, match="compile must be True or a dict"):
        fxprof.profile(model, x, compile="yes")
    with pytest.raises(ValueError, match="'timer'.*compiled model"):
        fxprof.profile(model, x, compile=True, timer="cpu")
    with pytest.raises(TraceError, match="backend 'eager'.*capture='dynamo'"):
        fxprof.profile(torch.compile(model, backend="eager"), x)


# ---------------------------------------------------------------- a real compiled model
def test_rows_are_the_compiled_kernels_charged_to_modules(compiled_run, small):
    prof, _ = compiled_run
    model, _ = small
    df = prof.df
    # beside the kernels: each graph's own Python (compiled_overhead) and the wrapper's call; no break here
    assert set(df["op"]) == {"kernel", "extern", "compiled_overhead"} and not prof.meta["compiled"]["breaks"]
    graphs = set(df.loc[df["op"] == "compiled_overhead", "graph"])  # one graph ("N/0") and the wrapper ("")
    assert "" in graphs and len(graphs) == 2 and all(re.fullmatch(r"\d+/0", g) for g in graphs - {""})
    df = df[df["op"].isin(("kernel", "extern"))]
    assert (df["kind"] == "fused").any()
    assert (df["raw_name"].str.startswith("graph_") | (df["op"] == "extern")).all()
    for scope in df["scope"]:  # paths of the model itself, not of the compiled wrapper
        assert not scope.startswith("_orig_mod")
        model.get_submodule(scope)
    conv = df[df["kind"] == "conv2d"]
    assert set(conv["scope"]) >= {"stem", "block.conv"}
    # a kernel computing ops of several modules is charged to their common module, and says so
    common = df[df["scope_source"] == "common"]
    assert len(common) and all(len(o.split(",")) > 1 for o in common["origins"])
    assert prof.num_runs == 6 and (df["calls_per_run"] == 1.0).all()


def test_kernel_flops_add_up_to_the_models(compiled_run, small):
    from torch.utils.flop_counter import FlopCounterMode

    prof, _ = compiled_run
    model, x = small
    with FlopCounterMode(display=False) as counter, torch.no_grad():
        model(x)
    assert int(prof.df["flops"].fillna(0).sum()) == counter.get_total_flops() > 0


def test_header_and_meta_describe_the_compiled_program(compiled_run):
    prof, _ = compiled_run
    compiled = prof.meta["compiled"]
    assert compiled["backend"] == "inductor" and compiled["mode"] == "default"
    assert compiled["graphs"] == 1 and compiled["graph_breaks"] == 0 and compiled["recompiles"] == 0
    assert compiled["compile_s"] > 0 and own_run_ms(prof.meta)[0] > 0 and own_run_ms(prof.meta)[1] == len(compiled["unprofiled_ms"])
    assert compiled["kernels"] == len([n for n in prof.nodes if n.op in ("kernel", "extern")])
    assert prof.meta["capture"] == "compiled" and prof.meta["torch"] == torch.__version__
    text = prof.summary()
    assert "compiled program: torch.compile backend inductor, mode default" in text
    assert "of the compiled model's own median run time" in text
    assert "origins" in text.splitlines()[text.splitlines().index("") + 1]
    assert 0.5 < prof.coverage <= 1.05  # kernel, overhead and entry rows add up to the run (issue 33)


def test_profiling_leaves_model_config_and_loggers_as_they_were(compiled_run, small):
    from torch._inductor import config

    prof, before = compiled_run
    model, x = small
    assert config.cpp.enable_kernel_profile == before["kernel_profile"]
    assert config.fx_graph_cache == before["fx_graph_cache"]
    assert sys.getrecursionlimit() == before["recursion_limit"]  # inductor raises it when it compiles
    from fxprof.measure.compiled.mode import TraceCatcher

    assert not [h for h in logging.getLogger("torch.__trace").handlers if isinstance(h, TraceCatcher)]
    for key, value in model.state_dict().items():
        assert torch.equal(value, before["state"][key]), key
    assert torch.equal(model(x), before["out"])


def test_compiled_profiles_save_load_and_render_like_eager_ones(compiled_run, tmp_path):
    prof, _ = compiled_run
    for ext in ("json", "npz"):
        prof.save(tmp_path / f"p.{ext}")
        back = fxprof.load(tmp_path / f"p.{ext}")
        assert back.df[["origins", "raw_name", "scope", "kind"]].equals(prof.df[["origins", "raw_name", "scope", "kind"]])
        assert back.meta["compiled"] == prof.meta["compiled"]
    prof.to_csv(tmp_path / "p.csv")
    table = fxprof.read_csv(tmp_path / "p.csv")
    assert list(table["origins"]) == list(prof.df["origins"])
    groups = prof.group_by("scope")
    assert abs(groups["pct"].sum() - 100) < 1e-6 and "block" in groups.index
    assert "Conv2d" in prof.group_by("module_type").index
    prof.to_chrome_trace(tmp_path / "t.json")
    names = {e.get("name") for e in json.loads((tmp_path / "t.json").read_text())["traceEvents"]}
    assert set(prof.df.index) <= names
    assert "origins" in prof._repr_html_()
    try:
        import plotly  # noqa: F401  (the interactive report needs it)
    except ImportError:
        return
    prof.to_html(tmp_path / "r.html")
    page = (tmp_path / "r.html").read_text()
    assert all(name in page for name in prof.df.index)


def test_a_graph_break_inside_a_block_gives_graphs_charged_to_the_right_modules(inductor_cache):
    """A break inside a child's forward splits the caller and the child: four graphs here, the
    child's two compiled as frames of its own (paths relative to it, its functions without a
    module stack), each run inside the caller's compiled region."""

    class Inner(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1, self.fc2 = nn.Linear(8, 8), nn.Linear(8, 8)

        def forward(self, x):
            x = self.fc1(x).relu()
            torch._dynamo.graph_break()
            return self.fc2(x).sigmoid()

    class Outer(nn.Module):
        def __init__(self):
            super().__init__()
            self.pre, self.inner, self.post = nn.Linear(8, 8), Inner(), nn.Linear(8, 4)

        def forward(self, x):
            return self.post(self.inner(self.pre(x)))

    prof = fxprof.profile(Outer().eval(), torch.randn(4, 8), compile=True, warmup=1, iters=3)
    compiled = prof.meta["compiled"]
    assert compiled["graphs"] == 4 and compiled["graph_breaks"] >= 1 and compiled["recompiles"] == 0
    df = prof.df
    assert not (df["op"] == "unmatched").any(), df[df["op"] == "unmatched"].index.tolist()
    assert set(df.loc[df["op"].isin(("kernel", "extern")), "scope"]) == {"pre", "inner.fc1", "inner", "inner.fc2", "post"}
    assert set(df.loc[df["op"] == "graph_break", "scope"]) == {"inner"}
    kernels = df[df["op"].isin(("kernel", "extern"))]
    assert df.loc["inner_relu", "scope_source"] == "frame" and kernels["graph"].nunique() == 4
    assert (kernels["calls_per_run"] == 1.0).all()


# ---------------------------------------------------------------- real models, slow
@pytest.mark.slow
def test_cli_compile_resnet18_charges_kernels_to_its_layers(tmp_path, inductor_cache):
    out = tmp_path / "r.json"
    run = subprocess.run([sys.executable, "-m", "fxprof", "profile", "resnet18", "--compile", "--input", "1x3x64x64",
                          "--iters", "5", "--warmup", "2", "--json", str(out)],
                         capture_output=True, text=True, env={**os.environ, "PYTHONPATH": os.getcwd()}, timeout=900)
    assert run.returncode == 0, run.stderr[-3000:]
    assert "compiled program: torch.compile backend inductor" in run.stdout
    prof = fxprof.load(out)
    layers = {s.split(".")[0] for s in prof.df["scope"] if s}
    assert layers >= {"conv1", "layer1", "layer2", "layer3", "layer4", "fc"}
    assert prof.meta["compiled"]["graph_breaks"] == 0


class Attention(nn.Module):
    def __init__(self, dim: int = 64, heads: int = 4):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(x).reshape(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        y = torch.nn.functional.scaled_dot_product_attention(q, k, v)
        return self.proj(y.transpose(1, 2).reshape(b, t, d))


class TransformerBlock(nn.Module):
    """A pre-norm transformer block (attention, then an MLP), as in GPT-2 or ViT. (torch's own
    ``TransformerEncoderLayer`` runs as one fused op in eval mode: nothing to charge to layers.)"""

    def __init__(self, dim: int = 64):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.attn = Attention(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


@pytest.mark.slow
def test_transformer_block_compiled(inductor_cache):
    torch.manual_seed(0)
    block = TransformerBlock().eval()
    prof = fxprof.profile(torch.compile(block), torch.randn(2, 16, 64), warmup=1, iters=3)
    df = prof.df
    assert {"attn.qkv", "attn.proj", "mlp.0", "mlp.2"} <= set(df["scope"])
    fused = df[df["kind"] == "fused"]
    assert len(fused) and any("ln2" in o for o in fused["origins"])  # the layer norm fused with its neighbours
    blocks = fxprof.compare(fxprof.profile(block, torch.randn(2, 16, 64), warmup=1, iters=3), prof, by="scope")
    # a block is its own row, or folded (and said so) into the row whose kernel computes its work
    # with a neighbour's (inductor fuses the residual add and the next layer norm across blocks)
    folded = {child for children in blocks.attrs["folded"].values() for child in children}
    assert {"attn", "mlp"} <= set(blocks.index) | folded
    assert all(parent in blocks.index for parent in blocks.attrs["folded"])
    assert blocks["b_ms"].sum() == pytest.approx(blocks.attrs["b_total_ms"])



def test_eager_and_compiled_compared_per_block(compiled_run, small, tmp_path):
    prof, _ = compiled_run
    model, x = small
    eager = fxprof.profile(model, x, warmup=1, iters=6)
    blocks = fxprof.compare(eager, prof, by="scope")
    assert list(blocks.columns) == ["a_ms", "b_ms", "delta_ms", "speedup", "a_nodes", "b_nodes", "folded", "fused", "a_pct",
                                    "b_pct", "a_mem_peak_bytes", "b_mem_peak_bytes", "delta_mem_peak_bytes"]  # peaks: issue 34
    assert {"stem", "fc"} <= set(blocks.index)
    # the block fused with the root's mean into one kernel charged to the root: compared there
    at = "block" if "block" in blocks.index else "(root)"
    row = blocks.loc[at]
    assert row["a_nodes"] >= 4 and row["b_nodes"] >= 1 and row["speedup"] == pytest.approx(row["a_ms"] / row["b_ms"])
    assert abs(blocks["a_ms"].sum() - eager.df["median_ms"].sum()) < 1e-9
    assert abs(blocks["b_ms"].sum() - prof.df["median_ms"].sum()) < 1e-9
    deeper = fxprof.compare(eager, prof, by="scope", depth=2)
    assert "block.conv" in deeper.index
    # issue 31 (f): one kernel fuses the block's bn, relu and residual add with the root's mean
    # (charged to the root); the eager time of block.bn, block.relu and block's own add is
    # folded in with it, never left in rows whose compiled time sits elsewhere; conv, a kernel
    # of its own, keeps its row
    fused = prof.df.loc[prof.df["origins"].str.contains("block_bn")]
    if set(fused["scope"]) == {""}:  # as inductor fuses it today
        assert not {"block.bn", "block.relu", "block"} & set(deeper.index)
        assert {"block", "block.bn", "block.relu"} <= set(deeper.attrs["folded"]["(root)"])
        assert "block.conv" not in deeper.attrs["folded"]["(root)"]
        assert deeper.loc["(root)", "folded"] == len(deeper.attrs["folded"]["(root)"])
        assert any("(root) (" in note for note in deeper.attrs["notes"])
    else:
        assert not {"block.bn", "block.relu"} & set(deeper.index)
    for depth in (1, 2, 3):
        at = fxprof.compare(eager, prof, by="scope", depth=depth)
        assert abs(at["a_ms"].sum() - eager.df["median_ms"].sum()) < 1e-9
        assert abs(at["b_ms"].sum() - prof.df["median_ms"].sum()) < 1e-9
        for parent in at.index[at["folded"] > 0]:  # no child of a folded block has a row
            assert not [s for s in at.index if s.startswith(parent + ".")]
    # issue 31 (h): node by node, eager against compiled gives one line pointing to by="scope"
    with pytest.warns(fxprof.ComparabilityWarning) as caught:
        by_node = fxprof.compare(eager, prof)
    assert len(caught) == 1 and 'by="scope"' in str(caught[0].message) and "--by scope" in str(caught[0].message)
    assert len(by_node.attrs["warnings"]) == 1
    fused = " ".join(blocks["fused"])
    assert "+" in fused  # what fused together, origins joined
    with pytest.raises(ValueError, match="'node' .* or 'scope'"):
        fxprof.compare(eager, prof, by="layer")
    # the command line, from saved profiles
    eager.save(tmp_path / "eager.json")
    prof.save(tmp_path / "compiled.json")
    run = subprocess.run([sys.executable, "-m", "fxprof", "compare", str(tmp_path / "eager.json"),
                          str(tmp_path / "compiled.json"), "--by", "scope", "--depth", "2"],
                         capture_output=True, text=True, env={**os.environ, "PYTHONPATH": os.getcwd()}, timeout=300)
    assert run.returncode == 0, run.stderr
    assert "fxprof compare by scope (depth 2)" in run.stdout and "block.conv" in run.stdout and "speedup" in run.stdout
    assert "folded: 1 block(s) hold" in run.stdout
    run = subprocess.run([sys.executable, "-m", "fxprof", "compare", str(tmp_path / "eager.json"),
                          str(tmp_path / "compiled.json")],
                         capture_output=True, text=True, env={**os.environ, "PYTHONPATH": os.getcwd()}, timeout=300)
    assert run.returncode == 0, run.stderr
    warned = [line for line in run.stdout.splitlines() if line.startswith("warning")]
    assert len(warned) == 1 and "--by scope" in warned[0], run.stdout


def test_origins_are_named_as_in_the_eager_dynamo_profile(compiled_run, small):
    """Item 5: dynamo's value names (``g0:out_3``) become module path and op, the same in
    ``capture="dynamo"`` and in compiled mode, so a kernel's origins are rows of the eager profile."""
    prof, _ = compiled_run
    model, x = small
    eager = fxprof.profile(model, x, capture="dynamo", warmup=1, iters=2)
    assert {"stem", "block_conv", "block_bn", "block_relu", "block_add", "fc", "act", "mul"} <= set(eager.df.index)
    assert eager.df.loc["block_conv", "raw_name"].startswith("g0:")
    origins = {o for text in prof.df["origins"] for o in text.split(",") if o}
    assert origins and origins <= set(eager.df.index)


@pytest.mark.parametrize("argv, message", [
    (["--compile", "--timer", "cpu"], "--timer cannot be used with --compile"),
    (["--compile-mode", "max-autotune"], "--compile-mode chooses how --compile compiles: add --compile"),
    (["--compile", "--compile-mode", "fast"], "invalid choice: 'fast'"),
])
def test_cli_refuses_compile_options_that_do_not_fit(argv, message):
    run = subprocess.run([sys.executable, "-m", "fxprof", "profile", "resnet18", *argv], capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": os.getcwd()}, timeout=300)
    assert run.returncode != 0 and message in run.stderr, run.stderr


def test_library_kernels_of_a_cuda_graph_replay_are_charged_to_their_extern_calls():
    """issue 40 item 4: under CUDA graphs (mode reduce-overhead) cuDNN and cuBLAS kernels run with
    no aten op around them; they go to the extern calls between the Triton kernels around them."""
    from fxprof.core.compiled import unmatched_nodes

    conv = "sm90_xmma_fprop_implicit_gemm_f16f16_f16f32_f32_nhwckrsc_nhwc_tilesize128x128x64_warpgroupsize1x1x1_execute_cudnn"
    kernels = [Kernel("0/0", "extern_kernels.convolution:1", False, "", ("conv1",)),
               Kernel("0/0", "triton_poi_fused_relu_0:2", True, "triton_poi_fused_relu_0", ("bn1", "relu")),
               Kernel("0/0", "extern_kernels.convolution:3", False, "", ("conv2",)),
               Kernel("0/0", "extern_kernels.mm:4", False, "", ("fc",)),
               Kernel("0/0", "triton_poi_fused_add_1:5", True, "triton_poi_fused_add_1", ("add",))]
    spans = [Span("0/0", 0, name, start, 1.0) for name, start in (
        ("cudnn::nchwToNhwcKernel", 0.0), (conv, 1.0),  # conv1: two kernels in its gap
        ("triton_poi_fused_relu_0", 2.0),
        (conv, 3.0), ("void cutlass::Kernel2<cutlass_80_wmma_tensorop_f16_s161616gemm_f16_32x32_128x2_nn_align8>(Params)", 4.0),
        ("triton_poi_fused_add_1", 5.0), ("aten::copy_", 6.0))]
    charged, unmatched = charge_spans(kernels, spans)
    by_key = {}
    for key, span in charged:
        by_key.setdefault(key, []).append(span.start_ms)
    assert by_key["0/0|extern_kernels.convolution:1"] == [0.0, 1.0]
    assert by_key["0/0|extern_kernels.convolution:3"] == [3.0] and by_key["0/0|extern_kernels.mm:4"] == [4.0]
    assert [s.name for s in unmatched] == ["aten::copy_"]  # an op's own event is no library kernel
    # what stays unmatched gets a short readable row name
    rows, names = unmatched_nodes([Span("0/0", 0, conv, 0.0, 1.0), Span("0/0", 0, spans[4].name, 0.0, 1.0)], set())
    assert [r.name for r in rows] == ["unmatched_" + conv[:48].rstrip("_"), "unmatched_Kernel2"]
    assert all(len(r.name) <= 60 for r in rows) and rows[0].raw_name == conv


class _Late(nn.Module):
    """A class of its own: its forward's dynamo cache holds only what the test below puts there."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 8)

    def forward(self, x):
        return self.lin(x).relu()


def test_a_model_compiled_many_times_before_still_profiles_compiled(inductor_cache):
    """Issue 31 (g): late in a long process, a model's forward already holds dynamo's limit of
    compiled versions (the user's compiles, other profiles, eager dynamo captures: every backend
    counts). fxprof's compile was then refused (dynamo ran the model as plain Python: "compiled
    no graph"), in fxprof.profile and in a session alike; now it compiles, and the limit is
    back as it was after."""
    import torch._dynamo
    from torch._dynamo.eval_frame import _debug_get_cache_entry_list

    torch.manual_seed(0)
    model, x = _Late().eval(), torch.randn(2, 8)
    limit = torch._dynamo.config.recompile_limit
    for _ in range(limit):  # earlier compiles of this class in the process, each with a backend of its own
        torch.compile(model, backend=lambda gm, inputs: gm.forward)(x)
    assert len(_debug_get_cache_entry_list(_Late.forward.__code__)) >= limit
    with torch.no_grad():
        prof = fxprof.profile(torch.compile(model), x, warmup=1, iters=2)
        assert prof.meta["capture"] == "compiled" and (prof.df["op"] == "extern").any()
        compiled = torch.compile(model)
        with fxprof.session(compiled, schedule=fxprof.schedule(warmup=1, active=2)) as s:
            for _ in range(3):
                out = compiled(x)
                s.step()
    assert s.profiles and (s.profiles[-1].df["op"] == "extern").any()
    assert torch.allclose(out, model(x))
    assert torch._dynamo.config.recompile_limit == limit


def test_no_graph_says_why_when_the_recompile_limit_is_reached():
    import torch._dynamo

    from fxprof.measure.compiled.mode import no_graph_message

    model = _Late()
    message = no_graph_message(model, "profile it eagerly instead")
    assert "compiled no graph" in message and message.endswith("profile it eagerly instead")
    with torch._dynamo.config.patch(recompile_limit=1):
        torch.compile(model, backend=lambda gm, inputs: gm.forward)(torch.randn(1, 8))
        message = no_graph_message(model, "profile it eagerly instead")
    assert "_Late.forward" in message and "recompile limit is 1" in message and "torch._dynamo.reset()" in message


def test_no_graph_says_why_when_the_recompile_limit_was_exceeded_before():
    """A code object that once exceeded dynamo's recompile limit is never compiled again in the
    process, even under the limit fxprof raises (room_to_compile): fxprof.generate's tests met it
    (the user's own compile exceeded the limit; fxprof's compile then found no graph) and the
    message asked whether the forward was disabled for dynamo."""
    import torch._dynamo

    from fxprof.measure.compiled.compiling import room_to_compile
    from fxprof.measure.compiled.mode import no_graph_message

    class Exceeded(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(4, 4)

        def forward(self, x):
            return self.lin(x).relu()

    torch._dynamo.reset()
    model, x = Exceeded(), torch.randn(2, 4)
    compiled = []
    with torch._dynamo.config.patch(recompile_limit=2):
        for i in range(3):  # the third exceeds the limit: dynamo gives the code up
            torch.compile(model, backend=lambda gm, inputs, i=i: compiled.append(i) or gm.forward)(x)
        with room_to_compile(model):  # the limit raised by the 2 versions held: still nothing compiles
            torch.compile(model, backend=lambda gm, inputs: compiled.append("raised") or gm.forward)(x)
            message = no_graph_message(model, "profile it eagerly instead")
    assert compiled == [0, 1]
    assert "exceeded earlier in this process" in message and "never compiled again" in message
    assert "torch._dynamo.reset()" in message and "disabled for dynamo" not in message
    torch._dynamo.reset()


def test_a_forward_compiled_in_place_profiles_its_compiled_kernels(small, inductor_cache):
    """``model.forward = torch.compile(model.forward)`` (Hugging Face's recipe): fxprof.profile failed
    ("captured no graph": dynamo cannot capture eager graphs through a compiled forward) and a
    session timed an eager graph of its own. Both now time the compiled program's kernels, with
    the forward's own options, charged to the model's modules; the user's forward stays in place."""
    x = small[1]
    model = Small().eval()
    model.load_state_dict(small[0].state_dict())
    model.forward = torch.compile(model.forward, dynamic=False)
    users = model.forward
    with torch.no_grad():
        prof = fxprof.profile(model, x, warmup=1, iters=2)
        assert prof.meta["capture"] == "compiled" and prof.meta["compiled"]["compiled_forward"] is True
        assert prof.meta["compiled"]["dynamic"] is False  # the forward's own options
        kernels = prof.df[prof.df["op"].isin(("kernel", "extern"))]
        assert set(kernels.loc[kernels["kind"] == "conv2d", "scope"]) >= {"stem", "block.conv"}
        with fxprof.session(model, schedule=fxprof.schedule(warmup=1, active=2)) as s:
            for _ in range(3):
                out = model(x)
                s.step()
    assert model.forward is users
    p = s.profiles[-1]
    assert p.meta["capture"] == "compiled" and len(p.runs) == 2 and (p.df["op"] == "extern").any()
    assert torch.allclose(out, small[0](x), atol=1e-5)


def test_a_session_holds_compiled_kernels_to_its_eager_steps_and_keeps_fxprofs_settings_out_of_its_runs(
        small, inductor_cache, monkeypatch):
    """A session of a compiled model entered fxprof's settings for its compiled program (inductor's
    config patch, about 40 us each way) inside every timed run: a 0.05 ms model's profiled run read
    141 us. And it held the kernels to nothing, though the schedule's wait steps time the user's
    own compiled forward. Here the settings are made to cost 20 ms each way: no run may hold them;
    and the wait steps' runs are the yardstick of the kernels line and of the profiler's cost."""
    import time

    from fxprof.measure.compiled import in_session

    class Slow(in_session.CallSettings):
        def __enter__(self):
            time.sleep(0.02)
            return super().__enter__()

        def __exit__(self, *exc):
            super().__exit__(*exc)
            time.sleep(0.02)

    monkeypatch.setattr(in_session, "CallSettings", Slow)
    x = small[1]
    model = Small().eval()
    model.load_state_dict(small[0].state_dict())
    compiled = torch.compile(model)
    with torch.no_grad(), fxprof.session(compiled, schedule=fxprof.schedule(wait=5, warmup=1, active=3)) as s:
        for _ in range(9):
            compiled(x)
            s.step()
    p = s.profiles[0]
    assert p.meta["capture"] == "compiled" and len(p.runs) == 3
    # the settings' 40 ms a call are outside every run (less what a crowded machine took from it, measured)
    assert (p.runs["total_ms"] - p.runs["lost_ms"].fillna(0)).max() < 20, p.runs
    own = p.meta["own_runs_ms"]
    assert len(own) == 4  # the five wait steps, the first (cold) not kept
    assert p.meta["compiled"]["unprofiled_ms"] == pytest.approx(own, abs=1e-6)
    assert p.meta["timer"] == "marks" and "profiler_cost" not in p.meta["compiled"]  # the marks: no profiler
    assert any("the 4 unprofiled runs it holds them against are the model's own compiled forward" in n
               for n in p.meta["notes"])
    assert re.search(r"kernels: .* of the compiled model's own median run time \(.*, 4 unprofiled runs", p.summary())


def test_a_sessions_call_settings_are_the_compiles_settings_made_once_and_restored_exactly():
    """A session enters fxprof's settings around every call of its compiled program (any call may
    compile). ``CallSettings`` applies, per call, patches made once (torch's closure patchers),
    where the context managers built them afresh (80-160 us a call between the user's steps): the
    same values inside as ``inductor_settings`` and ``room_to_compile`` give, and after, the user's
    own values (an override the user set, a default left alone), Python's recursion limit as it was
    (inductor raises it when it compiles), also when the body raised."""
    import sys

    import torch._dynamo
    from torch._inductor import config as inductor_config

    from fxprof.measure.compiled.compiling import CallSettings, inductor_settings, room_to_compile

    torch._dynamo.reset()
    model, x = Small().eval(), torch.randn(1, 3, 8, 8)
    torch.compile(model, backend="eager")(x)  # one version held: room_to_compile raises the limit by it
    trace = inductor_config.trace
    keys = ["cpp.enable_kernel_profile", "fx_graph_cache",
            "trace.provenance_tracking_level" if hasattr(trace, "provenance_tracking_level") else "trace.provenance_tracking"]
    dynamo = torch._dynamo.config

    def read() -> dict:
        return {**{k: getattr(inductor_config, k) for k in keys}, "recompile_limit": dynamo.recompile_limit}

    with room_to_compile(model), inductor_settings():
        wanted = read()
    settings = CallSettings(model)
    limit, default = sys.getrecursionlimit(), read()
    with inductor_config.patch({"fx_graph_cache": True}):  # the user's own override
        before = read()
        assert before["fx_graph_cache"] is True and wanted["fx_graph_cache"] is False
        assert wanted["recompile_limit"] == before["recompile_limit"] + 1
        for _ in range(2):
            with settings:
                assert read() == wanted
                sys.setrecursionlimit(limit + 1000)
            assert read() == before and sys.getrecursionlimit() == limit
        with pytest.raises(RuntimeError, match="the body"):
            with settings:
                raise RuntimeError("the body")
        assert read() == before
    assert read() == default  # the user's override gone with the user's patch: nothing of fxprof's left
    # the versions held are read again after dynamo converted a frame (a new one, compiled between
    # two calls, raises the limit by one more), and not between calls where it converted none
    from fxprof.measure.compiled import compiling

    reads = []
    real = compiling._held_entries
    compiling._held_entries = lambda root: reads.append(1) or real(root)
    try:
        for _ in range(3):
            with settings:
                assert dynamo.recompile_limit == default["recompile_limit"] + 1
        assert reads == []
        torch.compile(model, backend=lambda gm, inputs: gm.forward)(x)  # a second version
        with settings:
            assert dynamo.recompile_limit == default["recompile_limit"] + 2
        assert reads == [1]
    finally:
        compiling._held_entries = real
    torch._dynamo.reset()
