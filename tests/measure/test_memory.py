"""Memory per node (fxprof.measure.passes.memory, issue 34) against sizes known in advance, on the CPU.

Every size below is computed from shapes and dtypes; the pass must find it within 5%
(most are exact: the CPU allocator reports the bytes asked for)."""

from __future__ import annotations

import pandas as pd
import pytest
import torch
import torchvision
from conftest import requires_cuda
from torch import nn

import fxprof
from fxprof.core.memory import memory_summary
from fxprof.measure.passes.memory import account
from fxprof.views.memory import format_bytes

F32 = 4


def _nbytes(*tensors: torch.Tensor) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


def test_a_linear_output_and_what_the_run_holds_after_it():
    torch.manual_seed(0)
    lin = nn.Linear(256, 512)
    x = torch.randn(64, 256)
    prof = fxprof.profile(lin, x, warmup=0, iters=1, peaks=None)
    row = prof.df.loc["linear"]
    out = 64 * 512 * F32
    assert row["mem_delta_bytes"] == pytest.approx(out, rel=0.05)
    assert row["mem_peak_bytes"] == pytest.approx(out, rel=0.05)
    assert row["mem_temp_bytes"] == 0
    # after it: the parameters, the input (the caller holds it) and the output
    held = _nbytes(*lin.parameters(), x)
    assert row["mem_live_bytes"] == pytest.approx(held + out, rel=0.05)
    assert prof.df.loc["input_1", "mem_live_bytes"] == pytest.approx(held, rel=0.05)
    assert prof.df["mem_saved_bytes"].isna().all()  # no backward: nothing saved for one


@torch.fx.wrap
def _scratch(x: torch.Tensor) -> torch.Tensor:
    big = x.repeat(100, 1)  # 100 x the input, freed before the function returns
    return big.sum(0, keepdim=True)


class _WithTemporary(nn.Module):
    def forward(self, x):
        y = torch.relu(x)
        z = _scratch(y)
        return z + 1


def test_a_node_with_a_large_temporary_holds_the_peak():
    x = torch.randn(8, 4096)
    prof = fxprof.profile(_WithTemporary(), x, warmup=0, iters=1, peaks=None)
    row = prof.df.loc["_scratch"]
    big = 100 * _nbytes(x)
    out = 4096 * F32
    assert row["mem_temp_bytes"] == pytest.approx(big, rel=0.05)
    assert row["mem_delta_bytes"] == pytest.approx(out, rel=0.05)  # only its output stays
    assert row["mem_peak_bytes"] == pytest.approx(big + out, rel=0.05)
    summary = prof.memory
    assert summary.peak_node == "_scratch"
    assert summary.breakdown["temporaries"] == pytest.approx(big, rel=0.05)
    # the input, y (relu's output) and _scratch's own output: the activations
    assert summary.breakdown["activations"] == pytest.approx(2 * _nbytes(x) + out, rel=0.05)
    assert summary.peak_bytes == pytest.approx(big + out + 2 * _nbytes(x), rel=0.05)
    assert f"memory: peak {format_bytes(summary.peak_bytes)} during _scratch (temporaries" in prof.summary()


class _Widening(nn.Module):
    """The peak sits at ``wide``: its output is 64x the input, and everything after is small."""

    def __init__(self):
        super().__init__()
        self.narrow = nn.Linear(128, 128)
        self.wide = nn.Linear(128, 128 * 64)
        self.back = nn.Linear(128 * 64, 4)

    def forward(self, x):
        return self.back(self.wide(torch.relu(self.narrow(x)))).sum(1)


def test_the_peak_sits_at_the_known_node_and_values_die_after_their_last_use():
    torch.manual_seed(0)
    model = _Widening()
    x = torch.randn(32, 128)
    prof = fxprof.profile(model, x, warmup=0, iters=1, peaks=None)
    df = prof.df
    wide_out = 32 * 128 * 64 * F32
    params = _nbytes(*model.parameters())
    # wide's output is alive while back runs: back's own output (32x4 floats) tips the peak there
    assert prof.memory.peak_node in ("wide", "back")
    assert prof.memory.peak_bytes == pytest.approx(params + _nbytes(x) + wide_out, rel=0.05)
    assert prof.memory.breakdown["parameters"] == params
    # values are freed after their last use, as eager code does: after back, wide's output is gone
    assert df.loc["wide", "mem_live_bytes"] == pytest.approx(params + _nbytes(x) + wide_out, rel=0.05)
    assert df.loc["back", "mem_live_bytes"] < params + _nbytes(x) + wide_out / 10
    assert df.loc["relu", "mem_live_bytes"] == pytest.approx(params + _nbytes(x) + 32 * 128 * F32, rel=0.05)


def test_a_training_step_holds_its_parameters_and_their_gradients():
    torch.manual_seed(0)
    # the first layer's weight gradient (8 MB) is made last in the backward: every gradient
    # exists at the step's peak
    model = nn.Sequential(nn.Linear(2048, 1024), nn.ReLU(), nn.Linear(1024, 1))
    x = torch.randn(64, 2048)
    before = [p.detach().clone() for p in model.parameters()]
    prof = fxprof.profile(model, x, warmup=1, iters=1, backward=True, peaks=None)
    params = _nbytes(*model.parameters())
    summary = prof.memory
    assert summary.breakdown["parameters"] == params
    assert summary.breakdown["gradients"] == pytest.approx(params, rel=0.05)
    assert summary.peak_node.startswith("bw")
    # autograd keeps relu's output (64x1024 floats) for the backward; the input and the
    # weights are held anyway and are not counted
    assert summary.saved_bytes == pytest.approx(64 * 1024 * F32, rel=0.05)
    df = prof.df
    forward = df[df["phase"] == "forward"]
    assert forward["mem_saved_bytes"].sum() == summary.saved_bytes
    assert forward.loc["fw0:relu", "mem_saved_bytes"] == 64 * 1024 * F32
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))  # nothing changed
    text = prof.summary()
    assert "memory: peak" in text and "saved for backward 262 kB" in text
    assert "mem_saved" in text and "mem_live" in text


def test_memory_columns_roll_up_sort_and_survive_save_and_load(tmp_path):
    model = torchvision.models.resnet18(weights=None).eval()
    prof = fxprof.profile(model, torch.randn(1, 3, 32, 32), warmup=0, iters=1, peaks=None)
    df = prof.df
    assert df["mem_peak_bytes"].notna().all() and (df["mem_live_bytes"] > 0).all()
    groups = prof.group_by("scope")
    assert groups.loc["layer1", "mem_delta_bytes"] == df[df["scope"].str.startswith("layer1")]["mem_delta_bytes"].sum()
    assert groups.loc["layer1", "mem_peak_bytes"] == df[df["scope"].str.startswith("layer1")]["mem_peak_bytes"].max()
    top = prof.df.sort_values("mem_peak_bytes", ascending=False).index[0]
    assert prof.summary(sort="mem_peak_bytes").split("\n---")[1].splitlines()[1].split()[0] == top
    cols = ["mem_delta_bytes", "mem_temp_bytes", "mem_peak_bytes", "mem_live_bytes"]
    for ext in ("json", "npz"):
        path = tmp_path / f"p.{ext}"
        prof.save(path)
        back = fxprof.load(path)
        pd.testing.assert_frame_equal(back.df[cols], df[cols], check_dtype=False)
        assert back.memory == prof.memory
    prof.to_csv(tmp_path / "p.csv")
    table = fxprof.read_csv(tmp_path / "p.csv")
    pd.testing.assert_frame_equal(table[cols], df[cols], check_dtype=False)


def test_no_memory_and_the_off_switch_on_the_command_line():
    prof = fxprof.profile(nn.Linear(4, 4), torch.randn(2, 4), warmup=0, iters=1, memory=False, peaks=None)
    assert prof.memory is None and "memory:" not in prof.summary()
    assert "mem_peak" not in prof.summary()


def test_account_pairs_frees_with_allocations_by_address():
    # two nodes: a allocates 100 (kept) and 50 (freed inside); b frees a's 100 and allocates 10
    ranges = [("a", 10, 20), ("b", 30, 40)]
    events = [(11, 1, 100), (12, 2, 50), (13, 2, -50), (31, 3, 10), (32, 1, -100), (33, 99, -7)]
    done = account(ranges, events, {"parameters": 1000, "inputs": 5})
    a, b = done.records["a"], done.records["b"]
    assert (a["mem_delta_bytes"], a["mem_temp_bytes"], a["mem_peak_bytes"], a["mem_live_bytes"]) == (100, 50, 150, 1105)
    assert (b["mem_delta_bytes"], b["mem_temp_bytes"], b["mem_peak_bytes"], b["mem_live_bytes"]) == (-90, 0, 10, 1015)
    assert done.summary["peak_bytes"] == 1155 and done.summary["peak_node"] == "a"
    assert done.summary["breakdown"]["temporaries"] == 50 and done.summary["breakdown"]["activations"] == 105
    assert memory_summary({"memory": done.summary}).peak_bytes == 1155


def test_format_bytes():
    assert format_bytes(412_300_000) == "412 MB"
    assert format_bytes(1_049_000_000) == "1.05 GB"
    assert format_bytes(512) == "512 B"
    assert format_bytes(-2048, sign=True) == "-2.05 kB"
    assert format_bytes(None) == "" and format_bytes(float("nan")) == ""


@requires_cuda
def test_memory_on_the_gpu_means_what_it_means_on_the_cpu():
    lin = nn.Linear(256, 512).cuda()
    x = torch.randn(64, 256, device="cuda")
    user_peak = torch.cuda.max_memory_allocated()
    prof = fxprof.profile(lin, x, warmup=1, iters=1, peaks=None)
    assert torch.cuda.max_memory_allocated() >= user_peak
    row = prof.df.loc["linear"]
    out = 64 * 512 * F32  # a multiple of 512: the caching allocator's rounding adds nothing
    assert row["mem_delta_bytes"] == pytest.approx(out, rel=0.05)
    assert row["mem_live_bytes"] == pytest.approx(_nbytes(*lin.parameters(), x) + out, rel=0.05)
    assert prof.memory is not None and prof.memory.breakdown["parameters"] > 0


def test_compare_sets_the_nodes_and_blocks_peaks_side_by_side():
    x = torch.randn(64, 256)
    a = fxprof.profile(nn.Sequential(nn.Linear(256, 512)), x, warmup=0, iters=3, peaks=None)
    b = fxprof.profile(nn.Sequential(nn.Linear(256, 1024)), x, warmup=0, iters=3, peaks=None)
    diff = fxprof.compare(a, b, warn=False)
    row = diff.loc["_0"]
    assert row["a_mem_peak_bytes"] == 64 * 512 * F32 and row["b_mem_peak_bytes"] == 64 * 1024 * F32
    assert row["delta_mem_peak_bytes"] == 64 * 512 * F32
    blocks = fxprof.compare(a, b, by="scope", warn=False)
    assert blocks.loc["0", "delta_mem_peak_bytes"] == 64 * 512 * F32


def test_the_notebook_view_shows_the_memory_line_and_columns():
    prof = fxprof.profile(nn.Sequential(nn.Linear(64, 128), nn.ReLU()), torch.randn(8, 64), warmup=0, iters=2, peaks=None)
    page = prof._repr_html_()
    assert f"memory: peak {format_bytes(prof.memory.peak_bytes)}" in page
    assert ">mem_peak<" in page and ">mem_live<" in page
    assert format_bytes(prof.df.loc["_0", "mem_live_bytes"]) in page


def test_a_peak_level_reached_again_names_every_node_that_reaches_it(tmp_path):
    """Issue 47, item 16: in a stack of equal Linear+ReLU layers every layer reaches the same
    level (its input and its output held), and every row shows the same mem_peak; the header
    named one node as if it alone held the peak. It now says the level was reached first there
    and again during the others, in run order; kept through save and load."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 64)).eval()
    prof = fxprof.profile(model, torch.randn(32, 64), warmup=0, iters=1, peaks=None)
    summary = prof.memory
    assert summary.peak_node == "_1" and summary.peak_again == ("_2", "_3", "_4")
    line = next(x for x in prof.summary(top=0).splitlines() if x.startswith("memory:"))
    assert line.endswith("; reached first there, the same level again during _2, _3, _4"), line
    prof.save(tmp_path / "p.json")
    assert fxprof.load(tmp_path / "p.json").memory.peak_again == ("_2", "_3", "_4")
    single = fxprof.profile(_WithTemporary(), torch.randn(64, 64), warmup=0, iters=1, peaks=None)
    assert single.memory.peak_again == () and "again" not in single.summary(top=0)
