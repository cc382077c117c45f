"""docs/memory.md, "Compiled mode": memory per kernel of a small compiled model.

Run: python docs/scripts/memory_compiled.py   (CPU, 1 thread)
"""
import torch
from torch import nn

import fxprof


class Widening(nn.Module):
    def __init__(self):
        super().__init__()
        self.narrow = nn.Linear(128, 128)
        self.wide = nn.Linear(128, 128 * 64)
        self.back = nn.Linear(128 * 64, 4)

    def forward(self, x):
        return self.back(self.wide(torch.relu(self.narrow(x))))


torch.manual_seed(0)
torch.set_num_threads(1)
prof = fxprof.profile(Widening().eval(), torch.randn(32, 128), compile=True, warmup=2, iters=5)
print(prof.summary(columns=["kind", "scope", "median_ms", "mem_delta_bytes", "mem_temp_bytes", "mem_peak_bytes",
                            "mem_live_bytes"]))
print(prof.memory)
