"""The ``fxprof`` command line."""

from __future__ import annotations

import argparse
import sys
import traceback
from typing import Sequence

EXAMPLES = """\
examples:
  fxprof profile resnet18                           # CPU, 1x3x224x224, top 20 nodes
  fxprof profile resnet50 --input 32x3x224x224 --device cuda --dtype float16
  fxprof profile mypkg.models:build --input 2x128:int64 --csv run.csv --json run.json
  fxprof profile path/to/model.py:make_model --iters 50 --sort median_ms --top 0
"""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="fxprof",
        description="Time every node of a PyTorch model's torch.fx graph, on the CPU or GPU.",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--debug", action="store_true", help="show the full traceback on errors")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    p = sub.add_parser(
        "profile",
        help="profile a model and print its hotspot table",
        description="Trace MODEL, warm it up, time every node over --iters runs and print the hotspots.",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("model", metavar="MODEL", help="a torchvision model name (resnet18), or package.module:factory, or path/to/file.py:factory")
    p.add_argument("--input", action="append", metavar="SHAPE[:DTYPE]", help="an input, e.g. 1x3x224x224 or 2x128:int64; repeat for several (default: 1x3x224x224)")
    p.add_argument("--device", default="cpu", help="device for the model and inputs (default: cpu)")
    p.add_argument("--dtype", default="float32", help="dtype of the model and float inputs (default: float32)")
    p.add_argument("--warmup", type=int, default=5, help="discarded warm-up runs (default: 5)")
    p.add_argument("--iters", type=int, default=20, help="timed runs (default: 20)")
    p.add_argument("--timer", default="auto", choices=["auto", "cpu", "cuda", "sync"], help="how nodes are timed (default: auto)")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice); recorded in the profile")
    p.add_argument("--sort", default="pct", help="column to sort by, descending (default: pct)")
    p.add_argument("--top", type=int, default=20, help="rows to show; 0 shows all (default: 20)")
    p.add_argument("--csv", metavar="PATH", help="write the per-node table as CSV")
    p.add_argument("--json", metavar="PATH", help="save the whole profile (every sample) as JSON")
    p.set_defaults(handler=_cmd_profile)
    return parser


def _cmd_profile(args: argparse.Namespace) -> int:
    import torch

    from .api import profile
    from .errors import FxprofError
    from .models import DEFAULT_IMAGE_INPUT, _DTYPES, load_model, make_input, parse_input

    dtype = _DTYPES.get(args.dtype.lower())
    if dtype is None or not dtype.is_floating_point:
        raise FxprofError(f"bad --dtype {args.dtype!r}: use float32, float16, bfloat16 or float64")
    try:
        device = torch.device(args.device)
    except RuntimeError as exc:
        raise FxprofError(f"bad --device {args.device!r}: {exc}") from exc
    if device.type == "cuda" and not torch.cuda.is_available():
        raise FxprofError(f"--device {args.device} asked for, but torch.cuda.is_available() is False on this machine; use --device cpu")
    specs = [parse_input(s) for s in (args.input or [DEFAULT_IMAGE_INPUT])]
    if args.threads is not None:
        if args.threads < 1:
            raise FxprofError(f"bad --threads {args.threads}: must be >= 1")
        torch.set_num_threads(args.threads)

    model = load_model(args.model).eval().to(device=device, dtype=dtype)
    inputs = [make_input(shape, dt, dtype, device) for shape, dt in specs]
    prof = profile(model, *inputs, warmup=args.warmup, iters=args.iters, timer=args.timer, name=args.model)
    # write files before printing, so a bad path is reported before a long table
    if args.csv:
        prof.to_csv(args.csv)
    if args.json:
        prof.save(args.json)
    print(prof.summary(sort=args.sort, top=args.top or None))
    for label, path in (("csv", args.csv), ("json", args.json)):
        if path:
            print(f"wrote {label}: {path}")
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
    except (FxprofError, ValueError, TypeError, OSError) as exc:
        if args.debug:
            traceback.print_exc()
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        print(f"fxprof: error: {first}", file=sys.stderr)
        rest = str(exc).strip().splitlines()[1:]
        for line in rest[:12]:
            print(f"  {line}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
