"""Training steps: fxprof's backward node times against eager autograd, and its run overhead.

    python tests/benchmarks/training.py [--models resnet18,...] [--input 8x3x64x64]
        [--threads 1] [--repeats 5] [--iters 5] [--optimizer sgd] [--json out.json]

Per model, in one process and interleaved (every repeat measures each variant in turn):

- ``eager_backward_ms``: median time of ``loss.backward()`` in eager PyTorch (forward and
  loss untimed before it; gradients set to None first, as fxprof does);
- ``fxprof_backward_sum_ms``: median over fxprof's timed runs of the summed times of the
  backward graph's nodes (``phase == "backward"``); ``backward_ratio`` is it over the eager
  backward (target: within 10% on the CPU at 1 thread);
- ``eager_step_ms``: median eager training step (zero_grad, forward, loss, backward, and
  ``optimizer.step()`` with ``--optimizer``), and ``fxprof_run_ms``: median fxprof run of the
  same step (every node timed, through the interpreter); ``run_overhead`` is their ratio;
- ``coverage``: the share of the fxprof run inside nodes.

The loss is fxprof's default (the sum of the outputs). Models are torchvision models built
with weights=None, in train mode.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
import torchvision
from common import env, print_table, write_json

import fxprof
from fxprof.cli.models import parse_input
from fxprof.measure.capture.training import default_loss, make_optimizer


def _ms(fn) -> float:
    t0 = time.perf_counter_ns()
    fn()
    return (time.perf_counter_ns() - t0) / 1e6


def measure(name: str, shape: list[int], repeats: int, iters: int, optimizer: str | None) -> dict:
    torch.manual_seed(0)
    model = torchvision.models.get_model(name, weights=None).train()
    x = torch.randn(*shape)
    params = list(model.parameters())
    opt = make_optimizer(optimizer, model) if optimizer else None

    def clear() -> None:
        for p in params:
            p.grad = None

    def eager_backward() -> float:
        clear()
        loss = default_loss(model(x))
        return _ms(loss.backward)

    def eager_step() -> None:
        if opt is not None:
            opt.zero_grad()
        else:
            clear()
        default_loss(model(x)).backward()
        if opt is not None:
            opt.step()

    first = fxprof.profile(model, x, backward=True, optimizer=opt, warmup=1, iters=1, anatomy=False)  # compiles
    nodes = len(first.nodes)
    eager_bw, eager_steps, fx_bw, fx_runs, coverage = [], [], [], [], []
    for _ in range(2):  # eager warm-up
        eager_backward()
        eager_step()
    for _ in range(repeats):
        eager_bw.append(statistics.median(eager_backward() for _ in range(iters)))
        eager_steps.append(statistics.median(_ms(eager_step) for _ in range(iters)))
        prof = fxprof.profile(model, x, backward=True, optimizer=opt, warmup=1, iters=iters, anatomy=False)
        samples = prof.samples.merge(prof.df[["phase"]], left_on="node", right_index=True)
        per_run = samples[samples["phase"] == "backward"].groupby("run")["time_ms"].sum()
        fx_bw.append(float(per_run.median()))
        fx_runs.append(float(statistics.median(prof.total_ms)))
        coverage.append(prof.coverage)
    eb, fb = statistics.median(eager_bw), statistics.median(fx_bw)
    es, fr = statistics.median(eager_steps), statistics.median(fx_runs)
    return {
        "model": name, "input": "x".join(map(str, shape)), "optimizer": optimizer or "", "nodes": nodes,
        "eager_backward_ms": eb, "fxprof_backward_sum_ms": fb, "backward_ratio": fb / eb,
        "eager_step_ms": es, "fxprof_run_ms": fr, "run_overhead": fr / es,
        "coverage": statistics.median(coverage),
    }


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default="resnet18")
    parser.add_argument("--input", default="8x3x64x64")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--iters", type=int, default=5)
    parser.add_argument("--optimizer", choices=["sgd", "adamw"])
    parser.add_argument("--json")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    shape, _ = parse_input(args.input)
    rows = [measure(m, list(shape), args.repeats, args.iters, args.optimizer) for m in args.models.split(",")]
    print_table(f"training step, CPU, {args.threads} thread(s), medians of {args.repeats} interleaved repeats", rows)
    result = {"env": env("cpu"), "training": rows}
    if args.json:
        write_json(args.json, result)
    return result


if __name__ == "__main__":
    main()
