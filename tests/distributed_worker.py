"""Run in the processes that tests/measure/test_distributed.py starts (not a test module itself).

As a script: ``python distributed_worker.py OUTDIR SLOW_RANK COLLECTIVE`` with RANK, WORLD_SIZE
and FXPROF_TEST_STORE (a file for the process group's FileStore) in the environment. Each rank
profiles :class:`RankModel`, gathers on rank 0, and writes what it saw to ``OUTDIR/rankN.json``;
rank 0 also saves the gathered profile. As a model file for the CLI under torchrun:
``distributed_worker.py:straggler_model``.
"""

from __future__ import annotations

import json
import os
import sys
import time

import torch
import torch.distributed as dist
from torch import fx, nn

#: how long the slow rank's nap node sleeps, per call: far above the noise of a busy 2-core
#: machine (the CLI factory takes FXPROF_TEST_SLOW_MS instead, when set)
SLOW_MS = 200


def nap(x: torch.Tensor, ms: int) -> torch.Tensor:
    """Sleep ``ms`` milliseconds (a rank made slow on purpose); one graph node under tracing."""
    if ms:
        time.sleep(ms / 1000)
    return x


fx.wrap("nap")


class RankModel(nn.Module):
    """Linear, ReLU, a nap (long on the slow rank), an all_reduce over the ranks when
    ``collective`` (a functional collective, then its wait), Linear."""

    def __init__(self, nap_ms: int, collective: bool):
        super().__init__()
        self.a = nn.Linear(16, 32)
        self.b = nn.Linear(32, 8)
        self.nap_ms = nap_ms
        self.collective = collective

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.a(x))
        y = nap(y, self.nap_ms)
        if self.collective:
            import torch.distributed._functional_collectives as funcol

            y = funcol.wait_tensor(funcol.all_reduce(y, "sum", dist.group.WORLD))
        return self.b(y)


def straggler_model() -> nn.Module:
    """For the CLI: rank FXPROF_TEST_SLOW_RANK naps FXPROF_TEST_SLOW_MS (default SLOW_MS) per
    run; every rank all-reduces."""
    slow = int(os.environ.get("FXPROF_TEST_SLOW_RANK", "-1"))
    nap_ms = int(os.environ.get("FXPROF_TEST_SLOW_MS", SLOW_MS))
    torch.manual_seed(0)
    return RankModel(nap_ms if int(os.environ.get("RANK", "0")) == slow else 0, collective=True)


def main(outdir: str, slow_rank: int, collective: bool) -> None:
    import fxprof

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    dist.init_process_group("gloo", init_method="file://" + os.environ["FXPROF_TEST_STORE"], rank=rank, world_size=world)
    try:
        torch.manual_seed(0)
        model = RankModel(SLOW_MS if rank == slow_rank else 0, collective).eval()
        x = torch.randn(4, 16)
        prof = fxprof.profile(model, x, warmup=1, iters=6, capture="symbolic")
        merged = fxprof.gather(prof, dst=0)
        try:  # different iters on different ranks: refused on every rank, before any run
            fxprof.profile(model, x, warmup=0, iters=1 + rank, anatomy=False, capture="symbolic")
            mismatch = ""
        except ValueError as exc:
            mismatch = str(exc)
        # decisions one rank takes alone must be taken by all: a memory budget that runs out on
        # rank 1 only (every rank stops with it, none is left at the next collective), and
        # warm-up by time with rank slow_rank slower (every rank does the same number of runs)
        import fxprof.measure.eager.loop as api

        real_budget = api.SampleBudget

        class TightOnRank1(real_budget):
            def allows_another_run(self, samples: int, runs: int) -> bool:
                if rank == 1 and runs >= 3:
                    self.stopped_at = runs
                    return False
                return super().allows_another_run(samples, runs)

        api.SampleBudget = TightOnRank1
        try:
            short = fxprof.profile(RankModel(0, collective=True), x, warmup=0, iters=6, anatomy=False)
        finally:
            api.SampleBudget = real_budget
        by_time = fxprof.profile(RankModel(SLOW_MS // 4 if rank == slow_rank else 0, collective=False), x,
                                 warmup=1, warmup_ms=150, iters=1, anatomy=False, capture="symbolic")
        record = {
            "budget_runs": short.num_runs,
            "budget_note": short.meta.get("capture_note", ""),
            "warmup_runs": by_time.meta["warmup_runs"],
            "rank": rank,
            "gathered": merged is not None,
            "own_ranks": prof.ranks,
            "own_meta_rank": prof.meta.get("rank"),
            "own_barrier_ms": prof.runs["barrier_ms"].tolist(),
            "mismatch": mismatch,
        }
        if merged is not None:
            merged.save(os.path.join(outdir, "merged.json"))
        with open(os.path.join(outdir, f"rank{rank}.json"), "w") as handle:
            json.dump(record, handle)
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1")
