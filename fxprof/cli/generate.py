"""``fxprof generate FILE.py:factory --prompt-len P --new-tokens N``: a causal LM's generation,
prefill and decode profiled node by node, token by token, against the memory floor.

The factory returns a causal LM (a Hugging Face ``...ForCausalLM``); the prompt is ``P`` token
ids drawn from its vocabulary with a fixed seed. Prints :meth:`Generation.summary`; ``--json``
saves the result (a folder: ``fxprof.load_generation`` reads it)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from .common import add_device_option, bad, echo, first_line

USAGE = "generate MODEL"
SUMMARY = "profile a causal LM's generate(): prefill and every decode step, against the memory floor"

GENERATE_EXAMPLES = """\
examples:
  fxprof generate mymodels.py:tiny_llama --prompt-len 32 --new-tokens 16
  fxprof generate mymodels.py:tiny_llama --new-tokens 64 --peaks 0.5,20 --json run_gen --html gen.html
  fxprof generate mypkg.lm:build --device cuda --dtype bfloat16 --batch 4
  fxprof generate mymodels.py:tiny_llama --compile --new-tokens 16        # Hugging Face's compiled decoding

The factory returns a causal LM whose generate() calls its forward once per token (Hugging Face
...ForCausalLM). Greedy decoding; the prompt is random token ids from the vocabulary (--seed).
"""


def add_parser(command: Any) -> argparse.ArgumentParser:
    g = command("generate", "profile a causal LM's generate(): prefill and each decode step",
                "Run MODEL.generate() twice in an fxprof session (a warm-up call that compiles, then a timed call): "
                "the prompt's forward (prefill) and every decode step are timed node by node; print prefill and "
                "decode speed, time per token against position, the share of attention, MLP, norms and the LM head "
                "per phase, the per-layer split, and a decode step's floor (the bytes it must read over the memory "
                "bandwidth).", GENERATE_EXAMPLES)
    g.add_argument("model", metavar="MODEL", help="package.module:factory or path/to/file.py:factory returning a causal LM")
    g.add_argument("--prompt-len", type=int, default=16, metavar="P", help="prompt length in tokens (default: 16)")
    g.add_argument("--new-tokens", type=int, default=16, metavar="N", help="tokens to generate (default: 16)")
    g.add_argument("--batch", type=int, default=1, metavar="B", help="prompts in the batch (default: 1)")
    g.add_argument("--seed", type=int, default=0, help="seed of the random prompt (default: 0)")
    add_device_option(g, "the model and prompt")
    g.add_argument("--dtype", default="float32", help="dtype of the model: float32, float16, bfloat16, float64 (default: float32)")
    g.add_argument("--threads", type=int, default=None, metavar="N", help="torch CPU threads (default: torch's choice)")
    g.add_argument("--compile", nargs="?", const="default", default=None, metavar="MODE",
                   help="compile the model's forward in place first (model.forward = torch.compile(model.forward, "
                        "mode=MODE), Hugging Face's recipe) and profile the compiled kernels per layer; MODE: default, "
                        "reduce-overhead, max-autotune, max-autotune-no-cudagraphs (default: default)")
    g.add_argument("--cache", choices=("dynamic", "static"), default=None,
                   help="the KV cache generate() uses: static (one decode graph for every position when compiled) or "
                        "dynamic (default: static with --compile, else the model's own)")
    g.add_argument("--peaks", default=None, metavar="TFLOPS,GBPS|auto|quick|off",
                   help="the memory bandwidth of the floor: measured (auto, the default; quick: a rough one), given "
                        "(0.5,20 for 0.5 TFLOP/s and 20 GB/s), or off")
    g.add_argument("--json", metavar="FOLDER", help="save the result into FOLDER (fxprof.load_generation reads it)")
    g.add_argument("--html", metavar="PATH", help="write a report page: the time-per-token curve with the floor, the "
                                                  "shares per phase, the per-layer split of both phases")
    return g


def check(args: argparse.Namespace) -> None:
    for label, value, minimum in (("--prompt-len", args.prompt_len, 1), ("--new-tokens", args.new_tokens, 1),
                                  ("--batch", args.batch, 1), ("--threads", args.threads, 1)):
        if value is not None and value < minimum:
            raise bad(f"bad {label} {value}: must be >= {minimum}")
    if ":" not in args.model:
        raise bad(f"bad MODEL {args.model!r}: give path/to/file.py:factory or package.module:factory (a function "
                   f"returning a causal LM)")
    if args.dtype not in ("float32", "float16", "bfloat16", "float64"):
        raise bad(f"bad --dtype {args.dtype!r}: use float32, float16, bfloat16 or float64")
    if args.peaks is not None and args.peaks.strip().lower() not in ("auto", "quick", "off"):
        from ..core.roofline import parse_peaks

        try:
            parse_peaks(args.peaks)
        except ValueError as exc:
            raise bad(f"bad --peaks {args.peaks!r}: {exc}") from exc
    if args.compile is not None:
        from ..vocab import COMPILE_MODES

        if args.compile not in COMPILE_MODES:
            raise bad(f"bad --compile {args.compile!r}: use one of {', '.join(COMPILE_MODES)}")
    if args.json == "":
        raise bad("--json was given an empty path; give a folder to save the result into")
    from .common import check_folder_output, check_not_inputs, check_outputs, model_sources, same_file

    if args.json is not None and args.html is not None and same_file(args.json, args.html):
        raise bad(f"--json and --html both write {args.json!r} (--json a folder, --html a file); give each its own path")
    check_not_inputs({"--json": args.json}, model_sources(args.model))
    check_folder_output("--json", args.json, ("prefill.json", "decode.json", "generation.json"))
    if args.html is not None:
        check_outputs({"--html": args.html}, inputs=model_sources(args.model))


def run(args: argparse.Namespace) -> int:
    import torch

    from ..generate import generate
    from .models import device_option, float_dtype, load_model
    from .profile import peaks_option

    device = device_option(args.device)
    dtype = float_dtype(args.dtype)
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    model = load_model(args.model)
    if not callable(getattr(model, "generate", None)) or getattr(model, "config", None) is None:
        raise bad(f"{args.model} returned a {type(model).__name__}, not a causal LM with generate() and a config "
                   f"(a Hugging Face ...ForCausalLM)")
    vocab = int(getattr(model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config,
                        "vocab_size", 0) or 0)
    if vocab < 1:
        raise bad(f"{type(model).__name__}'s config has no vocab_size to draw the prompt's token ids from")
    try:
        model = model.eval().to(device=device, dtype=dtype)
    except (RuntimeError, AssertionError, MemoryError) as exc:
        raise bad(f"cannot put the model on {device} as {args.dtype}: {first_line(exc)}") from exc
    ids = torch.randint(0, vocab, (args.batch, args.prompt_len), generator=torch.Generator().manual_seed(args.seed)).to(device)
    say = (lambda line: None) if args.quiet else (lambda line: print(f"fxprof generate: {line}", file=sys.stderr, flush=True))
    extra = {}
    cache = args.cache or ("static" if args.compile is not None else None)
    if cache is not None:
        extra["cache_implementation"] = cache
    if args.compile is not None:  # Hugging Face's recipe: the forward compiled in place, the model's own generate()
        model.forward = torch.compile(model.forward, mode=None if args.compile == "default" else args.compile)
    result = generate(model, ids, max_new_tokens=args.new_tokens, peaks=peaks_option(args.peaks), progress=say, **extra)
    echo(result.summary())
    if args.json is not None:
        try:
            result.save(args.json)
        except OSError as exc:  # its generation.json is written with open(): not a ProfileWriteError
            from ..errors import ProfileWriteError
            from .common import lost_output

            if isinstance(exc, ProfileWriteError):
                raise  # the dispatcher words it
            raise lost_output(exc) from exc
        echo(f"wrote generation: {args.json} (fxprof.load_generation reads it)")
    if args.html is not None:
        from ..views.generation import write_generation_html

        write_generation_html(result, args.html, title=args.model)
        echo(f"wrote html: {args.html}")
    return 0
