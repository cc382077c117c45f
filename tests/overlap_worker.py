"""Run under ``torchrun`` by tests/measure/test_overlap.py (not a test module itself).

``torchrun --nproc-per-node 2 overlap_worker.py OUTDIR``: each rank shards four blocks with FSDP2
(gloo on the CPU), each block prefetching the next one's parameters in its pre-forward
(``set_modules_to_forward_prefetch``), and profiles it twice: with FSDP's defaults (every
all-gather synchronous) and with the blocks' all-gathers issued asynchronously, each a training
step (``backward=True``) too for the asynchronous one. Rank 0 saves the gathered profiles as
``OUTDIR/<name>.json``.
"""

from __future__ import annotations

import os
import sys

import torch
import torch.distributed as dist
from sharded_worker import Block, FourBlocks


def prefetching(async_op: bool) -> FourBlocks:
    from torch.distributed.fsdp import fully_shard

    torch.manual_seed(0)
    model = FourBlocks()
    model.b0, model.b1, model.b2, model.b3 = (Block(64, 256) for _ in range(4))
    blocks = [model.b0, model.b1, model.b2, model.b3]
    for block in blocks:
        fully_shard(block)
    fully_shard(model)
    for block, following in zip(blocks, blocks[1:]):
        block.set_modules_to_forward_prefetch([following])
    if async_op:
        for block in blocks:
            block._set_unshard_async_op(True)  # FSDP's own switch (private in torch 2.11-2.14)
    return model


def main(outdir: str) -> None:
    import fxprof

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    try:
        torch.manual_seed(1 + rank)
        x = torch.randn(16, 64)
        for name, async_op, backward in (("sync", False, False), ("async", True, False), ("async_train", True, True)):
            prof = fxprof.profile(prefetching(async_op), x, backward=backward, warmup=1, iters=4, anatomy=False, memory=False)
            merged = fxprof.gather(prof, dst=0)
            if merged is not None:
                merged.save(os.path.join(outdir, f"{name}.json"))
    finally:
        dist.destroy_process_group()


def prefetched() -> FourBlocks:
    """For the command line (``overlap_worker.py:prefetched``): FSDP's defaults, each block prefetching the next."""
    return prefetching(False)


def prefetched_async() -> FourBlocks:
    """The same, the blocks' all-gathers issued asynchronously."""
    return prefetching(True)


if __name__ == "__main__":
    main(sys.argv[1])
