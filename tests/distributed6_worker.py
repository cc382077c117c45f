"""Run by tests/regressions/test_distributed6.py (not a test module itself): 2 gloo ranks on the
CPU, started as plain processes over a file store (``RANK``, ``WORLD_SIZE``,
``FXPROF_TEST_STORE``), as tests/measure/test_distributed.py's four ranks are.

``python distributed6_worker.py OUTDIR``: on each rank, what issue 69's distributed defects need:

- ``memory``: an FSDP2 model's training-step profile with AdamW (its state made by a step before),
  the memory pass's optimizer state and parameters against the rank's own shards summed here;
- ``bucket``: a DDP model with ``bucket_cap_mb=0.1`` through fxprof.profile and fxprof.session
  (torch's DDPOptimizer refuses it), then the ways out the error names;
- ``notes``: rank 1's model fails in its own (unprofiled) forward; the gathered header of rank 0.

Each rank writes ``OUTDIR/rankN.json``.
"""

from __future__ import annotations

import json
import os
import sys

import torch
import torch.distributed as dist
from ddp_worker import Six
from sharded_worker import sharded_model
from torch import nn


def _bytes(t: torch.Tensor) -> int:
    local = t.to_local() if hasattr(t, "to_local") else t
    return local.numel() * local.element_size()


def memory_case() -> dict:
    import fxprof

    model = sharded_model()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x = torch.randn(8, 16)
    model(x).square().mean().backward()  # AdamW's state is made by its first step
    opt.step()
    opt.zero_grad()
    truth = sum(_bytes(t) for state in opt.state.values() for t in state.values() if isinstance(t, torch.Tensor))
    whole = sum(t.numel() * t.element_size() for state in opt.state.values() for t in state.values()
                if isinstance(t, torch.Tensor) and hasattr(t, "to_local"))
    params = sum(_bytes(p) for p in model.parameters())
    prof = fxprof.profile(model, x, backward=True, optimizer=opt, warmup=1, iters=2, anatomy=False, memory=True)
    line = next((ln for ln in prof.summary().splitlines() if ln.startswith("memory:")), "")
    return {"truth_optimizer": truth, "whole_sharded_state": whole, "truth_parameters": params,
            "memory": prof.meta.get("memory"), "line": line}


def _ddp(cap: float) -> nn.Module:
    from torch.nn.parallel import DistributedDataParallel

    torch.manual_seed(0)
    return DistributedDataParallel(Six(), bucket_cap_mb=cap)


def _session(model: nn.Module, x: torch.Tensor) -> None:
    import fxprof

    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with fxprof.session(model, schedule=fxprof.schedule(wait=0, warmup=1, active=1), backward=True, gather=False) as s:
        for _ in range(2):
            model(x).sum().backward()
            opt.step()
            opt.zero_grad()
            s.step()


def _outcome(call) -> dict:
    try:
        call()
        return {"error": "", "type": "", "cause": ""}
    except Exception as exc:
        return {"error": str(exc), "type": type(exc).__name__, "cause": type(exc.__cause__).__name__}


def bucket_case() -> dict:
    import torch._dynamo

    import fxprof

    x = torch.randn(4, 256)
    out = {"profile": _outcome(lambda: fxprof.profile(_ddp(0.1), x, warmup=0, iters=1, anatomy=False)),
           "profile_backward": _outcome(lambda: fxprof.profile(_ddp(0.1), x, backward=True, warmup=0, iters=1,
                                                               anatomy=False)),
           "session": _outcome(lambda: _session(_ddp(0.1), x)),
           # the ways out the error names, each tried
           "cap_1": _outcome(lambda: fxprof.profile(_ddp(1), x, backward=True, warmup=0, iters=1, anatomy=False)),
           "cap_1_session": _outcome(lambda: _session(_ddp(1), x))}
    torch._dynamo.config.optimize_ddp = False
    try:
        out["optimize_ddp_off"] = _outcome(lambda: fxprof.profile(_ddp(0.1), x, backward=True, warmup=0, iters=1,
                                                                  anatomy=False))
        out["optimize_ddp_off_session"] = _outcome(lambda: _session(_ddp(0.1), x))
    finally:
        torch._dynamo.config.optimize_ddp = True
    return out


class FailsUnprofiledOnRank1(nn.Module):
    """A Linear whose own forward (outside fxprof's tracing) fails on rank 1 alone."""

    def __init__(self, rank: int):
        super().__init__()
        self.rank = rank
        self.fc = nn.Linear(16, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.rank == 1 and not torch.fx._symbolic_trace.is_fx_tracing():
            raise RuntimeError("rank 1's own forward fails")
        return self.fc(x)


def notes_case(rank: int) -> dict:
    import fxprof

    torch.manual_seed(0)
    prof = fxprof.profile(FailsUnprofiledOnRank1(rank), torch.randn(4, 16), warmup=1, iters=3, anatomy=False,
                          capture="symbolic")
    merged = fxprof.gather(prof, dst=0)
    return {"own_notes": list(prof.meta.get("notes", [])),
            "gathered_notes": list(merged.meta.get("notes", [])) if merged is not None else None,
            "gathered_header": merged.summary().split("\n\n")[0] if merged is not None else None}


def main(outdir: str) -> None:
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    dist.init_process_group("gloo", init_method="file://" + os.environ["FXPROF_TEST_STORE"], rank=rank, world_size=world)
    try:
        record = {"rank": rank, "memory": memory_case(), "bucket": bucket_case(), "notes": notes_case(rank)}
        with open(os.path.join(outdir, f"rank{rank}.json"), "w") as handle:
            json.dump(record, handle)
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1])
