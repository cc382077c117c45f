"""The worked example's two compiled models timed without fxprof, interleaved in one process
(docs/compiled.md, graph breaks): the median of 200 calls each, alternating."""

import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from breaks_model import checked, fixed  # noqa: E402

torch.set_num_threads(1)
x = torch.randn(8, 64)
models = {"checked": torch.compile(checked()), "fixed": torch.compile(fixed()), "eager": checked()}
times = {name: [] for name in models}
with torch.no_grad():
    for m in models.values():
        for _ in range(5):
            m(x)
    for _ in range(200):
        for name, m in models.items():
            t0 = time.perf_counter_ns()
            m(x)
            times[name].append((time.perf_counter_ns() - t0) / 1e3)
med = {name: sorted(v)[len(v) // 2] for name, v in times.items()}
for name, value in med.items():
    print(f"{name:8s} median {value:7.1f} us a call")
print(f"fixed is {med['checked'] / med['fixed']:.2f}x faster than checked; eager/checked {med['eager'] / med['checked']:.2f}, "
      f"eager/fixed {med['eager'] / med['fixed']:.2f}")
