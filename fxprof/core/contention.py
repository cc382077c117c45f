"""A busy machine, read from the time each run lost to other processes (no torch).

:mod:`fxprof.measure.timing.contention` records, per timed run, the milliseconds the process waited
for a CPU that another process held (``meta["contention"]["lost_ms"]``; the model's own
unprofiled runs' in ``own_lost_ms``), with the load average and the usable cores. From them:

- a run is **busy** when it lost at least :data:`BUSY_SHARE` of its wall time (and at least
  :data:`BUSY_MIN_MS`) to other processes;
- busy runs are left out of the statistics, as outlier runs are, when enough quiet runs remain
  (:func:`enough_quiet`): every median, share, coverage and comparison then comes from runs
  that had the CPU to themselves; with too few quiet runs every run is kept and every page
  says that its times include time lost to other processes;
- :func:`machine_words` is the one sentence every page (header, report, compare) states.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np
import pandas as pd
from numpy.typing import ArrayLike

__all__ = ["BUSY_SHARE", "BUSY_MIN_MS", "QUIET_MIN_RUNS", "BUSY_LOAD_MARGIN", "Contention", "contention", "busy_mask",
           "enough_quiet", "quiet_values", "less_lost_ms", "quiet_runs", "machine_words", "cpu_clock_words", "steps_machine_words", "busy_machine",
           "loaded", "loaded_words", "shared_window", "between_runs_lost_ms", "window_figures", "LOADED_WORDS",
           "emptied_rows", "emptied_words"]

#: a run is busy when other processes took at least this share of its wall time ...
BUSY_SHARE = 0.05
#: ... and at least this many milliseconds (a wake-up of a few microseconds is not contention)
BUSY_MIN_MS = 0.05
#: busy runs are left out only when at least this many quiet runs (and a quarter of the runs) remain
QUIET_MIN_RUNS = 3
#: a machine whose load average reached its usable cores plus this many is busy, even when no run
#: lost time: the other processes run on the other cores and share the caches and memory
BUSY_LOAD_MARGIN = 1.0


def busy_mask(lost_ms: ArrayLike, wall_ms: ArrayLike) -> np.ndarray:
    """True for each run that lost at least :data:`BUSY_SHARE` of ``wall_ms`` (and
    :data:`BUSY_MIN_MS`) to other processes; False where nothing was measured (NaN)."""
    lost = np.asarray(lost_ms, dtype=np.float64)
    wall = np.asarray(wall_ms, dtype=np.float64)
    with np.errstate(invalid="ignore"):
        return (lost >= BUSY_MIN_MS) & (lost >= BUSY_SHARE * wall)


def enough_quiet(quiet: int, runs: int) -> bool:
    """Whether ``quiet`` of ``runs`` runs are enough to state figures from them alone: at least
    :data:`QUIET_MIN_RUNS` and at least a quarter of the runs."""
    return quiet >= max(QUIET_MIN_RUNS, math.ceil(runs / 4))


def quiet_values(values: Sequence[float], lost_ms: Sequence[float] | None) -> tuple[list[float], int]:
    """A list of run times (the model's own runs) with the time each lost to other processes:
    ``(the values to use, how many of them were corrected)``. The quiet runs alone where at
    least :data:`QUIET_MIN_RUNS` are quiet; else every run, a busy one less the time it lost
    (measured around that very call, so what is left is the run's own time, give or take the
    caches the other process cooled). All values, none corrected, when no lost time was
    measured (``lost_ms`` None or of another length)."""
    values = [float(v) for v in values]
    if lost_ms is None or len(lost_ms) != len(values):
        return values, 0
    busy = busy_mask(lost_ms, values)
    quiet = [v for v, b in zip(values, busy) if not b]
    if len(quiet) >= QUIET_MIN_RUNS:
        return quiet, 0
    fixed = [b and less_lost_ms(v, float(lost)) != v for v, lost, b in zip(values, lost_ms, busy)]
    return [less_lost_ms(v, float(lost)) if b else v for v, lost, b in zip(values, lost_ms, busy)], int(sum(fixed))


def less_lost_ms(value: float, lost: float) -> float:
    """A time less what it lost to other processes; the time as measured where the loss is not
    below it (a file of an fxprof before issue 56, whose meter could charge a run its whole
    time): never a duration of 0 for work that ran."""
    value, lost = float(value), float(lost)
    return value - lost if 0.0 <= lost < value else value


def quiet_runs(lost_ms: Sequence[float], wall_ms: Sequence[float], *more: Sequence[float]) -> tuple[list[float], ...]:
    """``wall_ms`` and every list in ``more`` (one value a run, in the same order) without the
    busy runs, where enough quiet ones remain (:func:`enough_quiet`); as given otherwise, or when
    the lengths differ. Compiled mode's profiler-cost factor comes from these."""
    lists = tuple(list(values) for values in (wall_ms, *more))
    if len(lost_ms) != len(wall_ms) or any(len(m) != len(wall_ms) for m in more):
        return lists
    busy = busy_mask(lost_ms, wall_ms)
    if not busy.any() or not enough_quiet(int((~busy).sum()), len(busy)):
        return lists
    return tuple([v for v, b in zip(values, busy) if not b] for values in lists)


@dataclass(frozen=True)
class Contention:
    """A profile's timed runs against other processes.

    ``runs``: the run numbers; ``lost_ms``: what each lost to other processes; ``wall_ms``: each
    run's wall time; ``busy``: the busy mask; ``load``: the highest load average read (start or
    end), None where the system has none; ``cores``: the cores the process could use;
    ``source``: how the lost time was read (``schedstat``, ``rusage``)."""

    runs: np.ndarray
    lost_ms: np.ndarray
    wall_ms: np.ndarray
    busy: np.ndarray
    load: float | None
    cores: int
    source: str
    #: each run's rank, for a gathered profile (None for one process)
    ranks: np.ndarray | None = None
    #: what the process lost to other processes over the whole timed window (the timed runs and
    #: everything between them), and that window's wall time, in ms; NaN where not measured
    window_lost_ms: float = math.nan
    window_ms: float = math.nan
    #: of that, what the process lost outside every timed run and own run (:func:`between_runs_lost_ms`)
    between_lost_ms: float = math.nan
    #: a gathered profile's: the rank whose process lost the largest share of its window (the
    #: window figures are that rank's), None for one process
    window_rank: int | None = None

    @property
    def loaded(self) -> bool:
        """Whether other processes crowded the machine by a reading beside the runs' own lost
        time: the process lost a share of its timed window (:func:`shared_window`), or the load
        average reached the usable cores plus one (:func:`loaded`). With no busy run the machine
        line then says LOADED, not quiet."""
        return _is_loaded(self.load, self.cores, (self.window_lost_ms, self.window_ms))

    @property
    def busy_runs(self) -> list[int]:
        return [int(r) for r in self.runs[self.busy]]

    @property
    def left_out_runs(self) -> list[int]:
        """The busy runs left out of the statistics: all of them where enough quiet runs remain
        (:func:`enough_quiet`), else none. A gathered profile decides rank by rank, as it judges
        outliers: a rank that was busy in most of its runs keeps them, rather than leaving the
        statistics without that rank."""
        if not self.busy.any():
            return []
        if self.ranks is None:
            return self.busy_runs if enough_quiet(int((~self.busy).sum()), len(self.runs)) else []
        out: list[int] = []
        for rank in np.unique(self.ranks):
            mine = self.ranks == rank
            if enough_quiet(int((~self.busy[mine]).sum()), int(mine.sum())):
                out += [int(r) for r in self.runs[mine & self.busy]]
        return sorted(out)

    @property
    def left_out(self) -> bool:
        """Whether busy runs are left out of the statistics (:attr:`left_out_runs`)."""
        return bool(self.left_out_runs)

    @property
    def kept_busy_ranks(self) -> list[int]:
        """A gathered profile's ranks whose busy runs stay in the statistics (too few quiet runs there)."""
        if self.ranks is None or not self.busy.any():
            return []
        left = set(self.left_out_runs)
        return sorted({int(k) for k, r, b in zip(self.ranks, self.runs, self.busy) if b and int(r) not in left})

    @property
    def shares(self) -> np.ndarray:
        """The share of its wall time each busy run lost."""
        with np.errstate(invalid="ignore", divide="ignore"):  # measured around the run, its input copies too: at most all of it
            return np.minimum(self.lost_ms / self.wall_ms, 1.0)[self.busy]


def _wall_ms(runs: pd.DataFrame) -> np.ndarray:
    wall = runs["host_ms"].to_numpy(dtype=np.float64) if "host_ms" in runs.columns else np.full(len(runs), np.nan)
    return np.where(np.isfinite(wall), wall, runs["total_ms"].to_numpy(dtype=np.float64))


def _loads(found: Mapping[str, Any]) -> list[float]:
    return [float(v) for v in (found.get("load") or ()) if isinstance(v, (int, float))]


def contention(meta: Mapping[str, Any], runs: pd.DataFrame) -> Contention | None:
    """The :class:`Contention` of a profile's ``runs`` table (``run``, ``host_ms`` or
    ``total_ms``) from ``meta["contention"]``; None when it was not measured (fxprof before
    this, a timer of the user's, isolated mode) or does not match the runs. A gathered profile
    (a ``rank`` column) reads each rank's own record (``meta["per_rank"]``) by the rank's own
    run numbers (``rank_run``)."""
    if not len(runs):
        return None
    if "rank" in runs.columns:
        return _ranked(meta, runs)
    found = meta.get("contention") or {}
    lost = found.get("lost_ms")
    if not lost or len(lost) < len(runs):
        return None
    numbers = runs["run"].to_numpy(dtype=np.int64)
    if numbers.max() >= len(lost):
        return None
    lost_ms = np.asarray(lost, dtype=np.float64)[numbers]
    wall = _wall_ms(runs)
    loads = _loads(found)
    window = _window(found)
    return Contention(runs=numbers, lost_ms=lost_ms, wall_ms=wall, busy=busy_mask(lost_ms, wall),
                      load=max(loads) if loads else None, cores=int(found.get("cores") or 0),
                      source=str(found.get("source", "")), window_lost_ms=window["window_lost_ms"],
                      window_ms=window["window_ms"], between_lost_ms=window["between_lost_ms"])


def _window(found: Mapping[str, Any]) -> dict[str, float]:
    """The window's figures of a record, each lost time at most the window (a file summed or
    edited by hand may say more; the meter never does)."""
    window = _number(found.get("window_ms"))
    cap = window if math.isfinite(window) else math.inf
    return {"window_ms": window, "window_lost_ms": min(_number(found.get("window_lost_ms")), cap),
            "between_lost_ms": min(between_runs_lost_ms(found), cap)}


def window_figures(meta: Mapping[str, Any]) -> tuple[float, float] | None:
    """``(lost ms, wall ms)`` of a record's timed window (a generation's or whatif's meta, or
    ``meta["contention"]``), the lost time at most the window; None where it was not measured."""
    found = _window(meta)
    pair = (found["window_lost_ms"], found["window_ms"])
    return pair if all(math.isfinite(v) for v in pair) else None


def _number(value: Any) -> float:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else math.nan


def between_runs_lost_ms(found: Mapping[str, Any]) -> float:
    """What the process lost to other processes in its timed window outside every timed run and
    every own (unprofiled) run the record holds (``meta["contention"]``: ``window_lost_ms`` less
    ``lost_ms``, ``own_lost_ms`` and ``unprofiled_lost_ms``; at least 0); NaN where the window
    was not measured. A session's own runs lie outside its cycles' windows: taking them off too
    only reads less."""
    window = _number(found.get("window_lost_ms"))
    if not math.isfinite(window):
        return math.nan
    inside = math.fsum(v for key in ("lost_ms", "own_lost_ms", "unprofiled_lost_ms") for v in (found.get(key) or ())
                       if isinstance(v, (int, float)) and math.isfinite(v))
    return max(0.0, window - inside)


def _ranked(meta: Mapping[str, Any], runs: pd.DataFrame) -> Contention | None:
    """Every rank's runs against that rank's own record: the gathered header keeps rank 0's
    ``contention`` and each rank's in ``per_rank`` where they differ (they always do)."""
    if "rank_run" not in runs.columns:
        return None
    per_rank = {int(m.get("rank", i)): (m.get("contention") or meta.get("contention") or {})
                for i, m in enumerate(meta.get("per_rank") or [])}
    ranks = runs["rank"].to_numpy(dtype=np.int64)
    own = runs["rank_run"].to_numpy(dtype=np.int64)
    lost_ms = np.full(len(runs), np.nan)
    loads: list[float] = []
    cores = 0
    sources = set()
    # the rank that lost most of its window, among those whose loss crossed the rule first (a
    # rank's 0.04 of 0.5 ms, under BUSY_MIN_MS, must not hide another's 5 of 90 ms)
    worst: tuple[tuple[bool, float], int, dict[str, float]] | None = None  # ((crossed, share), rank, figures)
    for rank in np.unique(ranks):
        found = per_rank.get(int(rank)) or {}
        window = _window(found)
        if window["window_ms"] > 0 and math.isfinite(window["window_lost_ms"]):
            key = (shared_window(window["window_lost_ms"], window["window_ms"]), window["window_lost_ms"] / window["window_ms"])
            if worst is None or key > worst[0]:
                worst = (key, int(rank), window)
        lost = found.get("lost_ms")
        at = ranks == rank
        if not lost or own[at].max() >= len(lost):
            return None  # a rank without its record: no statement for the whole
        lost_ms[at] = np.asarray(lost, dtype=np.float64)[own[at]]
        loads += _loads(found)
        cores = max(cores, int(found.get("cores") or 0))
        sources.add(str(found.get("source", "")))
    wall = _wall_ms(runs)
    # the worst rank's window (what lay between its runs is not claimed for a gathered profile)
    return Contention(runs=runs["run"].to_numpy(dtype=np.int64), lost_ms=lost_ms, wall_ms=wall,
                      busy=busy_mask(lost_ms, wall), load=max(loads) if loads else None, cores=cores,
                      source="/".join(sorted(sources)), ranks=ranks,
                      window_lost_ms=worst[2]["window_lost_ms"] if worst else math.nan,
                      window_ms=worst[2]["window_ms"] if worst else math.nan, window_rank=worst[1] if worst else None)


def _span(shares: np.ndarray) -> str:
    """``40%`` or ``40-57%``: the range of busy runs' lost shares (in percent)."""
    low, high = float(np.nanmin(shares)), float(np.nanmax(shares))
    return f"{low:.0f}%" if round(low) == round(high) else f"{low:.0f}-{high:.0f}%"


def _rank_words(found: Contention) -> str:
    """Per rank, its busy runs and the time they lost, the worst rank (most time lost) named."""
    assert found.ranks is not None
    parts, worst, most = [], None, -1.0
    for rank in np.unique(found.ranks):
        at = found.ranks == rank
        lost = float(np.nansum(np.where(found.busy[at], found.lost_ms[at], 0.0)))
        parts.append(f"rank {int(rank)} {int(found.busy[at].sum())} of {int(at.sum())}")
        if lost > most:
            worst, most = int(rank), lost
    return f"per rank: {', '.join(parts)}; the worst rank {worst} (its busy runs lost {_ms(most)} ms)"


def _load_words(found: Contention) -> str:
    if found.load is None:
        return f"{found.cores} usable core(s)"
    return f"load {found.load:.1f} on {found.cores} usable core(s)"


def shared_window(lost_ms: float | None, window_ms: float | None) -> bool:
    """Did the process lose at least :data:`BUSY_SHARE` of its timed window (the timed runs and
    everything between them; and at least :data:`BUSY_MIN_MS`) to other processes? Then they ran
    on its core(s) during the profile, between the runs if not in them: a step of 0.1-0.3 ms
    falls between the slices of a busy loop on its core, in caches the loop cooled, and only the
    runs a switch falls into lose time (beside one such loop a 58 ms window lost 44% and no run
    was charged). Unlike the load average this is the process's own reading of the window
    itself, without lag."""
    if lost_ms is None or window_ms is None or not (math.isfinite(lost_ms) and math.isfinite(window_ms)):
        return False
    return window_ms > 0 and lost_ms >= BUSY_MIN_MS and lost_ms >= BUSY_SHARE * window_ms


def loaded(load: float | None, cores: int | None) -> bool:
    """Did the load average reach the usable cores plus :data:`BUSY_LOAD_MARGIN`? Processes beyond
    the cores then ran over the last minute, and those beside a run slow it without taking its
    CPU, which no run's lost time holds (beside six busy loops on two cores a compiled decode step
    ran 1.3 ms against 0.4 ms quiet, and no step lost time on the run queue). The average lags: it
    counts this process and its compile workers too (a cold 22 s compile of resnet18 took it from
    0.58 to 0.88 on this 2-core machine), which the line says."""
    return load is not None and bool(cores) and load >= float(cores) + BUSY_LOAD_MARGIN  # type: ignore[arg-type]


#: what the load average counts, said with it (:func:`loaded`)
LOAD_COUNTS = "(runnable processes over the last minute, this one and its compile workers included)"

#: what a loaded machine does to the times, and what to do (:func:`loaded`, :func:`shared_window`)
LOADED_WORDS = ("processes running beside a run share the caches, the memory and any hardware thread of its core, and "
                "slow it without taking its CPU, which no run measures: its times may be high; for steadier figures pin "
                "the process to a core of its own (taskset -c N), or a quiet machine")


def _ms(value: float) -> str:
    """Milliseconds to three significant figures, rounded first: whole ones with thousands
    separated from 1,000 on (999.7 reads ``1,000``, 1234.5 ``1,230``; never ``1e+03``)."""
    value = float(f"{value:.3g}")
    return f"{value:.3g}" if abs(value) < 1000 else f"{value:,.0f}"


def _who(rank: int | None) -> str:
    return "the process" if rank is None else f"rank {rank}'s process"


def _window_words(lost_ms: float, window_ms: float, runs: str, rank: int | None = None) -> str:
    return (f"{_who(rank)} waited {lost_ms / window_ms:.0%} of the timed window ({_ms(lost_ms)} of {_ms(window_ms)} ms, "
            f"the timed {runs} and what lay between them) for a CPU that other processes held")


def _loaded_line(what: str, load: float | None, cores: int, window: tuple[float, float] | None = None,
                 runs: str = "runs", rank: int | None = None) -> str:
    """The LOADED machine line: no ``what`` lost time, yet the process lost a share of its timed
    window (``window``: lost and wall ms, :func:`shared_window`; ``runs``: what the window's
    timed stretches are called) or the load average was high (:func:`loaded`); each reading that
    crossed its rule is said."""
    said = []
    if window is not None and shared_window(*window):
        said.append(_window_words(window[0], window[1], runs, rank))
    if loaded(load, cores):
        said.append(f"the load average reached {load:.1f} on {cores} usable core(s) {LOAD_COUNTS}")
    return (f"machine: LOADED: no {what} lost {BUSY_SHARE:.0%} of its time to other processes, but "
            f"{'; and '.join(said)}: {LOADED_WORDS}")


def _is_loaded(load: float | None, cores: int, window: tuple[float, float] | None) -> bool:
    return loaded(load, cores) or (window is not None and shared_window(*window))


def machine_words(found: Contention) -> str:
    """The machine line: quiet, or how many runs lost how much to other processes, what the
    statistics did about it, and what to do; LOADED where no run lost time but the process lost a
    share of its timed window (:func:`shared_window`) or the load average says other processes ran
    beside it (:func:`loaded`)."""
    if not found.busy.any():
        if found.loaded:
            return _loaded_line("timed run", found.load, found.cores, (found.window_lost_ms, found.window_ms),
                                rank=found.window_rank)
        return (f"machine: quiet: no timed run lost {BUSY_SHARE:.0%} of its time to other processes "
                f"({_load_words(found)})")
    span = _span(found.shares * 100)
    head = (f"machine: BUSY: {int(found.busy.sum())} of {len(found.runs)} timed runs lost {span} of their time to other "
            f"processes ({_load_words(found)})")
    if found.ranks is not None:
        head += "; " + _rank_words(found)
    kept_ranks = found.kept_busy_ranks
    if found.left_out and kept_ranks:
        listed = ", ".join(str(r) for r in kept_ranks)
        then = (f"; {len(found.left_out_runs)} of them are left out of the statistics (profile.keep_outliers = True "
                f"keeps them); rank(s) {listed} had too few quiet runs of their own, so their busy runs stay in and "
                f"their times include time lost to other processes")
    elif found.left_out:
        then = (f"; they are left out of the statistics, which use the {int((~found.busy).sum())} quiet runs "
                f"(profile.keep_outliers = True keeps them)")
        if shared_window(found.between_lost_ms, found.window_ms):
            then += (f"; between the runs the process lost a further {found.between_lost_ms / found.window_ms:.0%} of the "
                     f"timed window ({_ms(found.between_lost_ms)} of {_ms(found.window_ms)} ms) to them, so the quiet runs "
                     f"ran beside other processes too, in caches they cooled, and may be slow")
    else:
        then = ("; too few quiet runs to leave them out: the times here include time lost to other processes")
    return head + then + "; for steadier figures pin the process to a core of its own (taskset -c N), use fewer threads, or a quiet machine"


def steps_machine_words(phases: Sequence[tuple[str, ArrayLike, ArrayLike]], load: float | None,
                        cores: int, noun: str = "steps", window: tuple[float, float] | None = None) -> str:
    """The machine line of timed steps by phase (``(name, lost_ms, wall_ms)`` each; generate: the
    prefill's one run and the decode steps), on the rule of every machine line (:func:`busy_mask`):
    quiet, or per phase what its busy steps lost; LOADED as :func:`machine_words` says it
    (``window``: what the process lost over its timed window, and the window's wall ms)."""
    parts = []
    for name, lost, wall in phases:
        lost_a, wall_a = np.asarray(lost, dtype=np.float64), np.asarray(wall, dtype=np.float64)
        if not len(wall_a) or len(lost_a) != len(wall_a):
            continue
        busy = busy_mask(lost_a, wall_a)
        if not busy.any():
            continue
        shares = np.minimum(lost_a[busy] / wall_a[busy], 1.0) * 100
        if len(wall_a) == 1:
            parts.append(f"the {name} lost {_ms(float(lost_a[0]))} of its {_ms(float(wall_a[0]))} ms ({float(shares[0]):.0f}%): "
                         f"its time and its share of each part of the model come from that one run and include it")
        else:
            parts.append(f"{int(busy.sum())} of {len(wall_a)} {name} {noun} lost {_span(shares)} of their time"
                         + (" (lost_ms in the per-token table)" if noun == "steps" else ""))
    where = f"load {load:.1f} on {cores} usable core(s)" if load is not None else f"{cores} usable core(s)"
    if not parts and _is_loaded(load, cores, window):
        return _loaded_line(noun[:-1], load, cores, window, noun)
    if not parts:
        return f"machine: quiet: no {noun[:-1]} lost {BUSY_SHARE:.0%} of its time to other processes ({where})"
    return ("machine: BUSY: " + "; ".join(parts) + f" ({where}); the times above include what they lost; for steadier "
            "figures pin the process to a core of its own (taskset -c N), or a quiet machine")


def cpu_clock_words(meta: Mapping[str, Any]) -> str:
    """The machine line of runs timed on a CPU-time clock (a timer reading this thread's CPU
    time): no time lost to other processes is in them, so none is called busy or corrected;
    "" for any other profile."""
    found = meta.get("contention") or {}
    if found.get("clock") != "cpu":
        return ""
    loads = [v for v in (found.get("load") or ()) if isinstance(v, (int, float))]
    where = (f"load {max(loads):.1f} on {found.get('cores')} usable core(s)" if loads
             else f"{found.get('cores')} usable core(s)")
    return (f"machine: the timer reads the thread's CPU time, which holds no time lost to other processes: "
            f"no run is called busy or corrected ({where})")


def busy_machine(meta: Mapping[str, Any], runs: pd.DataFrame) -> str:
    """Why a profile was taken on a busy machine, in words ("" if it was not, or nothing was
    measured): some of its timed runs lost time to other processes, the process lost a share of
    its timed window (:func:`shared_window`), or the load average reached the usable cores plus
    :data:`BUSY_LOAD_MARGIN` (other processes on the other cores slow the model through the
    shared caches and memory without taking its CPU)."""
    found = contention(meta, runs)
    if found is None:
        return ""
    if found.busy.any():
        return f"{int(found.busy.sum())} of {len(found.runs)} timed runs lost time to other processes"
    return loaded_words(found)


def loaded_words(found: Contention) -> str:
    """A loaded machine's readings in a few words ("" where none crossed its rule): the share of
    the timed window the process lost (:func:`shared_window`), the load average (:func:`loaded`)."""
    said = []
    if shared_window(found.window_lost_ms, found.window_ms):
        said.append(f"{_who(found.window_rank)} lost {found.window_lost_ms / found.window_ms:.0%} of its timed window to "
                    f"other processes")
    if loaded(found.load, found.cores):
        said.append(f"load {found.load:.1f} on {found.cores} usable core(s)")
    return "; ".join(said)


def emptied_rows(profile: Any) -> dict[str, list[str]]:
    """Rows left with no timed call: each was timed only in runs the statistics leave out, so its
    ``calls`` reads 0 and its times are empty. Why -> the rows, in graph order; why is ``busy``
    (every run that held them lost time to other processes), ``outlier`` (every such run was an
    outlier run) or ``busy or outlier``. A DDP session's gradient all-reduce rows are the case
    met: only the synced steps hold them, and on a crowded machine every one of those was busy.
    Empty where nothing is left out (``profile.keep_outliers``, or no busy or outlier run)."""
    kept = profile.kept_runs()
    if kept is None:
        return {}
    samples = profile.samples
    timed = samples[samples["time_ms"].notna()]
    if timed.empty:
        return {}
    kept_set = set(kept)
    found = profile.contention
    busy = set(found.left_out_runs) if found is not None else set()
    outliers = set(profile.outlier_runs)
    held = timed.groupby(timed["node"].astype(str), sort=False)["run"].unique()
    out: dict[str, list[str]] = {}
    for node in (n.name for n in profile.nodes):
        if node not in held.index:
            continue
        runs = {int(r) for r in held[node]}
        if runs & kept_set:
            continue
        why = "busy" if runs <= busy else "outlier" if runs <= outliers else "busy or outlier"
        out.setdefault(why, []).append(node)
    return out


#: how :func:`emptied_words` says why a row's runs were left out
_EMPTIED_WHY = {
    "busy": "every run that held them was left out as busy (it lost time to other processes)",
    "outlier": "every run that held them was left out as an outlier run",
    "busy or outlier": "every run that held them was left out, as busy (it lost time to other processes) or as an outlier run",
}


def emptied_words(profile: Any, shown: int = 6, only: Any = None) -> list[str]:
    """One line per reason of :func:`emptied_rows`: ``no timed call left in ddp:bucket0_all_reduce,
    ddp:all_reduce_wait (calls 0): every run that held them was left out as busy ...``; with
    ``only``, of those rows alone."""
    lines = []
    for why, nodes in emptied_rows(profile).items():
        nodes = [n for n in nodes if only is None or n in only]
        if not nodes:
            continue
        names = ", ".join(nodes[:shown]) + (f" and {len(nodes) - shown} more" if len(nodes) > shown else "")
        lines.append(f"no timed call left in {names} (calls 0): {_EMPTIED_WHY[why]}; their times are in those runs "
                     f"alone (keep_outliers, --keep-outliers, keeps every run in the figures)")
    return lines
