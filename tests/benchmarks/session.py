"""fxprof.session inside a training loop: the cost of a step in each phase of the schedule.

    python tests/benchmarks/session.py [--models resnet18,...] [--input 4x3x32x32]
        [--threads 1] [--repeats 7] [--calls 10] [--clock wall|cpu] [--json out.json]

Per model, one training step is ``forward, cross-entropy loss, backward, SGD step, zero_grad``
on a fixed batch. Four copies of the model run it, interleaved (every repeat times ``calls``
steps of each variant in turn, so drifts of a shared machine hit all alike):

- ``plain``: the uninstrumented loop;
- ``wait``: inside an open :func:`fxprof.session` whose schedule is in a ``wait`` step (the
  model's forward replaced by the session's, which calls the model's own forward eagerly);
- ``warmup``: in a ``warmup`` step (forward through the interpreter, untimed);
- ``active``: in an ``active`` step (every forward node timed, every sample kept).

The figures are medians over repeats of each repeat's median step time (ms), and each
variant's ratio to ``plain``. ``--clock cpu`` times steps by the process's CPU time
(``time.process_time_ns``, all threads) instead of the wall clock: on a machine shared with other
jobs, waiting for a core then stays out of the figures. A last table times the call of a model
that does nothing (``nn.Identity``) plain and in a wait step: the session's own cost per call,
in microseconds. The claim checked by reading this table (never asserted in a
test, as timings on a shared machine are not a test): ``wait`` within 5% of ``plain``.
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

CLOCKS = {"wall": time.perf_counter_ns, "cpu": time.process_time_ns}


def interleaved(variants: dict, repeats: int, calls: int, clock=time.perf_counter_ns) -> dict[str, list[float]]:
    """Per variant, ``repeats`` medians of ``calls`` timed calls (ms), every repeat running
    each variant in turn (``common.interleaved`` with a choice of clock)."""
    out: dict[str, list[float]] = {k: [] for k in variants}
    for fn in variants.values():  # warm-up
        for _ in range(2):
            fn()
    for _ in range(repeats):
        for name, fn in variants.items():
            times = []
            for _ in range(calls):
                t0 = clock()
                fn()
                times.append((clock() - t0) / 1e6)
            out[name].append(statistics.median(times))
    return out

#: a schedule that stays in one phase for the whole benchmark
PHASES = {
    "wait": dict(wait=10**9, warmup=0, active=1),
    "warmup": dict(wait=0, warmup=10**9, active=1),
    "active": dict(wait=0, warmup=1, active=10**9),
}


def measure(name: str, shape: list[int], repeats: int, calls: int, clock=time.perf_counter_ns) -> dict:
    torch.manual_seed(0)
    base = torchvision.models.get_model(name, weights=None, num_classes=10).train()
    x = torch.randn(*shape)
    y = torch.randint(0, 10, (shape[0],))
    models = {v: torchvision.models.get_model(name, weights=None, num_classes=10).train() for v in ("plain", *PHASES)}
    for m in models.values():
        m.load_state_dict(base.state_dict())
    optimizers = {v: torch.optim.SGD(m.parameters(), lr=1e-3) for v, m in models.items()}
    sessions = {v: fxprof.session(models[v], schedule=fxprof.schedule(**kw)) for v, kw in PHASES.items()}

    def step(variant: str):
        model, opt, s = models[variant], optimizers[variant], sessions.get(variant)

        def run() -> None:
            loss = torch.nn.functional.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            opt.zero_grad()
            if s is not None:
                s.step()

        return run

    for s in sessions.values():
        s.__enter__()
    try:
        times = interleaved({v: step(v) for v in models}, repeats, calls, clock)
    finally:
        for s in sessions.values():
            s.__exit__(None, None, None)
    medians = {v: statistics.median(t) for v, t in times.items()}
    row = {"model": name, "input": "x".join(map(str, shape))}
    for v in models:
        row[f"{v}_ms"] = medians[v]
    for v in PHASES:
        row[f"{v}_ratio"] = medians[v] / medians["plain"]
    row["wait_repeats_ratio_min"] = min(w / p for w, p in zip(times["wait"], times["plain"]))
    row["wait_repeats_ratio_max"] = max(w / p for w, p in zip(times["wait"], times["plain"]))
    return row


def call_cost(repeats: int, calls: int = 20000) -> dict:
    """The session's own cost per call in a wait step: an ``nn.Identity`` called plain and
    inside a session in its wait phase (microseconds per call, medians over repeats)."""
    plain, waiting = torch.nn.Identity(), torch.nn.Identity()
    x = torch.zeros(1)
    rows: dict[str, list[float]] = {"plain": [], "wait": []}
    with fxprof.session(waiting, schedule=fxprof.schedule(**PHASES["wait"])):
        for _ in range(repeats):
            for label, model in (("plain", plain), ("wait", waiting)):
                t0 = time.perf_counter_ns()
                for _ in range(calls):
                    model(x)
                rows[label].append((time.perf_counter_ns() - t0) / calls / 1e3)
    plain_us, wait_us = statistics.median(rows["plain"]), statistics.median(rows["wait"])
    return {"model": "nn.Identity", "plain_us": plain_us, "wait_us": wait_us, "added_us": wait_us - plain_us}


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default="resnet18")
    parser.add_argument("--input", default="4x3x32x32")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--calls", type=int, default=10)
    parser.add_argument("--clock", choices=list(CLOCKS), default="wall")
    parser.add_argument("--json")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    shape, _ = parse_input(args.input)
    rows = [measure(m, list(shape), args.repeats, args.calls, CLOCKS[args.clock]) for m in args.models.split(",")]
    print_table(f"training step in a session, CPU, {args.threads} thread(s), {args.clock} clock, medians of "
                f"{args.repeats} interleaved repeats of {args.calls} steps", rows)
    cost = call_cost(args.repeats)
    print_table("the session's own cost per call in a wait step (wall clock)", [cost])
    result = {"env": env("cpu"), "clock": args.clock, "session": rows, "call_cost": cost}
    write_json(args.json, result)
    return result


if __name__ == "__main__":
    main()
