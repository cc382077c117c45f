"""Numbers that survive a noisy machine: outlier runs and robust shares, exact on a fake clock.

The criterion (issue 14): injecting one run 10x slower than the others, or one node sample 50x
its median, changes neither the order of the top 10 nodes nor any ``pct`` by more than 1 point.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch
from conftest import FakeTimer, Work
from torch import nn

import fxprof
from fxprof.core.stats import outlier_fence, outlier_mask
from fxprof.views.text import spread_flags

RUNS = 20
#: twelve nodes of distinct cost (ms), so the top 10 has a definite order
BASE_MS = [12.0, 11.0, 10.0, 9.0, 8.0, 7.0, 6.0, 5.0, 4.0, 3.0, 2.0, 1.0]


class Chain(nn.Module):
    """Twelve costed leaf modules in a row; each run's costs are scripted per module."""

    def __init__(self, clock, costs: list[list[float]]):
        super().__init__()
        self.blocks = nn.ModuleList(Work(clock, c) for c in costs)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = block(x)
        return x


def _costs(slow_run: int | None = None, slow_sample: tuple[int, int] | None = None) -> list[list[float]]:
    """Per module, per run: the base cost with a +-4% deterministic jitter, and the injections."""
    costs = []
    for j, base in enumerate(BASE_MS):
        row = [base * (1 + 0.02 * ((7 * i + 3 * j) % 5 - 2)) for i in range(RUNS)]
        if slow_run is not None:
            row[slow_run] *= 10
        if slow_sample is not None and slow_sample[0] == j:
            row[slow_sample[1]] *= 50
        costs.append(row)
    return costs


def _profile(clock, **injections) -> fxprof.Profile:
    model = Chain(clock, _costs(**injections))
    return fxprof.profile(model, torch.ones(1, 2), warmup=0, iters=RUNS, timer=FakeTimer(clock),
                          leaf_modules=[Work], anatomy=False, name="chain")


def _top10(df: pd.DataFrame) -> list[str]:
    return list(df.sort_values("pct", ascending=False, kind="stable").head(10).index)


def _assert_robust(base: fxprof.Profile, other: fxprof.Profile, keep_outliers: bool) -> None:
    a = base.to_dataframe(keep_outliers=keep_outliers)
    b = other.to_dataframe(keep_outliers=keep_outliers)
    assert _top10(b) == _top10(a)
    assert float((b["pct"] - a["pct"]).abs().max()) <= 1.0
    # the default sort of the summary and of the roll-ups is the same order
    assert list(other.to_dataframe(sort="pct", keep_outliers=keep_outliers).head(10).index) == _top10(a)


def test_one_run_ten_times_slower_is_an_outlier_and_moves_nothing(clock):
    base = _profile(clock)
    slow = _profile(clock, slow_run=7)
    assert base.outlier_runs == [] and slow.outlier_runs == [7]
    runs = slow.runs
    assert runs.loc[runs["run"] == 7, "outlier"].item() and runs["outlier"].sum() == 1
    # nothing deleted: every sample of every run is still there
    assert len(slow.samples) == len(base.samples) and set(slow.samples["run"]) == set(range(RUNS))
    # left out by default: the table is exactly the baseline's without run 7
    left_out = base.kept_samples().query("run != 7")
    assert slow.df.loc["blocks_0", "median_ms"] == left_out.query("node == 'blocks_0'")["time_ms"].median()
    _assert_robust(base, slow, keep_outliers=False)
    # kept on request, the shares still hold: they rest on medians
    _assert_robust(base, slow, keep_outliers=True)
    assert slow.to_dataframe(keep_outliers=True).loc["blocks_0", "calls"] == RUNS
    assert slow.df.loc["blocks_0", "calls"] == RUNS - 1


@pytest.mark.parametrize("node", [0, 5, 11])
def test_one_sample_fifty_times_its_median_moves_nothing(clock, node):
    base = _profile(clock)
    spiked = _profile(clock, slow_sample=(node, 3))
    _assert_robust(base, spiked, keep_outliers=False)
    _assert_robust(base, spiked, keep_outliers=True)  # even with that run kept: medians
    # the old rule (share of summed means) would have moved this node by more than a point,
    # so the check above is not vacuous
    kept = spiked.to_dataframe(keep_outliers=True)
    name = f"blocks_{node}"
    mean_pct = kept["mean_ms"] / kept["mean_ms"].sum() * 100
    assert abs(mean_pct[name] - base.df.loc[name, "pct"]) > 1.0
    # and the spread column says why the mean looks odd
    assert spread_flags(kept)[name] == "tail"


def test_header_says_how_many_runs_were_left_out_and_why(clock):
    slow = _profile(clock, slow_run=7)
    text = slow.summary(top=3)
    assert "outlier runs: 1 of 20 left out of the statistics (run 7; total above" in text
    assert "max(Q3 + 3 IQR, 1.2 x median)" in text
    assert "over 19 runs" in text
    html = slow._repr_html_()
    assert "outlier runs: 1 of 20 left out" in html
    slow.keep_outliers = True
    assert "are KEPT in the statistics" in slow.summary(top=3) and "over 20 runs" in slow.summary(top=3)
    assert "outlier runs" not in _profile(clock).summary(top=3)


def test_group_by_and_coverage_leave_the_outlier_run_out(clock):
    base, slow = _profile(clock), _profile(clock, slow_run=7)
    assert slow.coverage == pytest.approx(base.coverage, abs=1e-9)
    g = slow.group_by("module_type")
    assert g.loc["Work", "nodes"] == 12 and g.loc["Work", "pct"] == pytest.approx(100.0)
    by_scope = slow.group_by("scope", depth=2)
    assert list(by_scope.index[:10]) == list(base.group_by("scope", depth=2).index[:10])
    assert by_scope.loc["blocks.0", "nodes"] == 1 and by_scope.loc["blocks.0", "mean_ms"] < 13.0  # run 7 (120 ms) left out


def test_outlier_rule():
    quiet = [10.0] * 20
    assert not outlier_mask(quiet).any()
    assert outlier_fence(quiet) == pytest.approx(12.0)  # 1.2 x median when the IQR is 0
    assert not outlier_mask([10.0, 100.0, 10.0, 10.0]).any()  # fewer than 5 runs: no verdict
    noisy = [10, 11, 10.5, 12, 9.8, 10.2, 30, 10.1, 10.4, 10.9]
    assert list(np.flatnonzero(outlier_mask(noisy))) == [6]
    q1, q3 = np.percentile(noisy, [25, 75])
    assert outlier_fence(noisy) == pytest.approx(max(q3 + 3 * (q3 - q1), 1.2 * np.median(noisy)))
    # a run 15% over the median is not "far slower", whatever the IQR
    assert not outlier_mask([10.0] * 9 + [11.5]).any()


def test_isolated_profiles_have_no_outlier_runs(clock):
    prof = fxprof.profile(Chain(clock, _costs()), torch.ones(1, 2), warmup=0, iters=6, timer=FakeTimer(clock),
                          leaf_modules=[Work], anatomy=False, mode="isolated")
    assert prof.outlier_runs == [] and prof.runs.empty and "outlier" in prof.runs.columns
