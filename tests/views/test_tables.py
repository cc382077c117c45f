"""Tables that read well: time units, fitting a width, sorting and columns everywhere."""

from __future__ import annotations

import os
import pathlib

import pandas as pd
import pytest
import torch
from conftest import FakeCostModel, FakeTimer, Work

import fxprof
from fxprof.views.options import ViewOptions
from fxprof.views.tables import format_ms, render_fitted, shorten, terminal_width
from fxprof.views.text import render_compare

GOLDEN = pathlib.Path(__file__).parents[1] / "golden"


def _profile(clock, stem_ms=(0.0183, 0.0191), head_ms=(3.0, 2.0, 4.0, 3.0)):
    net = FakeCostModel(clock)
    net.stem.costs_ms, net.head.costs_ms = list(stem_ms), list(head_ms)
    prof = fxprof.profile(net, torch.ones(2, 3), warmup=0, iters=4, timer=FakeTimer(clock), leaf_modules=[Work],
                          name="FakeCostModel", memory=False)  # the goldens are about time; memory: test_memory.py
    prof.meta.update(torch="X", threads=1, device="cpu", inputs=["Tensor(shape=[2, 3])"])
    return prof


@pytest.mark.parametrize("ms, text", [
    (1.5655, "1.57 ms"), (0.0183, "18.3 us"), (0.001, "1.00 us"), (12.345, "12.3 ms"), (123.4, "123 ms"),
    (1234.5, "1.23 s"), (0.0000456, "45.6 ns"), (0.99996, "1.00 ms"), (0.0, "0"), (float("nan"), ""),
    (None, ""), (-0.5, "-500 us"),
])
def test_times_get_the_unit_that_suits_their_size(ms, text):
    assert format_ms(ms) == text


def test_differences_carry_a_sign():
    assert format_ms(0.25, sign=True) == "+250 us" and format_ms(-0.25, sign=True) == "-250 us"


def test_shorten_keeps_both_ends():
    assert shorten("encoder.layers.11.self_attn.out_proj", 16) == "encoder…out_proj"
    assert shorten("short", 16) == "short"


def test_golden_table_fitted_to_60_columns(clock):
    """The fake profile at 60 columns: units, shortened header lines, hidden columns named."""
    text = _profile(clock).summary(width=60) + "\n"
    golden = GOLDEN / "fake_summary_w60.txt"
    if os.environ.get("FXPROF_UPDATE_GOLDEN"):
        golden.write_text(text)
    assert text == golden.read_text(), "regenerate on purpose with FXPROF_UPDATE_GOLDEN=1"
    assert max(len(line) for line in text.splitlines()) <= 60


def test_width_drops_the_least_important_columns_first_and_says_so(clock):
    prof = _profile(clock)
    full = prof.summary()
    assert "hidden" not in full
    narrow = prof.summary(width=50)
    assert all(len(line) <= 50 for line in narrow.splitlines())
    note = next(line for line in narrow.splitlines() if line.startswith("hidden to fit 50 columns"))
    assert "cum_pct" in note and "mean" in note
    table_header = next(line for line in narrow.splitlines() if line.startswith("node "))
    assert "pct" in table_header.split()  # the share is never dropped


def test_long_names_are_shortened_before_columns_are_dropped():
    table = pd.DataFrame({"kind": ["linear"], "median_ms": [0.5], "pct": [100.0]},
                         index=pd.Index(["encoder_layers_11_self_attn_out_proj_linear"], name="node"))
    text, dropped, shortened = render_fitted(table, width=50)
    assert shortened and dropped == [] and "…" in text
    assert all(len(line) <= 50 for line in text.splitlines())


def test_terminal_width_reads_columns_and_is_unlimited_in_a_pipe(monkeypatch, tmp_path):
    monkeypatch.setenv("COLUMNS", "77")
    assert terminal_width() == 77
    monkeypatch.delenv("COLUMNS")
    with open(tmp_path / "out.txt", "w") as handle:
        assert terminal_width(handle) is None


def test_csv_keeps_full_precision_in_ms_while_text_rounds(clock, tmp_path):
    prof = _profile(clock, stem_ms=(0.012345,))  # the fake clock counts whole nanoseconds
    text = prof.summary()
    assert "12.3 us" in text and "0.012345" not in text
    prof.to_csv(tmp_path / "p.csv")
    back = fxprof.read_csv(tmp_path / "p.csv")
    assert back.loc["stem", "median_ms"] == prof.df.loc["stem", "median_ms"] == pytest.approx(0.012345)
    assert ",0.012345," in (tmp_path / "p.csv").read_text()


def test_zero_top_means_every_row_everywhere(clock):
    prof = _profile(clock)
    assert "more nodes" not in prof.summary(top=0)
    assert prof.summary(top=0) == prof.summary(top=None)
    assert "more nodes" in prof.summary(top=3)
    assert prof._repr_html_().count("<tr>") == 1 + 8
    from fxprof.views.notebook import render_html

    assert render_html(prof, top=0).count("<tr>") == 1 + 8


def _rows(text: str) -> list[str]:
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("---")) + 1
    return [line.split()[0] for line in lines[start:] if line and not line.startswith(("...", "spread", "hidden"))]


def test_ascending_and_group_sorting_and_columns(clock):
    prof = _profile(clock)
    assert _rows(prof.summary(sort="pct"))[:2] == ["head", "stem"]
    assert _rows(prof.summary(sort="median_ms", ascending=True))[-2:] == ["stem", "head"]
    groups = prof.summary(group_by="op", sort="nodes", columns=["nodes", "pct"])
    header = next(line for line in groups.splitlines() if line.startswith("op "))
    assert header.split() == ["op", "nodes", "pct"]
    assert _rows(groups)[0] == "work"  # two nodes: the largest group by count
    by_name = _rows(prof.summary(group_by="op", sort="op", ascending=True))
    assert by_name == sorted(by_name)
    with pytest.raises(ValueError, match="cannot sort a roll-up by 'median'"):
        prof.summary(group_by="op", sort="median")


def test_compare_sorts_and_picks_columns(clock):
    a = _profile(clock)
    b = _profile(clock, stem_ms=(0.05,), head_ms=(1.0,))
    diff = fxprof.compare(a, b)
    text = render_compare(diff, "a", "b", ViewOptions.of(sort="ratio", columns=["kind", "a_ms", "b_ms", "ratio"]))
    header = next(line for line in text.splitlines() if line.startswith("node "))
    assert header.split() == ["node", "kind", "a", "b", "ratio"]
    assert _rows(text)[0] == "stem"  # ratio 2.7, the largest
    assert "+" in render_compare(diff, "a", "b")  # signed deltas with units
    with pytest.raises(ValueError, match="cannot sort a comparison by 'speed'"):
        render_compare(diff, view=ViewOptions(sort="speed"))
