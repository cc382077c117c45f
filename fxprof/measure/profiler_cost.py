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
to the time outside every region). :func:`fxprof.measure.compiled.spans_from_events` and
:func:`fxprof.measure.compiled_breaks.frame_spans` take it out of the spans of those rows and keep
what they took (``PROFILER_SPAN``), so each run's rows plus what was taken add up to the profiled
run exactly, and the rows estimate the model's own run.
"""

from __future__ import annotations

import dataclasses
import re
import time
import warnings
from typing import Any

import torch

__all__ = ["ProfilerCost", "calibrate", "PROFILER_SPAN", "NO_COST"]

#: the name of the spans that keep how much profiler cost was taken out of a run's rows
PROFILER_SPAN = "fxprof::profiler_cost"
#: events per probe and rounds of the calibration
PROBE, ROUNDS = 200, 5
_OP = re.compile(r"^\w+::\w")


@dataclasses.dataclass(frozen=True)
class ProfilerCost:
    """The profiler's cost of one recorded event, in microseconds: an op (``aten::add_``) and a
    range (``record_function`` / dynamo's ``_RecordFunctionFast``)."""

    op_us: float
    range_us: float

    def of(self, name: str) -> float:
        """One event's cost in ms, by its name."""
        op = _OP.match(name) is not None and not name.startswith("fxprof::")
        return (self.op_us if op else self.range_us) / 1e3

    def as_dict(self) -> dict[str, Any]:
        return {"op_us": round(self.op_us, 4), "range_us": round(self.range_us, 4), "probe_events": PROBE,
                "rounds": ROUNDS}


#: no correction (what a profile gets when it is not calibrated)
NO_COST = ProfilerCost(0.0, 0.0)


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

    from .bridge import kineto_quiet

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
