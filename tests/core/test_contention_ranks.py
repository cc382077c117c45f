"""Busy runs of a gathered profile are left out rank by rank: a rank busy in most of its runs
keeps them, so that the statistics never lose a whole rank (as outliers are judged per rank)."""

import numpy as np

from fxprof.core.contention import Contention, machine_words


def _found(busy, ranks):
    n = len(busy)
    wall = np.full(n, 10.0)
    lost = np.where(busy, 5.0, 0.0)
    return Contention(runs=np.arange(n), lost_ms=lost, wall_ms=wall, busy=np.asarray(busy), load=4.0, cores=2,
                      source="schedstat", ranks=np.asarray(ranks))


def test_a_rank_busy_in_every_run_keeps_its_runs_and_the_line_says_so():
    # rank 0: all 4 runs busy; rank 1: one of its 4 runs busy (3 quiet remain)
    found = _found([True, True, True, True, False, False, True, False], [0, 0, 0, 0, 1, 1, 1, 1])
    assert found.left_out_runs == [6]
    assert found.kept_busy_ranks == [0]
    line = machine_words(found)
    assert "1 of them are left out" in line and "rank(s) 0 had too few quiet runs" in line, line


def test_every_rank_with_enough_quiet_runs_leaves_its_busy_runs_out():
    found = _found([True, False, False, False, False, False, False, True], [0, 0, 0, 0, 1, 1, 1, 1])
    assert found.left_out_runs == [0, 7] and found.kept_busy_ranks == []
    assert "they are left out of the statistics, which use the 6 quiet runs" in machine_words(found)


def test_one_process_decides_over_all_its_runs():
    found = _found([True] * 6 + [False] * 2, [0] * 8)
    found = Contention(**{**found.__dict__, "ranks": None})
    assert found.left_out_runs == [] and not found.left_out
    assert "too few quiet runs to leave them out" in machine_words(found)
