"""The ``fxprof`` command line: profile, show, compare."""

from __future__ import annotations

import argparse
import sys
import traceback
from typing import Sequence

DESCRIPTION = """\
Time every node of a PyTorch model's torch.fx graph, on the CPU or the GPU.

commands:
  profile MODEL   trace MODEL, warm it up, time every node over --iters runs, print hotspots
  show FILE       print a saved profile (.json/.npz) or per-node table (.csv) again, re-sorted
  compare A B     compare two saved profiles or tables node by node
  selfcheck       check fxprof's timers against nodes of known cost on this machine
"""

EXAMPLES = """\
examples:
  fxprof profile resnet18                                # CPU, 1x3x224x224, top 20 nodes
  fxprof profile resnet50 --input 32x3x224x224 --device cuda --dtype float16
  fxprof profile mypkg.models:build --input 2x128:int64 --json run.json --csv run.csv
  fxprof profile path/to/model.py:make_model --iters 50 --sort median_ms --top 0
  fxprof profile resnet18 --group-by scope --depth 2     # time per block
  fxprof profile resnet18 --columns kind,median_ms,pct,flops,output_shape
  fxprof profile resnet18 --trace resnet18.trace.json   # open in ui.perfetto.dev
  fxprof profile raft_small --input 1x3x128x128 --input 1x3x128x128   # falls back to dynamo
  fxprof show run.json --group-by op
  fxprof compare before.json after.json --top 15
  torchrun --nproc-per-node 2 -m fxprof profile resnet18 --input 1x3x64x64 --json run.json
                                                         # every rank, gathered on rank 0
  fxprof selfcheck --device cuda                         # measured vs known, pass/fail
"""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="fxprof",
        description=DESCRIPTION,
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--debug", action="store_true", help="show the full traceback on errors")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    def view_options(p: argparse.ArgumentParser) -> None:
        p.add_argument("--sort", default="pct", help="column to sort by, descending (default: pct)")
        p.add_argument("--top", type=int, default=20, help="rows to show; 0 shows all (default: 20)")
        p.add_argument("--group-by", choices=["op", "module_type", "range", "scope", "graph", "comm", "rank"], help="show time rolled up by op kind, module class, record_function range or module scope; comm: collectives vs computation; rank: one row per torch.distributed rank")
        p.add_argument("--depth", type=int, default=1, help="module depth for --group-by scope (1: layer1, 2: layer1.0; default: 1)")
        p.add_argument("--columns", help="comma-separated columns to show, e.g. kind,median_ms,pct,flops,output_shape")
        p.add_argument("--keep-outliers", action="store_true", help="keep outlier runs (far slower than the rest) in the statistics; by default they are left out and the header says which")

    p = sub.add_parser(
        "profile",
        help="profile a model and print its hotspot table",
        description=(
            "Trace MODEL with fxprof's tracer, run --warmup untimed runs, then time every node of "
            "--iters runs and print the nodes that take the most time. MODEL is a torchvision "
            "model name (built with weights=None: nothing is downloaded), or an import path "
            "'package.module:factory' or 'path/to/file.py:factory' whose factory returns an "
            "nn.Module or fx.GraphModule."
        ),
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("model", metavar="MODEL", help="torchvision name (resnet18), package.module:factory, or path/to/file.py:factory")
    p.add_argument("--input", action="append", metavar="SHAPE[:DTYPE]", help="an input, e.g. 1x3x224x224 or 2x128:int64; repeat for several (default: 1x3x224x224)")
    p.add_argument("--device", default="cpu", help="device for the model and inputs: cpu, cuda, cuda:1 (default: cpu)")
    p.add_argument("--dtype", default="float32", help="dtype of the model and of float inputs: float32, float16, bfloat16, float64 (default: float32)")
    p.add_argument("--warmup", type=int, default=5, help="untimed warm-up runs (default: 5)")
    p.add_argument("--warmup-ms", type=float, default=None, help="also warm up for at least this many ms (default: 200 on CUDA, 0 on the CPU)")
    p.add_argument("--iters", type=int, default=20, help="timed runs (default: 20)")
    p.add_argument("--timer", default="auto", choices=["auto", "cpu", "cuda", "sync", "kernel"], help="auto: cuda events on a GPU, else the CPU clock; kernel: also CUDA kernel time per node via torch.profiler (default: auto)")
    p.add_argument("--capture", default="auto", choices=["auto", "symbolic", "dynamo", "export"], help="how to get the graph: auto tries symbolic tracing, then dynamo (default: auto)")
    p.add_argument("--mode", default="timed", choices=["timed", "isolated"], help="timed: whole runs; isolated: each node re-run --iters times on its real inputs (default: timed)")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice); recorded in the profile")
    view_options(p)
    p.add_argument("--csv", metavar="PATH", help="write the per-node table as CSV")
    p.add_argument("--json", metavar="PATH", help="save the whole profile (every sample) for show/compare: JSON, or compact binary columns if PATH ends in .npz")
    p.add_argument("--trace", metavar="PATH", help="write a Chrome trace (open in ui.perfetto.dev or chrome://tracing)")
    p.add_argument("--trace-runs", default="representative", choices=["representative", "all"], help="runs in the trace: the fastest, median and slowest (default), or all")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(handler=_cmd_profile)

    s = sub.add_parser(
        "show",
        help="print a saved profile or per-node CSV again",
        description="Re-render a profile saved with --json (or a per-node --csv table) without running anything.",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    s.add_argument("file", metavar="FILE", help="a .json or .npz profile or .csv table written by fxprof")
    view_options(s)
    s.set_defaults(handler=_cmd_show)

    c = sub.add_parser(
        "compare",
        help="compare two saved profiles or tables node by node",
        description=(
            "Match the nodes of A and B by name and print each node's median time in both, the "
            "ratio B/A, a p-value (Mann-Whitney U on the two sets of samples, Benjamini-Hochberg "
            "over the nodes) and a verdict (faster, slower, same: significant and at least "
            "--min-effect), and the change in share, largest change first, with totals, the whole "
            "run's ratio with a 95% bootstrap interval, and warnings when the two were not "
            "measured alike (model, graph, device, timer, dtype, threads, inputs, versions). "
            "Nodes present in only one file are listed. P-values need saved .json profiles."
        ),
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    c.add_argument("a", metavar="A", help="the baseline: a .json or .npz profile or .csv table")
    c.add_argument("b", metavar="B", help="the other: a .json or .npz profile or .csv table")
    c.add_argument("--top", type=int, default=20, help="rows to show; 0 shows all (default: 20)")
    c.add_argument("--csv", metavar="PATH", help="write the comparison table as CSV")
    c.add_argument("--alpha", type=float, default=0.05, help="significance level of the adjusted p-values (default: 0.05)")
    c.add_argument("--min-effect", type=float, default=0.10, help="smallest change in a node's median that gets a faster/slower verdict, as a fraction (default: 0.10, i.e. 10%%)")
    c.add_argument("--keep-outliers", action="store_true", help="keep outlier runs in both profiles' statistics")
    c.set_defaults(handler=_cmd_compare)

    k = sub.add_parser(
        "selfcheck",
        help="check the timers against nodes of known cost on this machine",
        description=(
            "Run small graphs whose node costs are known (CPU spins; on a GPU calibrated sleep kernels, a "
            "launch-bound chain, a synchronizing node) under every timer that can run here, and print measured "
            "vs known, the error and the bound verdicts, then PASS or FAIL (exit status 0 or 1)."
        ),
    )
    k.add_argument("--device", default="cpu", choices=["cpu", "cuda"], help="what to check (default: cpu)")
    k.add_argument("--iters", type=int, default=20, help="timed runs per timer (default: 20)")
    k.set_defaults(handler=_cmd_selfcheck)
    return parser


def _cmd_selfcheck(args: argparse.Namespace) -> int:
    from .errors import FxprofError
    from .selfcheck import selfcheck

    if args.iters < 1:
        raise FxprofError(f"bad --iters {args.iters}: must be >= 1")
    return 0 if selfcheck(device=args.device, iters=args.iters).passed else 1


def _columns(text: str | None) -> list[str] | None:
    return [c.strip() for c in text.split(",") if c.strip()] if text else None


def _check_view(args: argparse.Namespace) -> None:
    from .errors import FxprofError

    from .profile import TABLE_COLUMNS

    if args.top < 0:
        raise FxprofError(f"bad --top {args.top}: must be >= 0 (0 shows all)")
    if args.depth < 1:
        raise FxprofError(f"bad --depth {args.depth}: must be >= 1")
    if args.group_by is not None:
        if args.columns or args.sort != "pct":
            raise FxprofError("--sort and --columns apply to the node table; a --group-by table is sorted by pct and has fixed columns")
        return
    from .distributed import RANK_TABLE_COLUMNS

    if args.sort not in (*TABLE_COLUMNS, *RANK_TABLE_COLUMNS, "node"):
        raise FxprofError(f"bad --sort {args.sort!r}: choose a column: {', '.join(TABLE_COLUMNS)}")
    unknown = [c for c in _columns(args.columns) or [] if c not in (*TABLE_COLUMNS, *RANK_TABLE_COLUMNS)]
    if unknown:
        raise FxprofError(f"bad --columns {', '.join(unknown)}: choose from {', '.join(TABLE_COLUMNS)}")


def _view(args: argparse.Namespace) -> dict:
    return dict(sort=args.sort, top=args.top or None, columns=_columns(args.columns), group_by=args.group_by, depth=args.depth)


def _cmd_profile(args: argparse.Namespace) -> int:
    import torch

    from .api import profile
    from .distributed import gather, is_initialized, launched, process_group_from_env, this_rank
    from .errors import FxprofError
    from .models import DEFAULT_IMAGE_INPUT, _DTYPES, load_model, make_input, parse_input

    if launched() and not is_initialized():  # under torchrun: one process group around the command
        with process_group_from_env(args.device) as args.device:
            return _cmd_profile(args)
    rank = this_rank()  # 0 without torchrun; only rank 0 writes files and prints
    _check_view(args)
    dtype = _DTYPES.get(args.dtype.lower())
    if dtype is None or not dtype.is_floating_point:
        raise FxprofError(f"bad --dtype {args.dtype!r}: use float32, float16, bfloat16 or float64")
    try:
        device = torch.device(args.device)
    except RuntimeError as exc:
        raise FxprofError(f"bad --device {args.device!r}: {exc}") from exc
    if device.type == "cuda" and not torch.cuda.is_available():
        raise FxprofError(f"--device {args.device} asked for, but torch.cuda.is_available() is False on this machine; use --device cpu")
    if device.type == "cuda" and device.index is not None and device.index >= torch.cuda.device_count():
        raise FxprofError(f"--device {args.device}: this machine has {torch.cuda.device_count()} CUDA device(s) (cuda:0...)")
    specs = [parse_input(s) for s in (args.input or [DEFAULT_IMAGE_INPUT])]
    if args.threads is not None:
        if args.threads < 1:
            raise FxprofError(f"bad --threads {args.threads}: must be >= 1")
        torch.set_num_threads(args.threads)
    for path in (args.csv, args.json, args.trace):
        if path and rank == 0:
            _check_writable(path)

    model = load_model(args.model).eval()
    try:
        model = model.to(device=device, dtype=dtype)
        inputs = [make_input(shape, dt, dtype, device) for shape, dt in specs]
    except (RuntimeError, AssertionError) as exc:
        raise FxprofError(f"cannot put the model and inputs on {device} as {args.dtype}: {exc}") from exc
    try:
        prof = profile(model, *inputs, warmup=args.warmup, warmup_ms=args.warmup_ms, iters=args.iters, timer=args.timer, name=args.model, progress=not args.quiet and rank == 0, capture=args.capture, mode=args.mode)
    except BaseException as exc:
        partial = getattr(exc, "profile", None)
        if partial is not None and not is_initialized():  # keep what was measured: write it and show it, then fail
            _emit(partial, args)
        raise
    prof = gather(prof)  # under torchrun: every rank's samples on rank 0, None elsewhere
    if prof is not None:
        _emit(prof, args)
    return 0


def _emit(prof, args: argparse.Namespace) -> None:
    prof.keep_outliers = args.keep_outliers
    written = []
    for label, path, write in (("csv", args.csv, prof.to_csv), ("json", args.json, prof.save), ("trace", args.trace, lambda path: prof.to_chrome_trace(path, runs=args.trace_runs))):
        if path:
            write(path)
            written.append(f"wrote {label}: {path}")
    print(prof.summary(**_view(args)))
    for line in written:
        print(line)


def _check_writable(path: str) -> None:
    """Fail before a long profiling run, not after it, when an output cannot be written."""
    import os

    from .errors import ProfileWriteError

    directory = os.path.dirname(os.path.abspath(path))
    if os.path.isdir(path):
        raise ProfileWriteError(f"cannot write {path!r}: it is a directory; give a file path")
    if not os.path.isdir(directory):
        raise ProfileWriteError(f"cannot write {path!r}: the folder {directory!r} does not exist")
    if not os.access(directory, os.W_OK):
        raise ProfileWriteError(f"cannot write {path!r}: the folder {directory!r} is not writable")


def _cmd_show(args: argparse.Namespace) -> int:
    from .io import read_any
    from .render import render_body

    _check_view(args)
    loaded = read_any(args.file)
    if isinstance(loaded, __import__("pandas").DataFrame):
        print(f"fxprof: per-node table from {args.file} (a CSV holds no raw samples and no run header)\n")
        print(render_body(loaded, **_view(args)))
    else:
        loaded.keep_outliers = args.keep_outliers
        print(loaded.summary(**_view(args)))
    return 0


def _cmd_compare(args: argparse.Namespace) -> int:
    from .compare import compare
    from .io import read_any, write_csv
    from .render import render_compare

    if args.top < 0:
        raise ValueError(f"bad --top {args.top}: must be >= 0 (0 shows all)")
    if args.csv:
        _check_writable(args.csv)
    keep = True if args.keep_outliers else None
    diff = compare(read_any(args.a), read_any(args.b), alpha=args.alpha, min_effect=args.min_effect, keep_outliers=keep, warn=False)
    if args.csv:
        write_csv(diff, args.csv)
    print(render_compare(diff, args.a, args.b, top=args.top or None))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "handler", None):
        parser.print_help()
        return 2
    from .errors import FxprofError

    try:
        return args.handler(args)
    except KeyboardInterrupt:
        print("fxprof: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # every failure is one line; --debug shows the traceback
        if args.debug:
            traceback.print_exc()
        text = str(exc).strip()
        if isinstance(exc, OSError) and not isinstance(exc, FxprofError) and exc.filename:
            text = f"cannot read {exc.filename!r}: {exc.strerror}"
        elif not isinstance(exc, (FxprofError, ValueError, TypeError, OSError, ImportError)):
            text = f"{type(exc).__name__}: {text}" if text else type(exc).__name__
        # one line: multi-line messages (a node error lists what the node received) are joined
        line = "; ".join(part.strip() for part in text.splitlines() if part.strip()) or type(exc).__name__
        print(f"fxprof: error: {line}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
