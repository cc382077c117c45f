"""Regression tests for issue 57 (reliability 5): a profile never changes the training it looks at."""

from __future__ import annotations

import copy
import logging
import threading
import warnings

import pytest
import torch
from torch import nn

import fxprof

torch._logging.set_logs(dynamo=logging.ERROR)


# ------------------------------------------------ 4: outputs keep the user's types (dict, list)
class Heads(nn.Module):
    """A model that returns its outputs in a dict holding a list, as many training models do."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.head = nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> dict:
        h = torch.relu(self.fc(x))
        return {"logits": self.head(h), "hidden": [h, h * 2]}


def _loop(model: nn.Module, x: torch.Tensor, steps: int, session=None) -> list[dict]:
    """The loop adds its loss to the model's dict and appends to its list, as loops do."""
    outs = []
    for _ in range(steps):
        out = model(x)
        out["loss"] = out["logits"].sum()
        out["hidden"].append(out["loss"])
        outs.append(out)
        if session is not None:
            session.step()
    return outs


@pytest.mark.parametrize("capture", ["symbolic", "dynamo"])
@pytest.mark.parametrize("memory", [True, False])
def test_a_sessions_dict_and_list_outputs_stay_a_dict_and_a_list_on_every_step(capture, memory):
    torch.manual_seed(0)
    model = Heads()
    x = torch.randn(3, 4)
    eager = _loop(copy.deepcopy(model), x, 5)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with fxprof.session(model, schedule=fxprof.schedule(wait=1, warmup=1, active=2), capture=capture,
                            memory=memory) as s:
            outs = _loop(model, x, 5, s)
    assert s.profiles, "the session timed nothing"
    for out, ref in zip(outs, eager):
        assert type(out) is dict and type(out["hidden"]) is list
        assert out.keys() == ref.keys()
        torch.testing.assert_close(out["logits"], ref["logits"])
        assert len(out["hidden"]) == 3


def test_a_training_sessions_dict_output_stays_a_dict():
    torch.manual_seed(0)
    model = Heads()
    x = torch.randn(3, 4)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with fxprof.session(model, schedule=fxprof.schedule(wait=1, warmup=1, active=2), backward=True) as s:
            for _ in range(4):
                out = model(x)
                out["loss"] = out["logits"].sum()
                out["hidden"].append(out["loss"])
                out["loss"].backward()
                assert type(out) is dict and type(out["hidden"]) is list
                s.step()
    assert len(s.profiles) == 1


def test_profile_hands_loss_fn_the_models_own_dict():
    seen = []

    def loss_fn(out):
        seen.append((type(out), type(out["hidden"])))
        out["loss"] = out["logits"].pow(2).mean()  # a loss that files itself in the output, as loops do
        return out["loss"]

    prof = fxprof.profile(Heads(), torch.randn(3, 4), backward=True, loss_fn=loss_fn, iters=2, warmup=1)
    assert len(prof.df) > 0
    assert seen and all(t == (dict, list) for t in seen)


def test_the_interpreters_generic_loop_hands_nodes_and_the_caller_plain_containers():
    from fxprof.measure.capture.interpreter import ProfilingInterpreter

    class Merge(nn.Module):
        def forward(self, x):
            parts = [x, x + 1]
            return {"cat": torch.cat(parts), "parts": parts, "pair": (x, {"x": x})}

    gm = fxprof.trace(Merge())
    interp = ProfilingInterpreter(gm)
    out = torch.fx.Interpreter.run(interp, torch.ones(2))  # the generic loop (as under node ranges)
    assert type(out) is dict and type(out["parts"]) is list and type(out["pair"][1]) is dict
    out = interp.run(torch.ones(2))  # the compiled plan
    assert type(out) is dict and type(out["parts"]) is list and type(out["pair"][1]) is dict


class Collect(nn.Module):
    """A module that files a result in the dict it is given (kept as a leaf: one node)."""

    def forward(self, d: dict) -> dict:
        d["sum"] = d["a"] + d["b"]
        d["all"].append(d["sum"])
        return d


class WithCollect(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.collect = Collect()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.fc(x)
        return self.collect({"a": h, "b": h * 2, "all": [h]})["sum"]


@pytest.mark.parametrize("mode", ["timed", "isolated"])
def test_profile_passes_hand_a_leaf_module_the_dict_and_list_its_caller_built(mode):
    model, x = WithCollect(), torch.randn(3, 4)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fxprof.profile(model, x, leaf_modules=[Collect], mode=mode, iters=2, warmup=1, anatomy=True,
                       memory=True, peaks=None)
    failed = [str(w.message) for w in caught if "pass failed" in str(w.message) or "immutable" in str(w.message)]
    assert not failed, failed


# ------------------------------------- 3: a capture is confined to its thread; others run eagerly
class Gate(nn.Module):
    """While its model is being traced (in the tracing thread only), lets another thread call the
    model and waits for that call to end: the other thread's call lands inside the trace."""

    def __init__(self, tracing: "threading.Event", served: "threading.Event") -> None:
        super().__init__()
        self.tracing, self.served = tracing, served

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if torch.fx._symbolic_trace._get_is_fx_tracing() and not self.tracing.is_set():
            self.tracing.set()
            self.served.wait(timeout=30)
        return x


class Served(nn.Module):
    def __init__(self, tracing: "threading.Event", served: "threading.Event") -> None:
        super().__init__()
        self.fc1, self.gate, self.fc2 = nn.Linear(8, 16), Gate(tracing, served), nn.Linear(16, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(torch.relu(self.gate(self.fc1(x))))


@pytest.mark.parametrize("how", ["session", "profile"])
def test_other_threads_calling_the_model_during_a_capture_get_its_eager_tensors(how):
    tracing, served, done = threading.Event(), threading.Event(), threading.Event()
    torch.manual_seed(0)
    model = Served(tracing, served)
    x = torch.randn(2, 8)
    with torch.no_grad():
        expected = model(x)
    outs: list = []
    errors: list = []

    def serve() -> None:  # a second thread using the same model (a server, an evaluator)
        try:
            tracing.wait(timeout=30)
            with torch.no_grad():
                outs.append(model(x))  # inside the trace
            served.set()
            while not done.is_set() or len(outs) < 5:
                with torch.no_grad():
                    outs.append(model(x))
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            errors.append(exc)
        finally:
            served.set()

    thread = threading.Thread(target=serve)
    thread.start()
    try:
        if how == "session":
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                with fxprof.session(model, schedule=fxprof.schedule(wait=0, warmup=1, active=2), capture="symbolic") as s:
                    for _ in range(3):
                        loss = model(x).sum()
                        loss.backward()
                        s.step()
            assert len(s.profiles) == 1
        else:
            prof = fxprof.profile(model, x, capture="symbolic", iters=2, warmup=1, peaks=None)
            assert len(prof.df) > 0
    finally:
        done.set()
        thread.join(timeout=60)
    assert tracing.is_set(), "the model was never traced"
    assert not errors, errors
    assert len(outs) >= 5
    for out in outs:
        assert type(out) is torch.Tensor, type(out)
        torch.testing.assert_close(out, expected)
    assert torch.nn.Module.__call__ is torch.fx._symbolic_trace._orig_module_call  # no patch left behind


# ------------------------------------------------------------ 7: files and the command line
MODELS = """
import pathlib
import torch
from torch import nn

def small():
    pathlib.Path(__file__).with_name("built").touch()  # says the model was loaded: work began
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4)).eval()

def broken():
    class Broken(nn.Module):
        def forward(self, x):
            raise RuntimeError("this model cannot run")
    return Broken()
"""


@pytest.fixture
def cli_dir(tmp_path, monkeypatch):
    (tmp_path / "models.py").write_text(MODELS)
    monkeypatch.chdir(tmp_path)
    torch.manual_seed(0)
    fxprof.profile(nn.Sequential(nn.Linear(8, 4)), torch.randn(2, 8), iters=3, warmup=1, peaks=None).save(str(tmp_path / "p.json"))
    return tmp_path


def _cli(capsys, *argv: str) -> tuple[int, str, str]:
    from fxprof.cli import main

    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.mark.parametrize("argv, words", [
    (["profile", "models.py:small", "--input", "2x8", "--csv", "missing/t.csv"], "does not exist"),
    (["profile", "models.py:small", "--input", "2x8", "--json", "missing/t.json"], "does not exist"),
    (["profile", "models.py:small", "--input", "2x8", "--html", "missing/t.html"], "does not exist"),
    (["profile", "models.py:small", "--input", "2x8", "--trace", "missing/t.json"], "does not exist"),
    (["ab", "models.py:small", "models.py:small", "--input", "2x8", "--csv", "missing/r.csv"], "does not exist"),
    (["ab", "models.py:small", "models.py:small", "--input", "2x8", "--markdown", "missing/r.md"], "does not exist"),
    (["ab", "models.py:small", "models.py:small", "--input", "2x8", "--markdown", "."], "directory"),
    (["ab", "models.py:small", "models.py:small", "--input", "2x8", "--csv", "r.txt", "--markdown", "r.txt"], "both write"),
    (["whatif", "models.py:small", "--input", "2x8", "--variants", "threads=1", "--csv", "missing/w.csv"], "does not exist"),
    (["whatif", "models.py:small", "--input", "2x8", "--variants", "threads=1", "--html", "missing/w.html"], "does not exist"),
    (["generate", "models.py:small", "--html", "missing/g.html"], "does not exist"),
    (["generate", "models.py:small", "--json", "models.py"], "input of this command"),
    (["generate", "models.py:small", "--json", "p.json"], "existing file"),
    (["generate", "models.py:small", "--json", "p.json/run"], "is a file"),
    (["generate", "models.py:small", "--json", "gen", "--html", "gen"], "both write"),
    (["compare", "p.json", "p.json", "--csv", "missing/c.csv"], "does not exist"),
    (["compare", "p.json", "p.json", "--html", "missing/c.html"], "does not exist"),
    (["compare", "p.json", "p.json", "--markdown", "missing/c.md"], "does not exist"),
    (["report", "p.json", "-o", "missing/r.html"], "does not exist"),
])
def test_every_output_is_checked_before_any_work(cli_dir, capsys, argv, words):
    code, out, err = _cli(capsys, *argv)
    assert code == 2
    assert words in err and err.startswith("fxprof: error:") and len(err.strip().splitlines()) == 1, err
    assert not (cli_dir / "built").exists(), "the model was loaded before the outputs were checked"
    assert not (cli_dir / "gen").exists()


def test_an_output_that_fails_after_the_work_says_it_is_lost_not_that_nothing_was(cli_dir, capsys):
    code, out, err = _cli(capsys, "ab", "models.py:small", "models.py:small", "--input", "2x8", "--iters", "3",
                          "--warmup", "1", "--markdown", "/dev/full")
    assert code == 2
    assert "Nothing was lost" not in err and "still in memory" not in err
    assert "'/dev/full'" in err and "lost" in err and "again" in err


def test_a_python_caller_whose_save_fails_still_holds_the_profile(tmp_path):
    prof = fxprof.profile(nn.Sequential(nn.Linear(8, 4)), torch.randn(2, 8), iters=2, warmup=1, peaks=None)
    with pytest.raises(fxprof.ProfileWriteError, match="still in memory") as caught:
        prof.save("/dev/full")
    assert caught.value.path == "/dev/full" and caught.value.reason


@pytest.mark.parametrize("a, b, side", [("models.py:broken", "models.py:small", "a"),
                                        ("models.py:small", "models.py:broken", "b")])
def test_ab_names_the_side_that_failed(cli_dir, capsys, a, b, side):
    code, out, err = _cli(capsys, "ab", a, b, "--input", "2x8", "--iters", "2", "--warmup", "1")
    assert code == 2
    assert f"fxprof: error: {side} (models.py:broken) failed on these inputs" in err
    assert "this model cannot run" in err


def _damage(path, group: str, column: str, value: float, out):
    import json

    doc = json.loads(path.read_text())
    doc[group][column] = [value] * len(doc[group][column])
    out.write_text(json.dumps(doc))
    return out


@pytest.mark.parametrize("group, column", [("samples", "time_ms"), ("runs", "total_ms"), ("samples", "host_ms")])
def test_a_profile_holding_absurd_times_is_refused_on_load(cli_dir, capsys, group, column):
    bad = _damage(cli_dir / "p.json", group, column, 1e308, cli_dir / "bad.json")
    with pytest.raises(fxprof.ProfileFormatError, match=rf"{group}\.{column}\[0\].*beyond any measurement"):
        fxprof.load(str(bad))
    for argv in (["show", "bad.json"], ["compare", "p.json", "bad.json"], ["report", "bad.json", "-o", "r.html"]):
        code, out, err = _cli(capsys, *argv)
        assert code == 2 and "beyond any measurement" in err and len(err.strip().splitlines()) == 1, err
        assert "OverflowError" not in err and len(out) < 2000


def test_a_table_holding_an_absurd_time_is_refused_on_load(cli_dir, capsys):
    import csv

    from fxprof.io import read_any

    fxprof.load(str(cli_dir / "p.json")).to_csv(str(cli_dir / "t.csv"))
    rows = list(csv.reader((cli_dir / "t.csv").open()))
    rows[1][rows[0].index("median_ms")] = "1e308"
    with (cli_dir / "bad.csv").open("w", newline="") as handle:
        csv.writer(handle).writerows(rows)
    with pytest.raises(fxprof.ProfileFormatError, match="median_ms.*beyond any measurement"):
        read_any(str(cli_dir / "bad.csv"))
    code, out, err = _cli(capsys, "show", "bad.csv")
    assert code == 2 and "beyond any measurement" in err


def test_a_session_whose_every_step_raises_says_the_steps_raised():
    class Singular(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(4, 4)

        def forward(self, x):
            return torch.linalg.cholesky(self.fc(x) - 100 * torch.eye(4))

    model, x = Singular(), torch.randn(4, 4)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with fxprof.session(model, schedule=fxprof.schedule(wait=0, warmup=1, active=3)) as s:
            for _ in range(5):
                with pytest.raises(torch.linalg.LinAlgError):
                    model(x)
                s.step()
    said = [str(w.message) for w in caught if "timed no run" in str(w.message)]
    assert s.profiles == [] and len(said) == 1
    assert "raised in every active step" in said[0] and "LinAlgError" in said[0]
    assert "signature not seen before" not in said[0]


def test_generate_whose_folder_fills_up_after_the_work_says_the_result_is_lost(tmp_path, capsys, monkeypatch):
    import errno
    import os
    import pathlib

    pytest.importorskip("transformers")
    real = os.replace

    def full_disk(src, dst, *args, **kwargs):  # the disk fills up as the last file is written
        if str(dst).endswith("generation.json"):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(dst))
        return real(src, dst, *args, **kwargs)

    monkeypatch.setattr(os, "replace", full_disk)
    script = pathlib.Path(__file__).resolve().parents[2] / "docs" / "scripts" / "generate_models.py"
    code, out, err = _cli(capsys, "--quiet", "generate", f"{script}:tiny_llama", "--prompt-len", "4", "--new-tokens", "2",
                          "--peaks", "0.1,10", "--json", str(tmp_path / "gen"))
    assert code == 2 and "prefill:" in out
    assert "cannot read" not in err and "generation.json" in err and "No space left on device" in err
    assert "This output is lost" in err and "again" in err
