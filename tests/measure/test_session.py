"""fxprof.session: profiling inside the user's own loop (schedule, step(), cycles, on_ready).

Real loops: a small CNN (and resnet18, slow) trained on a synthetic loader whose last batch is
short, a tiny transformer fed batches of varying sequence length, an exception and a Ctrl-C in
the middle of a cycle. A fake clock makes one cycle's table exact.
"""

from __future__ import annotations

import copy
import subprocess
import sys

import pytest
import torch
from conftest import FakeCostModel, Work
from torch import nn

import fxprof
from fxprof.core.signatures import session_runs


# ------------------------------------------------------------------ the schedule
@pytest.mark.parametrize("kw", [dict(wait=1, warmup=1, active=3, repeat=2), dict(wait=0, warmup=2, active=1, repeat=0),
                                dict(wait=2, warmup=0, active=2, repeat=1, skip_first=3)])
def test_schedule_follows_torch_profiler_schedule(kw):
    from torch.profiler import ProfilerAction
    from torch.profiler import schedule as torch_schedule

    names = {ProfilerAction.NONE: "none", ProfilerAction.WARMUP: "warmup", ProfilerAction.RECORD: "active",
             ProfilerAction.RECORD_AND_SAVE: "active_last"}
    ours, theirs = fxprof.schedule(**kw), torch_schedule(**kw)
    assert [ours(i) for i in range(40)] == [names[theirs(i)] for i in range(40)]


def test_schedule_refuses_nonsense():
    with pytest.raises(ValueError, match="active must be >= 1"):
        fxprof.schedule(active=0)
    with pytest.raises(ValueError, match="wait must be an integer >= 0"):
        fxprof.schedule(wait=-1)


# -------------------------------------------------------------- small real models
class SmallCNN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.drop = nn.Dropout(0.0)
        self.fc = nn.Linear(8, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.bn(self.conv(x)))
        y = torch.flatten(nn.functional.adaptive_avg_pool2d(y, 1), 1)
        return self.fc(self.drop(y))


def _loader(batches: int, batch: int = 4, last: int = 2, size: int = 16, seed: int = 0) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """A synthetic loader: ``batches`` batches of ``batch`` images, the last one short."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for i in range(batches):
        n = last if i == batches - 1 else batch
        out.append((torch.randn(n, 3, size, size, generator=g), torch.randint(0, 10, (n,), generator=g)))
    return out


def _train(model: nn.Module, loader: list, session: "fxprof.measure.session.session.Session | None" = None) -> list[float]:
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    losses = []
    for x, y in loader:
        out = (session.model if session is not None else model)(x)
        loss = nn.functional.cross_entropy(out, y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
        if session is not None:
            session.step()
    return losses


def test_training_loop_gives_one_profile_per_cycle_and_trains_exactly_as_eager():
    torch.manual_seed(0)
    model = SmallCNN().train()
    twin = copy.deepcopy(model)
    loader = _loader(10)  # steps 0-9; step 9's batch is short (2 images)
    hook_calls = []
    handle = model.register_forward_hook(lambda m, i, o: hook_calls.append(i[0].shape[0]))
    ready = []
    params = [id(p) for p in model.parameters()]
    with fxprof.session(model, schedule=fxprof.schedule(wait=1, warmup=1, active=3, repeat=2), on_ready=ready.append) as s:
        assert s.model is model
        losses = _train(model, loader, s)
    eager_losses = _train(twin, loader)

    # the same training, bit for bit: losses, parameters, batch-norm statistics, momentum
    assert losses == eager_losses
    for (name, a), b in zip(model.state_dict().items(), twin.state_dict().values()):
        assert torch.equal(a, b), name
    # the model is left as it was: no forward of ours, the user's hook kept and called every step
    assert "forward" not in model.__dict__ and type(model).forward is SmallCNN.forward
    assert hook_calls == [x.shape[0] for x, _ in loader]
    handle.remove()
    assert model.training and [id(p) for p in model.parameters()] == params

    # cycles: wait 0, warmup 1, active 2-4 | wait 5, warmup 6, active 7-9
    assert [p.meta["step"] for p in ready] == [4, 9] and s.profiles == ready
    first, second = ready
    assert first.meta["run_steps"] == [2, 3, 4] and first.num_runs == 3
    # step 9's short batch is a new signature: run untimed (captured), not timed; the header says so
    assert second.meta["run_steps"] == [7, 8]
    assert second.meta["untimed_first_batches"] == [{"step": 9, "signature": 1}]
    assert "1 active step(s) (9) had a batch of an input signature never run before" in second.summary()
    assert second.meta["signatures_seen"] == 2 and second.meta["captures"] == 1
    assert not first.meta.get("incomplete") and first.meta["capture"] == "symbolic"
    # the per-node table of real batches: every node of the graph timed in every run
    table = first.df
    assert {"conv", "bn", "fc"} <= set(table.index)
    assert (table.loc[["conv", "bn", "fc"], "calls"] == 3).all()
    assert (table.loc[["conv", "bn", "fc"], "median_ms"] > 0).all()
    runs = session_runs(first)
    assert runs["step"].tolist() == [2, 3, 4] and runs["signature"].tolist() == [0, 0, 0]
    assert "shape=[4, 3, 16, 16]" in runs["inputs"].iloc[0]


def test_wait_steps_run_the_models_own_forward():
    model = SmallCNN().eval()
    x = torch.randn(2, 3, 8, 8)
    with fxprof.session(model, schedule=fxprof.schedule(wait=3, warmup=0, active=1)) as s:
        for _ in range(3):
            with torch.no_grad():
                assert torch.equal(s.model(x), SmallCNN.forward(model, x))
            s.step()
        assert s._captures == {}  # nothing traced, nothing interpreted during wait steps
        s.model(x)  # step 3: active, first call of this signature: captured, untimed
        s.step()
    assert s._captures and s.profiles == []  # a cycle with no timed run delivers nothing


def test_fake_clock_cycle_is_exact(clock, fake_timer):
    model = FakeCostModel(clock)
    x = torch.ones(2, 3)
    with fxprof.session(model, schedule=fxprof.schedule(wait=0, warmup=1, active=4), timer=fake_timer,
                        leaf_modules=[Work]) as s:
        for _ in range(5):
            s.model(x)
            s.step()
    (prof,) = s.profiles
    # head costs cycle 3, 2, 4, 3 ms: call 0 was the warm-up step, so the timed calls got 2, 4, 3, 3
    assert prof.meta["run_steps"] == [1, 2, 3, 4]
    assert prof.samples.query("node == 'head'")["time_ms"].tolist() == [2.0, 4.0, 3.0, 3.0]
    assert prof.df.loc["stem", "median_ms"] == 1.0
    assert prof.total_ms == [3.0, 5.0, 4.0, 4.0]


def test_torch_profiler_schedule_is_accepted(clock, fake_timer):
    from torch.profiler import schedule as torch_schedule

    model = FakeCostModel(clock)
    with fxprof.session(model, schedule=torch_schedule(wait=1, warmup=1, active=2), timer=fake_timer,
                        leaf_modules=[Work]) as s:
        for _ in range(6):
            s.model(torch.ones(1, 3))
            s.step()
    assert [p.meta["run_steps"] for p in s.profiles] == [[2, 3]]


# ------------------------------------------------------------ varying lengths (NLP)
class TinyTransformer(nn.Module):
    """Embedding, learned positions cut to the batch's length, one attention block, a head."""

    def __init__(self, vocab: int = 50, dim: int = 16, classes: int = 3) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.pos = nn.Parameter(torch.randn(64, dim) * 0.02)
        self.attn = nn.MultiheadAttention(dim, 2, batch_first=True)
        self.norm = nn.LayerNorm(dim)
        self.ff = nn.Linear(dim, dim)
        self.head = nn.Linear(dim, classes)

    def forward(self, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        h = self.embed(ids) + self.pos[: ids.size(1)]
        a, _ = self.attn(h, h, h, key_padding_mask=~mask)
        h = self.norm(h + a)
        h = h + torch.relu(self.ff(h))
        pooled = (h * mask.unsqueeze(-1)).sum(1) / mask.sum(1, keepdim=True)
        return self.head(pooled)


def _text_batches(lengths: list[int], batch: int = 2) -> list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(1)
    out = []
    for n in lengths:
        ids = torch.randint(1, 50, (batch, n), generator=g)
        mask = torch.ones(batch, n, dtype=torch.bool)
        mask[0, n // 2:] = False  # padding in the first sequence
        out.append((ids, mask, torch.randint(0, 3, (batch,), generator=g)))
    return out


def test_varying_sequence_lengths_are_signatures_rolled_up_apart():
    torch.manual_seed(0)
    model = TinyTransformer().train()
    twin = copy.deepcopy(model)
    lengths = [8, 12, 8, 12, 8, 12, 16]  # warm-up sees 8 and 12; 16 shows up in the active steps
    batches = _text_batches(lengths)

    def loop(m, s=None):
        opt = torch.optim.AdamW(m.parameters(), lr=1e-3)
        grads = []
        for ids, mask, y in batches:
            loss = nn.functional.cross_entropy((s.model if s else m)(ids, mask), y)
            loss.backward()
            grads.append(m.ff.weight.grad.clone())
            opt.step()
            opt.zero_grad()
            if s:
                s.step()
        return grads

    with fxprof.session(model, schedule=fxprof.schedule(wait=0, warmup=2, active=5)) as s:
        grads = loop(model, s)
    eager = loop(twin)
    assert all(torch.equal(a, b) for a, b in zip(grads, eager))  # gradients identical to eager

    (prof,) = s.profiles
    assert prof.meta["run_steps"] == [2, 3, 4, 5] and prof.meta["run_signatures"] == [0, 1, 0, 1]
    assert prof.meta["untimed_first_batches"] == [{"step": 6, "signature": 2}]
    assert prof.meta["signatures_seen"] == 3 and prof.meta["captures"] == 1
    per_sig = fxprof.by_signature(prof)
    assert per_sig["runs"].tolist() == [2, 2] and per_sig["steps"].tolist() == [[2, 4], [3, 5]]
    assert "shape=[2, 8]" in per_sig.loc[0, "inputs"] and "shape=[2, 12]" in per_sig.loc[1, "inputs"]
    by_op = fxprof.by_signature(prof, "op")
    assert set(by_op.index.get_level_values("signature")) == {0, 1}
    for sig in (0, 1):
        assert by_op.loc[sig, "pct"].sum() == pytest.approx(100.0)


def test_train_and_eval_steps_get_a_capture_each():
    model = SmallCNN()
    x = torch.randn(2, 3, 8, 8)
    with fxprof.session(model, schedule=fxprof.schedule(warmup=1, active=3)) as s:
        for i in range(4):
            model.train(i % 2 == 0)
            s.model(x)
            s.step()
    assert s.profiles[0].meta["captures"] == 2 and s.profiles[0].meta["signatures_seen"] == 2
    # step 1 (eval) was the eval signature's first call: untimed
    assert s.profiles[0].meta["run_steps"] == [2, 3]


# -------------------------------------------------------------- failures and exit
class Breaks(nn.Module):
    """A linear layer that raises on a batch holding a NaN (a data-dependent failure)."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.nan_to_num(x)) + check(x)


def check(x: torch.Tensor) -> torch.Tensor:
    if torch.isnan(x).any():
        raise ValueError("NaN in the batch")
    return torch.zeros(())


torch.fx.wrap("check")


def test_an_error_mid_cycle_keeps_the_completed_runs_and_restores_the_model():
    model = Breaks()
    ready = []
    batches = [torch.randn(2, 4) for _ in range(6)]
    batches[4] = torch.full((2, 4), float("nan"))
    with pytest.raises(ValueError, match="NaN in the batch") as info:
        with fxprof.session(model, schedule=fxprof.schedule(warmup=1, active=5), on_ready=ready.append) as s:
            for x in batches:
                s.model(x).sum().backward()
                s.step()
    assert "forward" not in model.__dict__
    (prof,) = ready
    assert prof.meta["incomplete"] and prof.meta["run_steps"] == [1, 2, 3] and prof.num_runs == 3
    assert "incomplete cycle: ValueError at step 4" in prof.summary()
    assert any("3 timed run(s) of cycle 0 completed" in n for n in info.value.__notes__)
    # the model works eagerly afterwards, and another session can start
    model(torch.randn(2, 4))
    with fxprof.session(model):
        pass


def test_ctrl_c_in_the_loop_delivers_the_partial_cycle():
    model = SmallCNN().eval()
    ready = []
    with pytest.raises(KeyboardInterrupt):
        with fxprof.session(model, schedule=fxprof.schedule(warmup=1, active=4), on_ready=ready.append) as s:
            for i in range(5):
                with torch.no_grad():
                    s.model(torch.randn(2, 3, 8, 8))
                if i == 2:
                    raise KeyboardInterrupt
                s.step()
    assert "forward" not in model.__dict__
    assert ready[0].meta["incomplete"] and ready[0].meta["run_steps"] == [1, 2]


def test_a_loop_that_ends_mid_cycle_delivers_what_it_timed():
    model = SmallCNN().eval()
    with fxprof.session(model, schedule=fxprof.schedule(warmup=1, active=10)) as s:
        for _ in range(4):
            with torch.no_grad():
                s.model(torch.randn(1, 3, 8, 8))
            s.step()
    (prof,) = s.profiles
    assert prof.meta["incomplete"] and prof.num_runs == 3 and prof.meta["requested_iters"] == 10
    assert "the loop ended at step 4" in prof.summary()


def test_bad_arguments_say_what_to_do():
    with pytest.raises(ValueError, match="export fixes the input shapes"):
        fxprof.session(SmallCNN(), capture="export")
    with pytest.raises(TypeError, match="takes an nn.Module"):
        fxprof.session(lambda x: x)
    s = fxprof.session(SmallCNN())
    with pytest.raises(RuntimeError, match="outside the session's with-block"):
        s.step()
    model = SmallCNN()
    with pytest.raises(ValueError, match="the schedule returned 'record' for step 0"):
        with fxprof.session(model, schedule=lambda step: "record"):
            pass
    assert "forward" not in model.__dict__
    with fxprof.session(model):  # nothing was left locked
        pass


# ------------------------------------------------------------------ files and CLI
def test_saved_cycle_profiles_load_and_show(tmp_path):
    model = SmallCNN().eval()
    paths = []

    def save(prof):
        path = tmp_path / f"step{prof.meta['step']}.npz"
        prof.save(path)
        paths.append(path)

    with fxprof.session(model, schedule=fxprof.schedule(warmup=1, active=2, repeat=2), on_ready=save) as s:
        for _ in range(6):
            with torch.no_grad():
                s.model(torch.randn(2, 3, 8, 8))
            s.step()
    assert [p.name for p in paths] == ["step2.npz", "step5.npz"]
    loaded = fxprof.load(paths[1])
    assert loaded.meta["run_steps"] == [4, 5] and session_runs(loaded)["step"].tolist() == [4, 5]
    s.profiles[0].save(tmp_path / "step2.json")
    assert fxprof.load(tmp_path / "step2.json").meta["run_signatures"] == [0, 0]
    shown = subprocess.run([sys.executable, "-m", "fxprof", "show", str(paths[0])], capture_output=True, text=True, timeout=300)
    assert shown.returncode == 0, shown.stderr
    assert "session cycle 0: steps 1-2" in shown.stdout and "conv" in shown.stdout
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error", fxprof.ComparabilityWarning)  # two cycles of one loop compare cleanly
        from fxprof.core.compare import busy_sides

        # the same conditions; only a busy machine (other processes took the CPU) is said, as it should be
        problems = fxprof.core.compare.comparability(s.profiles[0], s.profiles[1])
        assert problems == busy_sides(s.profiles[0], s.profiles[1])
    compared = subprocess.run([sys.executable, "-m", "fxprof", "compare", str(paths[0]), str(paths[1])],
                              capture_output=True, text=True, timeout=300)
    assert compared.returncode == 0, compared.stderr


# ------------------------------------------------------------------------ dynamo
def test_dynamo_capture_in_a_session():
    torch.manual_seed(0)
    model = SmallCNN().train()
    twin = copy.deepcopy(model)
    loader = _loader(5, size=8)
    with fxprof.session(model, schedule=fxprof.schedule(warmup=1, active=3), capture="dynamo") as s:
        losses = _train(model, loader, s)
    assert losses == _train(twin, loader)
    (prof,) = s.profiles
    assert prof.meta["capture"] == "dynamo" and prof.meta["run_steps"] == [1, 2, 3]
    assert prof.df["calls"].gt(0).sum() > 5 and "forward" not in model.__dict__


def test_dynamo_with_varying_lengths_times_the_graph_that_serves_them():
    torch.manual_seed(0)
    model = TinyTransformer().train()
    with fxprof.session(model, schedule=fxprof.schedule(warmup=2, active=5), capture="dynamo") as s:
        for ids, mask, y in _text_batches([8, 12, 8, 12, 8, 12, 16]):
            nn.functional.cross_entropy(s.model(ids, mask), y).backward()
            s.step()
    (prof,) = s.profiles
    # length 8 compiled a static graph (g0); length 12 made dynamo recompile with dynamic shapes (g1),
    # which served every later length: the timed runs ran g1 only, and the profile says g0 is left out
    assert prof.meta["captures"] == 2 and prof.meta["run_signatures"] == [0, 1, 0, 1]
    assert {n.graph for n in prof.nodes} == {"g1"} and "left out: g0" in prof.meta["capture_note"]
    assert "recompiles for new shapes included" in prof.summary()


def test_backward_true_times_the_loops_own_backward():
    torch.manual_seed(0)
    model = SmallCNN().train()
    twin = copy.deepcopy(model)
    loader = _loader(6, size=8)  # step 5's batch is short: a new signature, a recompile, untimed
    with fxprof.session(model, schedule=fxprof.schedule(warmup=1, active=5), backward=True) as s:
        losses = _train(model, loader, s)
    eager = _train(twin, loader)
    assert losses == pytest.approx(eager, rel=1e-5)  # AOTAutograd's aten ops: the eager losses
    for (name, a), b in zip(model.state_dict().items(), twin.state_dict().values()):
        assert torch.allclose(a.float(), b.float(), rtol=1e-4, atol=1e-6), name
    assert "forward" not in model.__dict__
    (prof,) = s.profiles
    assert prof.meta["capture"] == "aot" and prof.meta["run_steps"] == [1, 2, 3, 4]
    assert prof.meta["untimed_first_batches"] == [{"step": 5, "signature": 1}]
    table = prof.df
    assert set(table["phase"]) == {"forward", "backward"}
    kept = prof.kept_runs()  # a run that lost time to other processes is left out of df (issue 45)
    assert (table["calls"] == (4 if kept is None else len(kept))).all()  # every forward and backward node, once a run
    backward = table[table["phase"] == "backward"]
    assert "convolution_backward" in set(backward["kind"]) and "conv" in set(backward["scope"])
    assert prof.group_by("phase").loc["backward", "median_ms"] > 0
    # a run spans the forward's start to the backward's end: the nodes fit inside it
    assert (prof.runs["total_ms"] >= prof.samples.groupby("run")["time_ms"].sum().to_numpy()).all()


def test_backward_true_error_between_forward_and_backward_keeps_the_completed_runs():
    model = SmallCNN().train()
    ready = []
    with pytest.raises(RuntimeError, match="loss went bad"):
        with fxprof.session(model, schedule=fxprof.schedule(warmup=1, active=4), backward=True, on_ready=ready.append) as s:
            for step, (x, y) in enumerate(_loader(5, last=4, size=8)):
                loss = nn.functional.cross_entropy(s.model(x), y)
                if step == 3:
                    raise RuntimeError("loss went bad")  # the forward ran, its backward never will
                loss.backward()
                s.step()
    (prof,) = ready
    assert prof.meta["incomplete"] and prof.meta["run_steps"] == [1, 2] and prof.num_runs == 2
    assert (prof.df["calls"] == 2).all()
    # nothing left behind: the forward, and fxprof's training lock (a second session can time backward)
    assert "forward" not in model.__dict__
    with fxprof.session(model, schedule=fxprof.schedule(warmup=0, active=2), backward=True) as s:
        for x, y in _loader(3, last=4, size=8):
            nn.functional.cross_entropy(s.model(x), y).backward()
            s.step()
    assert s.profiles[0].meta["run_steps"] == [1]


# ---------------------------------------------------------------------- resnet18
@pytest.mark.slow
def test_resnet18_training_loop_with_a_short_last_batch():
    import torchvision

    torch.manual_seed(0)
    model = torchvision.models.resnet18(weights=None, num_classes=10).train()
    twin = copy.deepcopy(model)
    loader = _loader(6, batch=4, last=2, size=32)
    with fxprof.session(model, schedule=fxprof.schedule(wait=1, warmup=1, active=4)) as s:
        losses = _train(model, loader, s)
    assert losses == _train(twin, loader)
    for (name, a), b in zip(model.state_dict().items(), twin.state_dict().values()):
        assert torch.equal(a, b), name
    (prof,) = s.profiles
    assert prof.meta["run_steps"] == [2, 3, 4] and prof.meta["untimed_first_batches"] == [{"step": 5, "signature": 1}]
    assert len(prof.df) == 71 and (prof.df["calls"] == 3).all()


# ---------------------------------------------------------------- torch.distributed
@pytest.mark.skipif(not (torch.distributed.is_available() and torch.distributed.is_gloo_available()), reason="needs gloo")
def test_every_rank_steps_its_own_session_and_rank_0_gets_the_gathered_cycles(tmp_path):
    import json
    import os
    import pathlib

    here = pathlib.Path(__file__).resolve().parents[1]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(here.parent), os.environ.get("PYTHONPATH")])),
               OMP_NUM_THREADS="1", WORLD_SIZE="2", FXPROF_TEST_STORE=str(tmp_path / "store"))
    if os.path.exists("/sys/class/net/lo"):
        env["GLOO_SOCKET_IFNAME"] = "lo"
    procs = [subprocess.Popen([sys.executable, str(here / "session_worker.py"), str(tmp_path)], env={**env, "RANK": str(r)},
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL)
             for r in range(2)]
    try:
        results = [p.communicate(timeout=600) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    for r, (p, (_, err)) in enumerate(zip(procs, results)):
        assert p.returncode == 0, f"rank {r}:\n{err[-3000:]}"
    records = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    assert records[0]["ready"] == [0, 1] and records[1]["ready"] == [] and records[1]["profiles"] == 0
    assert all(rec["restored"] for rec in records)
    for cycle, steps in ((0, [2, 3]), (1, [6, 7])):
        prof = fxprof.load(tmp_path / f"cycle{cycle}.json")
        assert prof.ranks == [0, 1] and prof.num_runs == 4
        runs = session_runs(prof)
        assert runs["step"].tolist() == steps * 2 and runs["rank"].tolist() == [0, 0, 1, 1]
        # rank 1 naps 50 ms in every forward: the table says which rank is slow
        assert prof.df.loc["nap", "slowest_rank"] == 1


def test_a_signature_without_flattening_tells_apart_what_the_flattened_one_tells_apart(monkeypatch):
    """A session reads each forward's input signature at every step (15-35 us through pytree's
    flatten and its spec's text for a Hugging Face decode step's kwargs, between the user's
    steps). Inputs that are each a leaf are now keyed without flattening; any two calls get the
    same key exactly when the flattened form gives them the same key, and inputs holding a
    container (a list, a dict, a namedtuple) take the flattened form."""
    import collections
    import enum

    from fxprof.measure.session import schedule

    class Mode(enum.IntEnum):
        A = 1
        B = 2

    class Cache:  # an object no pytree node: keyed by its type, as flattening keys it
        pass

    Pair = collections.namedtuple("Pair", "a b")
    t = torch.zeros
    calls = [
        ((t(2, 3),), {}), ((t(2, 3),), {}), ((t(2, 4),), {}), ((t(2, 3, dtype=torch.float64),), {}),
        ((t(2, 3), None), {}), ((t(2, 3),), {"mask": None}), ((t(2, 3),), {"mask": t(2)}),
        ((), {"ids": t(1, 1), "cache": Cache(), "keep": 1, "use_cache": True}),
        ((), {"ids": t(1, 1), "cache": Cache(), "keep": 1, "use_cache": True}),
        ((), {"ids": t(1, 1), "cache": Cache(), "keep": 2, "use_cache": True}),
        ((), {"cache": Cache(), "ids": t(1, 1), "keep": 1, "use_cache": True}),  # another order
        ((), {"ids": t(1, 1), "cache": object(), "keep": 1, "use_cache": True}),
        ((t(1), 1), {}), ((t(1), True), {}), ((t(1), 1.0), {}), ((t(1), "1"), {}), ((t(1), Mode.A), {}), ((t(1), Mode.B), {}),
        (([t(2, 3)],), {}), (((t(2, 3),),), {}), (({"x": t(2, 3)},), {}), ((Pair(t(1), t(2)),), {}),
    ]
    flat = [schedule.signature_of(a, k, False) for a, k in calls]
    assert flat[0] == flat[1] and flat[7] == flat[8]
    assert all(k[0] != "flat" for k in flat[-4:])  # containers: flattened
    assert all(k[0] == "flat" for k in flat[:-4])
    assert schedule.signature_of(calls[0][0], {}, True) != flat[0]  # the mode
    monkeypatch.setattr(schedule, "_flat_signature", lambda *a: None)
    tree = [schedule.signature_of(a, k, False) for a, k in calls]
    for i in range(len(calls)):
        for j in range(len(calls)):
            assert (flat[i] == flat[j]) == (tree[i] == tree[j]), (i, j)


def test_a_session_that_defers_builds_builds_an_eager_cycle_at_once():
    """``defer_builds`` holds a cycle back only where its capture can take its runs apart from the
    next cycle's (``Capture.can_build_later``: a compiled program's marks); an eager graph's runs
    are in the session's one recording, so each cycle is built at its end, as without it."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 8)).eval()
    x = torch.randn(4, 16)

    def plan(step: int) -> str:  # a cycle of one step, then right away one of two (as fxprof.generate's)
        return ["warmup", "active_last", "active", "active_last"][step] if step < 4 else "none"

    counts = []
    with torch.no_grad(), fxprof.session(model, schedule=plan) as s:
        s.defer_builds = True
        for _ in range(5):
            model(x)
            s.step()
            counts.append(len(s.profiles))
    assert counts == [0, 1, 1, 2, 2]
    assert [len(p.runs) for p in s.profiles] == [1, 2] and [p.meta["cycle"] for p in s.profiles] == [0, 1]
