"""The ``fxprof`` command line: profile, show, compare.

Importing this module imports no torch: ``fxprof --help`` and ``--version`` answer at once,
and ``fxprof profile`` shows its progress bar before torch is loaded. Every option and every
combination of options is checked before anything runs (:func:`check_args`).
"""

from __future__ import annotations

import argparse
import difflib
import os
import sys
import traceback
from typing import Any, Sequence

from . import __version__

DESCRIPTION = """\
Time every node of a PyTorch model's torch.fx graph, on the CPU or the GPU.

commands:
  profile MODEL   trace MODEL, warm it up, time every node over --iters runs, print hotspots
  show FILE       print a saved profile (.json) or per-node table (.csv) again, re-sorted
  compare A B     compare two saved profiles or tables node by node

Run `fxprof COMMAND --help` for a command's options and examples.
"""

TOP_EXAMPLES = """\
examples:
  fxprof profile resnet18 --input 1x3x64x64 --json before.json
  fxprof show before.json --group-by scope --depth 2
  fxprof compare before.json after.json --sort ratio
"""

PROFILE_EXAMPLES = """\
examples:
  fxprof profile resnet18                                # CPU, 1x3x224x224, top 20 nodes
  fxprof profile resnet50 --input 32x3x224x224 --device cuda --dtype float16
  fxprof profile mypkg.models:build --input ids=2x128:int64 --input mask=2x128:bool
  fxprof profile model.py:make_model --leaf-module model.Router --concrete use_cache=False
  fxprof profile mypkg.nets:encoder --trace-into torch.nn.TransformerEncoderLayer
  fxprof profile resnet18 --sort median_ms --ascending --top 0    # every node, fastest first
  fxprof profile resnet18 --group-by scope --depth 2 --sort flops # time per block
  fxprof profile resnet18 --columns kind,median_ms,pct,flops,output_shape
  fxprof profile resnet18 --trace r18.trace.json --trace-runs last:3   # open in ui.perfetto.dev
  fxprof profile raft_small --input 1x3x128x128 --input 1x3x128x128   # falls back to dynamo

MODEL is a torchvision model name (built with weights=None: nothing is downloaded), or
'package.module:factory' or 'path/to/file.py:factory' (the current folder and the file's folder
are importable) whose factory returns an nn.Module or fx.GraphModule.
"""

SHOW_EXAMPLES = """\
examples:
  fxprof show run.json                          # the table as it was printed
  fxprof show run.json --top 0 --sort node      # every node, by name
  fxprof show run.json --group-by op --sort nodes
  fxprof show run.json --group-by scope --depth 2 --columns nodes,median_ms,pct
  fxprof show run.csv --columns kind,median_ms,output_shape   # a CSV has no run header
"""

COMPARE_EXAMPLES = """\
examples:
  fxprof compare before.json after.json                 # largest change first
  fxprof compare before.json after.json --sort ratio --top 10
  fxprof compare before.json after.json --sort delta_ms --ascending   # biggest savings first
  fxprof compare a.csv b.json --columns kind,a_ms,b_ms,ratio --csv diff.csv
"""

GROUP_KEYS = ("op", "module_type", "range", "scope", "graph")


class _Parser(argparse.ArgumentParser):
    """argparse, with "did you mean" for an unknown command or choice (difflib)."""

    def error(self, message: str) -> Any:  # type: ignore[override]
        import re

        found = re.search(r"invalid choice: '([^']*)' \(choose from (.*)\)", message)
        if found:
            choices = re.findall(r"'([^']*)'", found.group(2)) or [c.strip() for c in found.group(2).split(",")]
            message += _did_you_mean(found.group(1), choices)
        return super().error(message)


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
                           help="roll node times up by KEY: op, module_type, range (record_function), scope (module path), graph")
            t.add_argument("--depth", type=int, metavar="N", help="module depth for --group-by scope (1: layer1, 2: layer1.0; default: 1)")

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
    m.add_argument("--device", default="cpu", help="device for the model and inputs: cpu, cuda, cuda:1 (default: cpu)")
    m.add_argument("--dtype", default="float32", help="dtype of the model and of float inputs: float32, float16, bfloat16, float64 (default: float32)")
    c = p.add_argument_group("capture (how the graph is made)")
    c.add_argument("--capture", default="auto", choices=["auto", "symbolic", "dynamo", "export"],
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
    r = p.add_argument_group("running")
    r.add_argument("--warmup", type=int, default=5, metavar="N", help="untimed warm-up runs (default: 5)")
    r.add_argument("--iters", type=int, default=20, metavar="N", help="timed runs (default: 20)")
    r.add_argument("--timer", default="auto", choices=["auto", "cpu", "cuda", "sync", "kernel"],
                   help="auto: cuda events on a GPU, else the CPU clock; kernel: also CUDA kernel time per node (default: auto)")
    r.add_argument("--mode", default="timed", choices=["timed", "isolated"],
                   help="timed: whole runs; isolated: each node re-run --iters times on its real inputs (default: timed)")
    r.add_argument("--threads", type=int, default=None, metavar="N", help="torch CPU threads (default: torch's choice); recorded in the profile")
    table_options(p, node_sort, node_columns)
    o = p.add_argument_group("outputs (checked before anything runs)")
    o.add_argument("--csv", metavar="PATH", help="write the per-node table as CSV (full precision, ms)")
    o.add_argument("--json", metavar="PATH", help="save the whole profile (every sample) as JSON, for show/compare")
    o.add_argument("--trace", metavar="PATH", help="write a Chrome trace, on torch.profiler's clock (open in ui.perfetto.dev)")
    o.add_argument("--trace-runs", metavar="RUNS",
                   help="runs in the trace: all, 3, 0-4, 0,5,9, first:N, last:N, or median (default: all)")
    p.set_defaults(handler=_cmd_profile)

    s = command("show", "print a saved profile or per-node CSV again",
                "Re-render a profile saved with --json (or a per-node --csv table) without running anything.",
                SHOW_EXAMPLES)
    s.add_argument("file", metavar="FILE", help="a .json profile or .csv table written by fxprof")
    table_options(s, node_sort, node_columns)
    s.set_defaults(handler=_cmd_show)

    k = command("compare", "compare two saved profiles or tables node by node",
                "Match the nodes of A and B by name and print each node's median time in both, the ratio B/A "
                "and the change in share, largest change first, with totals. Nodes present in only one file "
                "are listed.", COMPARE_EXAMPLES)
    k.add_argument("a", metavar="A", help="the baseline: a .json profile or .csv table")
    k.add_argument("b", metavar="B", help="the other: a .json profile or .csv table")
    table_options(k, "column to sort by: status, op, kind, scope, a_ms, b_ms, delta_ms, ratio, a_pct, b_pct, "
                     "delta_pct, or node (default: the largest absolute change first)",
                  "columns to show, comma-separated (default: status,kind,scope,a_ms,b_ms,delta_ms,ratio,a_pct,b_pct,delta_pct)",
                  groups=False)
    k.add_argument_group("outputs").add_argument("--csv", metavar="PATH", help="write the comparison table as CSV")
    k.set_defaults(handler=_cmd_compare)
    return parser


# ------------------------------------------------------------------------ checks
def _columns(text: str | None) -> list[str] | None:
    return [c.strip() for c in text.split(",") if c.strip()] if text else None


def _bad(message: str) -> Exception:
    from .errors import FxprofError  # light: errors.py imports no torch

    return FxprofError(message)


def _choose(option: str, value: str, allowed: Sequence[str]) -> None:
    if value not in allowed:
        raise _bad(f"bad {option} {value!r}{_did_you_mean(value, allowed)}: choose from {', '.join(allowed)}")


def check_args(args: argparse.Namespace) -> None:
    """Every option and combination that can be judged without importing torch; raises
    FxprofError naming the option and what to do. Column names are checked by
    :func:`_check_view` as each command starts, still before anything runs."""
    if args.top < 0:
        raise _bad(f"bad --top {args.top}: must be >= 0 (0 shows all)")
    command = args.command
    if command in ("profile", "show"):
        if args.depth is not None:
            if args.depth < 1:
                raise _bad(f"bad --depth {args.depth}: must be >= 1")
            if args.group_by != "scope":
                raise _bad("--depth applies to --group-by scope only; add --group-by scope or drop --depth")
    if command == "profile":
        for label, value, minimum in (("--warmup", args.warmup, 0), ("--iters", args.iters, 1), ("--threads", args.threads, 1)):
            if value is not None and value < minimum:
                raise _bad(f"bad {label} {value}: must be >= {minimum}")
        if args.mode == "isolated":
            if args.trace:
                raise _bad("--mode isolated has no timeline to trace (each node is re-run on its own); drop --trace or use --mode timed")
            if args.timer == "kernel":
                raise _bad("--timer kernel works with --mode timed only; use --timer cuda for --mode isolated")
        if args.trace_runs and not args.trace:
            raise _bad("--trace-runs chooses the runs of --trace; add --trace PATH")
        if args.trace_runs:
            from .runs import parse_runs

            try:
                parse_runs(args.trace_runs)
            except ValueError as exc:
                raise _bad(f"bad --trace-runs {args.trace_runs!r}: {exc}") from exc
        symbolic_only = [o for o, v in (("--leaf-module", args.leaf_module), ("--trace-into", args.trace_into),
                                        ("--concrete", args.concrete)) if v]
        if symbolic_only and args.capture in ("dynamo", "export"):
            raise _bad(f"{', '.join(symbolic_only)} apply to symbolic tracing; --capture {args.capture} traces inside "
                       f"every module by itself. Use --capture symbolic (or auto), or drop them")
        device = args.device.lower()
        if args.timer in ("cuda", "sync", "kernel") and not device.startswith("cuda"):
            raise _bad(f"--timer {args.timer} times a CUDA device, but --device is {args.device}; add --device cuda")
        parse_concrete(args.concrete or [])
        paths = [(o, v) for o, v in (("--csv", args.csv), ("--json", args.json), ("--trace", args.trace)) if v]
        _check_paths(paths)
    if command == "compare" and args.csv:
        _check_paths([("--csv", args.csv)])


def _check_paths(paths: list[tuple[str, str]]) -> None:
    seen: dict[str, str] = {}
    for option, path in paths:
        key = os.path.abspath(path)
        if key in seen:
            raise _bad(f"{seen[key]} and {option} both write {path!r}; give each output its own file")
        seen[key] = option
        _check_writable(path)


def _check_view(args: argparse.Namespace) -> None:
    """--sort and --columns name columns of the table they apply to."""
    if args.command == "compare":
        from .compare import COMPARE_COLUMNS

        allowed = list(COMPARE_COLUMNS)
        sortable = [*allowed, "node"]
    elif args.group_by is not None:
        from .render import GROUP_COLUMNS

        allowed = list(GROUP_COLUMNS)
        sortable = [*allowed, args.group_by]
    else:
        from .profile import TABLE_COLUMNS

        allowed = list(TABLE_COLUMNS)
        sortable = [*allowed, "node"]
    what = "a --group-by table" if args.command != "compare" and args.group_by else "the table"
    if args.sort is not None and args.sort not in sortable:
        raise _bad(f"bad --sort {args.sort!r}{_did_you_mean(args.sort, sortable)}: {what} has {', '.join(sortable)}")
    unknown = [c for c in _columns(args.columns) or [] if c not in allowed]
    if unknown:
        hints = "".join(_did_you_mean(c, allowed) for c in unknown)
        raise _bad(f"bad --columns {', '.join(unknown)}{hints}: {what} has {', '.join(allowed)}")


def parse_concrete(items: Sequence[str]) -> dict[str, Any]:
    """``["use_cache=False", "mode='fast'"]`` -> ``{"use_cache": False, "mode": "fast"}``."""
    import ast

    out: dict[str, Any] = {}
    for item in items:
        name, eq, text = item.partition("=")
        if not eq or not name.strip().isidentifier():
            raise _bad(f"bad --concrete {item!r}: expected NAME=VALUE, e.g. use_cache=False")
        try:
            out[name.strip()] = ast.literal_eval(text.strip())
        except (ValueError, SyntaxError) as exc:
            raise _bad(f"bad --concrete {item!r}: {text!r} is not a Python literal; write None, True, 3, 0.5 or 'text'") from exc
    return out


def _check_writable(path: str) -> None:
    """Fail before a long profiling run, not after it, when an output cannot be written."""
    from .errors import ProfileWriteError

    directory = os.path.dirname(os.path.abspath(path))
    if os.path.isdir(path):
        raise ProfileWriteError(f"cannot write {path!r}: it is a directory; give a file path")
    if not os.path.isdir(directory):
        raise ProfileWriteError(f"cannot write {path!r}: the folder {directory!r} does not exist")
    if not os.access(directory, os.W_OK):
        raise ProfileWriteError(f"cannot write {path!r}: the folder {directory!r} is not writable")


def _view(args: argparse.Namespace) -> dict:
    from .tables import terminal_width

    view = dict(sort=args.sort, top=args.top, columns=_columns(args.columns), ascending=args.ascending, width=terminal_width())
    if args.command != "compare":
        view.update(group_by=args.group_by, depth=args.depth or 1)
        if args.sort is None:
            view["sort"] = "pct"
    return view


# ---------------------------------------------------------------------- commands
def _cmd_profile(args: argparse.Namespace) -> int:
    from .progress import Progress

    with Progress(enabled=not args.quiet) as bar:  # shown at once, before torch is imported
        bar.phase("importing torch")
        _check_view(args)
        import torch

        from .api import profile
        from .models import _DTYPES, build_inputs, load_model, resolve_modules

        bar.step()
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
        positional, keywords = build_inputs(args.input, dtype, device, parse_only=True)
        if args.threads is not None:
            torch.set_num_threads(args.threads)

        bar.phase("building the model")
        model = load_model(args.model).eval()
        leaf = resolve_modules("--leaf-module", args.leaf_module or [], model)
        into = "all" if "all" in (args.trace_into or []) else resolve_modules("--trace-into", args.trace_into or [], model)
        try:
            model = model.to(device=device, dtype=dtype)
            positional, keywords = build_inputs(args.input, dtype, device)
        except (RuntimeError, AssertionError) as exc:
            raise _bad(f"cannot put the model and inputs on {device} as {args.dtype}: {exc}") from exc
        bar.step()
        concrete = parse_concrete(args.concrete or [])
        both = sorted(set(concrete) & set(keywords))
        if both:
            raise _bad(f"{', '.join(both)} given by both --input and --concrete; give each input once")
        try:  # a fixed argument is also passed, so the traced graph's check of its value holds
            prof = profile(model, *positional, model_kwargs={**keywords, **concrete}, warmup=args.warmup,
                           iters=args.iters, timer=args.timer, name=args.model, progress=bar, capture=args.capture,
                           mode=args.mode, leaf_modules=leaf, trace_into=into, concrete_args=concrete or None)
        except BaseException as exc:
            partial = getattr(exc, "profile", None)
            if partial is not None:  # keep what was measured: write it and show it, then fail
                bar.close()
                _emit(partial, args)
            raise
    _emit(prof, args)
    return 0


def _emit(prof: Any, args: argparse.Namespace) -> None:
    runs = args.trace_runs
    written = []
    for label, path, write in (("csv", args.csv, prof.to_csv), ("json", args.json, prof.save),
                               ("trace", args.trace, lambda p: prof.to_chrome_trace(p, runs=runs))):
        if path:
            write(path)
            written.append(f"wrote {label}: {path}")
    print(prof.summary(**_view(args)))
    for line in written:
        print(line)


def _cmd_show(args: argparse.Namespace) -> int:
    from .io import read_any
    from .render import render_body

    _check_view(args)
    loaded = read_any(args.file)
    if isinstance(loaded, __import__("pandas").DataFrame):
        print(f"fxprof: per-node table from {args.file} (a CSV holds no raw samples and no run header)\n")
        print(render_body(loaded, **_view(args)))
    else:
        print(loaded.summary(**_view(args)))
    return 0


def _cmd_compare(args: argparse.Namespace) -> int:
    from .compare import compare
    from .io import read_any, write_csv
    from .render import render_compare

    _check_view(args)
    diff = compare(read_any(args.a), read_any(args.b))
    if args.csv:
        write_csv(diff, args.csv)
    print(render_compare(diff, args.a, args.b, **_view(args)))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    args.debug = getattr(args, "debug", False)
    args.quiet = getattr(args, "quiet", False)
    if not getattr(args, "handler", None):
        parser.print_help()
        return 2
    from .errors import FxprofError

    try:
        check_args(args)
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
