"""The ``fxprof`` command line: the dispatcher.

Each command is a module of this package with its parser piece (``add_parser``), its up-front
checks (``check``) and its run (``run``); :data:`COMMANDS` lists them. Adding a command is one
new module and one line there. Importing this module imports no torch: ``fxprof --help`` and
``--version`` answer at once, and ``fxprof profile`` shows its progress bar before torch is
loaded. Every option and every combination of options is checked before anything runs
(:func:`check_args`).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
import threading
import traceback
from typing import Any, Iterator, Sequence

from ..vocab import __version__
from . import ab, compare, generate, peaks, profile, report, selfcheck, show, whatif
from .common import Parser, Terminated, attach_dash_values, echo, first_line, lost_output

#: the commands, in the order of ``fxprof --help``: one module each
COMMANDS = (profile, show, compare, ab, report, selfcheck, peaks, whatif, generate)

DESCRIPTION = ("Time every node of a PyTorch model's torch.fx graph, on the CPU or the GPU.\n\ncommands:\n"
               + "".join(f"  {c.USAGE:<16}{c.SUMMARY}\n" for c in COMMANDS)
               + "\nRun `fxprof COMMAND --help` for a command's options and examples.\n")

TOP_EXAMPLES = """\
examples:
  fxprof profile resnet18 --input 1x3x64x64 --json before.json
  fxprof show before.json --group-by scope --depth 2
  fxprof compare before.json after.json --sort ratio
  fxprof report before.json -o before.html
  fxprof selfcheck
"""


def build_parser() -> argparse.ArgumentParser:
    """The whole command line: the global options, then each command's own piece. Global
    options (``--debug``, ``--quiet``, ``--version``) are accepted before or after the command."""
    common = argparse.ArgumentParser(add_help=False)
    glob = common.add_argument_group("global options (before or after the command)")
    glob.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help="show the full traceback on errors")
    glob.add_argument("--quiet", action="store_true", default=argparse.SUPPRESS, help="no progress bar")
    glob.add_argument("--version", action="version", version=f"fxprof {__version__}")

    parser = Parser(prog="fxprof", description=DESCRIPTION, epilog=TOP_EXAMPLES, parents=[common],
                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)

    def command(name: str, help: str, description: str, epilog: str) -> argparse.ArgumentParser:
        return sub.add_parser(name, help=help, description=description, epilog=epilog, parents=[common],
                              formatter_class=argparse.RawDescriptionHelpFormatter)

    for module in COMMANDS:
        module.add_parser(command).set_defaults(handler=module.run, check=module.check)
    # options that take a value: their value may start with '-' (--input -1x3 is a bad shape)
    actions = [a for sp in sub.choices.values() for a in sp._actions if a.option_strings]
    parser.value_options = {o for a in actions if a.nargs is None for o in a.option_strings}  # type: ignore[attr-defined]
    parser.all_options = {o for a in actions for o in a.option_strings}  # type: ignore[attr-defined]
    return parser


def check_args(args: argparse.Namespace) -> None:
    """Every option and combination that can be judged without importing torch (the command's
    own ``check``); raises FxprofError naming the option and what to do. Column names are
    checked as each command starts, still before anything runs."""
    args.check(args)


@contextlib.contextmanager
def _sigterm_as_interrupt() -> Iterator[None]:
    """SIGTERM raises :class:`Terminated` (a KeyboardInterrupt): the runs so far are kept."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def terminate(signum: int, frame: Any) -> None:
        raise Terminated()

    previous = signal.signal(signal.SIGTERM, terminate)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(attach_dash_values(argv, parser.value_options, parser.all_options))  # type: ignore[attr-defined]
    args.debug = getattr(args, "debug", False)
    args.quiet = getattr(args, "quiet", False)
    if not getattr(args, "handler", None):
        parser.print_help()
        return 2
    from ..errors import FxprofError, ProfileWriteError, node_failure

    try:
        with _sigterm_as_interrupt():
            check_args(args)
            try:
                return args.handler(args)
            except ProfileWriteError as exc:  # after the work: its results end with this process
                raise lost_output(exc) from exc
    except Terminated:
        print("fxprof: terminated", file=sys.stderr)
        return 128 + signal.SIGTERM
    except KeyboardInterrupt:
        print("fxprof: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError as exc:
        if exc.filename:  # a file fxprof was writing: an error like any other
            echo(f"fxprof: error: cannot write {exc.filename!r}: {exc.strerror}", sys.stderr)
            return 2
        # the reader of stdout went away (`fxprof show x.json | head`): stop quietly, as a shell tool
        # killed by SIGPIPE would; stdout goes to /dev/null so the interpreter's last flush is silent
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 128 + signal.SIGPIPE
    except Exception as exc:  # every failure is one line; --debug shows the traceback
        if args.debug:
            traceback.print_exc()
        text = first_line(exc) if str(exc).strip() else ""
        if isinstance(exc, OSError) and not isinstance(exc, FxprofError) and exc.filename:
            text = f"cannot read {exc.filename!r}: {exc.strerror}"
        elif (failure := node_failure(exc)) is not None:  # the model's own error, raised in a node: name it
            text = "\n".join([f"node {failure.node!r} ({failure.op} {failure.target}) raised {type(exc).__name__}: {text}",
                              *failure.advice])
        elif not isinstance(exc, (FxprofError, ValueError, TypeError, OSError, ImportError)):
            text = f"{type(exc).__name__}: {text}" if text else type(exc).__name__
        # one line: multi-line messages (a node error lists what the node received) are joined
        line = "; ".join(part.strip() for part in text.splitlines() if part.strip()) or type(exc).__name__
        echo(f"fxprof: error: {line}", sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
