"""The CI gate's false-alarm and detection rates: A/A and A/B pairs, each profile its own process.

A pair is two saved profiles taken one after the other in two processes, as a CI job takes its
baseline and its candidate: ``fxprof profile FILE:make --json ...``. An A/A pair profiles the
same model twice (nothing changed: the gate must pass); an A/B pair profiles a stack of 9 equal
blocks, then one of 10 (a real slowdown of about 10%, measured in one process: the gate must fail). Each pair's verdict is read
with ``fxprof.core.gate`` exactly as ``fxprof compare A B --fail-on slower`` reads it, for the
gate of this fxprof and for the rule it replaced (the kept run totals, busy runs in them), so
both rates are printed side by side.

    PYTHONPATH=$PWD python tests/benchmarks/gate_aa.py --pairs 20 --out /tmp/gate
    PYTHONPATH=$PWD python tests/benchmarks/gate_aa.py --pairs 3 --iters 10   # quick

``--interleaved`` measures the other gate instead: ``fxprof ab FILE:make_a FILE:make_b --fail-on
slower``, A and B timed interleaved in one process (each pair is then one process for A/A and one
for A/B; the verdict is the command's exit status, the median round's ratio read from its
``--csv``, each call less what it lost to other processes).

    PYTHONPATH=$PWD python tests/benchmarks/gate_aa.py --interleaved --pairs 20 --iters 30

Prints one line per pair and the rates; docs/ci.md holds the figures. The machine's load is
printed with them: run it quiet and beside other work (``--busy`` starts a busy loop on each
core the profiles may use, for the whole benchmark).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
from torch import nn

WIDTH = 1024
BATCH = 64


class Blocks(nn.Module):
    """``n`` equal Linear+ReLU blocks: 10 blocks cost about 10% more than 9 (measured in one process: the benchmark prints it)."""

    def __init__(self, n: int):
        super().__init__()
        self.blocks = nn.Sequential(*[nn.Sequential(nn.Linear(WIDTH, WIDTH), nn.ReLU()) for _ in range(n)])

    def forward(self, x):
        return self.blocks(x)


def make_a() -> nn.Module:
    torch.manual_seed(0)
    return Blocks(9).eval()


def make_b() -> nn.Module:
    torch.manual_seed(0)
    return Blocks(10).eval()


def _profile(factory: str, path: Path, iters: int, threads: int) -> None:
    here = Path(__file__).resolve()
    cmd = [sys.executable, "-m", "fxprof", "profile", f"{here}:{factory}", "--input", f"{BATCH}x{WIDTH}",
           "--iters", str(iters), "--threads", str(threads), "--peaks", "off", "--json", str(path), "--quiet"]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0 or not path.exists():
        raise SystemExit(f"profiling failed: {' '.join(cmd)}\n{done.stderr[-2000:]}")


def _interleaved(factory_b: str, csv: Path, iters: int, threads: int) -> tuple[bool, float]:
    """``fxprof ab FILE:make_a FILE:factory_b --fail-on slower`` in a process of its own: (the
    gate failed, b/a median run ratio)."""
    import statistics

    here = Path(__file__).resolve()
    cmd = [sys.executable, "-m", "fxprof", "ab", f"{here}:make_a", f"{here}:{factory_b}", "--input", f"{BATCH}x{WIDTH}",
           "--iters", str(iters), "--threads", str(threads), "--fail-on", "slower", "--csv", str(csv), "--quiet"]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode not in (0, 3) or not csv.exists():
        raise SystemExit(f"fxprof ab failed: {' '.join(cmd)}\n{done.stderr[-2000:]}")
    lines = csv.read_text().splitlines()
    rows = [dict(zip(lines[0].split(","), map(float, line.split(",")))) for line in lines[1:]]
    # each call less what it lost to other processes, as the verdict holds them (the median round's ratio)
    ratios = [(r["b_ms"] - r.get("b_lost_ms", 0.0)) / (r["a_ms"] - r.get("a_lost_ms", 0.0)) for r in rows]
    return done.returncode == 3, statistics.median(ratios)


def _verdicts(a_path: Path, b_path: Path) -> dict[str, tuple[bool, float]]:
    """Per rule, (the gate failed, b/a median run ratio)."""
    import fxprof
    from fxprof.core.gate import busy_sides_words, gate, gate_totals, run_verdict

    a, b = fxprof.load(a_path), fxprof.load(b_path)
    diff = fxprof.compare(a, b, warn=False)
    out = {}
    for rule, (ta, tb) in {
        "now": (gate_totals(a), gate_totals(b)),
        "before (run totals without outliers, busy runs in them)": (_old_rule(a), _old_rule(b)),
    }.items():
        run = run_verdict(ta, tb)
        failed, _ = gate(diff, "slower", run, busy_sides_words(a, b) if rule == "now" else "")
        out[rule] = (failed, run.ratio)
    return out


def _old_rule(prof) -> list[float]:
    """The totals the gate compared before busy runs were measured: every run but the outliers."""
    outliers = set(prof.outlier_runs)
    return [t for t, r in zip(prof.total_ms, prof.runs["run"]) if int(r) not in outliers]


def _busy_loops(cores: list[int]) -> list[subprocess.Popen]:
    code = "import os, sys\nos.sched_setaffinity(0, {int(sys.argv[1])})\nwhile True: pass"
    return [subprocess.Popen([sys.executable, "-c", code, str(c)]) for c in cores]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", type=int, default=20)
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", default=None, help="folder for the profiles (default: a temporary one)")
    parser.add_argument("--interleaved", action="store_true",
                        help="measure `fxprof ab` (A and B interleaved in one process) instead of two profiles compared")
    parser.add_argument("--busy", action="store_true", help="a busy loop on every usable core during the benchmark")
    parser.add_argument("--evaluate", action="store_true",
                        help="profile nothing: read the verdicts of the profiles already in --out (a0.json, a20.json, b0.json...)")
    args = parser.parse_args()
    out = Path(args.out or tempfile.mkdtemp(prefix="gate_aa_"))
    out.mkdir(parents=True, exist_ok=True)
    loops = _busy_loops(sorted(os.sched_getaffinity(0))) if args.busy else []
    started = time.time()
    counts: dict[str, dict[str, int]] = {}
    rows = []
    try:
        print(f"load {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores at start; busy loops: {len(loops)}", flush=True)
        for i in range(args.pairs):
            paths = {k: out / f"{k}{i}.json" for k in ("a", "a2", "b")}
            if args.interleaved:
                aa = {"ab (interleaved)": _interleaved("make_a", out / f"aa{i}.csv", args.iters, args.threads)}
                ab = {"ab (interleaved)": _interleaved("make_b", out / f"ab{i}.csv", args.iters, args.threads)}
            elif args.evaluate:
                if not all(p.exists() for p in paths.values()):
                    break
            else:
                _profile("make_a", paths["a"], args.iters, args.threads)
                _profile("make_a", paths["a2"], args.iters, args.threads)
                _profile("make_b", paths["b"], args.iters, args.threads)
            if not args.interleaved:
                aa, ab = _verdicts(paths["a"], paths["a2"]), _verdicts(paths["a"], paths["b"])
            for rule in aa:
                c = counts.setdefault(rule, {"false_alarms": 0, "detected": 0})
                c["false_alarms"] += aa[rule][0]
                c["detected"] += ab[rule][0]
            rows.append({"pair": i, "aa": aa, "ab": ab, "load": os.getloadavg()[0]})
            print(f"pair {i}: A/A " + ", ".join(f"{r.split()[0]} {'FAIL' if f else 'pass'} {x:.3f}" for r, (f, x) in aa.items())
                  + " | A/B " + ", ".join(f"{r.split()[0]} {'FAIL' if f else 'pass'} {x:.3f}" for r, (f, x) in ab.items())
                  + f" | load {os.getloadavg()[0]:.1f}", flush=True)
    finally:
        for p in loops:
            p.kill()
    print(f"\n{len(rows)} pairs, {args.iters} runs a profile, {args.threads} thread(s), {time.time() - started:.0f} s; "
          f"load {os.getloadavg()[0]:.1f} at the end")
    for rule, c in counts.items():
        print(f"{rule}: false alarms {c['false_alarms']} of {len(rows)} A/A pairs; 10% slowdown detected in "
              f"{c['detected']} of {len(rows)} A/B pairs")
    (out / "gate_aa.json").write_text(json.dumps({"counts": counts, "rows": rows}, indent=1, default=str))


if __name__ == "__main__":
    main()
