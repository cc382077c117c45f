"""``fxprof ab A B``'s result as text and as Markdown: two models timed interleaved in one
process, B's median run against A's with its interval and verdict, and the conditions."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..core.gate import RunVerdict

__all__ = ["render_ab", "render_ab_markdown"]

_ICON = {"slower": ":red_circle:", "faster": ":green_circle:", "same": ":white_circle:", "undecided": ":grey_question:"}


def _conditions(meta: dict[str, Any]) -> str:
    load = meta.get("load") or []
    shown = " and ".join(f"{x:.1f}" for x in load if x is not None)
    return (f"{meta.get('rounds', '?')} interleaved rounds (a and b once a round, which goes first alternating), "
            f"{meta.get('warmup', '?')} warm-up calls each; {meta.get('device', '?')}, {meta.get('threads', '?')} "
            f"thread(s), torch {meta.get('torch', '?')}"
            + (f"; load {shown} (start and end) on {meta.get('cores', '?')} usable core(s)" if shown else "")
            + _busy(meta))


def _busy(meta: dict[str, Any]) -> str:
    if not meta.get("measured"):
        return ""
    busy, calls = meta.get("busy_calls", 0), meta.get("calls", 0)
    if not busy:
        return "; no call lost time to other processes"
    from ..core.contention import BUSY_SHARE

    return (f"; machine busy: {busy} of {calls} calls lost {BUSY_SHARE:.0%} or more of their time to other processes, and every "
            f"call is held less what it lost")


def _result(run: "RunVerdict", meta: dict[str, Any]) -> str:
    a_ms, b_ms = meta.get("a_ms", float("nan")), meta.get("b_ms", float("nan"))
    if run.verdict in ("slower", "faster"):
        size = run.ratio if run.verdict == "slower" else run.speedup
        head = f"b is {size:.3f}x {run.verdict} than a"
    elif run.verdict:
        head = f"b against a: {run.verdict}"
    else:
        head = "b against a: no verdict (under 2 runs a side)"
    if run.verdict == "undecided":
        head = (f"b against a: undecided: the 95% interval reaches past {meta.get('min_effect', 0.10):.0%}, so a "
                f"change that size is not ruled out" + (" (a busy machine)" if meta.get("busy") else ""))
    return (f"{head}: median call {a_ms:.4g} ms (a) and {b_ms:.4g} ms (b); b/a {run.ratio:.3f} in the median round "
            f"(95% interval {run.low:.3f} to {run.high:.3f}), sign test p = {run.p_value:.2g} over "
            f"{_rounds(run, meta)}; a verdict needs p < {meta.get('alpha', 0.05):g} and a change of at least "
            f"{meta.get('min_effect', 0.10):.0%}")


def _rounds(run: "RunVerdict", meta: dict[str, Any]) -> str:
    """How many rounds the verdict uses, and why the others are not in it."""
    asked, recorded = meta.get("rounds", run.a_runs), meta.get("rounds_recorded", run.a_runs)
    used = run.a_runs
    if used == asked:
        return f"all {used} rounds"
    why = []
    if recorded < asked:
        why.append(f"{asked - recorded} did not complete")
    if used < recorded:
        why.append(f"{recorded - used} had a call with no time left after what it lost to other processes")
    return f"{used} of {asked} rounds ({'; '.join(why) or 'the rest left out'})"


def render_ab(run: "RunVerdict", label_a: str, label_b: str, meta: dict[str, Any]) -> str:
    """The conditions, which model is which, and the verdict with its figures."""
    return "\n".join([f"fxprof ab: a = {label_a}, b = {label_b}", _conditions(meta), _result(run, meta)])


def render_ab_markdown(run: "RunVerdict", label_a: str, label_b: str, meta: dict[str, Any],
                       gate_line: str | None = None) -> str:
    """The same for a CI job's step summary: the verdict as the heading, then the figures."""
    icon = _ICON.get(run.verdict, ":grey_question:")
    heading = (f"## {icon} fxprof ab: b is **{run.verdict}** than a" if run.verdict in ("slower", "faster")
               else f"## {icon} fxprof ab: {run.verdict or 'no verdict'}")
    lines = [heading, "", _result(run, meta) + ".", ""]
    if gate_line:
        lines += [f"**Gate:** {gate_line}", ""]
    lines += [f"- a: `{label_a}`", f"- b: `{label_b}`", f"- {_conditions(meta)}", ""]
    return "\n".join(lines) + "\n"
