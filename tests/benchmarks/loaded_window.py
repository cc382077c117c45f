"""What the machine line says of a small model beside k busy loops, placed three ways: the
window reading of the LOADED rule (fxprof.core.contention.shared_window) at work. It asserts
nothing; docs/performance.md section 13 has its figures.

    PYTHONPATH=$PWD python tests/benchmarks/loaded_window.py [--loops 0,1,2,4] [--iters 300]
        [--where same,other,free] [--json out.json]

Per placement and k, a fresh process profiles a 4-layer MLP at batch 1 (0.05 ms a run on the
2-core development machine) with ``fxprof.profile`` on one thread, beside k busy loops
(``sh -c 'while :; do :; done'``):

- ``same``: the process and the loops pinned to the last CPU;
- ``other``: the process on the last CPU, the loops on the first;
- ``free``: nothing pinned (the scheduler places them).

It prints the timed window's wall time and what the process lost of it to other processes, the
runs charged 5% or more, the median run, the load average the profile read, and the machine
line's verdict (quiet, LOADED, BUSY) with the readings it names.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

CHILD = r"""
import json, os, sys, warnings
import torch
import fxprof
warnings.simplefilter("ignore")
torch.set_num_threads(1)
torch.manual_seed(0)
model = torch.nn.Sequential(*[torch.nn.Linear(256, 256) for _ in range(4)]).eval()
prof = fxprof.profile(model, torch.randn(1, 256), warmup=5, iters=int(sys.argv[1]), peaks=None)
found = prof.meta["contention"]
line = next(x for x in prof.summary(top=0).splitlines() if x.startswith("machine: "))
print(json.dumps({"window_ms": found.get("window_ms"), "window_lost_ms": found.get("window_lost_ms"),
                  "busy": len(prof.busy_runs), "runs": prof.num_runs, "median_ms": float(prof.runs["total_ms"].median()),
                  "load": max(found.get("load") or [0]), "line": line}))
"""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--loops", default="0,1,2,4")
    parser.add_argument("--iters", type=int, default=300)
    parser.add_argument("--where", default="same,other,free")
    parser.add_argument("--json", default=None, help="write every row here")
    args = parser.parse_args(argv)
    rows = []
    cores = sorted(os.sched_getaffinity(0))
    last, first = cores[-1], cores[0]
    env = {**os.environ, "PYTHONPATH": os.path.join(os.path.dirname(__file__), "..", "..")}
    print(f"{len(cores)} CPUs; load before {os.getloadavg()[0]:.1f}")
    print("where  loops  window ms  lost ms  lost   busy runs  median run  load  line")
    for where in args.where.split(","):
        for k in (int(v) for v in args.loops.split(",")):
            pin_loops = {"same": [last], "other": [first], "free": None}[where]
            loops = [subprocess.Popen((["taskset", "-c", str(pin_loops[0])] if pin_loops else [])
                                      + ["sh", "-c", "while :; do :; done"]) for _ in range(k)]
            try:
                time.sleep(0.5 if k else 0)
                cmd = ([] if where == "free" else ["taskset", "-c", str(last)]) + [sys.executable, "-c", CHILD, str(args.iters)]
                out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True).stdout
            finally:
                for p in loops:
                    p.kill()
                for p in loops:
                    p.wait()
            r = json.loads(out.strip().splitlines()[-1])
            rows.append({"where": where, "loops": k, **r})
            if r["window_ms"] is None:  # no per-thread scheduler statistics: the window is not read
                print(f"{where:6s} {k:5d}  the window was not measured (no schedstat): {r['line']}")
                continue
            share = r["window_lost_ms"] / r["window_ms"]
            verdict = r["line"].split(":")[1].strip()
            names = [w for w, said in (("window", "the process waited" in r["line"]),
                                       ("load", "load average reached" in r["line"])) if said]
            print(f"{where:6s} {k:5d}  {r['window_ms']:9.1f}  {r['window_lost_ms']:7.1f}  {share:4.0%}  "
                  f"{r['busy']:4d} of {r['runs']:<4d} {r['median_ms'] * 1000:7.1f} us  {r['load']:4.1f}  "
                  f"{verdict}{' (' + ', '.join(names) + ')' if names else ''}", flush=True)
    print(f"load after {os.getloadavg()[0]:.1f}")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"rows": rows}, fh, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
