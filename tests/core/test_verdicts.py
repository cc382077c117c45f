"""fxprof.compare's p-values, verdicts, run interval and comparability warnings (fake clock: exact)."""

from __future__ import annotations

import re
import warnings

import pytest
import torch
from conftest import FakeTimer, Work
from test_stats import BASE_MS, RUNS, Chain

import fxprof
from fxprof.cli import main
from fxprof.core.compare import ALPHA, MIN_EFFECT, ComparabilityWarning, comparability

#: two jitter patterns with the same multiset of factors (+-4%): an exact A/A pair
PATTERN_A = [(7 * i) % 5 for i in range(RUNS)]
PATTERN_B = [(3 * i + 1) % 5 for i in range(RUNS)]


def _costs(pattern: list[int], scale: dict[int, float] | None = None, run_scale: float = 1.0) -> list[list[float]]:
    scale = scale or {}
    return [[base * scale.get(j, 1.0) * run_scale * (1 + 0.02 * (pattern[i] - 2)) for i in range(RUNS)]
            for j, base in enumerate(BASE_MS)]


def _profile(clock, costs, name="chain", shape=(1, 2)) -> fxprof.Profile:
    return fxprof.profile(Chain(clock, costs), torch.ones(*shape), warmup=0, iters=RUNS, timer=FakeTimer(clock),
                          leaf_modules=[Work], anatomy=False, name=name)


def _body(diff):
    body = diff[diff["kind"] == "work"]
    assert len(body) >= 9
    return body


def test_a_a_flags_nothing(clock):
    a = _profile(clock, _costs(PATTERN_A))
    b = _profile(clock, _costs(PATTERN_B))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # same model, same conditions: no comparability warning
        diff = fxprof.compare(a, b)
    assert (_body(diff)["verdict"] == "same").all()
    assert (_body(diff)["p_value"] > 0.5).all()
    assert diff.attrs["warnings"] == []
    run = diff.attrs["run_ratio"]
    assert run["low"] <= 1.0 <= run["high"] and run["ratio"] == 1.0


def test_one_node_twice_as_slow_is_flagged_and_nothing_else(clock):
    a = _profile(clock, _costs(PATTERN_A))
    b = _profile(clock, _costs(PATTERN_B, scale={4: 2.0}))
    diff = fxprof.compare(a, b)
    assert diff.index[0] == "blocks_4" and diff.loc["blocks_4", "verdict"] == "slower"
    assert diff.loc["blocks_4", "ratio"] == pytest.approx(2.0)
    # 20 against 20 samples, completely separated: far below alpha even after the correction
    assert diff.loc["blocks_4", "p_value"] < 1e-6
    assert (_body(diff).drop("blocks_4")["verdict"] == "same").all()
    # 8 ms more in a run of about 78 ms: +10%, an interval above 1
    run = diff.attrs["run_ratio"]
    assert run["ratio"] == pytest.approx(86 / 78, rel=0.02) and run["low"] > 1.0


def test_faster_and_the_minimum_effect(clock):
    a = _profile(clock, _costs(PATTERN_A))
    b = _profile(clock, _costs(PATTERN_B, scale={0: 0.5, 1: 1.05}))
    diff = fxprof.compare(a, b)
    assert diff.loc["blocks_0", "verdict"] == "faster"
    # 5% slower on every run: significant, but below the 10% minimum effect
    assert diff.loc["blocks_1", "p_value"] < ALPHA and diff.loc["blocks_1", "verdict"] == "same"
    assert fxprof.compare(a, b, min_effect=0.0).loc["blocks_1", "verdict"] == "slower"
    assert fxprof.compare(a, b, min_effect=1.5).loc["blocks_0", "verdict"] == "same"  # x0.5 is not 1/2.5
    assert diff.attrs["min_effect"] == MIN_EFFECT and "Benjamini-Hochberg" in diff.attrs["test"]
    with pytest.raises(ValueError, match="alpha"):
        fxprof.compare(a, b, alpha=5)
    with pytest.raises(ValueError, match="min_effect"):
        fxprof.compare(a, b, min_effect=-0.1)


def test_the_p_value_is_mann_whitney_with_benjamini_hochberg(clock):
    from scipy.stats import false_discovery_control, mannwhitneyu

    a = _profile(clock, _costs(PATTERN_A))
    b = _profile(clock, _costs(PATTERN_B, scale={2: 1.03, 7: 1.2}))
    diff = fxprof.compare(a, b)
    both = [n for n in a.df.index]
    sa, sb = a.samples, b.samples
    raw = [mannwhitneyu(sa.loc[sa.node == n, "time_ms"], sb.loc[sb.node == n, "time_ms"]).pvalue
           if sa.loc[sa.node == n, "time_ms"].nunique() + sb.loc[sb.node == n, "time_ms"].nunique() > 2 else 1.0
           for n in both]
    expected = dict(zip(both, false_discovery_control(raw)))
    for node in both:
        assert diff.loc[node, "p_value"] == pytest.approx(expected[node])


def test_outlier_runs_are_left_out_of_both_sides(clock):
    a = _profile(clock, _costs(PATTERN_A))
    costs = _costs(PATTERN_B)
    for row in costs:
        row[5] *= 10  # one run 10x slower in b
    b = _profile(clock, costs)
    assert b.outlier_runs == [5]
    diff = fxprof.compare(a, b)
    assert (_body(diff)["verdict"] == "same").all() and diff.attrs["run_ratio"]["b_runs"] == RUNS - 1
    kept = fxprof.compare(a, b, keep_outliers=True)
    assert kept.attrs["run_ratio"]["b_runs"] == RUNS


def test_tables_have_no_p_values(clock):
    a = _profile(clock, _costs(PATTERN_A))
    b = _profile(clock, _costs(PATTERN_B, scale={4: 2.0}))
    with pytest.warns(ComparabilityWarning, match="no metadata"):
        diff = fxprof.compare(a.df, b.df)
    assert diff["p_value"].isna().all() and (diff["verdict"] == "").all()
    assert diff.attrs["run_ratio"] is None and "no samples" in diff.attrs["test"]
    assert diff.loc["blocks_4", "ratio"] == pytest.approx(2.0)


def test_comparability_warnings_name_what_differs(clock):
    a = _profile(clock, _costs(PATTERN_A))
    b = _profile(clock, _costs(PATTERN_B), name="other", shape=(1, 3))
    b.meta.update(threads=a.meta["threads"] + 1, timer="cpu", device="cuda:0", dtype="float16", torch="2.11.0",
                  env={"allow_tf32": True}, deterministic=True)
    a.meta["env"] = {"allow_tf32": False}
    with pytest.warns(ComparabilityWarning) as caught:
        diff = fxprof.compare(a, b)
    problems = diff.attrs["warnings"]
    keys = [p.split(":")[0] for p in problems]
    # in words, and only what changes the numbers: a different model name is no warning
    assert keys == ["device", "timer (the clock each node is timed with)", "dtype of the busiest nodes", "CPU threads",
                    "inputs", "torch version", "deterministic", "env.allow_tf32"]
    assert "CPU threads: a {}, b {}".format(a.meta["threads"], b.meta["threads"]) in problems
    assert "deterministic: a (not recorded), b on" in problems
    assert len(caught) == 1 and "env.allow_tf32: a off, b on" in str(caught[0].message)
    # bookkeeping (when, how many runs) is not a difference
    b2 = _profile(clock, _costs(PATTERN_B))
    b2.meta.update(created="2000-01-01", iters=3, warmup=9, env={"allow_tf32": False})
    assert comparability(a, b2) == []
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fxprof.compare(a, b, warn=False)


def test_unmatched_graph_is_a_warning(clock):
    a = _profile(clock, _costs(PATTERN_A))
    model = Chain(clock, _costs(PATTERN_B))
    del model.blocks[9:]  # 3 fewer blocks
    b = fxprof.profile(model, torch.ones(1, 2), warmup=0, iters=RUNS, timer=FakeTimer(clock), leaf_modules=[Work],
                       anatomy=False, name="chain")
    with pytest.warns(ComparabilityWarning, match=r"graph: 3 of 14 nodes \(21.4%\) are in only one profile"):
        diff = fxprof.compare(a, b)
    assert (diff.loc[["blocks_9", "blocks_10", "blocks_11"], "verdict"] == "").all()


def test_cli_compare_shows_p_values_verdicts_interval_and_warnings(clock, tmp_path, capsys):
    a = _profile(clock, _costs(PATTERN_A))
    b = _profile(clock, _costs(PATTERN_B, scale={4: 2.0}))
    b.meta["threads"] = a.meta["threads"] + 1
    a.save(tmp_path / "a.json")
    b.save(tmp_path / "b.json")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the CLI says it in the header, not as a Python warning
        assert main(["compare", str(tmp_path / "a.json"), str(tmp_path / "b.json"), "--top", "3"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    # the headline (issue 32): the runs' ratio with its interval first, the summed node medians second, labelled
    assert lines[2].startswith("run: median run a ") and "b/a 1.1" in lines[2] and "95% interval" in lines[2]
    assert "(bootstrap over 20 and 20 runs; drift" in lines[2]
    assert lines[3].startswith("nodes (sum of node medians, without the time between nodes): a ")
    assert "verdicts: 1 slower, 0 faster, 13 same (Mann-Whitney U (two-sided) per node, Benjamini-Hochberg over 14 nodes" in out
    assert f"warning: CPU threads: a {a.meta['threads']}, b {b.meta['threads']}" in out
    header = next(line for line in out.splitlines() if line.startswith("node "))
    assert header.split() == ["node", "status", "kind", "scope", "a", "b", "delta", "ratio", "p_value", "verdict",
                              "a_pct", "b_pct", "delta_pts"]  # times carry their unit in each cell
    row = next(line for line in out.splitlines() if line.startswith("blocks_4 "))
    assert re.split(r"\s{2,}", row.strip())[9] == "slower"  # cells such as "1.23 ms" hold one space
    assert main(["compare", str(tmp_path / "a.json"), str(tmp_path / "b.json"), "--min-effect", "1.5"]) == 0
    assert "verdicts: 0 slower" in capsys.readouterr().out


def test_cli_defaults_match_the_library():
    from fxprof.cli.app import build_parser

    args = build_parser().parse_args(["compare", "a", "b"])
    assert args.alpha == ALPHA and args.min_effect == MIN_EFFECT and args.keep_outliers is False


@pytest.mark.parametrize("chunk", [1 << 18, 16], ids=["default-chunks", "tiny-chunks"])
def test_batched_p_values_equal_one_scipy_call_per_node(monkeypatch, chunk):
    """node_p_values tests nodes in batches (same sizes, ties or not), in chunks of bounded size;
    each p-value must equal scipy's for that node alone, whichever method scipy picks (exact
    without ties, else normal), however small the chunks."""
    import numpy as np
    from scipy.stats import mannwhitneyu

    from fxprof.core import stats
    from fxprof.core.stats import node_p_values

    monkeypatch.setattr(stats, "_CHUNK", chunk)

    rng = np.random.default_rng(0)
    pairs = []
    for k in range(300):
        na, nb = rng.choice([2, 3, 5, 8, 9, 20]), rng.choice([2, 5, 8, 20])
        a, b = rng.normal(1.0, 0.1, na), rng.normal(1.05, 0.1, nb)
        if k % 3 == 0:  # ties
            a, b = np.round(a, 1), np.round(b, 1)
        pairs.append((a, b))
    pairs += [(np.ones(4), np.ones(5)), (np.array([1.0, np.nan]), np.ones(3)), (np.array([1.0]), np.ones(3))]
    raw, adjusted = node_p_values(pairs)
    for (a, b), p in zip(pairs[:300], raw[:300]):
        assert p == mannwhitneyu(a, b, alternative="two-sided").pvalue
    assert raw[300] == 1.0 and np.isnan(raw[301]) and np.isnan(raw[302])  # all ties; too few samples
    assert np.isnan(adjusted[301]) and (adjusted[:301] >= raw[:301]).all()


def test_the_test_is_of_the_same_values_as_the_ratio_when_a_node_runs_twice_a_run():
    """b calls node l twice a run (1 ms each), a once: the ratio of medians is 2, and the
    Mann-Whitney test must be of the per-run sums too (not of single calls), so: slower."""
    import numpy as np
    import pandas as pd

    from fxprof.core.nodes import NodeInfo
    from fxprof.core.profile import Profile

    nodes = [NodeInfo("l", "call_function", "torch.relu", "", "", "")]
    rng = np.random.default_rng(0)

    def prof(calls):
        runs = 20
        samples = pd.DataFrame({"node": ["l"] * (runs * calls), "run": np.repeat(np.arange(runs), calls),
                                "time_ms": 1.0 + rng.normal(0, 0.01, runs * calls)})
        samples["host_ms"] = samples["time_ms"]
        totals = samples.groupby("run")["time_ms"].sum().to_numpy()
        return Profile(nodes, samples, pd.DataFrame({"run": np.arange(runs), "total_ms": totals}), {"model": "m"})

    diff = fxprof.compare(prof(1), prof(2), warn=False)
    assert diff.loc["l", "ratio"] == pytest.approx(2.0, rel=0.05)
    assert diff.loc["l", "p_value"] < 1e-6 and diff.loc["l", "verdict"] == "slower"


def test_three_runs_a_side_cannot_tell_and_say_so(clock):
    """issue 26 #7: with 3 runs a side the smallest possible p-value is 0.1, so b exactly 3x a
    was called "same" on every node; it is "too few runs" now, in the table and the header."""
    from fxprof.core.stats import smallest_p_value
    from fxprof.views.text import render_compare

    def three(scale):
        costs = [[base * scale * f for f in (1.0, 1.02, 0.98)] for base in BASE_MS]
        return fxprof.profile(Chain(clock, costs), torch.ones(1, 2), warmup=0, iters=3, timer=FakeTimer(clock),
                              leaf_modules=[Work], anatomy=False, name="chain")

    diff = fxprof.compare(three(1.0), three(3.0))
    assert (_body(diff)["ratio"].round(6) == 3.0).all()
    assert (_body(diff)["verdict"] == "too few runs").all()
    assert smallest_p_value(3, 3) == pytest.approx(0.1) and smallest_p_value(4, 4) < ALPHA
    assert "0 same, 14 too few runs to tell" in render_compare(diff)  # the 12 blocks, input and output


def test_a_node_from_zero_to_some_time_is_slower(clock):
    """issue 26 #7: 0 ms in a, 5 ms in b, p far below alpha, was "same" (its ratio is NaN)."""
    a_costs = _costs(PATTERN_A)
    b_costs = _costs(PATTERN_B)
    a_costs[11] = [0.0] * RUNS
    b_costs[11] = [5.0 * (1 + 0.02 * (p - 2)) for p in PATTERN_B]
    diff = fxprof.compare(_profile(clock, a_costs), _profile(clock, b_costs))
    row = diff.loc["blocks_11"]
    assert row["a_ms"] == 0.0 and row["b_ms"] > 4.5 and row["p_value"] < 1e-6
    assert row["verdict"] == "slower"
    assert (_body(diff).drop("blocks_11")["verdict"] == "same").all()


def test_a_node_in_two_modes_is_noisy_not_faster(clock):
    """Issue 32: a baseline measured on a busy machine (one node 3x slower in half the runs at
    random) gives no confident "faster" for it; the page says how many and why."""
    costs_a = _costs(PATTERN_A)
    costs_a[6] = [BASE_MS[6] * (3.0 if i % 2 else 1.0) for i in range(RUNS)]  # two modes
    costs_b = _costs(PATTERN_B, scale={6: 0.5, 0: 0.5})
    diff = fxprof.compare(_profile(clock, costs_a), _profile(clock, costs_b))
    assert diff.loc["blocks_0", "verdict"] == "faster" and diff.loc["blocks_0", "noise"] == ""
    assert diff.loc["blocks_6", "p_value"] < ALPHA  # the test alone would call it faster
    assert diff.loc["blocks_6", "verdict"] == "noisy"
    assert diff.loc["blocks_6", "noise"].startswith("a has two modes (")
    from fxprof.views.text import render_compare

    text = render_compare(diff)
    assert "verdicts: 0 slower, 1 faster, 12 same, 1 noisy (samples in two modes or spread beyond the change" in text
    header = next(line for line in text.splitlines() if line.startswith("node "))
    assert header.split()[-1] == "noise"


def test_noise_reasons():
    import numpy as np

    from fxprof.core.noise import modes, noise_reason

    assert modes(np.array([3.0, 3.1, 7.0, 6.9, 3.05, 7.1])) == pytest.approx((3.05, 7.0))
    assert modes(np.linspace(1.0, 1.2, 20)) is None
    assert modes(np.array([1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 9.0])) is None  # one slow run is a tail
    spread = noise_reason(np.linspace(2.0, 4.0, 20), np.linspace(2.9, 4.9, 20))
    assert spread.startswith("a's IQR 1 ms is wider than the change 900 us")
    assert noise_reason(np.linspace(2.0, 2.2, 20), np.linspace(4.0, 4.2, 20)) == ""


def test_a_node_that_moved_far_in_two_modes_is_noisy_not_same(clock):
    """docs/tour.md re-run on a busy machine: layer2_0_conv2 read a 250 us, b 13.1 ms (52x), p 0.43,
    verdict "same" -- b's samples were in two modes (8 near 0.2 ms, 12 near 15 ms). A node whose
    median moved by the minimum effect or more without a significant test is "noisy", with why."""
    costs_a = _costs(PATTERN_A)
    costs_b = _costs(PATTERN_B)
    costs_a[3] = [0.21 + 0.01 * (i % 10) for i in range(RUNS - 1)] + [16.3]
    costs_b[3] = [0.13 + 0.01 * i for i in range(8)] + [12.8 + 0.4 * i for i in range(12)]
    diff = fxprof.compare(_profile(clock, costs_a), _profile(clock, costs_b))
    row = diff.loc["blocks_3"]
    assert row["ratio"] > 20 and row["p_value"] >= ALPHA  # the test cannot tell: before, "same"
    assert row["verdict"] == "noisy" and "b has two modes" in row["noise"], (row["verdict"], row["noise"])
    others = diff[(diff["kind"] == "work") & (diff.index != "blocks_3")]
    assert set(others["verdict"]) == {"same"}  # nothing else moved
