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

import inspect
import json
import subprocess
import sys
from types import SimpleNamespace

import pandas as pd
import pytest
import torch
import torch.distributed as dist
from torch import nn

from fxprof.core.contention import emptied_rows
from fxprof.core.memory import memory_summary
from fxprof.core.nodes import NodeInfo
from fxprof.core.overlap import overlap
from fxprof.core.profile import Profile
from fxprof.core.rankmerge import merge, merged_notes, profile_parts, rank_names, with_ranks
from fxprof.errors import TraceError
from fxprof.views import text
from fxprof.views.memory import memory_line
from fxprof.views.overlap import overlap_text

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


# ------------------------------------------------------------- b) rows with no timed call left
def _node(name: str, role: str = "", kind: str = "", scope: str = "") -> NodeInfo:
    return NodeInfo(name=name, op="call_function", target="f", module_type="", scope=scope, range="", kind=kind, role=role)


def _busy_profile(nodes: list[NodeInfo], only_in: dict[str, list[int]], busy: list[int], runs: int = 8) -> Profile:
    """``runs`` runs of 1 ms; every node in every run but the ``only_in`` ones (there alone); the
    ``busy`` runs lost 0.5 ms each to other processes (tests/core/test_machine_line.py's record)."""
    rows = [(n.name, r, 0.1, 0.1, 0.1 * i) for r in range(runs) for i, n in enumerate(nodes) if r in only_in.get(n.name, [r])]
    samples = pd.DataFrame(rows, columns=["node", "run", "time_ms", "host_ms", "start_ms"])
    lost = [0.5 if r in busy else 0.0 for r in range(runs)]
    return Profile(nodes, samples, pd.DataFrame({"run": range(runs), "total_ms": [1.0] * runs}),
                   {"contention": {"lost_ms": lost, "load": [0.5], "cores": 2, "source": "schedstat"}})


def test_rows_whose_every_run_was_left_out_as_busy_say_so_in_the_header():
    """A DDP session on a crowded machine: its 2 synced runs (of 8; the only ones with the
    all-reduce) were busy and left out; the ddp rows read calls 0 with no word."""
    nodes = [_node("linear"), _node("ddp:bucket0_all_reduce", "ddp"), _node("ddp:all_reduce_wait", "ddp")]
    synced = {"ddp:bucket0_all_reduce": [3, 7], "ddp:all_reduce_wait": [3, 7]}
    prof = _busy_profile(nodes, synced, busy=[3, 7])
    assert prof.busy_runs == [3, 7] and prof.kept_runs() == (0, 1, 2, 4, 5, 6)
    assert prof.df.loc["ddp:bucket0_all_reduce", "calls"] == 0 and prof.df.loc["linear", "calls"] == 6
    assert emptied_rows(prof) == {"busy": ["ddp:bucket0_all_reduce", "ddp:all_reduce_wait"]}
    header = text.render_header(prof).splitlines()
    said = [ln for ln in header if ln.startswith("no timed call left")]
    assert said == ["no timed call left in ddp:bucket0_all_reduce, ddp:all_reduce_wait (calls 0): every run that held "
                    "them was left out as busy (it lost time to other processes); their times are in those runs alone "
                    "(keep_outliers, --keep-outliers, keeps every run in the figures)"], header
    prof.keep_outliers = True  # every run in the figures: the rows have their calls, nothing to say
    assert emptied_rows(prof) == {} and not any(ln.startswith("no timed call left") for ln in text.render_header(prof).splitlines())
    # a row that also ran in a quiet run keeps its calls, and is not named
    quiet = _busy_profile(nodes, {"ddp:bucket0_all_reduce": [3, 4], "ddp:all_reduce_wait": [3, 7]}, busy=[3, 7])
    assert emptied_rows(quiet) == {"busy": ["ddp:all_reduce_wait"]}


def test_fxprof_overlap_says_which_fsdp_rows_lost_every_run():
    nodes = [_node("fw_pre:unshard", "fsdp", "all_gather", "blocks.0"), _node("fw_pre:wait", "fsdp", "wait", "blocks.0"),
             _node("linear", scope="blocks.0")]
    everywhere = _busy_profile(nodes, {}, busy=[])
    assert overlap(everywhere).attrs["notes"] == [] and "note:" not in overlap_text(everywhere)
    gone = _busy_profile(nodes, {"fw_pre:unshard": [2, 5], "fw_pre:wait": [2, 5]}, busy=[2, 5])
    table = overlap(gone)
    assert table.empty and len(table.attrs["notes"]) == 1
    assert table.attrs["notes"][0].startswith("no timed call left in fw_pre:unshard, fw_pre:wait (calls 0): every run "
                                              "that held them was left out as busy"), table.attrs["notes"]
    shown = overlap_text(gone)
    assert shown.startswith("no FSDP all-gather left in the runs the figures keep\nnote: no timed call left"), shown


# --------------------------------------------------------------- c) DDP's small bucket cap
#: torch's words (torch/_dynamo/backends/distributed.py, DDPOptimizer), the defect's own
TORCH_WORDS = "First bucket should be smaller/equal to other buckets to get comms warmed up ASAP"


def test_torchs_bucket_assertion_becomes_an_fxprof_error_naming_the_limit_and_the_ways_out():
    from fxprof.measure.distributed.ddp import BUCKET_LIMIT_ASSERTION, bucket_limit

    ddp_optimizer = pytest.importorskip("torch._dynamo.backends.distributed").DDPOptimizer
    assert BUCKET_LIMIT_ASSERTION in inspect.getsource(ddp_optimizer.__init__)  # the words fxprof looks for are still torch's
    with pytest.raises(TraceError) as caught, bucket_limit(nn.Linear(2, 2)):
        raise AssertionError(TORCH_WORDS)
    words = str(caught.value)
    assert isinstance(caught.value.__cause__, AssertionError) and str(caught.value.__cause__) == TORCH_WORDS
    assert "DDPOptimizer" in words and "first bucket (1 MB)" in words
    assert "torch._dynamo.config.optimize_ddp = False" in words and "bucket_cap_mb of at least 1" in words
    with pytest.raises(AssertionError, match="another assertion"), bucket_limit(nn.Linear(2, 2)):
        raise AssertionError("another assertion")  # not torch's bucket limit: as it was


# ---------------------------------------------------------------- d) every rank's notes
def _rank_profile(rank: int, notes: list[str], **meta) -> Profile:
    samples = pd.DataFrame({"node": ["a", "a"], "run": [0, 1], "time_ms": [0.1, 0.1], "host_ms": [0.1, 0.1]})
    prof = Profile([_node("a")], samples, pd.DataFrame({"run": [0, 1], "total_ms": [0.1, 0.1]}),
                   {"rank": rank, "world_size": 3, "backend": "gloo", "notes": notes, **meta})
    return with_ranks(prof, [rank] * 2)


def test_a_gathered_header_keeps_every_ranks_notes_naming_the_rank():
    raised = "the model's own forward could not be timed beside the profiled runs (RuntimeError: boom): no fidelity line"
    parts = [profile_parts(_rank_profile(0, ["shared"])), profile_parts(_rank_profile(1, ["shared", raised])),
             profile_parts(_rank_profile(2, ["shared", raised, "only 2"]))]
    merged = merge(parts)
    assert merged.meta["notes"] == ["shared", f"ranks 1-2: {raised}", "rank 2: only 2"]
    header = text.render_header(merged).splitlines()
    assert f"note: ranks 1-2: {raised}" in header and "note: shared" in header and "note: rank 2: only 2" in header
    assert rank_names([1]) == "rank 1" and rank_names([0, 1, 3]) == "ranks 0-1, 3"
    # a capture's note that differs between ranks: each rank's, named, not rank 0's alone
    metas = [{"rank": 0, "capture_note": "x"}, {"rank": 1, "capture_note": "y"}]
    assert merged_notes(metas) == ["rank 0: x", "rank 1: y"]
    two = merge([profile_parts(_rank_profile(0, [], capture_note="x")), profile_parts(_rank_profile(1, [], capture_note="y"))])
    assert "capture_note" not in two.meta and two.meta["notes"] == ["rank 0: x", "rank 1: y"]
    same = merge([profile_parts(_rank_profile(0, [], capture_note="x")), profile_parts(_rank_profile(1, [], capture_note="x"))])
    assert same.meta["capture_note"] == "x" and "notes" not in same.meta


# ---------------------------------------------------------- the four on a real 2-rank job
@pytest.fixture(scope="module")
def job(tmp_path_factory):
    from test_distributed import HERE, _env, _wait_all

    out = tmp_path_factory.mktemp("dist6")
    procs = [subprocess.Popen([sys.executable, str(HERE / "distributed6_worker.py"), str(out)],
                              env=_env(RANK=str(r), WORLD_SIZE="2", FXPROF_TEST_STORE=str(out / "store")),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL, cwd=out)
             for r in range(2)]
    for rank, (code, _, stderr) in enumerate(_wait_all(procs, timeout=900)):
        assert code == 0, f"rank {rank} failed:\n{stderr[-4000:]}"
    return [json.loads((out / f"rank{r}.json").read_text()) for r in range(2)]


@pytest.mark.slow  # a 2-rank gloo job: FSDP2, DDP compiled six times, a gather (about a minute on 2 busy cores)
@needs_gloo
def test_on_two_gloo_ranks(job):
    for r in job:
        mem = r["memory"]
        # a) AdamW's state on this rank, against the sum over its state tensors' local shards
        assert mem["memory"]["breakdown"]["optimizer_state"] == mem["truth_optimizer"], mem
        assert mem["truth_optimizer"] < mem["whole_sharded_state"]  # the shards, not the whole tensors
        assert mem["memory"]["breakdown"]["parameters"] == mem["truth_parameters"] > 0, mem
        assert mem["line"].endswith("are this rank's shards"), mem["line"]
        # c) torch's limit in fxprof's words, the assertion kept; each way out it names works
        bucket = r["bucket"]
        for case in ("profile", "profile_backward", "session"):
            got = bucket[case]
            assert got["type"] == "TraceError" and got["cause"] == "AssertionError", (case, got)
            assert "optimize_ddp = False" in got["error"] and "bucket_cap_mb of at least 1" in got["error"], got
        for case in ("cap_1", "cap_1_session", "optimize_ddp_off", "optimize_ddp_off_session"):
            assert bucket[case]["error"] == "", (case, bucket[case])
    # d) rank 1's own note, in rank 0's gathered header, naming rank 1
    own = job[1]["notes"]["own_notes"]
    assert any("rank 1's own forward fails" in n for n in own), own
    assert job[0]["notes"]["gathered_notes"] == [f"rank 1: {n}" for n in own if n not in job[0]["notes"]["own_notes"]]
    assert f"note: rank 1: {own[0]}" in job[0]["notes"]["gathered_header"]
