"""How fast the command line answers: ``fxprof --help`` / ``--version`` against a bare Python.

    python tests/benchmarks/cli_start.py [--repeats 7]

Each command runs as a fresh process (``python -m fxprof ...``), interleaved with
``python -c pass`` so that machine load hits both alike; prints the median wall time of each,
the difference (what fxprof itself adds) and whether torch was imported. Figures only: no
threshold is asserted (the issue's target is under 0.5 s).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

COMMANDS = {
    "python -c pass": [sys.executable, "-c", "pass"],
    "fxprof --help": [sys.executable, "-m", "fxprof", "--help"],
    "fxprof --version": [sys.executable, "-m", "fxprof", "--version"],
    "fxprof profile --help": [sys.executable, "-m", "fxprof", "profile", "--help"],
}
CHECK = ("import sys, contextlib, io\nfrom fxprof.cli import main\n"
         "with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):\n    main(['--help'])\n"
         "print('torch' in sys.modules)")


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args(argv)
    times: dict[str, list[float]] = {k: [] for k in COMMANDS}
    for _ in range(args.repeats):
        for label, cmd in COMMANDS.items():
            t0 = time.perf_counter()
            subprocess.run(cmd, capture_output=True, check=True)
            times[label].append(time.perf_counter() - t0)
    base = statistics.median(times["python -c pass"])
    torch_loaded = subprocess.run([sys.executable, "-c", CHECK], capture_output=True, text=True, check=True).stdout.strip()
    print(f"{'command':<24}{'median s':>10}{'over python':>13}   ({args.repeats} runs each, interleaved)")
    result = {}
    for label, values in times.items():
        med = statistics.median(values)
        result[label] = {"median_s": med, "over_python_s": med - base}
        print(f"{label:<24}{med:>10.3f}{med - base:>13.3f}")
    print(f"torch imported by --help: {torch_loaded}")
    result["torch_imported"] = torch_loaded == "True"
    return result


if __name__ == "__main__":
    main()
