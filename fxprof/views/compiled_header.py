"""A compiled profile's header lines: what program it describes (backend, mode, compile time,
graphs), its run against the compiled model's own, and what the rows' share of that run rests
on."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping

import numpy as np

from .tables import format_ms

if TYPE_CHECKING:
    from ..core.profile import Profile

__all__ = ["compiled_line", "compiled_run_lines", "program_lines", "compiled_runs_section"]


def program_lines(profile: "Profile") -> list[str]:
    """The header's program section: what a compiled profile's program is
    (:func:`compiled_line`), or how an eager model was captured when not as usual."""
    meta = profile.meta
    if profile.is_compiled:
        return [compiled_line(profile.compiled)]
    if meta.get("capture") and meta.get("capture") not in ("symbolic", "graphmodule"):
        reason = meta.get("capture_reason")
        return [f"capture: {meta['capture']}" + (f" ({reason})" if reason and reason != "asked for" else "")]
    return []


def compiled_runs_section(profile: "Profile") -> list[str]:
    """The header's runs section of a compiled profile: its run against the compiled model's own
    (:func:`compiled_run_lines`), the machine, the outlier runs. Nothing for an eager or an
    isolated profile, or one without timed runs."""
    if profile.is_isolated or not profile.num_runs or not profile.is_compiled:
        return []
    from .headline import machine_line, outlier_lines

    return compiled_run_lines(profile) + machine_line(profile) + outlier_lines(profile)


def compiled_line(compiled: Mapping[str, Any]) -> str:
    """What program a compiled profile describes: backend, mode, compile time, graphs."""
    options = compiled.get("options") or {}
    extra = f", options {', '.join(f'{k}={v}' for k, v in options.items())}" if options else ""
    dynamic = compiled.get("dynamic")
    return (
        f"compiled program: torch.compile backend {compiled.get('backend', '?')}, mode {compiled.get('mode', '?')}"
        f"{extra}{'' if dynamic is None else f', dynamic={dynamic}'}; "
        + ("compile reused from an earlier profile in this process" if compiled.get("reused") and not compiled.get("compile_s")
           else f"compiled in {compiled.get('compile_s', float('nan')):.2f} s (not in any run)")
        + f"; {compiled.get('graphs', '?')} graph(s), {compiled.get('graph_breaks', '?')} graph break(s), "
        f"{compiled.get('recompiles', '?')} recompile(s); rows are its {compiled.get('kernels', '?')} kernels"
        + (", its graph breaks and overhead" if "breaks" in compiled else "")
        + _timed_by(compiled)
    )


def _timed_by(compiled: Mapping[str, Any]) -> str:
    """How the kernels were timed: fxprof's marks in the generated code, or torch.profiler and why."""
    source = str(compiled.get("kernel_source") or "")
    if not source:  # a profile saved before the kernel source was kept
        return ""
    if compiled.get("clock_read_ns") is not None:
        return (f"; timed by fxprof's marks in inductor's generated code, no torch.profiler (a clock read of "
                f"{float(compiled['clock_read_ns']):.0f} ns before and after each kernel call)")
    why = compiled.get("kernel_source_reason")
    return "; timed by torch.profiler" + (f" ({why})" if why else "")


def compiled_run_lines(profile: "Profile") -> list[str]:
    """The run line of a compiled profile: kernel time against the profiled runs and against
    the compiled model's own (unprofiled) run time."""
    totals = np.asarray(profile.kept_totals())
    q25, med, q75 = np.percentile(totals, [25, 50, 75])
    from .breaks import breaks_lines, kernel_rows
    from .headline import busy_kept

    lost = ", and time lost to other processes (busy machine)" if busy_kept(profile) else ""
    samples = profile.kept_samples()
    framed = not bool(kernel_rows(profile.df).all())  # rows for the time outside the kernels (graph breaks, overhead)
    all_ms = float(samples.groupby("run", observed=True)["time_ms"].sum().median()) if len(samples) else float("nan")
    if framed:
        samples = samples[samples["node"].isin(profile.df.index[kernel_rows(profile.df)])]
    kernel_ms = float(samples.groupby("run", observed=True)["time_ms"].sum().median()) if len(samples) else float("nan")
    lines = [
        f"run: median {format_ms(med)} (IQR {format_ms(q75 - q25)}) over {len(totals)} profiled runs; "
        + (f"its rows (kernels, graph breaks, the compiled program's own Python) account for {profile.coverage * 100:.1f}% "
           f"of it (coverage)" + (_coverage_rest(profile) if profile.compiled.get("profiler_cost")
                                  else "") + lost if framed else
           f"kernels account for {profile.coverage * 100:.1f}% of it (coverage), the rest is the compiled program's own "
           f"Python (guards, wrappers, allocations) and the profiler's" + lost)
    ]
    from ..core.compiled import quiet_own_run_ms

    plain, count = quiet_own_run_ms(profile.meta)  # the quiet runs, as the fidelity line and the rows' construction
    if plain:
        lines.append(
            f"kernels: {format_ms(kernel_ms)} a run (median over the runs of their summed times), "
            f"{kernel_ms / plain * 100:.1f}% of the compiled model's own median run time ({format_ms(plain)}, "
            f"{count} unprofiled runs in a plain loop)"
            + (f"; all rows {all_ms / plain * 100:.1f}% of it" + _rows_note(profile.meta)
               + _rows_share_words(profile, all_ms / plain) if framed else "")
        )
    lines.extend(breaks_lines(profile, plain))
    return lines


#: a compiled profile's rows over its own run outside this range are said to be implausible
ROWS_SHARE_PLAUSIBLE = (0.7, 1.3)


def _coverage_rest(profile: "Profile") -> str:
    """What the profiled run holds beyond its rows: the profiler's cost; on a GPU also the time
    the device waits for launches (in no row), and host rows overlap the kernels they launch."""
    gpu = str(profile.meta.get("device", "")).startswith("cuda")
    if profile.coverage > 1.0:  # no rest: each row's median comes from its own runs
        return (" (on a GPU host rows and the kernels they launch overlap)" if gpu else
                " (over 100%: each row's median comes from other runs than the run's; the runs vary, see the IQR)")
    return ", the rest the GPU waiting for launches and the profiler's own cost" if gpu else ", the profiler's own cost the rest"


def _rows_share_words(profile: "Profile", share: float) -> str:
    """Why the rows are far from the own run, if they are. On a GPU the kernel rows are device
    time and the overhead rows host time, on two clocks that overlap: an H200 ran resnet50 (122
    kernels) with 48% of its own run in rows (the GPU waiting for launches is in none) and,
    with CUDA graphs, 159% (the graph's replay, a host row, overlaps the kernels it runs)."""
    if ROWS_SHARE_PLAUSIBLE[0] <= share <= ROWS_SHARE_PLAUSIBLE[1]:
        return ""
    if str(profile.meta.get("device", "")).startswith("cuda"):
        if share < ROWS_SHARE_PLAUSIBLE[0]:
            return (": far under 100%: on a GPU the kernel rows are device time, and the time the GPU waits for the host "
                    "to launch them is in no row (a launch-bound program: mode='reduce-overhead' launches fewer)")
        return (": over 100%: on a GPU the overhead rows are host time, and the kernels they launch run during it "
                "(a CUDA graph's replay is a host row): the two overlap, so rows do not add up to the run")
    return (": far from 100%, so the runs differed from the unprofiled ones by more than the "
            "timer's own cost (a noisy or busy machine: see the machine line; profile again with more --iters)")


def _rows_note(meta: Mapping[str, Any]) -> str:
    """What the compiled rows' share of the own run rests on: the profiler's cost left in them,
    or measured as the profiled runs' excess over the unprofiled ones (then the share is 100% by
    construction, unless the factor was held)."""
    cost = (meta.get("compiled") or {}).get("profiler_cost")
    if (meta.get("compiled") or {}).get("clock_read_ns") is not None:  # the marks: no profiler
        return " (the marks' clock reads are in them)"
    if not cost:
        return " (the profiler's own cost is in them)"
    if "measured_scale" in cost and cost.get("measured_scale") == cost.get("scale"):
        return " (the profiler's own cost taken out is the profiled runs' excess over these)"
    return ""
