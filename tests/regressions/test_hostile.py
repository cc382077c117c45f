"""Regression tests for issue 16: eleven defects a hostile new user found (nothing damaged,
nothing lost, every bad file a clear error), plus SIGTERM, a second Ctrl-C and huge iters."""

from __future__ import annotations

import copy
import json
import logging
import os
import pathlib
import signal
import stat
import subprocess
import sys
import threading
import time

import pandas as pd
import pytest
import torch
from conftest import FakeCostModel, Work
from torch import nn

import fxprof
from fxprof.cli import app as cli

torch._logging.set_logs(dynamo=logging.ERROR)


@pytest.fixture
def prof(clock, fake_timer):
    return fxprof.profile(FakeCostModel(clock), torch.ones(2, 3), warmup=0, iters=4, timer=fake_timer, leaf_modules=[Work])


def _main(capsys, *argv: str) -> tuple[int, str, str]:
    """Run the CLI in-process: (exit code, stdout, stderr)."""
    try:
        code = cli.main(list(argv))
    except SystemExit as exc:  # argparse exits
        code = exc.code
    out = capsys.readouterr()
    return code, out.out, out.err


def _one_error_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("fxprof: error: "), err
    return lines[0]


# ------------------------------------------------ 1. writing never replaces what is at the path
def test_writing_through_a_symlink_keeps_the_link(prof, tmp_path):
    target = tmp_path / "real.csv"
    target.write_text("old\n")
    link = tmp_path / "link.csv"
    link.symlink_to(target)
    prof.to_csv(link)
    assert link.is_symlink() and os.readlink(link) == str(target)
    assert fxprof.read_csv(target).shape == prof.df.shape


def test_writing_to_a_fifo_writes_through_it(prof, tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    got = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_text()))
    reader.start()
    prof.save(fifo)
    reader.join(10)
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)
    assert json.loads(got[0])["format"] == "fxprof.profile"


def _char_device(path: pathlib.Path, minor: int) -> pathlib.Path:
    """A character device like /dev/null (minor 3) or /dev/full (minor 7), made in a test folder."""
    try:
        os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(1, minor))
    except (PermissionError, OSError) as exc:
        pytest.skip(f"cannot make a device node here: {exc}")
    return path


def test_writing_to_a_device_writes_through_it(prof, tmp_path):
    null = _char_device(tmp_path / "null", 3)
    prof.save(null)
    prof.to_csv(null)
    prof.to_chrome_trace(null)
    assert stat.S_ISCHR(os.stat(null).st_mode)
    full = _char_device(tmp_path / "full", 7)
    with pytest.raises(fxprof.ProfileWriteError, match="No space left"):
        prof.save(full)
    assert stat.S_ISCHR(os.stat(full).st_mode)


def test_dash_is_standard_output(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, out, err = _main(capsys, "profile", "resnet18", "--input", "1x3x32x32", "--warmup", "0", "--iters", "1",
                           "--quiet", "--csv", "-")
    assert code == 0, err
    assert not os.path.exists("-")
    table = out.splitlines()
    assert table[0].startswith("node,op,target") and len(table) == 1 + 71  # stdout holds only the CSV
    assert "fxprof: resnet18" in err  # the summary went to stderr


# ---------------------------------------------------- 2. one failed output loses nothing else
_VANISHING = (
    "import shutil\n"
    "from torch import nn\n"
    "def build():\n"
    "    shutil.rmtree({folder!r})  # the output folder disappears after the pre-run check\n"
    "    return nn.Linear(4, 4)\n"
)


def test_a_failed_output_does_not_lose_the_others(tmp_path):
    gone = tmp_path / "gone"
    gone.mkdir()
    (tmp_path / "m.py").write_text(_VANISHING.format(folder=str(gone)))
    keep = tmp_path / "keep.json"
    result = subprocess.run([sys.executable, "-m", "fxprof", "profile", f"{tmp_path / 'm.py'}:build", "--input", "2x4",
                             "--iters", "3", "--csv", str(gone / "run.csv"), "--json", str(keep)],
                            capture_output=True, text=True, timeout=900, cwd=tmp_path)
    assert result.returncode == 2
    assert "cannot write" in result.stderr and "run.csv" in result.stderr
    assert fxprof.load(keep).num_runs == 3
    assert "wrote json" in result.stdout


def test_when_every_asked_output_fails_the_profile_is_saved_elsewhere(tmp_path):
    gone = tmp_path / "gone"
    gone.mkdir()
    (tmp_path / "m.py").write_text(_VANISHING.format(folder=str(gone)))
    result = subprocess.run([sys.executable, "-m", "fxprof", "profile", f"{tmp_path / 'm.py'}:build", "--input", "2x4",
                             "--iters", "3", "--json", str(gone / "run.json")],
                            capture_output=True, text=True, timeout=900, cwd=tmp_path)
    assert result.returncode == 2
    rescued = [p for p in tmp_path.iterdir() if p.name.startswith("fxprof-") and p.suffix == ".json"]
    assert len(rescued) == 1, result.stderr
    assert str(rescued[0].name) in result.stderr
    assert fxprof.load(rescued[0]).num_runs == 3


def test_an_output_folder_that_cannot_hold_files_is_refused_before_running(capsys):
    code, _, err = _main(capsys, "profile", "resnet18", "--csv", "/proc/run.csv")
    assert code == 2 and "/proc" in _one_error_line(err)


# ------------------------------------------- 3, 4. captures leave every buffer as it was
class Counts(nn.Module):
    """Counts its calls in a buffer, in place or by reassignment."""

    def __init__(self, reassign: bool):
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.register_buffer("steps", torch.zeros(()))
        self.reassign = reassign

    def forward(self, x):
        if self.reassign:
            self.steps = self.steps + 1
        else:
            self.steps += 1
        return self.fc(x)


def test_symbolic_capture_restores_buffers_and_refuses_updates_it_cannot_record():
    # issue 47 (1): the update was warned about and left out of every run; now symbolic capture keeps in-place
    # updates as nodes (tests/regressions/test_hostile4.py) and refuses what a graph cannot hold (+= rebinds under tracing)
    model = Counts(reassign=False)
    before = copy.deepcopy(model.state_dict())
    with pytest.raises(fxprof.TraceError, match=r"changes buffer\(s\) steps.*self.steps = \.\.\., or \+= on it"):
        fxprof.profile(model, torch.ones(2, 4), warmup=1, iters=2, capture="symbolic")
    for key, value in model.state_dict().items():
        assert torch.equal(value, before[key]), key


@pytest.mark.parametrize("capture", ["dynamo", "auto"])
def test_dynamo_capture_restores_reassigned_buffers(capture):
    model = Counts(reassign=True)
    original = model.steps
    before = copy.deepcopy(model.state_dict())
    fxprof.profile(model, torch.ones(2, 4), warmup=2, iters=3, capture=capture)
    assert model.steps is original
    for key, value in model.state_dict().items():
        assert torch.equal(value, before[key]), key


# ----------------------------------------------------- 5. two threads, one train-mode model
class BNNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3)
        self.bn = nn.BatchNorm2d(8)

    def forward(self, x):
        return self.bn(self.conv(x)).mean()


def test_two_threads_profiling_one_train_mode_model_leave_it_intact():
    torch.manual_seed(0)
    model = BNNet().train()
    before = copy.deepcopy(model.state_dict())
    x = torch.randn(4, 3, 16, 16)
    for _ in range(3):
        errors = []

        def work():
            try:
                fxprof.profile(model, x, warmup=3, iters=10)
            except Exception as exc:  # pragma: no cover - reported below
                errors.append(exc)

        threads = [threading.Thread(target=work) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors, errors
        for key, value in model.state_dict().items():
            assert torch.equal(value, before[key]), key


# ------------------------------------------- 6, 7. every malformed file is a ProfileFormatError
@pytest.fixture
def saved_doc(prof, tmp_path):
    path = tmp_path / "p.json"
    prof.save(path)
    return json.loads(path.read_text())


def _load_text(tmp_path, text: str):
    path = tmp_path / "bad.json"
    path.write_text(text)
    return fxprof.load(path)


def _edit(doc, edit):
    doc = copy.deepcopy(doc)
    edit(doc)
    return doc


def test_deeply_nested_json_is_a_format_error(tmp_path):
    with pytest.raises(fxprof.ProfileFormatError, match="nested"):
        _load_text(tmp_path, '{"format": "fxprof.profile", "version": 1, "meta": ' + "[" * 200_000 + "]" * 200_000 + "}")


def test_a_huge_integer_is_a_format_error(tmp_path, saved_doc):
    text = json.dumps(saved_doc).replace('"iters": 4', '"iters": ' + "9" * 5000)
    with pytest.raises(fxprof.ProfileFormatError, match="digits"):
        _load_text(tmp_path, text)


@pytest.mark.parametrize("edit, message", [
    (lambda d: d["samples"]["time_ms"].__setitem__(0, -2.0), r"samples\.time_ms\[0\].*-2\.0.*minimum"),
    (lambda d: d["samples"]["time_ms"].__setitem__(1, "5"), r"samples\.time_ms\[1\].*'5'.*number"),
    (lambda d: d["runs"]["total_ms"].__setitem__(0, -1), r"runs\.total_ms\[0\]"),
    (lambda d: d["samples"]["run"].__setitem__(2, 999), r"run index 999.*4 runs"),
    (lambda d: d["samples"]["run"].__setitem__(2, 1.5), r"samples\.run\[2\].*integer"),
    (lambda d: d["meta"].__setitem__("inputs", 5), r"meta\.inputs.*5.*array"),
    (lambda d: d["meta"].__setitem__("iters", -3), r"meta\.iters"),
    (lambda d: d["samples"]["node"].__setitem__(0, "nope"), r"'nope'.*not.*nodes"),
    (lambda d: d["samples"]["host_ms"].pop(), r"samples.*same length"),
    (lambda d: d["nodes"].append(dict(d["nodes"][0])), r"node name.*more than once"),
    (lambda d: d["anatomy"]["flops"].__setitem__(0, -7), r"anatomy\.flops\[0\]"),
    (lambda d: d["anatomy"]["flops"].__setitem__(0, 2 ** 64), r"anatomy\.flops\[0\]"),
    (lambda d: d["nodes"][0].__setitem__("op", 3), r"nodes\[0\]\.op"),
])
def test_values_no_profile_can_hold_are_refused(tmp_path, saved_doc, edit, message):
    with pytest.raises(fxprof.ProfileFormatError, match=message):
        _load_text(tmp_path, json.dumps(_edit(saved_doc, edit)))


def test_infinity_is_refused(tmp_path, saved_doc):
    text = json.dumps(saved_doc).replace('"time_ms": [', '"time_ms": [Infinity, ', 1)
    with pytest.raises(fxprof.ProfileFormatError, match="Infinity"):
        _load_text(tmp_path, text)


def _csv_edit(prof, tmp_path, edit) -> pathlib.Path:
    path = tmp_path / "t.csv"
    prof.to_csv(path)
    table = pd.read_csv(path, dtype=str, keep_default_na=False)
    table = edit(table)
    table.to_csv(path, index=False)
    return path


@pytest.mark.parametrize("edit, message", [
    (lambda t: t.assign(out_bytes=["1e30"] * len(t)), r"out_bytes.*1e30"),
    (lambda t: t.assign(calls=["1.5"] * len(t)), r"calls.*1\.5.*whole number"),
    (lambda t: t.assign(mean_ms=["-1"] * len(t)), r"mean_ms.*-1"),
    (lambda t: t.assign(median_ms=["inf"] * len(t)), r"median_ms.*inf"),
    (lambda t: pd.concat([t, t.iloc[[0]]]), r"node .* more than once"),
    (lambda t: t.assign(flops=["9" * 5000] * len(t)), r"flops"),
])
def test_malformed_csv_is_refused_at_load(prof, tmp_path, edit, message):
    path = _csv_edit(prof, tmp_path, edit)
    with pytest.raises(fxprof.ProfileFormatError, match=message):
        fxprof.read_csv(path)


def test_the_published_schema_is_the_one_in_force():
    from fxprof.io.validate import SCHEMA

    doc = pathlib.Path(__file__).parents[2] / "docs" / "format.md"
    text = doc.read_text()
    block = text.split("```json\n", 1)[1].split("```", 1)[0]
    assert json.loads(block) == SCHEMA


def test_every_saved_profile_passes_the_schema(prof, tmp_path):
    import jsonschema

    from fxprof.io.validate import SCHEMA

    prof.save(tmp_path / "p.json")
    jsonschema.validate(json.loads((tmp_path / "p.json").read_text()), SCHEMA)


# ---------------------------------------------------------- 8. no terminal escape injection
def test_show_never_prints_control_characters(prof, tmp_path, capsys):
    path = tmp_path / "evil.json"
    prof.save(path)
    doc = json.loads(path.read_text())
    doc["meta"]["model"] = "\x1b]0;pwned\x07model"
    doc["meta"]["inputs"] = ["\x1b[2J\x1b[H"]
    doc["nodes"][1]["scope"] = "\x9b31m\rred"
    path.write_text(json.dumps(doc))
    for argv in (["show", str(path)], ["compare", str(path), str(path)], ["show", str(path), "--group-by", "scope"]):
        code, out, err = _main(capsys, *argv)
        assert code == 0, err
        assert not any(ch in out for ch in "\x1b\x07\x9b\r"), argv
        assert "\\x1b]0;pwned\\x07model" in out or argv[0] == "compare"


def test_error_messages_never_print_control_characters(tmp_path, capsys):
    path = tmp_path / "\x1b[2Jevil.json"
    path.write_text("{nope")
    code, _, err = _main(capsys, "show", str(path))
    assert code == 2 and "\x1b" not in err and "\\x1b[2Jevil.json" in err


# ------------------------------------------------------ 9. outputs never collide silently
@pytest.mark.parametrize("argv, message", [
    (["profile", "resnet18", "--json", "same.json", "--trace", "same.json"], "--json and --trace both write"),
    (["profile", "resnet18", "--json", "same.json", "--csv", "./sub/../same.json"], "--csv and --json both write"),
    (["profile", "resnet18", "--csv", ""], "empty path"),
    (["profile", "resnet18", "--csv", "-", "--json", "-"], "--csv and --json both write"),
    (["compare", "{a}", "{a}", "--csv", "{a}"], "is an input"),
])
def test_output_collisions_are_refused_before_running(tmp_path, capsys, monkeypatch, prof, argv, message):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "sub").mkdir()
    a = tmp_path / "a.json"
    prof.save(a)
    before = a.read_bytes()
    code, _, err = _main(capsys, *[x.format(a=a) for x in argv])
    assert code == 2 and message in _one_error_line(err)
    assert a.read_bytes() == before
    assert not (tmp_path / "same.json").exists()


# --------------------------------------------------------------------- 10. ScriptModules
@pytest.mark.filterwarnings("ignore:`torch.jit.script` is deprecated")
@pytest.mark.parametrize("capture", ["auto", "symbolic", "dynamo", "export"])
def test_script_modules_get_a_straight_answer(capture):
    eager = nn.Sequential(nn.Linear(4, 4), nn.ReLU())
    scripted = torch.jit.script(eager)
    with pytest.raises(fxprof.TraceError, match="ScriptModule.*cannot be profiled node by node.*eager") as info:
        fxprof.profile(scripted, torch.ones(2, 4), capture=capture)
    assert "try capture=" not in str(info.value)


# ------------------------------------------------------------- 11. one-line argument errors
@pytest.mark.parametrize("argv, message", [
    (["profile", "resnet18", "--input", "-1x3"], "bad --input '-1x3'"),
    (["profile", "resnet18", "--iters", "1.5"], "argument --iters: invalid int value: '1.5'"),
    (["profile", "resnet18", "--group-by", "bogus"], "argument --group-by: invalid choice: 'bogus'"),
    (["profile"], "the following arguments are required: MODEL"),
    (["show", "x.json", "--bogus"], "unrecognized arguments: --bogus"),
    (["nosuchcommand"], "invalid choice: 'nosuchcommand'"),
])
def test_argument_errors_are_one_line(capsys, argv, message):
    code, _, err = _main(capsys, *argv)
    assert code == 2
    assert message in _one_error_line(err)


# ---------------------------------------------------- also: SIGTERM, second Ctrl-C, huge iters
_SLOW = (
    "import pathlib, time\n"
    "from torch import nn\n"
    "class Slow(nn.Module):\n"
    "    def __init__(self):\n"
    "        super().__init__()\n"
    "        self.fc = nn.Linear(4, 4)\n"
    "        self.calls = 0\n"
    "        self.fc.register_forward_pre_hook(self.tick)\n"
    "    def tick(self, module, inputs):\n"
    "        self.calls += 1\n"
    "        if self.calls == 6:\n"
    "            pathlib.Path({marker!r}).write_text('timing')\n"
    "        time.sleep(0.01)\n"
    "    def forward(self, x):\n"
    "        return self.fc(x)\n"
    "def build():\n"
    "    return Slow()\n"
)


def test_sigterm_saves_what_was_measured(tmp_path):
    marker = tmp_path / "started"
    (tmp_path / "slow.py").write_text(_SLOW.format(marker=str(marker)))
    out = tmp_path / "partial.json"
    proc = subprocess.Popen([sys.executable, "-m", "fxprof", "profile", f"{tmp_path / 'slow.py'}:build", "--input", "2x4",
                             "--warmup", "0", "--iters", "100000", "--json", str(out)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 900
    while not marker.exists() and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.1)
    time.sleep(0.3)
    proc.send_signal(signal.SIGTERM)
    stdout, stderr = proc.communicate(timeout=600)
    assert proc.returncode == 128 + signal.SIGTERM, stderr
    assert "INCOMPLETE" in stdout and "terminated" in stderr
    saved = fxprof.load(out)
    assert saved.meta["incomplete"] and saved.num_runs >= 1


def test_a_second_interrupt_while_saving_does_not_lose_the_profile(prof, tmp_path, monkeypatch, capsys):
    import fxprof.io.jsonfile

    real_dumps = fxprof.io.jsonfile.orjson.dumps

    def interrupted_dumps(*args, **kwargs):
        signal.raise_signal(signal.SIGINT)  # the user presses Ctrl-C again, mid-save
        return real_dumps(*args, **kwargs)

    monkeypatch.setattr(fxprof.io.jsonfile.orjson, "dumps", interrupted_dumps)
    out = tmp_path / "p.json"
    args = cli.build_parser().parse_args(["profile", "m", "--json", str(out)])
    from fxprof.cli.profile import _emit

    _emit(prof, args)
    err = capsys.readouterr().err
    assert "saving" in err
    assert fxprof.load(out).num_runs == prof.num_runs


def test_huge_iters_stop_cleanly_within_the_memory_budget(monkeypatch):
    from fxprof.measure.timing import budget

    monkeypatch.setattr(budget, "available_bytes", lambda: 40 * budget.BYTES_PER_SAMPLE * 3 * 2)
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU())  # 4 nodes a run
    with pytest.warns(UserWarning, match="memory"):
        prof = fxprof.profile(model, torch.ones(2, 4), warmup=0, iters=10_000_000)
    assert 1 <= prof.num_runs < 10_000_000
    assert prof.meta["incomplete"] and "memory" in prof.meta["capture_note"]
    assert "INCOMPLETE" in prof.summary()


def test_a_budget_that_fits_every_run_exactly_stops_nothing():
    """Asked after the last run, the budget has nothing left to stop: the profile is complete."""
    from fxprof.measure.timing.budget import SampleBudget

    budget = SampleBudget(10)
    budget.limit = 100  # samples: exactly 10 runs of 10
    assert all(budget.allows_another_run(10 * runs, runs) for runs in range(1, 11))
    assert budget.describe({}) == {}
