"""A profile's header read back and held against itself and its tables (issue 45).

:func:`header_problems` parses the statements a profile's text header makes (the run line, the
machine line, fxprof's time between runs, the fidelity line, the row of time in no node, a
compiled profile's kernels line) and returns every statement that contradicts another one, the
table, or the profile's own figures; ``[]`` when the page is consistent. The tests run it on
profiles taken on a quiet machine and beside a busy loop pinned to the same core, in eager,
compiled and session mode.
"""

from __future__ import annotations

import re
from typing import Any

_UNITS = {"ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1e3}
_TIME = r"(-?[\d.,]+) (ns|us|ms|s)\b"


def _ms(number: str, unit: str) -> float:
    return float(number.replace(",", "")) * _UNITS[unit]


def _close(a: float, b: float, rel: float = 0.02, abs_ms: float = 0.0) -> bool:
    """Equal as printed: three significant figures, so within about 1% plus rounding."""
    return abs(a - b) <= max(rel * max(abs(a), abs(b)), abs_ms)


def _window_said(said: re.Match, lost_ms: float, window_ms: float) -> bool:
    """A machine line's ``N% of the timed window (L of W ms`` against the record's figures: the
    share to the percent, each time as printed (three figures, or whole ms from 1,000)."""
    share, lost, window = said.groups()[-3:]  # a LOADED line's may name a rank first
    lost, window = float(lost.replace(",", "")), float(window.replace(",", ""))
    return (abs(int(share) - 100 * lost_ms / window_ms) <= 0.5 + 1e-9 and _close(lost, lost_ms, 0.01, 0.001)
            and _close(window, window_ms, 0.01, 0.001))


def header_problems(profile: Any) -> list[str]:
    """Every contradiction on ``profile``'s summary page (header and table)."""
    from fxprof.core.fidelity import outside_label
    from fxprof.views.fidelity import profile_fidelity
    from fxprof.views.headline import busy_kept, run_figures

    text = profile.summary(top=0)
    lines = text.splitlines()
    problems: list[str] = []

    def line(prefix: str) -> str | None:
        found = [entry for entry in lines if entry.startswith(prefix)]
        if len(found) > 1:
            problems.append(f"{len(found)} lines start with {prefix!r}: one figure per question")
        return found[0] if found else None

    # never a negative factor, never a ratio of 0.00
    for entry in lines:
        if re.search(r"\bx-\d", entry) or re.search(r"-\d+(\.\d+)?x\b", entry):
            problems.append(f"a negative factor: {entry!r}")
        if re.search(r"\b0\.00 ?x\b", entry):
            problems.append(f"a ratio of 0.00: {entry!r}")

    compiled = profile.meta.get("capture") == "compiled"
    run = line("run: ")
    figures = run_figures(profile)
    if profile.num_runs and run is None:
        problems.append("no run line")
    if run is not None and not compiled:
        gathered = len(profile.ranks) > 1  # each run's nodes summed, median over the ranks' runs: not the table's sum
        m = re.match(r"run: median " + _TIME + r" \(IQR " + _TIME + r"\) over (\d+) runs; nodes account for ([\d.]+)% of it "
                     r"\(coverage\): " + _TIME + (r" of node time a run \(each run's nodes summed, median over every "
                                                    r"rank's runs\)(.*)$" if gathered else r" summed median node time(.*)$"), run)
        if not m:
            problems.append(f"unreadable run line: {run!r}")
        else:
            run_ms, runs, coverage = _ms(m[1], m[2]), int(m[5]), float(m[6])
            nodes_ms, rest = _ms(m[7], m[8]), m[9]
            if not _close(run_ms, figures.run_ms):
                problems.append(f"run line's median {run_ms} ms is not the kept runs' median {figures.run_ms}")
            if runs != figures.runs:
                problems.append(f"run line says {runs} runs, the statistics keep {figures.runs}")
            if not _close(coverage / 100 * run_ms, nodes_ms, abs_ms=0.002):
                problems.append(f"coverage {coverage}% of {run_ms} ms is not the summed node time {nodes_ms} ms")
            if not _close(coverage, profile.coverage * 100, rel=0.002, abs_ms=0.05):
                problems.append(f"coverage {coverage}% on the page, {profile.coverage * 100:.2f}% in the profile")
            table_sum = float(profile.df["median_ms"].sum())
            if not gathered and not _close(nodes_ms, table_sum, abs_ms=0.002):
                problems.append(f"summed node time {nodes_ms} ms on the page, the table's medians sum to {table_sum}")
            if coverage > 100 and "more than the median run" not in rest:
                problems.append(f"coverage above 100% unexplained: {run!r}")
            outside = re.search(r", " + _TIME + r" of it outside every node \((.*)\)$", rest)
            if coverage <= 100:
                if not outside:
                    problems.append(f"run line without the time outside every node: {run!r}")
                else:
                    out_ms = _ms(outside[1], outside[2])
                    # each figure printed to three significant figures: the difference of two is good to about 1% of the run
                    if not _close(out_ms, run_ms - nodes_ms, abs_ms=0.01 * run_ms):
                        problems.append(f"outside {out_ms} ms is not the run {run_ms} less the nodes {nodes_ms}")
                    lost_words = "time lost to other processes" in outside[3]
                    if busy_kept(profile) and not lost_words:
                        problems.append("busy runs are in the statistics, yet the time outside every node is put down to "
                                        f"fxprof or the model alone: {run!r}")
                    if lost_words and not busy_kept(profile):
                        problems.append("time lost to other processes named, but no busy run is in the statistics")

    machine = line("machine: ")
    found = profile.contention
    cpu_clock = (profile.meta.get("contention") or {}).get("clock") == "cpu"
    if found is None:
        if machine is not None and not cpu_clock:
            problems.append("a machine line without a measurement")
        if cpu_clock and (machine is None or "BUSY" in machine or "CPU time" not in machine):
            problems.append(f"runs timed on a CPU clock, yet the machine line says otherwise: {machine!r}")
    elif machine is None:
        problems.append("contention was measured, and no machine line says what it found")
    else:
        busy = len(profile.busy_runs)
        from fxprof.core.contention import loaded, shared_window

        if busy == 0 and not machine.startswith("machine: LOADED" if found.loaded else "machine: quiet"):
            problems.append(f"no busy run, {'but' if found.loaded else 'and'} load {found.load} on {found.cores} core(s) "
                            f"and {found.window_lost_ms} of the window's {found.window_ms} ms lost, yet: {machine!r}")
        if busy == 0 and found.loaded:
            # each reading the LOADED line names crossed its rule, with the figures the record holds
            said = re.search(r"(?:the process|rank (?P<rank>\d+)'s process) waited (\d+)% of the timed window "
                             r"\(([\d.,]+) of ([\d.,]+) ms", machine)
            if said and (None if said["rank"] is None else int(said["rank"])) != found.window_rank:
                problems.append(f"the machine line names another process than rank {found.window_rank}'s: {machine!r}")
            if shared_window(found.window_lost_ms, found.window_ms) != bool(said) or (
                    said and not _window_said(said, found.window_lost_ms, found.window_ms)):
                problems.append(f"the window's lost time ({found.window_lost_ms} of {found.window_ms} ms) is not what "
                                f"the machine line says: {machine!r}")
            if loaded(found.load, found.cores) != ("the load average reached" in machine):
                problems.append(f"the load average ({found.load} on {found.cores} core(s)) is not what the machine line "
                                f"says: {machine!r}")
        if busy:
            m = re.match(r"machine: BUSY: (\d+) of (\d+) timed runs lost", machine)
            if not m or int(m[1]) != busy or int(m[2]) != profile.num_runs:
                problems.append(f"{busy} of {profile.num_runs} runs busy, the machine line says: {machine!r}")
            left = "left out of the statistics" in machine
            if left != (found.left_out):
                problems.append(f"machine line on leaving busy runs out disagrees with the statistics: {machine!r}")
            further = re.search(r"between the runs the process lost a further (\d+)% of the timed window \(([\d.,]+) of "
                                r"([\d.,]+) ms\)", machine)
            if bool(further) != (found.left_out and not found.kept_busy_ranks
                                 and shared_window(found.between_lost_ms, found.window_ms)) or (
                    further and not _window_said(further, found.between_lost_ms, found.window_ms)):
                problems.append(f"what the window lost between the runs ({found.between_lost_ms} of {found.window_ms} ms) "
                                f"is not what the machine line says: {machine!r}")
            kept = profile.kept_runs()
            kept_set = set(range(profile.num_runs)) if kept is None else set(kept)
            if found.left_out and not profile.keep_outliers and kept_set & set(profile.busy_runs):
                problems.append("the machine line says busy runs are left out, and the statistics keep some")

    between = line("between runs: ")
    if between is not None:
        m = re.search(r"took " + _TIME + r" over \d+ runs \(([\d.]+)% of the runs' own time\)", between)
        if not m:
            problems.append(f"unreadable between-runs line: {between!r}")
        else:
            took = _ms(m[1], m[2])
            wall = float(profile.meta.get("timed_wall_ms") or 0)
            inside = float(profile.runs["host_ms"].sum())
            own = float(profile.meta.get("own_wall_ms") or 0)
            if took > (wall - inside - own) * 1.01 + 0.01:  # printed to three figures
                problems.append(f"fxprof's time between runs {took} ms counts more than the window less the runs and "
                                f"the model's own runs ({wall - inside - own:.3f} ms)")

    fid = line("fidelity: ")
    stated = profile_fidelity(profile)
    if fid is not None and stated is not None:
        m = re.match(r"fidelity: profiled run ([\d.]+) x .*?\(" + _TIME + r", median of (\d+) unprofiled runs", fid)
        if fid.startswith("fidelity: not stated: "):
            if not stated.unreliable:
                problems.append(f"fidelity withheld though it can be stated: {fid!r}")
        elif not m:
            problems.append(f"unreadable fidelity line: {fid!r}")
        else:
            if stated.unreliable:
                problems.append(f"fidelity stated though {stated.unreliable}: {fid!r}")
            if not _close(float(m[1]), stated.ratio, rel=0.01, abs_ms=0.006):
                problems.append(f"fidelity ratio {m[1]} on the page, {stated.ratio:.3f} from the runs")

    label = outside_label(profile.meta)
    rows = [entry for entry in lines if entry.startswith(("(between nodes)", "(outside the graph)"))]
    row_rows = [entry for entry in rows if not entry.startswith(f"{label}:")]
    notes = [entry for entry in rows if entry.startswith(f"{label}:")]
    if any(not entry.startswith(label) for entry in rows):
        problems.append(f"a row of time in no node named otherwise than {label!r}: {rows}")
    if row_rows:
        if stated is None or stated.unreliable:
            problems.append("a row of time in no node from own runs that cannot be trusted")
        if not notes:
            problems.append("the row of time in no node has no note saying what it is")
        else:
            m = re.search(r": " + _TIME + r" of the model's own unprofiled run", notes[0])
            value = re.search(_TIME, row_rows[0][len(label):])
            if m and value and not _close(_ms(m[1], m[2]), _ms(value[1], value[2]), abs_ms=0.002):
                problems.append(f"the row says {value[0]}, its note {m[1]} {m[2]}")
    if label == "(outside the graph)" and profile.meta.get("capture") not in ("dynamo", "compiled"):
        problems.append("an (outside the graph) row for a capture that holds the whole model")

    kernels = line("kernels: ")
    if compiled and kernels is not None:
        m = re.search(r"all rows ([\d.]+)% of it", kernels)
        if m and not 70 <= float(m[1]) <= 130 and "far from 100%" not in kernels:
            problems.append(f"compiled rows at {m[1]}% of the own run, unexplained: {kernels!r}")
    for entry in lines:
        for pct in re.findall(r"(?<![\d.%])(-[\d.]+)%", entry):
            problems.append(f"a negative percentage {pct}%: {entry!r}")
    return problems


def assert_consistent(profile: Any) -> None:
    problems = header_problems(profile)
    assert not problems, "\n".join(problems) + "\n\n" + profile.summary(top=3)


__all__ = ["header_problems", "assert_consistent"]
