"""Sharded models profiled per rank, their collectives as rows: FSDP2 (``fully_shard``: every
layer's nodes and FSDP's all-gathers) and tensor parallelism (``parallelize_module``: each
layer's input and output redistributions).

Real gloo jobs under ``torchrun`` on the CPU (tests/sharded_worker.py): a model of two residual
blocks, each ``fully_shard``-ed, then the root; one such block with ColwiseParallel then
RowwiseParallel linears.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch.distributed as dist
from test_distributed import HERE, _env, _torchrun

import fxprof
from fxprof.core.rankstats import is_communication

WORKER = HERE / "sharded_worker.py"

needs_fsdp = pytest.mark.skipif(
    not (dist.is_available() and dist.is_gloo_available() and hasattr(__import__("torch.distributed.fsdp").distributed.fsdp, "fully_shard")),
    reason="needs torch.distributed with gloo and FSDP2 (torch.distributed.fsdp.fully_shard)")

#: slow: the FSDP2 and tensor-parallel torchrun job (40 s); tests/measure/test_fsdp_rows.py and test_distributed.py keep torchrun in the README pass (the README's command stays under ten minutes)
pytestmark = pytest.mark.slow


def _run(tmp_path, ranks: int, kind: str = "fsdp"):
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(ranks), str(WORKER), str(tmp_path), kind]
    result = _torchrun(cmd, env=_env(), capture_output=True, text=True, timeout=1200, stdin=subprocess.DEVNULL, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-4000:]
    records = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(ranks)]
    return fxprof.load(tmp_path / "merged.json"), records


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory):
    return _run(tmp_path_factory.mktemp("fsdp2"), 2)


@needs_fsdp
def test_fsdp2_all_gathers_are_rows_charged_to_their_layer(two_ranks):
    prof, records = two_ranks
    assert prof.ranks == [0, 1] and len(prof.runs) == 2 * 5
    df = prof.df
    for block in ("blocks.0", "blocks.1"):
        label = block.replace(".", "_")
        rows = df.loc[[f"{label}_all_gather", f"{label}_wait", f"{label}_reshard"]]
        assert rows["kind"].tolist() == ["all_gather", "wait", "reshard"]
        assert (rows["scope"] == block).all()  # charged to the block it gathers for
        assert (rows["median_ms"] > 0).all() and rows["rank_max_ms"].notna().all()
        assert df.loc[f"{label}_all_gather", "bytes"] > 0  # the shards copied in and gathered
    # every node of every layer is timed, between its block's gather and its reshard
    nodes = [n.name for n in prof.nodes]
    for block in ("blocks_0", "blocks_1"):
        start, end = nodes.index(f"{block}_wait"), nodes.index(f"{block}_reshard")
        inside = nodes[start + 1:end]
        assert [df.loc[n, "kind"] for n in inside] == ["linear", "relu", "linear", "add"]
    # the root's parameters (head) are gathered before any block, and FSDP keeps them after forward
    assert nodes.index("root_all_gather") < nodes.index("blocks_0_all_gather") and "root_reshard" not in nodes
    assert all(r["nodes"] == nodes for r in records)  # the same graph on every rank
    assert all(r["capture"] == "symbolic" for r in records)


@needs_fsdp
def test_fsdp2_comm_roll_up_separates_the_gathers(two_ranks):
    prof, _ = two_ranks
    df = prof.df
    comm = is_communication(df.reset_index())
    comm.index = df.index
    assert set(df.index[comm]) == {"root_all_gather", "root_wait", "blocks_0_all_gather", "blocks_0_wait",
                                   "blocks_1_all_gather", "blocks_1_wait"}
    by = prof.group_by("comm")
    assert by.loc["communication", "nodes"] == 6
    assert by.loc["communication", "median_ms"] == pytest.approx(df.loc[comm, "median_ms"].sum())
    ranks = prof.group_by("rank")
    assert (ranks["comm_ms"] > 0).all()
    # per layer: each block's row holds its own gather, wait and reshard with its compute
    per_layer = prof.group_by("scope", depth=2)
    for block in ("blocks.0", "blocks.1"):
        label = block.replace(".", "_")
        own = df[df["scope"].str.startswith(block)]
        assert per_layer.loc[block, "nodes"] == len(own) == 7
        assert per_layer.loc[block, "median_ms"] == pytest.approx(own["median_ms"].sum())
        assert {f"{label}_all_gather", f"{label}_wait", f"{label}_reshard"} <= set(own.index)
        # ... and splits it: its own gather and wait against the rest
        gathers = df.loc[[f"{label}_all_gather", f"{label}_wait"], "median_ms"].sum()
        assert per_layer.loc[block, "comm_ms"] == pytest.approx(gathers)
        assert per_layer.loc[block, "compute_ms"] == pytest.approx(own["median_ms"].sum() - gathers)
    assert per_layer.loc["head", "comm_ms"] == 0
    assert "comm_ms" not in prof.group_by("op").columns and "comm_ms" not in by.columns


@needs_fsdp
def test_fsdp2_profiling_leaves_outputs_parameters_and_rng_unchanged(two_ranks):
    _, records = two_ranks
    for r in records:
        assert r["same_output"] and r["graph_output"], r
        assert r["same_params"] and r["same_rng"], r
        # a training step after profiling: the same loss and shards as on a twin never profiled
        assert r["train_same"] and r["train_loss"] > 0, r


@needs_fsdp
def test_fsdp2_nested_shared_and_traced_into_modules(two_ranks):
    """A module called twice is gathered and freed twice; each call reads the parameters FSDP
    registered for it (not the first call's, freed since); an FSDP module inside another is
    gathered after it and freed before it; the root's own parameter follows its gathers."""
    _, records = two_ranks
    for r in records:
        assert r["nested_output"], r
        steps = [(name, scope) for name, kind, scope in r["nested_nodes"] if kind in ("all_gather", "wait", "reshard")]
        assert [n for n, _ in steps] == [
            "root_all_gather", "root_wait", "a_all_gather", "a_wait", "a_reshard",
            "shared_all_gather", "shared_wait", "shared_reshard",
            "outer_all_gather", "outer_wait", "outer_inner_all_gather", "outer_inner_wait", "outer_inner_reshard",
            "outer_reshard", "shared_all_gather_1", "shared_wait_1", "shared_reshard_1"]
        assert dict(steps)["outer_inner_wait"] == "outer.inner" and dict(steps)["shared_wait_1"] == "shared"


@needs_fsdp
def test_fsdp2_forward_prefetch_is_reproduced(two_ranks):
    """blocks.0 prefetches blocks.1 (set_modules_to_forward_prefetch): blocks.1's all-gather is
    issued right after blocks.0's wait, as FSDP does in blocks.0's pre-forward; blocks.1's wait
    stays before its layer; the values are the model's."""
    _, records = two_ranks
    for r in records:
        nodes = r["prefetch_nodes"]
        assert nodes.index("blocks_1_all_gather") == nodes.index("blocks_0_wait") + 1
        assert nodes.index("blocks_1_wait") == nodes.index("blocks_0_reshard") + 1
        assert nodes.count("blocks_1_all_gather") == 1 and r["prefetch_output"]
        assert r["nodes"].index("blocks_1_all_gather") == r["nodes"].index("blocks_0_reshard") + 1  # without it


@needs_fsdp
def test_fsdp2_what_is_not_supported_yet_is_refused_on_every_rank(two_ranks):
    _, records = two_ranks
    for r in records:
        assert "capture='dynamo' cannot profile an FSDP2 model" in r["dynamo"]
        # a forward-only session cannot run FSDP's hooks as in training: it says to use backward=True
        assert "needs backward=True" in r["session"] and "fxprof.session(model, backward=True)" in r["session"], r["session"]
        assert r["session_at_once"] == r["session"]  # refused by fxprof.session(...) itself, not steps later in the loop
        assert r["after_session"]
        assert "sharded with a MixedPrecisionPolicy" in r["mixed_precision"], r["mixed_precision"]
        assert "leaf_modules names FSDP2 module(s) blocks.1" in r["leaf"], r["leaf"]


@pytest.fixture(scope="module")
def training(tmp_path_factory):
    return _run(tmp_path_factory.mktemp("fsdp2_train"), 2, "train")


@needs_fsdp
def test_fsdp2_training_step_reduce_scatters_are_rows_and_gradients_are_fsdps(training):
    """backward=True: FSDP's hooks run as in training, so its backward work runs (and is timed as
    rows charged to the layer): the pre-backward all-gathers and the post-backward reduce-scatters;
    every profiled step's gradients are the ones a plain training step reduce-scatters."""
    prof, records = training
    assert prof.ranks == [0, 1]
    df = prof.df
    for block in ("blocks.0", "blocks.1"):
        label = block.replace(".", "_")
        forward = df.loc[[f"fsdp:{label}_all_gather", f"fsdp:{label}_wait", f"fsdp:{label}_reshard"]]
        backward = df.loc[[f"fsdp_bw:{label}_all_gather", f"fsdp_bw:{label}_wait", f"fsdp_bw:{label}_reduce_scatter"]]
        assert forward["kind"].tolist() == ["all_gather", "wait", "reshard"] and (forward["phase"] == "forward").all()
        assert backward["kind"].tolist() == ["all_gather", "wait", "reduce_scatter"] and (backward["phase"] == "backward").all()
        for rows in (forward, backward):
            assert (rows["scope"] == block).all() and (rows["median_ms"] > 0).all() and rows["rank_max_ms"].notna().all()
        # the block's own layers, forward and backward, are charged to it too (not to a bare "fc1")
        for phase in ("forward", "backward"):
            assert (df[(df["phase"] == phase) & (df["kind"].isin(["addmm", "mm"]))]["scope"].str.startswith(block)).any()
    assert not df["scope"].isin(["fc1", "fc2"]).any()
    assert df.loc["fsdp_bw:root_reduce_scatter", "kind"] == "reduce_scatter"  # the root's head, in FSDP's final callback
    comm = df[is_communication(df)]
    assert set(comm["kind"]) == {"all_gather", "wait", "reduce_scatter"} and len(comm) == 13
    assert prof.group_by("comm").loc["communication", "nodes"] == 13
    for r in records:
        for model in ("two", "nested", "four"):
            got = r[model]
            assert got["steps"] >= 3 and got["same_grads"], (model, got["steps"])  # every profiled step's
            assert got["same_params"] and got["no_grads_left"] and got["after"] and got["unwrapped"], (model, got)
        # what dynamo ran eagerly is said: TwoBlocks' forward (a graph break in its loop: the head)
        assert "FSDP module(s) (root) (head) ran outside every graph" in r["two"]["capture_note"], r["two"]["capture_note"]
        # fully_shard-ed bare Linears (their forward is torch.nn's, which dynamo compiles only when asked): timed,
        # forward and backward, each under its own path (shared: one graph, two calls)
        assert r["nested"]["capture_note"] == "", r["nested"]["capture_note"]
        for leaf in ("a", "shared", "outer.inner"):
            for phase, kind in (("forward", "addmm"), ("backward", "mm")):
                assert any(k == kind and scope == leaf and ph == phase for _, k, scope, ph in r["nested"]["nodes"]), (leaf, phase)
        # identical blocks share one compiled graph (b1 to b3: same code, same guards); each block's calls are
        # still rows of its own, forward and backward, charged to it
        four = r["four"]
        assert four["capture_note"] == "", four["capture_note"]
        for block in ("b0", "b1", "b2", "b3"):
            for phase, kinds in (("forward", {"addmm"}), ("backward", {"mm"})):
                labels = {name.split(":")[0] for name, kind, scope, ph in four["nodes"]
                          if ph == phase and kind in kinds and scope.startswith(block + ".")}
                assert len(labels) == 1, (block, phase, labels)
        # nested, shared and traced-into FSDP modules: a reduce-scatter for each module, inner before outer; the
        # shared module's post-backward runs once per call, but only the last (once both calls' gradients are in)
        # has gradients to reduce-scatter: the first does nothing and is no row
        names = [n for n, kind, _, _ in r["nested"]["nodes"] if kind == "reduce_scatter"]
        assert names == ["fsdp_bw:outer_inner_reduce_scatter", "fsdp_bw:outer_reduce_scatter",
                         "fsdp_bw:shared_reduce_scatter", "fsdp_bw:a_reduce_scatter", "fsdp_bw:root_reduce_scatter"]


@needs_fsdp
def test_fsdp2_session_over_a_training_loop_times_what_the_profile_does_and_changes_nothing(training):
    """fxprof.session(model, backward=True) over the user's own FSDP2 loop (SGD with momentum, 6 steps,
    3 timed): every rank's losses, gradient shards and parameter shards are bit-identical, step by step, to
    a twin's loop never profiled (a validation pass at step 3 included, untimed); the timed runs hold the same nodes and FSDP rows as the training-step
    profile of the same model (less fxprof's own loss graph and optimizer rows: here they are the loop's);
    rank 0 gets the gathered profile, the other ranks hand theirs over without a warning; a batch the model
    raises on, skipped by the loop, leaves the later runs whole; two forwards feeding one loss are one
    run; a loop that raises leaves no wrapper behind
    and FSDP's state as a twin's."""
    _, records = training
    for r in records:
        session = r["session"]
        for model in ("two", "nested", "four"):
            got = session[model]
            assert got["same"] and got["unwrapped"] and got["warnings"] == [], (r["rank"], model, got)
            assert got["profiles"] == (1 if r["rank"] == 0 else 0)
        # a bad batch the model raises on, skipped by the loop: the timed runs after it are whole, the root's gather first
        skipped = session["skipped"]
        assert skipped["same"] and skipped["unwrapped"] and skipped["runs"] == 3, skipped  # steps 2, 4, 5
        assert skipped["last_run_rows"] == sorted(f"fsdp:{layer}_{step}" for layer in ("root", "blocks_0", "blocks_1")
                                                  for step in ("all_gather", "wait", "reshard") if layer != "root" or step != "reshard")
        # two forwards feeding one loss: one run per step, each call's gathers rows of their own
        joined = session["joined"]
        assert joined["same"] and joined["runs"] == 3, joined
        assert {f"fsdp:blocks_{b}_{step}{n}" for b in (0, 1) for step in ("all_gather", "wait", "reshard")
                for n in ("", "_1")} <= set(joined["rows"]), joined["rows"]
        raised = session["raised"]
        assert raised["error"] == "the loop's own error at step 3" and raised["unwrapped"], raised
        assert raised["incomplete"] and raised["same_after"], raised
    rank0 = records[0]
    for model in ("two", "nested", "four"):
        got = rank0["session"][model]
        assert got["ranks"] == [0, 1] and got["runs"] == 2 * 3
        profiled = [tuple(n) for n in rank0[model]["nodes"]]
        loss_graphs = {name.split(":")[0].replace("fw", "") for name, _, _, phase in profiled if phase == "loss"}
        expected = {n for n in profiled if n[3] != "optimizer" and n[0].split(":")[0].lstrip("fwb") not in loss_graphs}
        extra = {tuple(n) for n in got["nodes"]} - expected
        assert expected <= {tuple(n) for n in got["nodes"]}, model
        # FSDP's own work after the validation pass, shown as it happens: in the next step's backward FSDP2 gathers
        # FourBlocks' last block once more at the end (its backward prefetch follows the eval forward's order; a
        # plain loop without fxprof does the same gather, checked with torch 2.14.1; other versions may not)
        assert extra <= ({("fsdp_bw:b3_all_gather_1", "all_gather", "b3", "backward")} if model == "four" else set()), (model, extra)
        assert got["note"] == rank0[model]["capture_note"]
    # the gathered profile splits compute from communication per layer, with every rank's times
    two = rank0["session"]["two"]
    assert two["comm_nodes"] == 13  # as in the training-step profile: 6 forward, 4 backward gathers/waits, 3 reduce-scatters
    for block in ("blocks.0", "blocks.1"):
        assert two["layer_comm_ms"][block] > 0 and two["layer_compute_ms"][block] > 0
    assert two["fsdp_rows_on_both_ranks"]
    # the session's note says what an FSDP run spans: FSDP's hooks' work before the forward and after the backward
    assert "from the outermost FSDP module's pre-forward" in two["backward_note"], two["backward_note"]
    assert "first forward's start" not in two["backward_note"]
    # fxprof.overlap reads a session's profile as a training step's: each layer's gather paired with its wait
    assert two["fsdp_meta"] == {"unshard_async_op": {"": False, "blocks.0": False, "blocks.1": False}}
    assert sorted(two["overlap"]) == sorted([["", "forward", 1], ["blocks.0", "forward", 1], ["blocks.1", "forward", 1],
                                             ["blocks.1", "backward", 1], ["blocks.0", "backward", 1], ["", "backward", 0]])


@pytest.mark.slow
@needs_fsdp
def test_fsdp2_on_four_ranks(tmp_path):
    """Four ranks: each holds a quarter of every block; the same rows, every rank's outputs unchanged."""
    prof, records = _run(tmp_path, 4)
    assert prof.ranks == [0, 1, 2, 3]
    by = prof.by_rank()
    for node in ("blocks_0_all_gather", "blocks_0_wait", "blocks_1_all_gather", "blocks_1_wait"):
        assert by.loc[node]["median_ms"].gt(0).all() and len(by.loc[node]) == 4
    assert prof.group_by("comm").loc["communication", "nodes"] == 6
    for r in records:
        assert r["same_output"] and r["graph_output"] and r["same_params"] and r["same_rng"], r


# ------------------------------------------------------------------ tensor parallel
@pytest.fixture(scope="module")
def tensor_parallel(tmp_path_factory):
    return _run(tmp_path_factory.mktemp("tp"), 2, "tp")


@needs_fsdp
def test_tensor_parallel_collectives_are_rows_of_their_own(tensor_parallel):
    """fc1 (ColwiseParallel) and fc2 (RowwiseParallel): each split into its input redistribution,
    its sharded matmul and its output redistribution; fc2's output is the all-reduce of the
    partial sums, the only collective, and no longer inside fc2's row."""
    prof, records = tensor_parallel
    df = prof.df
    nodes = [n.name for n in prof.nodes]
    assert nodes == ["x", "fc1_input", "fc1", "fc1_output", "relu", "fc2_input", "fc2", "fc2_output", "add", "output"]
    assert df.loc[["fc1_input", "fc1", "fc1_output", "fc2_input", "fc2", "fc2_output"], "kind"].tolist() == [
        "redistribute", "linear", "redistribute", "redistribute", "linear", "all_reduce"]
    assert df.loc[["fc1_input", "fc1", "fc1_output"], "scope"].tolist() == ["fc1"] * 3
    assert (df.loc[["fc2_input", "fc2", "fc2_output"], "scope"] == "fc2").all()
    assert df.loc["fc2_output", "median_ms"] > 0 and df.loc["fc2_output", "rank_max_ms"] > 0
    by = prof.group_by("comm")
    assert by.loc["communication", "nodes"] == 1
    assert by.loc["communication", "median_ms"] == pytest.approx(df.loc["fc2_output", "median_ms"])
    assert prof.by_rank().loc["fc2_output"]["median_ms"].gt(0).all()
    for r in records:
        assert r["nodes"] == nodes and r["capture"] == "symbolic"
        assert r["same_output"] and r["graph_output"] and r["same_params"] and r["same_rng"], r


@pytest.mark.slow
@needs_fsdp
def test_fsdp2_over_tensor_parallel_blocks_on_a_2x2_mesh(tmp_path):
    """Four ranks, each block tensor parallel over two of them and sharded by FSDP2 over the
    other two: FSDP's gathers and the tensor-parallel redistributions are rows of their own."""
    prof, records = _run(tmp_path, 4, "2d")
    df = prof.df
    nodes = [n.name for n in prof.nodes]
    block = nodes[nodes.index("blocks_0_all_gather"):nodes.index("blocks_0_reshard") + 1]
    assert block == ["blocks_0_all_gather", "blocks_0_wait", "blocks_0_fc1_input", "blocks_0_fc1", "blocks_0_fc1_output",
                     "relu", "blocks_0_fc2_input", "blocks_0_fc2", "blocks_0_fc2_output", "add", "blocks_0_reshard"]
    assert df.loc["blocks_0_fc2_output", "kind"] == "all_reduce" and df.loc["blocks_0_fc1_output", "kind"] == "redistribute"
    assert (df.loc[block, "scope"].str.startswith("blocks.0")).all()
    assert prof.group_by("comm").loc["communication", "nodes"] == 8  # 3 gathers, 3 waits, 2 all-reduces
    for r in records:
        assert r["same_output"] and r["graph_output"] and r["same_params"] and r["same_rng"], r


def test_roll_ups_without_collectives_have_no_comm_columns():
    import torch
    from torch import nn

    prof = fxprof.profile(nn.Sequential(nn.Linear(4, 4), nn.ReLU()), torch.ones(2, 4), warmup=0, iters=2, anatomy=False)
    assert "comm_ms" not in prof.group_by("scope").columns and "compute_ms" not in prof.group_by("module_type").columns


@pytest.mark.slow
@needs_fsdp
def test_fsdp2_names_the_slow_rank_and_the_others_wait_in_the_next_gather(tmp_path):
    """Rank 1 naps SLOW_MS in blocks.0 (the others 1 ms): the merged profile names rank 1, and
    rank 0 spends the difference in blocks.1's gather, where it meets rank 1 again."""
    from distributed_worker import SLOW_MS

    from fxprof.core.ranks import straggler

    prof, _ = _run(tmp_path, 2, "slow")
    assert straggler(prof)["rank"] == 1
    by = prof.by_rank()["median_ms"]
    assert by[("nap", 1)] >= SLOW_MS * 0.9 and by[("nap", 0)] < SLOW_MS / 4
    gather_0 = by[("blocks_1_all_gather", 0)] + by[("blocks_1_wait", 0)]
    gather_1 = by[("blocks_1_all_gather", 1)] + by[("blocks_1_wait", 1)]
    assert gather_0 > gather_1 + SLOW_MS / 2
    layers = prof.group_by("scope", depth=2)
    assert layers.loc["blocks.1", "comm_ms"] > layers.loc["blocks.1", "compute_ms"]
