"""The command line, run as a user runs it: `fxprof` and `python -m fxprof` subprocesses."""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import subprocess
import sys

import pandas as pd
import pytest
import torch

import fxprof

FXPROF = shutil.which("fxprof") or str(pathlib.Path(sys.executable).with_name("fxprof"))
SMALL = ["--input", "1x3x32x32", "--warmup", "0", "--iters", "2"]


def run(*args: str, entry: str = "module") -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "fxprof", *args] if entry == "module" else [FXPROF, *args]
    # no COLUMNS: tables fit no width unless a test asks; an explicit environment also keeps out one
    # left in the C environment (unseen by os.environ) under pytest-xdist, which made a
    # module-scoped run fit its header to 80 columns and another not
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL, env=env)


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """One profiling run through the CLI that writes every output format."""
    d = tmp_path_factory.mktemp("cli")
    paths = {k: d / f"r.{k}" for k in ("csv", "json", "trace")}
    result = run("profile", "resnet18", "--input", "1x3x32x32", "--warmup", "1", "--iters", "3", "--top", "5",
                 "--csv", str(paths["csv"]), "--json", str(paths["json"]), "--trace", str(paths["trace"]))
    assert result.returncode == 0, result.stderr
    return result, paths


def test_profile_prints_header_and_hotspots_and_writes_files(saved):
    result, paths = saved
    out = result.stdout
    assert "fxprof: resnet18 | timer cpu on cpu | 1 warm-up + 3 timed runs" in out
    assert "inputs: Tensor(shape=[1, 3, 32, 32], dtype=float32, device=cpu)" in out
    assert "coverage" in out and "... 66 more nodes" in out
    assert fxprof.read_csv(paths["csv"]).shape[0] == 71
    assert "median" in out and " ms " in out  # times carry their unit
    assert fxprof.load(paths["json"]).num_runs == 3
    assert result.stderr == ""  # no progress bar when stderr is not a terminal


def test_script_entry_point_and_group_by_and_columns():
    result = run("profile", "resnet18", *SMALL, "--group-by", "scope", "--depth", "2", "--top", "3", entry="script")
    assert result.returncode == 0, result.stderr
    assert "time by scope (depth 2)" in result.stdout and "more groups" in result.stdout
    result = run("profile", "resnet18", *SMALL, "--columns", "kind,median_ms,flops,output_shape", "--top", "2")
    assert result.returncode == 0, result.stderr
    header = next(line for line in result.stdout.splitlines() if line.startswith("node "))
    assert header.split()[:5] == ["node", "kind", "median", "flops", "output_shape"]


def test_show_reproduces_the_table(saved):
    result, paths = saved
    shown = run("show", str(paths["json"]), "--top", "5")
    assert shown.returncode == 0, shown.stderr
    printed = result.stdout.split("wrote csv")[0]
    assert shown.stdout == printed
    by_op = run("show", str(paths["json"]), "--group-by", "op")
    assert "time by op" in by_op.stdout and "conv2d" in by_op.stdout
    from_csv = run("show", str(paths["csv"]), "--top", "5")
    assert from_csv.returncode == 0, from_csv.stderr
    # the same node rows, without the run header; a CSV holds no runs, so neither the row of time
    # in no node, "(between nodes)" (measured against the model's own runs, issue 39), nor its
    # footer, which also widen the name column: compared cell by cell
    def rows(text):
        return [line.split() for line in text.splitlines() if line.strip() and not line.startswith(("(", "-"))]

    table = printed.split("\n\n", 1)[1]
    assert rows(table) and all(r in rows(from_csv.stdout) for r in rows(table)[:8])
    assert [r[0] for r in rows(table)[:6]] == [r[0] for r in rows(from_csv.stdout.split("\n\n", 1)[1])[:6]]


def test_compare_a_profile_with_itself_shows_ratio_one(saved, tmp_path):
    _, paths = saved
    out_csv = tmp_path / "diff.csv"
    result = run("compare", str(paths["json"]), str(paths["csv"]), "--top", "0", "--csv", str(out_csv))
    assert result.returncode == 0, result.stderr
    assert "b/a 1.000; 71 nodes in both, 0 only in a, 0 only in b" in result.stdout
    diff = pd.read_csv(out_csv, keep_default_na=False, na_values={"ratio": [""]})
    assert len(diff) == 71
    body = diff[diff["a_ms"] > 0]
    assert (body["ratio"] == 1.0).all() and (diff["delta_ms"] == 0).all()


def test_chrome_trace_file_is_valid(saved):
    _, paths = saved
    doc = json.loads(paths["trace"].read_text())
    spans = [e for e in doc["traceEvents"] if e["ph"] == "X" and e["cat"] != "run"]
    assert len(spans) == 71 * 3


def test_capture_option():
    result = run("profile", "resnet18", *SMALL, "--capture", "export", "--top", "3", "--group-by", "module_type")
    assert result.returncode == 0, result.stderr
    assert "capture: export" in result.stdout and "Conv2d" in result.stdout


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


def _write(path: pathlib.Path, text: str) -> str:
    path.write_text(text)
    return str(path)


@pytest.fixture
def files(tmp_path):
    return {
        "foreign_json": _write(tmp_path / "foreign.json", '{"traceEvents": []}'),
        "foreign_csv": _write(tmp_path / "foreign.csv", "a,b\n1,2\n"),
        "not_a_factory": _write(tmp_path / "nf.py", "def build():\n    return 42\n"),
        "syntax_error": _write(tmp_path / "se.py", "def build(:\n"),
        "raising_factory": _write(tmp_path / "rf.py", "def build():\n    raise RuntimeError('no weights here')\n"),
        "damaged": _write(tmp_path / "damaged.json", '{"format": "fxprof.profile", "version": 1, "meta": {}, '
                          '"nodes": [{"name": "a", "op": "call_function", "target": "f", "kind": "f", "module_type": "", '
                          '"scope": "", "range": "", "graph": ""}], "samples": {"node": ["a"], "run": [0], "time_ms": [1.0], '
                          '"host_ms": [1.0], "start_ms": [0.0], "host_start_ms": [0.0]}, '
                          '"runs": {"run": [0], "total_ms": [1.0], "host_ms": [1.0], "start_ms": [0.0]}, '
                          '"anatomy": {"flops": []}}'),
    }


@pytest.mark.parametrize("args, message", [
    (["profile", "nosuchnet"], "unknown model 'nosuchnet'"),
    (["profile", "no.such.module:make"], "cannot import module 'no.such.module'"),
    (["profile", "fxprof:nothing_here"], "has no attribute 'nothing_here'"),
    (["profile", "missing_file.py:build"], "no such file 'missing_file.py'"),
    (["profile", "{not_a_factory}:build"], "build() returned int, not an nn.Module"),
    (["profile", "resnet18", "--input", "1x3xfoo"], "bad --input '1x3xfoo'"),
    (["profile", "resnet18", "--input", "1x3x32x32:complex7"], "unknown dtype 'complex7'"),
    (["profile", "resnet18", "--dtype", "int8"], "bad --dtype 'int8'"),
    (["profile", "resnet18", *SMALL, "--iters", "0"], "bad --iters 0: must be >= 1"),
    (["profile", "resnet18", *SMALL, "--csv", "/nonexistent-dir/x.csv"], "the folder '/nonexistent-dir' does not exist"),
    (["profile", "resnet18", *SMALL, "--json", "/"], "it is a directory"),
    (["profile", "resnet18", "--input", "1x5x32x32", "--iters", "1"],
     "node 'conv1' (call_module conv1) raised RuntimeError"),
    (["show", "/no/such/file.json"], "cannot read '/no/such/file.json'"),
    (["show", "{foreign_json}"], "is not a saved fxprof profile"),
    (["show", "{foreign_csv}"], "is not an fxprof per-node CSV"),
    (["compare", "{foreign_csv}", "{foreign_json}"], "is not an fxprof per-node CSV"),
    (["profile", "resnet18", "--top", "-1"], "bad --top -1"),
    (["profile", "resnet18", "--sort", "speed"], "bad --sort 'speed'"),
    (["profile", "resnet18", "--columns", "median_ms,vibes"], "bad --columns vibes"),
    (["profile", "resnet18", "--group-by", "op", "--columns", "kind"], "bad --columns kind: a --group-by table has"),
    (["profile", "resnet-18"], "Did you mean: resnet18"),
    (["profile", "{syntax_error}:build"], "raised SyntaxError"),
    (["profile", "{raising_factory}:build"], "build() raised RuntimeError: no weights here"),
    (["profile", "resnet18", "--device", "mps"], "cannot put the model and inputs on mps"),
    (["show", "{damaged}"], "is a damaged fxprof profile"),
])
def test_errors_are_one_clear_line_and_exit_2(args, message, files):
    result = run(*[a.format(**files) for a in args])
    assert result.returncode == 2, result.stdout
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("fxprof: error: ")
    assert message.format(**files) in lines[0]


def test_wrong_input_shape_error_names_what_the_node_received():
    result = run("profile", "resnet18", "--input", "1x5x32x32", "--iters", "1")
    assert "it received arg0: Tensor(shape=[1, 5, 32, 32], dtype=float32, device=cpu)" in result.stderr


def test_debug_shows_the_traceback_before_or_after_the_command():
    result = run("--debug", "profile", "nosuchnet")
    assert result.returncode == 2 and "Traceback" in result.stderr
    result = run("profile", "nosuchnet", "--debug")
    assert result.returncode == 2 and "Traceback" in result.stderr


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU message")
def test_cuda_device_without_gpu_is_refused():
    result = run("profile", "resnet18", "--device", "cuda")
    assert result.returncode == 2 and "torch.cuda.is_available() is False" in result.stderr
    result = run("profile", "resnet18", "--timer", "cuda", *SMALL)  # refused before torch is imported
    assert result.returncode == 2 and "--timer cuda times a CUDA device, but --device is cpu" in result.stderr


def test_help_is_a_good_read():
    top = run("--help")
    assert top.returncode == 0 and "profile MODEL" in top.stdout and "compare A B" in top.stdout
    for command in ("profile", "show", "compare"):
        result = run(command, "--help")
        assert result.returncode == 0 and "examples:" in result.stdout
    assert "fxprof profile resnet18" in run("profile", "--help").stdout


def test_a_failure_mid_run_keeps_and_writes_the_completed_runs(tmp_path):
    (tmp_path / "flaky.py").write_text(
        "import torch\n"
        "from torch import nn\n"
        "class Flaky(nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.fc = nn.Linear(4, 4)\n"
        "        self.calls = 0\n"
        "        self.fc.register_forward_pre_hook(self.count)\n"
        "    def count(self, module, inputs):\n"
        "        import inspect\n"
        "        if not any('measure/capture/' in f.filename.replace(chr(92), '/') for f in inspect.stack()):\n"
        "            return  # the model's own forward, which fxprof times beside the profiled runs\n"
        "        self.calls += 1\n"
        "        if self.calls == 1 + 1 + 3:  # one warm-up, the dispatch check's captured run, two timed runs, then fail\n"
        "            raise RuntimeError('device lost')\n"
        "    def forward(self, x):\n"
        "        return self.fc(x)\n"
        "def build():\n"
        "    return Flaky()\n"
    )
    out = tmp_path / "partial.json"
    result = run("profile", f"{tmp_path / 'flaky.py'}:build", "--input", "2x4", "--warmup", "1", "--iters", "5",
                 "--json", str(out))
    assert result.returncode == 2
    assert "device lost" in result.stderr
    assert "INCOMPLETE: 2 of 5 requested runs completed" in result.stdout
    saved = fxprof.load(out)
    assert saved.num_runs == 2 and saved.meta["incomplete"] is True


# ------------------------------------------------------------------ the everyday interface


def test_help_and_version_answer_without_importing_torch():
    code = ("import sys, contextlib, io\n"
            "from fxprof.cli import main\n"
            "for argv in (['--help'], ['--version'], ['profile', '--help'], ['compare', '--version']):\n"
            "    with contextlib.redirect_stdout(io.StringIO()) as out, contextlib.suppress(SystemExit):\n"
            "        main(argv)\n"
            "    assert out.getvalue(), argv\n"
            "print('torch' in sys.modules, 'pandas' in sys.modules)\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["False", "False"]
    assert run("--version").stdout.strip() == f"fxprof {fxprof.__version__}"


def test_each_command_has_its_own_examples():
    show, compare_help = run("show", "--help").stdout, run("compare", "--help").stdout
    assert "fxprof show run.json" in show and "fxprof profile" not in show
    assert "fxprof compare before.json after.json --sort ratio" in compare_help and "fxprof profile" not in compare_help


@pytest.mark.parametrize("args, message", [
    (["profile", "resnet18", "--mode", "isolated", "--trace", "{tmp}/t.json"], "--mode isolated has no timeline"),
    (["profile", "resnet18", "--mode", "isolated", "--timer", "kernel"], "--timer kernel works with --mode timed"),
    (["profile", "resnet18", "--depth", "2"], "--depth applies to --group-by scope"),
    (["profile", "resnet18", "--group-by", "op", "--depth", "2"], "--depth applies to --group-by scope"),
    (["profile", "resnet18", "--trace-runs", "last:2"], "--trace-runs chooses the runs of --trace"),
    (["profile", "resnet18", "--trace", "{tmp}/t.json", "--trace-runs", "9-1"], "bad --trace-runs '9-1'"),
    (["profile", "resnet18", "--capture", "dynamo", "--leaf-module", "torch.nn.Conv2d"], "--leaf-module apply to symbolic"),
    (["profile", "resnet18", "--timer", "cuda"], "--timer cuda times a CUDA device, but --device is cpu"),
    (["profile", "resnet18", "--csv", "{tmp}/x", "--json", "{tmp}/x"], "--csv and --json both write"),
    (["profile", "resnet18", "--json", "{tmp}/run.prof"], "--json: fxprof saves a profile as JSON"),  # issue 25
    (["profile", "resnet18", "--concrete", "flag=maybe"], "is not a Python literal"),
    (["profile", "resnet18", "--concrete", "novalue"], "expected NAME=VALUE"),
    (["profile", "resnet18", "--sort", "medain_ms"], "did you mean 'median_ms'"),
    (["profile", "resnet18", "--columns", "kind,flop"], "did you mean 'flops'"),
    (["profile", "resnet18", "--group-by", "scope", "--sort", "medain"], "did you mean 'median_ms'"),
    (["profile", "resnet18", "--input", "ids=2x8:int64", "--input", "ids=2x8"], "'ids' is given twice"),
    (["profile", "resnet18", "--leaf-module", "layer9"], "bad --leaf-module 'layer9'"),
    (["profile", "resnet18", "--trace-into", "torch.nn.Conv3x3"], "bad --trace-into 'torch.nn.Conv3x3'"),
    (["profile", "resnet18", "--warmup-ms", "inf"], "bad --warmup-ms inf: a number of milliseconds >= 0"),  # issue 26 #17
    (["profile", "resnet18", "--warmup-ms", "nan"], "bad --warmup-ms nan: a number of milliseconds >= 0"),
    (["profile", "resnet18", "--warmup-ms", "-1"], "bad --warmup-ms -1.0: must be >= 0"),
    (["compare", "a.json", "b.json", "--min-effect", "nan"], "bad --min-effect nan"),
    # issue 26, lower harm: each was accepted, or failed late or with a bare MemoryError/RecursionError
    (["profile", "resnet18", "--json", "{tmp}/" + "x" * 300 + ".json"], "File name too long; give a shorter"),
    (["profile", "resnet18", "--threads", "100000"], "bad --threads 100000: at most"),
    (["profile", "resnet18", "--concrete", "n=" + "-" * 100_000 + "1"], "its value is 100,001 characters long"),
    (["profile", "resnet18", "--concrete", "n=" + "-" * 9_000 + "1"], "nested too deeply to read as a literal"),
    (["profile", "resnet18", "--leaf-module", "layer1", "--trace-into", "layer1"], "'layer1' given to both --leaf-module"),
    (["profile", "resnet18", "--no-input", "--input", "2x8"], "--no-input calls the model with no inputs"),
    (["profile", "resnet18", "--input", "99999999999999999999x8"], "8e+20 elements; a tensor holds at most 2**63 - 1"),
    (["profile", "resnet18", "--input", "-1x8"], "expected dimensions (>= 0)"),
    (["profile", "resnet18", "--leaf-module", "torch.nn.Conv2d", "--trace-into", "torch.nn:Conv2d"],
     "torch.nn.modules.conv.Conv2d given to both --leaf-module"),
    (["compare", "a.json", "b.json", "--sort", "ratoi"], "did you mean 'ratio'"),
    (["compare", "a.json", "b.json", "--columns", "kind,speed"], "bad --columns speed"),
])
def test_every_combination_is_checked_before_anything_runs(args, message, tmp_path, capsys):
    """In-process, so these cost no torch import; none profiles anything (no table printed)."""
    from fxprof.cli import main

    code = main([a.format(tmp=tmp_path) for a in args])
    out, err = capsys.readouterr()
    assert code == 2 and out == ""
    assert err.startswith("fxprof: error: ") and len(err.strip().splitlines()) == 1
    assert message in err


def test_an_unknown_command_gets_a_suggestion():
    result = run("profle", "resnet18")
    assert result.returncode == 2 and "did you mean 'profile'?" in result.stderr


def test_tables_fit_the_width_in_columns(saved):
    _, paths = saved
    result = subprocess.run([sys.executable, "-m", "fxprof", "show", str(paths["json"]), "--top", "5"],
                            capture_output=True, text=True, timeout=300, env={**os.environ, "COLUMNS": "70"})
    assert result.returncode == 0, result.stderr
    assert max(len(line) for line in result.stdout.splitlines()) <= 70
    assert "hidden to fit 70 columns:" in result.stdout
    wide = run("show", str(paths["json"]), "--top", "5")  # a pipe and no COLUMNS: nothing hidden
    assert "hidden" not in wide.stdout


def test_a_package_in_the_current_folder_with_keyword_inputs_leaf_modules_and_trace_into(tmp_path):
    """The README's `fxprof profile mypkg.models:build` from the folder holding mypkg, through the
    installed `fxprof` script, which (unlike `python -m`) does not put the folder on sys.path."""
    pkg = tmp_path / "mypkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "models.py").write_text(
        "import torch\n"
        "from torch import nn\n"
        "class Gate(nn.Module):\n"
        "    def forward(self, x):\n"
        "        return torch.sigmoid(x) * x\n"
        "class Net(nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.emb = nn.Embedding(100, 8)\n"
        "        self.gate = Gate()\n"
        "        self.out = nn.Linear(8, 4)\n"
        "    def forward(self, ids, mask=None, scale=1.0):\n"
        "        h = self.gate(self.emb(ids))\n"
        "        if mask is not None:\n"
        "            h = h * mask.unsqueeze(-1)\n"
        "        return self.out(h * scale).mean(1)\n"
        "def build():\n"
        "    return Net()\n"
    )
    result = subprocess.run(
        [FXPROF, "profile", "mypkg.models:build", "--input", "ids=2x16:int64", "--input", "mask=2x16",
         "--leaf-module", "mypkg.models:Gate", "--trace-into", "torch.nn.Linear", "--concrete", "scale=2.0",
         "--iters", "2", "--warmup", "0", "--top", "0", "--columns", "op,kind", "--quiet"],
        capture_output=True, text=True, timeout=300, cwd=tmp_path, stdin=subprocess.DEVNULL)
    assert result.returncode == 0, result.stderr
    rows = {line.split()[0]: line.split()[1:3] for line in result.stdout.splitlines() if line.split()[:1]}
    assert rows["gate"] == ["call_module", "gate"]            # kept whole: a leaf
    assert rows["linear"] == ["call_function", "linear"]      # traced inside nn.Linear
    assert "mask" in rows and "ids" in rows                   # keyword inputs are placeholders
    assert "dtype=int64" in result.stdout


def test_the_progress_bar_names_each_phase_with_its_own_count(resnet18, small_image):
    """The bar fxprof shows on a terminal (forced onto a buffer here): one phase after another,
    each with its own count, never "timed" while warming up."""
    import io

    from fxprof.views.progress import Progress

    buffer = io.StringIO()
    with Progress(file=buffer, force=True) as bar:
        fxprof.profile(resnet18, small_image, warmup=2, iters=3, progress=bar)
    assert bar.phases == ["tracing", "warm-up", "timed runs", "anatomy pass", "memory pass", "machine peaks"]
    text = buffer.getvalue()
    positions = [text.find(f"fxprof: {phase}") for phase in ("tracing 0/1", "warm-up 0/2", "warm-up 2/2",
                                                              "timed runs 0/3", "timed runs 3/3", "anatomy pass")]
    assert all(p >= 0 for p in positions) and positions == sorted(positions), text


@pytest.mark.parametrize("argv, message", [
    (["--group-by", "op", "--sort", "backward_ms"], "bad --sort 'backward_ms'"),  # a training step's column
    (["--columns", "kind,rank_min_ms"], "bad --columns rank_min_ms"),  # a gathered profile's column
    (["--trace", "t.json", "--trace-runs", "5"], "run 5 is past the last run: 2 run(s) make runs 0 to 1; --iters 2"),
    (["--trace", "t.json", "--trace-runs", "0-99999999999"], "run 99999999999 is past the last run: 2 run(s) make runs 0 to 1"),
])
def test_options_only_some_profiles_have_are_refused_before_anything_runs(argv, message, capsys, tmp_path, monkeypatch):
    """Refused up front: accepted, they failed only after the runs, when the table was printed."""
    from fxprof.cli import main

    monkeypatch.chdir(tmp_path)
    assert main(["profile", "no_such_model_is_built", "--iters", "2", *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and "unknown model" not in err


# ---------------------------------------------------------------- issue 26: files and hostile options
TINY = ("import torch\nfrom torch import nn\n"
        "def tiny():\n    return nn.Sequential(nn.Linear(8, 4), nn.ReLU())\n")


@pytest.fixture
def model_files(tmp_path, monkeypatch):
    """A model file and a package in the current folder, as a user has them."""
    (tmp_path / "mymodel.py").write_text(TINY)
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "nets.py").write_text(TINY)
    os.link(tmp_path / "mymodel.py", tmp_path / "hardlink.json")
    os.symlink(tmp_path / "pkg" / "nets.py", tmp_path / "symlink.json")
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.mark.parametrize("args, message", [
    (["mymodel:tiny", "--json", "mymodel.py"], "writing it would destroy it"),
    (["mymodel:tiny", "--csv", "./mymodel.py"], "writing it would destroy it"),
    (["mymodel:tiny", "--trace", "hardlink.json"], "writing it would destroy it"),
    (["mymodel.py:tiny", "--json", "{tmp}/mymodel.py"], "writing it would destroy it"),
    (["pkg.nets:tiny", "--json", "pkg/nets.py"], "writing it would destroy it"),
    (["pkg.nets:tiny", "--csv", "pkg/__init__.py"], "writing it would destroy it"),
    (["pkg.nets:tiny", "--trace", "symlink.json"], "writing it would destroy it"),
    (["resnet18", "--json", "mymodel.py"], "is an existing source file (.py)"),
])
def test_no_output_option_overwrites_the_model_source(args, message, model_files, capsys):
    """Issue 26 #1: `--json mymodel.py` with the `mymodel:tiny` spelling overwrote the source."""
    from fxprof.cli import main

    before = {p: p.read_bytes() for p in model_files.rglob("*.py")}
    code = main(["profile", *[a.format(tmp=model_files) for a in args], "--input", "2x8", "--iters", "1", "--warmup", "0"])
    out, err = capsys.readouterr()
    assert code == 2 and out == "", err
    assert message in err
    assert {p: p.read_bytes() for p in model_files.rglob("*.py")} == before


def test_the_loaded_models_class_files_are_checked_too(model_files, capsys):
    """A class file MODEL does not name (imported by the factory's module), hard-linked under
    another name: only the loaded model tells which files it came from."""
    from fxprof.cli import main

    (model_files / "blocks26.py").write_text("from torch import nn\nclass Block(nn.Linear):\n    pass\n")
    (model_files / "uses.py").write_text("from blocks26 import Block\ndef build():\n    return Block(8, 4)\n")
    os.link(model_files / "blocks26.py", model_files / "blocks.json")
    code = main(["profile", "uses:build", "--json", "blocks.json", "--input", "2x8", "--iters", "1", "--warmup", "0", "--quiet"])
    assert code == 2 and "'blocks.json' is an input of this command" in capsys.readouterr().err
    assert (model_files / "blocks26.py").read_text().startswith("from torch import nn")


def test_an_output_beside_the_model_source_is_written(model_files):
    result = subprocess.run([sys.executable, "-m", "fxprof", "profile", "pkg.nets:tiny", "--input", "2x8", "--iters", "1",
                             "--warmup", "0", "--json", "nets.json"], capture_output=True, text=True, timeout=300,
                            cwd=model_files)
    assert result.returncode == 0, result.stderr
    assert fxprof.load(model_files / "nets.json").num_runs == 1
    assert (model_files / "pkg" / "nets.py").read_text() == TINY


def test_show_and_compare_read_fxprofs_own_older_csv():
    """Issue 26 #13: a per-node CSV from before scope_source/calls_per_run was refused."""
    old = str(pathlib.Path(__file__).parents[1] / "golden" / "table_before_scope_source.csv")
    shown = run("show", old, "--columns", "kind,calls_per_run,median_ms")
    assert shown.returncode == 0, shown.stderr
    assert "per-node table from" in shown.stdout and "conv2d" in shown.stdout
    compared = run("compare", old, old)
    assert compared.returncode == 0, compared.stderr
    assert "6 nodes in both" in compared.stdout


def _in(folder, *args, entry="module"):
    cmd = [sys.executable, "-m", "fxprof", *args] if entry == "module" else [FXPROF, *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=folder, stdin=subprocess.DEVNULL)


TINY_RUN = ["--input", "2x8", "--iters", "2", "--warmup", "0", "--top", "2"]


# one of the four in the README's command, the others in the slow pass (issue 49 item 6: near ten minutes)
@pytest.mark.parametrize("name", ["profile.py", pytest.param("sympy.py", marks=pytest.mark.slow)])
@pytest.mark.parametrize("entry", ["module", pytest.param("script", marks=pytest.mark.slow)])
def test_a_model_file_named_like_a_standard_or_installed_module_shadows_nothing(tmp_path, name, entry):
    """Issue 26 #19: profile.py became sys.modules['profile'] (cProfile then imported it); torch
    imports sympy. Run from the file's own folder and from another one."""
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / name).write_text(TINY)
    for folder, path in ((tmp_path / "models", name), (tmp_path, f"models/{name}")):
        result = _in(folder, "profile", f"{path}:tiny", *TINY_RUN, entry=entry)
        assert result.returncode == 0, result.stderr
        assert "fxprof: " in result.stdout and "timer cpu" in result.stdout


def test_a_model_file_keeps_its_own_name_when_it_is_free(tmp_path):
    (tmp_path / "mymodel26.py").write_text(TINY + "class Block(nn.Linear):\n    pass\n"
                                           "def blocks():\n    return nn.Sequential(Block(8, 8), nn.ReLU())\n")
    result = _in(tmp_path, "profile", "mymodel26.py:blocks", *TINY_RUN, "--leaf-module", "mymodel26.Block")
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize("source, message", [
    ("import sys\n" + TINY.replace("    return", "    sys.exit(0)\n    return"),
     "tiny() called sys.exit(0); a model file must not exit when it is imported or its factory called"),
    ("import sys\nsys.exit('no GPU here')\n" + TINY, "importing 'm.py' called sys.exit('no GPU here')"),
    ("import argparse\nargparse.ArgumentParser().add_argument('--data', required=True)\n"
     "p = argparse.ArgumentParser(); p.add_argument('--data', required=True); p.parse_args()\n" + TINY,
     "importing 'm.py' called sys.exit(2)"),
])
def test_a_model_file_that_exits_is_an_error_not_fxprofs_exit(tmp_path, source, message):
    """Issue 26 #18: a factory calling sys.exit(0) made fxprof exit 0 with no output."""
    (tmp_path / "m.py").write_text(source)
    result = _in(tmp_path, "profile", "m.py:tiny", *TINY_RUN)
    assert result.returncode == 2 and result.stdout == ""
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("fxprof: error: bad model 'm.py:tiny': ") and message in last
    assert 'if __name__ == "__main__"' in last


def test_a_model_file_that_parses_its_arguments_on_import_sees_none_of_fxprofs(tmp_path):
    """Issue 26 #18: the file's argparse took fxprof's arguments and printed its own usage."""
    (tmp_path / "m.py").write_text("import argparse, sys\np = argparse.ArgumentParser(); p.add_argument('--lr', type=float, "
                                   "default=0.1)\nargs = p.parse_args()\nassert sys.argv == ['m.py']\n" + TINY)
    result = _in(tmp_path, "profile", "m.py:tiny", *TINY_RUN)
    assert result.returncode == 0, result.stderr
    assert "usage:" not in result.stderr


def test_a_model_without_inputs_and_an_empty_batch_can_be_profiled(tmp_path):
    """Issue 26, lower harm: no way to say "no inputs"; --input 0x8 was refused though the API
    takes empty batches. An allocation too large is one line, without torch's C++ frames."""
    (tmp_path / "m.py").write_text(TINY + "class Const(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
                                   "        self.w = nn.Parameter(torch.ones(4, 4))\n"
                                   "    def forward(self):\n        return self.w.relu().sum()\n"
                                   "def const():\n    return Const()\n")
    result = _in(tmp_path, "profile", "m.py:const", "--no-input", "--iters", "2", "--warmup", "0", "--top", "0")
    assert result.returncode == 0, result.stderr
    assert "relu" in result.stdout and "sum" in result.stdout
    result = _in(tmp_path, "profile", "m.py:tiny", "--input", "0x8", "--iters", "2", "--warmup", "0")
    assert result.returncode == 0, result.stderr
    assert "Tensor(shape=[0, 8]" in result.stdout
    result = _in(tmp_path, "profile", "m.py:tiny", "--input", "1000000x1000000", "--iters", "1", "--warmup", "0")
    assert result.returncode == 2 and "frame #" not in result.stderr and "Exception raised from" not in result.stderr
    assert result.stderr.startswith("fxprof: error: cannot put the model and inputs on cpu as float32")
