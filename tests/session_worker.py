"""Run by tests/measure/test_session.py in every rank of a gloo job (not a test module itself).

``python session_worker.py OUTDIR`` with RANK, WORLD_SIZE and FXPROF_TEST_STORE (a file for the
process group's FileStore) in the environment. Every rank trains :class:`RankModel` in its own
loop under its own :func:`fxprof.session` (rank 1 naps in every forward); each cycle's profiles
are gathered on rank 0, whose ``on_ready`` saves them as ``OUTDIR/cycleN.json``. Every rank
writes what its session saw to ``OUTDIR/rankN.json``.
"""

from __future__ import annotations

import json
import os
import sys

import torch
import torch.distributed as dist
from distributed_worker import RankModel


def main(outdir: str) -> None:
    import fxprof

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    dist.init_process_group("gloo", init_method="file://" + os.environ["FXPROF_TEST_STORE"], rank=rank, world_size=world)
    try:
        torch.manual_seed(0)
        model = RankModel(50 if rank == 1 else 0, collective=False).train()
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        ready = []

        def on_ready(prof):
            prof.save(os.path.join(outdir, f"cycle{prof.meta['cycle']}.json"))
            ready.append(prof.meta["cycle"])

        with fxprof.session(model, schedule=fxprof.schedule(wait=1, warmup=1, active=2, repeat=2), on_ready=on_ready) as s:
            for step in range(8):
                x = torch.randn(4, 16)
                model(x).sum().backward()
                for p in model.parameters():  # data parallel by hand: average the gradients
                    dist.all_reduce(p.grad)
                    p.grad /= world
                opt.step()
                opt.zero_grad()
                s.step()
        with open(os.path.join(outdir, f"rank{rank}.json"), "w") as handle:
            json.dump({"rank": rank, "ready": ready, "profiles": len(s.profiles), "restored": "forward" not in model.__dict__}, handle)
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1])
