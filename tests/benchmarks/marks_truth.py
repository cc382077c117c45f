"""fxprof's marks against an independent ground truth (issue 60): kernels whose cost is known,
timed inside a compiled graph by the marks and alone by ``torch.utils.benchmark.Timer``.

    PYTHONPATH=$PWD nice -n 19 python tests/benchmarks/marks_truth.py [--iters 50]

Two kinds of known-cost kernel, one thread:

- ``spin``: a custom op (``fxprof_known::spin``, tests/known_cost.py) that holds the CPU for a set wall time (20, 80,
  300 us) and copies its input; inductor calls it as an extern op. Its cost is its set time
  plus one op dispatch, whatever else runs: the marks must read each call its own time, in
  order (a mark misplaced by one site would swap two rows).
- ``mm``: a bias-free ``nn.Linear`` of 128, 256 and 512 features on as many rows, which inductor
  calls as ``extern_kernels.mm`` (the weight transposed, into a buffer allocated for the call).

Ground truth for each: the op called alone in a loop, as the wrapper calls it, timed by
``torch.utils.benchmark.Timer`` (``blocked_autorange``, its median), with no compile and no fxprof. Printed per kernel: the
marks' median (``fxprof.profile(torch.compile(model))``), the Timer's, their ratio; the marks add
one clock read (``clock_read_ns``) and the Python call of the op from the wrapper. It asserts
nothing; tests/measure/test_wrapper_marks.py checks the spins' order and bounds on any load.
"""

from __future__ import annotations

import argparse
import os
import sys

import torch
import torch.utils.benchmark as benchmark
from torch import nn

import fxprof

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from known_cost import spin  # noqa: E402

SPINS_US = (20, 80, 300)
MM_SIZES = (128, 256, 512)


class Spins(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for us in SPINS_US:
            x = torch.relu(spin(x, us))
        return x


def truth_us(stmt: str, setup_globals: dict) -> float:
    t = benchmark.Timer(stmt=stmt, globals=setup_globals, num_threads=1)
    return t.blocked_autorange(min_run_time=1.0).median * 1e6


def marked_rows(model: nn.Module, x: torch.Tensor, iters: int) -> tuple[list[tuple[str, str, float]], float]:
    with torch.no_grad():
        p = fxprof.profile(torch.compile(model), x, warmup=3, iters=iters, memory=False)
    assert p.meta["timer"] == "marks", p.meta["compiled"].get("kernel_source_reason")
    df = p.df[p.df["role"] == "kernel"]
    return [(name, row["raw_name"], row["median_ms"] * 1e3) for name, row in df.iterrows() if row["op"] == "extern"], \
        float(p.meta["compiled"]["clock_read_ns"])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iters", type=int, default=50)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    print(f"torch {torch.__version__}, 1 thread, load {os.getloadavg()[0]:.1f}")
    rows, read = marked_rows(Spins(), torch.randn(64, 64), args.iters)
    spins = rows
    print(f"clock read {read:.0f} ns")
    print(f"{'kernel':<34} {'marks':>10} {'Timer':>10} {'ratio':>7}")
    x = torch.randn(64, 64)
    for (name, raw, marks), us in zip(spins, SPINS_US):
        truth = truth_us(f"torch.ops.fxprof_known.spin(x, {us})", {"torch": torch, "x": x})
        print(f"{'spin ' + str(us) + ' us (' + name + ')':<34} {marks:>8.2f}us {truth:>8.2f}us {marks / truth:>6.3f}x")
    for n in MM_SIZES:
        model = nn.Sequential(nn.Linear(n, n, bias=False))
        rows, _ = marked_rows(model, torch.randn(n, n), args.iters)
        (name, raw, marks), = rows
        a, w = torch.randn(n, n), torch.randn(n, n)
        # as the wrapper calls it: the weight transposed, into a buffer allocated for this call
        truth = truth_us("torch.mm(a, w.t(), out=torch.empty(n, n))", {"torch": torch, "a": a, "w": w, "n": n})
        print(f"{'mm ' + str(n) + ' (' + raw + ')':<34} {marks:>8.2f}us {truth:>8.2f}us {marks / truth:>6.3f}x")
    print(f"load at the end {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
