"""Memory per sample: the budget's figure, and the peak over a profile's whole life.

    python tests/benchmarks/memory.py [--iters 2000] [--nodes 20]
    python tests/benchmarks/memory.py --sequence [--nodes 10002] [--iters 300]

Default: profiles a chain of tiny ReLUs under tracemalloc and prints the peak Python-allocated
bytes over the run (recording, then the Profile built from it) divided by the samples kept
(what :data:`fxprof.measure.timing.budget.BYTES_PER_SAMPLE` should be). The tensors are tiny, so the
samples dominate.

``--sequence`` (issue 25): a chain of ``--nodes`` cheap ops (adds and relus on a 1x8 tensor)
profiled for ``--iters`` runs with ``fxprof.profile``, then, in turn, ``profile.df``, ``save``
and ``fxprof.load`` of a .npz file, the default trace, ``fxprof.compare`` of the profile with
its reloaded copy, and last ``save`` and ``load`` of a .json file. After each step the process's peak resident memory
(``getrusage``'s ``ru_maxrss``) is read; the figure is its growth over the peak before the
profile (taken after a 2-run profile of the same model, so imports, tracing and compiling the
plan are already in it), per sample of one profile. Target: at most 150 bytes a sample at
the end.
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import tempfile
import tracemalloc

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import fxprof  # noqa: E402
from fxprof.measure.timing import budget  # noqa: E402


def _peak_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # kB on Linux


def sequence(nodes: int, iters: int) -> list[dict]:
    from common import print_table
    from loop import chain

    torch.set_num_threads(1)
    gm, x = chain(nodes), torch.zeros(1, 8)
    fxprof.profile(gm, x, warmup=1, iters=2, anatomy=False)  # imports, tracing, the plan: before the base
    base = _peak_bytes()
    rows = []
    samples = 0

    def step(name: str) -> None:
        grown = _peak_bytes() - base
        rows.append({"after": name, "peak_growth_mb": grown / 1e6, "bytes_per_sample": grown / samples})

    with tempfile.TemporaryDirectory(prefix="fxprof-memory-") as folder:
        prof = fxprof.profile(gm, x, warmup=1, iters=iters, anatomy=False)
        samples = prof.num_samples
        step("profile")
        prof.df
        step("df")
        npz = os.path.join(folder, "p.npz")
        prof.save(npz)
        step("save .npz")
        loaded = fxprof.load(npz)
        step("load .npz")
        prof.to_chrome_trace(os.path.join(folder, "t.json"))
        step("trace")
        diff = fxprof.compare(prof, loaded)
        assert (diff["ratio"].dropna() == 1.0).all()
        del diff, loaded
        step("compare")
        # the JSON file last: its load holds the parsed document's Python numbers for a moment,
        # and that peak would hide the steps above
        path = os.path.join(folder, "p.json")
        prof.save(path)
        step("save .json")
        _loaded = fxprof.load(path)  # held while the step reads the peak
        step("load .json")
    print(f"{nodes} nodes x {iters} runs = {samples} samples; peak resident memory before the profile: {base / 1e6:.0f} MB")
    print_table("peak resident memory growth, per sample of one profile (target <= 150 B at the end)", rows)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--iters", type=int, default=None)
    parser.add_argument("--nodes", type=int, default=None)
    parser.add_argument("--sequence", action="store_true", help="the peak over profile, df, save, load, trace, compare")
    args = parser.parse_args()
    if args.sequence:
        sequence(args.nodes or 10_002, args.iters or 300)
        return
    iters, nodes = args.iters or 2000, args.nodes or 20
    model = nn.Sequential(*[nn.ReLU() for _ in range(nodes)])
    x = torch.ones(1, 4)
    fxprof.profile(model, x, warmup=1, iters=2, anatomy=False)  # imports and first-call costs
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    prof = fxprof.profile(model, x, warmup=0, iters=iters, anatomy=False)
    samples = prof.num_samples
    prof.df  # the derived table is built on demand: count it too
    peak = tracemalloc.get_traced_memory()[1] - base
    tracemalloc.stop()
    print(f"samples {samples}, peak {peak / 1e6:.1f} MB, {peak / samples:.0f} bytes a sample "
          f"(budget assumes {budget.BYTES_PER_SAMPLE})")


if __name__ == "__main__":
    main()
