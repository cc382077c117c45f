"""Jupyter display (``_repr_html_``) and the matplotlib plots, on exact fake-clock profiles."""

from __future__ import annotations

import html
import re
import sys

import matplotlib

matplotlib.use("Agg")  # headless: never open a window

import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
from conftest import FakeCostModel, FakeTimer, Work  # noqa: E402

import fxprof  # noqa: E402
from fxprof.core.nodes import NodeInfo  # noqa: E402
from fxprof.core.profile import RUN_COLUMNS, SAMPLE_COLUMNS  # noqa: E402
from fxprof.views.notebook import render_html  # noqa: E402
from fxprof.views.plot import MISSING_MATPLOTLIB  # noqa: E402

# The fake profile (see conftest): head costs 3, 2, 4, 3 ms over the 4 runs (mean and median
# 3 ms, 75%), stem 1 ms each run (25%), the six other nodes 0 ms; 8 nodes in all.


def _profile(clock, stem_ms=(1.0,), head_ms=(3.0, 2.0, 4.0, 3.0), model=FakeCostModel):
    net = model(clock)
    net.stem.costs_ms, net.head.costs_ms = list(stem_ms), list(head_ms)
    return fxprof.profile(net, torch.ones(2, 3), warmup=0, iters=4, timer=FakeTimer(clock), leaf_modules=[Work])


def _empty_profile() -> fxprof.Profile:
    return fxprof.Profile([], pd.DataFrame({c: [] for c in SAMPLE_COLUMNS}), pd.DataFrame({c: [] for c in RUN_COLUMNS}))


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def _bar_widths(ax) -> list[float]:
    return [round(p.get_width(), 6) for p in ax.patches]


def _ytick_labels(ax) -> list[str]:
    return [t.get_text() for t in ax.get_yticklabels()]


# ------------------------------------------------------------------------- HTML display


def _html_rows(page: str) -> list[str]:
    return re.findall(r"<tr>(.*?)</tr>", page, re.S)


def _cells(row: str) -> list[str]:
    return [html.unescape(c).strip() for c in re.findall(r"<t[hd][^>]*>(.*?)</t[hd]>", row, re.S)]


def _share_bars(page: str) -> dict[str, float]:
    """The share bar of each row: node name -> percent of its cell it fills (Styler's CSS)."""
    widths = {}
    for i, row in enumerate(_html_rows(page)[1:]):
        found = re.search(r"_row%d_col\d+ \{[^}]*?#f4a261 ([\d.]+)%%" % i, page)
        if found:
            widths[_cells(row)[0]] = float(found.group(1))
    return widths


def test_repr_html_has_the_header_and_the_top_nodes_with_share_bars(clock):
    prof = _profile(clock)
    page = prof._repr_html_()
    assert page == render_html(prof)
    assert "fxprof: FakeCostModel | timer fake on cpu | 0 warm-up + 4 timed runs" in page
    assert "nodes account for 100.0% of it (coverage)" in page
    rows = _html_rows(page)
    assert len(rows) == 1 + 8  # the header row, then every node (fewer than 20)
    header = _cells(rows[0])
    # plain words; every row with its scope (a module's node too: issue 31 (e)); memory on by default
    assert header == ["node", "kind", "scope", "median", "iqr", "pct", "cum_pct", "mem_peak", "mem_live"]
    assert _cells(rows[1])[:5] == ["head", "work", "head", "3.00 ms", "500 us"]  # sorted by share, units
    assert _cells(rows[2])[0] == "stem"
    # bars are scaled to the largest share: head (75%) fills its cell, stem (25%) a third of it
    widths = _share_bars(page)
    assert widths["head"] == pytest.approx(100.0) and widths["stem"] == pytest.approx(100 / 3, abs=0.1)
    assert "more nodes" not in page
    assert "<script" not in page


def test_repr_html_aligns_headers_with_their_cells(clock):
    page = render_html(_profile(clock))
    aligned = dict(re.findall(r"th\.col_heading\.col(\d+) \{\s*text-align: (\w+);", page))
    header = _cells(_html_rows(page)[0])
    by_name = {header[int(i)]: a for i, a in aligned.items()}
    assert by_name["node"] == by_name["kind"] == "left"
    assert by_name["median"] == by_name["pct"] == "right"


def test_repr_html_counts_the_nodes_it_leaves_out(clock):
    prof = _profile(clock)
    page = render_html(prof, top=2)
    assert len(_html_rows(page)) == 1 + 2
    assert "... 6 more nodes (0.0% of node time)" in page
    in_graph_order = render_html(prof, top=1, sort=None)
    assert _cells(_html_rows(in_graph_order)[1])[0] == "x"


def test_repr_html_escapes_names_targets_and_header():
    node = NodeInfo(name="a<b>&c", op="call_function", target="<lambda>", module_type="", scope="", range="<r>")
    samples = pd.DataFrame({"node": ["a<b>&c"], "run": [0], "time_ms": [1.0], "host_ms": [1.0],
                            "start_ms": [0.0], "host_start_ms": [0.0]})
    runs = pd.DataFrame({"run": [0], "total_ms": [1.0], "host_ms": [1.0], "start_ms": [0.0]})
    page = fxprof.Profile([node], samples, runs, meta={"model": "<b>Net</b>"})._repr_html_()
    assert "a&lt;b&gt;&amp;c" in page and "&lt;r&gt;" in page  # (the target is not a default column)
    assert "&lt;b&gt;Net&lt;/b&gt;" in page
    for raw in ("a<b>", "<lambda>", "<r>", "<b>Net"):
        assert raw not in page


def test_repr_html_flags_high_spread_and_shows_device_columns(clock):
    prof = _profile(clock, stem_ms=(1.0, 1.0, 3.0, 1.0))  # stem: median 1 ms, IQR 0.5 ms
    page = render_html(prof)
    header = _cells(_html_rows(page)[0])
    assert "spread" in header and ">high<" in page
    assert "host_mean" not in header
    prof.meta["timer"] = "cuda"  # what a CUDA-event profile adds: host time and launch/device bound
    page = render_html(prof)
    header = _cells(_html_rows(page)[0])
    assert "host_mean" in header and "bound" in header and ">launch<" in page


def test_repr_html_of_an_empty_profile():
    page = _empty_profile()._repr_html_()
    assert "no timed runs recorded" in page and "no nodes" in page


# ------------------------------------------------------------------------------- plots


def test_plot_top_draws_one_bar_per_node_by_share(clock):
    prof = _profile(clock)
    ax = fxprof.plot_top(prof, n=3)
    assert isinstance(ax, matplotlib.axes.Axes)
    assert _bar_widths(ax) == [75.0, 25.0, 0.0]
    assert _ytick_labels(ax) == ["head", "stem", "x"]  # ties keep graph order
    assert [t.get_text() for t in ax.texts] == ["3.000 ms", "1.000 ms", "0.000 ms"]
    assert "%" in ax.get_xlabel() and "top 3 nodes" in ax.get_title()
    assert len(fxprof.plot_top(prof).patches) == 8  # n beyond the node count: every node


def test_plot_top_takes_the_per_node_table_and_an_axes(clock):
    prof = _profile(clock)
    fig, given = plt.subplots()
    ax = fxprof.plot_top(prof.df, n=2, ax=given)
    assert ax is given and _bar_widths(ax) == [75.0, 25.0]
    with pytest.raises(TypeError, match="Profile or its per-node DataFrame"):
        fxprof.plot_top(prof.samples)


def test_plot_groups_draws_one_bar_per_group(clock):
    prof = _profile(clock)
    ax = fxprof.plot_groups(prof)  # by op kind: both Work modules are one "work" group
    assert _bar_widths(ax)[0] == 100.0 and _ytick_labels(ax)[0] == "work"
    assert len(ax.patches) == len(prof.group_by("op")) == 7
    ax = fxprof.plot_groups(prof.df, key="scope", depth=1)
    assert _ytick_labels(ax) == ["head", "stem", "(graph)", "(root)"] and _bar_widths(ax) == [75.0, 25.0, 0.0, 0.0]
    assert "scope (depth 1)" in ax.get_title() and "%" in ax.get_xlabel()
    ax = fxprof.plot_groups(prof, n=2)
    assert len(ax.patches) == 2 and "top 2 of 7" in ax.get_title()
    with pytest.raises(TypeError, match="Profile or its per-node DataFrame"):
        fxprof.plot_groups(prof.group_by("op"))  # a roll-up is not a per-node table


def test_plot_distribution_draws_one_box_per_top_node_from_the_samples(clock):
    prof = _profile(clock)
    ax = fxprof.plot_distribution(prof, n=2)
    assert len(ax.patches) == 2
    assert _ytick_labels(ax) == ["head", "stem"]
    head_box = ax.patches[0].get_path().vertices[:, 0]  # head's runs: 3, 2, 4, 3 ms
    assert (head_box.min(), head_box.max()) == (2.75, 3.25)  # the box is the IQR
    assert ax.get_xlabel() == "time per run (ms)" and "4 runs" in ax.get_title()
    with pytest.raises(TypeError, match="needs a Profile"):
        fxprof.plot_distribution(prof.df)


def test_plot_compare_draws_both_sides_for_the_largest_changes(clock):
    before = _profile(clock)
    after = _profile(clock, stem_ms=(3.0,), head_ms=(6.0,))  # stem 1 -> 3 ms, head 3 -> 6 ms
    ax = fxprof.plot_compare(before, after, n=3, label_a="before", label_b="after")
    assert len(ax.patches) == 6  # two bars per node
    assert _ytick_labels(ax) == ["head", "stem", "x"]  # largest change first
    assert _bar_widths(ax) == [3.0, 1.0, 0.0, 6.0, 3.0, 0.0]  # before's bars, then after's
    # not beyond noise with 4 runs a side: the ratio as a share of the time; no ratio to a 0 ms node
    assert [t.get_text() for t in ax.texts] == ["2.00x the time (same)", "3.00x the time (same)", ""]
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["before", "after"]
    assert ax.get_xlabel() == "median time (ms)"


def test_plot_compare_says_a_speed_up_as_times_faster_not_a_fraction(clock):
    """docs/img/before_after_channels_last.png labelled a 6.4x speed-up "x0.16 faster"."""

    def made(head_ms, stem_ms):
        net = FakeCostModel(clock)
        net.stem.costs_ms, net.head.costs_ms = list(stem_ms), list(head_ms)
        return fxprof.profile(net, torch.ones(2, 3), warmup=0, iters=12, timer=FakeTimer(clock), leaf_modules=[Work])

    before = made(head_ms=(6.3, 6.4, 6.5), stem_ms=(1.0, 1.1))
    after = made(head_ms=(0.99, 1.0, 1.01), stem_ms=(1.3, 1.4))  # head 6.4 -> 1.0 ms, stem 1.05 -> 1.35 ms
    diff = fxprof.compare(before, after, warn=False)
    assert diff.loc["head", "verdict"] == "faster" and diff.loc["stem", "verdict"] == "slower"
    ax = fxprof.plot_compare(before, after, n=2)
    assert [t.get_text() for t in ax.texts] == ["6.4x faster", "1.3x slower"]


def test_plot_compare_names_nodes_only_one_side_has(clock):
    class Other(FakeCostModel):
        def forward(self, x):
            return self.head(torch.relu(self.stem(x)))

    ax = fxprof.plot_compare(_profile(clock), _profile(clock, model=Other), label_b="after")
    labels = _ytick_labels(ax)
    assert len(labels) == 9 and len(ax.patches) == 18
    assert "relu (only in after)" in labels and "flatten (only in a)" in labels


def test_plots_of_an_empty_profile_draw_nothing():
    empty = _empty_profile()
    assert len(fxprof.plot_top(empty).patches) == 0
    assert len(fxprof.plot_distribution(empty).patches) == 0
    assert len(fxprof.plot_compare(empty, empty).patches) == 0


def test_plotting_without_matplotlib_says_how_to_install_it(clock, monkeypatch):
    prof = _profile(clock)
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib now fails
    monkeypatch.setitem(sys.modules, "matplotlib.pyplot", None)
    for draw in (lambda: fxprof.plot_top(prof), lambda: fxprof.plot_groups(prof),
                 lambda: fxprof.plot_distribution(prof), lambda: fxprof.plot_compare(prof, prof)):
        with pytest.raises(ImportError) as info:
            draw()
        assert str(info.value) == "fxprof's plots need matplotlib: pip install 'fxprof[plot]'" == MISSING_MATPLOTLIB
    assert "<table" in prof._repr_html_()  # the HTML display needs no matplotlib


def test_the_install_hint_names_an_extra_that_exists():
    tomllib = pytest.importorskip("tomllib")
    import pathlib

    pyproject = tomllib.loads((pathlib.Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())
    extras = pyproject["project"]["optional-dependencies"]
    assert any(req.startswith("matplotlib") for req in extras["plot"])
    assert {"matplotlib", "nbformat", "nbclient", "ipykernel"} <= {re.split(r"[<>=\[ ]", r)[0] for r in extras["test"]}
