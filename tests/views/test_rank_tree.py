"""The report's module tree of a gathered profile adds up to what its root says (issue 69, item 6).

A 2-rank report said "median run 70.2 ms" at its root while its boxes held 46.4 ms and a 56.5 us
grey box: the root was the median over every rank's runs pooled, the boxes the node medians over
those pooled runs, and the grey box the rest of a third figure (each run's node sum). Now each rank
is a box of its own tree over its own runs, and the root is what the rank boxes hold.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

import fxprof
from fxprof.core.rankmerge import merge, profile_parts, rank_profile, with_ranks
from fxprof.views.tables import format_ms

pytest.importorskip("plotly")
from fxprof.views.report_figures import OUTSIDE, tree_figure  # noqa: E402


def _profile(model: nn.Module, runs: int = 5) -> fxprof.Profile:
    return fxprof.profile(model.eval(), torch.randn(16, 32), iters=runs, warmup=1, peaks=None)


def _gathered(*profiles: fxprof.Profile) -> fxprof.Profile:
    parts = []
    for rank, prof in enumerate(profiles):
        tagged = with_ranks(prof, [rank] * prof.num_runs)
        tagged.meta.update(rank=rank, world_size=len(profiles), backend="gloo")
        parts.append(profile_parts(tagged))
    return merge(parts)


def _small(width: int) -> nn.Module:
    return nn.Sequential(nn.Linear(32, width), nn.ReLU(), nn.Linear(width, 32))


class _Other(nn.Module):  # another graph than _small's: the merged nodes carry an rN: prefix
    def __init__(self) -> None:
        super().__init__()
        self.first, self.second = nn.Linear(32, 64), nn.Linear(64, 32)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.second(torch.relu(self.first(x))))


def _held(trace, box: str) -> float:
    """What ``box`` holds in the icicle (branchvalues="remainder"): its value and every sector's below it."""
    children: dict[str, list[str]] = {}
    for sector, parent in zip(trace.ids, trace.parents):
        children.setdefault(parent, []).append(sector)
    value = dict(zip(trace.ids, trace.values))
    return value[box] + sum(_held(trace, child) for child in children.get(box, []))


@pytest.fixture(scope="module")
def same_graph() -> fxprof.Profile:
    return _gathered(_profile(_small(64)), _profile(_small(256)))  # one rank slower: its nodes' times differ


@pytest.fixture(scope="module")
def other_graphs() -> fxprof.Profile:
    return _gathered(_profile(_small(64)), _profile(_Other()))


@pytest.mark.parametrize("which", ["same_graph", "other_graphs"])
def test_the_root_of_a_gathered_tree_is_what_its_rank_boxes_hold(which, request):
    gathered = request.getfixturevalue(which)
    (trace,) = tree_figure(gathered).data
    custom = dict(zip(trace.ids, trace.customdata))
    parent_of = dict(zip(trace.ids, trace.parents))
    assert trace.branchvalues == "remainder" and parent_of["m"] == ""
    assert [s for s, p in parent_of.items() if p == "m"] == ["m/rank 0", "m/rank 1"]
    total = _held(trace, "m")
    assert total == pytest.approx(sum(trace.values))
    assert custom["m"][2] == f"2 ranks' median runs summed {format_ms(total)}"
    for rank in (0, 1):
        box = f"m/rank {rank}"
        alone = rank_profile(gathered, rank)
        run_ms = float(np.median(alone.kept_totals()))
        nodes = alone.df.loc[alone.df["calls"] > 0, "median_ms"].clip(lower=0).sum()
        held = _held(trace, box)
        assert held == pytest.approx(max(run_ms, nodes))  # its own median run: its nodes and the time in no node
        if run_ms > nodes:
            assert custom[box][2] == f"median run {format_ms(run_ms)}"
            assert dict(zip(trace.ids, trace.values))[f"{box}/{OUTSIDE}"] == pytest.approx(run_ms - nodes)
        else:
            assert custom[box][2].startswith(f"nodes {format_ms(nodes)}")
        # every node of the rank is in its box once, at its own rank's median
        leaves = [s for s in trace.ids if s.startswith(box + "/") and s not in set(trace.parents)
                  and not s.endswith(OUTSIDE)]
        assert len(leaves) == int((alone.df["calls"] > 0).sum())


def test_every_box_of_a_single_profile_still_adds_up_to_the_median_run(same_graph):
    alone = rank_profile(same_graph, 0)
    (trace,) = tree_figure(alone).data
    run_ms = float(np.median(alone.kept_totals()))
    nodes = float(alone.df["median_ms"].clip(lower=0).sum())
    assert _held(trace, "m") == pytest.approx(max(run_ms, nodes))
    said = dict(zip(trace.ids, trace.customdata))["m"][2]
    assert said == (f"median run {format_ms(run_ms)}" if run_ms > nodes
                    else f"nodes {format_ms(nodes)} (median run {format_ms(run_ms)})")
