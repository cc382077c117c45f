"""The machine as this process sees it: the cores it may use (its affinity: ``taskset``, a
container's CPU limit) and the load average. Read by the contention meter around the timed runs
and by the peaks measurement alike."""

from __future__ import annotations

import os

__all__ = ["usable_cores", "machine_load"]


def usable_cores() -> int:
    """The cores this process may run on (its affinity), else the machine's count."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def machine_load() -> float | None:
    """The 1-minute load average (runnable processes), or None where the system has none."""
    try:
        return float(os.getloadavg()[0])
    except (AttributeError, OSError):
        return None
