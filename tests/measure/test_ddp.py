"""DistributedDataParallel under fxprof: a forward's rows per layer (not all under DDP's
``module``), and a training step's bucketed gradient all-reduce as rows (each bucket's issue, and
the wait for them all after the backward), with the training unchanged.

A real gloo job under ``torchrun`` on the CPU (tests/ddp_worker.py)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch.distributed as dist
from test_distributed import HERE, _env, _torchrun

WORKER = HERE / "ddp_worker.py"

needs_gloo = pytest.mark.skipif(not (dist.is_available() and dist.is_gloo_available()), reason="needs torch.distributed with gloo")

#: slow: DDP's torchrun job (13 s); tests/measure/test_distributed.py is the README pass's torchrun representative (the README's command stays under ten minutes)
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def records(tmp_path_factory):
    out = tmp_path_factory.mktemp("ddp")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", str(WORKER), str(out)]
    result = _torchrun(cmd, env=_env(), capture_output=True, text=True, timeout=900, stdin=subprocess.DEVNULL, cwd=out)
    assert result.returncode == 0, result.stderr[-4000:]
    return [json.loads((out / f"rank{r}.json").read_text()) for r in range(2)]


@needs_gloo
def test_a_ddp_forward_is_split_per_layer(records):
    """Dynamo splits DDP's graph at its buckets; every Linear is a row of its own layer, charged to
    the wrapped model's path (layers.3), none to DDP's ``module``."""
    for r in records:
        linears = [(name, scope) for name, kind, scope in r["forward"] if kind == "linear"]
        assert sorted(scope for _, scope in linears) == [f"layers.{i}" for i in range(6)], r["forward"]
        assert not any(scope == "module" or scope.startswith("module.") for _, _, scope in r["forward"]), r["forward"]


@needs_gloo
def test_a_ddp_training_step_has_its_all_reduce_as_rows(records):
    for r in records:
        rows = r["rows"]
        assert set(rows) == {"ddp:bucket0_all_reduce", "ddp:bucket1_all_reduce", "ddp:all_reduce_wait"}, rows
        for name, row in rows.items():
            assert row["phase"] == "backward" and row["calls"] == 3, (name, row)
            assert row["kind"] == ("wait" if name.endswith("wait") else "all_reduce")
        assert rows["ddp:bucket0_all_reduce"]["median_ms"] > 0 and rows["ddp:bucket1_all_reduce"]["median_ms"] > 0
        # each bucket's row says which layers it holds (DDP fills its buckets in the order the gradients became
        # ready, rebuilt after the first backward); together, every layer
        held = [rows[f"ddp:bucket{k}_all_reduce"]["target"].rpartition(" of ")[2].rstrip(")").split(", ") for k in (0, 1)]
        assert set(held[0]) | set(held[1]) == {f"layers.{i}" for i in range(6)} and "?" not in held[0] + held[1], rows
        assert rows["ddp:bucket0_all_reduce"]["scope"] == rows["ddp:bucket1_all_reduce"]["scope"] == "layers"
        assert rows["ddp:all_reduce_wait"]["scope"] == ""
    merged = records[0]
    assert merged["merged_rows"] == sorted(records[0]["rows"])
    assert merged["comm_nodes"] == 3


@needs_gloo
def test_a_ddp_training_profile_changes_nothing(records):
    """Every profiled step's gradients are DDP's all-reduced ones; afterwards no gradient is left, no
    comm hook, and training goes on bit-identical to a twin never profiled (the reducer has its own
    process group back)."""
    for r in records:
        assert r["steps"] >= 3 and r["same_grads"], r
        assert r["no_grads_left"] and r["no_hooks"] and r["same_training"], r


@needs_gloo
def test_a_ddp_comm_hook_of_the_users_own_is_said_untimed(records):
    for r in records:
        assert "DDP runs a comm hook of its own: its collectives are not timed" in r["hooked_note"], r["hooked_note"]


@needs_gloo
def test_a_session_over_a_ddp_loop_has_the_all_reduce_rows_and_changes_nothing(records):
    """fxprof.session(ddp, backward=True) over the user's own loop (4 steps, 2 timed): each timed run
    has every bucket's all-reduce and the wait (the run ends after DDP's wait, in autograd's final
    callbacks), and the loop's losses, gradients and parameters are a twin's."""
    for r in records:
        assert r["session_same"] and r["session_no_hooks"], r
        assert r["session_rows"] == {"ddp:bucket0_all_reduce": 2, "ddp:bucket1_all_reduce": 2, "ddp:all_reduce_wait": 2}, r
