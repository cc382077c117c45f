"""Regression tests for issue 69, item 2: scopes are the model's own module paths in every mode.

``fxprof.profile`` and ``fxprof.session``, with and without ``backward=True``, on an ``nn.Sequential``
and on a module whose submodule breaks the graph (a ``.item()``-driven ``if``), and FSDP2
``fully_shard``-ed layers: every scope is a path of ``model.named_modules()`` (or a bookkeeping
label such as ``(loss)``), and ``group_by("scope")`` splits the time into the model's top-level
children. Before, a session's training profile named its scopes ``L.fn.__self__.0`` (dynamo's name
for a compiled bound ``forward``) and a graph break gave ``L.s.w_in`` and ``L.___stack0`` (the names
of a resumed frame's locals), all rolled up under one ``L``."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from torch import nn

import fxprof

torch._logging.set_logs(dynamo=logging.ERROR)

QUICK = {"warmup": 1, "iters": 2, "anatomy": False, "memory": False}


class Gate(nn.Module):
    """Breaks the graph inside itself: a Python ``if`` on a tensor's value. Its ``forward`` names
    its module ``s``, so a frame dynamo compiles from it alone says ``L['s']``."""

    def __init__(self) -> None:
        super().__init__()
        self.w_in = nn.Linear(8, 8)
        self.w_out = nn.Linear(8, 8)

    def forward(s, x: torch.Tensor) -> torch.Tensor:  # noqa: N805 - a name other than self, on purpose
        h = s.w_in(x)
        if h.sum().item() > -1e9:
            h = torch.relu(h)
        return s.w_out(h)


class Broken(nn.Module):
    """A graph break inside a submodule, with a module (``out``) on dynamo's stack across it."""

    def __init__(self) -> None:
        super().__init__()
        self.inp = nn.Linear(8, 8)
        self.block = Gate()
        self.out = nn.Linear(8, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(self.block(self.inp(x)))


def sequential() -> nn.Module:
    return nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Sequential(nn.Linear(8, 8), nn.GELU()), nn.Linear(8, 4))


MODELS = {"sequential": sequential, "broken": Broken}
#: the top-level children whose nodes each model's profile must show as groups of their own
CHILDREN = {"sequential": {"0", "1", "2", "3"}, "broken": {"inp", "block", "out"}}


def _x() -> torch.Tensor:
    return torch.randn(4, 8)


def _in_model(prof: fxprof.Profile, model: nn.Module) -> None:
    """Every scope is a module of the model (or a label in parentheses); group_by('scope') rolls up by top-level child."""
    names = {name for name, _ in model.named_modules()}
    scopes = {str(s) for s in prof.df["scope"] if str(s)}
    foreign = sorted(s for s in scopes if not s.startswith("(") and s not in names)
    assert not foreign, (foreign, sorted(names))
    top = {name for name in names if name and "." not in name}
    groups = {str(g) for g in prof.group_by("scope", depth=1).index}
    assert {g for g in groups if not g.startswith("(")} <= top, (groups, top)
    return None


def _session(model: nn.Module, backward: bool, steps: int = 4) -> fxprof.Profile:
    with fxprof.session(model, schedule=fxprof.schedule(warmup=1, active=2), backward=backward) as s:
        for _ in range(steps):
            out = s.model(_x())
            if backward:
                out.sum().backward()
            s.step()
    (prof,) = s.profiles
    return prof


@pytest.mark.parametrize("backward", [False, True], ids=["forward", "backward"])
@pytest.mark.parametrize("kind", sorted(MODELS))
@pytest.mark.parametrize("mode", ["profile", "session"])
def test_scopes_are_the_models_module_paths(mode, kind, backward):
    torch.manual_seed(0)
    model = MODELS[kind]()
    prof = fxprof.profile(model, _x(), backward=backward, **QUICK) if mode == "profile" else _session(model, backward)
    _in_model(prof, model)
    groups = {str(g) for g in prof.group_by("scope", depth=1).index}
    # every top-level child with work of its own is a group (a ReLU/GELU runs as one op in its scope)
    assert CHILDREN[kind] <= groups, (sorted(groups), mode, kind, backward)
    if kind == "broken":
        scopes = set(prof.df["scope"])
        assert {"block.w_in", "block.w_out", "out"} <= scopes, sorted(scopes)


def test_a_session_after_a_profile_of_the_same_class_places_its_own_modules():
    """Dynamo keeps the graphs compiled for a class's code and runs them for the next instance: the
    module identities those graphs recorded are the first model's, so the frame that runs the graph
    places its nodes, not the recorded identity."""
    torch.manual_seed(0)
    fxprof.profile(Broken(), _x(), backward=True, **QUICK)
    model = Broken()
    prof = _session(model, backward=True)
    _in_model(prof, model)
    assert {"inp", "block.w_in", "block.w_out", "out"} <= set(prof.df["scope"]), sorted(set(prof.df["scope"]))


def test_repeated_blocks_with_a_break_inside_get_real_paths():
    """Two identical blocks, each breaking the graph, share the graphs dynamo compiled: a training
    step charges their calls to real paths of the model, never to dynamo's names; a function with no
    module stack (the ``relu`` after the break) is in the block that ran it, not at the root. (The
    Sequential's own ``forward`` is torch's code, which dynamo does not compile as a frame of its
    own after the break: its other layers run outside the graphs.)"""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 8), Gate(), Gate(), nn.Linear(8, 4))
    prof = fxprof.profile(model, _x(), backward=True, **QUICK)
    _in_model(prof, model)
    df = prof.df
    gates = {str(s) for s in df["scope"] if str(s).startswith(("1.", "2."))}
    assert {s.split(".", 1)[1] for s in gates} == {"w_in", "w_out"}, sorted(set(df["scope"]))
    relu = df[(df["kind"] == "relu") & (df["phase"] == "forward")]
    assert len(relu) and set(relu["scope"]) <= {"1", "2"}, relu[["scope", "kind"]]


def test_a_stack_without_identities_falls_back_to_the_text():
    """Keys that are not module ids (a specialized module's ``L__self___fc``, another torch) and
    modules the model does not hold (a graph compiled for another instance): the text is read, and
    the result is still a module of the model, never dynamo's name for it."""
    from fxprof.measure.capture.graph import ModulePaths
    from fxprof.measure.capture.training import Where, _placement

    model = Broken()
    where = Where(type(model), modules=ModulePaths(model))
    cases = {
        ("L__self___inp", "L['self'].inp", nn.Linear): "inp",
        ("L__fn___self___block_w_in", "L['fn'].__self__.block.w_in", nn.Linear): "block.w_in",
        ("1", "L['s'].w_out", nn.Linear): "block.w_out",  # another frame's local: the one Linear whose path ends so
        ("1", "L['___stack0']", nn.Linear): "",  # several Linears: the frame's module (here the root)
        (str(id(nn.Linear(1, 1))), "L['___stack0']", Gate): "block",  # a stale id: the one Gate
        (str(id(model.block.w_in)), "L['s'].w_in", nn.ReLU): "",  # an id whose class differs is not trusted
        (str(id(model.out)) + "@1", "L['___stack0']", nn.Linear): "out",  # a second call of the module
    }
    for (key, text, cls), expected in cases.items():
        assert _placement({key: (text, cls)}, where) == (expected, "Linear" if cls is nn.Linear else
                                                         "ReLU" if cls is nn.ReLU else "", False), (key, text)
    step = {"L__self___model": ("L['self'].model", Broken), "L__self___model_out": ("L['self'].model.out", nn.Linear)}
    assert _placement(step, where) == ("out", "Linear", False)  # the training step's path to the model


# ---------------------------------------------------------------------- FSDP2, one process
_FSDP = textwrap.dedent("""
    import json, sys, tempfile
    import torch, torch.distributed as dist
    from torch import nn
    from torch.distributed.fsdp import fully_shard
    import fxprof
    sys.path.insert(0, sys.argv[2])
    from test_scopes_everywhere import Gate
    dist.init_process_group("gloo", init_method="file://" + tempfile.mktemp(), rank=0, world_size=1)
    torch.manual_seed(0)
    def make(gate):
        inner = Gate() if gate else nn.Sequential(nn.Linear(8, 8), nn.ReLU())
        m = nn.Sequential(nn.Linear(8, 8), inner, nn.Linear(8, 4))
        fully_shard(m[0]); fully_shard(m[1]); fully_shard(m)
        return m
    x = torch.randn(4, 8)
    out = {}
    for gate in (False, True):
        m = make(gate)
        p = fxprof.profile(m, x, backward=True, warmup=1, iters=2, anatomy=False, memory=False)
        m2 = make(gate)
        with fxprof.session(m2, schedule=fxprof.schedule(warmup=1, active=2), backward=True) as s:
            for _ in range(4):
                m2(x).sum().backward()
                s.step()
        for name, prof, model in (("profile", p, m), ("session", s.profiles[0], m2)):
            out[f"{name}_{gate}"] = {"scopes": sorted({str(v) for v in prof.df["scope"]}),
                                     "groups": sorted(str(g) for g in prof.group_by("scope", depth=1).index),
                                     "names": sorted(n for n, _ in model.named_modules())}
    dist.destroy_process_group()
    with open(sys.argv[1], "w") as f:
        json.dump(out, f)
""")


def _fsdp_available() -> bool:
    import torch.distributed as dist

    return dist.is_available() and dist.is_gloo_available() and hasattr(__import__("torch.distributed.fsdp").distributed.fsdp, "fully_shard")


@pytest.mark.skipif(not _fsdp_available(), reason="needs torch.distributed with gloo and FSDP2 (fully_shard)")
def test_fsdp2_sharded_layers_scopes_are_module_paths(tmp_path):
    """FSDP2 layers on one gloo process: each sharded layer's graph is compiled from its own
    ``forward`` (``L['fn'].__self__.0``), placed under the layer's path (``1.0``), and a break
    inside a sharded layer keeps the layer's paths (``1.w_in``, ``1.w_out``)."""
    script, result = tmp_path / "fsdp_scopes.py", tmp_path / "scopes.json"
    script.write_text(_FSDP)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(Path(fxprof.__file__).parents[1]), os.environ.get("PYTHONPATH")]))}
    for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(key, None)
    done = subprocess.run([sys.executable, str(script), str(result), str(Path(__file__).parent)], env=env,
                          capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr[-4000:]
    import json

    got = json.loads(result.read_text())
    for case, record in got.items():
        names = set(record["names"])
        foreign = [s for s in record["scopes"] if s and not s.startswith("(") and s not in names]
        assert not foreign, (case, foreign)
        assert {g for g in record["groups"] if not g.startswith("(")} <= {"0", "1", "2"}, (case, record["groups"])
        expected = {"1.w_in", "1.w_out"} if case.endswith("True") else {"1.0", "1.1"}
        assert expected <= set(record["scopes"]), (case, record["scopes"])
