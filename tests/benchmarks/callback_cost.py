"""FxprofCallback's cost in the steps its schedule leaves unprofiled (Hugging Face Trainer).

    python tests/benchmarks/callback_cost.py [--repeats 7] [--steps 12] [--threads 1] [--clock wall|cpu]
        [--batch 8] [--seq 64] [--json out.json]

A tiny Llama (built from its config, 2 layers, hidden 128) trained by the real ``Trainer`` on
random token ids, ``steps`` optimizer steps of ``--batch`` x ``--seq`` tokens, gradient
accumulation 2. Three variants, interleaved (every repeat trains each once, in turn, the order
rotated each repeat, so drifts of a shared machine hit all alike):

- ``plain``: ``Trainer(...)`` with no fxprof callback;
- ``plain_again``: the same once more: its ratio to ``plain`` is what the machine's noise alone
  gives (an A/A check, the yardstick for the callback's ratio);
- ``callback``: ``Trainer(..., callbacks=[FxprofCallback(schedule)])`` with a schedule whose every
  step is ``none`` (``fxprof.schedule(wait=10**9, ...)``): the session is open, the model's forward
  is the session's, which calls the model's own (one attribute check), and the callback's hooks run
  at every step (the optimizer and scheduler phases are timed in instrumented steps only).

A timing callback (in both variants) reads the clock at ``on_step_begin`` and ``on_step_end``: a
step is an optimizer step (both micro-batches' forward and backward, the optimizer, the
scheduler). Per run, the median step after the first two; per repeat, callback / plain and
plain_again / plain; the figures are the medians over repeats. ``--clock cpu`` reads the process's CPU time instead, so
that waits for a core on a shared machine stay out. Nothing is asserted: timings on a shared
machine are not a test.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

import torch
import transformers
from common import env, print_table, write_json

import fxprof
from fxprof.integrations.transformers import FxprofCallback

CLOCKS = {"wall": time.perf_counter_ns, "cpu": time.process_time_ns}


class StepClock(transformers.TrainerCallback):
    def __init__(self, clock):
        self.clock, self.times, self._t0 = clock, [], 0

    def on_step_begin(self, args, state, control, **kwargs):
        self._t0 = self.clock()

    def on_step_end(self, args, state, control, **kwargs):
        self.times.append((self.clock() - self._t0) / 1e6)


def run(with_callback: bool, steps: int, batch: int, seq: int, clock) -> float:
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(transformers.LlamaConfig(
        hidden_size=128, intermediate_size=256, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
        vocab_size=512))
    g = torch.Generator().manual_seed(1)
    data = [{"input_ids": ids, "labels": ids} for ids in torch.randint(0, 512, (steps * batch * 2, seq), generator=g)]
    timer = StepClock(clock)
    callbacks: list = [timer]
    if with_callback:
        callbacks.insert(0, FxprofCallback(fxprof.schedule(wait=10**9, warmup=0, active=1), save=False))
    with tempfile.TemporaryDirectory() as folder:
        args = transformers.TrainingArguments(
            output_dir=folder, use_cpu=True, report_to=[], seed=0, max_steps=steps, logging_steps=10**6,
            per_device_train_batch_size=batch, gradient_accumulation_steps=2, save_strategy="no", disable_tqdm=True)
        transformers.Trainer(model=model, args=args, train_dataset=data, callbacks=callbacks).train()
    return statistics.median(timer.times[2:])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--seq", type=int, default=64)
    parser.add_argument("--clock", choices=sorted(CLOCKS), default="wall")
    parser.add_argument("--json")
    a = parser.parse_args()
    torch.set_num_threads(a.threads)
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    transformers.logging.set_verbosity_error()
    clock = CLOCKS[a.clock]
    run(False, 3, a.batch, a.seq, clock)  # the first Trainer of the process pays for imports
    variants = {"plain": False, "plain_again": False, "callback": True}
    times: dict[str, list[float]] = {name: [] for name in variants}
    order = list(variants)
    for repeat in range(a.repeats):
        for name in order[repeat % 3:] + order[:repeat % 3]:
            times[name].append(run(variants[name], a.steps, a.batch, a.seq, clock))
    rows = []
    for name in ("callback", "plain_again"):
        ratios = [x / p for x, p in zip(times[name], times["plain"])]
        rows.append({"variant": name, "model": "tiny Llama (2 layers, hidden 128)",
                     "input": f"{a.batch}x{a.seq} tokens, accumulation 2",
                     "plain_ms": round(statistics.median(times["plain"]), 3), "ms": round(statistics.median(times[name]), 3),
                     "ratio": round(statistics.median(ratios), 4), "ratio_min": round(min(ratios), 4),
                     "ratio_max": round(max(ratios), 4)})
    title = (f"FxprofCallback in unprofiled steps, Trainer optimizer step, CPU, {a.threads} thread(s), "
             f"{a.clock} clock, medians of {a.repeats} interleaved repeats of {a.steps} steps")
    print(env())
    print_table(title, rows)
    if a.json:
        write_json(a.json, {"rows": rows, "title": title})


if __name__ == "__main__":
    main()
