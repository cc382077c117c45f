"""The roofline's ``bytes``: what each node really touches (issue 31 c, 36.9). Lookups, gathers,
slices, views and in-place ops count the part of a tensor they read or write, not the tensor;
an empty batch reads no weight."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import fxprof

F4 = 4  # bytes of a float32


class Lookups(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.table = nn.Embedding(30522, 256)
        self.register_buffer("rows", torch.randn(1000, 64))

    def forward(self, ids, x, src):
        e = self.table(ids)                                   # 64 rows of the table
        s = torch.index_select(self.rows, 0, ids[0, :8])      # 8 rows of 64
        g = torch.gather(x, 1, ids[:, :4] % 16)               # 4 elements of x
        c = x[:, :4].contiguous()                             # a copy of 4 of x's 16 columns
        v = x.view(8, 8)                                      # a view: nothing
        x.add_(1.0)                                           # in place: read + write x once
        src[:, :8] = 0.0                                      # writes 8 of src's 32 elements
        return e, s, g, c, v, src


def test_lookups_gathers_slices_views_and_in_place_ops_count_what_they_touch():
    ids = torch.randint(0, 1000, (1, 64), generator=torch.Generator().manual_seed(0))
    x, src = torch.randn(4, 16), torch.randn(1, 32)
    prof = fxprof.profile(Lookups(), ids, x, src, warmup=0, iters=1, peaks=(0.1, 10))
    b = prof.df["bytes"]
    ints = 8  # int64 indices
    # 64 indices read, 64 rows of 256 floats read, 64 x 256 written: not the 31 MB table
    assert b["table"] == 64 * ints + 2 * 64 * 256 * F4
    index_select = next(n for n in b.index if n.startswith("index_select"))
    assert b[index_select] == 8 * ints + 2 * 8 * 64 * F4
    gather = next(n for n in b.index if n.startswith("gather"))
    assert b[gather] == 4 * ints + 2 * 4 * F4
    contiguous = next(n for n in b.index if n.startswith("contiguous"))
    assert b[contiguous] == 2 * 4 * 4 * F4
    assert b["view"] == 0
    add_ = next(n for n in b.index if n.startswith("add"))
    assert b[add_] == 2 * 64 * F4
    setitem = next(n for n in b.index if n.startswith("setitem"))
    # writes the slice and reads nothing of it (plus the 0-d tensor holding 0.0, where dynamo makes one)
    assert 8 * F4 <= b[setitem] <= 8 * F4 + 8


class Temporaries(nn.Module):
    """A called module whose temporaries stay inside: only its input, weight and output count."""

    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.randn(32, 32))

    def forward(self, x):
        h = x @ self.w          # temporary
        h = h * 2.0             # temporary
        return h + 1.0          # output


def test_a_leaf_module_counts_its_inputs_and_outputs_not_its_temporaries():
    outer = nn.Sequential(Temporaries())
    prof = fxprof.profile(outer, torch.randn(4, 32), warmup=0, iters=1, peaks=(0.1, 10), leaf_modules=[Temporaries])
    assert prof.df.loc[prof.df["kind"] == "temporaries", "bytes"].item() == 4 * 32 * F4 + 32 * 32 * F4 + 4 * 32 * F4


def test_an_empty_batch_reads_no_weight_and_the_verdict_says_the_input_is_empty():
    import torchvision

    model = torchvision.models.resnet18(weights=None).eval()
    prof = fxprof.profile(model, torch.randn(0, 3, 32, 32), warmup=1, iters=3, peaks=(0.05, 10))
    convs = prof.df[prof.df["kind"] == "conv2d"]
    assert len(convs) == 20 and (convs["bytes"] == 0).all() and (convs["roof_pct"].fillna(0) <= 110).all()
    notes = [line for line in str(prof).splitlines() if line.startswith("roofline:")]
    assert any("ran on empty tensors" in line and "the input is degenerate" in line for line in notes), notes
    assert not any("ran above their roof" in line for line in notes), notes


@pytest.mark.slow
@pytest.mark.parametrize("family", ["bert", "gpt2"])
def test_transformer_lookups_read_their_rows_not_their_tables(family):
    T = pytest.importorskip("transformers")
    torch.manual_seed(0)
    if family == "bert":
        model = T.BertModel(T.BertConfig(num_hidden_layers=2, hidden_size=256, num_attention_heads=4, intermediate_size=1024))
    else:
        model = T.GPT2Model(T.GPT2Config(n_layer=2, n_embd=256, n_head=4))
    ids = torch.randint(0, 1000, (1, 64), generator=torch.Generator().manual_seed(0))
    prof = fxprof.profile(model.eval(), ids, warmup=1, iters=3, peaks=(0.25, 40))
    df = prof.df
    lookups = df[df["kind"] == "embedding"]
    assert len(lookups) >= 2
    for name, row in lookups.iterrows():  # each: its 64 indices, 64 rows (or the whole table if smaller), 64 rows out
        table_rows = 2 if "token_type" in name else 64
        assert row["bytes"] == 64 * 8 + (table_rows + 64) * 256 * F4, name
    # no node charged for more than it touches: the largest is a linear layer with its weight
    assert df["bytes"].max() < 2e6
