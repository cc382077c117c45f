"""``fxprof show FILE``: print a saved profile (or per-node CSV table) again, re-sorted."""

from __future__ import annotations

import argparse
from typing import Any

from .common import NODE_COLUMNS, NODE_SORT, bad, check_groups, check_node_view, check_top, echo, table_options, view_options

USAGE = "show FILE"
SUMMARY = "print a saved profile (.json/.npz) or per-node table (.csv) again, re-sorted"

SHOW_EXAMPLES = """\
examples:
  fxprof show run.json                          # the table as it was printed
  fxprof show run.json --top 0 --sort node      # every node, by name
  fxprof show run.json --group-by op --sort nodes
  fxprof show run.json --group-by scope --depth 2 --columns nodes,median_ms,pct
  fxprof show run.json --group-by rank          # one row per torch.distributed rank
  fxprof show fsdp.json --overlap               # FSDP2: each layer's all-gathers, exposed and hidden
  fxprof show run.csv --columns kind,median_ms,output_shape   # a CSV has no run header
"""


def add_parser(command: Any) -> argparse.ArgumentParser:
    s = command("show", "print a saved profile or per-node CSV again",
                "Re-render a profile saved with --json (.json or .npz; or a per-node --csv table) without "
                "running anything.", SHOW_EXAMPLES)
    s.add_argument("file", metavar="FILE", help="a .json or .npz profile or .csv table written by fxprof")
    table_options(s, NODE_SORT, NODE_COLUMNS)
    s.add_argument("--overlap", action="store_true",
                   help="an FSDP2 profile: per layer and phase, its all-gathers' issue, the work ahead of their wait, the "
                        "wait, the time exposed and the share hidden behind other work (fxprof.overlap), after the table")
    return s


def check(args: argparse.Namespace) -> None:
    check_top(args)
    check_groups(args)


def _check_view(args: argparse.Namespace) -> None:
    check_node_view(args, training=True, ranked=True)  # a saved profile may hold either


def run(args: argparse.Namespace) -> int:
    from ..io import read_any
    from ..views.text import render_body, render_summary

    _check_view(args)
    loaded = read_any(args.file)
    if isinstance(loaded, __import__("pandas").DataFrame):
        if args.group_by == "rank" or args.overlap:
            raise bad(f"{'--overlap' if args.overlap else '--group-by rank'} needs a saved profile (.json or .npz); a CSV holds no runs")
        echo(f"fxprof: per-node table from {args.file} (a CSV holds no raw samples and no run header)\n")
        echo(render_body(loaded, view_options(args)))
    else:
        loaded.keep_outliers = args.keep_outliers
        echo(render_summary(loaded, view_options(args)))
        if args.overlap:
            from ..views.overlap import overlap_text

            echo("\n" + overlap_text(loaded))
    return 0
