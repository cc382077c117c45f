"""The bandwidth curve the memory roofs come from: add, copy and an in-place op at sizes from the
caches to far beyond them, in interleaved rounds until a round raises no point; the roof at a
size is the best rate at that size or larger, and plain ops between the curve's sizes raise any
roof they beat by more than 5%. The clock each device reads."""

from __future__ import annotations

import math
import statistics
import time
from typing import Any, Callable

import torch

from ...core.roofline import ROOF_CHECK_PCT, roof_for

#: the curve stops adding rounds once a round raised no point of its envelope by more than this
#: and the two best rounds of every point that sets a roof are within ROOF_SPREAD of each other
CURVE_STABLE = 0.01
ROOF_SPREAD = 0.05

def _kernels(x: torch.Tensor, y: torch.Tensor, z: torch.Tensor, fresh: bool = False) -> dict[str, tuple[Callable[[], Any], int, int]]:
    """The kernels profiled ops run, as ``name: (call, bytes read, bytes read + written)``:
    ``add`` into a given output (``torch.add(x, y, out=z)``), ``copy`` (``z.copy_(x)``), ``in
    place`` (``torch.relu_(y)``: reads and writes one tensor) and, with ``fresh``, ``x + y``
    into a new tensor (an allocation: never faster than ``add``)."""
    size = x.numel() * x.element_size()
    # in place: reads and writes the same bytes, so at the same bytes read its data takes half
    # the room of a copy's (resnet18's first ReLU, in place, ran at 119% of a copy-only roof);
    # relu_ of positive values changes nothing
    kernels = {"add": (lambda: torch.add(x, y, out=z), 2 * size, 3 * size), "copy": (lambda: z.copy_(x), size, 2 * size),
               "in place": (lambda: torch.relu_(y), size, 2 * size)}
    if fresh:
        kernels["x + y"] = (lambda: x + y, 2 * size, 3 * size)
    return kernels


def measure_curve(device: torch.device, dtype: torch.dtype, plan: dict[str, Any],
                   clock: "Clock") -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The bandwidth curve: ``add`` and ``copy`` on buffers of ``2**lo`` to ``2**hi`` elements
    (views of three buffers of the largest size, allocated and touched once: no page faults),
    in interleaved rounds (a noisy moment slows one round, not every size); the fastest call of
    all rounds counts. Rounds go on (between the plan's least and most) until one raises no
    point of the curve's envelope by more than :data:`CURVE_STABLE`. Each point says how far
    its two best rounds are apart (``spread``): how stable its best figure is."""
    lo, hi = plan["curve"]
    least, most = plan["curve_rounds"]
    seconds = float(plan["point_seconds"])
    big = [torch.empty(2**hi, device=device, dtype=dtype).fill_(v) for v in (1.0, 2.0, 0.0)]  # touched: no page faults later
    rounds: dict[tuple[str, int], list[float]] = {}
    calls: dict[tuple[str, int], tuple[Callable[[], Any], int, int]] = {}
    for exp in range(lo, hi + 1):
        for name, kernel in _kernels(*(b[: 2**exp] for b in big)).items():
            calls[(name, 2**exp)] = kernel
            rounds[(name, 2**exp)] = []
    done, rise, spread = 0, float("inf"), float("inf")
    while done < most and (done < least or rise > CURVE_STABLE or spread > ROOF_SPREAD):
        before = _envelope(calls, rounds)
        for point, (fn, _reads, _moved) in calls.items():
            rounds[point].append(clock.best(fn, 2, seconds))
        done += 1
        after = _envelope(calls, rounds)
        rise = max((after[p] / before[p] - 1.0 for p in before if before[p] > 0), default=float("inf"))
        spread = _roof_spread(calls, rounds, after)[0]
    del big
    points = []
    for (name, elements), (_fn, reads, moved) in calls.items():
        times = sorted(rounds[(name, elements)])
        points.append({"kernel": name, "elements": elements, "bytes": reads, "moved": moved,
                       "bytes_per_s": moved / times[0], "spread": (times[1] / times[0] - 1.0) if len(times) > 1 else None})
    points.sort(key=lambda p: (p["bytes"], p["kernel"]))
    spread, where = _roof_spread(calls, rounds, _envelope(calls, rounds))
    return points, {"rounds": done, "last_rise": rise if math.isfinite(rise) else None,
                    "roof_spread": spread if math.isfinite(spread) else None, "roof_spread_at": where,
                    "stable": bool(rise <= CURVE_STABLE and spread <= ROOF_SPREAD),
                    "worst_spread": max((p["spread"] for p in points if p["spread"] is not None), default=None)}


def _roof_spread(calls: dict, rounds: dict, envelope: dict) -> tuple[float, int | None]:
    """The largest gap between the two best rounds among the points that set the roof at their
    size (their rate is the envelope there), and that point's bytes read: how far the roofs
    could move if measured again."""
    worst, where = 0.0, None
    for point, times in rounds.items():
        if len(times) < 2:
            return float("inf"), None
        best, second = sorted(times)[:2]
        if calls[point][2] / best >= envelope[point] * 0.999999 and second / best - 1.0 > worst:
            worst, where = second / best - 1.0, calls[point][1]
    return worst, where


def roof_points(curve: list[dict[str, Any]]) -> list[tuple[int, float]]:
    """``(bytes read, rate)`` of the curve up to the largest size every kernel reached: above it
    only ``add`` ran (it reads two buffers), and an in-place op there would outrun a roof set
    by ``add`` alone (main memory's, on this machine: 15 GB/s for add, 20 for in place)."""
    reach = min(max(p["bytes"] for p in curve if p["kernel"] == k) for k in {p["kernel"] for p in curve})
    return [(p["bytes"], p["bytes_per_s"]) for p in curve if p["bytes"] <= reach]


def _envelope(calls: dict, rounds: dict) -> dict[tuple[str, int], float]:
    """Each curve point's roof so far: the best rate at its size or any larger one."""
    rate = {p: (calls[p][2] / min(t) if t else 0.0) for p, t in rounds.items()}
    order = sorted(rate, key=lambda p: calls[p][1])
    best, out = 0.0, {}
    for p in reversed(order):
        best = max(best, rate[p])
        out[p] = best
    return out


def check_plain_ops(device: torch.device, dtype: torch.dtype, plan: dict[str, Any], clock: "Clock") -> list[dict[str, Any]]:
    """Plain ops at sizes between the curve's (1.5 times a power of two, at four places along
    it): ``add`` into a given output, ``copy`` and ``x + y`` into a new tensor, each the fastest
    call of 3 interleaved rounds. Their rates are checked against the roofs by
    :func:`raise_roofs`."""
    lo, hi = plan["curve"]
    exps = sorted({lo + round(i * (hi - 1 - lo) / 3) for i in range(4)})
    seconds = float(plan["point_seconds"])
    found = []
    for exp in exps:
        elements = 3 * 2 ** (exp - 1)
        x, y, z = (torch.empty(elements, device=device, dtype=dtype).fill_(v) for v in (1.0, 2.0, 0.0))
        kernels = _kernels(x, y, z, fresh=True)
        best = {name: float("inf") for name in kernels}
        for _ in range(3):
            for name, (fn, _reads, _moved) in kernels.items():
                best[name] = min(best[name], clock.best(fn, 2, seconds))
        for name, (_fn, reads, moved) in kernels.items():
            found.append({"op": name, "elements": elements, "bytes": reads, "moved": moved, "bytes_per_s": moved / best[name]})
        del x, y, z, kernels
    return found


def raise_roofs(bytes_per_s: float, levels: list[dict[str, Any]], check: list[dict[str, Any]]) -> tuple[float, list[dict[str, Any]], list[dict[str, Any]]]:
    """No plain op of ``check`` may run above :data:`ROOF_CHECK_PCT` of its roof: one that does
    raises the roof it was held to (its level's, or main memory's) to its own rate, and says so
    (``raised`` in its row). Returns the roofs and the rows with ``roof``, ``level``, ``pct``."""
    levels = [dict(lv) for lv in levels]
    rows = []
    for row in sorted(check, key=lambda r: -r["bytes_per_s"]):
        roof, level = roof_for(row["bytes"], bytes_per_s, levels)
        row = {**row, "roof": roof, "level": level, "pct": row["bytes_per_s"] / roof * 100.0, "raised": False}
        if row["pct"] > ROOF_CHECK_PCT:
            row["raised"] = True
            if level == "memory":
                bytes_per_s = row["bytes_per_s"]
            else:
                next(lv for lv in levels if lv["level"] == level)["bytes_per_s"] = row["bytes_per_s"]
        rows.append(row)
    rows.sort(key=lambda r: (r["bytes"], r["op"]))
    return bytes_per_s, levels, rows


#: spin-kernel cycles queued before a timed call on a GPU (about 0.1-0.2 ms at 1-2 GHz): longer
#: than the host takes to queue the start event, the call and the end event, so the events
#: bracket the kernel alone. Without it an idle GPU records the start at once and then waits for
#: the launch: on an H200 host every call up to 1 MB read 17.6-18.3 us, and the 768 MB add of
#: the quick curve 8% under its device rate, a roof that plain adds beat by up to 11%.
HOLD_CYCLES = 200_000


class Clock:
    """Times a callable: the host clock on the CPU, CUDA events on a GPU (after a warm-up call)."""

    def __init__(self, device: torch.device) -> None:
        self.cuda = device.type == "cuda"
        self.device = device

    def once(self, fn: Callable[[], Any], queued: bool = False) -> float:
        """One call's time. ``queued`` (a GPU): a spin kernel first, so the device time of the
        call's kernels alone is timed, not the host's launch latency too."""
        if self.cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            if queued:
                torch.cuda._sleep(HOLD_CYCLES)
            start.record()
            fn()
            end.record()
            end.synchronize()
            return start.elapsed_time(end) / 1e3
        began = time.perf_counter()
        fn()
        return time.perf_counter() - began

    def best(self, fn: Callable[[], Any], reps: int, seconds: float = 0.0) -> float:
        """The fastest of at least ``reps`` calls, and of as many more as fit in ``seconds``
        (at most 100): on a shared machine, more tries catch a quiet moment. On a GPU each call
        is queued behind a spin kernel (:data:`HOLD_CYCLES`): the kernel's own time, the rate a
        roof must not be under."""
        fn()  # warm-up: first-call costs (workspace, packing, lazy init) stay out
        if self.cuda:
            torch.cuda.synchronize(self.device)
        end = time.perf_counter() + seconds
        times = [self.once(fn, queued=True) for _ in range(reps)]
        while time.perf_counter() < end and len(times) < 100:
            times.append(self.once(fn, queued=True))
        return min(times)

    def each_median(self, fn: Callable[[], Any], reps: int) -> float:
        """The median of ``reps`` calls, each timed on its own (events around each on a GPU)."""
        fn()
        if self.cuda:
            torch.cuda.synchronize(self.device)
        return statistics.median(self.once(fn) for _ in range(reps))

    def median(self, fn: Callable[[], Any], reps: int) -> float:
        fn()
        if self.cuda:  # back to back on the stream: the launch-limited rate of one tiny kernel
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            torch.cuda.synchronize(self.device)
            start.record()
            for _ in range(reps):
                fn()
            end.record()
            end.synchronize()
            return start.elapsed_time(end) / 1e3 / reps
        times = []
        for _ in range(reps):
            began = time.perf_counter()
            fn()
            times.append(time.perf_counter() - began)
        return statistics.median(times)
