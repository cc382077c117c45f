"""The ``fxprof`` command line: profile, show, compare, report, selfcheck.

Importing this module imports no torch: ``fxprof --help`` and ``--version`` answer at once,
and ``fxprof profile`` shows its progress bar before torch is loaded. Every option and every
combination of options is checked before anything runs (:func:`check_args`).
"""

from __future__ import annotations

import argparse
import contextlib
import difflib
import math
import os
import re
import signal
import sys
import threading
import traceback
from typing import TYPE_CHECKING, Any, Iterator, Sequence

if TYPE_CHECKING:
    from ..views.options import ViewOptions

from ..vocab import CAPTURES, COMPILE_MODES, CUDA_TIMERS, GROUP_KEYS, MODES, OPTIMIZERS, TIMER_NAMES, __version__

DESCRIPTION = """\
Time every node of a PyTorch model's torch.fx graph, on the CPU or the GPU.

commands:
  profile MODEL   trace MODEL, warm it up, time every node over --iters runs, print hotspots
  show FILE       print a saved profile (.json/.npz) or per-node table (.csv) again, re-sorted
  compare A B     compare two saved profiles or tables node by node
  report FILE     write a saved profile as one interactive HTML file (opens offline)
  selfcheck       check fxprof's timers against nodes of known cost on this machine
  peaks           measure (or show the cached) compute rate and memory bandwidth of this machine

Run `fxprof COMMAND --help` for a command's options and examples.
"""

TOP_EXAMPLES = """\
examples:
  fxprof profile resnet18 --input 1x3x64x64 --json before.json
  fxprof show before.json --group-by scope --depth 2
  fxprof compare before.json after.json --sort ratio
  fxprof report before.json -o before.html
  fxprof selfcheck
"""

PROFILE_EXAMPLES = """\
examples:
  fxprof profile resnet18                                # CPU, 1x3x224x224, top 20 nodes
  fxprof profile resnet50 --input 32x3x224x224 --device cuda --dtype float16
  fxprof profile mypkg.models:build --input ids=2x128:int64 --input mask=2x128:bool
  fxprof profile model.py:make_model --leaf-module model.Router --concrete use_cache=False
  fxprof profile mypkg.nets:encoder --trace-into torch.nn.TransformerEncoderLayer
  fxprof profile resnet18 --sort median_ms --ascending --top 0    # every node, fastest first
  fxprof profile resnet18 --sort headroom_ms             # most time above the roofline first
  fxprof profile resnet18 --peaks 0.1,20 --sort headroom_ms       # your roofs: 0.1 TFLOP/s, 20 GB/s
  fxprof profile resnet18 --group-by scope --depth 2 --sort flops # time per block
  fxprof profile resnet18 --columns kind,median_ms,pct,flops,output_shape
  fxprof profile resnet18 --trace r18.trace.json --trace-runs last:3   # open in ui.perfetto.dev
  fxprof profile resnet18 --json run.npz --csv -          # compact profile; the table on stdout
  fxprof profile resnet18 --input 1x3x64x64 --html r18.html   # the interactive report
  fxprof profile resnet18 --backward --optimizer sgd --input 8x3x64x64 --group-by phase
  fxprof profile raft_small --input 1x3x128x128 --input 1x3x128x128   # falls back to dynamo
  torchrun --nproc-per-node 2 -m fxprof profile resnet18 --input 1x3x64x64 --json run.json
                                                         # every rank, gathered on rank 0

MODEL is a torchvision model name (built with weights=None: nothing is downloaded), or
'package.module:factory' (the current folder is importable first) or 'path/to/file.py:factory'
(loaded under a private name; its folder is importable after installed modules, so a file named
profile.py hides nothing) whose factory returns an nn.Module or fx.GraphModule. The file sees
sys.argv as [its path]; a sys.exit in it is an error.
"""

SHOW_EXAMPLES = """\
examples:
  fxprof show run.json                          # the table as it was printed
  fxprof show run.json --top 0 --sort node      # every node, by name
  fxprof show run.json --group-by op --sort nodes
  fxprof show run.json --group-by scope --depth 2 --columns nodes,median_ms,pct
  fxprof show run.json --group-by rank          # one row per torch.distributed rank
  fxprof show run.csv --columns kind,median_ms,output_shape   # a CSV has no run header
"""

COMPARE_EXAMPLES = """\
examples:
  fxprof compare before.json after.json                 # largest change first
  fxprof compare before.json after.json --sort ratio --top 10
  fxprof compare before.json after.json --sort delta_ms --ascending   # biggest savings first
  fxprof compare before.json after.json --min-effect 0.05 --alpha 0.01
  fxprof compare a.csv b.json --columns kind,a_ms,b_ms,ratio --csv diff.csv
  fxprof compare before.json after.json --html diff.html   # the interactive comparison
"""

REPORT_EXAMPLES = """\
examples:
  fxprof report run.json -o run.html        # open run.html in a browser: no network needed
  fxprof report run.npz -o run.html --keep-outliers

The report needs plotly: pip install plotly (in a checkout: pip install -e '.[report]'). For a comparison: fxprof compare A B --html OUT.
"""

SELFCHECK_EXAMPLES = """\
examples:
  fxprof selfcheck                      # the CPU timer, on this machine
  fxprof selfcheck --device cuda        # every GPU timer: measured vs known, PASS or FAIL
"""

PEAKS_EXAMPLES = """\
examples:
  fxprof peaks                          # this CPU, float32, torch's thread count (cached after the first time)
  fxprof peaks --threads 1 --refresh    # measure again, one thread
  fxprof peaks --device cuda --dtype bfloat16
"""

#: a roll-up's columns beyond ``GROUP_COLUMNS`` in a training step (see fxprof.core.rollup)
PHASE_COLUMNS = ("forward_ms", "loss_ms", "backward_ms", "optimizer_ms", "bwd_fwd_ratio")


class _Parser(argparse.ArgumentParser):
    """argparse, with its errors as one line (as every fxprof error is), not a usage block,
    and "did you mean" for an unknown command or choice (difflib)."""

    def error(self, message: str) -> Any:  # type: ignore[override]
        found = re.search(r"invalid choice: '([^']*)' \(choose from (.*)\)", message)
        if found:
            choices = re.findall(r"'([^']*)'", found.group(2)) or [c.strip() for c in found.group(2).split(",")]
            message += _did_you_mean(found.group(1), choices)
        self.exit(2, _printable(f"fxprof: error: {message}; see '{self.prog} --help'") + "\n")


def _did_you_mean(word: str, choices: Sequence[str]) -> str:
    close = difflib.get_close_matches(word, list(choices), n=3, cutoff=0.5)
    return f" (did you mean {' or '.join(repr(c) for c in close)}?)" if close else ""


def build_parser() -> argparse.ArgumentParser:
    """The whole command line, in one place. Global options (``--debug``, ``--quiet``,
    ``--version``) are accepted before or after the command."""
    common = argparse.ArgumentParser(add_help=False)
    glob = common.add_argument_group("global options (before or after the command)")
    glob.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help="show the full traceback on errors")
    glob.add_argument("--quiet", action="store_true", default=argparse.SUPPRESS, help="no progress bar")
    glob.add_argument("--version", action="version", version=f"fxprof {__version__}")

    parser = _Parser(prog="fxprof", description=DESCRIPTION, epilog=TOP_EXAMPLES, parents=[common],
                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    def command(name: str, help: str, description: str, epilog: str) -> argparse.ArgumentParser:
        return sub.add_parser(name, help=help, description=description, epilog=epilog, parents=[common],
                              formatter_class=argparse.RawDescriptionHelpFormatter)

    def table_options(p: argparse.ArgumentParser, sort_help: str, columns_help: str, groups: bool = True) -> None:
        t = p.add_argument_group("the table")
        t.add_argument("--sort", metavar="COLUMN", help=sort_help)
        t.add_argument("--ascending", action="store_true", help="sort smallest first (default: largest first)")
        t.add_argument("--top", type=int, default=20, metavar="N", help="rows to show; 0 shows all (default: 20)")
        t.add_argument("--columns", metavar="A,B,C", help=columns_help)
        if groups:
            t.add_argument("--group-by", choices=GROUP_KEYS, metavar="KEY",
                           help="roll node times up by KEY: op, module_type, range (record_function), scope (module "
                                "path), graph, phase (training step), comm (collectives vs computation), rank "
                                "(one row per torch.distributed rank)")
            t.add_argument("--depth", type=int, metavar="N", help="module depth for --group-by scope (1: layer1, 2: layer1.0; default: 1)")
            t.add_argument("--rank-bookkeeping", action="store_true",
                           help="rank the enter/exit nodes of record_function ranges with the other nodes; by default a "
                                "sorted table leaves them out and states their count and share on a line of its own")
        t.add_argument("--keep-outliers", action="store_true",
                       help="keep outlier runs (far slower than the rest) in the statistics; by default they are left "
                            "out and the header says which")

    node_sort = ("column to sort by: any column of the table, or node; with --group-by, a roll-up column "
                 "(nodes, mean_ms, median_ms, pct, flops, flops_pct) or the key (default: pct)")
    node_columns = ("columns to show, comma-separated: any column of profile.df (kind, scope, median_ms, pct, "
                    "flops, output_shape...); with --group-by, roll-up columns")

    p = command("profile", "profile a model and print its hotspot table",
                "Trace MODEL, run --warmup untimed runs, then time every node of --iters runs and print the "
                "nodes that take the most time.", PROFILE_EXAMPLES)
    p.add_argument("model", metavar="MODEL", help="torchvision name (resnet18), package.module:factory, or path/to/file.py:factory")
    m = p.add_argument_group("model and inputs")
    m.add_argument("--input", action="append", metavar="[NAME=]SHAPE[:DTYPE]",
                   help="an input: 1x3x224x224, 2x128:int64, or a keyword input ids=2x128:int64; repeat for several "
                        "(default: 1x3x224x224)")
    m.add_argument("--no-input", action="store_true",
                   help="call the model with no inputs at all (a model whose forward takes none)")
    m.add_argument("--device", default="cpu", help="device for the model and inputs: cpu, cuda, cuda:1 (default: cpu)")
    m.add_argument("--dtype", default="float32", help="dtype of the model and of float inputs: float32, float16, bfloat16, float64 (default: float32)")
    c = p.add_argument_group("capture (how the graph is made)")
    c.add_argument("--capture", default="auto", choices=CAPTURES,
                   help="auto tries symbolic tracing, then dynamo (default: auto)")
    c.add_argument("--leaf-module", action="append", metavar="CLASS|PATH",
                   help="keep a module as one node: a class (mypkg.layers:Router, mypkg.layers.Router) or a "
                        "submodule path (encoder.layers.0); repeat for several (symbolic tracing)")
    c.add_argument("--trace-into", action="append", metavar="CLASS|PATH|all",
                   help="trace inside a torch.nn module instead of keeping it as one node "
                        "(torch.nn.TransformerEncoderLayer, a submodule path, or all); repeat for several")
    c.add_argument("--concrete", action="append", metavar="NAME=VALUE",
                   help="fix a forward argument for tracing (concrete_args), a Python literal: use_cache=False, "
                        "mode='fast', n=3; repeat for several")
    c.add_argument("--compile", action="store_true",
                   help="profile the compiled program: torch.compile (inductor) the model and time every kernel it "
                        "runs, each charged to the layers it computes (see docs/compiled.md)")
    c.add_argument("--compile-mode", choices=COMPILE_MODES, metavar="MODE",
                   help=f"torch.compile mode for --compile: {', '.join(COMPILE_MODES)} (default: default)")
    r = p.add_argument_group("running")
    r.add_argument("--warmup", type=int, default=5, metavar="N", help="untimed warm-up runs (default: 5)")
    r.add_argument("--warmup-ms", type=float, default=None, metavar="MS",
                   help="also warm up for at least this many ms (default: 200 on CUDA, 0 on the CPU)")
    r.add_argument("--iters", type=int, default=20, metavar="N", help="timed runs (default: 20)")
    r.add_argument("--timer", default="auto", choices=TIMER_NAMES,
                   help="auto: cuda events on a GPU, else the CPU clock; kernel: also CUDA kernel time per node (default: auto)")
    r.add_argument("--mode", default="timed", choices=MODES,
                   help="timed: whole runs; isolated: each node re-run --iters times on its real inputs (default: timed)")
    r.add_argument("--backward", action="store_true",
                   help="profile training steps: forward, loss (sum of the outputs) and backward, every node of both "
                        "graphs timed; the model runs in train mode (see docs/training.md)")
    r.add_argument("--optimizer", choices=OPTIMIZERS,
                   help="with --backward, also zero_grad and step of this optimizer over the model's parameters "
                        "(the model is restored afterwards)")
    r.add_argument("--threads", type=int, default=None, metavar="N", help="torch CPU threads (default: torch's choice); recorded in the profile")
    r.add_argument("--peaks", default=None, metavar="TFLOPS,GBPS|auto|quick|off",
                   help="the roofs of the roofline columns (roof_ms, roof_pct, headroom_ms, limit): your compute rate "
                        "in TFLOP/s and bandwidth in GB/s (e.g. a datasheet's: 0.1,20; optionally ,US for the per-op "
                        "floor), or auto: measured on this machine once, then cached (see 'fxprof peaks'); quick: "
                        "small measurement; off: none (default: auto, or the FXPROF_PEAKS environment variable)")
    table_options(p, node_sort, node_columns)
    o = p.add_argument_group("outputs (checked before anything runs; '-' is standard output)")
    o.add_argument("--csv", metavar="PATH", help="write the per-node table as CSV (full precision, ms)")
    o.add_argument("--json", metavar="PATH",
                   help="save the whole profile (every sample) for show/compare: PATH ending in .json for JSON, "
                        "in .npz for compact binary columns")
    o.add_argument("--trace", metavar="PATH", help="write a Chrome trace, on torch.profiler's clock (open in ui.perfetto.dev)")
    o.add_argument("--html", metavar="PATH",
                   help="write an interactive report: module tree, distributions, run totals, the sortable node "
                        "table; one self-contained file (needs plotly: pip install plotly)")
    o.add_argument("--trace-runs", metavar="RUNS",
                   help="runs in the trace: representative (the fastest, median and slowest), all, median, 3, 0-4, "
                        "0,5,9, first:N or last:N (default: representative)")
    p.set_defaults(handler=_cmd_profile)

    s = command("show", "print a saved profile or per-node CSV again",
                "Re-render a profile saved with --json (.json or .npz; or a per-node --csv table) without "
                "running anything.", SHOW_EXAMPLES)
    s.add_argument("file", metavar="FILE", help="a .json or .npz profile or .csv table written by fxprof")
    table_options(s, node_sort, node_columns)
    s.set_defaults(handler=_cmd_show)

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
    k.set_defaults(handler=_cmd_compare)

    h = command("report", "write a saved profile as one interactive HTML file",
                "Write a profile saved with --json (.json or .npz) as one self-contained HTML file: the header facts, "
                "the module tree sized by time (click to zoom), time by op kind, range, phase and rank, per-run "
                "distributions of the top nodes, the run totals over time, and every node in a sortable, filterable "
                "table. plotly.js is inside the file: it opens offline, by double-click.", REPORT_EXAMPLES)
    h.add_argument("file", metavar="FILE", help="a .json or .npz profile written by fxprof (--json, Profile.save)")
    h.add_argument("-o", "--output", required=True, metavar="OUT.html", help="the HTML file to write ('-': standard output)")
    h.add_argument("--keep-outliers", action="store_true",
                   help="keep outlier runs (far slower than the rest) in the statistics; by default they are left out")
    h.set_defaults(handler=_cmd_report)

    q = command("selfcheck", "check the timers against nodes of known cost on this machine",
                "Run small graphs whose node costs are known (CPU spins; on a GPU calibrated sleep kernels, a "
                "launch-bound chain, a synchronizing node) under every timer that can run here, and print measured "
                "vs known, the error and the bound verdicts, then PASS or FAIL (exit status 0 or 1).",
                SELFCHECK_EXAMPLES)
    q.add_argument("--device", default="cpu", choices=["cpu", "cuda"], help="what to check (default: cpu)")
    q.add_argument("--iters", type=int, default=20, metavar="N", help="timed runs per timer (default: 20)")
    q.set_defaults(handler=_cmd_selfcheck)

    e = command("peaks", "measure this machine's compute rate and memory bandwidth (the roofline's roofs)",
                "Measure (once; then read from the cache) the best rate of several large GEMMs and convolutions in --dtype, the best "
                "bandwidth of copy, add and triad over buffers far larger than the caches (bytes read plus written), "
                "and the least time of one op, with --threads threads. fxprof profile uses them for the roofline "
                "columns (roof_ms, roof_pct, headroom_ms, limit).", PEAKS_EXAMPLES)
    e.add_argument("--device", default="cpu", help="cpu, cuda, cuda:1 (default: cpu)")
    e.add_argument("--dtype", default="float32", help="the compute kernels' dtype: float32, float16, bfloat16, float64 (default: float32)")
    e.add_argument("--threads", type=int, default=None, metavar="N", help="CPU threads (default: torch's choice, as fxprof profile)")
    e.add_argument("--quick", action="store_true", help="small kernels and buffers: a rough figure in about a second")
    e.add_argument("--refresh", action="store_true",
                   help="measure again even if cached; the cache keeps the better of the new and earlier figures "
                        "(a busy machine only lowers a roof)")
    e.set_defaults(handler=_cmd_peaks)
    # options that take a value: their value may start with '-' (--input -1x3 is a bad shape)
    actions = [a for sp in (p, s, k, h, q, e) for a in sp._actions if a.option_strings]
    parser.value_options = {o for a in actions if a.nargs is None for o in a.option_strings}  # type: ignore[attr-defined]
    parser.all_options = {o for a in actions for o in a.option_strings}  # type: ignore[attr-defined]
    return parser


def _attach_dash_values(argv: list[str], options: set[str], known: set[str] = frozenset()) -> list[str]:
    """``--input -1x3`` -> ``--input=-1x3``: argparse takes a value that starts with '-' for an
    option and says "expected one argument"; the value's own check words it better. A value
    that is itself an option (``known``) stays an option."""
    out: list[str] = []
    i = 0
    while i < len(argv):
        token = argv[i]
        if token == "--":
            return out + argv[i:]
        nxt = argv[i + 1] if i + 1 < len(argv) else None
        if token in options and nxt is not None and nxt.startswith("-") and nxt != "-" and nxt.split("=")[0] not in options | set(known) | {"-h", "--help"}:
            out.append(f"{token}={nxt}")
            i += 2
            continue
        out.append(token)
        i += 1
    return out


# ------------------------------------------------------------------------ checks
def _columns(text: str | None) -> list[str] | None:
    return [c.strip() for c in text.split(",") if c.strip()] if text else None


def _bad(message: str) -> Exception:
    from ..errors import FxprofError  # light: errors.py imports no torch

    return FxprofError(message)


def check_args(args: argparse.Namespace) -> None:
    """Every option and combination that can be judged without importing torch; raises
    FxprofError naming the option and what to do. Column names are checked by
    :func:`_check_view` as each command starts, still before anything runs."""
    command = args.command
    if command == "peaks":
        if args.threads is not None and args.threads < 1:
            raise _bad(f"bad --threads {args.threads}: must be >= 1")
        return
    if command == "selfcheck":
        if args.iters < 1:
            raise _bad(f"bad --iters {args.iters}: must be >= 1")
        return
    if command == "report":
        _check_plotly("fxprof report")
        if not _this_rank_writes():
            return
        _check_outputs({"--output": args.output}, inputs=[args.file])
        return
    if args.top < 0:
        raise _bad(f"bad --top {args.top}: must be >= 0 (0 shows all)")
    if command in ("profile", "show"):
        if args.depth is not None:
            if args.depth < 1:
                raise _bad(f"bad --depth {args.depth}: must be >= 1")
            if args.group_by != "scope":
                raise _bad("--depth applies to --group-by scope only; add --group-by scope or drop --depth")
        if args.group_by == "rank" and (args.sort or args.columns):
            raise _bad("--group-by rank shows a fixed table (one row per rank); drop --sort and --columns")
    if command == "profile":
        if args.warmup_ms is not None and not math.isfinite(args.warmup_ms):  # inf warmed up forever; nan failed later
            raise _bad(f"bad --warmup-ms {args.warmup_ms}: a number of milliseconds >= 0, e.g. 200")
        for label, value, minimum in (("--warmup", args.warmup, 0), ("--iters", args.iters, 1), ("--threads", args.threads, 1),
                                      ("--warmup-ms", args.warmup_ms, 0)):
            if value is not None and value < minimum:
                raise _bad(f"bad {label} {value}: must be >= {minimum}")
        if args.threads is not None and args.threads > _max_threads():
            raise _bad(f"bad --threads {args.threads}: at most {_max_threads()} on this machine ({os.cpu_count()} cores; "
                       f"torch starts a thread each)")
        if args.no_input and args.input:
            raise _bad("--no-input calls the model with no inputs; drop it or the --input options")
        both = sorted(set(args.leaf_module or []) & set(args.trace_into or []))
        if both:
            raise _bad(f"{', '.join(map(repr, both))} given to both --leaf-module (keep it whole) and --trace-into "
                       f"(trace inside it); give each module to one of them")
        if args.mode == "isolated":
            if args.trace:
                raise _bad("--mode isolated has no timeline to trace (each node is re-run on its own); drop --trace or use --mode timed")
            if args.timer == "kernel":
                raise _bad("--timer kernel works with --mode timed only; use --timer cuda for --mode isolated")
            if args.backward:
                raise _bad("--backward works with --mode timed only (whole training steps); drop --mode isolated")
        if args.optimizer and not args.backward:
            raise _bad("--optimizer applies to training steps: add --backward")
        if args.peaks is not None and args.peaks.strip().lower() not in ("auto", "quick", "off"):
            from ..core.roofline import parse_peaks

            try:
                parse_peaks(args.peaks)
            except ValueError as exc:
                raise _bad(f"bad --peaks {args.peaks!r}: {str(exc).removeprefix(f'bad peaks {args.peaks!r}: ')}") from exc
        if args.trace_runs and not args.trace:
            raise _bad("--trace-runs chooses the runs of --trace; add --trace PATH")
        if args.trace_runs:
            from ..core.runs import parse_runs

            try:  # checked against --iters before a range is expanded (0-99999999999 was a MemoryError)
                parse_runs(args.trace_runs, limit=args.iters)
            except ValueError as exc:
                hint = " (each rank's own run numbers under torchrun)" if "past the last run" in str(exc) else ""
                raise _bad(f"bad --trace-runs {args.trace_runs!r}: {exc}; --iters {args.iters}{hint}") from exc
        symbolic_only = [o for o, v in (("--leaf-module", args.leaf_module), ("--trace-into", args.trace_into),
                                        ("--concrete", args.concrete)) if v]
        if symbolic_only and args.capture in ("dynamo", "export"):
            raise _bad(f"{', '.join(symbolic_only)} apply to symbolic tracing; --capture {args.capture} traces inside "
                       f"every module by itself. Use --capture symbolic (or auto), or drop them")
        if symbolic_only and args.backward:
            raise _bad(f"{', '.join(symbolic_only)} apply to symbolic tracing; --backward takes its graphs from "
                       f"AOTAutograd, which traces inside every module by itself. Drop them")
        if args.backward and args.capture in ("symbolic", "export"):
            raise _bad(f"--backward takes the forward and backward graphs from AOTAutograd; --capture {args.capture} "
                       f"cannot give a backward graph. Use --capture auto")
        if args.compile_mode and not args.compile:
            raise _bad("--compile-mode chooses how --compile compiles: add --compile")
        if args.compile:
            given = [o for o, on in (("--capture", args.capture != "auto"), ("--timer", args.timer != "auto"),
                                     ("--mode", args.mode != "timed"), ("--backward", args.backward),
                                     ("--warmup-ms", args.warmup_ms is not None), ("--leaf-module", args.leaf_module),
                                     ("--trace-into", args.trace_into), ("--concrete", args.concrete)) if on]
            if given:
                raise _bad(f"{', '.join(given)} cannot be used with --compile (the compiled program's kernels are timed "
                           f"by torch.profiler in whole runs); drop them, or drop --compile to profile the eager graph")
        device = args.device.lower()
        if args.timer in CUDA_TIMERS and not device.startswith("cuda"):
            raise _bad(f"--timer {args.timer} times a CUDA device, but --device is {args.device}; add --device cuda")
        parse_concrete(args.concrete or [])
        if _this_rank_writes():  # under torchrun only rank 0 writes
            if args.html is not None:
                _check_plotly("--html")
            _check_outputs({"--csv": args.csv, "--json": args.json, "--trace": args.trace, "--html": args.html},
                           inputs=model_sources(args.model))
    if command == "compare":
        if not 0.0 < args.alpha < 1.0:
            raise _bad(f"bad --alpha {args.alpha}: a significance level between 0 and 1, e.g. 0.05")
        if not math.isfinite(args.min_effect) or args.min_effect < 0:
            raise _bad(f"bad --min-effect {args.min_effect}: a fraction >= 0, e.g. 0.10 for 10%")
        if args.by == "scope" and args.html is not None:
            raise _bad("--html draws the node-by-node comparison; --by scope has none: drop one of them")
        if args.depth < 1:
            raise _bad(f"bad --depth {args.depth}: a module depth >= 1")
        if args.html is not None:
            _check_plotly("--html")
        _check_outputs({"--csv": args.csv, "--html": args.html}, inputs=[args.a, args.b])


def _check_plotly(what: str) -> None:
    """The HTML report needs plotly: say so before anything runs (found without importing it)."""
    import importlib.util

    try:
        found = importlib.util.find_spec("plotly") is not None
    except (ImportError, ValueError):  # a broken or blocked install
        found = False
    if not found:
        raise _bad(f"{what} writes an HTML report, which needs plotly: pip install plotly "
                   f"(in a checkout of fxprof: pip install -e '.[report]')")


def _max_threads() -> int:
    """The most --threads accepted: 4 per core, at least 1024 (100000 was a MemoryError)."""
    return max(1024, 4 * (os.cpu_count() or 1))


def _this_rank_writes() -> bool:
    """False on the ranks other than 0 of a ``torchrun`` job (read from the environment, so
    that no torch is imported to know it)."""
    return os.environ.get("RANK", "0").strip() in ("", "0") or "WORLD_SIZE" not in os.environ


def _check_view(args: argparse.Namespace) -> None:
    """--sort and --columns name columns of the table they apply to."""
    if args.command == "compare" and args.by == "scope":
        from ..core.blocks import BLOCK_COLUMNS

        allowed = list(BLOCK_COLUMNS)
        sortable = [*allowed, "scope"]
    elif args.command == "compare":
        from ..core.compare import COMPARE_COLUMNS

        allowed = list(COMPARE_COLUMNS)
        sortable = [*allowed, "node"]
    elif args.group_by == "rank":
        return  # a fixed table; check_args refuses --sort and --columns with it
    elif args.group_by is not None:
        from ..views.text import GROUP_COLUMNS

        # a training step's roll-up has a column per phase: only a profile of one has them
        training = args.command == "show" or args.backward
        allowed = [*GROUP_COLUMNS, *(PHASE_COLUMNS if training else ())]
        sortable = [*allowed, args.group_by]
    else:
        from ..core.rankstats import RANK_TABLE_COLUMNS
        from ..core.profile import TABLE_COLUMNS

        # the per-rank columns: only a gathered profile (saved, or being made under torchrun) has them
        ranked = args.command == "show" or ("WORLD_SIZE" in os.environ and "RANK" in os.environ)
        allowed = [*TABLE_COLUMNS, *(RANK_TABLE_COLUMNS if ranked else ())]
        sortable = [*allowed, "node"]
    what = "a --group-by table" if args.command != "compare" and args.group_by else "the table"
    if args.sort is not None and args.sort not in sortable:
        raise _bad(f"bad --sort {args.sort!r}{_did_you_mean(args.sort, sortable)}: {what} has {', '.join(sortable)}")
    unknown = [c for c in _columns(args.columns) or [] if c not in allowed]
    if unknown:
        hints = "".join(_did_you_mean(c, allowed) for c in unknown)
        raise _bad(f"bad --columns {', '.join(unknown)}{hints}: {what} has {', '.join(allowed)}")


#: the longest --concrete value read
_MAX_LITERAL = 10_000


def _short(text: str) -> str:
    return repr(text if len(text) <= 60 else text[:57] + "...")


def parse_concrete(items: Sequence[str]) -> dict[str, Any]:
    """``["use_cache=False", "mode='fast'"]`` -> ``{"use_cache": False, "mode": "fast"}``."""
    import ast

    out: dict[str, Any] = {}
    for item in items:
        name, eq, text = item.partition("=")
        if not eq or not name.strip().isidentifier():
            raise _bad(f"bad --concrete {item!r}: expected NAME=VALUE, e.g. use_cache=False")
        if len(text) > _MAX_LITERAL:
            raise _bad(f"bad --concrete {name.strip()}=...: its value is {len(text):,} characters long; a fixed argument "
                       f"is a short literal (at most {_MAX_LITERAL:,} characters)")
        try:
            out[name.strip()] = ast.literal_eval(text.strip())
        except (RecursionError, MemoryError):  # Python's parser and literal_eval recurse on nesting
            raise _bad(f"bad --concrete {_short(item)}: the value is nested too deeply to read as a literal; "
                       f"write None, True, 3, 0.5, 'text' or a shallow tuple") from None
        except (ValueError, SyntaxError) as exc:
            raise _bad(f"bad --concrete {item!r}: {text!r} is not a Python literal; write None, True, 3, 0.5 or 'text'") from exc
    return out


def _check_outputs(outputs: dict[str, str | None], inputs: Sequence[str] = ()) -> None:
    """Before anything runs: no empty path, no two outputs on one file (or both on standard
    output), no output on an input, and every output writable."""
    given = {flag: path for flag, path in outputs.items() if path is not None}
    for flag, path in given.items():
        if path == "":
            raise _bad(f"{flag} was given an empty path; give a file path, or '-' for standard output")
    flags = list(given)
    for i, first in enumerate(flags):
        for second in flags[i + 1:]:
            if _same_file(given[first], given[second]):
                where = "standard output" if given[first] == "-" else repr(given[first])
                raise _bad(f"{first} and {second} both write {where}; give each output its own path")
    _check_not_inputs(given, inputs)
    for flag, path in given.items():
        if path != "-":
            _check_writable(path)
        if flag == "--json":
            from ..io import profile_format

            try:
                profile_format(path)
            except ValueError as exc:
                raise _bad(f"--json: {exc}") from None


#: file names that hold code or notebooks: never an output, whatever the command was given
_SOURCE_SUFFIXES = (".py", ".pyw", ".pyi", ".pyx", ".ipynb")


def model_sources(model: str) -> list[str]:
    """The files MODEL names as its source, found without running any of them: the file of
    ``path/to/file.py:factory``, or for ``package.module:factory`` the module's file and its
    packages' ``__init__.py``, looked up as the import will (the current folder first).
    ``importlib.machinery.PathFinder`` finds them without importing (no user code runs)."""
    from importlib.machinery import PathFinder

    where = model.rpartition(":")[0] if ":" in model else ""
    if not where:
        return []
    if os.path.isfile(where):
        return [where]
    found: list[str] = []
    search: list[str] | None = [os.getcwd(), *(p or os.curdir for p in sys.path)]
    parts = where.split(".")
    for i in range(len(parts)):
        if search is None or not all(part.isidentifier() for part in parts):
            break
        try:
            spec = PathFinder.find_spec(".".join(parts[: i + 1]), search)
        except (ImportError, ValueError, OSError):
            break
        if spec is None:
            break
        if spec.origin and os.path.isfile(spec.origin):
            found.append(spec.origin)
        search = list(spec.submodule_search_locations) if spec.submodule_search_locations is not None else None
    return found


def _check_not_inputs(outputs: dict[str, str | None], inputs: Sequence[str]) -> None:
    """No output on an input of the command (the model's source included) or on any existing
    source file."""
    for flag, path in outputs.items():
        if path is None or path == "-":
            continue
        for source in inputs:
            if _same_file(path, source):
                raise _bad(f"{flag} {path!r} is an input of this command; writing it would destroy it. Give another path")
        if os.path.isfile(path) and os.path.realpath(path).lower().endswith(_SOURCE_SUFFIXES):
            raise _bad(f"{flag} {path!r} is an existing source file ({os.path.splitext(path)[1]}); fxprof never "
                       f"writes its outputs over code. Give another path, e.g. one ending in .json, .csv or .npz")


def _same_file(a: str, b: str) -> bool:
    if a == "-" or b == "-":
        return a == b
    if os.path.realpath(a) == os.path.realpath(b):
        return True
    try:
        return os.path.samefile(a, b)  # hard links
    except OSError:
        return False


def _check_writable(path: str) -> None:
    """Fail before a long profiling run, not after it, when an output cannot be written."""
    import stat
    import tempfile

    from ..errors import ProfileWriteError

    target = os.path.realpath(path)
    directory = os.path.dirname(target)
    if os.path.isdir(path):
        raise ProfileWriteError(f"cannot write {path!r}: it is a directory; give a file path")
    with contextlib.suppress(OSError):
        if not stat.S_ISREG(os.stat(target).st_mode):  # a device or FIFO: written through
            if not os.access(target, os.W_OK):
                raise ProfileWriteError(f"cannot write {path!r}: it is not writable")
            return
    if not os.path.isdir(directory):
        raise ProfileWriteError(f"cannot write {path!r}: the folder {directory!r} does not exist")
    try:  # os.access says yes to root everywhere; try to create a file there
        fd, probe = tempfile.mkstemp(prefix=".fxprof-", suffix=".probe", dir=directory)
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise ProfileWriteError(f"cannot write {path!r}: cannot create files in the folder {directory!r} ({exc.strerror or exc})") from exc
    if not os.path.lexists(target):  # the name itself (too long, not allowed here) fails only at the end otherwise
        try:
            fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            return
        except OSError as exc:
            raise ProfileWriteError(f"cannot write {path!r}: {exc.strerror or exc}; give a shorter or plainer file name") from exc
        os.close(fd)
        os.unlink(target)


def _view(args: argparse.Namespace, stream: Any = None) -> "ViewOptions":
    """How the table is shown: sorting, rows, columns, and the width of ``stream`` (stdout)."""
    from ..views.options import ViewOptions
    from ..views.tables import terminal_width

    view = ViewOptions.of(sort=args.sort, top=args.top, columns=_columns(args.columns), ascending=args.ascending,
                          width=terminal_width(stream))
    if args.command != "compare":
        view = view.but(group_by=args.group_by, depth=args.depth or 1, sort="pct" if args.sort is None else args.sort,
                        bookkeeping=args.rank_bookkeeping)
    return view


# ---------------------------------------------------------------------- commands
def _cmd_profile(args: argparse.Namespace) -> int:
    from ..views.progress import Progress

    # shown at once, before torch is imported; under torchrun only rank 0 shows one
    with Progress(enabled=not args.quiet and _this_rank_writes()) as bar:
        bar.phase("importing torch")
        _check_view(args)
        import torch  # noqa: F401  (what the bar was waiting for)

        from ..measure.ranks import is_initialized, launched, process_group_from_env

        bar.step()
        if launched() and not is_initialized():  # under torchrun: one process group around the command
            with process_group_from_env(args.device) as args.device:
                return _profile(args, bar)
        return _profile(args, bar)


def _profile(args: argparse.Namespace, bar: Any) -> int:
    import torch

    from ..api import profile
    from ..measure.ranks import gather, is_initialized
    from .models import _DTYPES, build_inputs, load_model, resolve_modules

    dtype = _DTYPES.get(args.dtype.lower())
    if dtype is None or not dtype.is_floating_point:
        raise _bad(f"bad --dtype {args.dtype!r}: use float32, float16, bfloat16 or float64")
    try:
        device = torch.device(args.device)
    except RuntimeError as exc:
        raise _bad(f"bad --device {args.device!r}: {exc}") from exc
    if device.type == "cuda" and not torch.cuda.is_available():
        raise _bad(f"--device {args.device} asked for, but torch.cuda.is_available() is False on this machine; use --device cpu")
    if device.type == "cuda" and device.index is not None and device.index >= torch.cuda.device_count():
        raise _bad(f"--device {args.device}: this machine has {torch.cuda.device_count()} CUDA device(s) (cuda:0...)")
    if not args.no_input:
        build_inputs(args.input, dtype, device, parse_only=True)  # bad shapes fail before the model is built
    if args.threads is not None:
        torch.set_num_threads(args.threads)

    bar.phase("building the model")
    model = load_model(args.model)
    if _this_rank_writes():  # the files the model came from, now that they are known (checked by name before)
        _check_not_inputs({"--csv": args.csv, "--json": args.json, "--trace": args.trace}, _loaded_sources(model))
    model = model.train() if args.backward else model.eval()  # a training step runs in train mode
    leaf = resolve_modules("--leaf-module", args.leaf_module or [], model)
    into = "all" if "all" in (args.trace_into or []) else resolve_modules("--trace-into", args.trace_into or [], model)
    both = [m for m in leaf if into != "all" and m in into]  # two spellings of one class or path
    if both:
        names = ", ".join(m if isinstance(m, str) else f"{m.__module__}.{m.__qualname__}" for m in both)
        raise _bad(f"{names} given to both --leaf-module (keep it whole) and --trace-into (trace inside it); "
                   f"give each module to one of them")
    try:
        model = model.to(device=device, dtype=dtype)
        positional, keywords = ([], {}) if args.no_input else build_inputs(args.input, dtype, device)
    except (RuntimeError, AssertionError, MemoryError) as exc:
        raise _bad(f"cannot put the model and inputs on {device} as {args.dtype}: {_first_line(exc)}") from exc
    bar.step()
    concrete = parse_concrete(args.concrete or [])
    both = sorted(set(concrete) & set(keywords))
    if both:
        raise _bad(f"{', '.join(both)} given by both --input and --concrete; give each input once")
    options: dict[str, Any] = dict(warmup=args.warmup, warmup_ms=args.warmup_ms, iters=args.iters, timer=args.timer,
                                   name=args.model, progress=bar, capture=args.capture, mode=args.mode,
                                   peaks=_peaks_option(args.peaks))
    if args.compile:  # the compiled program's kernels: no capture, timer, progress or roofline options
        options = dict(warmup=args.warmup, iters=args.iters, name=args.model,
                       compile={"mode": args.compile_mode} if args.compile_mode else True)
    elif args.backward:
        from ..measure.training import make_optimizer

        options.update(backward=True, optimizer=make_optimizer(args.optimizer, model) if args.optimizer else None)
    else:
        options.update(leaf_modules=leaf, trace_into=into, concrete_args=concrete or None)
    try:  # a fixed argument is also passed, so the traced graph's check of its value holds
        prof = profile(model, *positional, model_kwargs={**keywords, **concrete} or None, **options)
    except BaseException as exc:
        partial = getattr(exc, "profile", None)
        if partial is not None and not is_initialized():  # keep what was measured: write it and show it, then fail
            bar.close()
            failures, _ = _emit(partial, args)
            for line in failures:
                _print(f"fxprof: {line}", sys.stderr)
        elif partial is not None:  # under torchrun the ranks cannot gather now: each keeps its own
            _print(f"fxprof: {_rescue(partial)}", sys.stderr)
        raise
    bar.close()
    try:
        prof = gather(prof)  # under torchrun: every rank's samples on rank 0, None elsewhere
    except Exception:  # a rank died or the gather failed: this rank's runs are not lost
        _print(f"fxprof: {_rescue(prof)}", sys.stderr)
        raise
    if prof is None:
        return 0
    failures, signals = _emit(prof, args)
    if failures:
        raise _bad("; ".join(failures))
    if signals:  # interrupted while saving: everything was written; now stop as asked
        raise _Terminated() if signal.SIGTERM in signals else KeyboardInterrupt()
    return 0


def _loaded_sources(model: Any) -> list[str]:
    """The source files of the model's class and of every module class inside it."""
    found = set()
    for module in model.modules():
        path = getattr(sys.modules.get(type(module).__module__), "__file__", None)
        if path:
            found.add(path)
    return sorted(found)


def _emit(prof: Any, args: argparse.Namespace) -> tuple[list[str], list[int]]:
    """Write every output asked for, each on its own (one failing loses no other), the whole
    profile first; then print the summary. If the profile could not be saved where asked, save
    it where it can be. Ctrl-C and SIGTERM wait until this is done. Returns what failed, as
    messages, and the signals that arrived meanwhile."""
    from ..views.text import render_summary

    prof.keep_outliers = args.keep_outliers
    runs = args.trace_runs or "representative"
    outputs = [("json", args.json, prof.save), ("csv", args.csv, prof.to_csv),
               ("trace", args.trace, lambda path: prof.to_chrome_trace(path, runs=runs)),
               ("html", args.html, prof.to_html)]
    to_stdout = any(path == "-" for _, path, _ in outputs)
    report = sys.stderr if to_stdout else sys.stdout  # standard output holds only the data then
    written, failures = [], []
    with _signals_deferred() as signals:
        for label, path, write in outputs:
            if path is None:
                continue
            try:
                write(path)
                written.append(f"wrote {label}: {'standard output' if path == '-' else path}")
            except Exception as exc:  # one output failing must not cost the others
                failures.append(f"cannot write --{label} {path!r}: {getattr(exc, 'reason', None) or exc}")
        try:
            _print(render_summary(prof, _view(args, report)), report)
        except Exception as exc:  # a table that cannot be shown must not cost the profile
            failures.append(f"cannot show the table: {exc}")
        if failures and not any(line.startswith("wrote json") for line in written):
            failures.append(_rescue(prof))
        for line in sorted(written, key=lambda line: ("wrote csv", "wrote json", "wrote trace", "wrote html").index(line.split(":")[0])):
            _print(line, report)  # in the order of the options, whatever order they were written in
    return failures, signals


def _rescue(prof: Any) -> str:
    """Save the whole profile somewhere that works (here, else the temporary folder); say where."""
    import datetime
    import tempfile

    model = re.sub(r"[^A-Za-z0-9_.-]+", "_", str(prof.meta.get("model", "model")))[:60]
    rank = f"-rank{prof.meta['rank']}" if "rank" in prof.meta else ""  # one file per rank under torchrun
    name = f"fxprof-{model}{rank}-{datetime.datetime.now().strftime('%Y%m%d-%H%M%S')}-{os.getpid()}.json"
    tried = []
    for folder in (os.getcwd(), tempfile.gettempdir()):
        path = os.path.join(folder, name)
        try:
            prof.save(path)
            return f"the whole profile was saved to {path!r} instead (fxprof show {path})"
        except Exception as exc:
            tried.append(f"{folder!r}: {getattr(exc, 'reason', None) or exc}")
    return f"the profile could not be saved anywhere ({'; '.join(tried)})"


def _cmd_show(args: argparse.Namespace) -> int:
    from ..io import read_any
    from ..views.text import render_body, render_summary

    _check_view(args)
    loaded = read_any(args.file)
    if isinstance(loaded, __import__("pandas").DataFrame):
        if args.group_by == "rank":
            raise _bad("--group-by rank needs a saved profile (.json or .npz); a CSV holds no runs")
        _print(f"fxprof: per-node table from {args.file} (a CSV holds no raw samples and no run header)\n")
        _print(render_body(loaded, _view(args)))
    else:
        loaded.keep_outliers = args.keep_outliers
        _print(render_summary(loaded, _view(args)))
    return 0


def _cmd_compare(args: argparse.Namespace) -> int:
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
        _print(render_blocks(blocks, args.a, args.b, _view(args, report)), report)
        return 0
    diff = compare(a, b, alpha=args.alpha, min_effect=args.min_effect, keep_outliers=keep, warn=False)
    if args.csv is not None:
        write_csv(diff, args.csv)
    if args.html is not None:
        from ..views.report import write_compare_report

        write_compare_report(a, b, args.html, label_a=args.a, label_b=args.b, diff=diff)
    report = sys.stderr if "-" in (args.csv, args.html) else sys.stdout
    _print(render_compare(diff, args.a, args.b, _view(args, report)), report)
    if args.html is not None:
        _print(f"wrote html: {'standard output' if args.html == '-' else args.html}", report)
    return 0


def _cmd_report(args: argparse.Namespace) -> int:
    import pandas as pd

    from ..io import read_any
    from ..views.report import write_report

    loaded = read_any(args.file)
    if isinstance(loaded, pd.DataFrame):
        raise _bad(f"{args.file} is a per-node CSV table: it holds no runs and no samples, which the report draws. "
                   f"Give a profile saved with --json (.json or .npz)")
    loaded.keep_outliers = args.keep_outliers
    write_report(loaded, args.output)
    if args.output != "-":
        _print(f"wrote html: {args.output}")
    return 0


def _peaks_option(text: str | None) -> Any:
    """--peaks as fxprof.profile's ``peaks=``: auto (default; FXPROF_PEAKS may override), quick,
    off, or the user's TFLOPS,GBPS."""
    if text is None or text.strip().lower() == "auto":
        return "auto"
    if text.strip().lower() == "off":
        return None
    return text.strip().lower() if text.strip().lower() == "quick" else text


def _cmd_peaks(args: argparse.Namespace) -> int:
    import torch

    from ..measure.peaks import cache_path, machine_peaks
    from .models import _DTYPES

    dtype = _DTYPES.get(args.dtype.lower())
    if dtype is None or not dtype.is_floating_point:
        raise _bad(f"bad --dtype {args.dtype!r}: use float32, float16, bfloat16 or float64")
    try:
        device = torch.device(args.device)
    except RuntimeError as exc:
        raise _bad(f"bad --device {args.device!r}: {exc}") from exc
    found = machine_peaks(device, dtype, args.threads, sizes="quick" if args.quick else "full", refresh=args.refresh)
    _print(f"fxprof peaks: {found.device_name} ({found.device}), {found.dtype}"
           + (f", {found.threads} thread(s)" if found.threads else "") + f", torch {found.torch}")
    _print(f"  compute    {found.flops_per_s / 1e12:.4g} TFLOP/s   (best GEMM or convolution)")
    _print(f"  bandwidth  {found.bytes_per_s / 1e9:.4g} GB/s      (best of copy, add, triad; bytes read + written)")
    _print(f"  op floor   {found.overhead_s * 1e6:.3g} us          (one-element add: nodes whose roof is below it are 'overhead')")
    _print(f"  ridge      {found.ridge:.3g} FLOP/byte  (below: memory-limited at the roof; above: compute-limited)")
    details = found.details
    for name, rate in details.get("compute_flops_per_s", {}).items():
        _print(f"    {name:<30} {rate / 1e12:.4g} TFLOP/s")
    for name, rate in details.get("bandwidth_bytes_per_s", {}).items():
        _print(f"    {name:<30} {rate / 1e9:.4g} GB/s")
    if "seconds" in details:
        tries = f", best of {details['measurements']} measurements" if details.get("measurements", 1) > 1 else ""
        _print(f"  measured in {details['seconds']:.1f} s{tries}; cached in {cache_path()}")
    return 0


def _cmd_selfcheck(args: argparse.Namespace) -> int:
    from ..selfcheck import selfcheck

    return 0 if selfcheck(device=args.device, iters=args.iters).passed else 1


def _first_line(exc: BaseException) -> str:
    """An error's message without the C++ frames torch appends ("Exception raised from ...")."""
    return str(exc).split("Exception raised from")[0].strip() or type(exc).__name__


class _Terminated(KeyboardInterrupt):
    """SIGTERM, raised like Ctrl-C so that what was measured is handed back and saved."""


#: C0 and C1 control characters (but the newline), DEL, and the bidirectional overrides
_CONTROL = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def _printable(text: str) -> str:
    """``text`` with every control character escaped (``\\x1b``): a file's strings never reach
    the terminal as commands (window titles, clearing the screen, moving the cursor)."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}" if ord(m.group()) < 0x100 else f"\\u{ord(m.group()):04x}", text)


def _print(text: str, stream: Any = None) -> None:
    print(_printable(text), file=stream if stream is not None else sys.stdout)


@contextlib.contextmanager
def _signals_deferred() -> Iterator[list[int]]:
    """Ctrl-C and SIGTERM wait while files are written: say so, finish, then report them."""
    received: list[int] = []
    if threading.current_thread() is not threading.main_thread():
        yield received
        return

    def hold(signum: int, frame: Any) -> None:
        received.append(signum)
        print("fxprof: saving what was measured; this takes a moment, please wait", file=sys.stderr, flush=True)

    previous = {sig: signal.signal(sig, hold) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield received
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


@contextlib.contextmanager
def _sigterm_as_interrupt() -> Iterator[None]:
    """SIGTERM raises :class:`_Terminated` (a KeyboardInterrupt): the runs so far are kept."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def terminate(signum: int, frame: Any) -> None:
        raise _Terminated()

    previous = signal.signal(signal.SIGTERM, terminate)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(_attach_dash_values(argv, parser.value_options, parser.all_options))  # type: ignore[attr-defined]
    args.debug = getattr(args, "debug", False)
    args.quiet = getattr(args, "quiet", False)
    if not getattr(args, "handler", None):
        parser.print_help()
        return 2
    from ..errors import FxprofError

    try:
        with _sigterm_as_interrupt():
            check_args(args)
            return args.handler(args)
    except _Terminated:
        print("fxprof: terminated", file=sys.stderr)
        return 128 + signal.SIGTERM
    except KeyboardInterrupt:
        print("fxprof: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # every failure is one line; --debug shows the traceback
        if args.debug:
            traceback.print_exc()
        text = _first_line(exc) if str(exc).strip() else ""
        if isinstance(exc, OSError) and not isinstance(exc, FxprofError) and exc.filename:
            text = f"cannot read {exc.filename!r}: {exc.strerror}"
        elif not isinstance(exc, (FxprofError, ValueError, TypeError, OSError, ImportError)):
            text = f"{type(exc).__name__}: {text}" if text else type(exc).__name__
        # one line: multi-line messages (a node error lists what the node received) are joined
        line = "; ".join(part.strip() for part in text.splitlines() if part.strip()) or type(exc).__name__
        _print(f"fxprof: error: {line}", sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
