"""Issue 69 item 3, distributed: four defects measured on main with 2-4 gloo ranks on the CPU.

a) an FSDP2 training step's memory line said "optimizer state 56 B" where each rank held 200 kB of
   AdamW state, and the sharded parameters were missing: DTensors' bytes counted as none;
b) a DDP session whose synced runs (the only ones with the all-reduce) were all left out as busy
   showed the ``ddp:*`` rows with ``calls 0`` and no word why;
c) DDP with a small ``bucket_cap_mb`` made fxprof.profile and fxprof.session raise dynamo's bare
   ``AssertionError``;
d) a rank's note (its unprofiled run raised) was in its own profile but not in the gathered header.

Each has a fast test here (in-process, no torchrun), and one slow job of 2 gloo ranks, started as
plain processes over a file store (tests/distributed6_worker.py), holds them on a real job."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
import torch.distributed as dist
from torch import nn

from fxprof.core.memory import memory_summary
from fxprof.views.memory import memory_line

needs_gloo = pytest.mark.skipif(not (dist.is_available() and dist.is_gloo_available()), reason="needs torch.distributed with gloo")

# ----------------------------------------------------------------------- a) DTensor memory
@pytest.fixture
def fake_world():
    """A fake process group of 2 ranks in this process (no collective runs), for DTensors; gone after."""
    fake_pg = pytest.importorskip("torch.testing._internal.distributed.fake_pg")
    assert not dist.is_initialized()
    dist.init_process_group("fake", store=fake_pg.FakeStore(), rank=0, world_size=2)
    try:
        from torch.distributed.device_mesh import init_device_mesh

        yield init_device_mesh("cpu", (2,))
    finally:
        dist.destroy_process_group()


def _local_bytes(t: torch.Tensor) -> int:
    local = t.to_local() if hasattr(t, "to_local") else t
    return local.numel() * local.element_size()


def test_dtensor_parameters_and_optimizer_state_count_by_their_local_shards(fake_world):
    from torch.distributed.tensor import DTensor, Shard

    from fxprof.measure.passes.memory import MemoryRecording, held_bytes

    model = nn.Module()
    model.w = nn.Parameter(DTensor.from_local(torch.randn(8, 16), fake_world, [Shard(0)]))  # 16 x 16, 8 rows here
    model.b = nn.Parameter(DTensor.from_local(torch.randn(4), fake_world, [Shard(0)]))
    opt = torch.optim.AdamW(model.parameters())
    for p in model.parameters():
        p.grad = DTensor.from_local(torch.randn_like(p.to_local()), fake_world, [Shard(0)])
    opt.step()
    state = [t for s in opt.state.values() for t in s.values() if isinstance(t, torch.Tensor)]
    truth = sum(_local_bytes(t) for t in state)  # the rank's own: exp_avg, exp_avg_sq shards and the step counts
    assert any(isinstance(t, DTensor) for t in state)
    held = held_bytes(model, (), opt)
    assert held["optimizer_state"] == truth == 2 * (8 * 16 + 4) * 4 + 2 * 4, held  # was 8: the step counts alone
    assert held["parameters"] == sum(_local_bytes(p) for p in model.parameters()) == (8 * 16 + 4) * 4, held  # was 0
    assert MemoryRecording(["cpu"], model, (), opt).shards


def test_the_memory_line_says_the_figures_are_this_ranks_shards():
    meta = {"memory": {"peak_bytes": 31944, "peak_node": "bw0:sum_2", "held_bytes": 13824, "shards": True,
                       "breakdown": {"activations": 16488, "parameters": 4424, "optimizer_state": 8888}}}
    summary = memory_summary(meta)
    assert summary is not None and summary.shards and summary.to_dict()["shards"] is True
    line = memory_line(SimpleNamespace(memory=summary))[0]  # the line reads profile.memory alone
    assert line.endswith("; parameters, gradients and optimizer state are this rank's shards"), line
    plain = memory_line(SimpleNamespace(memory=memory_summary({"memory": {**meta["memory"], "shards": False}})))[0]
    assert "shards" not in plain

