"""A bridge to ``torch.profiler``: a range per node, and the profiler's times per node and run.

With ``node_ranges`` on, the interpreter wraps every node in
``record_function("fxprof::<node>")`` (outside the timer's marks, so the range's own cost is not
in the node's time). After the runs, :func:`times_from_events` reads the profiler's events
back: per node and run, the CPU time of the range and the summed device (CUDA kernel) time of
every op launched inside it, which is the device's busy time for that node, without the idle
gaps an event pair would include.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any, Iterable

__all__ = ["RANGE_PREFIX", "times_from_events"]

RANGE_PREFIX = "fxprof::"


def _device_time_us(event: Any) -> float:
    value = getattr(event, "device_time_total", None)
    if value is None:  # older releases
        value = getattr(event, "cuda_time_total", 0.0)
    return float(value or 0.0)


def times_from_events(events: Iterable[Any]) -> dict[str, list[tuple[float, float]]]:
    """``{node: [(cpu_ms, device_ms), ...]}`` in the order the node's ranges started.

    ``events`` are ``torch.profiler.profile().events()``. Only the host-side range events are
    read (the profiler also mirrors ranges on the device timeline).
    """
    found: dict[str, list[tuple[float, float, float]]] = defaultdict(list)
    for event in events:
        name = getattr(event, "name", "")
        if not name.startswith(RANGE_PREFIX):
            continue
        if str(getattr(event, "device_type", "")).rsplit(".", 1)[-1] != "CPU":
            continue
        start = float(getattr(getattr(event, "time_range", None), "start", 0.0) or 0.0)
        found[name[len(RANGE_PREFIX):]].append((start, float(event.cpu_time_total) / 1000.0, _device_time_us(event) / 1000.0))
    return {node: [(cpu, dev) for _, cpu, dev in sorted(items)] for node, items in found.items()}
