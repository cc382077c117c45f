"""record_function enter/exit nodes are their range's bookkeeping: counted, shown, never ranked as
hotspots (docs/img/notebook_view.png had 4 exit markers in the top 14 rows, 13% of node time)."""

from __future__ import annotations

import re

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
from conftest import Ranged  # noqa: E402

import fxprof  # noqa: E402
from fxprof.core.rollup import is_bookkeeping  # noqa: E402
from fxprof.views.notebook import render_html  # noqa: E402


@pytest.fixture(scope="module")
def ranged() -> fxprof.Profile:
    torch.manual_seed(0)
    return fxprof.profile(Ranged().eval(), torch.randn(2, 16), warmup=2, iters=8)


def test_enter_and_exit_nodes_are_marked_and_still_counted(ranged):
    table = ranged.df
    marked = is_bookkeeping(table)
    assert int(marked.sum()) == 6  # 3 ranges, an enter and an exit each
    assert set(table.loc[marked, "range"]) == {"embed", "mlp", "head"}
    assert table["pct"].sum() == pytest.approx(100.0)  # their time is in the shares
    assert table.loc[marked, "pct"].sum() > 0
    assert ranged.group_by("range").loc["mlp", "nodes"] == 6  # enter, 3 layers, add, exit


def test_the_text_ranking_leaves_them_out_and_states_their_cost(ranged):
    text = ranged.summary(top=0)
    rows = [line.split()[0] for line in text.splitlines() if re.match(r"^\w", line) and "  " in line]
    assert not any(name.startswith("_record_function") for name in rows)
    share = ranged.df.loc[is_bookkeeping(ranged.df), "pct"].sum()
    assert f"record_function bookkeeping: 6 enter/exit nodes of 3 range(s), {share:.1f}% of node time" in text
    in_order = ranged.summary(sort=None, top=0)  # graph order is no ranking: every node is there
    assert "_record_function_exit" in in_order and "bookkeeping" not in in_order
    assert "_record_function_exit" in ranged.summary(sort="node", top=0)  # by name: no ranking either
    assert "_record_function_exit" in ranged.summary(top=0, bookkeeping=True)


def test_the_notebook_view_and_the_plots_leave_them_out(ranged):
    page = render_html(ranged, top=0)
    assert "_record_function" not in page and "record_function bookkeeping: 6 enter/exit nodes" in page
    ax = fxprof.plot_top(ranged, n=50)
    names = [t.get_text() for t in ax.get_yticklabels()]
    assert len(names) == len(ranged.df) - 6 and not any(n.startswith("_record_function") for n in names)
    assert "not ranked: 6 record_function enter/exit nodes" in ax.get_title()
    ax = fxprof.plot_distribution(ranged, n=50)
    assert not any(t.get_text().startswith("_record_function") for t in ax.get_yticklabels())
    plt.close("all")


def test_the_command_line_states_them_and_ranks_them_when_asked(ranged, tmp_path, capsys):
    from fxprof.cli import main

    saved = tmp_path / "ranged.json"
    ranged.save(saved)
    assert main(["show", str(saved), "--top", "0"]) == 0
    out = capsys.readouterr().out
    assert "record_function bookkeeping: 6 enter/exit nodes of 3 range(s)" in out and "_record_function_exit" not in out
    assert main(["show", str(saved), "--top", "0", "--rank-bookkeeping"]) == 0
    out = capsys.readouterr().out
    assert "_record_function_exit" in out and "bookkeeping" not in out
