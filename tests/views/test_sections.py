"""The header and the report as ordered lists of per-feature sections (fxprof.views.sections):
every header line comes from a section, in the list's order; each section speaks only for a
profile that has its feature; the report's sections and links follow the list; the renderers
that loop over the lists read nothing of the profile themselves (issue 59)."""

from __future__ import annotations

import ast
import inspect
import re
import textwrap

import pytest
import torch
from conftest import FakeCostModel, Work
from torch import nn

import fxprof
from fxprof.core.rankmerge import merge, profile_parts, with_ranks
from fxprof.views import report, text
from fxprof.views.sections import HEADER, REPORT


def _fake(clock, fake_timer, **options):
    return fxprof.profile(FakeCostModel(clock), torch.ones(2, 3), timer=fake_timer, warmup=0, iters=4, anatomy=False,
                          leaf_modules=[Work], name="FakeCostModel", **options)


@pytest.fixture
def profiles(clock, fake_timer):
    torch.manual_seed(0)
    step_model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    parts = []
    for rank in range(2):
        prof = _fake(clock, fake_timer)
        prof.meta.update(rank=rank, world_size=2, backend="gloo")
        parts.append(profile_parts(with_ranks(prof, [rank] * prof.num_runs)))
    return {
        "eager": _fake(clock, fake_timer),
        "step": fxprof.profile(step_model, torch.randn(3, 4), backward=True, warmup=0, iters=2, anatomy=False),
        "isolated": fxprof.profile(nn.Sequential(nn.Linear(4, 4), nn.ReLU()), torch.randn(2, 4), mode="isolated",
                                   warmup=0, iters=2),
        "ranks": merge(parts),
    }


def _by_section(prof) -> dict[str, list[str]]:
    return {section.name: section.lines(prof) for section in HEADER}


def test_the_sections_have_one_name_each_and_the_header_is_their_lines_in_order(profiles):
    assert len({s.name for s in HEADER}) == len(HEADER)
    assert len({s.anchor for s in REPORT}) == len(REPORT)
    for name, prof in profiles.items():
        lines = text.render_header(prof).splitlines()
        expected = [line for section in HEADER for line in section.lines(prof)]
        assert lines == expected, name
        # the header is the summary's first block, as every page shows it
        assert prof.summary().split("\n\n")[0].splitlines() == lines, name


def test_each_section_speaks_only_for_a_profile_with_its_feature(profiles):
    eager, step, isolated, ranks = (_by_section(profiles[k]) for k in ("eager", "step", "isolated", "ranks"))
    # the runs section: one of eager runs, compiled runs, isolated, none, chosen by the profile alone
    assert eager["runs"][0].startswith("run: median") and eager["isolated"] == eager["compiled runs"] == eager["no runs"] == []
    assert isolated["isolated"][0].startswith("mode isolated: each node re-run 2 times")
    assert isolated["runs"] == isolated["fidelity"] == isolated["training step"] == []
    assert step["training step"][0].startswith("training step: forward") and eager["training step"] == []
    assert ranks["ranks"][0].startswith("ranks: 2 of world size 2 (gloo)") and eager["ranks"] == []
    assert "(2 ranks)" in ranks["what"][0] and "(2 ranks)" not in eager["what"][0]
    assert eager["program"] == eager["incomplete"] == eager["overlap"] == []
    # the header's order: what was measured first, the runs before the features, INCOMPLETE last
    order = [s.name for s in HEADER]
    assert order[0] == "what" and order[-1] == "incomplete"
    assert order.index("runs") < order.index("ranks") < order.index("fidelity") < order.index("training step")


def test_an_interrupted_profile_says_so_last(profiles):
    prof = profiles["eager"]
    prof.meta.update(incomplete=True, requested_iters=10)
    assert text.render_header(prof).splitlines()[-1] == "INCOMPLETE: 4 of 10 requested runs completed"


def test_the_reports_sections_and_links_follow_the_list(profiles):
    pytest.importorskip("plotly")
    for name in ("eager", "step", "ranks"):
        page = report.render_report(profiles[name])
        shown = re.findall(r'<section id="([^"]+)"', page)
        assert shown == [s.anchor for s in REPORT if s.anchor in shown], name
        nav = page.split("<nav>", 1)[1].split("</nav>", 1)[0]
        assert re.findall(r'<a href="#([^"]+)"', nav) == shown, name
        assert {"tree", "kinds", "table"} <= set(shown)
    assert "ranks" in re.findall(r'<section id="([^"]+)"', report.render_report(profiles["ranks"]))
    assert "phases" in re.findall(r'<section id="([^"]+)"', report.render_report(profiles["step"]))
    assert not {"ranks", "phases", "breaks", "overlap"} & set(re.findall(r'<section id="([^"]+)"',
                                                                          report.render_report(profiles["eager"])))


def _body(function) -> ast.FunctionDef:
    node = ast.parse(textwrap.dedent(inspect.getsource(function))).body[0]
    assert isinstance(node, ast.FunctionDef)
    return node


@pytest.mark.parametrize("function", [text.render_header, report.render_report])
def test_the_shared_renderers_read_nothing_of_the_profile_themselves(function):
    """No ``profile.meta``, ``profile.ranks``, ``profile.is_compiled``...: a feature's condition is
    in its section, and a new feature adds a section, not a branch here."""
    reads = [f"profile.{n.attr}" for n in ast.walk(_body(function))
             if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == "profile"]
    assert reads == []


def test_render_header_is_one_loop_without_a_branch():
    branches = [n for n in ast.walk(_body(text.render_header)) if isinstance(n, (ast.If, ast.IfExp))]
    assert branches == []
