"""``fxprof report FILE -o OUT.html``: a saved profile as one interactive HTML file."""

from __future__ import annotations

import argparse
from typing import Any

from .common import bad, check_outputs, check_plotly, echo, this_rank_writes

USAGE = "report FILE"
SUMMARY = "write a saved profile as one interactive HTML file (opens offline)"

REPORT_EXAMPLES = """\
examples:
  fxprof report run.json -o run.html        # open run.html in a browser: no network needed
  fxprof report run.npz -o run.html --keep-outliers

The report needs plotly: pip install plotly (in a checkout: pip install -e '.[report]'). For a comparison: fxprof compare A B --html OUT.
"""


def add_parser(command: Any) -> argparse.ArgumentParser:
    h = command("report", "write a saved profile as one interactive HTML file",
                "Write a profile saved with --json (.json or .npz) as one self-contained HTML file: the header facts, "
                "the module tree sized by time (click to zoom), time by op kind, range, phase and rank, per-run "
                "distributions of the top nodes, the run totals over time, and every node in a sortable, filterable "
                "table. plotly.js is inside the file: it opens offline, by double-click.", REPORT_EXAMPLES)
    h.add_argument("file", metavar="FILE", help="a .json or .npz profile written by fxprof (--json, Profile.save)")
    h.add_argument("-o", "--output", required=True, metavar="OUT.html", help="the HTML file to write ('-': standard output)")
    h.add_argument("--keep-outliers", action="store_true",
                   help="keep outlier runs (far slower than the rest) in the statistics; by default they are left out")
    return h


def check(args: argparse.Namespace) -> None:
    check_plotly("fxprof report")
    if not this_rank_writes():
        return
    check_outputs({"--output": args.output}, inputs=[args.file])


def run(args: argparse.Namespace) -> int:
    import pandas as pd

    from ..io import read_any
    from ..views.report import write_report

    loaded = read_any(args.file)
    if isinstance(loaded, pd.DataFrame):
        raise bad(f"{args.file} is a per-node CSV table: it holds no runs and no samples, which the report draws. "
                   f"Give a profile saved with --json (.json or .npz)")
    loaded.keep_outliers = args.keep_outliers
    write_report(loaded, args.output)
    if args.output != "-":
        echo(f"wrote html: {args.output}")
    return 0
