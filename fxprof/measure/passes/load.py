"""Whether the machine was busy while the peaks were measured (other processes' share of the CPUs
from /proc/stat; where it cannot be read, this process's CPU time and the load average): peaks
from a busy machine are not cached."""

from __future__ import annotations

import os
import time
from typing import Any

import torch

from ..common.machine import machine_load, usable_cores

#: a measurement is "busy" (and not cached) when other processes used more than this share of
#: all the CPUs while it ran (from /proc/stat), or, where that cannot be read, when this
#: process got less than ``OWN_CPU_BUSY`` of its threads' time or the load average exceeds
#: its threads by more than ``LOAD_BUSY`` per CPU
OTHERS_BUSY = 0.10
OWN_CPU_BUSY = 0.70
LOAD_BUSY = 0.25
BUSY_ENV = "FXPROF_PEAKS_BUSY"

def cache_busy() -> bool:
    """:data:`BUSY_ENV` is ``off``: peaks are cached whatever the load (and still say it)."""
    return os.environ.get(BUSY_ENV, "").strip().lower() in ("off", "none", "never", "false", "no")


def _busy_threshold() -> float:
    """:data:`BUSY_ENV` as a share of the CPUs, else (unset or ``off``) :data:`OTHERS_BUSY`."""
    text = os.environ.get(BUSY_ENV, "").strip().lower()
    if not text or cache_busy():
        return OTHERS_BUSY
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"{BUSY_ENV}={text!r}: give the share of the CPUs other processes may use while peaks are "
                         f"measured (0.1 = 10%), or off to cache peaks whatever the load") from None
    if not 0.0 <= value:
        raise ValueError(f"{BUSY_ENV}={text!r} must be a share >= 0 (0.1 = 10%), or off")
    return min(value, 1.0)


class Load:
    """How busy the machine was while a measurement ran: other processes' share of all the CPUs
    (``/proc/stat``'s busy and stolen time less this process's CPU time; Linux), this process's
    CPU time over wall time and threads, and the 1-minute load average. ``record["busy"]`` says
    whether the figures can be trusted as roofs (see :data:`OTHERS_BUSY`). On a GPU the kernels
    are timed on the device, and a busy host does not slow them: never busy there."""

    def __init__(self, device: torch.device, threads: int) -> None:
        self.device, self.threads = device, threads
        self.record: dict[str, Any] = {}

    @staticmethod
    def _stat() -> tuple[float, float] | None:
        try:
            with open("/proc/stat", encoding="ascii") as handle:
                fields = [float(v) for v in handle.readline().split()[1:]]
        except (OSError, ValueError):
            return None
        if len(fields) < 4:
            return None
        idle = fields[3] + (fields[4] if len(fields) > 4 else 0.0)
        busy = sum(fields[:8]) - idle  # user nice system idle iowait irq softirq steal
        return busy, busy + idle

    def __enter__(self) -> "Load":
        self.stat, self.cpu, self.wall = self._stat(), time.process_time(), time.perf_counter()
        return self

    def __exit__(self, *exc: Any) -> None:
        wall, cpu, stat = time.perf_counter() - self.wall, time.process_time() - self.cpu, self._stat()
        cpus = os.cpu_count() or 1
        record: dict[str, Any] = {"cpus": cpus, "threads": self.threads, "seconds": round(wall, 3)}
        threads = self.threads if self.device.type == "cpu" else 1
        record["own_cpu"] = round(cpu / (wall * threads), 3) if wall > 0 else None
        load = machine_load()
        if load is not None:
            record["loadavg"] = round(load, 2)
        allowed = _busy_threshold()
        if stat is not None and self.stat is not None and stat[1] > self.stat[1]:
            ticks = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
            others = (stat[0] - self.stat[0] - cpu * ticks) / (stat[1] - self.stat[1])
            record["others_cpu"] = round(min(max(others, 0.0), 1.0), 3)
            busy = record["others_cpu"] > allowed
        else:
            busy = (record["own_cpu"] is not None and record["own_cpu"] < OWN_CPU_BUSY) or (
                "loadavg" in record and (record["loadavg"] - threads) / cpus > LOAD_BUSY)
        # more threads than the cores this process may use (taskset, a container's CPU limit): the
        # threads take turns on a core, and the compute roof comes out as low as the cores allow
        # (2 threads pinned to one core gave half the GEMM rate, and convolutions then read 191%)
        record["usable_cores"] = usable_cores()
        cramped = self.device.type == "cpu" and threads > record["usable_cores"]
        record["busy"] = (bool(busy) and allowed < 1.0 or cramped) and self.device.type == "cpu"
        self.record = record
