"""docs/memory.md, "Sessions": the memory of a training loop's warm-up steps, per cycle.

Run: python docs/scripts/memory_session.py   (CPU, 1 thread)
"""
import torch
import torchvision
from torch import nn

import fxprof
from fxprof.views.memory import format_bytes

torch.manual_seed(0)
torch.set_num_threads(1)
model = torchvision.models.resnet18(weights=None, num_classes=10).train()
opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
loader = [(torch.randn(8, 3, 32, 32), torch.randint(0, 10, (8,))) for _ in range(10)]

with fxprof.session(model, schedule=fxprof.schedule(wait=1, warmup=1, active=3, repeat=2)) as s:
    for x, y in loader:
        loss = nn.functional.cross_entropy(s.model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        s.step()

for prof in s.profiles:
    for st in prof.meta["memory_steps"]:
        print(f"cycle {prof.meta['cycle']}: warm-up step {st['step']}: peak {format_bytes(st['peak_bytes'])} during "
              f"{st['peak_node']}, {format_bytes(st['end_bytes'])} held at its end (parameters and buffers "
              f"{format_bytes(st['held_bytes'])})")
print("### summary")
print(s.profiles[1].summary(top=6, sort="mem_peak_bytes",
                            columns=["kind", "median_ms", "mem_delta_bytes", "mem_temp_bytes", "mem_peak_bytes",
                                     "mem_live_bytes"]))
