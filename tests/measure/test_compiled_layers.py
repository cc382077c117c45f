"""Compiled transformers right per layer (issue 46): a kernel inductor generates once and calls
from every identical layer is charged to each call site (its node and module), in timed runs,
sessions and the memory run; compiled FLOPs equal FlopCounterMode on the eager model, each on
the row of the kernel that does it, and where they cannot be counted the header says so.

One tiny attention stack is compiled in the default run (module-scoped); a tiny HF BART is
``slow``. The matching itself is also tested without compiling, on spans as the CPU and CUDA
paths give them.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import fx, nn

import fxprof
from fxprof.core.compiled import Kernel, Span, charge_spans
from fxprof.core.nodes import NodeInfo
from fxprof.measure.device.bridge import Event


# ---------------------------------------------------------------- without compiling
def _shared_kernels() -> list[Kernel]:
    """Three identical layers: each an addmm and one generated kernel shared by all three."""
    out = []
    for layer in range(3):
        out.append(Kernel("0/0", f"extern_kernels.addmm:{2 * layer + 1}", False, "", (f"linear_{layer}",)))
        out.append(Kernel("0/0", f"cpp_fused_add_native_layer_norm_0:{2 * layer + 2}", True,
                          "graph_0_cpp_fused_add_native_layer_norm_0", (f"layer_norm_{layer}", f"add_{layer}")))
    return out


def test_each_call_of_a_shared_kernel_is_charged_to_its_own_call_site():
    kernels = _shared_kernels()
    spans = [Span("0/0", run, name, 10.0 * call + 3 * layer + offset, 1.0, call)
             for run in (0, 1) for call in (0, 1) for layer in range(3)
             for name, offset in (("aten::addmm", 0.0), ("graph_0_cpp_fused_add_native_layer_norm_0", 1.0))]
    charged, unmatched = charge_spans(kernels, spans)
    assert not unmatched
    keys = [key for key, _ in charged]
    # every call site once in each call of the graph in each run, in call order: none left out
    assert sorted(keys) == sorted([k.graph + "|" + k.key for k in kernels] * 4)
    per_site = {k.key: [s.start_ms for key, s in charged if key == "0/0|" + k.key and s.run == 0 and s.call == 0]
                for k in kernels if k.generated}
    assert per_site == {"cpp_fused_add_native_layer_norm_0:2": [1.0], "cpp_fused_add_native_layer_norm_0:4": [4.0],
                        "cpp_fused_add_native_layer_norm_0:6": [7.0]}


def test_gpu_calls_of_a_shared_triton_kernel_are_charged_to_their_call_sites():
    """CUPTI's shape: the same Triton kernel launched from two layers in one call of the graph."""
    from fxprof.measure.compiled.spans import RUN_RANGE, spans_from_events

    ms = 1_000_000
    host = dict(device_type="CPU", thread=7)
    gpu = dict(device_type="CUDA", thread=0, device=0, kind="device")
    events = [
        Event(RUN_RANGE, "range", 0, 100 * ms, **host),
        Event("Torch-Compiled Region: 0/0", "other", 1 * ms, 90 * ms, **host),
        Event("## Call CompiledFxGraph fabc ##", "other", 2 * ms, 80 * ms, **host),
        Event("cuLaunchKernel", "runtime", 3 * ms, 4 * ms, correlation=11, **host),
        Event("cuLaunchKernel", "runtime", 5 * ms, 6 * ms, correlation=12, **host),
        Event("triton_per_fused_add_native_layer_norm_0", start_ns=30 * ms, end_ns=32 * ms, correlation=11, **gpu),
        Event("triton_per_fused_add_native_layer_norm_0", start_ns=33 * ms, end_ns=36 * ms, correlation=12, **gpu),
    ]
    spans, _ = spans_from_events(events, device=True)
    spans = [s for s in spans if not s.name.startswith("fxprof::")]
    kernels = [Kernel("0/0", f"triton_per_fused_add_native_layer_norm_0:{i}", True,
                      "triton_per_fused_add_native_layer_norm_0", (f"layer_norm_{i}",)) for i in (1, 2)]
    charged, unmatched = charge_spans(kernels, spans)
    assert not unmatched
    assert [(k, s.duration_ms) for k, s in charged] == [("0/0|triton_per_fused_add_native_layer_norm_0:1", 2.0),
                                                        ("0/0|triton_per_fused_add_native_layer_norm_0:2", 3.0)]


def _row(name: str) -> NodeInfo:
    return NodeInfo(name=name, op="extern", target="", module_type="", scope="", range="", kind="")


def test_flops_of_projections_stay_on_their_own_rows():
    """Inductor's provenance gives the CPU attention call the Q/K/V projections feeding it as
    origins too: their FLOPs belong to their own ``addmm`` rows, the attention's to its own."""
    from fxprof.measure.compiled.flops import kernel_flops

    kernels = [Kernel("0/0", "extern_kernels.addmm:1", False, "", ("q",)),
               Kernel("0/0", "extern_kernels.addmm:2", False, "", ("k",)),
               Kernel("0/0", "extern_kernels.addmm:3", False, "", ("v",)),
               Kernel("0/0", "torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default:4", False, "",
                      ("q", "view", "k", "view_1", "v", "view_2", "sdpa")),
               Kernel("0/0", "cpp_fused_add_0:5", True, "graph_0_cpp_fused_add_0", ("sdpa", "add"))]
    rows = [_row(n) for n in ("q", "k", "v", "attn", "add")]
    flops = {"0/0": {"q": 100, "k": 100, "v": 100, "view": 0, "view_1": 0, "view_2": 0, "sdpa": 40, "add": 0, "lost_mm": 7}}
    per_row, lost = kernel_flops(kernels, rows, flops)
    assert per_row == {"q": 100, "k": 100, "v": 100, "attn": 40, "add": 0}
    assert lost == {"0/0": ["lost_mm"]}  # FLOPs no kernel computes are reported, not dropped in silence


class _MovesToDevice(nn.Module):
    """A graph that moves a tensor to the real device (as BART's positions do)."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x):
        return self.fc(x + torch.arange(8).to("cpu"))


def test_graph_flops_count_a_graph_that_moves_a_tensor_to_the_device():
    from torch.utils.flop_counter import FlopCounterMode

    from fxprof.measure.compiled.flops import graph_flops

    model, x = _MovesToDevice(), torch.randn(4, 8)
    gm = fx.symbolic_trace(model)
    flops, why = graph_flops(gm, [x])
    with FlopCounterMode(display=False) as counter:
        model(x)
    assert why == "" and sum(v or 0 for v in flops.values()) == counter.get_total_flops() == 2 * 4 * 8 * 8


def test_a_graph_whose_flops_cannot_be_counted_is_named_in_a_note():
    from fxprof.measure.compiled.flops import graph_flops, missing_flops_notes

    class DataDependent(nn.Module):
        def forward(self, x):
            return torch.ones(4) * x.sum().item()  # a value read to the host: fake tensors have none

    flops, why = graph_flops(fx.symbolic_trace(DataDependent()), [torch.randn(4)])
    assert flops == {} and why  # the reason, for the header
    kernels = [Kernel("0/0", "cpp_fused_sum_0:1", True, "graph_0_cpp_fused_sum_0", ("sum_1",))]
    notes = missing_flops_notes({"0/0": flops}, {"0/0": why}, kernels, [_row("sum_row")], {})
    assert len(notes) == 1 and "sum_row" in notes[0] and "empty, not 0" in notes[0] and why in notes[0]


# ---------------------------------------------------------------- compiled
class _TwoLinears(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(8, 8), nn.Linear(8, 8)

    def forward(self, x):
        return self.b(torch.relu(self.a(x)))


def test_a_compiled_profile_without_flops_says_so_in_its_header(inductor_cache, monkeypatch):
    """Where the count fails, the rows' flops are empty (not 0) and the header names them and why."""
    import fxprof.measure.compiled.compiling as compiled_mode  # CompiledSession counts each graph's FLOPs

    monkeypatch.setattr(compiled_mode, "graph_flops", lambda gm, inputs: ({}, "RuntimeError: no fake kernel for op x"))
    torch.manual_seed(0)
    with torch.no_grad():
        prof = fxprof.profile(torch.compile(_TwoLinears().eval()), torch.randn(4, 8), warmup=1, iters=2)
    kernels = prof.df[prof.df["op"].isin(["kernel", "extern"])]
    assert len(kernels) >= 2 and kernels["flops"].isna().all()
    text = str(prof)
    assert "note: FLOPs unknown on the" in text and "no fake kernel for op x" in text and "empty, not 0" in text
    assert all(name in text.split("note: FLOPs unknown", 1)[1].split("\n", 1)[0] for name in kernels.index[:3])


class _Attention(nn.Module):
    def __init__(self, d: int = 32, heads: int = 4):
        super().__init__()
        self.q, self.k, self.v, self.o = (nn.Linear(d, d) for _ in range(4))
        self.heads = heads

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = (p(x).view(b, t, self.heads, d // self.heads).transpose(1, 2) for p in (self.q, self.k, self.v))
        return self.o(F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(b, t, d))


class _Layer(nn.Module):
    def __init__(self, d: int = 32):
        super().__init__()
        self.attn, self.ln1 = _Attention(d), nn.LayerNorm(d)
        self.fc, self.ln2 = nn.Linear(d, d), nn.LayerNorm(d)

    def forward(self, x):
        x = self.ln1(x + self.attn(x))
        return self.ln2(x + torch.relu(self.fc(x)))


class _Stack(nn.Module):
    """Three identical layers: inductor generates their fused kernels once, called per layer."""

    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList(_Layer() for _ in range(3))

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x


def _layer_calls(prof, prefix: str, ops: tuple[str, ...] = ("kernel", "extern")) -> dict[str, float]:
    """Kernel calls a run per layer of a stack (``layers.0`` ...), from the samples; ``ops``:
    which rows count (``kernel``: inductor's generated kernels only)."""
    table = prof.df
    scopes = {n: s for n, s, op in zip(table.index, table["scope"], table["op"]) if op in ops}
    samples = prof.samples
    kernels = samples[samples["node"].astype(str).map(lambda n: str(scopes.get(n, "")).startswith(prefix)).astype(bool)]
    layer = kernels["node"].astype(str).map(lambda n: ".".join(str(scopes.get(n, "")).split(".")[:len(prefix.split("."))]))
    return (layer.value_counts() / prof.num_runs).to_dict()


@pytest.fixture(scope="module")
def stack(inductor_cache):
    torch.manual_seed(0)
    model, x = _Stack().eval(), torch.randn(2, 8, 32)
    with torch.no_grad():
        prof = fxprof.profile(torch.compile(model), x, warmup=1, iters=3)
    return model, x, prof


def test_every_layer_of_a_stack_is_charged_its_own_kernel_calls(stack):
    model, _, prof = stack
    calls = _layer_calls(prof, "layers.")
    # before: the shared fused kernels went wholly to the last layer (layers.0 and .1 fewer calls)
    assert sorted(calls) == ["layers.0", "layers.1", "layers.2"], calls
    assert len(set(calls.values())) == 1 and calls["layers.0"] >= 4, calls
    table = prof.df
    kernels = table[table["op"].isin(["kernel", "extern"])]
    assert kernels["median_ms"].notna().all(), list(kernels.index[kernels["median_ms"].isna()])
    # the memory run charges each call site too: every kernel row has its live memory
    if "mem_live" in table.columns:
        assert kernels["mem_live"].notna().all(), list(kernels.index[kernels["mem_live"].isna()])
    by_scope = prof.group_by("scope", depth=2) if "scope" in table.columns else None
    assert by_scope is not None and by_scope.shape[0] >= 3


def test_compiled_flops_equal_flop_counter_mode_and_sit_on_the_projections(stack):
    from torch.utils.flop_counter import FlopCounterMode

    model, x, prof = stack
    with FlopCounterMode(display=False) as counter, torch.no_grad():
        model(x)
    table = prof.df
    assert math.isclose(float(table["flops"].fillna(0).sum()), counter.get_total_flops(), rel_tol=0.01)
    projection = 2 * 2 * 8 * 32 * 32  # a 32x32 Linear on 16 tokens
    for layer in range(3):
        for p in "qkv":
            assert table.loc[f"layers_{layer}_attn_{p}", "flops"] == projection
    assert not any("FLOPs" in n for n in prof.meta.get("notes", []))


def test_a_session_of_the_stack_charges_every_layer(stack, inductor_cache):
    model, x, _ = stack
    compiled = torch.compile(model)
    with torch.no_grad(), fxprof.session(compiled, schedule=fxprof.schedule(warmup=1, active=2)) as s:
        for _ in range(3):
            compiled(x)
            s.step()
    calls = _layer_calls(s.profiles[-1], "layers.")
    assert sorted(calls) == ["layers.0", "layers.1", "layers.2"] and len(set(calls.values())) == 1, calls


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (Triton kernels, CUPTI)")
def test_on_the_gpu_every_layer_of_the_stack_gets_its_triton_kernel_calls(inductor_cache):
    """On CUDA the shared kernels are Triton kernels, timed as device kernels by correlation id."""
    from torch.utils.flop_counter import FlopCounterMode

    torch.manual_seed(0)
    model, x = _Stack().eval().cuda(), torch.randn(2, 8, 32, device="cuda")
    with torch.no_grad():
        prof = fxprof.profile(torch.compile(model), x, warmup=1, iters=3)
        with FlopCounterMode(display=False) as counter:
            model(x)
    fused = _layer_calls(prof, "layers.", ("kernel",))
    assert sorted(fused) == ["layers.0", "layers.1", "layers.2"] and len(set(fused.values())) == 1, fused
    calls = _layer_calls(prof, "layers.")
    assert len(set(calls.values())) == 1, calls
    assert math.isclose(float(prof.df["flops"].fillna(0).sum()), counter.get_total_flops(), rel_tol=0.01)


@pytest.mark.slow
def test_tiny_bart_compiled_per_layer_and_flops(inductor_cache):
    """BART moves its positions to the device (meta tensors failed: no FLOPs at all) and shares
    its fused kernels between layers."""
    transformers = pytest.importorskip("transformers")
    from torch.utils.flop_counter import FlopCounterMode

    torch.manual_seed(0)
    config = transformers.BartConfig(vocab_size=100, d_model=32, encoder_layers=2, decoder_layers=2,
                                     encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=64,
                                     decoder_ffn_dim=64, max_position_embeddings=64)
    model = transformers.BartModel(config).eval()
    kwargs = {"input_ids": torch.randint(0, 100, (1, 8)), "decoder_input_ids": torch.randint(0, 100, (1, 6)),
              "use_cache": False}
    with torch.no_grad():
        with FlopCounterMode(display=False) as counter:
            model(**kwargs)
        prof = fxprof.profile(torch.compile(model), **kwargs, warmup=1, iters=2)
    assert math.isclose(float(prof.df["flops"].fillna(0).sum()), counter.get_total_flops(), rel_tol=0.01)
    for stack_ in ("encoder.layers.", "decoder.layers."):
        # generated kernels: before, the ones layers share went wholly to the last layer (0 calls on layer 0)
        fused = _layer_calls(prof, stack_, ("kernel",))
        assert len(fused) == 2 and min(fused.values()) > 0, (stack_, fused)
        # the last layer's last kernel may fuse into what follows it (the encoder's into the decoder's embedding)
        calls = _layer_calls(prof, stack_)
        assert len(calls) == 2 and max(calls.values()) <= min(calls.values()) + 1, (stack_, calls)


def _passes_through(fn):
    """A decorator as transformers' (``check_model_inputs``...): dynamo then sees the module as
    ``L['args'][0]`` of the wrapper's frame, not as ``L['self']``."""
    import functools

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        return fn(*args, **kwargs)

    return wrapper


class _WrappedStack(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(16, 16) for _ in range(2))

    @_passes_through
    def forward(self, x):
        for layer in self.layers:
            x = torch.relu(layer(x))
        return x


def test_a_forward_behind_a_decorator_keeps_its_scopes_compiled(inductor_cache):
    """hf_llama_gqa in the zoo, compiled: every kernel row had no scope (its forward sits behind a
    decorator, so dynamo's paths read L['args'][0].layers.0...), and no layer was charged."""
    torch.manual_seed(0)
    with torch.no_grad():
        prof = fxprof.profile(torch.compile(_WrappedStack().eval()), torch.randn(4, 16), warmup=1, iters=3, peaks=None)
    calls = _layer_calls(prof, "layers.")
    assert sorted(calls) == ["layers.0", "layers.1"] and min(calls.values()) > 0, calls


def test_an_extern_conv_that_convolves_a_fused_sum_is_charged_to_its_own_layer(inductor_cache):
    """fasterrcnn_mobilenet_v3_large_320_fpn in the zoo, compiled: torchvision's FPN convolves
    ``interpolate(last_inner) + inner_lateral`` with ``layer_blocks.0``; inductor lists the sum's
    nodes among the extern convolution's provenance, so the conv was charged to the FPN itself and
    ``layer_blocks.0`` got no kernel call while ``layer_blocks.1`` got two."""
    from torchvision.ops import FeaturePyramidNetwork
    from torchvision.ops.feature_pyramid_network import LastLevelMaxPool

    torch.manual_seed(0)
    fpn = FeaturePyramidNetwork([8, 16], 8, extra_blocks=LastLevelMaxPool()).eval()
    features = {"a": torch.rand(1, 8, 8, 8), "b": torch.rand(1, 16, 4, 4)}
    with torch.no_grad():
        prof = fxprof.profile(torch.compile(fpn), features, warmup=1, iters=2, peaks=None)
    calls = _layer_calls(prof, "layer_blocks.", ("extern",))
    assert sorted(calls) == ["layer_blocks.0", "layer_blocks.1"] and calls["layer_blocks.0"] == calls["layer_blocks.1"] == 1, calls
    table = prof.df
    convs = table[(table["op"] == "extern") & table["scope"].astype(str).str.startswith("layer_blocks.0")]
    assert list(convs["origins"]) == ["layer_blocks_0_0"], convs[["scope", "origins"]]
    # the interpolate and add stay on the generated kernel that computes them, charged to the FPN
    sums = table[table["origins"].astype(str).str.contains("interpolate")]
    assert len(sums) >= 1 and (sums["op"] == "kernel").all() and (sums["scope"] == "").all(), sums[["op", "scope"]]


def test_an_experts_custom_op_with_no_event_of_its_own_takes_its_nested_ops_not_the_next_layers_externs():
    """Issue 58: transformers' experts run ``torch.ops.transformers.grouped_mm_fallback``, which
    inductor calls with no profiler event of its own: its Python body's ``aten::mm`` per expert
    sat directly in the graph's call and took the next layer's projections (and the cursor then
    jumped past that layer's attention). Each extern is matched only between the generated
    kernels around it; the custom op gets its nested ops as one span; ``sort.stable`` is a sort."""
    kernels = []
    for layer in range(2):
        kernels += [Kernel("0/0", f"extern_kernels.mm:{10 * layer + 1}", False, "", (f"q_proj_{layer}",)),
                    Kernel("0/0", f"cpp_fused_sdpa_prep_0:{10 * layer + 2}", True, "graph_0_cpp_fused_sdpa_prep_0", (f"prep_{layer}",)),
                    Kernel("0/0", f"torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default:{10 * layer + 3}", False, "",
                           (f"sdpa_{layer}",)),
                    Kernel("0/0", f"torch.ops.aten.sort.stable:{10 * layer + 4}", False, "", (f"sort_{layer}",)),
                    Kernel("0/0", f"cpp_fused_route_1:{10 * layer + 5}", True, "graph_0_cpp_fused_route_1", (f"route_{layer}",)),
                    Kernel("0/0", f"torch.ops.transformers.grouped_mm_fallback.default:{10 * layer + 6}", False, "",
                           (f"experts_{layer}",)),
                    Kernel("0/0", f"cpp_fused_silu_2:{10 * layer + 7}", True, "graph_0_cpp_fused_silu_2", (f"act_{layer}",))]
    spans, t = [], 0.0
    for layer in range(2):
        names = ["aten::mm", "graph_0_cpp_fused_sdpa_prep_0", "aten::_scaled_dot_product_flash_attention_for_cpu",
                 "aten::sort", "graph_0_cpp_fused_route_1"]
        names += ["aten::slice", "aten::mm", "aten::slice", "aten::mm"]  # two experts, no event of the op around them
        names += ["graph_0_cpp_fused_silu_2"]
        for name in names:
            spans.append(Span("0/0", 0, name, t, 0.5))
            t += 1.0
    charged, unmatched = charge_spans(kernels, spans)
    assert not unmatched, [s.name for s in unmatched]
    by_key = {}
    for key, span in charged:
        by_key.setdefault(key.split("|")[1], []).append(span)
    assert sorted(by_key) == sorted(k.key for k in kernels)  # every call site, none left without its call
    assert all(len(v) == 1 for v in by_key.values()), {k: len(v) for k, v in by_key.items()}
    assert by_key["extern_kernels.mm:11"][0].start_ms == 10.0  # layer 1's projection: its own mm, not an expert's
    experts = by_key["torch.ops.transformers.grouped_mm_fallback.default:6"][0]
    # its nested ops' own times (4 x 0.5 ms), not the stretch from the first to the last: the gaps are overhead
    assert (experts.start_ms, experts.duration_ms, experts.name) == (5.0, 2.0, "grouped_mm_fallback")
    assert by_key["torch.ops.aten.sort.stable:14"][0].name == "aten::sort"


class _EagerAttention(nn.Module):
    """Attention written out (matmul, scale, softmax, matmul), as transformers' eager attention:
    inductor's pattern matcher replaces the chain with one SDPA call."""

    def __init__(self) -> None:
        super().__init__()
        self.q, self.k, self.v = nn.Linear(32, 32), nn.Linear(32, 32), nn.Linear(32, 32)

    def forward(self, x):
        b, t, _ = x.shape
        q, k, v = (p(x).view(b, t, 4, 8).transpose(1, 2) for p in (self.q, self.k, self.v))
        a = torch.matmul(q, k.transpose(-2, -1)).div(math.sqrt(8)).softmax(dim=-1).matmul(v)
        return a.transpose(1, 2).reshape(b, t, 32)


def test_sdpa_that_inductor_makes_of_eager_attention_keeps_its_layer_name_and_flops(inductor_cache):
    """Issue 58: rows of an SDPA call a pattern made had no layer, a raw op name spelled two ways
    (``torch.ops.aten...`` and ``torch_ops_aten...``) and 0 FLOPs, the replaced matmuls on no row."""
    from torch.utils.flop_counter import FlopCounterMode

    torch.manual_seed(0)
    model = nn.Sequential(_EagerAttention(), _EagerAttention()).eval()
    x = torch.randn(2, 16, 32)
    with FlopCounterMode(display=False) as counter, torch.no_grad():
        model(x)
    with torch.no_grad():
        prof = fxprof.profile(model, x, compile=True, warmup=1, iters=2)
    table = prof.df
    sdpa = table[table["target"].astype(str).str.contains("scaled_dot_product")]
    if sdpa.empty:
        pytest.skip("this torch's inductor left eager attention as matmuls (no SDPA pattern applied)")
    assert sorted(sdpa["scope"]) == ["0", "1"], sdpa[["scope"]]  # each in its own layer
    assert not sdpa.index.str.contains("torch").any(), list(sdpa.index)
    attention = 2 * (2 * 2 * 4 * 16 * 16 * 8)  # QK^T and AV, each 2 FLOPs per multiply-add: batch 2, 4 heads, 16x16x8
    assert (sdpa["flops"] == attention).all(), sdpa["flops"]
    assert math.isclose(float(table["flops"].fillna(0).sum()), counter.get_total_flops(), rel_tol=0.01)
    assert (sdpa["calls_per_run"] == 1).all()


@torch.library.custom_op("fxprof_test::scaled_mm", mutates_args=())
def _scaled_mm(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return (x @ w) * 2


@_scaled_mm.register_fake
def _(x, w):
    return x.new_empty(x.shape[0], w.shape[1])


def test_custom_ops_that_no_flop_count_sees_are_named_in_a_note():
    """transformers' experts run their matmuls in a custom op (grouped_mm_fallback):
    FlopCounterMode has no formula and does not look inside, so the header says so."""
    from torch.utils.flop_counter import FlopCounterMode

    from fxprof.measure.compiled.flops import custom_op_note, custom_ops

    def f(x, w):
        return torch.ops.fxprof_test.scaled_mm.default(x, w) + torch.mm(x, w)

    gm = fx.symbolic_trace(f)
    x, w = torch.randn(4, 8), torch.randn(8, 3)
    with FlopCounterMode(display=False) as counter:
        f(x, w)
    assert counter.get_total_flops() == 2 * 4 * 8 * 3  # the mm alone: the custom op's matmul is not counted
    found = custom_ops(gm)
    assert found == {"fxprof_test::scaled_mm": 1}
    note = custom_op_note({"0/0": found, "1/0": found})
    assert len(note) == 1 and "fxprof_test::scaled_mm (2x)" in note[0] and "FlopCounterMode" in note[0]
    assert custom_op_note({"0/0": {}}) == []
