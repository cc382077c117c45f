"""torch.profiler's own cost per recorded event, calibrated on this machine (issue 33).

Compiled mode times a compiled model's runs with ``torch.profiler`` on. Every event the profiler
records (an aten op, a ``record_function`` range, dynamo's and inductor's ranges) costs the run a
little time of its own: on a toy model of 0.1-0.2 ms the profiled run is 1.25-1.3x the model's
own, and that cost lands in the rows (the compiled program's overhead, graph breaks, extern ops
with nested aten calls). So the profile measures it and takes it out:

- :func:`calibrate` (once per profile, about 0.1 s): a probe of ``PROBE`` in-place adds on a
  one-element tensor, and one of ``PROBE`` empty ranges (``_RecordFunctionFast``, what dynamo's
  and inductor's ranges are), each run with the profiler off and on, interleaved, the fastest of
  ``ROUNDS`` rounds, the events the profiler recorded counted (an add of a Python number is 5
  op events). An op runs with the profiler off too: its cost is the on-off difference per event.
  The ranges of a compiled program (``Torch-Compiled Region``, ``## Call CompiledFxGraph``,
  kernel ranges...) exist only while the profiler records: their cost is their whole time per
  range. No model is run and nothing is compiled (compile ids and dynamo's caches stay as they
  were).
- :class:`ProfilerCost` holds those two costs; :meth:`ProfilerCost.of` gives an event's by its
  name (``aten::...`` and other ``ns::op`` names are ops, the rest ranges).

An event's cost is charged to the time that *holds* the event: its parent's own time (a nested
aten op's cost to the extern op that called it, a kernel range's to its graph's call, a region's
to the time outside every region). :func:`fxprof.measure.compiled.mode.spans_from_events` and
:func:`fxprof.measure.compiled.breaks.frame_spans` take it out of the spans of those rows and keep
what they took (``PROFILER_SPAN``), so each run's rows plus what was taken add up to the profiled
run exactly, and the rows estimate the model's own run.
"""

from __future__ import annotations

import dataclasses
import re
import time
import warnings
from statistics import median
from typing import Any

import torch

__all__ = ["ProfilerCost", "calibrate", "in_situ", "PROFILER_SPAN", "MIN_SCALE", "MAX_SCALE"]

#: the name of the spans that keep how much profiler cost was taken out of a run's rows
PROFILER_SPAN = "fxprof::profiler_cost"
#: events per probe and rounds of the calibration
PROBE, ROUNDS = 200, 5
_OP = re.compile(r"^\w+::\w")


@dataclasses.dataclass(frozen=True)
class ProfilerCost:
    """The profiler's cost of one recorded event, in microseconds: an op (``aten::add_``) and a
    range (``record_function`` / dynamo's ``_RecordFunctionFast``), as the probes measured them,
    times ``scale``: how much more an event cost in the model's own runs (:func:`in_situ`; 1
    where not measured)."""

    op_us: float
    range_us: float
    scale: float = 1.0
    #: why ``scale`` is what it is (empty when 1 and not measured)
    scale_reason: str = ""
    #: the ratio measured before it was held to 1..MAX_SCALE (0: not measured)
    measured: float = 0.0

    #: the factor for events nested in a kernel's span (an extern op's aten calls, C++ calling C++)
    nested_scale: float = 1.0

    def of(self, name: str, nested: bool = False) -> float:
        """One event's cost in ms, by its name; ``nested``: an event inside a kernel's span."""
        op = _OP.match(name) is not None and not name.startswith("fxprof::")
        return (self.op_us if op else self.range_us) * (self.nested_scale if nested else self.scale) / 1e3

    def as_dict(self) -> dict[str, Any]:
        out = {"op_us": round(self.op_us, 4), "range_us": round(self.range_us, 4), "probe_events": PROBE,
               "rounds": ROUNDS}
        if self.scale != 1.0 or self.nested_scale != 1.0 or self.scale_reason:
            out.update(scale=round(self.scale, 3), nested_scale=round(self.nested_scale, 3),
                       measured_scale=round(self.measured, 3), scale_reason=self.scale_reason)
        return out


#: how far an event's cost in a model's runs may be from the probes' (a factor): outside it the
#: profiled runs' excess is not taken for the profiler's (a drift of the machine, or something
#: fxprof does not know), and the nearest bound is used
MIN_SCALE, MAX_SCALE = 0.25, 4.0


def in_situ(cost: ProfilerCost, profiled_ms: list[float], plain_ms: list[float], taken_ms: list[float],
            nested_ms: list[float]) -> ProfilerCost:
    """The profiler's cost per event in the model's own runs, on the host (issue 33).

    The probes time events in a tight loop. In a compiled program's run an event costs other
    than there. More, in the compiled program's Python: each event's recording evicts the Python
    around it (dynamo's and AOT's wrappers), and some of torch's code runs only while a profiler
    records (a config read before the AOT prologue's range, the keyword values of the graph's
    call range). On a two-Linear compiled model (1 thread, py-spy; docs/performance.md section
    11c) an op in inductor's wrapper cost 0.68 us against 0.36 in the probe, the graph's call
    range 2.3 us against 0.9, while the aten calls nested in an extern op (C++ calling C++) cost
    what the probe says; the probes' figures left the rows 1.2-1.3x the model's own run.

    So where the unprofiled runs were timed beside the profiled ones (compiled mode, on the CPU)
    the profiler's whole cost a run is measured: the profiled runs' median less the unprofiled
    runs' (``excess``). The probes' figures take ``nested_ms`` (a run's median) out of kernel
    spans and ``taken_ms`` out of the time outside them. An excess above both is the Python's:
    ``scale`` = (excess - nested) / taken for the events outside the kernels, the nested ones
    kept at the probes' figure. An excess below both (the probes' figures too high, as for
    BERT's many nested aten calls) scales both alike. ``scale`` is held to MIN_SCALE..MAX_SCALE
    (beyond, the excess is not the profiler's alone: ``scale_reason`` says so). Where it is not
    held, the rows add up to the unprofiled run by construction; what the profile measures is
    where the time goes, and ``measured`` keeps the factor found."""
    if not profiled_ms or not plain_ms or not taken_ms:
        return cost
    excess = median(profiled_ms) - median(plain_ms)
    nested = median(nested_ms) if nested_ms else 0.0
    taken = median(taken_ms)
    if taken + nested <= 0:
        return cost
    above = excess >= taken + nested
    raw = (excess - nested) / taken if above and taken > 0 else excess / (taken + nested)
    said = (f"the profiled runs' median exceeds the unprofiled runs' by {excess * 1e3:.1f} us a run; the probes' "
            f"figures take out {taken * 1e3:.1f} us outside the kernels and {nested * 1e3:.1f} us nested in them: "
            f"{raw:.2f}x for " + ("the events outside the kernels" if above else "all events"))
    held = min(max(raw, MIN_SCALE), MAX_SCALE)
    if held != raw:
        said += f", held to {held:g}x (a busy machine, or a cost that is not the profiler's, is in the rows)"
    return dataclasses.replace(cost, scale=held, nested_scale=1.0 if above else held, measured=raw, scale_reason=said)


def _probes() -> dict[str, Any]:
    x = torch.zeros(1)
    fast = getattr(getattr(torch._C, "_profiler", None), "_RecordFunctionFast", None)

    def ops() -> None:
        for _ in range(PROBE):
            x.add_(1)

    def ranges() -> None:
        if fast is None:  # pragma: no cover - a release without it: the Python range
            from torch.profiler import record_function

            for _ in range(PROBE):
                with record_function("fxprof::probe"):
                    pass
            return
        for _ in range(PROBE):
            with fast("fxprof::probe"):
                pass

    return {"op": ops, "range": ranges}


def calibrate(device_activity: bool = False) -> ProfilerCost:
    """Measure the profiler's cost per recorded op and per range on this machine (see the
    module's doc); ``device_activity`` records CUDA activity too, as the profile's runs do."""
    from torch.profiler import ProfilerActivity, profile

    from ..device.bridge import kineto_quiet

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device_activity else [])
    probes = _probes()
    off: dict[str, list[float]] = {k: [] for k in probes}
    on: dict[str, list[float]] = {k: [] for k in probes}
    events: dict[str, int] = {}

    def timed(fn: Any) -> float:
        t0 = time.perf_counter_ns()
        fn()
        return (time.perf_counter_ns() - t0) / 1e3

    for fn in probes.values():
        fn()  # warm
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for _ in range(ROUNDS):
            for key, fn in probes.items():
                fn()
                off[key].append(timed(fn))
                with kineto_quiet():
                    prof = profile(activities=activities)
                    prof.__enter__()
                try:
                    fn()  # the first calls after the profiler starts run cold
                    with torch.profiler.record_function(_MARK):
                        on[key].append(timed(fn))
                finally:
                    with kineto_quiet():
                        prof.__exit__(None, None, None)
                events[key] = _counted(prof)
    per_op = events.get("op") or PROBE
    per_range = events.get("range") or PROBE
    # the fastest of the rounds: a busy machine only ever adds time to a probe (preemption), so the
    # minimum is the cost itself; a median of a loaded machine's rounds took up to 5x of it here
    return ProfilerCost(
        # an op runs with the profiler off too: its cost is the difference
        op_us=max(min(on["op"]) - min(off["op"]), 0.0) / per_op,
        # dynamo's and inductor's ranges exist only under the profiler: their cost is all their time
        range_us=min(on["range"]) / per_range)


_MARK = "fxprof::calibration"


def _counted(prof: Any) -> int:
    """The events recorded inside the calibration's mark range (the probe's events)."""
    try:
        evs = list(prof.profiler.kineto_results.events())
    except Exception:  # pragma: no cover
        return 0
    marks = [e for e in evs if e.name() == _MARK]
    if not marks:
        return 0
    m0, m1 = marks[-1].start_ns(), marks[-1].end_ns()
    return sum(1 for e in evs if e.name() != _MARK and m0 <= e.start_ns() and e.end_ns() <= m1
               and e.name() != "[memory]")
