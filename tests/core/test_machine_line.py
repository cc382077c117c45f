"""The machine line's three words (no torch needed): quiet, BUSY (runs lost time to other
processes) and LOADED (no run lost time, but the load average says other processes ran beside
the model and slowed it without taking its CPU)."""

from __future__ import annotations

import pandas as pd

from fxprof.core.contention import busy_machine, contention, loaded, machine_words, steps_machine_words


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
