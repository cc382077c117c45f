"""fxprof.session inside a training loop: the cost of a step in each phase of the schedule.

    python tests/benchmarks/session.py [--models resnet18,...] [--input 4x3x32x32]
        [--threads 2] [--repeats 7] [--calls 10] [--json out.json]

Per model, one training step is ``forward, cross-entropy loss, backward, SGD step, zero_grad``
on a fixed batch. Four copies of the model run it, interleaved (every repeat times ``calls``
steps of each variant in turn, so drifts of a shared machine hit all alike):

- ``plain``: the uninstrumented loop;
- ``wait``: inside an open :func:`fxprof.session` whose schedule is in a ``wait`` step (the
  model's forward replaced by the session's, which calls the model's own forward eagerly);
- ``warmup``: in a ``warmup`` step (forward through the interpreter, untimed);
- ``active``: in an ``active`` step (every forward node timed, every sample kept).

The figures are medians over repeats of each repeat's median step time (ms), and each
variant's ratio to ``plain``. The claim checked by reading this table (never asserted in a
test, as timings on a shared machine are not a test): ``wait`` within 5% of ``plain``.
"""

from __future__ import annotations

import argparse
import statistics

import torch
import torchvision

import fxprof
from fxprof.cli.models import parse_input

from common import env, interleaved, print_table, write_json

#: a schedule that stays in one phase for the whole benchmark
PHASES = {
    "wait": dict(wait=10**9, warmup=0, active=1),
    "warmup": dict(wait=0, warmup=10**9, active=1),
    "active": dict(wait=0, warmup=1, active=10**9),
}


def measure(name: str, shape: list[int], repeats: int, calls: int) -> dict:
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
        times = interleaved({v: step(v) for v in models}, repeats, calls)
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


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default="resnet18")
    parser.add_argument("--input", default="4x3x32x32")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--calls", type=int, default=10)
    parser.add_argument("--json")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    shape, _ = parse_input(args.input)
    rows = [measure(m, list(shape), args.repeats, args.calls) for m in args.models.split(",")]
    print_table(f"training step in a session, CPU, {args.threads} thread(s), medians of {args.repeats} interleaved "
                f"repeats of {args.calls} steps", rows)
    result = {"env": env("cpu"), "session": rows}
    write_json(args.json, result)
    return result


if __name__ == "__main__":
    main()
