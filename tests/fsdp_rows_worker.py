"""Run under ``torchrun`` by tests/measure/test_fsdp_rows.py (not a test module itself).

``torchrun --nproc-per-node 2 fsdp_rows_worker.py OUTDIR``: on each rank, FSDP2 set-ups whose
backward rows must say what FSDP did: a session over a loop of gradient accumulation (every
other microbatch with gradient sync off), and a training-step profile of a model with a frozen
block. Rank 0 writes what it saw to ``OUTDIR/rows.json``.
"""

from __future__ import annotations

import json
import os
import sys

import torch
import torch.distributed as dist
from sharded_worker import TwoBlocks, sharded_model


def _accumulating(model, xs, session=None) -> list[torch.Tensor]:
    """Two microbatches per optimizer step: the first with gradient sync off (FSDP keeps the
    unsharded gradients), the second with it on (one reduce-scatter of both)."""
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    losses = []
    for i, x in enumerate(xs):
        sync = i % 2 == 1
        model.set_requires_gradient_sync(sync)
        loss = model(x).square().mean()
        loss.backward()
        if sync:
            optimizer.step()
            optimizer.zero_grad()
        losses.append(loss.detach().clone())
        if session is not None:
            session.step()
    model.set_requires_gradient_sync(True)
    return losses


def frozen_model():
    """:class:`TwoBlocks` whose second block is frozen (requires_grad False), sharded by FSDP2."""
    from torch.distributed.fsdp import fully_shard

    torch.manual_seed(0)
    model = TwoBlocks()
    model.blocks[1].requires_grad_(False)
    for block in model.blocks:
        fully_shard(block)
    fully_shard(model)
    return model


def _rows(prof) -> dict:
    samples = prof.samples
    calls = samples.groupby(["node", "rank"]).size()
    return {name: {"kind": info.kind, "phase": info.phase, "calls": {str(r): int(calls.get((name, r), 0)) for r in (0, 1)},
                   "comm": info.kind in ("all_gather", "wait", "reduce_scatter")}
            for info in prof.nodes for name in [info.name] if name.startswith("fsdp")}


def main(outdir: str) -> None:
    import fxprof

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    try:
        torch.manual_seed(1 + rank)
        xs = [torch.randn(8, 16) for _ in range(6)]
        record: dict = {}
        model, twin = sharded_model(), sharded_model()
        ready: list = []
        plan = fxprof.schedule(wait=0, warmup=2, active=4)  # timed: microbatches 2 (no sync), 3 (sync), 4, 5
        with fxprof.session(model, schedule=plan, backward=True, on_ready=ready.append) as s:
            losses = _accumulating(model, xs, s)
        expected = _accumulating(twin, xs)
        same = all(torch.equal(a, b) for a, b in zip(losses, expected)) and len(losses) == 6
        if rank == 0:
            prof = ready[0]
            record["accumulation"] = {"rows": _rows(prof), "same": same, "runs": int(prof.num_runs),
                                      "header": [line for line in prof.summary(top=0).splitlines() if line.startswith("ranks:")],
                                      "comm": sorted(prof.df.index[prof.df["kind"].isin(["reduce_scatter"])])}
        prof = fxprof.gather(fxprof.profile(frozen_model(), xs[0], backward=True, warmup=1, iters=2, anatomy=False, memory=False))
        if rank == 0:
            record["frozen"] = {"rows": _rows(prof),
                                "header": [line for line in prof.summary(top=0).splitlines() if line.startswith("ranks:")]}
            with open(os.path.join(outdir, "rows.json"), "w") as handle:
                json.dump(record, handle)
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1])
