"""The whole benchmark suite, one command:

    python tests/benchmarks/run.py [--device cpu|cuda] [--json results.json] [--quick]

Runs overhead, accuracy, agreement, stability and verdicts in turn (each prints its table) and writes
all figures to one JSON file. --quick uses one model, one size and few repeats (a smoke run).
"""

from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import accuracy  # noqa: E402
import agreement  # noqa: E402
import overhead  # noqa: E402
import stability  # noqa: E402
import verdicts  # noqa: E402
from common import write_json  # noqa: E402


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--json")
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args(argv)
    d = ["--device", args.device]
    if args.quick:
        parts = {
            "overhead": overhead.main(["--models", "resnet18", "--sizes", "32", "--repeats", "2", "--calls", "1", "--chain", "20", *d]),
            "accuracy": accuracy.main(["--iters", "3", *d]),
            "agreement": agreement.main(["--models", "resnet18", "--size", "32", "--iters", "2", *d]),
            "stability": stability.main(["--models", "resnet18", "--size", "32", "--profiles", "2", "--iters", "2", *d]),
            "verdicts": verdicts.main(["--models", "resnet18", "--size", "32", "--pairs", "1", "--iters", "3", *d]),
        }
    else:
        parts = {
            "overhead": overhead.main(d),
            "accuracy": accuracy.main(d),
            "agreement": agreement.main(d),
            "stability": stability.main(d),
            "verdicts": verdicts.main(d),
        }
    write_json(args.json, parts)
    return parts


if __name__ == "__main__":
    main()
