"""What showing a saved profile costs: `fxprof show run.json` against importing its own libraries.

Reading a saved profile needs no torch (docs/architecture.md). This prints, for a saved
resnet18 profile, the median wall time and peak resident memory of

- ``show``: ``fxprof show FILE --top 5`` (JSON, then .npz),
- ``imports``: ``import pandas, numpy, jsonschema, tabulate`` (what show cannot do without),
- ``imports+torch``: the same plus ``import torch`` (what show cost when it imported torch),

each in a fresh process, interleaved, ``--repeats`` times. Run:
``python tests/benchmarks/show_cost.py --repeats 5``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile

PEAK = "import resource, sys; print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, file=sys.stderr)"
COMMANDS = {
    "show json": "import sys; from fxprof.cli import main; main(['show', {json!r}, '--top', '5'])",
    "show npz": "import sys; from fxprof.cli import main; main(['show', {npz!r}, '--top', '5'])",
    "imports": "import pandas, numpy, jsonschema, tabulate",
    "imports+torch": "import torch, pandas, numpy, jsonschema, tabulate",
}


def _run(code: str) -> tuple[float, float]:
    import time

    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", code + "\n" + PEAK], capture_output=True, text=True, check=True)
    wall = time.perf_counter() - start
    return wall, int(done.stderr.strip().splitlines()[-1]) / 1024.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    folder = tempfile.mkdtemp(prefix="fxprof-show-")
    paths = {"json": os.path.join(folder, "r18.json"), "npz": os.path.join(folder, "r18.npz")}
    # made in a child: this process must not hold torch, or its children's peak memory (which
    # Linux carries across fork and exec) would start at torch's
    subprocess.run([sys.executable, "-c", (
        "import torch, torchvision, fxprof\n"
        "p = fxprof.profile(torchvision.models.resnet18(weights=None).eval(), torch.randn(1, 3, 64, 64), warmup=2, iters=20)\n"
        f"p.save({paths['json']!r}); p.save({paths['npz']!r})")], check=True)
    results: dict[str, list[tuple[float, float]]] = {name: [] for name in COMMANDS}
    for _ in range(args.repeats):
        for name, code in COMMANDS.items():
            results[name].append(_run(code.format(**paths)))
    print(f"{'what':<14} {'wall s (median)':>16} {'peak MiB (median)':>18}   (load {os.getloadavg()[0]:.1f})")
    for name, rows in results.items():
        print(f"{name:<14} {statistics.median(r[0] for r in rows):>16.2f} {statistics.median(r[1] for r in rows):>18.0f}")


if __name__ == "__main__":
    main()
