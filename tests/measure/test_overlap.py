"""FSDP2's all-gathers against the work around them (fxprof.overlap and the header's line):
real gloo jobs under torchrun on the CPU (tests/overlap_worker.py): four blocks, each prefetching
the next one's parameters, FSDP's all-gathers synchronous (its default) or asynchronous."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from test_distributed import HERE, _env, _torchrun
from test_distributed_sharded import needs_fsdp

import fxprof
from fxprof.core.overlap import OVERLAP_COLUMNS, fsdp_steps

WORKER = HERE / "overlap_worker.py"


@pytest.fixture(scope="module")
def profiles(tmp_path_factory):
    out = tmp_path_factory.mktemp("overlap")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", str(WORKER), str(out)]
    result = _torchrun(cmd, env=_env(), capture_output=True, text=True, timeout=1200, stdin=subprocess.DEVNULL, cwd=out)
    assert result.returncode == 0, result.stderr[-4000:]
    return {name: fxprof.load(out / f"{name}.json") for name in ("sync", "async", "async_train")}


def _per_run(prof, names):
    """Per (run): the sum of the named nodes' times in that run."""
    s = prof.kept_samples()  # the runs the statistics use (outlier runs left out)
    return s[s["node"].astype(str).isin(names)].groupby("run")["time_ms"].sum()


def _starts(prof, name):
    s = prof.kept_samples()  # the runs the statistics use (outlier runs left out)
    return s[s["node"].astype(str) == name].set_index("run")


@pytest.mark.slow  # the torchrun job (12 s): the README's command stays under ten minutes
@needs_fsdp
def test_every_layers_gather_is_paired_with_its_wait(profiles):
    for name, prof in profiles.items():
        table = fxprof.overlap(prof)
        assert list(table.columns[:len(OVERLAP_COLUMNS)]) == list(OVERLAP_COLUMNS)
        phases = ["forward", "backward"] if name == "async_train" else ["forward"]
        for phase in phases:
            for block in ("b0", "b1", "b2", "b3"):
                row = table.loc[(block, phase)]
                assert row["gathers"] == 1, (name, block, phase)
                assert row["exposed_ms"] == pytest.approx(row["issue_ms"] + row["waited_ms"])
                assert 0 <= row["hidden_pct"] <= 100
                assert row["most_waited_rank"] in (0, 1)
        # the issue's median is the all-gather row's own (one call per run, every rank's runs)
        gather = "b1_all_gather" if name != "async_train" else "fsdp:b1_all_gather"
        assert table.loc[("b1", "forward"), "issue_ms"] == pytest.approx(prof.df.loc[gather, "median_ms"])
    steps = fsdp_steps(profiles["async_train"])
    assert {"all_gather", "wait", "reduce_scatter"} <= set(steps.values())
    train = fxprof.overlap(profiles["async_train"])
    assert (train.xs("backward", level="phase")["reduce_scatter_ms"] > 0).all()  # post-backward's rows


@pytest.mark.slow  # the torchrun job (12 s): the README's command stays under ten minutes
@needs_fsdp
def test_a_synchronous_gather_hides_nothing_and_the_header_says_why(profiles):
    """FSDP's default on the CPU: the prefetched gather runs inside b0's pre-forward, so b0's own
    compute between b1's issue and b1's wait hid none of it."""
    prof = profiles["sync"]
    table = fxprof.overlap(prof)
    blocks = table.loc[[(b, "forward") for b in ("b0", "b1", "b2", "b3")]]
    assert blocks["blocking"].all() and (blocks["hidden_pct"] == 0).all() and (blocks["ahead_ms"] == 0).all()
    line = next(x for x in prof.summary(top=0).splitlines() if x.startswith("FSDP all-gathers:"))
    assert "none of it hidden behind other work" in line and "unshard_async_op is off" in line, line
    # ... which is what was measured: fxprof issues every gather as FSDP does (synchronously here, the root's and
    # b0's too, which no one prefetches), so the issue holds the collective and the wait after it nothing
    for layer in ("", "b0", "b1", "b2", "b3"):
        row = table.loc[(layer, "forward")]
        assert row["issue_ms"] > row["waited_ms"], (layer, row.to_dict())
    # exposed: the median over runs (of both ranks) of a run's all-gather rows, plus that of its wait rows
    steps = fsdp_steps(prof)
    issues, waits = [n for n, s in steps.items() if s == "all_gather"], [n for n, s in steps.items() if s == "wait"]
    assert len(issues) == len(waits) == 5  # the root and four blocks
    exposed = float(np.median(_per_run(prof, issues))) + float(np.median(_per_run(prof, waits)))
    assert f"FSDP all-gathers: {exposed:.3f} ms exposed per run" in line, line


@pytest.mark.slow  # the torchrun job (12 s): the README's command stays under ten minutes
@needs_fsdp
def test_an_asynchronous_prefetch_is_in_flight_while_the_previous_block_computes(profiles):
    """b1's all-gather is issued in b0's pre-forward and waited for before b1's first node: b0's
    linear, relu, linear and add ran in between, so the time ahead of b1's wait is at least
    theirs, run by run (and so in the median)."""
    prof = profiles["async"]
    table = fxprof.overlap(prof)
    b0 = [n.name for n in prof.nodes if n.scope.startswith("b0") and n.name in prof.df.index
          and n.kind in ("linear", "relu", "add")]
    assert len(b0) == 4
    compute = _per_run(prof, b0)
    issue, wait = _starts(prof, "b1_all_gather"), _starts(prof, "b1_wait")
    window = wait["start_ms"] - (issue["start_ms"] + issue["time_ms"])
    assert (window >= compute.reindex(window.index) - 1e-6).all()
    row = table.loc[("b1", "forward")]
    assert not row["blocking"] and row["ahead_ms"] == pytest.approx(float(np.median(window)))
    assert row["ahead_ms"] >= float(np.median(compute)) - 1e-6
    assert row["hidden_pct"] == pytest.approx(100 * row["ahead_ms"] / (row["ahead_ms"] + row["waited_ms"]))
    # the root's own gather stays synchronous (only the blocks were switched): said so
    assert table.loc[("", "forward"), "blocking"]
    line = next(x for x in prof.summary(top=0).splitlines() if x.startswith("FSDP all-gathers:"))
    assert "hidden behind other work" in line and "none of it" not in line and "blocked in the issue" in line, line


@pytest.mark.slow  # the torchrun job (12 s): the README's command stays under ten minutes
@needs_fsdp
def test_overlap_survives_saving_and_is_empty_without_fsdp(profiles, tmp_path):
    prof = profiles["async"]
    for ext in ("json", "npz"):
        prof.save(tmp_path / f"p.{ext}")
        back = fxprof.load(tmp_path / f"p.{ext}")
        assert fxprof.overlap(back).equals(fxprof.overlap(prof))
    import torch
    plain = fxprof.profile(torch.nn.Linear(4, 4), torch.randn(2, 4), warmup=0, iters=2, anatomy=False, memory=False)
    assert fxprof.overlap(plain).empty and not any(x.startswith("FSDP") for x in plain.summary().splitlines())
    prof.to_csv(tmp_path / "p.csv")
    with pytest.raises(TypeError, match=r"a per-node table \(\.csv\) has no runs"):
        fxprof.overlap(fxprof.read_csv(tmp_path / "p.csv"))


@pytest.mark.slow  # the torchrun job (12 s): the README's command stays under ten minutes
@needs_fsdp
def test_show_overlap_prints_each_layers_row(profiles, tmp_path, capsys):
    from fxprof.cli import main

    prof = profiles["async_train"]
    table = fxprof.overlap(prof)
    assert table.xs("forward", level="phase")["reduce_scatter_ms"].isna().all()  # no reduce-scatter in a forward
    prof.save(tmp_path / "t.json")
    assert main(["show", str(tmp_path / "t.json"), "--top", "3", "--overlap"]) == 0
    out = capsys.readouterr().out
    lines = out[out.index("layer    phase"):].splitlines()
    assert "hidden_pct" in lines[0] and "most_waited_rank" in lines[0]
    body = [x.split() for x in lines[2:] if x.strip()]  # the four times each split into value and unit
    assert [(r[0], r[1]) for r in body] == [(layer or "(root)", phase) for layer, phase in table.index]
    assert [r[11] for r in body] == [f"{v:.0f}" for v in table["hidden_pct"]]
    prof.to_csv(tmp_path / "t.csv")
    assert main(["show", str(tmp_path / "t.csv"), "--overlap"]) != 0
    assert "--overlap needs a saved profile" in capsys.readouterr().err


@pytest.mark.slow  # the torchrun job (12 s): the README's command stays under ten minutes
@needs_fsdp
def test_the_report_has_the_overlap_table(profiles, tmp_path):
    pytest.importorskip("plotly")
    prof = profiles["async_train"]
    prof.to_html(tmp_path / "r.html")
    page = (tmp_path / "r.html").read_text()
    start = page.index('<section id="overlap">')
    section = page[start:page.index("</section>", start)]
    assert "FSDP all-gathers per layer: exposed and hidden" in section and 'href="#overlap"' in page
    assert section.count("<tr>") == len(fxprof.overlap(prof)) + 1  # the head and a row per layer and phase
    assert ">b1</td><td>backward</td>" in section and "FSDP all-gathers: " in section  # the header's line under it
    plain = profiles["sync"]
    plain.to_html(tmp_path / "s.html")
    assert "<td>yes</td>" in (tmp_path / "s.html").read_text()  # synchronous gathers: blocking


def test_the_line_says_why_the_layers_medians_do_not_add_up_to_it():
    """The header's figures are medians over runs of each run's sums; the table's are each layer's
    own medians. When the slow gather falls on a different layer in each run (here a 10 ms issue on
    layer a in run 0, on b in run 1, on neither in run 2), the two disagree (10.1 ms against
    0.2 ms): the line gives the table's sums and says why, instead of leaving a 50x gap unexplained."""
    import pandas as pd

    from fxprof.core.nodes import NodeInfo
    from fxprof.core.profile import Profile
    from fxprof.views.overlap import overlap_lines

    nodes = [NodeInfo(f"{layer}_{step}", "call_function", f"fsdp.{step}({layer})", "", layer, "", kind=step, role="fsdp")
             for layer in ("a", "b") for step in ("all_gather", "wait")]
    issues = {0: (10.0, 0.1), 1: (0.1, 10.0), 2: (0.1, 0.1)}
    rows = []
    for run, (a, b) in issues.items():
        start = 100.0 * run
        for name, ms in (("a_all_gather", a), ("a_wait", 0.05), ("b_all_gather", b), ("b_wait", 0.05)):
            rows.append((name, run, ms, ms, start, start))
            start += ms
    samples = pd.DataFrame(rows, columns=["node", "run", "time_ms", "host_ms", "start_ms", "host_start_ms"])
    runs = pd.DataFrame({"run": [0, 1, 2], "total_ms": [20.0, 20.0, 20.0]})
    prof = Profile(nodes, samples, runs, {"device": "cpu", "fsdp": {"unshard_async_op": {"a": False, "b": False}}})
    table = fxprof.overlap(prof)
    assert table["issue_ms"].sum() == pytest.approx(0.2)
    (line,) = overlap_lines(prof)
    assert line.startswith("FSDP all-gathers: 10.200 ms exposed per run (median, 51% of the run: 10.100 ms issuing"), line
    assert "add up to 0.200 ms issuing and 0.100 ms waited" in line and "a median of sums is not the sum of medians" in line, line
    # where they agree, nothing is added
    even = samples.assign(time_ms=samples["time_ms"].where(samples["node"].str.endswith("wait"), 1.0))
    (plain,) = overlap_lines(Profile(nodes, even, runs, prof.meta))
    assert plain.endswith("per layer: fxprof.overlap(prof)"), plain
