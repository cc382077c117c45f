"""``fxprof selfcheck``: fxprof's timers against nodes of known cost on this machine."""

from __future__ import annotations

import argparse
from typing import Any

from .common import bad

USAGE = "selfcheck"
SUMMARY = "check fxprof's timers against nodes of known cost on this machine"

SELFCHECK_EXAMPLES = """\
examples:
  fxprof selfcheck                      # the CPU timer, on this machine
  fxprof selfcheck --device cuda        # every GPU timer: measured vs known, PASS or FAIL
"""


def add_parser(command: Any) -> argparse.ArgumentParser:
    q = command("selfcheck", "check the timers against nodes of known cost on this machine",
                "Run small graphs whose node costs are known (CPU spins; on a GPU calibrated sleep kernels, a "
                "launch-bound chain, a synchronizing node) under every timer that can run here, and print measured "
                "vs known, the error and the bound verdicts, then PASS or FAIL (exit status 0 or 1).",
                SELFCHECK_EXAMPLES)
    q.add_argument("--device", default="cpu", choices=["cpu", "cuda"], help="what to check (default: cpu)")
    q.add_argument("--iters", type=int, default=20, metavar="N", help="timed runs per timer (default: 20)")
    return q


def check(args: argparse.Namespace) -> None:
    if args.iters < 1:
        raise bad(f"bad --iters {args.iters}: must be >= 1")


def run(args: argparse.Namespace) -> int:
    from ..selfcheck import selfcheck

    return 0 if selfcheck(device=args.device, iters=args.iters).passed else 1
