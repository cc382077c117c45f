"""``fxprof ab A B``: two models timed interleaved in one process, B against A, with a verdict:
the CI gate that drift between processes cannot fool.

Two profiles taken in two processes drift apart by up to 10% on a quiet 2-core machine with no
change at all (docs/ci.md), as much as the slowdown a gate should catch. Here A and B run in one
process, one call each a round, which goes first alternating: whatever the machine does, it does
to both. The timing is :func:`fxprof.whatif`'s (``B`` is a variant of ``A``), the verdict
:func:`fxprof.core.gate.paired_run_verdict`'s (compare's rules on the rounds' paired ratios), the
gate :func:`fxprof.core.gate.gate`'s."""

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

USAGE = "ab A B"
#: the default smallest effect: half compare's 10%. Interleaved A/A pairs read 0.90-1.09 in the
#: median round on a quiet 2-core machine but never significant (sign test p >= 0.2 in 40 pairs),
#: so the test, not the effect, keeps false alarms out (docs/ci.md)
MIN_EFFECT_AB = 0.05
SUMMARY = "time models A and B interleaved in one process: B's verdict against A (a CI gate)"

AB_EXAMPLES = """\
examples:
  fxprof ab resnet18 resnet34 --input 1x3x64x64
  fxprof ab base/model.py:build model.py:build --input 8x128 --fail-on slower
  fxprof ab base/model.py:build model.py:build --fail-on slower --markdown "$GITHUB_STEP_SUMMARY"
  fxprof ab model.py:build model.py:build --iters 40          # an A/A pair: what no change reads

A and B: a torchvision name, package.module:factory, or path/to/file.py:factory. To gate a change,
check the base branch out into a folder (git worktree add base origin/main) and give its model
file as A and yours as B: each is loaded with its own folder's modules (its `import layers`
finds its own layers.py). Two package specs share one import path: give files for two checkouts.

Exit status: 0, or 3 when --fail-on slower holds (b slower than a beyond noise and by at least
--min-effect), 2 on a usage error or a model that fails to load or run.
"""


def add_parser(command: Any) -> argparse.ArgumentParser:
    p = command("ab", SUMMARY,
                "Load models A and B, then time them interleaved in one process on the same inputs (each round "
                "calls both once, which goes first alternating, after --warmup untimed calls each), each call less the "
                "time it lost to other processes, and print b/a in the median round with a 95% bootstrap interval "
                "over rounds, a sign-test p-value and a verdict (faster, slower, same, too few runs: compare's rules "
                "on the rounds' paired ratios). Drift of the machine between processes does not enter (docs/ci.md "
                "gives the false-alarm and detection rates measured).", AB_EXAMPLES)
    p.add_argument("a", metavar="A", help="the baseline model: torchvision name, package.module:factory, or file.py:factory")
    p.add_argument("b", metavar="B", help="the other model, called with the same inputs")
    m = p.add_argument_group("inputs")
    add_input_option(m)
    add_device_option(m, "the models and inputs")
    r = p.add_argument_group("running")
    r.add_argument("--iters", type=int, default=30, metavar="N", help="interleaved rounds: a and b once each (default: 30)")
    r.add_argument("--warmup", type=int, default=3, metavar="N", help="untimed calls of each model first (default: 3)")
    r.add_argument("--threads", type=int, default=None, metavar="N", help="torch CPU threads (default: torch's choice)")
    v = p.add_argument_group("verdict and gate")
    v.add_argument("--alpha", type=float, default=0.05, help="significance level (default: 0.05)")
    v.add_argument("--min-effect", type=float, default=MIN_EFFECT_AB,
                   help="smallest change (b/a in the median round) that gets a faster/slower verdict, as a fraction "
                        f"(default: {MIN_EFFECT_AB:g}; docs/ci.md measures A/A and A/B pairs)")
    v.add_argument("--fail-on", choices=("slower",), default=None,
                   help="exit with status 3 when b is slower than a (beyond noise and by at least --min-effect)")
    o = p.add_argument_group("outputs")
    o.add_argument("--csv", metavar="PATH", help="write every round's times as CSV: round, a_ms, b_ms (wall), a_lost_ms, "
                                                 "b_lost_ms (lost to other processes) ('-': standard output)")
    o.add_argument("--markdown", metavar="PATH",
                   help="append the verdict as GitHub-flavoured Markdown (e.g. \"$GITHUB_STEP_SUMMARY\"; '-': standard output)")
    return p


def check(args: argparse.Namespace) -> None:
    from .model_names import check_model_name

    check_counts(("--iters", args.iters, 2), ("--warmup", args.warmup, 0))
    check_threads(args.threads)
    check_verdict_rules(args.alpha, args.min_effect)
    if "-" in (args.csv, args.markdown) and args.csv == args.markdown:
        raise bad("--csv - and --markdown - both write to standard output: send one of them to a file")
    check_specs(args.input or [])  # the syntax, before torch is imported
    check_outputs({"--csv": args.csv, "--markdown": args.markdown}, inputs=model_sources(args.a) + model_sources(args.b))
    check_model_name(args.a)
    check_model_name(args.b)


def run(args: argparse.Namespace) -> int:
    import torch

    from ..errors import FxprofError
    from ..measure.common.machine import machine_load, usable_cores
    from ..whatif import whatif
    from .models import build_inputs, device_option, load_side_by_side

    device = device_option(args.device)
    build_inputs(args.input, torch.float32, device, parse_only=True)
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    model_a, model_b = load_side_by_side(args.a, args.b)
    try:
        model_a, model_b = model_a.eval().to(device), model_b.eval().to(device)
        positional, keywords = build_inputs(args.input, torch.float32, device)
    except (RuntimeError, AssertionError, MemoryError) as exc:
        raise bad(f"cannot put the models and inputs on {device}: {first_line(exc)}") from exc
    say = (lambda line: None) if args.quiet else (lambda line: print(f"fxprof ab: {line}", file=sys.stderr, flush=True))
    load = [machine_load()]
    try:
        result = whatif(model_a, tuple(positional), {"b": lambda _, inputs: (model_b, inputs)}, iters=args.iters,
                        warmup=args.warmup, blocks=False, alpha=args.alpha, min_effect=args.min_effect,
                        model_kwargs=keywords or None,
                        progress=lambda line: say(line.replace("variants", "models").replace("baseline failed", "a failed")))
    except RuntimeError as exc:
        failures = getattr(exc, "errors", None)
        if failures is None or "baseline" not in failures:
            raise
        also = f"; b ({args.b}) failed too: {failures['b']}" if "b" in failures else ""
        raise FxprofError(f"a ({args.a}) failed on these inputs: {failures['baseline']}{also}") from exc
    load.append(machine_load())
    if "b" in result.errors:
        raise FxprofError(f"b ({args.b}) failed on these inputs: {result.errors['b']}")
    return _verdict(args, result, load, usable_cores())


def _verdict(args: argparse.Namespace, result: Any, load: list, cores: int) -> int:
    """B's verdict against A from the interleaved times, the gate, and the outputs; the exit status."""
    import statistics

    import pandas as pd

    from ..core.contention import BUSY_LOAD_MARGIN
    from ..core.gate import gate, less_lost, paired_run_verdict, resolved_paired_verdict
    from ..views.ab import render_ab, render_ab_markdown
    from ..vocab import GATE_EXIT

    a_ms, b_ms = result.times["baseline"].tolist(), result.times["b"].tolist()
    a_lost, b_lost = result.lost_ms.get("baseline"), result.lost_ms.get("b")
    a_net, a_busy = less_lost(a_ms, a_lost)
    b_net, b_busy = less_lost(b_ms, b_lost)
    run = paired_run_verdict(a_net, b_net, alpha=args.alpha, min_effect=args.min_effect)
    loads = [x for x in load if x is not None]
    busy = bool(a_busy + b_busy) or bool(loads and max(loads) >= cores + BUSY_LOAD_MARGIN)
    run = resolved_paired_verdict(run, args.min_effect)
    usable = [(x, y) for x, y in zip(a_net, b_net) if x > 0 and y > 0]  # the rounds the verdict uses
    meta = {**result.meta, "rounds": args.iters, "rounds_used": run.a_runs, "rounds_recorded": len(a_ms),
            "load": load, "cores": cores, "alpha": args.alpha, "busy": busy,
            "min_effect": args.min_effect, "a_ms": statistics.median(x for x, _ in usable) if usable else float("nan"),
            "b_ms": statistics.median(y for _, y in usable) if usable else float("nan"),
            "busy_calls": a_busy + b_busy, "calls": len(a_ms) + len(b_ms), "measured": a_lost is not None}
    report = sys.stderr if "-" in (args.csv, args.markdown) else sys.stdout
    echo(render_ab(run, args.a, args.b, meta), report)
    failed, line = (False, None)
    if args.fail_on:
        rules = pd.DataFrame()
        rules.attrs["min_effect"] = args.min_effect
        failed, line = gate(rules, args.fail_on, run)
    if args.csv is not None:
        from ..io.atomic import atomic_write

        columns = {"a_ms": a_ms, "b_ms": b_ms}
        if a_lost is not None and b_lost is not None and len(a_lost) == len(a_ms) and len(b_lost) == len(b_ms):
            columns.update(a_lost_ms=list(a_lost), b_lost_ms=list(b_lost))
        rounds = pd.DataFrame(columns).rename_axis("round")
        atomic_write(args.csv, lambda handle: rounds.to_csv(handle, index=True))
        echo(f"wrote csv: {'standard output' if args.csv == '-' else args.csv}", report)
    if args.markdown is not None:
        text = render_ab_markdown(run, args.a, args.b, meta, line)
        if args.markdown == "-":
            sys.stdout.write(text)
        else:
            from ..io.atomic import append_text

            appended = append_text(args.markdown, text)
            echo(f"{'appended markdown to' if appended else 'wrote markdown'}: {args.markdown}", report)
    if line:
        echo(f"fxprof gate (--fail-on {args.fail_on}): {line}", report)
    return GATE_EXIT if failed else 0
