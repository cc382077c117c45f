"""``fxprof selfcheck``: check fxprof against ground truth on this machine.

Runs small graphs whose node costs are known, under every timer that can run here, and
compares what fxprof measures with what is known:

- **CPU**: nodes that spin for exactly 0.5, 1 and 2 ms (a busy loop on the monotonic clock),
  between cheap nodes. Timer ``cpu``. The check compares each node's fastest run with its
  known cost: a busy machine only ever adds time (a preempted spin ends late), so the fastest
  run is what the timer reads when nothing interferes. The median and a stopwatch median of
  the same spin (``perf_counter_ns`` around it, run right after) show how busy the machine was.
- **GPU** (``device="cuda"``): a ``torch.cuda._sleep`` kernel of calibrated length (the
  median of 5 timed kernels) launched directly (no aten op: the case kernel attribution must
  not lose) behind cheap nodes while the host runs ahead; cheap nodes queued behind it; a
  chain of tiny ops on an idle GPU (launch-bound); a node that synchronizes (``.item()``).
  Timers ``cuda``, ``sync``, ``kernel`` (and ``cpu``, which must see only the launch).

- **roofs**: a plain add (into a new tensor and into a given one), a copy and an in-place ReLU at four sizes
  (the smallest in the caches, the largest in main memory, none a power of two), profiled with
  the machine peaks (``peaks="auto"``): none may read above 105% of its roof, or the roof is no
  upper bound (``fxprof peaks --refresh`` measures again).

Prints, per timer, each checked node's known and measured time, the error and the ``bound``
verdict against the expected one, then a pass/fail line. :func:`selfcheck` returns the result;
the command exits 0 on pass, 1 on fail.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from typing import Any, Mapping, TextIO

import pandas as pd
import torch
from torch import fx, nn

from .api import profile
from .errors import TimerUnavailableError
from .measure.capture.interpreter import ProfilingInterpreter
from .measure.capture.tracer import trace
from .vocab import CUDA_TIMERS

__all__ = ["selfcheck", "SelfCheck", "SPIN_TOLERANCE_MS", "SPIN_TOLERANCE_REL", "GPU_TOLERANCE_REL", "PlainOps", "PLAIN_SIZES", "PLAIN_SIZES_CUDA"]

#: a spin node passes when its median is within this many ms plus this share of its known cost
SPIN_TOLERANCE_MS = 0.05
SPIN_TOLERANCE_REL = 0.05
#: a cheap CPU node passes when its fastest run exceeds a stopwatch's by at most this
CHEAP_CPU_MS = 0.1
#: GPU: the sleeping node's time within this share of the calibrated kernel
GPU_TOLERANCE_REL = 0.10
#: GPU: cheap nodes queued behind the kernel stay under this share of it
GPU_CHEAP_SHARE = 0.05
#: GPU: the launch-bound chain passes when at least this share of its nodes read "launch"
CHAIN_LAUNCH_SHARE = 0.8


def spin(x: Any, ms: float) -> Any:
    """Busy-wait ``ms`` milliseconds on the monotonic clock; return ``x``."""
    end = time.perf_counter_ns() + int(ms * 1e6)
    while time.perf_counter_ns() < end:
        pass
    return x


def sleep_kernel(x: Any, cycles: int) -> Any:
    """Launch one ``torch.cuda._sleep`` kernel (a direct launch: no aten op); return ``x``."""
    torch.cuda._sleep(cycles)
    return x


fx.wrap("spin")
fx.wrap("sleep_kernel")


class CpuSpins(nn.Module):
    def forward(self, x):
        x = spin(x, 0.5)
        x = x + 1
        x = spin(x, 1.0)
        x = x * 2
        x = spin(x, 2.0)
        return torch.relu(x)


CPU_KNOWN = {"spin": 0.5, "spin_1": 1.0, "spin_2": 2.0, "add": 0.0, "mul": 0.0, "relu": 0.0}
#: the spin each cheap node follows, and the op it runs
CPU_CHEAP_AFTER = {"add": 0.5, "mul": 1.0, "relu": 2.0}
CPU_OPS = {"add": lambda x: x + 1, "mul": lambda x: x * 2, "relu": torch.relu}


class PlainOps(nn.Module):
    """Per size (three tensors ``x, y, z`` each): ``x + y`` (a new tensor), ``torch.add(x, y,
    out=z)``, ``z.copy_(x)`` and ``torch.relu_(y)`` (in place; ``y`` is positive: unchanged): the
    plain ops no roof may be beaten by."""

    def forward(self, x0, y0, z0, x1, y1, z1, x2, y2, z2, x3, y3, z3):
        outs = []
        for x, y, z in ((x0, y0, z0), (x1, y1, z1), (x2, y2, z2), (x3, y3, z3)):
            outs += [x + y, torch.add(x, y, out=z), z.copy_(x), torch.relu_(y)]
        return outs


#: the elements of :class:`PlainOps`' tensors: 24 KiB to 20 MiB in float32, none a power of two
#: (the peaks' curve measures powers of two: these fall between its sizes)
PLAIN_SIZES = (3 * 2**11, 5 * 2**14, 3 * 2**18, 5 * 2**20)
#: on a GPU: 384 KiB to 320 MiB in float32, from the L2 to far beyond it
PLAIN_SIZES_CUDA = (3 * 2**15, 5 * 2**18, 3 * 2**22, 5 * 2**24)


def _roof_rows(iters: int, device: str = "cpu") -> list[dict]:
    """Plain ops profiled with the machine peaks: each at most ROOF_CHECK_PCT of its roof."""
    from .core.roofline import ROOF_CHECK_PCT

    sizes = PLAIN_SIZES_CUDA if device == "cuda" else PLAIN_SIZES
    tensors = [torch.full((n,), float(v), device=device) for n in sizes for v in (1.0, 2.0, 0.0)]
    prof = profile(PlainOps(), *tensors, warmup=2, iters=iters, name="selfcheck roofs")
    df = prof.df
    ops = df[df["bytes"].fillna(0) > 0]
    ops = ops[ops["roof_pct"].notna()]
    label = "roofs" if prof.meta.get("peaks") else "roofs (no peaks)"
    rows = []
    for node in ops.index:
        pct = float(ops.loc[node, "roof_pct"])
        rows.append(_row(label, f"{node} ({int(ops.loc[node, 'bytes'])} B)", float(ops.loc[node, "roof_ms"]),
                         float(ops.loc[node, "median_ms"]), pct <= ROOF_CHECK_PCT,
                         f"median {pct:.0f}% of the roof (at most {ROOF_CHECK_PCT:g}%)"))
    if not rows:
        rows.append(_row(label, "(roofs)", 0.0, 0.0, False, "the peaks could not be measured, or no node has a roof"))
    return rows


class GpuChecks(nn.Module):
    """chain (launch-bound) -> sleep kernel (host runs ahead) -> cheap nodes behind it -> .item()."""

    def __init__(self, cycles: int, chain: int = 30):
        super().__init__()
        self.cycles = cycles
        self.chain = chain

    def forward(self, x):
        c = x[:1]
        for _ in range(self.chain):
            c = c + 1
        y = sleep_kernel(x, self.cycles)
        y = y * 2
        y = y + c
        y = torch.relu(y)
        s = y.sum().item()  # synchronizes: the host waits for the sleep kernel
        return y + s


@dataclass
class SelfCheck:
    """What :func:`selfcheck` found: one row per checked (timer, node), and the verdict."""

    device: str
    rows: pd.DataFrame
    passed: bool
    lines: list[str] = field(default_factory=list)

    def __str__(self) -> str:
        return "\n".join(self.lines)


def _row(timer: str, node: str, known: float, measured: float, ok: bool, what: str, bound: str = "", expected: str = "",
         reference: float | None = None, median: float | None = None) -> dict:
    """``measured_ms`` is what the check compares with ``known_ms``; ``median_ms`` and
    ``stopwatch_ms`` (a hand-timed median of the same work) show how busy the machine was."""
    return {"timer": timer, "node": node, "known_ms": known, "measured_ms": measured, "error_ms": measured - known,
            "median_ms": measured if median is None else median, "stopwatch_ms": reference if reference is not None else float("nan"),
            "bound": bound, "expected_bound": expected, "check": what, "ok": bool(ok)}


def _hand_timed_after_spin(ms: float, op: Any, n: int) -> float:
    """Fastest of ``n`` stopwatch readings around ``op`` run right after ``spin(ms)``."""
    x = torch.ones(8)
    best = float("inf")
    for _ in range(n):
        spin(x, ms)
        t0 = time.perf_counter_ns()
        op(x)
        best = min(best, (time.perf_counter_ns() - t0) / 1e6)
    return best


def _hand_timed(ms: float, n: int) -> tuple[float, float]:
    """Median and IQR of ``n`` stopwatch readings (perf_counter_ns) around ``spin(ms)``: what
    the same work costs on this machine right now, preemptions included."""
    x = torch.ones(8)
    times = []
    for _ in range(n):
        t0 = time.perf_counter_ns()
        spin(x, ms)
        times.append((time.perf_counter_ns() - t0) / 1e6)
    q = pd.Series(times).quantile([0.25, 0.5, 0.75])
    return float(q[0.5]), float(q[0.75] - q[0.25])


def _cpu_rows(iters: int, timers: Mapping[str, Any]) -> list[dict]:
    rows = []
    x = torch.ones(8)
    expected = CpuSpins()(x)
    for label, timer in timers.items():
        prof = profile(CpuSpins(), x, warmup=2, iters=iters, timer=timer, anatomy=False, name="selfcheck")
        df = prof.df
        for node, known in CPU_KNOWN.items():
            # the fastest run: a busy machine only ever adds time (a preempted spin ends late),
            # so the minimum is what the timer reads when nothing interferes
            fastest, med = float(df.loc[node, "min_ms"]), float(df.loc[node, "median_ms"])
            if known > 0:
                ok = abs(fastest - known) <= SPIN_TOLERANCE_MS + SPIN_TOLERANCE_REL * known
                what = f"fastest run within {SPIN_TOLERANCE_MS} ms + {SPIN_TOLERANCE_REL:.0%}"
                ref = _hand_timed(known, iters)[0]
            else:
                # a cheap node right after a spin: a stopwatch around the same op in the same
                # place reads its real cost there (cold caches, a preemption due); fxprof's
                # fastest run must not exceed the stopwatch's fastest by more than the margin
                ref = _hand_timed_after_spin(CPU_CHEAP_AFTER[node], CPU_OPS[node], iters)
                ok = fastest <= ref + CHEAP_CPU_MS
                what = f"cheap: fastest run <= stopwatch's + {CHEAP_CPU_MS} ms"
            rows.append(_row(label, node, known, fastest, ok, what, str(df.loc[node, "bound"]), "", median=med, reference=ref))
        out = ProfilingInterpreter(trace(CpuSpins())).run(x)
        rows.append(_row(label, "(output)", 0.0, 0.0, torch.equal(out, expected), "profiling changes no output"))
    return rows


def _gpu_rows(iters: int, timers: Mapping[str, Any]) -> list[dict]:
    from .measure.timing.timers import sleep_cycles_per_ms

    per_ms = sleep_cycles_per_ms(None)
    cycles = int(2.0 * per_ms)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    known_runs = []
    for _ in range(5):
        start.record()
        torch.cuda._sleep(cycles)
        end.record()
        end.synchronize()
        known_runs.append(start.elapsed_time(end))
    known = float(pd.Series(known_runs).median())
    x = torch.ones(1024, device="cuda")
    model = GpuChecks(cycles)
    rows = []
    for label, timer in timers.items():
        prof = profile(model, x, warmup=3, iters=iters, timer=timer, name="selfcheck", memory=False)
        df = prof.df
        sleep_ms = float(df.loc["sleep_kernel", "median_ms"])
        if label == "cpu":
            rows.append(_row(label, "sleep_kernel", known, sleep_ms, sleep_ms < 0.5 * known, "sees only the launch"))
            continue
        rows.append(_row(label, "sleep_kernel", known, sleep_ms, abs(sleep_ms - known) <= GPU_TOLERANCE_REL * known,
                         f"within {GPU_TOLERANCE_REL:.0%}", str(df.loc["sleep_kernel", "bound"]), "device" if label != "sync" else ""))
        if label == "kernel":
            k = float(df.loc["sleep_kernel", "kernel_median_ms"])
            rows.append(_row(label, "sleep_kernel (device activity)", known, k, abs(k - known) <= GPU_TOLERANCE_REL * known,
                             "direct launch attributed"))
        if label != "sync":  # sync pays a synchronize per node: its cheap nodes carry that floor
            for node in ("mul", "add_30", "relu"):
                med = float(df.loc[node, "median_ms"])
                rows.append(_row(label, node, 0.0, med, med < GPU_CHEAP_SHARE * known, f"cheap: under {GPU_CHEAP_SHARE:.0%} of the kernel",
                                 str(df.loc[node, "bound"]), "device"))
            chain = [f"add_{i}" if i else "add" for i in range(30)]
            share = float((df.loc[chain, "bound"] == "launch").mean())
            rows.append(_row(label, "chain of 30 adds", 0.0, share, share >= CHAIN_LAUNCH_SHARE,
                             f">= {CHAIN_LAUNCH_SHARE:.0%} read launch", f"{share:.0%} launch", "launch"))
            verdict = str(df.loc["item", "bound"])
            rows.append(_row(label, "item", 0.0, float(df.loc["item", "median_ms"]), verdict == "sync",
                             "synchronizing node is never launch", verdict, "sync"))
    return rows


def selfcheck(device: str = "cpu", iters: int = 20, timers: Mapping[str, Any] | None = None,
              file: TextIO | None = sys.stdout) -> SelfCheck:
    """Run the checks for ``device`` (``"cpu"`` or ``"cuda"``), print them to ``file`` (None:
    silent) and return a :class:`SelfCheck`. ``timers`` replaces the timers to check
    (``{label: timer name or Timer}``), e.g. to see a broken timer fail; the roofs are then
    not checked."""
    device = str(device)
    if device.startswith("cuda"):
        if not torch.cuda.is_available():
            raise TimerUnavailableError(
                "selfcheck --device cuda needs a CUDA GPU, but torch.cuda.is_available() is False; run it with --device cpu"
            )
        roofs = _roof_rows(iters, "cuda") if timers is None else []  # timers given: those alone are checked
        timers = timers or {name: name for name in (*CUDA_TIMERS, "cpu")}
        rows = _gpu_rows(iters, timers) + roofs
    elif device == "cpu":
        roofs = _roof_rows(iters) if timers is None else []
        timers = timers or {"cpu": "cpu"}
        rows = _cpu_rows(iters, timers) + roofs
    else:
        raise ValueError(f"unknown device {device!r} for selfcheck; choose 'cpu' or 'cuda'")
    table = pd.DataFrame(rows)
    passed = bool(table["ok"].all())
    from .views.text import render_table

    lines = [f"fxprof selfcheck on {device}: torch {torch.__version__}, {iters} timed runs per timer"]
    for label, group in table.groupby("timer", sort=False, observed=True):
        empty = [c for c in ("bound", "expected_bound") if (group[c] == "").all()]  # no verdicts on the CPU
        lines += ["", f"timer {label}", render_table(group.drop(columns=["timer", *empty]).set_index("node"))]
    failed = table[~table["ok"]]
    lines.append("")
    lines.append("PASS: every measurement matched its known cost" if passed else
                 f"FAIL: {len(failed)} check(s) failed: " + ", ".join(f"{t}/{n}" for t, n in zip(failed["timer"], failed["node"])))
    result = SelfCheck(device, table, passed, lines)
    if file is not None:
        print(result, file=file)
    return result
