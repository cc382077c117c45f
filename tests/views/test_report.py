"""The self-contained HTML report (fxprof.views.report): its figures and tables from real profiles,
the command line, and the page itself loaded in headless Chromium (skipped when /usr/bin/chromium
is missing; CI installs Debian's chromium)."""

from __future__ import annotations

import html
import json
import math
import os
import re
import subprocess
import sys

import numpy as np
import pytest
import torch
import torchvision
from conftest import Ranged  # noqa: E402
from torch import nn

import fxprof
from fxprof.cli import main
from fxprof.core.compare import compare_blocks
from fxprof.core.rollup import is_bookkeeping
from fxprof.views.report import MISSING_PLOTLY, Report, render_compare_report, render_report
from fxprof.views.report_figures import (
    BOOKKEEPING,
    compare_figure,
    distribution_figure,
    groups_figure,
    ranks_figure,
    runs_figure,
    tree_figure,
)
from fxprof.views.tables import display_name, format_ms
from fxprof.views.text import render_header

pytest.importorskip("plotly")

CHROMIUM = "/usr/bin/chromium"
needs_chromium = pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="no Chromium: apt-get install chromium")


class SmallNet(nn.Module):
    """A small real CNN: stem, two blocks with a residual add, a head (a cheap training step)."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU())
        self.block = nn.Sequential(nn.Conv2d(8, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU())
        self.head = nn.Linear(8, 5)

    def forward(self, x):
        x = self.stem(x)
        x = x + self.block(x)
        return self.head(x.mean(dim=(2, 3)))


@pytest.fixture(scope="module")
def r18() -> fxprof.Profile:
    torch.manual_seed(0)
    return fxprof.profile(torchvision.models.resnet18(weights=None).eval(), torch.randn(1, 3, 32, 32), warmup=1, iters=8)


@pytest.fixture(scope="module")
def r18_again() -> fxprof.Profile:
    torch.manual_seed(0)
    model = torchvision.models.resnet18(weights=None).eval().to(memory_format=torch.channels_last)
    return fxprof.profile(model, torch.randn(1, 3, 32, 32).to(memory_format=torch.channels_last), warmup=1, iters=8)


@pytest.fixture(scope="module")
def step() -> fxprof.Profile:
    torch.manual_seed(0)
    return fxprof.profile(SmallNet().train(), torch.randn(4, 3, 16, 16), backward=True, warmup=1, iters=4)


@pytest.fixture(scope="module")
def ranged() -> fxprof.Profile:
    torch.manual_seed(0)
    return fxprof.profile(Ranged().eval(), torch.randn(2, 16), warmup=1, iters=6)


# ------------------------------------------------------------------------------ figures
def _icicle(fig):
    (trace,) = fig.data
    return trace


def test_the_tree_nests_model_stages_blocks_layers_and_sums_to_the_node_time(r18):
    icicle = _icicle(tree_figure(r18))
    ids, parents, values = list(icicle.ids), list(icicle.parents), list(icicle.values)
    parent_of = dict(zip(ids, parents))
    assert parent_of["m/layer1"] == "m" and parent_of["m/layer1/layer1.0"] == "m/layer1"
    conv = "m/layer1/layer1.0/layer1.0.conv1"  # a module called once, as one node, is that node's box
    assert parent_of[conv] == "m/layer1/layer1.0"
    label = dict(zip(ids, icicle.labels))
    assert label["m/layer1/layer1.0"] == "layer1.0" and label[conv] == "conv1"
    # the residual add is a functional node inside its block
    assert parent_of["m/layer1/layer1.0//add"] == "m/layer1/layer1.0"
    # boxes hold nothing of their own (branchvalues="remainder"); the leaves are the nodes' medians
    assert icicle.branchvalues == "remainder"
    # the root is the median run (issue 32): the nodes' medians plus a box for the time in no node
    median_run = float(np.median(r18.kept_totals()))
    outside = median_run - float(r18.df["median_ms"].sum())
    if outside > 0:
        assert sum(values) == pytest.approx(median_run)
        assert dict(zip(ids, values))["m/(outside every node)"] == pytest.approx(outside)
    said = dict(zip(ids, icicle.customdata))["m"][2]
    assert said == f"median run {format_ms(median_run)}" if outside > 0 else said.startswith("nodes ")  # what it holds
    custom = dict(zip(ids, icicle.customdata))
    assert custom[conv][0] == "layer1_0_conv1" and custom[conv][1] == "conv2d"
    assert custom["m/layer1"][3] == f"{r18.group_by('scope').loc['layer1', 'pct']:.1f}%"


def test_the_tree_of_a_training_step_starts_with_the_phases(step):
    icicle = _icicle(tree_figure(step))
    parent_of = dict(zip(icicle.ids, icicle.parents))
    assert {i for i, p in parent_of.items() if p == "m"} >= {"m/forward", "m/backward"}
    # backward nodes are charged to the forward op's module
    backward_in_block = [i for i in icicle.ids if i.startswith("m/backward/block/")]
    assert backward_in_block
    # the tree adds up to the median run (the nodes' medians and the time outside every node)
    assert sum(icicle.values) == pytest.approx(max(float(np.median(step.kept_totals())), float(step.df["median_ms"].sum())))


def test_the_tree_folds_range_enter_and_exit_nodes_into_a_bookkeeping_box(ranged):
    icicle = _icicle(tree_figure(ranged))
    box = f"m/{BOOKKEEPING}"
    inside = [label for label, parent in zip(icicle.labels, icicle.parents) if parent == box]
    assert sorted(inside) == sorted(f"{w} {r}" for w in ("enter", "exit") for r in ("embed", "mlp", "head"))
    colors = dict(zip(icicle.ids, icicle.marker.colors))
    assert colors[box] == colors[f"{box}//_record_function_exit__record_function"]  # grey, like the box


def test_distributions_rank_the_top_nodes_without_bookkeeping(ranged, r18):
    fig = distribution_figure(ranged, n=50)
    names = [t.name for t in fig.data]
    assert len(names) == len(ranged.df) - int(is_bookkeeping(ranged.df).sum())
    assert not any(n.startswith("_record_function") for n in names)
    top = distribution_figure(r18, n=3)
    assert [t.name for t in top.data] == list(r18.to_dataframe(sort="pct").index[:3])
    kept = r18.kept_runs()  # outlier runs, and busy ones where enough quiet runs remain, are left out
    assert all(len(t.x) == (r18.num_runs if kept is None else len(kept)) for t in top.data)


def test_runs_mark_the_outlier_runs(r18):
    fig = runs_figure(r18)
    assert list(fig.data[0].y) == r18.total_ms
    marked = [t for t in fig.data if "outlier" in (t.name or "")]
    assert [list(t.x) for t in marked] == ([r18.outlier_runs] if r18.outlier_runs else [])


def test_groups_are_coloured_like_the_tree(r18):
    bars = groups_figure(r18, "op").data[0]
    icicle = _icicle(tree_figure(r18))
    leaf_color = dict(zip(icicle.ids, icicle.marker.colors))["m/layer1/layer1.0/layer1.0.conv1"]
    assert dict(zip(bars.y, bars.marker.color))["conv2d"] == leaf_color


def test_the_comparison_says_the_change_in_words(r18, r18_again):
    diff = fxprof.compare(r18, r18_again, warn=False)
    fig = compare_figure(diff, n=10)
    words = list(fig.data[1].text)
    for (ratio, verdict), word in zip(diff[["ratio", "verdict"]].head(10).itertuples(index=False), words):
        if verdict == "faster":
            assert word == f"{1 / ratio:.2g}x faster"
        elif verdict == "slower":
            assert word == f"{ratio:.2g}x slower"
        elif not math.isnan(ratio):
            assert word.startswith(f"{ratio:.2f}x the time")
    blocks = compare_blocks(diff)
    assert blocks["nodes"].sum() == len(diff)
    assert blocks.loc["layer1.0", "a_ms"] == pytest.approx(diff.loc[diff["scope"].str.startswith("layer1.0"), "a_ms"].sum())
    assert (blocks[["faster", "slower", "same"]].sum(axis=1) <= blocks["nodes"]).all()


# ------------------------------------------------------------------------------ the page
def _tables(page: str) -> dict[str, list[list[str]]]:
    out = {}
    for table_id, body in re.findall(r'<table class="fx-table" id="([^"]+)">(.*?)</table>', page, re.S):
        rows = re.findall(r"<tr>(.*?)</tr>", body, re.S)
        out[table_id] = [[html.unescape(c) for c in re.findall(r"<t[hd][^>]*>(.*?)</t[hd]>", r, re.S)] for r in rows]
    return out


def test_the_page_holds_plotly_every_figure_and_every_node_and_column(r18):
    page = render_report(r18)
    assert len(page) < 8_000_000
    assert page.count("<script") >= 3 and "Plotly.newPlot" in page
    # nothing is fetched: no external script, style, image or font is referenced by the markup
    markup = re.sub(r"<script>.*?</script>", "", page, flags=re.S)
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", markup)
    for div in ("fx-tree", "fx-kinds", "fx-dist", "fx-runs"):
        assert f'id="{div}"' in page
    rows = _tables(page)["fx-nodes"]
    header, body = rows[0], rows[1:]
    shown = display_name  # times and memory carry their unit in each cell: median, mem_peak
    assert header[:7] == ["node", "kind", "scope", "median", "mean", "iqr", "pct"]  # the times first
    assert sorted(header) == sorted(["node", *map(shown, r18.df.columns)])  # and every column
    assert [r[0] for r in body] == list(r18.df.index)
    median = header.index("median")
    assert body[1][median].endswith(("ms", "us", "ns"))  # times with units
    for line in render_header(r18).splitlines():
        assert html.escape(line) in page


def test_the_page_shows_ranges_phases_and_escapes_names(ranged, step):
    page = render_report(ranged)
    assert 'id="fx-ranges"' in page and "record_function bookkeeping: 6 enter/exit nodes" in page
    training = render_report(step)
    assert 'id="fx-phases"' in training
    ranged.meta["model"] = "<script>alert(1)</script>"
    try:
        hostile = render_report(ranged)
    finally:
        ranged.meta["model"] = "Ranged"
    assert "<script>alert(1)</script>" not in hostile and "&lt;script&gt;alert(1)&lt;/script&gt;" in hostile


def test_the_comparison_page_has_the_verdicts_the_blocks_and_every_node(r18, r18_again):
    diff = fxprof.compare(r18, r18_again, warn=False)
    page = render_compare_report(r18, r18_again, "before", "after", diff=diff)
    for div in ("fx-changes", "fx-blocks", "fx-totals"):
        assert f'id="{div}"' in page
    tables = _tables(page)
    assert [r[0] for r in tables["fx-diff"][1:]] == list(diff.index)
    assert [r[0] for r in tables["fx-blocks-table"][1:]] == list(compare_blocks(diff).index)
    counts = diff["verdict"].value_counts()
    assert f"<b>{int(counts.get('faster', 0))}</b><span>nodes faster</span>" in page


def test_to_html_and_show_report(r18, r18_again, tmp_path):
    path = tmp_path / "r18.html"
    r18.to_html(path)
    assert path.read_text().startswith("<!DOCTYPE html>")
    report = fxprof.show_report(r18)
    assert isinstance(report, Report) and set(report.figures) == {"tree", "kinds", "distributions", "runs"}
    assert report._repr_html_().startswith("<iframe srcdoc=") and "&lt;!DOCTYPE html&gt;" in report._repr_html_()
    both = fxprof.show_report(r18, r18_again, label_a="before", label_b="after")
    assert set(both.figures) == {"changes", "blocks"}
    both.save(tmp_path / "diff.html")
    assert "before vs after" in (tmp_path / "diff.html").read_text()


def test_without_plotly_the_message_says_what_to_install(r18, tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "plotly", None)
    monkeypatch.setitem(sys.modules, "plotly.graph_objects", None)
    with pytest.raises(ImportError, match=re.escape(MISSING_PLOTLY)):
        r18.to_html(tmp_path / "x.html")
    saved = tmp_path / "r18.json"
    r18.save(saved)
    assert main(["report", str(saved), "-o", str(tmp_path / "x.html")]) == 2
    err = capsys.readouterr().err
    assert "pip install plotly" in err and "pip install -e '.[report]'" in err  # works installed or in a checkout
    assert not (tmp_path / "x.html").exists()


# --------------------------------------------------------------------------- the CLI
def test_cli_report_profile_html_and_compare_html(r18, r18_again, tmp_path, capsys):
    a, b = tmp_path / "a.json", tmp_path / "b.npz"
    r18.save(a)
    r18_again.save(b)
    assert main(["report", str(b), "-o", str(tmp_path / "b.html")]) == 0
    assert _tables((tmp_path / "b.html").read_text())["fx-nodes"][1][0] == r18_again.df.index[0]
    assert main(["compare", str(a), str(b), "--html", str(tmp_path / "diff.html"), "--top", "3"]) == 0
    assert "wrote html: " in capsys.readouterr().out
    assert "fx-changes" in (tmp_path / "diff.html").read_text()
    # checked up front: an unwritable path, an input as output, a CSV (no samples)
    assert main(["report", str(a), "-o", str(tmp_path / "missing" / "x.html")]) == 2
    assert main(["report", str(a), "-o", str(a)]) == 2
    assert main(["compare", str(a), str(b), "--html", str(b)]) == 2
    r18.to_csv(tmp_path / "a.csv")
    assert main(["report", str(tmp_path / "a.csv"), "-o", str(tmp_path / "c.html")]) == 2
    err = capsys.readouterr().err
    assert "the folder" in err and "is an input of this command" in err and "per-node CSV table" in err
    assert not (tmp_path / "c.html").exists()


def test_cli_profile_html_writes_the_report_and_checks_the_path_first(tmp_path, capsys):
    out = tmp_path / "sq.html"
    assert main(["profile", "squeezenet1_1", "--input", "1x3x32x32", "--warmup", "1", "--iters", "3", "--quiet",
                 "--html", str(out), "--top", "3"]) == 0
    assert f"wrote html: {out}" in capsys.readouterr().out
    assert 'id="fx-tree"' in out.read_text()
    assert main(["profile", "squeezenet1_1", "--quiet", "--html", str(tmp_path / "no" / "x.html")]) == 2
    assert "cannot write" in capsys.readouterr().err


# ------------------------------------------------------------------------- in a browser
#: records every error, failed load and console error into the page, then what rendered
PROBE = """<script>
(function () {
  var errors = [];
  window.addEventListener('error', function (e) {
    var t = e.target || {};
    errors.push('error: ' + (e.message || t.src || t.href || t.tagName || 'unknown'));
  }, true);
  window.addEventListener('unhandledrejection', function (e) { errors.push('rejection: ' + e.reason); });
  var consoleError = console.error;
  console.error = function () { errors.push('console.error: ' + Array.prototype.join.call(arguments, ' ')); consoleError.apply(console, arguments); };
  window.addEventListener('load', function () { setTimeout(function () {
    var out = {errors: errors, figures: {}, tables: {}};
    out.resources = performance.getEntriesByType('resource').map(function (r) { return r.name; });
    document.querySelectorAll('.js-plotly-plot').forEach(function (d) {
      out.figures[d.id] = {svg: d.querySelectorAll('svg.main-svg').length,
                           marks: d.querySelectorAll('g.slice, g.point, path.point, path.box').length};
    });
    document.querySelectorAll('table.fx-table').forEach(function (t) { out.tables[t.id] = t.tBodies[0].rows.length; });
    var tables = document.querySelectorAll('table.fx-table'), table = tables[tables.length - 1];  // every node
    var heads = Array.prototype.slice.call(table.tHead.rows[0].cells);
    var col = heads.findIndex(function (th) { return ['median_ms', 'delta_ms'].indexOf(th.getAttribute('title')) >= 0; });
    if (col < 0) col = heads.findIndex(function (th) { return th.getAttribute('data-num') === '1'; });
    heads[col].click();
    out.sorted_column = heads[col].getAttribute('title');
    out.sorted = Array.prototype.map.call(table.tBodies[0].rows, function (r) {
      var v = r.cells[col].getAttribute('data-v'); return v === '' ? null : parseFloat(v); });
    var input = document.querySelector('.fx-filter input[data-table="' + table.id + '"]');
    input.value = FILTER;
    input.dispatchEvent(new Event('input'));
    var shown = Array.prototype.filter.call(table.tBodies[0].rows, function (r) { return r.style.display !== 'none'; });
    out.filtered = shown.map(function (r) { return r.textContent.toLowerCase().indexOf(FILTER) >= 0; });
    var pre = document.createElement('pre'); pre.id = 'fx-probe'; pre.textContent = JSON.stringify(out);
    document.body.appendChild(pre);
  }, 300); });
})();
</script>"""


def _in_chromium(page: str, tmp_path, filter_text: str) -> tuple[dict, str]:
    """Load ``page`` (with the probe first in <head>) offline in headless Chromium; return what
    the probe saw and Chromium's own log. Every request would go to a closed proxy port."""
    probe = PROBE.replace("FILTER", json.dumps(filter_text))
    path = tmp_path / "page.html"
    path.write_text(page.replace("<head>", "<head>" + probe, 1))
    profile_dir = tmp_path / "chromium-profile"
    command = [
        CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync",
        f"--user-data-dir={profile_dir}", "--proxy-server=http://127.0.0.1:9", "--host-resolver-rules=MAP * ~NOTFOUND",
        "--enable-logging=stderr", "--v=0", "--window-size=1280,900", "--virtual-time-budget=15000",
        "--dump-dom", path.as_uri(),
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=180)
    found = re.search(r'<pre id="fx-probe">(.*?)</pre>', done.stdout, re.S)
    assert found, f"the page did not finish loading in Chromium: {done.stderr[-2000:]}"
    return json.loads(html.unescape(found.group(1))), done.stderr


def _check_rendered(seen: dict, log: str, figures: list[str], tables: dict[str, int]) -> None:
    assert seen["errors"] == []
    assert [r for r in seen["resources"] if not r.startswith(("file:", "data:", "blob:"))] == []  # no network
    assert not re.search(r"Uncaught|CONSOLE.*(Error|error)", log), log[-3000:]
    for fig in figures:
        assert seen["figures"][fig]["svg"] >= 1, (fig, seen["figures"])
        assert seen["figures"][fig]["marks"] >= 1, (fig, seen["figures"])
    assert seen["tables"] == tables
    values = [v for v in seen["sorted"] if v is not None]
    assert values == sorted(values, reverse=True)  # the first click sorts a number column largest first
    assert seen["filtered"] and all(seen["filtered"])


@needs_chromium
def test_resnet18_report_renders_offline_in_chromium(r18, tmp_path):
    seen, log = _in_chromium(render_report(r18), tmp_path, "conv")
    _check_rendered(seen, log, ["fx-tree", "fx-kinds", "fx-dist", "fx-runs", "fx-memory"], {"fx-nodes": len(r18.df)})
    assert seen["sorted_column"] == "median_ms"
    text = r18.df.reset_index().apply(lambda row: "".join(map(str, row)).lower(), axis=1)
    assert len(seen["filtered"]) == int(text.str.contains("conv").sum())  # every row that says conv, nothing else


@needs_chromium
def test_training_step_and_ranges_reports_render_offline_in_chromium(step, ranged, tmp_path):
    seen, log = _in_chromium(render_report(step), tmp_path, "backward")
    _check_rendered(seen, log, ["fx-tree", "fx-kinds", "fx-phases", "fx-dist", "fx-runs", "fx-memory"], {"fx-nodes": len(step.df)})
    (tmp_path / "ranged").mkdir()
    seen, log = _in_chromium(render_report(ranged), tmp_path / "ranged", "mlp")
    _check_rendered(seen, log, ["fx-tree", "fx-kinds", "fx-ranges", "fx-dist", "fx-runs"], {"fx-nodes": len(ranged.df)})


@needs_chromium
def test_comparison_report_renders_offline_in_chromium(r18, r18_again, tmp_path):
    diff = fxprof.compare(r18, r18_again, warn=False)
    seen, log = _in_chromium(render_compare_report(r18, r18_again, "before", "after", diff=diff), tmp_path, "layer")
    _check_rendered(seen, log, ["fx-changes", "fx-blocks", "fx-totals"],
                    {"fx-blocks-table": len(compare_blocks(diff)), "fx-diff": len(diff)})


@needs_chromium
@pytest.mark.slow
def test_resnet18_training_step_report_renders_offline_in_chromium(tmp_path):
    torch.manual_seed(0)
    prof = fxprof.profile(torchvision.models.resnet18(weights=None).train(), torch.randn(2, 3, 32, 32),
                          backward=True, warmup=1, iters=3)
    seen, log = _in_chromium(render_report(prof), tmp_path, "convolution_backward")
    _check_rendered(seen, log, ["fx-tree", "fx-kinds", "fx-phases", "fx-dist", "fx-runs"], {"fx-nodes": len(prof.df)})


def _empty() -> fxprof.Profile:
    import pandas as pd

    from fxprof.core.profile import RUN_COLUMNS, SAMPLE_COLUMNS

    return fxprof.Profile([], pd.DataFrame({c: [] for c in SAMPLE_COLUMNS}), pd.DataFrame({c: [] for c in RUN_COLUMNS}))


def test_an_empty_profile_and_an_isolated_one_make_a_page():
    empty = render_report(_empty())
    assert _tables(empty)["fx-nodes"][1:] == [] and 'id="fx-tree"' in empty and 'id="fx-runs"' not in empty
    assert "fx-diff" in render_compare_report(_empty(), _empty())
    torch.manual_seed(0)
    iso = fxprof.profile(torchvision.models.squeezenet1_1(weights=None).eval(), torch.randn(1, 3, 32, 32),
                         mode="isolated", iters=3, warmup=1)
    page = render_report(iso)  # no whole runs: no distributions nor run totals, the tree and the table still
    assert 'id="fx-tree"' in page and 'id="fx-runs"' not in page
    assert len(_tables(page)["fx-nodes"]) == len(iso.df) + 1


@needs_chromium
def test_an_empty_profile_report_loads_without_errors_in_chromium(tmp_path):
    seen, _ = _in_chromium(render_report(_empty()), tmp_path, "x")
    assert seen["errors"] == [] and seen["resources"] == [] and seen["tables"] == {"fx-nodes": 0}
    assert seen["figures"]["fx-tree"]["svg"] >= 1


@pytest.fixture(scope="module")
def two_ranks(r18, r18_again) -> fxprof.Profile:
    """Two real resnet18 profiles as the ranks of one gathered profile (what gather() merges)."""
    from fxprof.core.rankmerge import merge, profile_parts, with_ranks

    parts = []
    for rank, prof in enumerate((r18, r18_again)):
        tagged = with_ranks(prof, [rank] * prof.num_runs, [0.05 * (rank + 1)] * prof.num_runs)
        tagged.meta.update(rank=rank, world_size=2, backend="gloo")
        parts.append(profile_parts(tagged))
    return merge(parts)


def test_ranks_get_a_figure_and_a_table(two_ranks, tmp_path):
    assert two_ranks.ranks == [0, 1]
    fig = ranks_figure(two_ranks)
    table = two_ranks.group_by("rank")
    compute = fig.data[0]
    assert [y.split(" (")[0] for y in compute.y] == ["rank 0", "rank 1"]
    assert list(compute.x) == pytest.approx(list(table["compute_ms"]))
    assert [t.name for t in fig.data] == ["computation", "communication", "barrier wait"]
    straggler = table.index[table["straggler"] == "yes"]
    assert [y for y in compute.y if "straggler" in y] == [f"rank {r} (straggler)" for r in straggler]
    page = render_report(two_ranks)
    assert 'id="fx-ranks"' in page and len(_tables(page)["fx-ranks-table"]) == 3
    two_ranks.save(tmp_path / "ranks.json")  # a saved gathered profile makes the same figure
    loaded = ranks_figure(fxprof.load(tmp_path / "ranks.json"))
    assert list(loaded.data[0].x) == pytest.approx(list(compute.x))


@needs_chromium
def test_a_gathered_profile_report_renders_offline_in_chromium(two_ranks, tmp_path):
    seen, log = _in_chromium(render_report(two_ranks), tmp_path, "layer")
    _check_rendered(seen, log, ["fx-tree", "fx-ranks", "fx-dist", "fx-runs"],
                    {"fx-ranks-table": 2, "fx-nodes": len(two_ranks.df)})


def test_the_memory_timeline_stacks_what_the_run_holds_and_marks_the_peak(step):
    from fxprof.views.memory_plot import memory_figure

    fig = memory_figure(step)
    summary = step.memory
    rows = step.df[step.df["mem_live_bytes"].notna()]
    stacked = [t for t in fig.data if getattr(t, "stackgroup", None) == "held"]
    # the stacked areas add up to what the run holds after each node, in run order
    total = np.sum([np.asarray(t.y, dtype=float) for t in stacked], axis=0)
    assert total == pytest.approx(rows["mem_live_bytes"].astype(float).to_numpy(), rel=1e-9)
    assert {t.name for t in stacked} >= {"parameters", "activations and gradients"}
    marker = next(t for t in fig.data if t.name == "run's peak")
    assert list(marker.x) == [list(rows.index).index(summary.peak_node)] and list(marker.y) == [summary.peak_bytes]
    assert memory_figure(fxprof.profile(SmallNet().eval(), torch.randn(1, 3, 8, 8), warmup=0, iters=1, memory=False)) is None
