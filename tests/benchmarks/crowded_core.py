"""A compiled decode step beside k busy loops, and what each instrument of the machine line reads
over the same window. A study for the LOADED line (fxprof.core.contention.loaded); it asserts
nothing.

    PYTHONPATH=$PWD taskset -c 1 python tests/benchmarks/crowded_core.py [--where same|other] [--runs 1500]

The process runs one thread on the CPU it is given (``taskset -c 1``). ``--where same``: the loops
(``sh -c 'while :; do :; done'``) run on that CPU too; ``other``: on the first other CPU. For each
k in 0, 1, 2, 3, 6, 0 the step (tests/benchmarks/marks/models.py's tiny Llama, compiled) runs
``--runs`` times as fxprof's run loop runs it (each timed call after one untimed call, inside the
contention meter's window), and prints:

- the step's median wall time and CPU time (``time.thread_time_ns``) and its ratio to k = 0;
- the runs the meter charged 5% or more of their time to other processes (waiting for a CPU);
- the kernel's CPU pressure over the window (``/proc/pressure/cpu``, "some": the share of the
  non-idle CPU time during which a task waited for a CPU);
- the CPU time of other processes over the window, in cores (``/proc/stat`` less this process);
- the 1-minute load average at the end of the window.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "marks"))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))

from models import make  # noqa: E402

from fxprof.measure.timing.contention import ContentionMeter  # noqa: E402


def pressure_us() -> int | None:
    try:
        with open("/proc/pressure/cpu") as f:
            return int(f.readline().split("total=")[1])
    except (OSError, IndexError, ValueError):
        return None


def busy_s() -> float:
    with open("/proc/stat") as f:
        v = [int(t) for t in f.readline().split()[1:9]]
    return (sum(v) - v[3] - v[4]) / os.sysconf("SC_CLK_TCK")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--where", choices=("same", "other"), default="same")
    parser.add_argument("--runs", type=int, default=1500)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    mine = sorted(os.sched_getaffinity(0))
    others = sorted(set(range(os.cpu_count() or 1)) - set(mine))
    where = mine if args.where == "same" or not others else others[:1]
    model, inputs = make("llama")
    compiled = torch.compile(model)
    clock, cpu = time.perf_counter_ns, time.thread_time_ns
    meter = ContentionMeter()
    meter.rescan()
    print(f"torch {torch.__version__}; this process on CPU(s) {mine}, the loops on {where}; {args.runs} runs a row")
    print("| loops | step wall us | step CPU us | wall / k=0 | runs charged >= 5% | CPU pressure | others' CPU (cores) | load1 |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    base = None
    with torch.no_grad():
        for _ in range(20):
            compiled(*inputs)
        for k in (0, 1, 2, 3, 6, 0):
            loops = [subprocess.Popen(["taskset", "-c", ",".join(map(str, where)), "sh", "-c", "while :; do :; done"])
                     for _ in range(k)]
            time.sleep(1.0)
            p0, s0, o0, w0 = pressure_us(), busy_s(), sum(os.times()[:2]), time.perf_counter()
            walls: list[float] = []
            cpus: list[float] = []
            lost: list[float] = []
            for _ in range(args.runs):
                def run() -> None:
                    t0, c0 = clock(), cpu()
                    compiled(*inputs)
                    walls.append((clock() - t0) / 1e3)
                    cpus.append((cpu() - c0) / 1e3)
                meter.around(run, into=lost, warm=lambda: compiled(*inputs))
            p1, s1, o1, w1 = pressure_us(), busy_s(), sum(os.times()[:2]), time.perf_counter()
            for p in loops:
                p.kill()
                p.wait()
            wall = w1 - w0
            med = statistics.median(walls)
            base = base or med
            charged = sum(1 for ms, us in zip(lost, walls) if ms * 1e3 >= 0.05 * us)
            share = f"{(p1 - p0) / 1e6 / wall:.2f}" if p0 is not None and p1 is not None else "-"
            print(f"| {k} | {med:.0f} | {statistics.median(cpus):.0f} | {med / base:.2f} | {charged} of {len(walls)} | "
                  f"{share} | {((s1 - s0) - (o1 - o0)) / wall:.2f} | {os.getloadavg()[0]:.1f} |", flush=True)
            time.sleep(2.0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
