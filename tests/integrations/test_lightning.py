"""Issue 70 (Lightning): ``FxprofCallback`` in the real ``lightning.pytorch.Trainer`` on CPU.

The first test is the one that matters: a fit with the callback (accumulation on, a scheduler,
dropout, random draws in ``training_step``, validation between steps) and the same fit without it,
from the same seeds, see the same losses, weights, optimizer and scheduler state and random
generators. The others: what is profiled (optimizer steps, accumulation, manual optimization,
bf16-mixed, validation left out), what is saved and logged, which module is instrumented, an
error in the loop, and Lightning imported only when the callback is used."""

from __future__ import annotations

import logging
import os
import random
import subprocess
import sys
import warnings

import numpy as np
import pytest
import torch
from torch import nn

pl = pytest.importorskip("lightning.pytorch")

import fxprof  # noqa: E402
from fxprof.integrations import lightning as fxl  # noqa: E402

torch._logging.set_logs(dynamo=logging.ERROR)
for name in ("lightning.pytorch", "lightning.fabric", "lightning"):
    logging.getLogger(name).setLevel(logging.ERROR)


def data(n: int = 96, seed: int = 1) -> torch.utils.data.TensorDataset:
    g = torch.Generator().manual_seed(seed)
    return torch.utils.data.TensorDataset(torch.randn(n, 12, generator=g), torch.randint(0, 3, (n,), generator=g))


def loader(n: int = 96, shuffle: bool = True) -> torch.utils.data.DataLoader:
    return torch.utils.data.DataLoader(data(n), batch_size=8, shuffle=shuffle)


class Classifier(pl.LightningModule):
    """``training_step`` calls ``self(x)``; dropout in the graph, a draw of its own in the step."""

    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(12, 24), nn.ReLU(), nn.Dropout(0.2), nn.Linear(24, 3))
        self.losses: list[float] = []
        self.val_losses: list[float] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        x = x + 0.01 * torch.randn_like(x)  # the step's own draw, outside the model
        loss = nn.functional.cross_entropy(self(x), y)
        self.losses.append(loss.item())
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        loss = nn.functional.cross_entropy(self(x), y)
        self.val_losses.append(loss.item())
        self.log("val_loss", loss)

    def configure_optimizers(self):
        opt = torch.optim.AdamW(self.parameters(), lr=1e-2)
        return {"optimizer": opt, "lr_scheduler": torch.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)}


class Wrapped(pl.LightningModule):
    """No forward of its own: ``training_step`` calls ``self.model(x)``; manual optimization with
    its own accumulation (an optimizer step every second batch)."""

    def __init__(self, manual: bool = False) -> None:
        super().__init__()
        self.model = nn.Sequential(nn.Linear(12, 16), nn.Tanh(), nn.Linear(16, 3))
        self.loss_fn = nn.CrossEntropyLoss()  # a child without parameters: not a candidate
        self.automatic_optimization = not manual
        self.losses: list[float] = []

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = self.loss_fn(self.model(x), y)
        self.losses.append(loss.item())
        if self.automatic_optimization:
            return loss
        opt = self.optimizers()
        self.manual_backward(loss / 2)
        if batch_idx % 2 == 1:
            opt.step()
            opt.zero_grad()
        return None

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1, momentum=0.9)


def trainer(tmp_path, callbacks=(), logger=False, **kwargs) -> "pl.Trainer":
    options = dict(accelerator="cpu", devices=1, max_steps=6, logger=logger, enable_checkpointing=False,
                   enable_progress_bar=False, enable_model_summary=False, default_root_dir=str(tmp_path),
                   num_sanity_val_steps=0)
    options.update(kwargs)
    return pl.Trainer(callbacks=list(callbacks), **options)


def fit(tmp_path, make, callbacks=(), val: bool = False, **kwargs):
    """A fit of ``make()`` from the same seeds every time; the module."""
    pl.seed_everything(0, verbose=False)
    random.random(), np.random.rand()  # the generators' states move: the fit must leave them as the twin's
    module = make()
    t = trainer(tmp_path, callbacks, **kwargs)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t.fit(module, loader(), loader(16, shuffle=False) if val else None)
    return t, module


def generators() -> tuple:
    return torch.get_rng_state(), random.getstate(), np.random.get_state()


# ------------------------------------------------------------------------------- nothing changes
@pytest.mark.parametrize("backward", [False, True], ids=["forward", "backward"])
def test_a_fit_with_the_callback_is_the_fit_without_it(tmp_path, backward):
    """Accumulation (2 micro-batches per step), dropout, a draw in training_step, StepLR, validation
    every 3 batches: every loss, the weights, AdamW's and StepLR's state and the three generators."""
    kw = dict(max_steps=5, accumulate_grad_batches=2, val_check_interval=3, limit_val_batches=2, num_sanity_val_steps=1)
    t0, twin = fit(tmp_path / "twin", Classifier, val=True, **kw)
    plain = generators()
    cb = fxl.FxprofCallback(fxprof.schedule(wait=1, warmup=1, active=2), backward=backward, html=False)
    t1, model = fit(tmp_path / "profiled", Classifier, [cb], val=True, **kw)
    profiled = generators()

    assert model.losses == twin.losses and len(model.losses) == 10
    assert model.val_losses == twin.val_losses and len(model.val_losses) == 1 + 3 * 2  # the sanity check's, then 3 validations
    for a, b in zip(model.state_dict().values(), twin.state_dict().values()):
        assert torch.equal(a, b)
    opt0, opt1 = t0.optimizers[0].state_dict(), t1.optimizers[0].state_dict()
    assert opt0["param_groups"] == opt1["param_groups"]
    for k in opt0["state"]:
        for name in opt0["state"][k]:
            assert torch.equal(opt0["state"][k][name], opt1["state"][k][name])
    assert t0.lr_scheduler_configs[0].scheduler.state_dict() == t1.lr_scheduler_configs[0].scheduler.state_dict()
    assert torch.equal(plain[0], profiled[0]) and plain[1] == profiled[1]
    assert all(np.array_equal(a, b) if isinstance(a, np.ndarray) else a == b for a, b in zip(plain[2], profiled[2]))
    assert t0.global_step == t1.global_step == 5

    # what was profiled: optimizer steps 2 and 3, two micro-batches each, never a validation forward
    (profile,) = cb.profiles
    assert profile.meta["run_steps"] == [2, 2, 3, 3]
    assert all(s["training"] for s in profile.meta["signatures"])
    assert "forward" not in model.__dict__  # the module's forward is its own again
    if backward:
        assert set(profile.df["phase"]) == {"forward", "backward"}


# ------------------------------------------------------------------------------ what is profiled
def test_saved_under_the_loggers_folder_and_logged(tmp_path):
    from lightning.pytorch.loggers import CSVLogger

    cb = fxl.FxprofCallback(fxprof.schedule(wait=0, warmup=1, active=2))
    t, _ = fit(tmp_path, Classifier, [cb], logger=CSVLogger(str(tmp_path / "logs")), max_steps=4)
    folder = os.path.join(t.log_dir, "fxprof")
    assert cb.folder == folder and folder.startswith(str(tmp_path / "logs"))
    assert os.path.join(folder, "cycle0-step2.json") in cb.paths
    assert fxprof.load(os.path.join(folder, "cycle0-step2.json")).meta["run_steps"] == [1, 2]
    (metrics,) = cb.metrics
    assert metrics["fxprof/run_ms"] > 0 and "fxprof/coverage" in metrics
    with open(os.path.join(t.log_dir, "metrics.csv")) as f:
        header, *rows = f.read().splitlines()
    assert "fxprof/run_ms" in header.split(",")
    column = header.split(",").index("fxprof/run_ms")
    assert [r.split(",")[header.split(",").index("step")] for r in rows if r.split(",")[column]] == ["3"]


def test_a_logger_that_refuses_the_figures_does_not_stop_the_fit(tmp_path):
    from lightning.pytorch.loggers import CSVLogger

    class Refuses(CSVLogger):
        def log_metrics(self, metrics, step=None):
            if any(k.startswith("fxprof/") for k in metrics):
                raise ValueError("invalid metric name")
            super().log_metrics(metrics, step)

    cb = fxl.FxprofCallback(fxprof.schedule(wait=0, warmup=1, active=1), html=False)
    with pytest.warns(UserWarning, match="Refuses did not take the profile's figures"):
        pl.seed_everything(0, verbose=False)
        trainer(tmp_path, [cb], logger=Refuses(str(tmp_path)), max_steps=3).fit(Classifier(), loader())
    assert len(cb.profiles) == 1 and len(cb.metrics) == 1


def test_without_a_logger_profiles_go_under_default_root_dir_and_a_second_fit_apart(tmp_path):
    cb = fxl.FxprofCallback(fxprof.schedule(wait=0, warmup=1, active=1), html=False)
    t, model = fit(tmp_path, Classifier, [cb], max_steps=3)
    assert cb.folder == str(tmp_path / "fxprof") and os.path.exists(cb.paths[0])
    t.fit_loop.epoch_loop.max_steps = 6  # the same trainer fits on: a second session, from step 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t.fit(model, loader())
    assert cb.paths == [str(tmp_path / "fxprof" / "cycle0-step1.json"), str(tmp_path / "fxprof" / "fit2" / "cycle0-step1.json")]
    assert [p.meta["run_steps"] for p in cb.profiles] == [[1], [1]] and "forward" not in model.__dict__


@pytest.mark.parametrize("backward", [False, True], ids=["forward", "backward"])
def test_manual_optimization_steps_on_the_modules_own_optimizer_steps(tmp_path, backward):
    """A step every second batch, taken by the module: one session step per optimizer step; the
    same losses and weights as the unprofiled twin."""
    _, twin = fit(tmp_path / "twin", lambda: Wrapped(manual=True), max_steps=4)
    cb = fxl.FxprofCallback(fxprof.schedule(wait=1, warmup=1, active=2), html=False, backward=backward)
    _, model = fit(tmp_path / "p", lambda: Wrapped(manual=True), [cb], max_steps=4)
    (profile,) = cb.profiles
    assert profile.meta["run_steps"] == [2, 2, 3, 3]
    assert model.losses == twin.losses and len(model.losses) == 8
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), twin.state_dict().values()))
    assert set(profile.df["phase"]) == ({"forward", "backward"} if backward else {"forward"})


def test_two_optimizers_stepped_in_one_batch_are_one_step(tmp_path):
    """A GAN-like manual step (two optimizers, each stepped every batch): global_step moves by 2 a
    batch, the session by 1."""

    class Two(Wrapped):
        def training_step(self, batch, batch_idx):
            x, y = batch
            for opt in self.optimizers():
                loss = self.loss_fn(self.model(x), y)
                self.losses.append(loss.item())
                opt.zero_grad()
                self.manual_backward(loss)
                opt.step()

        def configure_optimizers(self):
            return [torch.optim.SGD(self.model[0].parameters(), lr=0.1), torch.optim.SGD(self.model[2].parameters(), lr=0.1)]

    cb = fxl.FxprofCallback(fxprof.schedule(wait=1, warmup=1, active=2), html=False)
    t, model = fit(tmp_path, lambda: Two(manual=True), [cb], max_steps=8)
    (profile,) = cb.profiles
    assert t.global_step == 8 and len(model.losses) == 8
    assert profile.meta["run_steps"] == [2, 2, 3, 3]  # two forwards a batch, one session step a batch


@pytest.mark.parametrize("backward", [False, True], ids=["forward", "backward"])
def test_bf16_mixed(tmp_path, backward):
    _, twin = fit(tmp_path / "twin", Classifier, precision="bf16-mixed", max_steps=4)
    cb = fxl.FxprofCallback(fxprof.schedule(wait=1, warmup=1, active=2), html=False, backward=backward)
    _, model = fit(tmp_path / "p", Classifier, [cb], precision="bf16-mixed", max_steps=4)
    assert model.losses == twin.losses
    (profile,) = cb.profiles
    assert [s["autocast"] for s in profile.meta["signatures"]] == ["cpu bfloat16"]
    assert profile.meta["env"]["autocast"] == "cpu bfloat16"


# ------------------------------------------------------------------------ the module instrumented
def test_the_module_training_step_calls(tmp_path):
    """No forward on the LightningModule: its one child holding parameters (self.model) is profiled."""
    cb = fxl.FxprofCallback(fxprof.schedule(wait=0, warmup=1, active=1), html=False)
    fit(tmp_path, Wrapped, [cb], max_steps=2)
    (profile,) = cb.profiles
    assert profile.meta["model"] == "Sequential"
    assert fxl.resolve_module(Classifier(), None, pl.LightningModule.forward).__class__ is Classifier
    wrapped = Wrapped()
    assert fxl.resolve_module(wrapped, "model", pl.LightningModule.forward) is wrapped.model
    assert fxl.resolve_module(wrapped, lambda m: m.model[0], pl.LightningModule.forward) is wrapped.model[0]
    wrapped.head = nn.Linear(3, 3)
    with pytest.raises(ValueError, match="module='<attribute>'"):
        fxl.resolve_module(wrapped, None, pl.LightningModule.forward)


def test_options_are_checked_when_the_callback_is_made():
    with pytest.raises(TypeError, match="'backwards', which fxprof.session does not take"):
        fxl.FxprofCallback(backwards=True)
    with pytest.raises(ValueError, match="timer='kernel' is not available in a session"):
        fxl.FxprofCallback(timer="kernel")
    with pytest.raises(TypeError, match="schedule must be"):
        fxl.FxprofCallback(schedule=3)


def test_an_error_in_the_loop_puts_the_forward_back(tmp_path):
    class Fails(Classifier):
        def training_step(self, batch, batch_idx):
            if self.trainer.global_step == 2:
                raise RuntimeError("boom")
            return super().training_step(batch, batch_idx)

    made: list = []
    cb = fxl.FxprofCallback(fxprof.schedule(wait=0, warmup=1, active=3), html=False)
    with pytest.raises(RuntimeError, match="boom"):
        fit(tmp_path, lambda: made.append(Fails()) or made[0], [cb], max_steps=5)
    model = made[0]
    assert "forward" not in model.__dict__
    (profile,) = cb.profiles
    assert profile.meta["incomplete"] and profile.meta["run_steps"] == [1]


# -------------------------------------------------------------------------------------- packaging
def test_importing_fxprof_and_the_module_does_not_import_lightning():
    code = ("import sys, fxprof, fxprof.integrations.lightning as m; import fxprof.integrations.common; "
            "assert not any(k == 'lightning' or k.startswith(('lightning.', 'pytorch_lightning')) for k in sys.modules), "
            "sorted(k for k in sys.modules if 'lightning' in k); "
            "m.FxprofCallback; assert 'lightning.pytorch' in sys.modules")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.path.dirname(os.path.dirname(fxprof.__file__)),
                                                       os.environ.get("PYTHONPATH", "")]))
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr


def test_a_missing_lightning_is_one_line(monkeypatch):
    import builtins

    real = builtins.__import__

    def no_lightning(name, *args, **kwargs):
        if name == "lightning" or name.startswith("lightning."):
            raise ImportError(f"No module named {name!r}")
        return real(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_lightning)
    monkeypatch.setattr(fxl, "_made", {})
    with pytest.raises(ImportError) as caught:
        fxl.FxprofCallback  # noqa: B018
    message = str(caught.value)
    assert "\n" not in message and "pip install 'fxprof[lightning]'" in message
    with pytest.raises(AttributeError):
        fxl.NoSuchName  # noqa: B018


def test_the_session_closes_when_the_schedule_is_over(tmp_path):
    """After the last cycle the module has its own forward back (the remaining steps cost nothing)."""
    seen: list = []

    class Watch(pl.Callback):
        def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
            seen.append("forward" in pl_module.__dict__)

    cb = fxl.FxprofCallback(fxprof.schedule(wait=1, warmup=1, active=1), html=False)
    fit(tmp_path, Classifier, [Watch(), cb], max_steps=6)
    assert seen == [True, True, True, False, False, False] and len(cb.profiles) == 1
    assert cb._over  # and the callback's hooks return at once


@pytest.mark.slow
def test_a_compiled_module_is_left_alone(tmp_path):
    """trainer.fit(torch.compile(model)): Lightning compiles training_step; the callback warns, profiles
    nothing and the fit is the unprofiled one."""
    _, twin = fit(tmp_path / "twin", lambda: torch.compile(Classifier()), max_steps=4)
    cb = fxl.FxprofCallback(fxprof.schedule(wait=1, warmup=1, active=1), html=False)
    with pytest.warns(UserWarning, match="does not profile a LightningModule passed to fit as torch.compile"):
        pl.seed_everything(0, verbose=False)
        random.random(), np.random.rand()
        model = torch.compile(Classifier())
        trainer(tmp_path / "p", [cb], max_steps=4).fit(model, loader())
    assert cb.profiles == [] and model._orig_mod.losses == twin._orig_mod.losses


# ------------------------------------------------------------------------------------------- DDP
@pytest.mark.slow
@pytest.mark.parametrize("backward", [False, True], ids=["forward", "backward"])
def test_ddp_two_processes(tmp_path, backward):
    """strategy="ddp" on the CPU, 2 processes, accumulation on: every rank profiles its own steps, rank 0
    holds and saves the gathered profile, the other holds none; both ranks train as the unprofiled twin."""
    worker = os.path.join(os.path.dirname(__file__), "lightning_ddp_worker.py")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.path.dirname(os.path.dirname(fxprof.__file__)),
                                                       os.environ.get("PYTHONPATH", "")]))
    env.pop("LOCAL_RANK", None)
    for profiled in ("0", "1"):
        done = subprocess.run([sys.executable, worker, str(tmp_path), "1" if backward else "0", profiled], env=env,
                              capture_output=True, text=True, timeout=300, cwd=str(tmp_path))
        assert done.returncode == 0, done.stderr[-3000:]
    import json

    out = {(p, r): json.load(open(tmp_path / f"out{p}-rank{r}.json")) for p in (0, 1) for r in (0, 1)}
    for r in (0, 1):
        assert out[1, r]["losses"] == out[0, r]["losses"] and out[1, r]["weights"] == out[0, r]["weights"]
    assert out[1, 0]["ranks"] == [[0, 1]] and out[1, 0]["run_steps"] == [[2, 2, 3, 3]]
    assert out[1, 0]["paths"] == [str(tmp_path / "fxprof" / "cycle0-step3.json")]
    assert out[1, 1]["ranks"] == [] and out[1, 1]["paths"] == []
    assert out[1, 0]["phases"] == ([["backward", "forward"]] if backward else [["forward"]])


def test_a_module_whose_forward_training_step_never_calls_is_warned_about(tmp_path):
    """forward defined, but training_step calls self.net directly: nothing is timed, and fxprof says so."""

    class Bypass(Classifier):
        def training_step(self, batch, batch_idx):
            return nn.functional.cross_entropy(self.net(batch[0]), batch[1])

    cb = fxl.FxprofCallback(fxprof.schedule(wait=0, warmup=1, active=1), html=False)
    pl.seed_everything(0, verbose=False)
    t = trainer(tmp_path, [cb], max_steps=3)
    with pytest.warns(UserWarning, match=r"training_step never called Bypass's forward.*FxprofCallback\(module="):
        t.fit(Bypass(), loader())
    assert cb.profiles == []
