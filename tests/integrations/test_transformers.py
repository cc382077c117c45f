"""fxprof.integrations.transformers.FxprofCallback in the real Hugging Face Trainer, on a tiny Llama
built from its config (nothing downloaded): the callback changes nothing the training computes
(against an unprofiled twin, gradient accumulation and evaluation on), charges every micro-batch to
its optimizer step, names rows by the model's module paths, saves and logs each profile; bf16 and
torch_compile; importing fxprof never imports transformers, and a missing transformers is one line."""

from __future__ import annotations

import os
import random
import subprocess
import sys

import numpy as np
import pytest
import torch

transformers = pytest.importorskip("transformers")
pytest.importorskip("accelerate")

import fxprof  # noqa: E402
from fxprof.integrations import transformers as fxhf  # noqa: E402

SCHEDULE = dict(wait=1, warmup=1, active=2)  # steps 0 eager, 1 warm-up, 2-3 timed, 4 eager again
ACCUMULATE = 2


def tiny_llama() -> torch.nn.Module:
    torch.manual_seed(0)
    return transformers.LlamaForCausalLM(transformers.LlamaConfig(
        hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
        vocab_size=256))


def token_rows(n: int, seed: int) -> list[dict]:
    g = torch.Generator().manual_seed(seed)
    return [{"input_ids": ids, "labels": ids} for ids in torch.randint(0, 256, (n, 16), generator=g)]


class Recorder(transformers.TrainerCallback):
    """A callback after FxprofCallback: what it is handed in on_log."""

    def __init__(self):
        self.logs: list[dict] = []

    def on_log(self, args, state, control, logs=None, **kwargs):
        self.logs.append(dict(logs or {}))


def train(folder, callbacks=(), max_steps=5, **options):
    random.seed(0)
    np.random.seed(0)
    args = transformers.TrainingArguments(
        output_dir=str(folder), use_cpu=True, report_to=[], seed=0, max_steps=max_steps, logging_steps=1,
        per_device_train_batch_size=4, per_device_eval_batch_size=4, gradient_accumulation_steps=ACCUMULATE,
        save_strategy="no", disable_tqdm=True, **options)
    trainer = transformers.Trainer(model=tiny_llama(), args=args, train_dataset=token_rows(48, 1),
                                   eval_dataset=token_rows(8, 2), callbacks=list(callbacks))
    trainer.train()
    return trainer


def rng_states():
    return torch.get_rng_state(), random.getstate(), np.random.get_state()


@pytest.fixture(scope="module")
def twins(tmp_path_factory):
    """The same training (accumulation 2, evaluation every 2 steps) without and with the callback."""
    options = dict(eval_strategy="steps", eval_steps=2)
    plain = train(tmp_path_factory.mktemp("plain"), **options)
    plain_rng = rng_states()
    callback, recorder = fxhf.FxprofCallback(fxprof.schedule(**SCHEDULE)), Recorder()
    profiled = train(tmp_path_factory.mktemp("profiled"), callbacks=[callback, recorder], **options)
    return plain, plain_rng, profiled, rng_states(), callback, recorder


def test_nothing_changes(twins):
    plain, plain_rng, profiled, profiled_rng, callback, _ = twins
    assert callback.profiles, "the schedule's timed steps made no profile"

    def history(trainer):  # the Trainer's own entries, without fxprof's figures or the run's wall time
        return [{k: v for k, v in h.items() if not k.startswith("fxprof/") and not k.endswith(("runtime", "per_second"))}
                for h in trainer.state.log_history]

    assert history(profiled) == history(plain)  # losses, grad norms, learning rates, eval losses: bit for bit
    for (name, a), (_, b) in zip(plain.model.state_dict().items(), profiled.model.state_dict().items()):
        assert torch.equal(a, b), name
    opt_a, opt_b = plain.optimizer.state_dict(), profiled.optimizer.state_dict()
    assert opt_a["param_groups"] == opt_b["param_groups"]
    for key, state in opt_a["state"].items():
        for name, value in state.items():
            assert torch.equal(torch.as_tensor(value), torch.as_tensor(opt_b["state"][key][name])), (key, name)
    assert plain.lr_scheduler.state_dict() == profiled.lr_scheduler.state_dict()
    torch_a, py_a, np_a = plain_rng
    torch_b, py_b, np_b = profiled_rng
    assert torch.equal(torch_a, torch_b) and py_a == py_b
    assert np_a[0] == np_b[0] and np.array_equal(np_a[1], np_b[1]) and np_a[2:] == np_b[2:]
    assert "forward" not in profiled.model.__dict__  # the session put the model's forward back


def test_accumulation_charged_to_optimizer_steps(twins):
    callback = twins[4]
    (profile,) = callback.profiles
    # two timed optimizer steps (2 and 3) of two micro-batches each: four forward+backward runs
    assert profile.meta["run_steps"] == [2, 2, 3, 3]
    assert set(profile.df["phase"]) == {"forward", "backward"}
    assert not profile.meta.get("incomplete")
    # the evaluation after optimizer step 2 (eval_steps=2) ran inside timed step 2, as the eager model, untimed
    assert any("eval/no-grad forward(s) (validation) ran as the eager model, untimed" in note for note in profile.meta["notes"])
    assert any(note.startswith("Hugging Face Trainer: a step is one optimizer step") for note in profile.meta["notes"])


def test_rows_carry_module_paths(twins):
    profile = twins[4].profiles[0]
    scopes = set(profile.df["scope"].astype(str))
    assert "model.layers.0.self_attn.q_proj" in scopes and "lm_head" in scopes
    assert not any(s.startswith(("L.", "L__", "l_")) for s in scopes)


def test_saved_and_logged(twins):
    _, _, profiled, _, callback, recorder = twins
    folder = os.path.join(profiled.args.output_dir, "fxprof")
    assert sorted(os.listdir(folder)) == sorted(os.path.basename(p) for p in callback.paths)
    assert any(p.endswith(".json") for p in callback.paths)
    assert fxprof.load(next(p for p in callback.paths if p.endswith(".json"))).meta["run_steps"] == [2, 2, 3, 3]
    logged = [h for h in profiled.state.log_history if "fxprof/run_ms" in h]
    assert len(logged) == 1 and logged[0]["step"] == 4  # the first log after the profile's last step (3)
    for key in ("fxprof/forward_ms", "fxprof/backward_ms", "fxprof/optimizer_ms", "fxprof/scheduler_ms", "fxprof/coverage"):
        assert key in logged[0], key
    assert logged[0]["fxprof/optimizer_ms"] > 0
    assert any("fxprof/run_ms" in logs for logs in recorder.logs)  # a callback after it sees them too


def test_log_before_reporters():
    """report_to's loggers come before the callbacks a Trainer is given; the callback can move ahead of them."""
    callback = fxhf.FxprofCallback()
    flow, reporter, progress = transformers.trainer_callback.DefaultFlowCallback(), Recorder(), Recorder()
    handler = type("Handler", (), {})()
    handler.callbacks = [flow, reporter, callback, progress]
    callback.log_before_reporters(type("Trainer", (), {"callback_handler": handler})())
    assert handler.callbacks == [flow, callback, reporter, progress]


def test_bf16(tmp_path):
    callback = fxhf.FxprofCallback(fxprof.schedule(warmup=1, active=1), html=False)
    train(tmp_path, callbacks=[callback], max_steps=2, bf16=True)
    (profile,) = callback.profiles
    # Accelerate's autocast is entered inside the model's forward: its casts are in the graph, and a note says so
    assert "_to_copy" in set(profile.df["kind"])
    assert any(note.startswith("mixed precision bf16") for note in profile.meta["notes"])
    assert "model.layers.1.mlp.down_proj" in set(profile.df["scope"].astype(str))


@pytest.mark.slow
def test_torch_compile(tmp_path):
    callback = fxhf.FxprofCallback(fxprof.schedule(warmup=1, active=2), html=False)
    with pytest.warns(UserWarning, match="compiled forward only"):
        callback.backward = True
        trainer = train(tmp_path, callbacks=[callback], max_steps=3, torch_compile=True)
    (profile,) = callback.profiles
    assert profile.meta["run_steps"] == [1, 1, 2, 2]
    assert isinstance(trainer.model_wrapped, torch._dynamo.eval_frame.OptimizedModule)
    assert len(profile.df) > 0


@pytest.mark.slow
def test_torchrun_ddp(tmp_path):
    """Two gloo ranks (HF Trainer, DDP on the CPU, accumulation 2): every rank profiles its own steps
    through DDP's wrapper (its gradient all-reduce as rows), rank 0 saves the gathered profile, and
    the losses and weights are the unprofiled run's (tests/hf_ddp_worker.py)."""
    import json
    import pathlib

    worker = pathlib.Path(__file__).resolve().parents[1] / "hf_ddp_worker.py"
    env = {**os.environ, "OMP_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join([str(worker.parents[1]), os.environ.get("PYTHONPATH", "")])}
    if os.path.exists("/sys/class/net/lo"):
        env["GLOO_SOCKET_IFNAME"] = "lo"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", str(worker), str(tmp_path)]
    result = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-4000:]
    rank0, rank1 = (json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2))
    for record in (rank0, rank1):
        assert record["wrapped"] == "DistributedDataParallel"
        assert record["losses"] == record["plain_losses"] and record["weights_equal"]
    (profile,) = rank0["profiles"]
    assert profile["ranks"] == [0, 1] and profile["run_steps"] == [1, 1, 2, 2]
    assert "ddp:all_reduce_wait" in profile["ddp_rows"]
    assert "model.layers.0.self_attn.q_proj" in profile["scopes"] and not any(s.startswith("module") for s in profile["scopes"])
    assert rank1["profiles"] == [] and rank1["paths"] == []  # gathered on rank 0, saved there
    assert [os.path.basename(p) for p in rank0["paths"]] == ["cycle0-step2.json"]


def test_import_does_not_import_transformers():
    code = ("import sys, fxprof, fxprof.integrations.transformers, fxprof.integrations.common\n"
            "assert 'transformers' not in sys.modules, 'transformers imported'\n"
            "assert 'accelerate' not in sys.modules, 'accelerate imported'\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([os.path.dirname(os.path.dirname(fxprof.__file__)),
                                                        os.environ.get("PYTHONPATH", "")])}
    subprocess.run([sys.executable, "-c", code], check=True, env=env)


def test_missing_transformers_is_one_line(monkeypatch):
    monkeypatch.setattr(fxhf, "_CLASS", None)
    monkeypatch.setitem(sys.modules, "transformers", None)  # import transformers raises ImportError
    with pytest.raises(ImportError) as info:
        fxhf.FxprofCallback()
    message = str(info.value)
    assert "pip install 'fxprof[hf]'" in message and "\n" not in message


def test_training_shorter_than_the_schedule_says_so():
    """A framework steps the session: its warning names the schedule and the steps, not s.step()."""
    from fxprof.integrations.common import TrainingProfiler

    profiler = TrainingProfiler(fxprof.schedule(wait=4, warmup=2, active=3), save=False)
    model = torch.nn.Linear(3, 2)
    profiler.open(model, None)
    for _ in range(3):
        model(torch.ones(1, 3))
        profiler.step()
    with pytest.warns(UserWarning, match=r"training ended after 3 optimizer step\(s\).*first timed step is optimizer step 7"):
        profiler.close()
    assert not profiler.profiles and "forward" not in model.__dict__


def test_session_closes_when_the_schedule_is_over():
    """After the last cycle the model runs its own forward with nothing in front of it."""
    from fxprof.integrations.common import TrainingProfiler

    profiler = TrainingProfiler(fxprof.schedule(warmup=1, active=1), save=False)
    model = torch.nn.Linear(3, 2)
    profiler.open(model, None)
    for _ in range(2):
        model(torch.ones(1, 3))
        profiler.step()
    assert len(profiler.profiles) == 1 and not profiler.is_open and "forward" not in model.__dict__
    profiler.step()  # the framework goes on stepping: nothing happens
    profiler.close()
