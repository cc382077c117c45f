"""The ``fxprof`` command line: profile, show, compare."""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import signal
import sys
import threading
import traceback
from typing import Any, Iterator, Sequence

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
  fxprof profile resnet18 --backward --input 8x3x64x64 --group-by scope   # training step
  fxprof profile raft_small --input 1x3x128x128 --input 1x3x128x128   # falls back to dynamo
  fxprof show run.json --group-by op
  fxprof compare before.json after.json --top 15
  torchrun --nproc-per-node 2 -m fxprof profile resnet18 --input 1x3x64x64 --json run.json
                                                         # every rank, gathered on rank 0
  fxprof selfcheck --device cuda                         # measured vs known, pass/fail
"""


class _Parser(argparse.ArgumentParser):
    """argparse, with its errors as one line (as every fxprof error is), not a usage block."""

    def error(self, message: str) -> Any:
        self.exit(2, _printable(f"fxprof: error: {message}; see '{self.prog} --help'") + "\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
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
        p.add_argument("--group-by", choices=["op", "module_type", "range", "scope", "graph", "phase", "comm", "rank"], help="show time rolled up by op kind, module class, record_function range, module scope or training phase; comm: collectives vs computation; rank: one row per torch.distributed rank")
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
    p.add_argument("--backward", action="store_true", help="profile training steps: forward, loss (sum of the outputs) and backward, every node of both graphs timed; the model runs in train mode (see docs/training.md)")
    p.add_argument("--optimizer", choices=["sgd", "adamw"], help="with --backward, also zero_grad and step of this optimizer over the model's parameters (the model is restored afterwards)")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice); recorded in the profile")
    view_options(p)
    p.add_argument("--csv", metavar="PATH", help="write the per-node table as CSV ('-': standard output)")
    p.add_argument("--json", metavar="PATH", help="save the whole profile (every sample) for show/compare: JSON, or compact binary columns if PATH ends in .npz ('-': JSON on standard output)")
    p.add_argument("--trace", metavar="PATH", help="write a Chrome trace (open in ui.perfetto.dev or chrome://tracing; '-': standard output)")
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
    c.add_argument("--csv", metavar="PATH", help="write the comparison table as CSV ('-': standard output)")
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
    # options that take a value: their value may start with '-' (--input -1x3 is a bad shape)
    parser.value_options = {o for sp in (p, s, c, k) for a in sp._actions if a.nargs is None and a.option_strings for o in a.option_strings}  # type: ignore[attr-defined]
    return parser


def _cmd_selfcheck(args: argparse.Namespace) -> int:
    from .errors import FxprofError
    from .selfcheck import selfcheck

    if args.iters < 1:
        raise FxprofError(f"bad --iters {args.iters}: must be >= 1")
    return 0 if selfcheck(device=args.device, iters=args.iters).passed else 1


def _attach_dash_values(argv: list[str], options: set[str]) -> list[str]:
    """``--input -1x3`` -> ``--input=-1x3``: argparse takes a value that starts with '-' for an
    option and says "expected one argument"; the value's own check words it better."""
    out: list[str] = []
    i = 0
    while i < len(argv):
        token = argv[i]
        if token == "--":
            return out + argv[i:]
        nxt = argv[i + 1] if i + 1 < len(argv) else None
        if token in options and nxt is not None and nxt.startswith("-") and nxt != "-" and nxt.split("=")[0] not in options | {"-h", "--help"}:
            out.append(f"{token}={nxt}")
            i += 2
            continue
        out.append(token)
        i += 1
    return out


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
    model_file = args.model.rpartition(":")[0] if ":" in args.model else None
    if rank == 0:  # under torchrun only rank 0 writes
        _check_outputs({"--csv": args.csv, "--json": args.json, "--trace": args.trace},
                       inputs=[model_file] if model_file and os.path.isfile(model_file) else [])

    if args.optimizer and not args.backward:
        raise FxprofError("--optimizer applies to training steps: add --backward")
    model = load_model(args.model)
    model = model.train() if args.backward else model.eval()  # a training step runs in train mode
    try:
        model = model.to(device=device, dtype=dtype)
        inputs = [make_input(shape, dt, dtype, device) for shape, dt in specs]
    except (RuntimeError, AssertionError) as exc:
        raise FxprofError(f"cannot put the model and inputs on {device} as {args.dtype}: {exc}") from exc
    try:
        training = {}
        if args.backward:
            from .training import make_optimizer

            training = dict(backward=True, optimizer=make_optimizer(args.optimizer, model) if args.optimizer else None)
        prof = profile(model, *inputs, warmup=args.warmup, warmup_ms=args.warmup_ms, iters=args.iters, timer=args.timer, name=args.model, progress=not args.quiet and rank == 0, capture=args.capture, mode=args.mode, **training)
    except BaseException as exc:
        partial = getattr(exc, "profile", None)
        if partial is not None and not is_initialized():  # keep what was measured: write it and show it, then fail
            failures, _ = _emit(partial, args)
            for line in failures:
                _print(f"fxprof: {line}", sys.stderr)
        raise
    prof = gather(prof)  # under torchrun: every rank's samples on rank 0, None elsewhere
    if prof is None:
        return 0
    failures, signals = _emit(prof, args)
    if failures:
        raise FxprofError("; ".join(failures))
    if signals:  # interrupted while saving: everything was written; now stop as asked
        raise _Terminated() if signal.SIGTERM in signals else KeyboardInterrupt()
    return 0


def _emit(prof, args: argparse.Namespace) -> tuple[list[str], list[int]]:
    """Write every output asked for, each on its own (one failing loses no other), the whole
    profile first; then print the summary. If the profile could not be saved where asked, save
    it where it can be. Ctrl-C and SIGTERM wait until this is done. Returns what failed, as
    messages, and the signals that arrived meanwhile."""
    prof.keep_outliers = args.keep_outliers
    outputs = [("json", args.json, prof.save), ("csv", args.csv, prof.to_csv),
               ("trace", args.trace, lambda path: prof.to_chrome_trace(path, runs=args.trace_runs))]
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
        if failures and not any(line.startswith("wrote json") for line in written):
            failures.append(_rescue(prof))
        _print(prof.summary(**_view(args)), report)
        for line in sorted(written, key=lambda line: ("wrote csv", "wrote json", "wrote trace").index(line.split(":")[0])):
            _print(line, report)  # in the order of the options, whatever order they were written in
    return failures, signals


def _rescue(prof) -> str:
    """Save the whole profile somewhere that works (here, else the temporary folder); say where."""
    import datetime
    import tempfile

    model = re.sub(r"[^A-Za-z0-9_.-]+", "_", str(prof.meta.get("model", "model")))[:60]
    name = f"fxprof-{model}-{datetime.datetime.now().strftime('%Y%m%d-%H%M%S')}-{os.getpid()}.json"
    tried = []
    for folder in (os.getcwd(), tempfile.gettempdir()):
        path = os.path.join(folder, name)
        try:
            prof.save(path)
            return f"the whole profile was saved to {path!r} instead (fxprof show {path})"
        except Exception as exc:
            tried.append(f"{folder!r}: {getattr(exc, 'reason', None) or exc}")
    return f"the profile could not be saved anywhere ({'; '.join(tried)})"


def _check_outputs(outputs: dict[str, str | None], inputs: Sequence[str] = ()) -> None:
    """Before anything runs: no empty path, no two outputs on one file (or both on standard
    output), no output on an input, and every output writable."""
    from .errors import FxprofError

    given = {flag: path for flag, path in outputs.items() if path is not None}
    for flag, path in given.items():
        if path == "":
            raise FxprofError(f"{flag} was given an empty path; give a file path, or '-' for standard output")
    flags = list(given)
    for i, first in enumerate(flags):
        for second in flags[i + 1:]:
            if _same_file(given[first], given[second]):
                where = "standard output" if given[first] == "-" else repr(given[first])
                raise FxprofError(f"{first} and {second} both write {where}; give each output its own path")
    for flag, path in given.items():
        for source in inputs:
            if path != "-" and _same_file(path, source):
                raise FxprofError(f"{flag} {path!r} is an input of this command; writing it would destroy it. Give another path")
        if path != "-":
            _check_writable(path)


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

    from .errors import ProfileWriteError

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


def _cmd_show(args: argparse.Namespace) -> int:
    from .io import read_any
    from .render import render_body

    _check_view(args)
    loaded = read_any(args.file)
    if isinstance(loaded, __import__("pandas").DataFrame):
        _print(f"fxprof: per-node table from {args.file} (a CSV holds no raw samples and no run header)\n")
        _print(render_body(loaded, **_view(args)))
    else:
        loaded.keep_outliers = args.keep_outliers
        _print(loaded.summary(**_view(args)))
    return 0


def _cmd_compare(args: argparse.Namespace) -> int:
    from .compare import compare
    from .io import read_any, write_csv
    from .render import render_compare

    if args.top < 0:
        raise ValueError(f"bad --top {args.top}: must be >= 0 (0 shows all)")
    _check_outputs({"--csv": args.csv}, inputs=[args.a, args.b])
    keep = True if args.keep_outliers else None
    diff = compare(read_any(args.a), read_any(args.b), alpha=args.alpha, min_effect=args.min_effect, keep_outliers=keep, warn=False)
    if args.csv is not None:
        write_csv(diff, args.csv)
    _print(render_compare(diff, args.a, args.b, top=args.top or None), sys.stderr if args.csv == "-" else sys.stdout)
    return 0


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
    args = parser.parse_args(_attach_dash_values(argv, parser.value_options))  # type: ignore[attr-defined]
    if not getattr(args, "handler", None):
        parser.print_help()
        return 2
    from .errors import FxprofError

    try:
        with _sigterm_as_interrupt():
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
        text = str(exc).strip()
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
