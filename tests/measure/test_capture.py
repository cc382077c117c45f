"""Capture choice: symbolic, dynamo, export and auto, on models symbolic tracing cannot take."""

from __future__ import annotations

import logging

import pytest
import torch
import torchvision
from torch import nn
from torch.profiler import record_function

import fxprof
from fxprof.measure.capture.captures import capture_model
from fxprof.measure.timing.recorder import Recorder

torch._logging.set_logs(dynamo=logging.ERROR)  # graph-break warnings are expected here


class GraphBreak(nn.Module):
    """A data-dependent branch on .item(): symbolic tracing fails, dynamo splits it in pieces."""

    def __init__(self):
        super().__init__()
        self.a = nn.Linear(4, 4)
        self.b = nn.Linear(4, 4)

    def forward(self, x):
        y = self.a(x)
        if y.sum().item() > 0:
            y = y * 2
        else:
            y = y - 1
        return self.b(torch.relu(y))


@pytest.fixture
def toy():
    torch.manual_seed(0)
    return GraphBreak().eval()


def test_symbolic_failure_explains_in_plain_words_and_names_the_options(toy):
    with pytest.raises(fxprof.TraceError) as info:
        fxprof.profile(toy, torch.randn(2, 4), capture="symbolic")
    message = str(info.value)
    assert "control flow (an if or while) depends on the value of a tensor" in message
    for option in ("capture='dynamo'", "leaf_modules", "concrete_args"):
        assert option in message


def test_auto_falls_back_to_dynamo_and_says_why(toy):
    x = torch.randn(2, 4)
    prof = fxprof.profile(toy, x, warmup=1, iters=3)
    assert prof.meta["capture"] == "dynamo"
    reason = prof.meta["capture_reason"]
    # where the model's code stopped tracing (file:line in function), then the cause in plain words
    assert reason.startswith("symbolic tracing failed at tests/measure/test_capture.py:30 in forward (the model's Python control flow"), reason
    df = prof.df
    assert df.index.is_unique
    assert set(df["graph"]) == {"g0", "g1"}
    # rows named from module path and op; dynamo's own name (graph-prefixed) kept in raw_name
    assert all(raw.startswith(f"{g}:") for raw, g in zip(df["raw_name"], df["graph"]))
    assert {"a", "b"} <= set(df.index) and not any(":" in name for name in df.index)
    # scopes and module types recovered from dynamo's module stack: roll-ups work as usual
    linear = df[df["kind"] == "linear"]
    assert sorted(linear["scope"]) == ["a", "b"] and set(linear["module_type"]) == {"Linear"}
    assert (df["calls"] == 3).all()
    assert prof.df["pct"].sum() == pytest.approx(100.0)
    assert prof.group_by("scope").loc["a", "nodes"] == 1  # the linear; its parameters are (graph)
    assert prof.group_by("graph")["pct"].sum() == pytest.approx(100.0)


def test_dynamo_outputs_equal_eager_on_both_branches(toy):
    for x in (torch.full((2, 4), 5.0), torch.full((2, 4), -5.0)):
        with torch.no_grad():
            expected = toy(x)
            cap = capture_model(toy, (x,), {}, "dynamo")
            recorder = Recorder()
            out = cap.run(recorder, (x,), {})
        torch.testing.assert_close(out, expected, rtol=0, atol=0)
        assert recorder.recording.runs == 1


def test_profiling_the_same_model_many_times_never_runs_it_uncaptured(toy):
    # dynamo gives up compiling a function after a few recompiles; fxprof's single backend
    # lets every profile reuse the compiled graphs
    for _ in range(10):
        prof = fxprof.profile(toy, torch.randn(2, 4), warmup=0, iters=1, capture="dynamo", anatomy=False)
        assert len(prof.nodes) > 0 and (prof.df["calls"] == 1).all()


def test_export_capture_gives_aten_nodes_with_scopes(resnet18):
    prof = fxprof.profile(resnet18, torch.randn(1, 3, 32, 32), warmup=1, iters=2, capture="export")
    df = prof.df
    assert prof.meta["capture"] == "export"
    conv = df[df["kind"] == "conv2d"]
    assert len(conv) == 20 and set(conv["module_type"]) == {"Conv2d"}
    assert (conv["target"] == "torch.ops.aten.conv2d.default").all()
    blocks = prof.group_by("scope", depth=2)
    assert blocks.loc["layer1.0", "nodes"] == 7  # the residual add counts to its block
    # module node counts agree with symbolic tracing: parameters read by get_attr are plumbing
    symbolic = fxprof.profile(resnet18, torch.randn(1, 3, 32, 32), warmup=0, iters=1, anatomy=False)
    by_scope = symbolic.group_by("scope", depth=1)["nodes"]
    exported = prof.group_by("scope", depth=1)["nodes"]
    for scope in ("layer1", "layer2", "layer3", "layer4", "(root)"):
        assert exported[scope] == by_scope[scope], scope
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False) as whole, torch.no_grad():
        resnet18(torch.randn(1, 3, 32, 32))
    assert int(df["flops"].sum()) == whole.get_total_flops()


def test_export_failure_is_explained(toy):
    with pytest.raises(fxprof.TraceError, match="torch.export could not capture GraphBreak.*try capture='dynamo'") as info:
        fxprof.profile(toy, torch.randn(2, 4), capture="export")
    assert "(at tests/measure/test_capture.py:30 in forward)" in str(info.value)  # the line that stopped it


def test_unknown_capture_is_refused(toy):
    with pytest.raises(ValueError, match="unknown capture 'jit'; choose one of auto, symbolic, dynamo, export"):
        fxprof.profile(toy, torch.randn(2, 4), capture="jit")


def test_dynamo_drops_record_function_ranges_as_documented():
    class Ranged(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(4, 4)

        def forward(self, x):
            with record_function("encode"):
                x = self.fc(x)
            if x.sum().item() > 1e9:
                x = x * 0
            return x.relu()

    # dynamo treats record_function as a no-op, so its graphs hold no ranges (docs/capture.md);
    # symbolic capture keeps them. If a torch release starts keeping them, this test says so.
    model = Ranged()
    prof = fxprof.profile(model, torch.randn(2, 4), warmup=0, iters=2, capture="dynamo")
    assert prof.meta["capture"] == "dynamo"
    assert set(prof.df["range"]) == {""}
    # and symbolic tracing with the branch made static keeps the range
    class Static(Ranged):
        def forward(self, x):
            with record_function("encode"):
                x = self.fc(x)
            return x.relu()

    assert "encode" in set(fxprof.profile(Static(), torch.randn(2, 4), warmup=0, iters=1).df["range"])


@pytest.mark.slow
def test_detection_model_profiles_through_auto():
    model = torchvision.models.get_model(
        "fasterrcnn_mobilenet_v3_large_fpn", weights=None, weights_backbone=None, min_size=128, max_size=128
    ).eval()
    image = [torch.rand(3, 128, 128)]
    prof = fxprof.profile(model, image, warmup=1, iters=2)
    assert prof.meta["capture"] == "dynamo"
    assert "iterates over a traced value" in prof.meta["capture_reason"]
    df = prof.df
    assert df["graph"].nunique() > 5 and df.index.is_unique
    assert (df["calls"] == 2).all()  # graphs dynamo replaced after compiling are left out, and said so
    if "capture_note" in prof.meta:
        assert prof.meta["capture_note"].startswith("graphs compiled but not run in the timed runs")
    scopes = prof.group_by("scope")
    assert {"backbone", "roi_heads"} <= set(scopes.index)  # root-model paths (box_head is roi_heads.box_head)
    assert scopes["pct"].sum() == pytest.approx(100.0)
    assert 0.3 < prof.coverage <= 1.05


@pytest.mark.slow
def test_raft_profiles_through_auto():
    model = torchvision.models.get_model("raft_small", weights=None).eval()
    a, b = torch.rand(1, 3, 128, 128), torch.rand(1, 3, 128, 128)
    prof = fxprof.profile(model, a, b, warmup=0, iters=1)
    assert prof.meta["capture"] == "dynamo"
    assert "control flow" in prof.meta["capture_reason"]
    assert {"feature_encoder", "context_encoder", "update_block"} <= set(prof.group_by("scope").index)


def test_nested_and_keyword_inputs_work_under_every_capture():
    class DictIn(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(4, 4)

        def forward(self, d, scale: float = 1.0):
            return self.fc(d["a"]) * scale + d["b"]

    model = DictIn().eval()
    inputs = {"a": torch.randn(2, 4), "b": torch.randn(2, 4)}
    for capture in ("symbolic", "dynamo", "export"):
        prof = fxprof.profile(model, inputs, scale=2.0, warmup=0, iters=2, capture=capture)
        assert prof.meta["capture"] == capture
        assert (prof.df["calls"] == 2).all(), capture
        assert prof.df.loc[prof.df["kind"] == "linear", "calls"].tolist() == [2], capture


def test_an_unrecognised_trace_failure_still_names_the_cause_and_the_options():
    class UsesLen(nn.Module):
        def forward(self, x):
            return x[: len(x) // 2]

    with pytest.raises(fxprof.TraceError) as info:
        fxprof.profile(UsesLen(), torch.randn(4, 2), capture="symbolic")
    message = str(info.value)
    assert "cannot trace UsesLen symbolically" in message and "len" in message
    for option in ("capture='dynamo'", "capture='auto'", "leaf_modules", "concrete_args"):
        assert option in message
    prof = fxprof.profile(UsesLen(), torch.randn(4, 2), warmup=0, iters=1)  # auto takes it
    assert prof.meta["capture"] == "dynamo"


# ---------------------------------------------------------------- issue 26: hostile module names, deep nesting
class _OddNames(nn.Module):
    NAMES = ("a\nb", "q'uote", 'd"q', "t\tab", "r\u202etl", "br]ack[et", "plain")

    def __init__(self):
        super().__init__()
        for name in self.NAMES:
            self.add_module(name, nn.Linear(4, 4))

    def forward(self, x):
        for module in self.children():
            x = module(x)
        return x


def test_modules_whose_names_hold_newlines_quotes_tabs_or_bidi_keep_their_scope_under_dynamo():
    """Issue 26 (lower harm): such modules lost their scope under dynamo (its paths escape them)."""
    prof = fxprof.profile(_OddNames(), torch.randn(2, 4), warmup=0, iters=1, capture="dynamo", anatomy=False)
    linear = prof.df[prof.df["kind"] == "linear"]
    assert sorted(linear["scope"]) == sorted(_OddNames.NAMES)
    assert (linear["scope_source"] == "recorded").all()


def test_normalize_scope_reads_every_spelling_of_a_path():
    from fxprof.measure.capture.graph import normalize_scope

    assert normalize_scope("L['self'].a\\nb") == "a\nb"
    assert normalize_scope("L['self']._modules[\"q'uote\"]") == "q'uote"
    assert normalize_scope("L['self'].r\\u202etl.inner") == "r\u202etl.inner"
    assert normalize_scope("L['self'].layer1._modules['0'].conv1") == "layer1.0.conv1"
    assert normalize_scope("getattr(L['self'].blocks, '0').fc") == "blocks.0.fc"
    assert normalize_scope("L['self'].x['a]b']") == "x.a]b"
    assert normalize_scope("layer1.0") == "layer1.0" and normalize_scope("L['self']") == ""


def test_a_model_nested_too_deep_for_dynamo_gets_a_hint():
    """Issue 26 (lower harm): a Sequential nested 200 deep failed in dynamo with a bare RecursionError."""
    model = nn.Linear(4, 4)
    for _ in range(200):
        model = nn.Sequential(model)
    with pytest.raises(fxprof.TraceError, match=r"recursion limit \(\d+\) on Sequential, whose modules nest 200 deep.*sys\.setrecursionlimit"):
        fxprof.profile(model, torch.randn(2, 4), warmup=0, iters=1, capture="dynamo")
    with pytest.raises(fxprof.TraceError, match="deeper than Python's recursion limit"):
        fxprof.profile(model, torch.randn(2, 4), warmup=0, iters=1, capture="symbolic")


class _MaskedEncoder(nn.Module):
    """The Hugging Face pattern: an optional attention mask that defaults to None."""

    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(50, 8)
        self.fc = nn.Linear(8, 8)

    def forward(self, ids, attention_mask=None, scale=1.0):
        h = self.fc(self.emb(ids)) * scale
        if attention_mask is not None:
            h = h * attention_mask.unsqueeze(-1)
        return h


@pytest.mark.parametrize("capture", ["auto", "symbolic"])
def test_an_omitted_keyword_that_defaults_to_none_is_traced_as_none(capture):
    """issue 26 #14: symbolic tracing took ``attention_mask is not None`` as true for an omitted
    mask, and the run failed with "node 'unsqueeze' ... check the shapes"."""
    torch.manual_seed(0)
    model = _MaskedEncoder().eval()
    ids = torch.randint(0, 50, (2, 5))
    prof = fxprof.profile(model, ids, warmup=0, iters=2, capture=capture)
    names = [n.name for n in prof.nodes]
    assert prof.meta["capture"] == "symbolic"
    assert "unsqueeze" not in names and "fc" in names
    # fxprof passes exactly the defaults: no guard nodes of its own in the profile
    assert not {"_assert_is_none", "eq", "_assert"} & set(names)
    # given, the mask is traced and used
    masked = fxprof.profile(model, ids, attention_mask=torch.ones(2, 5), warmup=0, iters=2, capture=capture)
    assert "unsqueeze" in [n.name for n in masked.nodes]
    # the user's own concrete_args still win
    half = fxprof.profile(model, ids, scale=0.5, warmup=0, iters=1, capture=capture, concrete_args={"scale": 0.5}, anatomy=False)
    assert half.meta["capture"] == "symbolic"


def test_forward_hooks_of_the_root_and_traced_modules_make_auto_use_dynamo_and_symbolic_warn():
    """issue 26 #5: symbolic tracing starts at the root's forward (its hooks vanish: a hook
    returning ``out * 0`` was simply gone) and runs a traced-through module's hooks only once,
    while tracing. Auto capture now uses dynamo, which runs them every run; symbolic says so."""
    torch.manual_seed(0)
    model = torchvision.models.resnet18(weights=None).eval()
    x = torch.randn(1, 3, 32, 32)
    calls = []
    handles = [
        model.register_forward_hook(lambda mod, inp, out: out * 0),
        model.layer1.register_forward_pre_hook(lambda mod, inp: calls.append("layer1")),
        model.fc.register_forward_hook(lambda mod, inp, out: calls.append("fc")),  # a leaf: runs either way
    ]
    try:
        prof = fxprof.profile(model, x, warmup=1, iters=2, anatomy=False, memory=False)  # no untimed passes: runs counted
        assert prof.meta["capture"] == "dynamo"
        reason = prof.meta["capture_reason"]
        assert "the root module (ResNet)" in reason and "layer1 (Sequential)" in reason and "fc" not in reason
        # tracing ran the pre-hook once; dynamo runs it in every run (compile, warm-up, 2 timed), and the
        # model's own forward runs it too (the dispatch check: a warm eager forward, one counted, a warming and a
        # counted captured run; the own runs, each after an untimed call that settles it)
        own = 2 * len(prof.meta["own_runs_ms"])
        assert calls.count("layer1") == 1 + 6 + 2 + own and calls.count("fc") == 6 + 2 + own
        calls.clear()
        with pytest.warns(UserWarning, match=r"symbolic tracing does not run .*root module \(ResNet\).*layer1"):
            sym = fxprof.profile(model, x, warmup=0, iters=1, anatomy=False, capture="symbolic")
        # the graph ran it at trace time only; the model's own forwards (the dispatch check's two, the own runs and
        # their settling calls) ran it too
        assert sym.meta["capture"] == "symbolic" and calls.count("layer1") == 1 + 2 + 2 * len(sym.meta["own_runs_ms"])
        # and the dispatch check names what the graph lacks: the root hook's `out * 0`
        assert any("aten::mul 1x" in note for note in sym.meta["notes"]), sym.meta["notes"]
    finally:
        for h in handles:
            h.remove()
    plain = fxprof.profile(model, x, warmup=0, iters=1, anatomy=False)
    assert plain.meta["capture"] == "symbolic"  # no hooks left: symbolic as before
