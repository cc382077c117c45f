"""``fxprof whatif MODEL --variants channels_last,compile,bf16``: the usual remedies, measured.

The baseline and each variant timed interleaved run by run, then profiled per block; prints
the ranked table ("channels_last: 1.8x faster [1.6, 2.0], layer4 2.9x, maxpool 0.8x") and,
with ``--html``, writes a report page."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from .common import (
    add_device_option,
    add_input_option,
    bad,
    check_counts,
    check_outputs,
    check_threads,
    check_verdict_rules,
    echo,
    first_line,
    model_sources,
)
from .input_spec import check_specs

USAGE = "whatif MODEL"
SUMMARY = "measure what channels_last, compile, bf16, inference_mode... would do to MODEL"

WHATIF_EXAMPLES = """\
examples:
  fxprof whatif resnet18 --variants channels_last,compile,inference_mode --input 1x3x64x64
  fxprof whatif resnet18 --variants bf16,fp16,threads=1,batch=8 --iters 30
  fxprof whatif mypkg.nets:encoder --input ids=2x128:int64 --variants compile:max-autotune --html whatif.html

Variants: channels_last, compile, compile:MODE (default, reduce-overhead, max-autotune,
max-autotune-no-cudagraphs), bf16 and fp16 (autocast), inference_mode, threads=N, batch=N
(the inputs' first dimension made N; compared per sample). A variant that fails is a row
with its reason. From Python, fxprof.whatif also takes variants of your own.
"""


def add_parser(command: Any) -> argparse.ArgumentParser:
    w = command("whatif", "measure what the usual remedies would do to a model, per block",
                "Profile MODEL as given (the baseline) and with each --variants change, timed interleaved run by run "
                "(so a drifting machine slows all alike); print each variant's whole-run speed-up over the baseline "
                "with its 95% interval and verdict (faster, slower, same, too few runs: compare's rules), best first, "
                "with the blocks that gained and lost most and, where the roofline has roofs, why.", WHATIF_EXAMPLES)
    w.add_argument("model", metavar="MODEL", help="torchvision name (resnet18), package.module:factory, or path/to/file.py:factory")
    w.add_argument("--variants", default="channels_last,compile,inference_mode", metavar="A,B,C",
                   help="comma-separated: channels_last, compile[:MODE], bf16, fp16, inference_mode, threads=N, batch=N "
                        "(default: channels_last,compile,inference_mode)")
    m = w.add_argument_group("model and inputs")
    add_input_option(m)
    add_device_option(m)
    r = w.add_argument_group("running")
    r.add_argument("--iters", type=int, default=20, metavar="N",
                   help="interleaved rounds: each variant runs once a round (default: 20)")
    r.add_argument("--warmup", type=int, default=3, metavar="N", help="untimed calls of each variant first (default: 3)")
    r.add_argument("--depth", type=int, default=1, metavar="N", help="module depth of the blocks (1: layer1, 2: layer1.0; default: 1)")
    r.add_argument("--no-blocks", action="store_true", help="whole-run timing only: no per-block profiles (faster)")
    r.add_argument("--threads", type=int, default=None, metavar="N", help="torch CPU threads of the baseline (default: torch's choice)")
    r.add_argument("--peaks", default=None, metavar="TFLOPS,GBPS|auto|quick|off",
                   help="the roofs for the roofline's 'why', as fxprof profile --peaks (default: auto)")
    v = w.add_argument_group("verdicts")
    v.add_argument("--alpha", type=float, default=0.05, help="significance level (default: 0.05)")
    v.add_argument("--min-effect", type=float, default=0.10,
                   help="smallest change in the median run that gets a faster/slower verdict, as a fraction (default: 0.10)")
    o = w.add_argument_group("outputs")
    o.add_argument("--csv", metavar="PATH", help="write the variants table as CSV ('-': standard output)")
    o.add_argument("--html", metavar="PATH", help="write a report page: the variants side by side, per block")
    return w


def check(args: argparse.Namespace) -> None:
    from .model_names import check_model_name

    check_counts(("--iters", args.iters, 2), ("--warmup", args.warmup, 0), ("--depth", args.depth, 1))
    check_threads(args.threads)
    check_verdict_rules(args.alpha, args.min_effect)
    specs = _variants(args.variants)
    if not specs:
        raise bad("--variants is empty: name at least one, e.g. --variants channels_last,compile")
    from ..vocab import COMPILE_MODES

    for spec in specs:  # the same rules as fxprof.measure.whatif.variants.parse_variant, without importing torch
        name, _, value = spec.partition("=")
        ok = (spec in ("channels_last", "bf16", "fp16", "inference_mode", "compile")
              or (spec.startswith("compile:") and spec.partition(":")[2] in COMPILE_MODES)
              or (name in ("threads", "batch") and value.isdigit() and int(value) >= 1))
        if not ok:
            raise bad(f"bad --variants {spec!r}: use channels_last, compile, compile:MODE ({', '.join(COMPILE_MODES)}), "
                       f"bf16, fp16, inference_mode, threads=N or batch=N (N >= 1)")
    check_specs(args.input or [])  # the syntax, before torch is imported
    if len(set(specs)) != len(specs):
        raise bad(f"--variants names {', '.join(sorted({s for s in specs if specs.count(s) > 1}))} twice")
    if args.peaks is not None and args.peaks.strip().lower() not in ("auto", "quick", "off"):
        from ..core.roofline import parse_peaks

        try:
            parse_peaks(args.peaks)
        except ValueError as exc:
            raise bad(f"bad --peaks {args.peaks!r}: {exc}") from exc
    check_outputs({"--csv": args.csv, "--html": args.html}, inputs=model_sources(args.model))
    check_model_name(args.model)  # last, after the options; before torch: a misspelt name waited for the imports


def _variants(text: str) -> list[str]:
    return [part.strip() for part in text.split(",") if part.strip()]


def run(args: argparse.Namespace) -> int:
    import torch

    from ..whatif import whatif
    from .models import build_inputs, device_option, load_model
    from .profile import peaks_option

    device = device_option(args.device)
    build_inputs(args.input, torch.float32, device, parse_only=True)
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    model = load_model(args.model).eval()
    try:
        model = model.to(device)
        positional, keywords = build_inputs(args.input, torch.float32, device)
    except (RuntimeError, AssertionError, MemoryError) as exc:
        raise bad(f"cannot put the model and inputs on {device}: {first_line(exc)}") from exc
    say = (lambda line: None) if args.quiet else (lambda line: print(f"fxprof whatif: {line}", file=sys.stderr, flush=True))
    result = whatif(model, tuple(positional), _variants(args.variants), iters=args.iters, warmup=args.warmup,
                    blocks=not args.no_blocks, depth=args.depth, alpha=args.alpha, min_effect=args.min_effect,
                    peaks=peaks_option(args.peaks), model_kwargs=keywords or None, progress=say)
    from ..views.whatif import render_whatif, write_whatif_html

    report = sys.stderr if args.csv == "-" else sys.stdout
    echo(render_whatif(result, args.model), report)
    if args.csv is not None:
        from ..io.atomic import atomic_write

        atomic_write(args.csv, lambda handle: result.table.to_csv(handle, index=True))
        echo(f"wrote csv: {'standard output' if args.csv == '-' else args.csv}", report)
    if args.html is not None:
        write_whatif_html(result, args.html, title=args.model)
        echo(f"wrote html: {args.html}", report)
    return 0
