"""The header's fidelity line and the ``(outside the graph)`` row (figures from
:mod:`fxprof.core.fidelity`). Renders; times nothing."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from ..core.fidelity import GPU_RATIO_LIMIT, Fidelity, fidelity, outside_label
from .tables import format_ms

if TYPE_CHECKING:
    from ..core.profile import Profile

__all__ = ["profile_fidelity", "fidelity_lines", "outside_row"]


def profile_fidelity(profile: "Profile") -> Fidelity | None:
    """The profile's :class:`Fidelity`, or None (no own runs, no runs, isolated mode)."""
    if profile.is_isolated or not profile.num_runs:
        return None
    from .headline import busy_kept

    # a gathered profile's own runs are kept whole, as its profiled runs are (fxprof.core.fidelity)
    return fidelity(profile.meta, profile.kept_totals(), profile.df["median_ms"].tolist(), busy_profiled=busy_kept(profile))


#: a training step's fidelity line: fxprof runs no step of its own beside the profiled ones
TRAINING_LINE = ("fidelity: not measured for a training step (its own run is your loop's, with its loss, backward "
                 "and optimizer, which fxprof does not run unprofiled)")

#: kernels below this share of the run: the run is host-bound, and the header says so
HOST_BOUND_SHARE = 0.8


def kernel_line(profile: "Profile") -> list[str]:
    """With kernel times (``--timer kernel``): what the kernels alone take against the run, and
    when they take much less, that the run is host-bound ("kernels 3.85 ms of a 6.2 ms run")."""
    table = profile.df
    if "kernel_median_ms" not in table.columns or not table["kernel_median_ms"].notna().any() or not profile.num_runs:
        return []
    kernels = float(table["kernel_median_ms"].sum())
    totals = sorted(profile.kept_totals())
    run = totals[len(totals) // 2]
    if not run > 0:
        return []
    line = f"kernels: {format_ms(kernels)} of a {format_ms(run)} run ({kernels / run * 100:.0f}%, summed kernel medians)"
    if kernels < HOST_BOUND_SHARE * run:
        line += ": host-bound, the device idles between kernels; the headroom is in launches (fewer, larger kernels: compile)"
    return [line]


def fidelity_lines(profile: "Profile") -> list[str]:
    """``fidelity: profiled run 1.07 x the model's own (3.21 ms, 5 unprofiled runs)``, and what
    to do when a GPU profile is over :data:`GPU_RATIO_LIMIT`; then :func:`kernel_line`."""
    found = profile_fidelity(profile)
    if found is None:
        meta = profile.meta
        if meta.get("backward") and not meta.get("session") and not profile.is_isolated and profile.num_runs:
            # said, not left out silently: a training step's own run is the user's loop (loss, optimizer)
            return [TRAINING_LINE] + kernel_line(profile)
        return kernel_line(profile)
    whose = "the compiled model's own" if profile.is_compiled else "the model's own"
    after = [float(v) for v in profile.compiled.get("unprofiled_after_profiler_ms") or ()]
    where = ("at the loop's eager steps" if profile.meta.get("session") else
             f"in a plain loop before the profiled ones; those after took {format_ms(float(np.median(after)))}, "
             f"{float(np.median(after)) / found.own_ms:.2f} x: a process launches slower once torch.profiler has run in it, "
             f"so they are left out" if after and found.own_ms > 0 else
             "in a plain loop before and after the profiled ones" if profile.is_compiled else "between the profiled ones")
    if found.unreliable:  # a ratio from too few, too spread or preempted runs is not printed
        return [f"fidelity: not stated: {found.unreliable}; the median profiled run took {format_ms(found.profiled_ms)}, "
                f"the model's own {format_ms(found.own_ms)} (median of {found.own_runs} unprofiled runs {where})"] + kernel_line(profile)
    corrected = (f", {found.corrected_own} of them less the time they lost to other processes" if found.corrected_own else "")
    line = (f"fidelity: profiled run {found.ratio:.2f} x {whose} ({format_ms(found.own_ms)}, median of "
            f"{found.own_runs} unprofiled runs {where}{corrected})")
    if found.too_slow and profile.is_compiled:
        # no marks of fxprof's in a compiled run: the profiler (CUPTI) records every launch, which
        # a launch-bound program pays for in every kernel (an H200: resnet50 1.56x, BERT 1.02-1.4x)
        line += (f"; over {GPU_RATIO_LIMIT:g}x on the GPU: torch.profiler (CUPTI) adds to every kernel launch, and a "
                 f"launch-bound program pays it in every kernel: the kernels' device times stand, the run's total does "
                 f"not; mode='reduce-overhead' (CUDA graphs) launches fewer")
    elif found.too_slow and profile.meta.get("timer") == "kernel":
        # an H200: resnet50 bs32 fp16 2.63x under the kernel timer (torch.profiler records every
        # launch); the advice to read device time with --timer kernel was given to this very profile
        line += (f"; over {GPU_RATIO_LIMIT:g}x on the GPU: torch.profiler (CUPTI) records every launch of a launch-bound "
                 f"model, so node times hold its cost; each node's device time is its kernel_median_ms column, "
                 f"and --timer cuda times the runs closer to the model's own")
    elif found.too_slow:
        line += (f"; over {GPU_RATIO_LIMIT:g}x on the GPU, fxprof's own marks sit inside the node times (a launch-bound "
                 f"model): time fewer nodes (leaf_modules=... / --leaf-module), read device time with --timer kernel "
                 f"(kernel_median_ms), or profile the compiled model (--compile)")
    return [line] + kernel_line(profile)


def _own_runs_shared(profile: "Profile") -> bool:
    """A gathered profile whose own runs lost time to other processes (another rank on the same
    core): they are kept whole for the fidelity ratio, so their excess over the nodes is not the
    model's own Python, and no outside row is made of it."""
    if len(profile.ranks) <= 1:
        return False
    from ..core.contention import busy_mask
    from ..core.fidelity import own_runs_ms

    own = own_runs_ms(profile.meta)
    lost = (profile.meta.get("contention") or {}).get("own_lost_ms")
    return bool(own) and lost is not None and len(lost) == len(own) and bool(busy_mask(lost, own).any())


def outside_row(profile: "Profile") -> pd.DataFrame:
    """One row (index ``(outside the graph)`` or ``(between nodes)``) with the time of the
    model's own run that is in no node, ``median_ms`` only; empty when there is none worth a row.
    Tables show it after the node rows, out of every ranking; with it the rows add up to the
    model's own run."""
    found = profile_fidelity(profile)
    if found is None or not found.outside_shown or profile.is_compiled or _own_runs_shared(profile):
        return pd.DataFrame()
    return pd.DataFrame({"kind": ["outside"], "median_ms": [found.outside_ms]}, index=pd.Index([outside_label(profile.meta)], name="node"))


def outside_note(profile: "Profile") -> str:
    """The footer line that says what the outside row is."""
    found = profile_fidelity(profile)
    if found is None or not found.outside_shown or profile.is_compiled or _own_runs_shared(profile):
        return ""
    label = outside_label(profile.meta)
    what = ("the model's Python that the captured graph(s) do not contain, and its calls between their ops"
            if label == "(outside the graph)" else "the model's own Python around its ops (module calls, the forward's code)")
    # the model's own run has no interpreter: this is the model's time, not fxprof's (the header's
    # 'outside every node' is the profiled runs', where the interpreter's steps are)
    return (f"{label}: {format_ms(found.outside_ms)} of the model's own unprofiled run ({format_ms(found.own_ms)}) is in no "
            f"node's time: {what}; the own run minus the summed node medians; not ranked")
