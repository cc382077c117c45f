"""Run under ``torchrun`` by tests/measure/test_ddp.py (not a test module itself).

``torchrun --nproc-per-node 2 ddp_worker.py OUTDIR``: each rank wraps :class:`Six` (six
Linear(256) layers: two DDP buckets with DDP's default 1 MB first bucket) in
``DistributedDataParallel`` (gloo on the CPU), profiles its forward and a training step, trains it
beside a twin never profiled, and writes what it saw to ``OUTDIR/rankN.json``.
"""

from __future__ import annotations

import json
import os
import sys

import torch
import torch.distributed as dist
from sharded_worker import KeepGrads
from torch import nn


class Six(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(256, 256) for _ in range(6)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = torch.relu(layer(x))
        return x


def ddp_model() -> nn.Module:
    from torch.nn.parallel import DistributedDataParallel

    torch.manual_seed(0)
    return DistributedDataParallel(Six())


def _train(model: nn.Module, xs: list[torch.Tensor], session=None) -> list[torch.Tensor]:
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    seen = []
    for x in xs:
        loss = model(x).sum()
        loss.backward()
        seen += [loss.detach().clone()] + [p.grad.clone() for p in model.parameters()]
        optimizer.step()
        optimizer.zero_grad()
        seen += [p.detach().clone() for p in model.parameters()]
        if session is not None:
            session.step()
    return seen


def main(outdir: str) -> None:
    import fxprof

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    try:
        torch.manual_seed(1 + rank)
        x = torch.randn(8, 256)
        xs = [torch.randn(8, 256) for _ in range(3)]
        record: dict = {"rank": rank}
        model, twin = ddp_model(), ddp_model()
        forward = fxprof.profile(model, x, warmup=1, iters=2, anatomy=False, memory=False)
        record["forward"] = [[n.name, n.kind, n.scope] for n in forward.nodes if n.op == "call_function"]
        # a plain step's all-reduced gradients (the twin's), against every profiled step's
        twin(x).sum().backward()
        expected = [p.grad.clone() for p in twin.parameters()]
        twin.zero_grad(set_to_none=True)
        keep = KeepGrads(model.parameters())
        prof = fxprof.profile(model, x, backward=True, optimizer=keep, loss_fn=lambda out: out.sum(), warmup=1, iters=3,
                              anatomy=False, memory=False)
        record["steps"] = len(keep.seen)
        record["same_grads"] = all(torch.equal(g, e) for seen in keep.seen for g, e in zip(seen, expected))
        record["no_grads_left"] = all(p.grad is None for p in model.parameters())
        record["no_hooks"] = not model._comm_hooks
        record["same_training"] = all(torch.equal(a, b) for a, b in zip(_train(model, xs), _train(twin, xs)))
        df = prof.df
        record["rows"] = {name: {"kind": str(df.loc[name, "kind"]), "phase": str(df.loc[name, "phase"]),
                                 "scope": str(df.loc[name, "scope"]), "target": str(df.loc[name, "target"]),
                                 "median_ms": float(df.loc[name, "median_ms"]), "calls": int(df.loc[name, "calls"])}
                          for name in df.index if str(name).startswith("ddp:")}
        record["coverage"] = float(prof.coverage) if hasattr(prof, "coverage") else None
        merged = fxprof.gather(prof)
        if merged is not None:
            comm = merged.group_by("comm")
            record["comm_nodes"] = int(comm.loc["communication", "nodes"])
            record["merged_rows"] = sorted(n for n in merged.df.index if str(n).startswith("ddp:"))
        # a session over the user's own DDP loop: the same rows, the loop's training a twin's
        model, twin = ddp_model(), ddp_model()
        ready: list = []
        with fxprof.session(model, schedule=fxprof.schedule(wait=1, warmup=1, active=2), backward=True, gather=False,
                            on_ready=ready.append) as s:
            losses = _train(model, xs + xs[:1], s)
        record["session_same"] = all(torch.equal(a, b) for a, b in zip(losses, _train(twin, xs + xs[:1])))
        sdf = ready[0].df
        record["session_rows"] = {name: int(sdf.loc[name, "calls"]) for name in sdf.index if str(name).startswith("ddp:")}
        record["session_no_hooks"] = not model._comm_hooks and model.reducer is not None
        # a comm hook of the user's own runs its own collectives: not timed, and said so
        from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

        hooked = ddp_model()
        hooked.register_comm_hook(None, allreduce_hook)
        note = fxprof.profile(hooked, x, backward=True, warmup=1, iters=1, anatomy=False, memory=False).meta.get("capture_note", "")
        record["hooked_note"] = note
        with open(os.path.join(outdir, f"rank{rank}.json"), "w") as handle:
            json.dump(record, handle)
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1])
