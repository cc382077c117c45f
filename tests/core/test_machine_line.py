"""The machine line's three words (no torch needed): quiet, BUSY (runs lost time to other
processes) and LOADED (no run lost time, but the process lost a share of its timed window, or
the load average says other processes ran beside the model and slowed it without taking its
CPU)."""

from __future__ import annotations

import math

import pandas as pd

from fxprof.core.contention import (
    between_runs_lost_ms,
    busy_machine,
    contention,
    loaded,
    loaded_words,
    machine_words,
    shared_window,
    steps_machine_words,
)


def _found(lost: list[float], load: float, cores: int):
    runs = pd.DataFrame({"run": range(len(lost)), "total_ms": [1.0] * len(lost)})
    return contention({"contention": {"lost_ms": lost, "load": [load], "cores": cores, "source": "schedstat"}}, runs)


def test_a_machine_whose_load_reached_its_cores_plus_one_is_never_called_quiet():
    """Beside six busy loops on two cores (load 4.7) a compiled decode step ran 1.3 ms against
    0.4 ms quiet, no step lost time on the run queue, and the line said "quiet"."""
    assert not loaded(2.9, 2) and loaded(3.0, 2) and not loaded(None, 2) and not loaded(5.0, 0)
    quiet, crowded = _found([0.0] * 4, 1.2, 2), _found([0.0] * 4, 4.7, 2)
    assert machine_words(quiet).startswith("machine: quiet: no timed run lost 5%")
    line = machine_words(crowded)
    assert line.startswith("machine: LOADED: no timed run lost 5% of its time to other processes, but the load "
                           "average reached 4.7 on 2 usable core(s)") and "taskset" in line and "quiet:" not in line
    assert busy_machine({"contention": {"lost_ms": [0.0] * 4, "load": [4.7], "cores": 2}},
                        pd.DataFrame({"run": range(4), "total_ms": [1.0] * 4})) == "load 4.7 on 2 usable core(s)"
    busy = machine_words(_found([0.5, 0.0, 0.0, 0.0], 4.7, 2))  # lost time is said first, LOADED or not
    assert busy.startswith("machine: BUSY: 1 of 4 timed runs lost")
    steps = [("prefill", [0.0], [2.0]), ("decode", [0.0, 0.0, 0.0], [0.4, 0.4, 0.4])]
    assert steps_machine_words(steps, 1.0, 2).startswith("machine: quiet: no step lost 5%")
    assert steps_machine_words(steps, 4.7, 2).startswith("machine: LOADED: no step lost 5% of its time")
    assert steps_machine_words(steps, 4.7, 2, noun="calls").startswith("machine: LOADED: no call lost")
    lost = [("prefill", [1.5], [2.0]), ("decode", [0.0, 0.0, 0.0], [0.4, 0.4, 0.4])]
    assert steps_machine_words(lost, 4.7, 2).startswith("machine: BUSY: the prefill lost 1.5 of its 2 ms")


def _windowed(lost: list[float], load: float, cores: int, window_lost: float, window: float):
    runs = pd.DataFrame({"run": range(len(lost)), "total_ms": [0.1] * len(lost)})
    return contention({"contention": {"lost_ms": lost, "load": [load], "cores": cores, "source": "schedstat",
                                      "window_lost_ms": window_lost, "window_ms": window}}, runs)


def test_a_process_that_lost_a_share_of_its_timed_window_is_never_called_quiet():
    """Beside one busy loop on its core, a 0.05 ms MLP's profile lost 25.8 of its 58.2 ms timed
    window to it, between the runs: no run was charged (each fits between the loop's slices),
    the load average (1.9 on one core) had not caught up, and the line said "quiet"."""
    assert shared_window(25.8, 58.2) and shared_window(3.0, 58.2) and not shared_window(2.8, 58.2)
    assert not shared_window(0.04, 0.5)  # a wake-up of a few microseconds is not contention
    assert not shared_window(math.nan, math.nan) and not shared_window(None, None) and not shared_window(1.0, 0.0)
    found = _windowed([0.0] * 300, 1.9, 1, 25.8, 58.2)
    assert found.loaded and not found.busy.any()
    line = machine_words(found)
    assert line.startswith("machine: LOADED: no timed run lost 5% of its time to other processes, but the process "
                           "waited 44% of the timed window (25.8 of 58.2 ms, the timed runs and what lay between them) "
                           "for a CPU that other processes held"), line
    assert "load average" not in line and "taskset" in line  # only the reading that crossed its rule is said
    both = machine_words(_windowed([0.0] * 4, 4.7, 2, 3000.0, 5000.0))
    assert "(3,000 of 5,000 ms," in both and "; and the load average reached 4.7 on 2 usable core(s)" in both, both
    assert machine_words(_windowed([0.0] * 4, 1.0, 2, 0.5, 58.2)).startswith("machine: quiet:")
    assert loaded_words(found) == "the process lost 44% of its timed window to other processes"
    # a file written before the window was measured reads as before
    old = _found([0.0] * 4, 1.0, 2)
    assert math.isnan(old.window_ms) and not old.loaded and machine_words(old).startswith("machine: quiet:")
    # busy runs are said first, whatever the window lost
    assert machine_words(_windowed([0.5, 0.0, 0.0, 0.0], 1.0, 2, 30.0, 50.0)).startswith("machine: BUSY: 1 of 4")
    steps = [("prefill", [0.0], [2.0]), ("decode", [0.0, 0.0, 0.0], [0.4, 0.4, 0.4])]
    line = steps_machine_words(steps, 1.0, 2, window=(3.0, 10.0))
    assert line.startswith("machine: LOADED: no step lost 5% of its time to other processes, but the process waited "
                           "30% of the timed window (3 of 10 ms, the timed steps and what lay between them)"), line
    assert steps_machine_words(steps, 1.0, 2, window=(0.1, 10.0)).startswith("machine: quiet:")


def test_quiet_runs_kept_beside_a_window_lost_between_them_are_not_said_to_be_clean():
    """Busy runs left out, the statistics use the quiet ones: where the process lost a further
    share of the window between the runs, the quiet runs ran beside the same processes (a
    compiled decode step beside one loop on its core: 1.03-1.17x, only some runs charged), and
    the line says so with the figures."""
    runs = pd.DataFrame({"run": range(8), "total_ms": [1.0] * 8})
    record = {"lost_ms": [0.5, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0], "own_lost_ms": [0.25], "load": [1.0], "cores": 2,
              "source": "schedstat", "window_lost_ms": 6.75, "window_ms": 20.0}
    assert between_runs_lost_ms(record) == 6.0
    found = contention({"contention": record}, runs)
    line = machine_words(found)
    assert "left out of the statistics, which use the 7 quiet runs" in line
    assert ("; between the runs the process lost a further 30% of the timed window (6 of 20 ms) to them, so the quiet "
            "runs ran beside other processes too") in line, line
    quiet_between = contention({"contention": {**record, "window_lost_ms": 1.0}}, runs)
    assert quiet_between.between_lost_ms == 0.25 and "a further" not in machine_words(quiet_between)
    assert math.isnan(between_runs_lost_ms({"lost_ms": [0.5]}))  # no window measured: nothing said


def test_a_comparison_names_the_side_profiled_on_a_loaded_machine():
    """fxprof compare said nothing of a side whose process lost 44% of its window to a loop on
    its core (no run charged), though its times may be high; the gate (busy_sides_words) did."""
    from fxprof.core.compare import busy_sides
    from fxprof.core.nodes import NodeInfo
    from fxprof.core.profile import Profile

    def side(window_lost: float) -> Profile:
        samples = pd.DataFrame({"node": ["a", "a"], "run": [0, 1], "time_ms": [0.1, 0.1], "host_ms": [0.1, 0.1]})
        prof = Profile([NodeInfo(name="a", op="call_function", target="f", module_type="", scope="", range="")], samples,
                       pd.DataFrame({"run": [0, 1], "total_ms": [0.1, 0.1]}),
                       {"contention": {"lost_ms": [0.0, 0.0], "load": [0.5], "cores": 2, "source": "schedstat",
                                       "window_lost_ms": window_lost, "window_ms": 10.0}})
        assert prof.contention is not None
        return prof

    said = busy_sides(side(0.0), side(4.4))
    assert said == ["b was profiled on a loaded machine (the process lost 44% of its timed window to other processes): "
                    "no timed run lost 5% of its time, but processes beside the runs slow them without taking their "
                    "CPU, so its times may be high"], said


def test_the_window_figures_read_as_printed_and_never_above_the_window():
    """A review found '1e+03 of 1,500 ms' (999.7 rounds to 1000 after the < 1000 test) and
    '150% ... (30 of 20 ms' from a record that said more than its window."""
    line = machine_words(_windowed([0.0] * 4, 0.5, 2, 999.7, 1500.0))
    assert "(1,000 of 1,500 ms," in line and "e+" not in line, line
    over = _windowed([0.0] * 4, 0.5, 2, 30.0, 20.0)
    assert over.window_lost_ms == 20.0 and "waited 100% of the timed window (20 of 20 ms," in machine_words(over)
    steps = [("prefill", [1400.0], [1999.6]), ("decode", [0.0], [0.4])]
    assert "the prefill lost 1,400 of its 2,000 ms (70%)" in steps_machine_words(steps, 0.5, 2)


def test_a_gathered_profile_names_a_rank_whose_window_crossed_the_rule_before_a_larger_share_that_did_not():
    """A review: rank 0's 0.04 of 0.5 ms (8%, under the 0.05 ms floor) hid rank 1's 5 of 90 ms."""
    runs = pd.DataFrame({"run": range(4), "rank": [0, 0, 1, 1], "rank_run": [0, 1, 0, 1], "total_ms": [0.1] * 4})

    def record(lost: float, window: float) -> dict:
        return {"contention": {"lost_ms": [0.0, 0.0], "load": [0.5], "cores": 2, "source": "schedstat",
                               "window_lost_ms": lost, "window_ms": window}}

    found = contention({"per_rank": [{"rank": 0, **record(0.04, 0.5)}, {"rank": 1, **record(5.0, 90.0)}]}, runs)
    assert found is not None and found.window_rank == 1 and found.loaded
    assert "but rank 1's process waited 6% of the timed window (5 of 90 ms," in machine_words(found)
    neither = contention({"per_rank": [{"rank": 0, **record(0.04, 0.5)}, {"rank": 1, **record(1.0, 90.0)}]}, runs)
    assert neither is not None and neither.window_rank == 0 and not neither.loaded  # the larger share, under the rule
    assert machine_words(neither).startswith("machine: quiet:")
