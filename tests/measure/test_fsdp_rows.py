"""FSDP2's backward rows say what FSDP did: a microbatch of gradient accumulation (gradient sync
off) is an ``accumulate`` row of its own, not a reduce-scatter; a frozen block, which has no
gradient, has no reduce-scatter row; a session's gathered profile names its backend.

A real gloo job under ``torchrun`` on the CPU (tests/fsdp_rows_worker.py)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from test_distributed import HERE, _env, _torchrun
from test_distributed_sharded import needs_fsdp

WORKER = HERE / "fsdp_rows_worker.py"


@pytest.fixture(scope="module")
def record(tmp_path_factory):
    out = tmp_path_factory.mktemp("fsdp_rows")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", str(WORKER), str(out)]
    result = _torchrun(cmd, env=_env(), capture_output=True, text=True, timeout=900, stdin=subprocess.DEVNULL, cwd=out)
    assert result.returncode == 0, result.stderr[-4000:]
    return json.loads((out / "rows.json").read_text())


@needs_fsdp
def test_gradient_accumulation_microbatches_are_not_reduce_scatters(record):
    """Four timed microbatches, two with gradient sync off: each layer's reduce-scatter row holds the
    two synced ones only (per rank), its accumulate row the other two, and accumulation is not
    communication; the loop's losses are a twin's."""
    got = record["accumulation"]
    assert got["same"] and got["runs"] == 2 * 4, got
    rows = got["rows"]
    for layer in ("blocks_0", "blocks_1", "root"):
        reduce, keep = rows[f"fsdp_bw:{layer}_reduce_scatter"], rows[f"fsdp_bw:{layer}_accumulate"]
        assert reduce["kind"] == "reduce_scatter" and reduce["calls"] == {"0": 2, "1": 2}, (layer, reduce)
        assert keep["kind"] == "accumulate" and keep["phase"] == "backward" and keep["calls"] == {"0": 2, "1": 2}, (layer, keep)
        assert not keep["comm"]
    assert not any(name.endswith("_reduce_scatter_1") or name.endswith("_accumulate_1") for name in rows), sorted(rows)


@needs_fsdp
def test_a_frozen_block_has_no_reduce_scatter_row(record):
    rows = record["frozen"]["rows"]
    assert "fsdp_bw:blocks_0_reduce_scatter" in rows and "fsdp_bw:root_reduce_scatter" in rows, sorted(rows)
    # blocks.1 is frozen: its parameters are still gathered for the backward through it, but nothing is reduced
    assert "fsdp_bw:blocks_1_all_gather" in rows
    assert not any(name.startswith("fsdp_bw:blocks_1_reduce_scatter") for name in rows), sorted(rows)


@needs_fsdp
def test_a_sessions_gathered_profile_names_its_backend(record):
    for got in (record["accumulation"], record["frozen"]):
        assert got["header"] and got["header"][0].startswith("ranks: 2 of world size 2 (gloo)"), got["header"]
