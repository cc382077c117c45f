"""Where fxprof.generate's compiled decode step (1.18x the model's own) goes. After each timed
decode step of fxprof.generate over a forward compiled in place (the tiny Llama of
docs/scripts/generate_models.py, static cache, one thread), the same step is called again in
blocks of three (the cache's write position rewound before each call): with fxprof's marks
installed inside its inductor settings, fxprof's copy plain inside them, the copy plain outside
them, and the user's own compiled forward. Printed: the timed steps' median (the session's own
bracket) and, per block, the medians of its first, second and third calls over the decode steps.
It patches fxprof's internals (a study, not a test) and asserts nothing.

    PYTHONPATH=$PWD python tests/benchmarks/marks/generate_step.py
"""
from __future__ import annotations

import os
import sys
import time
from typing import Any

import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "..", "docs", "scripts"))
from generate_models import tiny_llama  # noqa: E402

import fxprof  # noqa: E402
from fxprof.measure.compiled import in_session  # noqa: E402
from fxprof.measure.compiled.wrapper_timer import installed  # noqa: E402

BLOCKS = ("marked", "copy in settings", "copy alone", "user's forward")


def main() -> None:
    torch.set_num_threads(1)
    timed: list[int] = []
    blocks: dict[str, list[list[int]]] = {k: [] for k in BLOCKS}
    capture = in_session.LoopCompiledCapture
    init, run_marked = capture.__init__, capture._run_marked
    clock = time.perf_counter_ns

    def keep_forward(self: Any, optimized: Any, forward: Any = None) -> None:
        init(self, optimized, forward)
        self.user_forward = forward

    def study(self: Any, recorder: Any, args: tuple, kwargs: dict) -> Any:
        out = run_marked(self, recorder, args, kwargs)
        cache, ids = kwargs.get("cache"), kwargs.get("input_ids")
        if cache is None or ids is None or ids.shape[-1] != 1:  # the prefill
            return out
        t0, t1 = self._bounds[-1]
        timed.append(t1 - t0)
        after = [layer.cumulative_length.clone() for layer in cache.layers]

        def rewind(by: int) -> None:
            for layer, v in zip(cache.layers, after):
                layer.cumulative_length.copy_(v - by)

        def block(name: str, call: Any) -> None:
            row = []
            for _ in range(3):
                rewind(1)
                a = clock()
                call()
                row.append(clock() - a)
            blocks[name].append(row)

        with self._settings(), installed(self._timers.values()):
            block("marked", lambda: self._call(args, kwargs))
        for t in self._timers.values():
            t.take_rows()  # the study's rows are not the profile's
        with self._settings():
            block("copy in settings", lambda: self._call(args, kwargs))
        block("copy alone", lambda: self._call(args, kwargs))
        if self.user_forward is not None:
            block("user's forward", lambda: self.user_forward(*args, **kwargs))
        rewind(0)
        return out

    capture.__init__, capture._run_marked = keep_forward, study
    try:
        model = tiny_llama().eval()
        ids = torch.randint(0, 1000, (1, 16), generator=torch.Generator().manual_seed(0))
        model.forward = torch.compile(model.forward)
        gen = fxprof.generate(model, ids, 16, cache_implementation="static")
    finally:
        capture.__init__, capture._run_marked = init, run_marked
    print(f"torch {torch.__version__}, 1 thread, load {os.getloadavg()[0]:.2f}")
    print("\n".join(gen.fidelity_lines()))
    print(f"timed steps (the session's bracket): median {np.median(timed) / 1e3:.1f} us over {len(timed)}")
    for name, rows in blocks.items():
        if rows:
            a = np.asarray(rows) / 1e3
            print(f"{name:18s} first {np.median(a[:, 0]):7.1f}  second {np.median(a[:, 1]):7.1f}  "
                  f"third {np.median(a[:, 2]):7.1f} us")


if __name__ == "__main__":
    main()
