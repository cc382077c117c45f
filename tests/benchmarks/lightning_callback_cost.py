"""What ``FxprofCallback`` costs the steps it does not profile (issue 70: nothing measurable).

    python tests/benchmarks/lightning_callback_cost.py [--steps 60] [--repeats 9] [--hidden 256]
        [--batch 64] [--threads 1] [--json out.json]

Each repeat runs two fits in turn from the same seeds, on the CPU: a plain ``Trainer.fit`` and
the same fit with ``FxprofCallback(fxprof.schedule(wait=2, warmup=1, active=1))``, whose one cycle
ends at step 3; every later step is unprofiled (the callback closes the session once the schedule
is over: what is left is the callback's own hooks). Each batch is timed in both fits from the first
callback's ``on_train_batch_start`` to the last callback's ``on_train_batch_end`` (the callback's
own hooks inside), and the steps after the cycle (from step 6, past the first cold steps) are
compared: per repeat the ratio of the medians (callback / plain), then the median of the ratios.
Each repeat also runs a second plain fit, and the same ratio of the two plain fits (A/A) says how
far the machine alone moves the figure; the order of the three fits rotates from repeat to repeat.
Under load the medians move by more than the callback could cost, so two more figures: the ratio
of the 10th percentiles of the same steps (the quiet steps of each fit), and the callback's own
hooks (``on_train_batch_start`` and ``on_train_batch_end``) timed around themselves, per step, in
microseconds. The script reports the figure and asserts nothing (timings on a shared machine are not a test);
the machine's load average is printed before and after.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import sys
import time
import warnings

import torch
from torch import nn

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))

import fxprof  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--repeats", type=int, default=9)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--json")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    for name in ("lightning.pytorch", "lightning.fabric", "lightning"):
        logging.getLogger(name).setLevel(logging.ERROR)
    warnings.simplefilter("ignore")

    import lightning.pytorch as pl

    from fxprof.integrations.lightning import FxprofCallback

    class MLP(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            h = args.hidden
            self.net = nn.Sequential(nn.Linear(h, h), nn.ReLU(), nn.Linear(h, h), nn.ReLU(), nn.Linear(h, 10))

        def forward(self, x):
            return self.net(x)

        def training_step(self, batch, batch_idx):
            x, y = batch
            return nn.functional.cross_entropy(self(x), y)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=1e-3)

    class Start(pl.Callback):
        def __init__(self) -> None:
            self.t0 = 0

        def on_train_batch_start(self, *a) -> None:
            self.t0 = time.perf_counter_ns()

    class End(pl.Callback):
        def __init__(self, start: Start) -> None:
            self.start, self.ms = start, []

        def on_train_batch_end(self, *a) -> None:
            self.ms.append((time.perf_counter_ns() - self.start.t0) / 1e6)

    g = torch.Generator().manual_seed(0)
    n = args.batch * args.steps
    data = torch.utils.data.TensorDataset(torch.randn(n, args.hidden, generator=g), torch.randint(0, 10, (n,), generator=g))

    def fit(profiled: bool, root: str) -> tuple[list[float], int]:
        pl.seed_everything(0, verbose=False)
        start = Start()
        end = End(start)
        middle = [FxprofCallback(fxprof.schedule(wait=2, warmup=1, active=1), save=False)] if profiled else []
        hooks: list[float] = []
        for cb in middle:
            for hook in ("on_train_batch_start", "on_train_batch_end"):
                own = getattr(cb, hook)

                def timed(*a, _own=own, **k):
                    t = time.perf_counter_ns()
                    _own(*a, **k)
                    hooks.append((time.perf_counter_ns() - t) / 1e3)

                setattr(cb, hook, timed)
        trainer = pl.Trainer(accelerator="cpu", devices=1, max_steps=args.steps, logger=False, enable_checkpointing=False,
                             enable_progress_bar=False, enable_model_summary=False, default_root_dir=root,
                             callbacks=[start, *middle, end])
        trainer.fit(MLP(), torch.utils.data.DataLoader(data, batch_size=args.batch))
        HOOKS.append([hooks[i] + hooks[i + 1] for i in range(0, len(hooks) - 1, 2)])
        return end.ms, len(middle[0].profiles) if middle else 0

    import tempfile

    HOOKS: list[list[float]] = []

    def p10(ms: list[float]) -> float:
        return statistics.quantiles(ms, n=10)[0]

    load_before = os.getloadavg()
    ratios, aa, plain_med, cb_med, quiet, quiet_aa = [], [], [], [], [], []
    with tempfile.TemporaryDirectory() as root:
        for r in range(args.repeats):
            order = ["plain", "callback", "plain2"]
            order = order[r % 3:] + order[:r % 3]
            med, low = {}, {}
            for which in order:
                ms, profiles = fit(which == "callback", root)
                assert profiles == (which == "callback"), profiles
                med[which], low[which] = statistics.median(ms[6:]), p10(ms[6:])
            quiet.append(low["callback"] / low["plain"])
            quiet_aa.append(low["plain2"] / low["plain"])
            p, c = med["plain"], med["callback"]
            plain_med.append(p)
            cb_med.append(c)
            ratios.append(c / p)
            aa.append(med["plain2"] / p)
            print(f"repeat {r} ({', '.join(order)}): plain {p:.3f} ms, with the callback {c:.3f} ms (unprofiled steps "
                  f"6-{args.steps - 1}), ratio {c / p:.3f}; plain again {med['plain2']:.3f} ms, A/A {aa[-1]:.3f}")
    load_after = os.getloadavg()
    result = {"ratio": round(statistics.median(ratios), 4), "ratios": [round(x, 4) for x in ratios],
              "aa_ratio": round(statistics.median(aa), 4), "aa_ratios": [round(x, 4) for x in aa],
              "p10_ratio": round(statistics.median(quiet), 4), "p10_ratios": [round(x, 4) for x in quiet],
              "p10_aa_ratio": round(statistics.median(quiet_aa), 4), "p10_aa_ratios": [round(x, 4) for x in quiet_aa],
              "hooks_us": round(statistics.median(x for h in HOOKS if h for x in h[6:]), 3),
              "plain_ms": [round(x, 4) for x in plain_med], "callback_ms": [round(x, 4) for x in cb_med],
              "steps": args.steps, "repeats": args.repeats, "hidden": args.hidden, "batch": args.batch,
              "threads": args.threads, "cpus": os.cpu_count(), "load_before": load_before, "load_after": load_after,
              "torch": torch.__version__, "lightning": pl.__version__}
    print(f"unprofiled steps, callback / plain: median ratio {result['ratio']:.3f} over {args.repeats} repeats "
          f"(ratios {', '.join(f'{x:.3f}' for x in ratios)}); plain / plain (A/A) {result['aa_ratio']:.3f} "
          f"(ratios {', '.join(f'{x:.3f}' for x in aa)}); 10th percentiles {result['p10_ratio']:.3f} (ratios "
          f"{', '.join(f'{x:.3f}' for x in quiet)}), A/A {result['p10_aa_ratio']:.3f} (ratios {', '.join(f'{x:.3f}' for x in quiet_aa)}); the callback's two hooks {result['hooks_us']:.2f} us a step (median); load average {load_before[0]:.2f} before, {load_after[0]:.2f} after "
          f"on {os.cpu_count()} cpus")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
