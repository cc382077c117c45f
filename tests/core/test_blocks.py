"""``fxprof.compare(a, b, by="scope")`` (issue 31 (f)): every depth adds up to both totals, and
a child block whose compiled time sits in its parent (a kernel fusing several children) is
folded into the parent on both sides, and the table says so. Exact, on per-node tables."""

from __future__ import annotations

import pandas as pd
import pytest

import fxprof
from fxprof.core.blocks import compare_blocks, use_blocks_instead
from fxprof.views.text import render_blocks


def _table(rows):
    df = pd.DataFrame(rows, columns=["node", "op", "kind", "scope", "scope_source", "origins", "median_ms"]).set_index("node")
    df["pct"] = df["median_ms"] / df["median_ms"].sum() * 100
    return df


# an eager BERT-like embeddings block: three lookups, a layer norm, a dropout, its own add
EAGER = _table([
    ("input_ids", "placeholder", "placeholder", "", "", "", 0.0001),
    ("embeddings_word_embeddings", "call_function", "embedding", "embeddings.word_embeddings", "recorded", "", 0.030),
    ("embeddings_position_embeddings", "call_function", "embedding", "embeddings.position_embeddings", "recorded", "", 0.006),
    ("embeddings_add", "call_function", "add", "embeddings", "recorded", "", 0.009),
    ("embeddings_LayerNorm", "call_function", "layer_norm", "embeddings.LayerNorm", "recorded", "", 0.021),
    ("embeddings_dropout", "call_function", "dropout", "embeddings.dropout", "recorded", "", 0.013),
    ("encoder_layer_0_dense", "call_function", "linear", "encoder.layer.0.dense", "recorded", "", 0.050),
    ("encoder_layer_0_gelu", "call_function", "gelu", "encoder.layer.0.act", "recorded", "", 0.040),
    ("pooler_dense", "call_function", "linear", "pooler.dense", "recorded", "", 0.010),
])
# the compiled program: one fused kernel for the embeddings (charged to their common module),
# the encoder's linear an extern call, its gelu a kernel of its own
COMPILED = _table([
    ("embeddings_fused", "kernel", "fused", "embeddings", "common",
     "embeddings_word_embeddings,embeddings_position_embeddings,embeddings_add,embeddings_LayerNorm", 0.005),
    ("encoder_layer_0_dense", "extern", "linear", "encoder.layer.0.dense", "recorded", "encoder_layer_0_dense", 0.045),
    ("encoder_layer_0_gelu", "kernel", "gelu", "encoder.layer.0.act", "recorded", "encoder_layer_0_gelu", 0.004),
    ("pooler_dense", "extern", "linear", "pooler.dense", "recorded", "pooler_dense", 0.009),
])


@pytest.mark.parametrize("depth", [1, 2, 3, 4, 5])
def test_every_depth_adds_up_to_both_totals(depth):
    blocks = compare_blocks(EAGER, COMPILED, depth=depth)
    assert blocks["a_ms"].sum() == pytest.approx(EAGER["median_ms"].sum(), abs=1e-12)
    assert blocks["b_ms"].sum() == pytest.approx(COMPILED["median_ms"].sum(), abs=1e-12)
    assert blocks.attrs["a_total_ms"] == pytest.approx(EAGER["median_ms"].sum())


@pytest.mark.parametrize("depth", [2, 3])
def test_children_computed_by_a_parents_kernel_are_folded_into_it(depth):
    blocks = compare_blocks(EAGER, COMPILED, depth=depth)
    # word/position embeddings and LayerNorm: their compiled time is the parent's fused kernel
    assert not {"embeddings.word_embeddings", "embeddings.position_embeddings", "embeddings.LayerNorm"} & set(blocks.index)
    row = blocks.loc["embeddings"]
    assert row["a_ms"] == pytest.approx(0.030 + 0.006 + 0.009 + 0.021)
    assert row["b_ms"] == pytest.approx(0.005) and row["folded"] == 3
    assert row["speedup"] == pytest.approx(0.066 / 0.005)
    # the dropout is none of the kernel's origins (compiled away): it keeps its own row
    assert blocks.loc["embeddings.dropout", "b_ms"] == 0 and blocks.loc["embeddings.dropout", "folded"] == 0
    assert blocks.attrs["one_sided"] == {"a": ["embeddings.dropout"], "b": []}  # and it is said
    assert "only in a: embeddings.dropout" in render_blocks(blocks)
    assert blocks.attrs["folded"] == {"embeddings": ["embeddings.LayerNorm", "embeddings.position_embeddings",
                                                     "embeddings.word_embeddings"]}
    assert blocks.attrs["notes"] and "embeddings (3)" in blocks.attrs["notes"][0]
    # a block whose kernels are all its own is not folded
    if depth == 3:
        assert "encoder.layer.0" in blocks.index and blocks.loc["encoder.layer.0", "folded"] == 0


def test_blocks_below_a_kernel_of_their_own_keep_their_rows():
    blocks = compare_blocks(EAGER, COMPILED, depth=4)
    assert {"encoder.layer.0.dense", "encoder.layer.0.act", "pooler.dense"} <= set(blocks.index)
    assert blocks.loc["encoder.layer.0.act", "speedup"] == pytest.approx(10.0)


def test_a_kernel_that_names_no_origins_folds_every_child():
    compiled = COMPILED.copy()
    compiled["origins"] = ""
    blocks = compare_blocks(EAGER, compiled, depth=2)
    assert not [s for s in blocks.index if s.startswith("embeddings.")]
    assert blocks.loc["embeddings", "folded"] == 4


def test_a_kernel_spanning_top_level_blocks_folds_those_it_computes_into_the_root():
    # a kernel fusing the pooler's linear with work at the root (charged to the root)
    compiled = pd.concat([COMPILED.drop(index="pooler_dense"),
                          _table([("tail", "kernel", "fused", "", "common", "pooler_dense,mean", 0.001)])])
    compiled["pct"] = compiled["median_ms"] / compiled["median_ms"].sum() * 100
    eager = pd.concat([EAGER, _table([("mean", "call_method", "mean", "", "", "", 0.004)])])
    eager["pct"] = eager["median_ms"] / eager["median_ms"].sum() * 100
    for depth in (1, 2, 3):
        blocks = compare_blocks(eager, compiled, depth=depth)
        assert not [s for s in blocks.index if s.startswith("pooler")]
        assert blocks.loc["(root)", "a_ms"] == pytest.approx(0.004 + 0.010)
        assert blocks.loc["(root)", "b_ms"] == pytest.approx(0.001)
        assert blocks.loc["embeddings", "folded"] == (3 if depth > 1 else 0)  # the rest as before
        assert "encoder" in blocks.index or "encoder.layer" in blocks.index or "encoder.layer.0" in blocks.index
        assert blocks["a_ms"].sum() == pytest.approx(eager["median_ms"].sum())


def test_render_says_what_was_folded():
    from fxprof.views.text import render_blocks

    text = render_blocks(compare_blocks(EAGER, COMPILED, depth=2), "eager", "compiled")
    assert "folded" in text.splitlines()[4]  # the column
    assert "folded: 1 block(s) hold their child blocks" in text and "embeddings (3)" in text


def test_eager_against_compiled_node_by_node_says_use_by_scope_in_one_line():
    line = use_blocks_instead(EAGER, COMPILED, 3, 10)
    assert "b the compiled program's kernels" in line and "--by scope" in line and 'by="scope"' in line
    assert use_blocks_instead(EAGER, EAGER, 9, 9) == "" and use_blocks_instead(COMPILED, COMPILED, 4, 4) == ""
    with pytest.warns(fxprof.ComparabilityWarning) as caught:
        diff = fxprof.compare(EAGER, COMPILED)
    assert len(caught) == 1 and len(diff.attrs["warnings"]) == 1
    assert "--by scope" in diff.attrs["warnings"][0] and "(3 of 10 names in both)" in diff.attrs["warnings"][0]
