"""The command line, run as a user runs it: `fxprof` and `python -m fxprof` subprocesses."""

from __future__ import annotations

import os
import pathlib
import shutil
import subprocess
import sys

import pytest

import fxprof

FXPROF = shutil.which("fxprof") or str(pathlib.Path(sys.executable).with_name("fxprof"))
SMALL = ["--input", "1x3x32x32", "--warmup", "0", "--iters", "2"]


def run(*args: str, entry: str = "module", cwd: str | None = None) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "fxprof", *args] if entry == "module" else [FXPROF, *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=cwd)


@pytest.mark.parametrize("entry", ["module", "script"])
def test_profile_resnet18_prints_the_hotspot_table(entry, tmp_path):
    csv, js = tmp_path / "r.csv", tmp_path / "r.json"
    result = run("profile", "resnet18", *SMALL, "--top", "5", "--csv", str(csv), "--json", str(js), entry=entry)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "fxprof: resnet18 | timer cpu on cpu | 0 warm-up + 2 timed runs" in out
    assert "Tensor(shape=[1, 3, 32, 32], dtype=float32, device=cpu)" in out
    assert "... 66 more nodes" in out
    assert fxprof.read_csv(csv).shape[0] == 71
    assert fxprof.load(js).num_runs == 2


def test_factory_from_a_file_with_integer_input(tmp_path):
    (tmp_path / "mymodel.py").write_text(
        "import torch\n"
        "from torch import nn\n"
        "class Tok(nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.emb = nn.Embedding(100, 8)\n"
        "    def forward(self, ids):\n"
        "        return self.emb(ids).mean(1)\n"
        "def build():\n"
        "    return Tok()\n"
    )
    result = run("profile", f"{tmp_path / 'mymodel.py'}:build", "--input", "2x16:int64", "--iters", "2", "--top", "0")
    assert result.returncode == 0, result.stderr
    assert "emb" in result.stdout and "mean" in result.stdout
    assert "dtype=int64" in result.stdout


@pytest.mark.parametrize("args, message", [
    (["profile", "nosuchnet"], "unknown model 'nosuchnet'"),
    (["profile", "resnet18", "--input", "1x3xfoo"], "bad --input '1x3xfoo'"),
    (["profile", "resnet18", "--input", "1x3x32x32:complex7"], "unknown dtype 'complex7'"),
    (["profile", "no.such.module:make"], "cannot import module 'no.such.module'"),
    (["profile", "os:getcwd"], "returned str, not an nn.Module"),
    (["profile", "resnet18", *SMALL, "--iters", "0"], "iters must be >= 1"),
    (["profile", "resnet18", *SMALL, "--csv", "/nonexistent-dir/x.csv"], "cannot write '/nonexistent-dir/x.csv'"),
    (["profile", "resnet18", "--input", "1x5x32x32", "--iters", "1"], "node 'conv1' (call_module conv1) raised RuntimeError"),
])
def test_errors_are_one_clear_line_and_exit_2(args, message):
    result = run(*args)
    assert result.returncode == 2
    assert message in result.stderr
    assert "Traceback" not in result.stderr
    assert result.stderr.startswith("fxprof: error: ")


def test_debug_shows_the_traceback():
    result = run("--debug", "profile", "nosuchnet")
    assert result.returncode == 2 and "Traceback" in result.stderr


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="checks the no-GPU message")
def test_cuda_device_without_gpu_is_refused():
    result = run("profile", "resnet18", "--device", "cuda")
    assert result.returncode == 2 and "torch.cuda.is_available() is False" in result.stderr


def test_help_has_examples():
    result = run("profile", "--help")
    assert result.returncode == 0 and "examples:" in result.stdout and "fxprof profile resnet18" in result.stdout
