"""The CI gate: fxprof compare --fail-on and --markdown, and the whole run's verdict (fake clock: exact)."""

from __future__ import annotations

import pytest
from test_verdicts import PATTERN_A, PATTERN_B, _costs, _profile

from fxprof.cli import main
from fxprof.core.gate import gate, run_verdict
from fxprof.vocab import GATE_EXIT


@pytest.fixture
def pair(clock, tmp_path):
    """Saved profiles: a baseline, an equal one (same jitter, other order), one whose every node
    is 30% slower, and one with a single node twice as slow."""
    paths = {}
    for name, costs in (("base", _costs(PATTERN_A)), ("equal", _costs(PATTERN_B)),
                        ("slower", _costs(PATTERN_B, run_scale=1.3)), ("one_node", _costs(PATTERN_B, scale={4: 2.0}))):
        paths[name] = str(tmp_path / f"{name}.json")
        _profile(clock, costs).save(paths[name])
    return paths


def _run(capsys, *argv):
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_gate_fails_a_slower_profile_and_passes_an_equal_one(pair, capsys):
    code, out, _ = _run(capsys, "compare", pair["base"], pair["slower"], "--fail-on", "slower")
    assert code == GATE_EXIT == 3
    assert "fxprof gate (--fail-on slower): FAIL: b is slower than a" in out
    code, out, _ = _run(capsys, "compare", pair["base"], pair["equal"], "--fail-on", "slower")
    assert code == 0
    assert "fxprof gate (--fail-on slower): pass" in out
    code, _, _ = _run(capsys, "compare", pair["base"], pair["equal"], "--fail-on", "node-slower")
    assert code == 0


def test_min_effect_decides_whether_a_significant_slowdown_fails(pair, capsys):
    # 30% slower in every run: significant, but not by 50%
    code, out, _ = _run(capsys, "compare", pair["base"], pair["slower"], "--fail-on", "slower", "--min-effect", "0.5")
    assert code == 0 and "not significantly slower than a by 50%" in out


def test_node_slower_names_the_node_the_whole_run_gate_lets_pass(pair, capsys):
    code, out, _ = _run(capsys, "compare", pair["base"], pair["one_node"], "--fail-on", "node-slower")
    assert code == GATE_EXIT
    assert "1 node(s) slower in b" in out and "blocks_4 (2.00x)" in out


def test_markdown_summary_puts_the_verdict_first_then_the_table(pair, capsys, tmp_path):
    md = tmp_path / "summary.md"
    code, out, _ = _run(capsys, "compare", pair["base"], pair["slower"], "--fail-on", "slower", "--markdown", str(md))
    assert code == GATE_EXIT
    assert f"wrote markdown: {md}" in out
    text = md.read_text()
    lines = text.splitlines()
    assert lines[0] == "## :red_circle: fxprof: b is **slower** than a"
    assert lines[2].startswith("Median run b/a **1.300** (95% interval")
    assert "**Gate:** FAIL: b is slower than a" in text
    header = next(i for i, line in enumerate(lines) if line.startswith("| node"))
    assert header > lines.index("**Gate:** " + text.split("**Gate:** ")[1].splitlines()[0])
    assert lines[header + 1].startswith("|:")  # a GitHub pipe table
    assert "| slower" in text or "slower |" in text
    # the equal pair: a white circle and "same", appended after what the step summary held
    code, _, _ = _run(capsys, "compare", pair["base"], pair["equal"], "--markdown", str(md))
    first, _, second = md.read_text().partition("\n\n## :white_circle: fxprof: same")
    assert code == 0 and first.startswith("## :red_circle:") and second


def test_gate_needs_saved_profiles_not_csv_tables(pair, capsys, tmp_path, clock):
    csv = tmp_path / "base.csv"
    _profile(clock, _costs(PATTERN_A)).to_csv(str(csv))
    code, _, err = _run(capsys, "compare", str(csv), pair["slower"], "--fail-on", "slower")
    assert code == 2 and "per-node CSV table" in err
    code, _, err = _run(capsys, "compare", pair["base"], pair["slower"], "--by", "scope", "--fail-on", "slower")
    assert code == 2 and "--by scope" in err


def test_run_verdict_follows_compares_rules():
    a = [10.0, 10.2, 9.9, 10.1, 10.0, 9.8, 10.3, 10.1]
    assert run_verdict(a, [x * 1.5 for x in a]).verdict == "slower"
    assert run_verdict(a, [x / 1.5 for x in a]).verdict == "faster"
    assert run_verdict(a, [x * 1.05 for x in a]).verdict == "same"  # significant, below the 10% effect
    few = run_verdict(a[:3], [x * 2 for x in a[:3]])
    assert few.verdict == "too few runs" and few.ratio == pytest.approx(2.0)
    with pytest.raises(ValueError, match="fail_on"):
        gate(__import__("pandas").DataFrame({"verdict": []}), "faster", None)


def test_markdown_prints_each_warning_as_its_own_sentence():
    """A busy side's warning read '- :warning: the profiles differ in b was profiled on a busy
    machine' in the Markdown summary: every warning was put after 'the profiles differ in'."""
    import pandas as pd

    from fxprof.views.markdown import render_compare_markdown

    diff = pd.DataFrame({"status": ["both"], "verdict": ["same"]}, index=["x"])
    diff.attrs["warnings"] = ["inputs: a Tensor(shape=[1]), b Tensor(shape=[2])",
                              "b was profiled on a busy machine: 1 of 20 timed runs lost 5% or more of their time"]
    text = render_compare_markdown(diff, "a.json", "b.json")
    assert "- :warning: b was profiled on a busy machine: 1 of 20" in text
    assert "- :warning: inputs: a Tensor(shape=[1])" in text and "differ in b was" not in text
