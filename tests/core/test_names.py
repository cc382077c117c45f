"""Row names a reader can use (issue 31 (e)): dynamo's lifted weights named by their module path
and kept out of the rankings, inputs by their own name, no ``g0:`` prefixes, module rows with
their scope, and no two rows of a printed table alike at any width."""

from __future__ import annotations

import re

import pandas as pd
import pytest
import torch
import torchvision
from torch import nn

import fxprof
from fxprof.core.names import input_name, lifted_weight, weight_name
from fxprof.views.tables import shorten_all

WIDTHS = (80, 100, 120, 140)


def _printed_names(text: str) -> list[str]:
    """The node column of a printed table: the rows between the dashes and the first footer."""
    lines = text.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("----"))
    width = len(lines[at].split("  ")[0])
    rows = []
    for line in lines[at + 1:]:
        if not line.strip() or line.startswith(("...", "hidden", "long names", "weights as", "spread:", "record_function")):
            break
        rows.append(line[:width].rstrip())
    return rows


def _printed_column(text: str, header: str) -> list[str]:
    lines = text.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("----"))
    start = lines[at - 1].index(header)
    end = start + len(lines[at][start:].split("  ")[0])
    out = []
    for line in lines[at + 1:]:
        if not line.strip() or line.startswith(("...", "hidden", "long names", "weights as", "spread:", "record_function")):
            break
        out.append(line[start:end].strip())
    return out


def _assert_readable(profile: fxprof.Profile) -> None:
    names = list(profile.df.index)
    assert len(set(names)) == len(names)
    bad = [n for n in names if re.search(r"(^|:)l_self_|^g\d+:|^l_.*_$", n)]
    assert not bad, f"unreadable row names: {bad[:5]}"
    for width in WIDTHS:
        for top in (10, None):
            text = profile.summary(width=width, top=top) if top else profile.summary(width=width, sort="pct", top=len(names))
            shown = _printed_names(text)
            assert len(set(shown)) == len(shown), f"two rows alike at width {width}: " + ", ".join(
                sorted({s for s in shown if shown.count(s) > 1}))


# -- the pieces, no model ------------------------------------------------------------------


def test_lifted_weights_are_read_back_from_dynamo_spelling():
    assert lifted_weight("L_self_modules_layer3_modules_1_modules_bn1_buffers_running_var_") == (
        "buffer", "layer3.1.bn1", "running_var")
    assert lifted_weight("L_self_modules_embeddings_modules_word_embeddings_parameters_weight_") == (
        "parameter", "embeddings.word_embeddings", "weight")
    assert lifted_weight("L_self_parameters_scale_") == ("parameter", "", "scale")
    assert lifted_weight("L_x_") is None and lifted_weight("add_1") is None
    # a graph compiled in a submodule's forward: the row's scope (from the root) gives the path
    assert weight_name("L_self_modules_conv_parameters_weight_", "blocks.2.conv") == "blocks.2.conv.weight"
    assert weight_name("L_self_modules_conv_parameters_weight_", "") == "conv.weight"
    assert input_name("l_x_") == "x" and input_name("l_args_0_") == "args_0" and input_name("relu") == "relu"


@pytest.mark.parametrize("limit", [12, 16, 24, 30])
def test_shortened_names_stay_distinct_and_keep_the_block_index(limit):
    parts = ("intermediate_dense", "attention_self_query", "attention_output_dense", "output_LayerNorm")
    names = [f"encoder_layer_{i}_{p}" for i in (0, 1, 10, 11) for p in parts]
    names += [n.replace("_", ".") for n in names] + ["embeddings_word_embeddings", "embeddings_position_embeddings", "fc"]
    out = shorten_all(names, limit)
    assert all(len(o) <= limit for o in out)
    assert len(set(out)) == len(names), sorted(o for o in out if out.count(o) > 1)
    assert out[-1] == "fc"
    if limit >= 24:  # room for the index: the block a row belongs to is visible
        for name, short in zip(names, out):
            index = re.search(r"layer[._](\d+)", name).group(1) if "layer" in name else None
            if index is not None:
                assert re.search(rf"(^|\W|_){index}(\W|_|$)", short), (name, short)


@pytest.mark.parametrize("limit", [12, 16, 24, 30])
def test_names_differing_in_two_indices_stay_distinct(limit):
    """convnext's fused kernels: stages_S_blocks_B_norm_permute_layer_norm, S and B both vary;
    keeping one index made the others alike (4 rows of timm convnext_atto at 80 columns)."""
    names = [f"stages_{s}_blocks_{b}_norm_permute_layer_norm" for s in range(4) for b in range(2)]
    names += [f"stages_2_blocks_{b}_norm_permute_layer_norm" for b in range(2, 6)] + ["stem_1_permute_layer_norm"]
    out = shorten_all(names, limit)
    assert all(len(o) <= limit for o in out)
    assert len(set(out)) == len(names), sorted(o for o in out if out.count(o) > 1)
    if limit >= 24:  # both indices visible, each with the word that names it
        for name, short in zip(names[:8], out[:8]):
            s, b = re.search(r"stages_(\d)_blocks_(\d)", name).groups()
            assert f"stages_{s}" in short and f"blocks_{b}" in short, (name, short)


@pytest.mark.parametrize("limit", [12, 16, 24, 30])
def test_names_with_repeated_words_and_variants_stay_distinct(limit):
    """regnet's trunk_output_blockS_blockS_B_f_se_{,scale_}activation: the stage twice, a block
    index and two variants per block (3 look-alikes at 80 columns before); at 12 characters,
    where the differing words cannot all fit, look-alikes are numbered rather than shown twice."""
    names = [f"trunk_output_block{s}_block{s}_{b}_{v}" for s in range(1, 5) for b in range(4)
             for v in ("f_se_activation", "f_se_scale_activation", "activation", "f_a_0", "f_b_0")]
    out = shorten_all(names, limit)
    assert all(len(o) <= limit for o in out)
    assert len(set(out)) == len(names), sorted(o for o in out if out.count(o) > 1)
    if limit >= 24:
        for name, short in zip(names, out):
            s, b = re.search(r"block(\d)_(\d)", name).groups()
            assert f"{s}_{b}" in short, (name, short)  # stage and block both visible


# -- real models ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def resnet_dynamo():
    torch.manual_seed(0)
    model = torchvision.models.resnet18(weights=None).eval()
    return fxprof.profile(model, torch.randn(1, 3, 32, 32), capture="dynamo", warmup=1, iters=3, anatomy=False, peaks=None)


def test_dynamo_resnet18_weights_are_named_by_module_path(resnet_dynamo):
    df = resnet_dynamo.df
    assert df.loc["layer3.1.bn1.running_var", "kind"] == "buffer"
    assert df.loc["layer3.1.bn1.running_var", "raw_name"].endswith("l_self_modules_layer3_modules_1_modules_bn1_buffers_running_var_")
    assert df.loc["conv1.weight", "kind"] == "parameter"
    assert df.loc["fc.bias", "scope"] == "fc"
    assert "x" in df.index and df.loc["x", "op"] == "placeholder"  # the model's input: its own name
    model = torchvision.models.resnet18(weights=None)
    lifted = set(df.index[df["kind"].isin(["parameter", "buffer"])])
    owned = {n for n, _ in model.named_parameters()} | {n for n, _ in model.named_buffers()}
    assert lifted and lifted <= owned
    _assert_readable(resnet_dynamo)


def test_weight_inputs_stay_out_of_the_ranking_and_are_counted(resnet_dynamo):
    text = resnet_dynamo.summary(sort="pct", top=500, width=None)
    shown = _printed_names(text)
    assert "layer3.1.bn1.running_var" not in shown and "layer1_0_conv1" in shown
    n = int(resnet_dynamo.df["kind"].isin(["parameter", "buffer"]).sum())
    assert f"weights as graph inputs: {n} parameter/buffer input node(s)" in text
    # graph order is not a ranking: every row is there
    assert "layer3.1.bn1.running_var" in _printed_names(resnet_dynamo.summary(sort=None, width=None))


def test_module_rows_show_their_scope():
    model = torchvision.models.resnet18(weights=None).eval()
    prof = fxprof.profile(model, torch.randn(1, 3, 32, 32), capture="symbolic", warmup=1, iters=2, anatomy=False, peaks=None)
    assert prof.df.loc["layer1_0_conv1", "op"] == "call_module"
    text = prof.summary(width=None, top=60)
    names, scopes = _printed_names(text), _printed_column(text, "scope")
    row = dict(zip(names, scopes))
    assert row["layer1_0_conv1"] == "layer1.0.conv1"
    # every node's row; "(between nodes)" is the time in no node (issue 39), no module's
    assert all(row[n] for n in row if n not in ("x", "output", "flatten") and not n.startswith("("))
    html = prof._repr_html_()
    # the notebook shows the top rows with their scope (which rows are on top depends on the machine's
    # load: layer1.0.conv1 was not among them under load)
    top = prof.df.sort_values("pct", ascending=False).index[0]
    assert f">{prof.df.loc[top, 'scope']}<" in html, top


def test_session_of_a_model_with_a_graph_break_has_no_graph_prefixes():
    class TwoGraphs(nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = nn.Linear(8, 8), nn.Linear(8, 8)

        def forward(self, x):
            y = self.a(x)
            torch._dynamo.graph_break()
            return self.b(torch.relu(y))

    model = TwoGraphs().eval()
    x = torch.randn(2, 8)
    with torch.no_grad(), fxprof.session(model, capture="dynamo") as s:
        for _ in range(4):
            model(x)
            s.step()
    prof = s.profiles[-1]
    assert set(prof.df["graph"]) == {"g0", "g1"}
    assert {"a.weight", "b.bias", "x", "a", "b", "relu"} <= set(prof.df.index)
    _assert_readable(prof)


@pytest.mark.slow
def test_bert_rows_are_distinct_at_every_width():
    transformers = pytest.importorskip("transformers")
    config = transformers.BertConfig(num_hidden_layers=2, hidden_size=64, num_attention_heads=4, intermediate_size=128,
                                     vocab_size=1000)
    torch.manual_seed(0)
    model = transformers.BertModel(config).eval()
    prof = fxprof.profile(model, torch.randint(0, 1000, (1, 16)), warmup=1, iters=3, peaks=None)
    assert prof.meta["capture"] == "dynamo"
    df = prof.df
    assert df.loc["encoder.layer.0.intermediate.dense.weight", "kind"] == "parameter"
    assert df.loc["embeddings.position_ids", "kind"] == "buffer"
    _assert_readable(prof)
    text = prof.summary(width=120, sort="pct", top=len(df))
    for layer in ("0", "1"):  # both layers' intermediate dense rows, told apart by their index
        assert any(re.search(rf"layer_{layer}\b.*dense|layer_{layer}_intermediate", n) for n in _printed_names(text)), layer
    assert isinstance(df, pd.DataFrame)
