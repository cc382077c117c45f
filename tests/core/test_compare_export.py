"""fxprof.compare and the Chrome trace, on exact fake-clock profiles."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from conftest import FakeCostModel, FakeTimer, Work
from torch import nn

import fxprof
from fxprof.core.compare import ComparabilityWarning
from fxprof.views.chrome_trace import chrome_trace_events


def _profile(clock, **kw):
    return fxprof.profile(FakeCostModel(clock), torch.ones(2, 3), warmup=0, iters=4, timer=FakeTimer(clock),
                          leaf_modules=[Work], **kw)


def test_compare_with_itself_is_ratio_one(clock):
    prof = _profile(clock)
    diff = fxprof.compare(prof, prof)
    assert (diff["status"] == "both").all() and len(diff) == 8
    assert (diff.loc[["stem", "head"], "ratio"] == 1.0).all()
    assert (diff["delta_ms"] == 0).all() and (diff["delta_pct"] == 0).all()


def test_compare_matches_by_name_sorts_by_change_and_keeps_one_sided_nodes(clock):
    a = _profile(clock)

    class Other(FakeCostModel):
        def forward(self, x):
            y = self.stem(x)
            y = torch.relu(y)          # a node a does not have
            return self.head(y)

    model = Other(clock)
    model.stem.costs_ms = [3.0]  # stem got 3x slower
    b = fxprof.profile(model, torch.ones(2, 3), warmup=0, iters=4, timer=FakeTimer(clock), leaf_modules=[Work])
    with pytest.warns(ComparabilityWarning, match="graph: 5 of 9 nodes"):  # a different name alone is no warning
        diff = fxprof.compare(a, b)
    assert diff.index[0] == "stem"  # the largest absolute change leads
    assert diff.loc["stem", "a_ms"] == 1.0 and diff.loc["stem", "b_ms"] == 3.0
    assert diff.loc["stem", "ratio"] == 3.0 and diff.loc["stem", "delta_ms"] == 2.0
    assert diff.loc["relu", "status"] == "only_b" and np.isnan(diff.loc["relu", "ratio"])
    only_a = set(diff.index[diff["status"] == "only_a"])
    assert only_a == {"add", "flatten", "size", "getitem"}
    assert diff.loc["stem", "delta_pct"] == pytest.approx(b.df.loc["stem", "pct"] - a.df.loc["stem", "pct"])
    # the same from per-node tables (e.g. read from CSV), but with no samples there is no test
    from_tables = fxprof.compare(a.df, b.df, warn=False)
    assert from_tables["p_value"].isna().all() and (from_tables["verdict"] == "").all()
    assert from_tables.drop(columns=["p_value", "verdict"]).equals(diff.drop(columns=["p_value", "verdict"]))


def test_chrome_trace_has_one_span_per_node_and_run_at_the_right_times(clock, tmp_path):
    prof = _profile(clock)
    path = tmp_path / "t.json"
    prof.to_chrome_trace(path, runs="all")
    doc = json.loads(path.read_text())
    # the fast writer and the event list agree, event for event
    assert doc["traceEvents"] == chrome_trace_events(prof, runs="all")
    assert doc["displayTimeUnit"] == "ms"
    events = doc["traceEvents"]
    for e in events:
        assert e["ph"] in ("X", "M") and isinstance(e["pid"], int) and isinstance(e["tid"], int)
        if e["ph"] == "X":
            assert isinstance(e["ts"], (int, float)) and e["dur"] >= 0 and e["name"]
    spans = [e for e in events if e["ph"] == "X" and e["cat"] != "run"]
    assert len(spans) == 8 * 4
    assert sorted({(e["name"], e["args"]["run"]) for e in spans}) == sorted(
        (n.name, r) for n in prof.nodes for r in range(4)
    )
    # fake clock: each run takes stem (1 ms) then head (2-4 ms); head starts 1 ms into its run
    heads = sorted((e for e in spans if e["name"] == "head"), key=lambda e: e["args"]["run"])
    stems = sorted((e for e in spans if e["name"] == "stem"), key=lambda e: e["args"]["run"])
    assert [h["dur"] for h in heads] == [3000.0, 2000.0, 4000.0, 3000.0]
    for h, s in zip(heads, stems):
        assert h["ts"] - s["ts"] == pytest.approx(1000.0)
        assert s["dur"] == 1000.0
    names = {e["args"]["name"] for e in events if e["ph"] == "M"}
    assert names == {"fxprof: FakeCostModel", "fxprof host"}


def test_chrome_trace_with_a_device_timer_has_two_tracks(clock):
    prof = _profile(clock)
    prof.meta["timer"] = "cuda"  # as recorded by the CUDA event timer
    events = chrome_trace_events(prof, runs="all")
    tids = {e["tid"] for e in events if e["ph"] == "X" and e["cat"] != "run"}
    assert tids == {1, 2}
    assert sum(e["ph"] == "X" and e["cat"] != "run" for e in events) == 2 * 8 * 4


def test_chrome_trace_shows_the_fastest_median_and_slowest_run_by_default(clock, tmp_path):
    prof = _profile(clock)  # run totals 4, 3, 5, 4 ms (head costs 3, 2, 4, 3 ms after a 1 ms stem)
    path = tmp_path / "t.json"
    prof.to_chrome_trace(path)
    doc = json.loads(path.read_text())
    runs = sorted(e["name"] for e in doc["traceEvents"] if e["ph"] == "X" and e["cat"] == "run")
    assert runs == ["run 0 (median)", "run 1 (fastest)", "run 2 (slowest)"]
    spans = [e for e in doc["traceEvents"] if e["ph"] == "X" and e["cat"] != "run"]
    assert sorted({e["args"]["run"] for e in spans}) == [0, 1, 2] and len(spans) == 8 * 3
    assert doc["otherData"]["trace_runs"] == "run 0 (median), run 1 (fastest), run 2 (slowest)"
    assert doc["traceEvents"] == chrome_trace_events(prof)
    # runs named explicitly, and wrong names
    assert {e["args"]["run"] for e in chrome_trace_events(prof, runs=[3]) if e["ph"] == "X"} == {3}
    with pytest.raises(ValueError, match="past the last run"):
        prof.to_chrome_trace(path, runs=[7])
    with pytest.raises(ValueError, match="representative, all"):
        prof.to_chrome_trace(path, runs="some")


def test_samples_place_nodes_on_the_run_timeline(clock):
    samples = _profile(clock).samples
    run0 = samples[samples["run"] == 0].set_index("node")
    assert run0.loc["stem", "start_ms"] == 0.0 and run0.loc["head", "start_ms"] == 1.0
    assert (np.diff(samples["start_ms"][samples["run"] == 1]) >= 0).all()


def test_progress_bar_is_quiet_off_a_terminal(capsys):
    fxprof.profile(nn.Linear(2, 2), torch.ones(2), warmup=1, iters=2, progress=True)
    assert capsys.readouterr().err == ""
