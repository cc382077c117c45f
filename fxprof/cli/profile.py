"""``fxprof profile MODEL``: trace a model, time every node, print the hotspots and write the
outputs asked for. Its parser piece, its up-front checks and its run."""

from __future__ import annotations

import argparse
import math
import os
import re
import signal
import sys
from typing import Any

from ..vocab import CAPTURES, COMPILE_MODES, CUDA_TIMERS, MODES, OPTIMIZERS, TIMER_NAMES
from .common import (
    NODE_COLUMNS,
    NODE_SORT,
    Terminated,
    add_device_option,
    add_input_option,
    bad,
    check_groups,
    check_node_view,
    check_not_inputs,
    check_outputs,
    check_plotly,
    check_top,
    echo,
    first_line,
    max_threads,
    model_sources,
    parse_concrete,
    signals_deferred,
    table_options,
    this_rank_writes,
    view_options,
)
from .input_spec import check_specs, missing_batch_hint
from .model_names import check_model_name

USAGE = "profile MODEL"
SUMMARY = "trace MODEL, warm it up, time every node over --iters runs, print hotspots"

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


def add_parser(command: Any) -> argparse.ArgumentParser:
    p = command("profile", "profile a model and print its hotspot table",
                "Trace MODEL, run --warmup untimed runs, then time every node of --iters runs and print the "
                "nodes that take the most time.", PROFILE_EXAMPLES)
    p.add_argument("model", metavar="MODEL", help="torchvision name (resnet18), package.module:factory, or path/to/file.py:factory")
    m = p.add_argument_group("model and inputs")
    add_input_option(m)
    m.add_argument("--no-input", action="store_true",
                   help="call the model with no inputs at all (a model whose forward takes none)")
    add_device_option(m)
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
    r.add_argument("--no-memory", action="store_true", help="skip the untimed memory pass (the mem_* columns and memory line; docs/memory.md)")
    r.add_argument("--threads", type=int, default=None, metavar="N", help="torch CPU threads (default: torch's choice); recorded in the profile")
    r.add_argument("--peaks", default=None, metavar="TFLOPS,GBPS|auto|quick|off",
                   help="the roofs of the roofline columns (roof_ms, roof_pct, headroom_ms, limit): your compute rate "
                        "in TFLOP/s and bandwidth in GB/s (e.g. a datasheet's: 0.1,20; optionally ,US for the per-op "
                        "floor), or auto: measured on this machine once, then cached (see 'fxprof peaks'); quick: "
                        "small measurement; off: none (default: auto, or the FXPROF_PEAKS environment variable)")
    table_options(p, NODE_SORT, NODE_COLUMNS)
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
    return p


def check(args: argparse.Namespace) -> None:
    """Every option and combination that can be judged without importing torch."""
    check_top(args)
    check_groups(args)
    if args.warmup_ms is not None and not math.isfinite(args.warmup_ms):  # inf warmed up forever; nan failed later
        raise bad(f"bad --warmup-ms {args.warmup_ms}: a number of milliseconds >= 0, e.g. 200")
    for label, value, minimum in (("--warmup", args.warmup, 0), ("--iters", args.iters, 1), ("--threads", args.threads, 1),
                                  ("--warmup-ms", args.warmup_ms, 0)):
        if value is not None and value < minimum:
            raise bad(f"bad {label} {value}: must be >= {minimum}")
    if args.threads is not None and args.threads > max_threads():
        raise bad(f"bad --threads {args.threads}: at most {max_threads()} on this machine ({os.cpu_count()} cores; "
                   f"torch starts a thread each)")
    if args.no_input and args.input:
        raise bad("--no-input calls the model with no inputs; drop it or the --input options")
    check_specs(args.input or [])  # the syntax, before torch is imported
    both = sorted(set(args.leaf_module or []) & set(args.trace_into or []))
    if both:
        raise bad(f"{', '.join(map(repr, both))} given to both --leaf-module (keep it whole) and --trace-into "
                   f"(trace inside it); give each module to one of them")
    if args.mode == "isolated":
        if args.trace:
            raise bad("--mode isolated has no timeline to trace (each node is re-run on its own); drop --trace or use --mode timed")
        if args.timer == "kernel":
            raise bad("--timer kernel works with --mode timed only; use --timer cuda for --mode isolated")
        if args.backward:
            raise bad("--backward works with --mode timed only (whole training steps); drop --mode isolated")
    if args.optimizer and not args.backward:
        raise bad("--optimizer applies to training steps: add --backward")
    if args.peaks is not None and args.peaks.strip().lower() not in ("auto", "quick", "off"):
        from ..core.roofline import parse_peaks

        try:
            parse_peaks(args.peaks)
        except ValueError as exc:
            raise bad(f"bad --peaks {args.peaks!r}: {str(exc).removeprefix(f'bad peaks {args.peaks!r}: ')}") from exc
    if args.trace_runs and not args.trace:
        raise bad("--trace-runs chooses the runs of --trace; add --trace PATH")
    if args.trace_runs:
        from ..core.runs import parse_runs

        try:  # checked against --iters before a range is expanded (0-99999999999 was a MemoryError)
            parse_runs(args.trace_runs, limit=args.iters)
        except ValueError as exc:
            hint = " (each rank's own run numbers under torchrun)" if "past the last run" in str(exc) else ""
            raise bad(f"bad --trace-runs {args.trace_runs!r}: {exc}; --iters {args.iters}{hint}") from exc
    symbolic_only = [o for o, v in (("--leaf-module", args.leaf_module), ("--trace-into", args.trace_into),
                                    ("--concrete", args.concrete)) if v]
    if symbolic_only and args.capture in ("dynamo", "export"):
        raise bad(f"{', '.join(symbolic_only)} apply to symbolic tracing; --capture {args.capture} traces inside "
                   f"every module by itself. Use --capture symbolic (or auto), or drop them")
    if symbolic_only and args.backward:
        raise bad(f"{', '.join(symbolic_only)} apply to symbolic tracing; --backward takes its graphs from "
                   f"AOTAutograd, which traces inside every module by itself. Drop them")
    if args.backward and args.capture in ("symbolic", "export"):
        raise bad(f"--backward takes the forward and backward graphs from AOTAutograd; --capture {args.capture} "
                   f"cannot give a backward graph. Use --capture auto")
    if args.compile_mode and not args.compile:
        raise bad("--compile-mode chooses how --compile compiles: add --compile")
    if args.compile:
        given = [o for o, on in (("--capture", args.capture != "auto"), ("--timer", args.timer != "auto"),
                                 ("--mode", args.mode != "timed"), ("--backward", args.backward),
                                 ("--warmup-ms", args.warmup_ms is not None), ("--leaf-module", args.leaf_module),
                                 ("--trace-into", args.trace_into), ("--concrete", args.concrete)) if on]
        if given:
            raise bad(f"{', '.join(given)} cannot be used with --compile (the compiled program's kernels are timed "
                       f"by torch.profiler in whole runs); drop them, or drop --compile to profile the eager graph")
    device = args.device.lower()
    if args.timer in CUDA_TIMERS and not device.startswith("cuda"):
        raise bad(f"--timer {args.timer} times a CUDA device, but --device is {args.device}; add --device cuda")
    parse_concrete(args.concrete or [])
    if this_rank_writes():  # under torchrun only rank 0 writes
        if args.html is not None:
            check_plotly("--html")
        check_outputs({"--csv": args.csv, "--json": args.json, "--trace": args.trace, "--html": args.html},
                       inputs=model_sources(args.model))


def _check_view(args: argparse.Namespace) -> None:
    # a training step's roll-up has a column per phase: only a profile of one has them; the per-rank
    # columns: only a gathered profile (being made under torchrun) has them
    check_node_view(args, training=args.backward, ranked="WORLD_SIZE" in os.environ and "RANK" in os.environ)


def run(args: argparse.Namespace) -> int:
    from ..views.progress import Progress

    # shown at once, before torch is imported; under torchrun only rank 0 shows one
    with Progress(enabled=not args.quiet and this_rank_writes()) as bar:
        bar.phase("importing torch")
        _check_view(args)
        # every option first, then a torchvision name, known from its files before the imports (34 s when misspelt)
        check_model_name(args.model)
        import torch  # noqa: F401  (what the bar was waiting for)

        from ..measure.distributed.ranks import is_initialized, launched, process_group_from_env

        bar.step()
        if launched() and not is_initialized():  # under torchrun: one process group around the command
            with process_group_from_env(args.device) as args.device:
                return _profile(args, bar)
        return _profile(args, bar)


def _profile(args: argparse.Namespace, bar: Any) -> int:
    import torch

    from ..api import profile
    from ..measure.distributed.ranks import gather, is_initialized
    from .models import build_inputs, device_option, float_dtype, load_model, resolve_modules

    dtype = float_dtype(args.dtype)
    device = device_option(args.device)
    if not args.no_input:
        build_inputs(args.input, dtype, device, parse_only=True)  # bad shapes fail before the model is built
    if args.threads is not None:
        torch.set_num_threads(args.threads)

    bar.phase("building the model")
    model = load_model(args.model)
    if this_rank_writes():  # the files the model came from, now that they are known (checked by name before)
        check_not_inputs({"--csv": args.csv, "--json": args.json, "--trace": args.trace}, _loaded_sources(model))
    model = model.train() if args.backward else model.eval()  # a training step runs in train mode
    leaf = resolve_modules("--leaf-module", args.leaf_module or [], model)
    into = "all" if "all" in (args.trace_into or []) else resolve_modules("--trace-into", args.trace_into or [], model)
    both = [m for m in leaf if into != "all" and m in into]  # two spellings of one class or path
    if both:
        names = ", ".join(m if isinstance(m, str) else f"{m.__module__}.{m.__qualname__}" for m in both)
        raise bad(f"{names} given to both --leaf-module (keep it whole) and --trace-into (trace inside it); "
                   f"give each module to one of them")
    try:
        model = model.to(device=device, dtype=dtype)
        positional, keywords = ([], {}) if args.no_input else build_inputs(args.input, dtype, device)
    except (RuntimeError, AssertionError, MemoryError) as exc:
        raise bad(f"cannot put the model and inputs on {device} as {args.dtype}: {first_line(exc)}") from exc
    bar.step()
    concrete = parse_concrete(args.concrete or [])
    both = sorted(set(concrete) & set(keywords))
    if both:
        raise bad(f"{', '.join(both)} given by both --input and --concrete; give each input once")
    options: dict[str, Any] = dict(warmup=args.warmup, warmup_ms=args.warmup_ms, iters=args.iters, timer=args.timer,
                                   name=args.model, progress=bar, capture=args.capture, mode=args.mode,
                                   peaks=peaks_option(args.peaks), memory=not args.no_memory)
    if args.compile:  # the compiled program's kernels: no capture, timer, progress or roofline options
        options = dict(warmup=args.warmup, iters=args.iters, name=args.model, memory=not args.no_memory,
                       compile={"mode": args.compile_mode} if args.compile_mode else True)
    elif args.backward:
        from ..measure.capture.training import make_optimizer

        options.update(backward=True, optimizer=make_optimizer(args.optimizer, model) if args.optimizer else None)
    else:
        options.update(leaf_modules=leaf, trace_into=into, concrete_args=concrete or None)
    try:  # a fixed argument is also passed, so the traced graph's check of its value holds
        prof = profile(model, *positional, model_kwargs={**keywords, **concrete} or None, **options)
    except BaseException as exc:
        missing_batch_hint(args.input or [], exc)
        partial = getattr(exc, "profile", None)
        if partial is not None and not is_initialized():  # keep what was measured: write it and show it, then fail
            bar.close()
            failures, _ = _emit(partial, args)
            for line in failures:
                echo(f"fxprof: {line}", sys.stderr)
        elif partial is not None:  # under torchrun the ranks cannot gather now: each keeps its own
            echo(f"fxprof: {_rescue(partial)}", sys.stderr)
        raise
    bar.close()
    try:
        prof = gather(prof)  # under torchrun: every rank's samples on rank 0, None elsewhere
    except Exception:  # a rank died or the gather failed: this rank's runs are not lost
        echo(f"fxprof: {_rescue(prof)}", sys.stderr)
        raise
    if prof is None:
        return 0
    failures, signals = _emit(prof, args)
    if failures:
        raise bad("; ".join(failures))
    if signals:  # interrupted while saving: everything was written; now stop as asked
        raise Terminated() if signal.SIGTERM in signals else KeyboardInterrupt()
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
    with signals_deferred() as signals:
        for label, path, write in outputs:
            if path is None:
                continue
            try:
                write(path)
                shown = "npz" if label == "json" and str(path).lower().endswith(".npz") else label  # what save() wrote
                written.append(f"wrote {shown}: {'standard output' if path == '-' else path}")
            except Exception as exc:  # one output failing must not cost the others
                failures.append(f"cannot write --{label} {path!r}: {getattr(exc, 'reason', None) or exc}")
        try:
            echo(render_summary(prof, view_options(args, report)), report)
        except Exception as exc:  # a table that cannot be shown must not cost the profile
            failures.append(f"cannot show the table: {exc}")
        if failures and not any(line.startswith(("wrote json", "wrote npz")) for line in written):
            failures.append(_rescue(prof))
        order = ("wrote csv", "wrote json", "wrote npz", "wrote trace", "wrote html")
        for line in sorted(written, key=lambda line: order.index(line.split(":")[0])):
            echo(line, report)  # in the order of the options, whatever order they were written in
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


def peaks_option(text: str | None) -> Any:
    """--peaks as fxprof.profile's ``peaks=``: auto (default; FXPROF_PEAKS may override), quick,
    off, or the user's TFLOPS,GBPS."""
    if text is None or text.strip().lower() == "auto":
        return "auto"
    if text.strip().lower() == "off":
        return None
    return text.strip().lower() if text.strip().lower() == "quick" else text
