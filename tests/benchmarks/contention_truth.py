"""The contention meter against ground truth: the lost time fxprof reports, run by run, in every
mode, beside competing processes that record when they held the core.

    python tests/benchmarks/contention_truth.py [--modes eager,session,backward,compiled,generate]
        [--duties 0,0.25,0.5,0.75] [--crowd 3] [--iters 40] [--json out.json]

The profiled process is pinned to one core with torch on one thread. Per condition, competing
processes are pinned to that same core:

- ``duty D``: one process busy for D of every 10 ms and asleep for the rest (D = 0: none);
- ``N per core``: N busy loops on every core of the machine (``--crowd``; 0 leaves it out).

Every competitor records its own stretches on the CPU: a loop reading ``time.perf_counter_ns``
(CLOCK_MONOTONIC, the clock fxprof's windows are on) notes a gap of more than 20 us as time it
was off the core. On one core, the time a competitor ran inside a window of the profiled thread
is time that thread could not run: the **truth** of each window is the sum, over the competitors
on the profiled core, of their stretches' overlap with it. Nothing of fxprof's meter enters it.

Every :class:`fxprof.measure.timing.contention.ContentionMeter` made during a mode keeps each
measured call's window and the lost time it was charged (``meter.windows``: a recorder's run
read at its first and last mark, or a call the meter wrapped); this script
collects them (it wraps the meter's constructor while a mode runs, and puts it back) and holds
each window's charge against its truth. Per mode, condition and kind of window (fxprof's timed
runs, the model's own runs, a session's runs, generate's steps, and ``window``: the whole timed
window, the runs and what lay between them, which the machine line's LOADED rule reads):

- ``truth`` and ``meter``: the share of the windows' wall time lost, summed over the windows;
- ``|err|``: the difference of the two shares (the issue's target: within 0.1 of the truth);
- ``p90 run``: the 90th percentile over windows of each window's ``|meter - truth| / wall``;
- ``off-CPU``: the calling thread's time off the CPU (wall - thread CPU time), the bound the
  meter never exceeds: on a machine where nothing else runs it equals the truth for one-thread
  runs, and where other processes also ran, the truth lies between the competitors' share and it;
- ``over``: windows charged more than 0.5 ms above their truth.

Other processes on the machine (anything but the competitors) also take the core; their time is
in no competitor's record, so the truth is a lower bound where the machine is not otherwise
quiet: the script prints the load average before and after. It asserts nothing (timings on a
shared machine are not a test); docs/methodology.md ("Busy machines") has its table.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import warnings
from typing import Any, Iterator

import numpy as np
import torch
from torch import nn

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))

import fxprof  # noqa: E402
from fxprof.measure.timing import contention as contention_module  # noqa: E402

#: a competing process: busy for ``duty`` of every ``period`` ms (1: always), recording its own
#: stretches on the CPU (a gap of more than 20 us between two clock reads is time off the core)
COMPETITOR = r"""
import os, signal, sys, time
import numpy as np
duty, period, out, core = float(sys.argv[1]), float(sys.argv[2]), sys.argv[3], int(sys.argv[4])
os.sched_setaffinity(0, {core})
stop = []
signal.signal(signal.SIGTERM, lambda *a: stop.append(1))
now, gap, runs = time.perf_counter_ns, 20_000, []
busy_ns, idle_s = int(duty * period * 1e6), (1 - duty) * period / 1e3
while not stop:
    t0 = start = last = now()
    while True:
        t = now()
        if t - last > gap:
            runs.append((start, last))
            start = t
        last = t
        if t - t0 >= busy_ns or stop:
            break
    runs.append((start, last))
    if idle_s > 0:
        time.sleep(idle_s)
np.save(out, np.array(runs, dtype=np.int64).reshape(-1, 2))
"""


@contextlib.contextmanager
def competitors(specs: list[tuple[float, int]]) -> Iterator[list[str]]:
    """Start one competitor per ``(duty, core)``; yields the files their records go to (written
    when they stop, at the end of the block)."""
    folder = tempfile.mkdtemp(prefix="fxprof-truth-")
    files = [os.path.join(folder, f"c{i}.npy") for i in range(len(specs))]
    procs = [subprocess.Popen([sys.executable, "-c", COMPETITOR, str(duty), "10", path, str(core)])
             for (duty, core), path in zip(specs, files)]
    try:
        time.sleep(0.5 if procs else 0.0)  # every competitor is running
        yield files
    finally:
        for p in procs:
            p.send_signal(signal.SIGTERM)
        for p in procs:
            p.wait(timeout=30)


@contextlib.contextmanager
def collected_meters() -> Iterator[list[Any]]:
    """Every ContentionMeter made in the block, each keeping its windows (its constructor wrapped,
    put back after)."""
    made: list[Any] = []
    cls = contention_module.ContentionMeter
    original = cls.__init__

    def init(self: Any) -> None:
        original(self)
        self.windows = []  # keep every measured call's window
        made.append(self)

    cls.__init__ = init  # type: ignore[method-assign]
    try:
        yield made
    finally:
        cls.__init__ = original  # type: ignore[method-assign]


def truth_ms(windows: np.ndarray, records: list[np.ndarray]) -> np.ndarray:
    """Per window (start, end ns), the ms the competitors ran inside it."""
    out = np.zeros(len(windows))
    for rec in records:
        if not len(rec):
            continue
        order = np.argsort(rec[:, 0])
        rec = rec[order]
        for i, (a, b) in enumerate(windows):
            lo = np.searchsorted(rec[:, 1], a)  # first stretch ending after a
            hi = np.searchsorted(rec[:, 0], b)  # stretches starting before b
            if hi > lo:
                seg = rec[lo:hi]
                out[i] += (np.minimum(seg[:, 1], b) - np.maximum(seg[:, 0], a)).clip(0).sum() / 1e6
    return out


# ---------------------------------------------------------------------- the modes
class Mlp(nn.Module):
    def __init__(self, width: int = 256, depth: int = 8) -> None:
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(width, width) for _ in range(depth))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = torch.relu(layer(x))
        return x


def _labelled(meters: list[Any], label_of: Any) -> dict[str, list[tuple[int, int, float, float]]]:
    out: dict[str, list[tuple[int, int, float, float]]] = {}
    for meter in meters:
        for start, end, lost, tag, off in meter.windows:
            label = "window" if tag == -2 else label_of(meter, tag)  # a whole timed window (start_window)
            out.setdefault(label, []).append((start, end, lost, off))
    return out


def run_eager(iters: int, batch: int = 32) -> dict[str, list]:
    torch.manual_seed(0)
    model, x = Mlp().eval(), torch.randn(batch, 256)
    with collected_meters() as meters:
        fxprof.profile(model, x, warmup=3, iters=iters, peaks=None)
    return _labelled(meters, lambda m, tag: "runs" if tag == -1 else "own runs")


def run_session(iters: int, backward: bool) -> dict[str, list]:
    torch.manual_seed(0)
    model, x = Mlp(), torch.randn(32, 256)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    with collected_meters() as meters:
        with fxprof.session(model, backward=backward,
                            schedule=fxprof.schedule(wait=0, warmup=2, active=iters, repeat=1)) as s:
            for _ in range(iters + 3):
                if backward:
                    model(x).square().mean().backward()
                    opt.step()
                    opt.zero_grad()
                else:
                    with torch.no_grad():
                        model(x)
                s.step()
    return _labelled(meters, lambda m, tag: "runs" if tag == -1 else "own runs")


def run_compiled(iters: int) -> dict[str, list]:
    torch.manual_seed(0)
    model, x = Mlp().eval(), torch.randn(32, 256)
    with collected_meters() as meters:
        fxprof.profile(model, x, warmup=3, iters=iters, peaks=None, compile=True)
    return _labelled(meters, lambda m, tag: "runs" if tag == id(m.lost_ms) else "own runs")


def run_generate(iters: int) -> dict[str, list]:
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                                         num_attention_heads=4, num_key_value_heads=2, vocab_size=2000)).eval()
    model.generation_config.eos_token_id = None
    ids = torch.randint(0, 2000, (1, 16))
    with collected_meters() as meters:
        fxprof.generate(model, ids, max_new_tokens=iters, peaks=None)
    return _labelled(meters, lambda m, tag: "own steps" if tag == 0 else "steps" if tag == -1 else "own runs")


MODES = {"eager": run_eager, "session": lambda n: run_session(n, False), "backward": lambda n: run_session(n, True),
         "compiled": run_compiled, "generate": run_generate}


def row(mode: str, condition: str, label: str, windows: list, records: list[np.ndarray]) -> dict[str, Any]:
    w = np.array([(a, b) for a, b, _, _ in windows], dtype=np.int64)
    lost = np.array([v for _, _, v, _ in windows], dtype=np.float64)
    off = np.array([v for _, _, _, v in windows], dtype=np.float64)
    wall = (w[:, 1] - w[:, 0]) / 1e6
    truth = truth_ms(w, records)
    per_run = np.abs(lost - truth) / np.maximum(wall, 1e-9)
    return {"mode": mode, "condition": condition, "windows": label, "n": len(w),
            "wall_ms": round(float(np.median(wall)), 3),
            "truth": round(float(truth.sum() / wall.sum()), 3), "meter": round(float(lost.sum() / wall.sum()), 3),
            "off_cpu": round(float(off.sum() / wall.sum()), 3),
            "err": round(abs(float((lost.sum() - truth.sum()) / wall.sum())), 3),
            "p90_run": round(float(np.quantile(per_run, 0.9)), 3),
            "over": int((lost > truth + 0.5).sum())}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--duties", default="0,0.25,0.5,0.75")
    parser.add_argument("--crowd", type=int, default=3, help="busy loops per core for the crowded condition (0: none)")
    parser.add_argument("--iters", type=int, default=40)
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    warnings.simplefilter("ignore")
    all_cores = sorted(os.sched_getaffinity(0))
    core = all_cores[-1]
    os.sched_setaffinity(0, {core})
    torch.set_num_threads(1)
    conditions: list[tuple[str, list[tuple[float, int]], int]] = []
    for duty in (float(d) for d in args.duties.split(",") if d):
        conditions.append((f"duty {duty:.0%}", [(duty, core)] if duty > 0 else [], 1 if duty > 0 else 0))
    if args.crowd:
        specs = [(1.0, c) for c in all_cores for _ in range(args.crowd)]
        conditions.append((f"{args.crowd} per core", specs, args.crowd))
    print(f"torch {torch.__version__}, profiled on core {core} of {len(all_cores)}, 1 thread; "
          f"load before {os.getloadavg()[0]:.1f}")
    rows = []
    for mode in args.modes.split(","):
        MODES[mode](3)  # first-call costs (a compile, imports) outside the conditions
        for condition, specs, _ in conditions:
            with competitors(specs) as files:
                found = MODES[mode](args.iters)
            on_core = [np.load(f) for f, (_, c) in zip(files, specs) if c == core]
            for label, windows in found.items():
                rows.append(row(mode, condition, label, windows, on_core))
                r = rows[-1]
                print(f"{mode:9s} {condition:11s} {label:9s} n={r['n']:3d} wall {r['wall_ms']:8.3f} ms  "
                      f"truth {r['truth']:.3f}  meter {r['meter']:.3f}  off-CPU {r['off_cpu']:.3f}  |err| {r['err']:.3f}  "
                      f"p90 run {r['p90_run']:.3f}  over {r['over']}", flush=True)
    print(f"load after {os.getloadavg()[0]:.1f}")
    worst = max(rows, key=lambda r: r["err"])
    print(f"largest |meter - truth| share: {worst['err']:.3f} ({worst['mode']}, {worst['condition']}, {worst['windows']})")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"torch": torch.__version__, "rows": rows}, fh, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
