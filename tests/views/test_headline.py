"""One headline per question, the same on every page (issue 32): the median run first, the
summed node medians second and labelled, coverage of the same statistic; the default table
shows the roofline's answer and the flagged spread; the report's look-here-first panel."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
import pytest
import torch
import torchvision

import fxprof
from fxprof.views.headline import run_figures
from fxprof.views.lookfirst import look_here_first
from fxprof.views.tables import format_ms
from fxprof.views.text import spread_notes


@pytest.fixture(scope="module")
def r18():
    torch.manual_seed(0)
    model = torchvision.models.resnet18(weights=None).eval()
    return fxprof.profile(model, torch.randn(1, 3, 32, 32), warmup=1, iters=6, peaks=(0.05, 10.0))


def test_the_run_line_leads_with_the_median_run_and_its_parts_add_up(r18):
    f = run_figures(r18)
    assert f.run_ms == pytest.approx(float(np.median(r18.kept_totals())))
    assert f.nodes_ms == pytest.approx(float(r18.df["median_ms"].sum()))
    assert r18.coverage == pytest.approx(f.nodes_ms / f.run_ms)  # the same statistic: medians
    line = next(line for line in r18.summary(width=None).splitlines() if line.startswith("run:"))
    assert line.startswith(f"run: median {format_ms(f.run_ms)} (IQR ")
    assert f"{format_ms(f.nodes_ms)} summed median node time" in line
    if f.outside_ms > 0:
        assert f"{format_ms(f.outside_ms)} of it outside every node" in line
        assert f.nodes_ms + f.outside_ms == pytest.approx(f.run_ms)


def test_the_notebook_and_the_report_say_the_same_figures(r18):
    pytest.importorskip("plotly")
    from fxprof.views.report import render_report

    f = run_figures(r18)
    page = render_report(r18)
    cards = re.findall(r'<div class="card"><b>([^<]*)</b><span>([^<]*)</span></div>', page)
    assert cards[:3] == [(format_ms(f.run_ms), "median run"), (format_ms(f.nodes_ms), "sum of node medians"),
                         (format_ms(f.outside_ms), "outside every node")]
    notebook = r18._repr_html_()
    assert f"run: median {format_ms(f.run_ms)}" in notebook


def test_the_default_table_shows_headroom_and_limit_when_peaks_are_known(r18):
    text = r18.summary(width=None, top=5)
    header = next(line for line in text.splitlines() if line.startswith("node "))
    assert header.split()[-3:-1] == ["headroom", "limit"] or header.split()[-2:] == ["headroom", "limit"]
    torch.manual_seed(0)
    bare = fxprof.profile(torchvision.models.resnet18(weights=None).eval(), torch.randn(1, 3, 32, 32), warmup=0, iters=2,
                          peaks=None)
    header = next(line for line in bare.summary(width=None, top=5).splitlines() if line.startswith("node "))
    assert "headroom" not in header and "limit" not in header


def test_flagged_nodes_below_the_fold_are_named_with_the_command():
    flags = pd.Series(["high", "", "tail", "high", ""], index=["a", "b", "c", "d", "e"])
    notes = spread_notes(flags, shown=["a", "b"])
    assert any(n.startswith("spread: 2 of the flagged node(s) are below the rows shown: c, d ") for n in notes)
    assert any("fxprof show FILE --sort iqr_ms" in n for n in notes)
    assert not any("below the rows shown" in n for n in spread_notes(flags, shown=list(flags.index)))


def test_look_here_first_lists_the_most_headroom(r18):
    panel = look_here_first(r18.df)
    top = r18.df.sort_values("headroom_ms", ascending=False).index[0]
    assert panel.index("<td style=") < panel.index(top)
    rows = re.findall(r"<tr><td[^>]*>([^<]*)</td>", panel)
    assert rows[0] == top and len(rows) == 5
    assert "time above the roof, all nodes, by limit" in panel
    assert look_here_first(r18.df.drop(columns=["headroom_ms"])) == ""


def test_the_tree_can_be_coloured_by_roof_pct(r18):
    pytest.importorskip("plotly")
    from fxprof.views.report import tree_figure

    fig = tree_figure(r18)
    buttons = fig.layout.updatemenus[0].buttons
    assert [b.label for b in buttons] == ["colour: op kind", "colour: % of roof"]
    by_roof = buttons[1].args[0]["marker.colors"][0]
    ids = list(fig.data[0].ids)
    assert len(by_roof) == len(ids) and by_roof != list(fig.data[0].marker.colors)
