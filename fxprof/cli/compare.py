"""``fxprof compare A B``: two saved profiles or tables, node by node or block by block."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from ..vocab import FAIL_ON, GATE_EXIT
from .common import bad, check_columns, check_outputs, check_plotly, check_top, check_verdict_rules, echo, table_options, view_options

USAGE = "compare A B"
SUMMARY = "compare two saved profiles or tables node by node"

COMPARE_EXAMPLES = """\
examples:
  fxprof compare before.json after.json                 # largest change first
  fxprof compare before.json after.json --sort ratio --top 10
  fxprof compare before.json after.json --sort delta_ms --ascending   # biggest savings first
  fxprof compare before.json after.json --min-effect 0.05 --alpha 0.01
  fxprof compare a.csv b.json --columns kind,a_ms,b_ms,ratio --csv diff.csv
  fxprof compare before.json after.json --html diff.html   # the interactive comparison
  fxprof compare baseline.json new.json --fail-on slower --markdown "$GITHUB_STEP_SUMMARY"   # a CI gate

Exit status: 0, or 3 when --fail-on's condition holds (the gate failed), 2 on a usage error.
"""


def add_parser(command: Any) -> argparse.ArgumentParser:
    k = command("compare", "compare two saved profiles or tables node by node",
                "Match the nodes of A and B by name and print each node's median time in both, the ratio B/A, "
                "a p-value (Mann-Whitney U on the two sets of samples, Benjamini-Hochberg over the nodes) and a "
                "verdict (faster, slower, same: significant and at least --min-effect; too few runs: no outcome could be significant), and the change in share, "
                "largest change first, with totals, the whole run's ratio with a 95% bootstrap interval, and "
                "warnings when the two were not measured alike (model, graph, device, timer, dtype, threads, "
                "inputs, versions). Nodes present in only one file are listed. P-values need saved profiles "
                "(.json or .npz).", COMPARE_EXAMPLES)
    k.add_argument("a", metavar="A", help="the baseline: a .json or .npz profile or .csv table")
    k.add_argument("b", metavar="B", help="the other: a .json or .npz profile or .csv table")
    table_options(k, "column to sort by: status, op, kind, scope, phase, a_ms, b_ms, delta_ms, ratio, p_value, "
                     "verdict, a_pct, b_pct, delta_pct, or node (default: the largest absolute change first)",
                  "columns to show, comma-separated (default: status,kind,scope,a_ms,b_ms,delta_ms,ratio,p_value,"
                  "verdict,a_pct,b_pct,delta_pct)", groups=False)
    k.add_argument("--by", choices=("node", "scope"), default="node",
                   help="line the two up node by node (default) or per module path: 'scope' compares an eager "
                        "profile with a compiled one (--compile) block by block, with the speed-up and what fused")
    k.add_argument("--depth", type=int, default=1, metavar="N", help="module depth for --by scope (1: layer1, 2: layer1.0; default: 1)")
    v = k.add_argument_group("verdicts")
    v.add_argument("--alpha", type=float, default=0.05, help="significance level of the adjusted p-values (default: 0.05)")
    v.add_argument("--min-effect", type=float, default=0.10,
                   help="smallest change in a node's median that gets a faster/slower verdict, as a fraction "
                        "(default: 0.10, i.e. 10%%)")
    ko = k.add_argument_group("outputs")
    ko.add_argument("--csv", metavar="PATH", help="write the comparison table as CSV ('-': standard output)")
    ko.add_argument("--html", metavar="PATH",
                    help="write an interactive comparison: the nodes and blocks that moved most, with verdicts, and the "
                         "sortable table; one self-contained file (needs plotly: pip install plotly)")
    ko.add_argument("--markdown", metavar="PATH",
                    help="write the comparison as GitHub-flavoured Markdown, the verdict first, then the table (for a CI "
                         "step summary: --markdown \"$GITHUB_STEP_SUMMARY\"; '-': standard output); appended to a "
                         "file that has text already, as CI steps append to their summary")
    g = k.add_argument_group("gate (for CI)")
    g.add_argument("--fail-on", choices=FAIL_ON, metavar="WHAT",
                   help=f"exit with status {GATE_EXIT} when B is worse than A: 'slower': B's whole run is significantly "
                        "slower (Mann-Whitney U on the run times, p < --alpha) by at least --min-effect; 'node-slower': "
                        "any node's verdict is slower. Needs saved profiles (.json or .npz)")
    return k


def check(args: argparse.Namespace) -> None:
    check_top(args)
    check_verdict_rules(args.alpha, args.min_effect)
    if args.by == "scope" and args.html is not None:
        raise bad("--html draws the node-by-node comparison; --by scope has none: drop one of them")
    if args.by == "scope" and (args.fail_on or args.markdown is not None):
        raise bad("--fail-on and --markdown use the node-by-node comparison's verdicts; --by scope has none: drop --by scope")
    csv_sides = [side for side in (args.a, args.b) if str(side).lower().endswith(".csv")]
    if args.fail_on and csv_sides:
        raise bad(f"--fail-on needs the runs of both sides, and {csv_sides[0]} is a per-node CSV table (no samples); "
                   f"compare profiles saved with --json (.json or .npz)")
    if args.depth < 1:
        raise bad(f"bad --depth {args.depth}: a module depth >= 1")
    if args.html is not None:
        check_plotly("--html")
    check_outputs({"--csv": args.csv, "--html": args.html, "--markdown": args.markdown}, inputs=[args.a, args.b])


def _check_view(args: argparse.Namespace) -> None:
    """--sort and --columns name columns of the comparison (per node, or per block with --by scope)."""
    if args.by == "scope":
        from ..core.blocks import BLOCK_BREAK_COLUMNS, BLOCK_COLUMNS

        allowed = [*BLOCK_COLUMNS, *BLOCK_BREAK_COLUMNS]
        sortable = [*allowed, "scope"]
    else:
        from ..core.compare import COMPARE_COLUMNS

        allowed = list(COMPARE_COLUMNS)
        sortable = [*allowed, "node"]
    check_columns(args, allowed, sortable)


def run(args: argparse.Namespace) -> int:
    from ..core.compare import compare
    from ..io import read_any, write_csv
    from ..views.text import render_compare

    _check_view(args)
    keep = True if args.keep_outliers else None
    a, b = read_any(args.a), read_any(args.b)
    for side in (a, b):
        if args.keep_outliers and hasattr(side, "keep_outliers"):
            side.keep_outliers = True  # the report's run totals, as the table's statistics
    if args.by == "scope":
        from ..views.text import render_blocks

        blocks = compare(a, b, by="scope", depth=args.depth, keep_outliers=keep)
        if args.csv is not None:
            from ..io.atomic import atomic_write

            atomic_write(args.csv, lambda handle: blocks.to_csv(handle, index=True))
        report = sys.stderr if args.csv == "-" else sys.stdout
        echo(render_blocks(blocks, args.a, args.b, view_options(args, report)), report)
        return 0
    diff = compare(a, b, alpha=args.alpha, min_effect=args.min_effect, keep_outliers=keep, warn=False)
    if args.csv is not None:
        write_csv(diff, args.csv)
    if args.html is not None:
        from ..views.report import write_compare_report

        write_compare_report(a, b, args.html, label_a=args.a, label_b=args.b, diff=diff)
    report = sys.stderr if "-" in (args.csv, args.html, args.markdown) else sys.stdout
    echo(render_compare(diff, args.a, args.b, view_options(args, report)), report)
    if args.html is not None:
        echo(f"wrote html: {'standard output' if args.html == '-' else args.html}", report)
    return _gate(args, a, b, diff, keep, report)


def _gate(args: argparse.Namespace, a: Any, b: Any, diff: Any, keep: Any, report: Any) -> int:
    """The whole run's verdict, the --fail-on gate and the --markdown summary; the exit status."""
    if args.fail_on is None and args.markdown is None:
        return 0
    from ..core.gate import busy_sides_words, gate, gate_totals, run_verdict

    run = None
    busy = ""
    if hasattr(a, "kept_totals") and hasattr(b, "kept_totals"):
        run = run_verdict(gate_totals(a, keep), gate_totals(b, keep), alpha=args.alpha, min_effect=args.min_effect)
        busy = busy_sides_words(a, b)
    failed, line = gate(diff, args.fail_on, run, busy) if args.fail_on else (False, None)
    if args.markdown is not None:
        from ..io.atomic import append_text
        from ..views.markdown import render_compare_markdown

        text = render_compare_markdown(diff, args.a, args.b, run, line, top=args.top)
        if args.markdown == "-":
            sys.stdout.write(text)
        else:  # appended: a step summary ($GITHUB_STEP_SUMMARY) keeps what earlier steps wrote
            appended = append_text(args.markdown, text)
            echo(f"{'appended markdown to' if appended else 'wrote markdown'}: {args.markdown}", report)
    if line:
        echo(f"fxprof gate (--fail-on {args.fail_on}): {line}", report)
    return GATE_EXIT if failed else 0
