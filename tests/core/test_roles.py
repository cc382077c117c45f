"""Every row says what it is (the ``role`` column), set where the row is made; the analyses read
the role, never a target's text; files written before roles get them derived once on load."""

import json
from pathlib import Path

import pandas as pd
import pytest
import torch
from conftest import Ranged
from torch import nn

import fxprof
from fxprof.core.nodes import NodeInfo
from fxprof.core.profile import Profile
from fxprof.core.rankstats import comm_labels
from fxprof.io.roles import derive_roles
from fxprof.vocab import ROLES

SHARED_GPU = Path(__file__).resolve().parents[3] / "shared" / "gpu"


class Gathers(nn.Module):
    """torch.gather and torch.scatter: model ops whose kind is spelled like a collective's."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x, index):
        y = torch.gather(self.fc(x), 1, index)
        return torch.scatter(y, 1, index, y)


def test_model_ops_spelled_like_collectives_are_the_models_work():
    """Before roles, a row of kind ``gather`` or ``scatter`` read as communication (the collective
    of the same name): ``group_by("comm")`` charged torch.gather to the network."""
    x, index = torch.randn(4, 8), torch.zeros(4, 2, dtype=torch.int64)
    prof = fxprof.profile(Gathers(), x, index, warmup=0, iters=2, anatomy=False, memory=False)
    df = prof.df
    assert {"gather", "scatter"} <= set(df["kind"])
    assert set(df.loc[df["kind"].isin(["gather", "scatter"]), "role"]) == {"model"}
    assert set(comm_labels(df.reset_index())) == {"computation", "(graph)"}
    assert "communication" not in prof.group_by("comm").index


def test_every_row_of_an_eager_profile_and_of_a_training_step_has_its_role():
    prof = fxprof.profile(Ranged(), torch.randn(2, 16), warmup=0, iters=2, anatomy=False, memory=False)
    roles = prof.df["role"]
    assert set(roles) <= set(ROLES)
    assert set(roles[prof.df["op"].isin(["placeholder", "output"])]) == {"plumbing"}
    assert set(roles[prof.df["kind"] == "record_function"]) == {"range"}
    assert (roles == "model").sum() == (~prof.df["op"].isin(["placeholder", "output"]) & (prof.df["kind"] != "record_function")).sum()
    groups = prof.group_by("role")
    assert set(groups.index) == {"model", "plumbing", "range"} and groups.index.name == "role"
    assert groups["nodes"].sum() == len(prof.df) and groups["pct"].sum() == pytest.approx(100.0)
    assert groups.loc["range", "nodes"] == (prof.df["kind"] == "record_function").sum()
    model = nn.Sequential(nn.Linear(8, 8), nn.ReLU())
    train = fxprof.profile(model, torch.randn(2, 8), warmup=0, iters=2, backward=True,
                           optimizer=torch.optim.SGD(model.parameters(), lr=0.1), anatomy=False, memory=False)
    by_phase = train.df.groupby("phase")["role"].agg(set)
    assert by_phase["optimizer"] == {"optimizer"}
    assert "model" in by_phase["backward"] and set(train.df["role"]) <= set(ROLES)


def _fsdp_profile(target_of):
    nodes = [NodeInfo(f"{layer}_{step}", "call_function", target_of(layer, step), "", layer, "", kind=step, role="fsdp")
             for layer in ("a", "b") for step in ("all_gather", "wait")]
    rows, start = [], 0.0
    for run in range(3):
        for node in nodes:
            rows.append((node.name, run, 1.0, 1.0, start, start))
            start += 1.0
    samples = pd.DataFrame(rows, columns=["node", "run", "time_ms", "host_ms", "start_ms", "host_start_ms"])
    runs = pd.DataFrame({"run": [0, 1, 2], "total_ms": [4.0, 4.0, 4.0]})
    return Profile(nodes, samples, runs, {"device": "cpu", "fsdp": {"unshard_async_op": {"a": True, "b": True}}})


def test_fsdp_rows_are_found_by_their_role_whatever_their_target_says():
    """The silent failure roles remove: FSDP's rows were found by a regex over the target's text,
    which matched only because the module making them was named fsdp.py."""
    named = fxprof.overlap(_fsdp_profile(lambda layer, step: f"fxprof.measure.distributed.fsdp.{step}"))
    renamed = fxprof.overlap(_fsdp_profile(lambda layer, step: f"fxprof.measure.parallel.sharding.{step}"))
    assert list(named.index.get_level_values("layer")) == ["a", "b"]
    pd.testing.assert_frame_equal(named, renamed)


def test_files_written_before_roles_read_as_they_always_did(tmp_path):
    nodes = [
        NodeInfo("x", "placeholder", "x", "", "", ""),
        NodeInfo("enter", "call_function", "torch.ops.profiler._record_function_enter_new", "", "", "r", kind="record_function"),
        NodeInfo("fc", "call_module", "fc", "Linear", "fc", "r", kind="linear"),
        NodeInfo("gather", "call_function", "torch.gather", "", "", "", kind="gather"),  # the model's, whatever its kind
        NodeInfo("ar", "call_function", "torch.ops._c10d_functional.all_reduce.default", "", "", "", kind="all_reduce"),
        NodeInfo("dist_gather", "call_function", "torch.distributed.distributed_c10d.gather", "", "", "", kind="gather"),
        NodeInfo("fsdp:b1_all_gather", "call_function", "fsdp.all_gather(b1)", "", "b1", "", kind="all_gather", phase="backward"),
        NodeInfo("b1_reshard", "call_function", "fxprof.measure.distributed.fsdp.reshard", "", "b1", "", kind="reshard"),
        NodeInfo("ddp:bucket0_all_reduce", "call_function", "ddp.all_reduce(bucket 0)", "", "", "", kind="all_reduce",
                 phase="backward"),
        NodeInfo("optimizer.step", "call_method", "SGD.step", "SGD", "(optimizer)", "", kind="optimizer_step", phase="optimizer"),
        NodeInfo("output", "output", "output", "", "", ""),
    ]
    expected = ["plumbing", "range", "model", "model", "collective", "collective", "fsdp", "fsdp", "ddp", "optimizer", "plumbing"]
    table = pd.DataFrame([{c: getattr(n, c) for c in ("op", "target", "kind", "phase")} for n in nodes])
    assert derive_roles(table).tolist() == expected
    # a JSON file of that time: its node records hold no role
    samples = pd.DataFrame({"node": [n.name for n in nodes], "run": 0, "time_ms": 1.0, "host_ms": 1.0,
                            "start_ms": [float(i) for i in range(len(nodes))], "host_start_ms": [float(i) for i in range(len(nodes))]})
    prof = Profile(nodes, samples, pd.DataFrame({"run": [0], "total_ms": [10.0]}), {"device": "cpu"})
    path = tmp_path / "old.json"
    prof.save(path)
    data = json.loads(path.read_text())
    for record in data["nodes"]:
        del record["role"]
    path.write_text(json.dumps(data))
    assert [n.role for n in fxprof.load(path).nodes] == expected
    # a CSV of that time: no role column
    csv = tmp_path / "old.csv"
    prof.to_csv(csv)
    pd.read_csv(csv, dtype=str, keep_default_na=False).drop(columns="role").to_csv(csv, index=False)
    assert fxprof.read_csv(csv)["role"].tolist() == expected


def test_a_saved_profile_keeps_its_roles(tmp_path):
    prof = fxprof.profile(Ranged(), torch.randn(2, 16), warmup=0, iters=2, anatomy=False, memory=False)
    for name in ("p.json", "p.npz"):
        prof.save(tmp_path / name)
        assert [n.role for n in fxprof.load(tmp_path / name).nodes] == [n.role for n in prof.nodes]
    prof.to_csv(tmp_path / "p.csv")
    assert fxprof.read_csv(tmp_path / "p.csv")["role"].tolist() == prof.df["role"].tolist()


@pytest.mark.skipif(not SHARED_GPU.is_dir(), reason="the GPU profiles of ../shared/gpu are not here")
def test_real_profiles_from_before_roles_get_them_on_load():
    for path in sorted(SHARED_GPU.glob("*.json")):
        prof = fxprof.load(path)
        roles = prof.df["role"]
        assert set(roles) <= set(ROLES), path
        assert set(roles[prof.df["op"].isin(["placeholder", "output"])]) <= {"plumbing"}, path
        if prof.is_compiled:
            assert (roles == "kernel").any(), path


def test_a_table_without_roles_is_refused_with_what_to_do():
    table = pd.DataFrame({"op": ["call_function"], "kind": ["all_reduce"], "target": ["x"]})
    with pytest.raises(ValueError, match="no 'role' column.*fxprof.read_csv"):
        comm_labels(table)
