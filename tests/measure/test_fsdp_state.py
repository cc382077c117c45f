"""A training-step profile of an FSDP2 model changes nothing of its training, whatever FSDP's
state when it starts: after a validation pass (a ``torch.no_grad()`` forward, after which FSDP2
keeps the root's parameters unsharded until the next forward with grad) or after a forward
profile, with or without an optimizer, and after a session. Every rank's next training steps
(losses, gradient shards, parameter shards) are bit-identical to a twin's never profiled, and no
parameter keeps a ``.grad`` it did not have.

A real gloo job under ``torchrun`` on the CPU (tests/fsdp_state_worker.py)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from test_distributed import HERE, _env, _torchrun
from test_distributed_sharded import needs_fsdp

WORKER = HERE / "fsdp_state_worker.py"

#: slow: FSDP2's state torchrun job (14 s); tests/measure/test_fsdp_rows.py keeps FSDP2 in the README pass (the README's command stays under ten minutes)
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def records(tmp_path_factory):
    out = tmp_path_factory.mktemp("fsdp_state")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", str(WORKER), str(out)]
    result = _torchrun(cmd, env=_env(), capture_output=True, text=True, timeout=900, stdin=subprocess.DEVNULL, cwd=out)
    # a crash of a rank (SIGSEGV in the state's restore) fails here, with the job's own words
    assert result.returncode == 0, result.stderr[-4000:]
    return [json.loads((out / f"rank{r}.json").read_text()) for r in range(2)]


@needs_fsdp
@pytest.mark.parametrize("case", ["validation_opt", "profile_opt", "validation_no_opt", "profile_no_opt"])
def test_fsdp2_training_profile_after_a_no_grad_forward_changes_nothing(records, case):
    for r in records:
        got = r[case]
        assert got["error"] == "", (r["rank"], got["error"])
        assert got["grads_left"] == [], (r["rank"], got["grads_left"])  # .grad given back: None, as before
        assert got["same_params"] and got["same_training"], (r["rank"], got)


@needs_fsdp
def test_fsdp2_session_then_profile_after_validation_changes_nothing(records):
    for r in records:
        got = r["session"]
        assert got["same_session"] and got["grads_left_session"] == [], got
        assert got["grads_left"] == [] and got["same_training"], got


@needs_fsdp
def test_fsdp2_optimizer_over_gathered_parameters_is_refused(records):
    """An optimizer built from model.parameters() after a no_grad forward holds the root's gathered
    parameters, which FSDP frees: a clear error on every rank, not a step into freed memory."""
    for r in records:
        assert "holds unsharded parameters of FSDP module(s) (root)" in r["late_optimizer"], r["late_optimizer"]


@needs_fsdp
def test_fsdp2_profile_amid_gradient_accumulation_is_refused(records):
    """With gradient sync off, or a microbatch's gradients kept for the next reduce-scatter, a profiled
    backward would add into FSDP's kept gradients: refused on every rank, and the training after it is
    a twin's."""
    for r in records:
        off, pending = r["accumulating"]["refused"]
        assert "gradient sync is off on FSDP module(s) (root), blocks.0, blocks.1" in off, off
        assert "hold gradients accumulated for the next reduce-scatter" in pending, pending
        assert r["accumulating"]["same_training"]
