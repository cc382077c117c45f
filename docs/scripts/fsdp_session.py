"""The FSDP2 session of docs/distributed.md: ``fxprof.session(model, backward=True)`` over a plain
training loop of ``TwoBlocks`` (tests/sharded_worker.py), on every rank; rank 0 saves the gathered
profile. Run from the repository root:

    torchrun --nproc-per-node 2 docs/scripts/fsdp_session.py fsdp_session.json
    python -m fxprof show fsdp_session.json --group-by scope --depth 2
"""

import os
import sys

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "tests"))
from sharded_worker import sharded_model  # noqa: E402  # TwoBlocks, each block and the root fully_shard-ed

import fxprof  # noqa: E402

dist.init_process_group("gloo")
torch.manual_seed(dist.get_rank())
model = sharded_model()
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
with fxprof.session(model, backward=True, schedule=fxprof.schedule(wait=1, warmup=2, active=20),
                    on_ready=lambda prof: prof.save(sys.argv[1])) as s:
    for step in range(24):
        x = torch.randn(8, 16)
        loss = model(x).square().mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        s.step()
dist.destroy_process_group()
