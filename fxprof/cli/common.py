"""What every command of the command line shares: the parser class, the table options, the
up-front checks of outputs and columns, printing, and the exit on a signal.

Imports no torch (``fxprof --help`` answers at once)."""

from __future__ import annotations

import argparse
import contextlib
import difflib
import os
import re
import signal
import sys
import threading
from typing import TYPE_CHECKING, Any, Iterator, Sequence

if TYPE_CHECKING:
    from ..views.options import ViewOptions

from ..vocab import GROUP_KEYS

#: a roll-up's columns beyond ``GROUP_COLUMNS`` in a training step (see fxprof.core.rollup)
PHASE_COLUMNS = ("forward_ms", "loss_ms", "backward_ms", "optimizer_ms", "bwd_fwd_ratio")

#: the --sort and --columns help of the per-node table (profile, show)
NODE_SORT = ("column to sort by: any column of the table, or node; with --group-by, a roll-up column "
             "(nodes, mean_ms, median_ms, pct, flops, flops_pct) or the key (default: pct)")
NODE_COLUMNS = ("columns to show, comma-separated: any column of profile.df (kind, scope, median_ms, pct, "
                "flops, output_shape...); with --group-by, roll-up columns")


class Parser(argparse.ArgumentParser):
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


def table_options(p: argparse.ArgumentParser, sort_help: str, columns_help: str, groups: bool = True) -> None:
    """The options of a table: --sort, --ascending, --top, --columns, --keep-outliers and, with
    ``groups``, the roll-up's --group-by, --depth and --rank-bookkeeping."""
    t = p.add_argument_group("the table")
    t.add_argument("--sort", metavar="COLUMN", help=sort_help)
    t.add_argument("--ascending", action="store_true", help="sort smallest first (default: largest first)")
    t.add_argument("--top", type=int, default=20, metavar="N", help="rows to show; 0 shows all (default: 20)")
    t.add_argument("--columns", metavar="A,B,C", help=columns_help)
    if groups:
        t.add_argument("--group-by", choices=GROUP_KEYS, metavar="KEY",
                       help="roll node times up by KEY: op, module_type, range (record_function), scope (module "
                            "path), graph, phase (training step), comm (collectives vs computation), role (what each row is: "
                            "model, plumbing, range, collective, fsdp...), rank "
                            "(one row per torch.distributed rank)")
        t.add_argument("--depth", type=int, metavar="N", help="module depth for --group-by scope (1: layer1, 2: layer1.0; default: 1)")
        t.add_argument("--rank-bookkeeping", action="store_true",
                       help="rank the enter/exit nodes of record_function ranges with the other nodes; by default a "
                            "sorted table leaves them out and states their count and share on a line of its own")
    t.add_argument("--keep-outliers", action="store_true",
                   help="keep outlier runs (far slower than the rest) in the statistics; by default they are left "
                        "out and the header says which")


def attach_dash_values(argv: list[str], options: set[str], known: set[str] = frozenset()) -> list[str]:
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


def bad(message: str) -> Exception:
    from ..errors import FxprofError  # light: errors.py imports no torch

    return FxprofError(message)


def check_top(args: argparse.Namespace) -> None:
    if args.top < 0:
        raise bad(f"bad --top {args.top}: must be >= 0 (0 shows all)")


def check_groups(args: argparse.Namespace) -> None:
    """--depth and --group-by rank of a per-node table (profile, show)."""
    if args.depth is not None:
        if args.depth < 1:
            raise bad(f"bad --depth {args.depth}: must be >= 1")
        if args.group_by != "scope":
            raise bad("--depth applies to --group-by scope only; add --group-by scope or drop --depth")
    if args.group_by == "rank" and (args.sort or args.columns):
        raise bad("--group-by rank shows a fixed table (one row per rank); drop --sort and --columns")


def check_plotly(what: str) -> None:
    """The HTML report needs plotly: say so before anything runs (found without importing it)."""
    import importlib.util

    try:
        found = importlib.util.find_spec("plotly") is not None
    except (ImportError, ValueError):  # a broken or blocked install
        found = False
    if not found:
        raise bad(f"{what} writes an HTML report, which needs plotly: pip install plotly "
                   f"(in a checkout of fxprof: pip install -e '.[report]')")


def max_threads() -> int:
    """The most --threads accepted: 4 per core, at least 1024 (100000 was a MemoryError)."""
    return max(1024, 4 * (os.cpu_count() or 1))


def add_input_option(group: Any) -> None:
    """``--input [NAME=]SHAPE[:DTYPE]`` (repeatable), as profile, whatif and ab take it."""
    group.add_argument("--input", action="append", metavar="[NAME=]SHAPE[:DTYPE]",
                       help="an input: 1x3x224x224, 2x128:int64, or a keyword input ids=2x128:int64; repeat for "
                            "several (default: 1x3x224x224)")


def add_device_option(group: Any, what: str = "the model and inputs") -> None:
    """``--device`` (default cpu), for ``what``."""
    group.add_argument("--device", default="cpu", help=f"device for {what}: cpu, cuda, cuda:1 (default: cpu)")


def check_counts(*counts: tuple[str, int | None, int]) -> None:
    """Each ``(option, value, least)``: a given value below its least is a usage error."""
    for label, value, minimum in counts:
        if value is not None and value < minimum:
            raise bad(f"bad {label} {value}: must be >= {minimum}")


def check_threads(threads: int | None) -> None:
    """``--threads``: at least 1, at most :func:`max_threads`."""
    check_counts(("--threads", threads, 1))
    if threads is not None and threads > max_threads():
        raise bad(f"bad --threads {threads}: at most {max_threads()} on this machine")


def check_verdict_rules(alpha: float, min_effect: float) -> None:
    """``--alpha`` (a level between 0 and 1) and ``--min-effect`` (a finite fraction >= 0): the
    rules of compare's, whatif's and ab's verdicts."""
    import math

    if not 0.0 < alpha < 1.0:
        raise bad(f"bad --alpha {alpha}: a significance level between 0 and 1, e.g. 0.05")
    if not math.isfinite(min_effect) or min_effect < 0:
        raise bad(f"bad --min-effect {min_effect}: a fraction >= 0, e.g. 0.10 for 10%")


def this_rank_writes() -> bool:
    """False on the ranks other than 0 of a ``torchrun`` job (read from the environment, so
    that no torch is imported to know it)."""
    return os.environ.get("RANK", "0").strip() in ("", "0") or "WORLD_SIZE" not in os.environ


def check_node_view(args: argparse.Namespace, training: bool, ranked: bool) -> None:
    """--sort and --columns name columns of the per-node table or of its --group-by roll-up;
    ``training``: a training step's phase columns may be asked for; ``ranked``: the per-rank
    columns may be."""
    if args.group_by == "rank":
        return  # a fixed table; the checks refuse --sort and --columns with it
    elif args.group_by is not None:
        from ..views.text import GROUP_COLUMNS

        allowed = [*GROUP_COLUMNS, *(PHASE_COLUMNS if training else ())]
        sortable = [*allowed, args.group_by]
    else:
        from ..core.profile import TABLE_COLUMNS
        from ..core.rankstats import RANK_TABLE_COLUMNS

        allowed = [*TABLE_COLUMNS, *(RANK_TABLE_COLUMNS if ranked else ())]
        sortable = [*allowed, "node"]
    check_columns(args, allowed, sortable, "a --group-by table" if args.group_by else "the table")


def check_columns(args: argparse.Namespace, allowed: Sequence[str], sortable: Sequence[str], what: str = "the table") -> None:
    """--sort names one of ``sortable``, --columns only ``allowed`` ones; ``what`` names the table.
    A header as the table shows it (``a`` for ``a_ms``, ``median``, ``delta_pts``) names its column:
    ``args`` is rewritten to the column names."""
    from ..views.tables import display_name

    shown = {display_name(c): c for c in sortable if display_name(c) not in sortable}
    if args.sort is not None:
        args.sort = shown.get(args.sort, args.sort)
    if args.columns:
        args.columns = ",".join(shown.get(c, c) for c in _columns(args.columns) or [])
    if args.sort is not None and args.sort not in sortable:
        raise bad(f"bad --sort {args.sort!r}{_did_you_mean(args.sort, sortable)}: {what} has {', '.join(sortable)}")
    unknown = [c for c in _columns(args.columns) or [] if c not in allowed]
    if unknown:
        hints = "".join(_did_you_mean(c, allowed) for c in unknown)
        raise bad(f"bad --columns {', '.join(unknown)}{hints}: {what} has {', '.join(allowed)}")


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
            raise bad(f"bad --concrete {item!r}: expected NAME=VALUE, e.g. use_cache=False")
        if len(text) > _MAX_LITERAL:
            raise bad(f"bad --concrete {name.strip()}=...: its value is {len(text):,} characters long; a fixed argument "
                       f"is a short literal (at most {_MAX_LITERAL:,} characters)")
        try:
            out[name.strip()] = ast.literal_eval(text.strip())
        except (RecursionError, MemoryError):  # Python's parser and literal_eval recurse on nesting
            raise bad(f"bad --concrete {_short(item)}: the value is nested too deeply to read as a literal; "
                       f"write None, True, 3, 0.5, 'text' or a shallow tuple") from None
        except (ValueError, SyntaxError) as exc:
            raise bad(f"bad --concrete {item!r}: {text!r} is not a Python literal; write None, True, 3, 0.5 or 'text'") from exc
    return out


def check_outputs(outputs: dict[str, str | None], inputs: Sequence[str] = ()) -> None:
    """Before anything runs: no empty path, no two outputs on one file (or both on standard
    output), no output on an input, and every output writable."""
    given = {flag: path for flag, path in outputs.items() if path is not None}
    for flag, path in given.items():
        if path == "":
            raise bad(f"{flag} was given an empty path; give a file path, or '-' for standard output")
    flags = list(given)
    for i, first in enumerate(flags):
        for second in flags[i + 1:]:
            if same_file(given[first], given[second]):
                where = "standard output" if given[first] == "-" else repr(given[first])
                raise bad(f"{first} and {second} both write {where}; give each output its own path")
    check_not_inputs(given, inputs)
    for flag, path in given.items():
        if path != "-":
            _check_writable(path)
        if flag == "--json":
            from ..io import profile_format

            try:
                profile_format(path)
            except ValueError as exc:
                raise bad(f"--json: {exc}") from None


def check_folder_output(flag: str, path: str | None, files: Sequence[str] = ()) -> None:
    """Before anything runs: ``path`` (an output folder, made if missing) is not a file, its
    nearest existing parent is a folder fxprof can create files in, and none of ``files`` (the
    names written into it) is a folder."""
    if path is None:
        return
    if path in ("", "-"):
        raise bad(f"{flag} was given {'an empty path' if not path else '-'}; give a folder to save into")
    if os.path.exists(path) and not os.path.isdir(path):
        raise bad(f"{flag} {path!r} is an existing file; {flag} saves into a folder (made if missing): give a "
                   f"folder's path, or remove the file")
    parent = os.path.realpath(path)
    while not os.path.isdir(parent):
        above = os.path.dirname(parent)
        if above == parent or (os.path.lexists(parent) and not os.path.isdir(parent)):
            raise bad(f"{flag} {path!r}: {parent!r} is a file, so the folder cannot be made there; give another path")
        parent = above
    for name in files:
        if os.path.isdir(os.path.join(path, name)):
            raise bad(f"{flag} {path!r} holds a folder named {name!r}, where the result's file goes; give another folder")
    _check_writable(os.path.join(parent, ".fxprof-probe"))


def lost_output(exc: BaseException) -> Exception:
    """The error of an output that could not be written after the work was done. The command's
    process ends with it, so, unlike in Python, what was computed is gone: say so, and how to
    get it (the outputs written before this one are complete)."""
    path = getattr(exc, "path", None) or getattr(exc, "filename", None)  # fxprof's write error, or an OSError
    reason = getattr(exc, "reason", None) or getattr(exc, "strerror", None)
    what = f"cannot write {path!r}: {reason}" if path is not None and reason else first_line(exc).split(". Nothing was lost")[0]
    return bad(f"{what}. This output is lost: the results were computed but fxprof exits without them (any output "
                f"reported as written above is complete). Run the command again with a writable path")


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


def check_not_inputs(outputs: dict[str, str | None], inputs: Sequence[str]) -> None:
    """No output on an input of the command (the model's source included) or on any existing
    source file."""
    for flag, path in outputs.items():
        if path is None or path == "-":
            continue
        for source in inputs:
            if same_file(path, source):
                raise bad(f"{flag} {path!r} is an input of this command; writing it would destroy it. Give another path")
        if os.path.isfile(path) and os.path.realpath(path).lower().endswith(_SOURCE_SUFFIXES):
            raise bad(f"{flag} {path!r} is an existing source file ({os.path.splitext(path)[1]}); fxprof never "
                       f"writes its outputs over code. Give another path, e.g. one ending in .json, .csv or .npz")


def same_file(a: str, b: str) -> bool:
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
    from ..io.atomic import folder_problem

    target = os.path.realpath(path)
    directory = os.path.dirname(target)
    if os.path.isdir(path):
        raise ProfileWriteError(f"cannot write {path!r}: it is a directory; give a file path")
    with contextlib.suppress(OSError):
        if not stat.S_ISREG(os.stat(target).st_mode):  # a device or FIFO: written through
            if not os.access(target, os.W_OK):
                raise ProfileWriteError(f"cannot write {path!r}: it is not writable")
            return
    problem = folder_problem(path)  # a part of the path that is a file, or a folder missing
    if problem is not None:
        raise ProfileWriteError(f"cannot write {path!r}: {problem}")
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


def view_options(args: argparse.Namespace, stream: Any = None) -> "ViewOptions":
    """How the table is shown: sorting, rows, columns, and the width of ``stream`` (stdout)."""
    from ..views.options import ViewOptions
    from ..views.tables import terminal_width

    view = ViewOptions.of(sort=args.sort, top=args.top, columns=_columns(args.columns), ascending=args.ascending,
                          width=terminal_width(stream))
    if args.command != "compare":
        view = view.but(group_by=args.group_by, depth=args.depth or 1, sort="pct" if args.sort is None else args.sort,
                        bookkeeping=args.rank_bookkeeping)
    return view


# ------------------------------------------------------------------------ output
def first_line(exc: BaseException) -> str:
    """An error's message without the C++ frames torch appends ("Exception raised from ...")."""
    return str(exc).split("Exception raised from")[0].strip() or type(exc).__name__


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised like Ctrl-C so that what was measured is handed back and saved."""


#: C0 and C1 control characters (but the newline), DEL, and the bidirectional overrides
_CONTROL = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def _printable(text: str) -> str:
    """``text`` with every control character escaped (``\\x1b``): a file's strings never reach
    the terminal as commands (window titles, clearing the screen, moving the cursor)."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}" if ord(m.group()) < 0x100 else f"\\u{ord(m.group()):04x}", text)


def echo(text: str, stream: Any = None) -> None:
    print(_printable(text), file=stream if stream is not None else sys.stdout)


@contextlib.contextmanager
def signals_deferred() -> Iterator[list[int]]:
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
