"""Regression tests for issue 47 (reliability 4): hostile sessions, what-ifs, files and the CLI."""

from __future__ import annotations

import copy
import importlib
import logging
import re
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch
from torch import nn

import fxprof

torch._logging.set_logs(dynamo=logging.ERROR)


# --------------------------------------- 2: the model's own exception type, the node named on it
class Factor(nn.Module):
    """Cholesky of a matrix that is positive definite or not, depending on the batch."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor, shift: torch.Tensor) -> torch.Tensor:
        h = self.fc(x)
        return torch.linalg.cholesky(h @ h.T + shift * torch.eye(h.shape[0]))


def _skipping_loop(model: nn.Module, batches, session=None) -> tuple[list[torch.Tensor], int]:
    """A loop that skips the batches whose matrix cannot be factored, as loops do without fxprof."""
    outs, skipped = [], 0
    for x, shift in batches:
        try:
            outs.append(model(x, shift))
        except torch.linalg.LinAlgError:
            skipped += 1
        if session is not None:
            session.step()
    return outs, skipped


@pytest.mark.parametrize("capture", ["auto", "symbolic", "dynamo"])
def test_a_loop_that_catches_the_models_own_exception_runs_to_its_end_under_a_session(capture):
    torch.manual_seed(0)
    model = Factor()
    batches = [(torch.randn(3, 4), torch.tensor(100.0 if i % 3 != 2 else -100.0)) for i in range(9)]
    eager, eager_skipped = _skipping_loop(copy.deepcopy(model), batches)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with fxprof.session(model, schedule=fxprof.schedule(wait=0, warmup=1, active=7), capture=capture) as s:
            outs, skipped = _skipping_loop(model, batches, s)
    assert skipped == eager_skipped == 3
    for a, b in zip(outs, eager):
        torch.testing.assert_close(a, b)
    (prof,) = s.profiles
    assert prof.num_runs >= 4  # the runs that completed are timed; the failed ones left nothing behind


def _fails(x: torch.Tensor) -> torch.Tensor:
    if x.shape[0] > 4:
        raise torch.OutOfMemoryError("batch too large (a stand-in for the allocator's error)")
    return x


torch.fx.wrap("_fails")


class Halves(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(_fails(x))


def test_profile_raises_the_models_own_exception_with_the_node_named():
    with pytest.raises(torch.OutOfMemoryError) as info:
        fxprof.profile(Halves(), torch.randn(8, 4), warmup=0, iters=1, capture="symbolic")
    failure = fxprof.node_failure(info.value)
    assert failure is not None and "_fails" in failure.node
    assert any("raised this OutOfMemoryError" in n and "Tensor(shape=[8, 4]" in n for n in info.value.__notes__)
    assert "batch too large" in str(info.value)  # the model's message, unchanged


def test_a_loop_that_halves_its_batch_on_out_of_memory_works_under_a_session():
    model = Halves()
    batch = 16
    with fxprof.session(model, schedule=fxprof.schedule(wait=0, warmup=1, active=2)) as s:
        for _ in range(4):
            while True:
                try:
                    model(torch.randn(batch, 4))
                    break
                except torch.OutOfMemoryError:
                    batch //= 2
            s.step()
    assert batch == 4
    (prof,) = s.profiles
    assert prof.num_runs == 2


@pytest.mark.parametrize("capture", ["symbolic", "dynamo"])
def test_profile_of_a_failing_graph_node_raises_its_own_type_under_every_capture(capture):
    x = torch.randn(3, 4)
    with pytest.raises(torch.linalg.LinAlgError) as info:
        fxprof.profile(Factor(), x, torch.tensor(-100.0), warmup=0, iters=1, capture=capture)
    assert "cholesky" in fxprof.node_failure(info.value).node


# --------------------------------------- 1: buffers the forward reads or updates stay live
class Table(nn.Module):
    """Reads a value computed from a buffer that the loop changes in place between steps."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.register_buffer("table", torch.zeros(5, 4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x) + self.table.mean(0)


class Counts(nn.Module):
    """Updates a buffer in place in its forward."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.register_buffer("calls", torch.zeros(()))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls.add_(1)
        return self.fc(x) * self.calls


class Reassigns(Counts):
    """Replaces its buffer with a new tensor: symbolic tracing cannot record that."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls = self.calls + 1
        return self.fc(x) * self.calls


def _buffer_loop(model: nn.Module, session=None) -> list[torch.Tensor]:
    outs = []
    for _ in range(6):
        outs.append(model(torch.ones(2, 4)))
        if isinstance(model, Table):
            with torch.no_grad():
                model.table.add_(1.0)
        if session is not None:
            session.step()
    return outs


@pytest.mark.parametrize("cls", [Table, Counts, Reassigns])
@pytest.mark.parametrize("capture", ["auto", "symbolic", "dynamo"])
def test_a_session_keeps_buffer_reads_and_updates_live(cls, capture):
    torch.manual_seed(0)
    model = cls()
    eager_model = copy.deepcopy(model)
    eager = _buffer_loop(eager_model)
    if cls is Reassigns and capture == "symbolic":
        with pytest.raises(fxprof.TraceError, match=r"changes buffer\(s\) calls.*capture='dynamo'"):
            with fxprof.session(model, schedule=fxprof.schedule(wait=0, warmup=1, active=2), capture=capture) as s:
                _buffer_loop(model, s)
        return
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)  # no "update dropped" warning: nothing is dropped
        with fxprof.session(model, schedule=fxprof.schedule(wait=0, warmup=1, active=2), capture=capture) as s:
            outs = _buffer_loop(model, s)
    for a, b in zip(outs, eager):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    for name, buf in eager_model.named_buffers():
        torch.testing.assert_close(dict(model.named_buffers())[name], buf, rtol=0, atol=0)
    if cls is Reassigns and capture == "auto":
        assert s.profiles[0].meta["capture"] == "dynamo"  # symbolic tracing would drop the update


def test_profile_times_the_buffer_update_and_leaves_the_buffers_as_they_were():
    model = Counts()
    prof = fxprof.profile(model, torch.ones(2, 4), warmup=1, iters=3, capture="symbolic")
    assert "add_" in set(prof.df["target"])  # the update is a node, timed in every run
    assert model.calls.item() == 0


# --------------------------------------- 3: a profile, what-if or session of a model inside its own open session
@pytest.mark.parametrize("inner", ["profile", "whatif", "session", "parent profile"])
def test_profiling_a_model_inside_its_own_open_session_is_refused_and_the_session_is_unharmed(inner):
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU())
    target = model if inner != "parent profile" else nn.Sequential(model, nn.Linear(4, 2))
    calls = {
        "profile": lambda: fxprof.profile(target, torch.randn(2, 4), warmup=0, iters=1),
        "parent profile": lambda: fxprof.profile(target, torch.randn(2, 4), warmup=0, iters=1),
        "whatif": lambda: fxprof.whatif(target, torch.randn(2, 4), ["float64"], iters=2, warmup=0, blocks=False),
        "session": lambda: fxprof.session(target).__enter__(),
    }
    which = "its module '0'" if inner == "parent profile" else "the same model"
    with fxprof.session(model, schedule=fxprof.schedule(wait=0, warmup=1, active=2)) as s:
        for step in range(3):
            model(torch.randn(2, 4))
            if step == 1:
                with pytest.raises(RuntimeError, match=f"inside an open fxprof.session of {which}"):
                    calls[inner]()
            s.step()
    (prof,) = s.profiles
    assert prof.num_runs == 2  # the refused call's runs did not land in the cycle
    fxprof.profile(model, torch.randn(2, 4), warmup=0, iters=1)  # and once the session is over, it works
    assert "forward" not in model.__dict__


# --------------------------------------- 4, 5, 6: what-ifs
class CountsCalls(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.drop = nn.Dropout(0.5)
        self.calls = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        return self.drop(self.fc(x))


def test_whatif_leaves_the_callers_random_sequence_where_it_was():
    model = CountsCalls().train()  # dropout draws in every call
    x = torch.randn(2, 4)
    torch.manual_seed(0)
    expected = torch.rand(5)
    torch.manual_seed(0)
    fxprof.whatif(model, x, ["inference_mode"], iters=2, warmup=1, blocks=False)
    assert torch.equal(torch.rand(5), expected)


def test_whatif_checks_peaks_before_timing_anything_and_takes_the_clis_off(monkeypatch):
    model = CountsCalls().eval()
    module = importlib.import_module("fxprof.whatif")

    def timed(*args, **kwargs):
        raise AssertionError("timed before peaks= was checked")

    with monkeypatch.context() as patch:
        patch.setattr(module, "time_interleaved", timed)
        with pytest.raises(ValueError, match="bad peaks='fast'"):
            fxprof.whatif(model, torch.randn(2, 4), ["inference_mode"], iters=2, warmup=0, peaks="fast")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "could not be profiled node by node" warning
        result = fxprof.whatif(model, torch.randn(2, 4), ["inference_mode"], iters=2, warmup=0, peaks="off",
                               block_iters=1)
    assert set(result.profiles) == {"baseline", "inference_mode"}


def test_a_variant_that_changes_nothing_is_not_timed_and_says_so():
    model = CountsCalls().eval()
    result = fxprof.whatif(model, torch.randn(2, 4), ["channels_last", "batch=2"], iters=2, warmup=0, blocks=False)
    for name in ("channels_last", "batch=2"):
        assert result.table.loc[name, "error"].startswith("changes nothing"), result.table.loc[name, "error"]
        assert name not in result.times  # not reported as a speed-up
    scalar = fxprof.whatif(nn.Identity(), torch.tensor(3.0), ["batch=4"], iters=2, warmup=0, blocks=False)
    assert "no input tensor has one" in scalar.table.loc["batch=4", "error"]


def test_batch_n_on_an_empty_batch_says_the_batch_is_empty():
    result = fxprof.whatif(CountsCalls().eval(), torch.randn(0, 4), ["batch=4"], iters=2, warmup=0, blocks=False)
    error = result.table.loc["batch=4", "error"]
    assert "batch is empty" in error and "ZeroDivisionError" not in error


def test_a_name_fn_dict_inside_a_list_of_variants_is_taken():
    def halve(model, inputs):
        return model.half().float(), inputs

    result = fxprof.whatif(CountsCalls().eval(), torch.randn(2, 4), ["inference_mode", {"mine": halve}], iters=2,
                           warmup=0, blocks=False)
    assert {"inference_mode", "mine"} <= set(result.times)


# --------------------------------------- 11: the GPU script checks its arguments first (its output folder:
# tests/project/test_gpu_run.py, beside the wheels it fakes)
def _gpu_run(*args: str, cwd) -> "subprocess.CompletedProcess[str]":
    script = Path(__file__).resolve().parents[1] / "benchmarks" / "gpu_run.sh"
    return subprocess.run(["bash", str(script), *args], capture_output=True, text=True, timeout=60, cwd=cwd)


@pytest.mark.parametrize("args, expected", [
    (["--dry-run", "no-such-folder"], "no wheels folder"),
    (["--dryrun", "w"], "unknown option '--dryrun'"),
    (["w", "out", "extra"], "usage: gpu_run.sh"),
])
def test_the_gpu_script_says_what_is_wrong_with_its_arguments_in_one_line(tmp_path, args, expected):
    done = _gpu_run(*args, cwd=tmp_path)
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and expected in done.stderr, done.stderr


def test_the_gpu_script_says_in_one_line_that_a_folder_holds_none_of_the_wheels(tmp_path):
    (tmp_path / "w").mkdir()
    done = _gpu_run("--dry-run", "w", cwd=tmp_path)
    assert done.returncode == 1 and done.stderr.count("\n") == 1 and "none of the" in done.stderr, done.stderr


# --------------------------------------- 13: --input checked before torch is imported; a 3-d image input
@pytest.mark.parametrize("command", ["profile", "whatif"])
def test_a_bad_input_spec_is_refused_before_torch_is_imported_with_what_was_meant(command):
    code = ("import sys; from fxprof.cli.app import main; "
            f"rc = main([{command!r}, 'resnet18', '--input', '1,3,224,224']); print('torch' in sys.modules, rc)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.stdout.split() == ["False", "2"], (done.stdout, done.stderr)
    assert "bad --input '1,3,224,224'" in done.stderr and "did you mean 1x3x224x224?" in done.stderr


@pytest.mark.parametrize("command", ["profile", "whatif"])
def test_a_misspelt_model_name_is_refused_before_torch_is_imported(command):
    """It took 34 s (torch and torchvision imported first); torchvision's names are read from
    its files, the same set as torchvision.models.list_models()."""
    code = ("import sys; from fxprof.cli.app import main; "
            f"rc = main([{command!r}, 'resnt18']); print('torch' in sys.modules, rc)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.stdout.split() == ["False", "2"], (done.stdout, done.stderr)
    assert "unknown model 'resnt18'" in done.stderr and "Did you mean: resnet18" in done.stderr


def test_torchvision_names_read_from_its_files_are_list_models():
    import torchvision

    from fxprof.cli.model_names import torchvision_model_names

    assert torchvision_model_names() == set(torchvision.models.list_models())


def test_a_3d_input_to_an_image_model_says_the_batch_dimension_is_missing(capsys):
    from fxprof.cli.app import main

    assert main(["profile", "resnet18", "--input", "3x32x32", "--iters", "1", "--warmup", "0", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "node 'bn1'" in err and "--input 3x32x32 has 3 dimensions and no batch" in err and "--input 1x3x32x32" in err


# --------------------------------------- 7-10: compare, the gate and files
@pytest.fixture(scope="module")
def saved_profiles(tmp_path_factory):
    folder = tmp_path_factory.mktemp("h4")
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 8), nn.ReLU())
    x = torch.randn(2, 8)
    paths = {}
    for key, iters, m, name in (("one_a", 1, model, None), ("one_b", 1, model, None), ("five", 5, model, None),
                                ("swapped", 5, nn.Sequential(nn.Linear(8, 8), nn.Tanh()), "Other")):
        paths[key] = folder / f"{key}.json"
        fxprof.profile(m, x, warmup=1, iters=iters, name=name).save(paths[key])
    return paths


def _cli(capsys, *args) -> tuple[int, str, str]:
    from fxprof.cli.app import main

    rc = main([str(a) for a in args])
    out = capsys.readouterr()
    return rc, out.out, out.err


@pytest.mark.parametrize("fail_on", ["slower", "node-slower"])
def test_the_gate_on_one_run_profiles_passes_undecided_and_says_so(capsys, saved_profiles, fail_on):
    rc, out, err = _cli(capsys, "compare", saved_profiles["one_a"], saved_profiles["one_b"], "--fail-on", fail_on)
    assert rc == 0, err
    assert "pass (undecided): too few runs to tell: 1 and 1 run(s)" in out


def test_markdown_appends_to_a_step_summary_that_has_text(capsys, saved_profiles, tmp_path):
    summary = tmp_path / "summary.md"
    summary.write_text("# tests: 120 passed\n")
    rc, out, _ = _cli(capsys, "compare", saved_profiles["five"], saved_profiles["five"], "--markdown", summary)
    assert rc == 0 and f"appended markdown to: {summary}" in out
    text = summary.read_text()
    assert text.startswith("# tests: 120 passed\n\n## ") and "fxprof" in text


@pytest.mark.parametrize("content, expected", [
    ("[1, 2]", "holds a JSON list, not a saved fxprof profile"),
    ("", "is an empty file, not a saved fxprof profile"),
    ('{"format": "fxprof.profile", "version": 0}', "says \"version\": 0, which no fxprof ever wrote"),
])
def test_a_json_file_that_is_no_profile_is_named_for_what_it_is(capsys, saved_profiles, tmp_path, content, expected):
    bad = tmp_path / "bad.json"
    bad.write_text(content)
    rc, _, err = _cli(capsys, "compare", bad, saved_profiles["five"])
    assert rc == 2 and expected in err and "CSV" not in err and "Upgrade" not in err, err


def test_comparing_two_different_models_warns_and_the_node_gate_does_not_judge_the_swapped_nodes(capsys, saved_profiles):
    # --min-effect 10 (1000%): the noise of 5 runs of an 8-wide Linear never fails the gate; what is
    # checked is that the swapped node is not judged at all
    rc, out, err = _cli(capsys, "compare", saved_profiles["five"], saved_profiles["swapped"], "--fail-on", "node-slower",
                        "--min-effect", "10")
    assert "warning: model: a is 'Sequential', b is 'Other', and 1 of 4 nodes matched by name do another kind of work" in out
    assert "_1: relu in a, tanh in b" in out
    assert rc == 0 and "1 node(s) matched by name do another kind of work in b and are not judged" in out
    diff = fxprof.compare(fxprof.load(saved_profiles["five"]), fxprof.load(saved_profiles["swapped"]), warn=False)
    assert diff.attrs["other_op"] == {"_1": ("relu", "tanh")}


# --------------------------------------- 12: labels
def test_a_session_of_a_model_without_parameters_names_the_inputs_device():
    model = nn.Sequential(nn.ReLU(), nn.Tanh())
    with fxprof.session(model, schedule=fxprof.schedule(wait=0, warmup=1, active=2)) as s:
        for _ in range(3):
            model(torch.randn(2, 4))
            s.step()
    (prof,) = s.profiles
    assert prof.meta["device"] == "cpu" and "timer cpu on cpu" in prof.summary()


def test_the_profile_command_says_it_wrote_npz_for_an_npz_path(capsys, tmp_path):
    target = tmp_path / "x.npz"
    rc, out, err = _cli(capsys, "profile", "resnet18", "--input", "1x3x32x32", "--iters", "1", "--warmup", "0",
                        "--top", "1", "--json", target)
    assert rc == 0, err
    assert f"wrote npz: {target}" in out and "wrote json" not in out
    assert fxprof.load(target).num_runs == 1


def test_the_readme_says_what_a_compiled_headers_timer_is():
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    timers = readme.split("## Timers and modes", 1)[1].split("\n\n", 2)[1]
    assert "| `profiler`" in timers and "compile" in timers.split("| `profiler`", 1)[1].splitlines()[0]


# --------------------------------------- 14: compare's headers, the noise reasons
def test_a_noisy_nodes_reason_is_shown_whole_below_a_fitted_table(clock):
    from test_verdicts import PATTERN_A, PATTERN_B, _costs, _profile

    from fxprof.views.options import ViewOptions
    from fxprof.views.text import render_compare

    costs_a = _costs(PATTERN_A)
    costs_a[6] = [6.0 * (3.0 if i % 2 else 1.0) for i in range(len(costs_a[6]))]  # two modes
    diff = fxprof.compare(_profile(clock, costs_a), _profile(clock, _costs(PATTERN_B, scale={6: 0.5})))
    assert diff.loc["blocks_6", "verdict"] == "noisy"
    text = render_compare(diff, view=ViewOptions(sort=None, width=100))
    line = next(line for line in text.splitlines() if line.startswith("noisy blocks_6: "))
    assert diff.loc["blocks_6", "noise"].split(" (")[0] in line and "..." not in line and "…" not in line
    assert all(len(row) <= 100 for row in text.splitlines())
    header = next(row for row in text.splitlines() if row.startswith("node "))
    assert "noise" not in header.split() and "delta_pts" in header.split()  # the change of share, in points


def test_compare_takes_the_headers_it_shows_as_column_names(capsys, saved_profiles):
    rc, out, err = _cli(capsys, "compare", saved_profiles["five"], saved_profiles["five"], "--columns", "a,b,delta,delta_pts",
                        "--sort", "delta")
    assert rc == 0, err
    header = next(row for row in out.splitlines() if row.startswith("node "))
    assert header.split() == ["node", "a", "b", "delta", "delta_pts"]


def test_compare_by_scope_says_b_against_a_in_the_words_of_plain_compare(capsys, tmp_path):
    """Plain compare said ``b 1.44x slower`` where ``--by scope`` said only ``speed-up a/b
    0.70x`` for the same pair: both now say b against a in words."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 256))
    paths = [tmp_path / "b4.json", tmp_path / "b512.json"]  # b computes 128x the rows
    for batch, path in ((4, paths[0]), (512, paths[1])):
        fxprof.profile(model, torch.randn(batch, 256), warmup=5, iters=10, peaks=None).save(path)
    rc, plain, err = _cli(capsys, "compare", paths[0], paths[1])
    assert rc == 0, err
    rc, scoped, err = _cli(capsys, "compare", paths[0], paths[1], "--by", "scope")
    assert rc == 0, err
    # the same words for the same runs, whichever way they went (on a loaded machine batch 4's runs once
    # read 12.5 ms, preempted: the pair then reads "faster" in both)
    said = re.search(r"\(b (\d+(?:\.\d+)?)x (slower|faster)\)", plain)
    assert said, plain
    run = next(line for line in scoped.splitlines() if line.startswith("run: "))
    blocks = next(line for line in scoped.splitlines() if line.startswith("blocks "))
    assert f"b {said[1]}x {said[2]} (speed-up a/b " in run, (said[0], run)
    assert re.search(r": b \d+(\.\d+)?x (slower|faster) \(speed-up a/b \d", blocks), blocks


def test_compare_by_scope_keeps_the_speed_ups_figures_beside_its_words():
    """docs/compiled.md's BERT re-run printed ``b 2.00x faster (speed-up a/b 2x)`` and ``b 1.30x
    faster (speed-up a/b 1.3x)``, beside ``(speed-up a/b 0.547x)`` in the same page: three
    significant figures drop their trailing zeros, and the two numbers read as different figures."""
    from fxprof.views.text import _b_against_a

    assert _b_against_a(2.0) == "b 2.00x faster (speed-up a/b 2.00x)"
    assert _b_against_a(1.3) == "b 1.30x faster (speed-up a/b 1.30x)"
    assert _b_against_a(0.55) == "b 1.82x slower (speed-up a/b 0.550x)"
    assert _b_against_a(0.547) == "b 1.83x slower (speed-up a/b 0.547x)"


# --------------------------------------- 16: the README's first command on a CPU machine
def test_the_readme_says_how_to_skip_the_cuda_build_before_the_set_up_line():
    """Item 16: the CPU-wheel advice came after the line people copy. It comes before it now; the
    line itself stays PyPI's (on a machine whose pip finds torch's CPU build on disk but PyPI's
    torchvision, the CPU index gives a torchvision that fails at import)."""
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    section = readme.split("## Set up and run", 1)[1]
    line = section.split("```bash\n", 1)[1].split("```", 1)[0]
    assert "pip install -e . && fxprof profile resnet18" in line and "download.pytorch.org" not in line
    advice = section.find("pip install torch torchvision --index-url https://download.pytorch.org/whl/cpu")
    assert 0 <= advice < section.find("```bash")


# --------------------------------------- 15: the report's words
def test_the_report_says_which_way_round_the_roof_share_reads_and_keeps_the_share_axis_within_100():
    pytest.importorskip("plotly")
    from fxprof.views.lookfirst import look_here_first
    from fxprof.views.report import groups_figure

    model = nn.Sequential(nn.Linear(256, 256), nn.Linear(256, 256)).eval()
    prof = fxprof.profile(model, torch.randn(64, 256), warmup=1, iters=3, peaks=(0.1, 20))
    panel = look_here_first(prof.df)
    assert "roof / median" in panel and "% of roof" not in panel
    figure = groups_figure(prof)
    linear = float(prof.group_by("op").loc["linear", "pct"])
    assert linear > 80  # one kind holds nearly all the time: its bar needs room for its label
    assert figure.layout.xaxis.range[1] > 100 and max(figure.layout.xaxis.tickvals) == 100


def test_a_block_whose_nodes_are_all_the_same_is_not_called_faster():
    pytest.importorskip("plotly")
    import pandas as pd

    from fxprof.views.report import blocks_figure

    blocks = pd.DataFrame({"nodes": [3, 2], "a_ms": [1.0, 1.0], "b_ms": [0.77, 0.5], "delta_ms": [-0.23, -0.5],
                           "ratio": [0.77, 0.5], "faster": [0, 2], "slower": [0, 0], "same": [3, 0]},
                          index=pd.Index(["layer1", "layer2"], name="block"))
    words = list(blocks_figure(blocks).data[0].text)
    assert words[0] == "0.77x the time (its nodes: 3 same)"
    assert words[1] == "2x faster (2 faster)"


def test_the_memory_figure_of_an_inference_run_shows_the_activations_not_a_flat_block():
    pytest.importorskip("plotly")
    from fxprof.views.memory_plot import memory_figure

    model = nn.Sequential(nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 256)).eval()  # 526 kB of parameters
    prof = fxprof.profile(model, torch.randn(4, 256), warmup=1, iters=2, memory=True, peaks=None)
    figure = memory_figure(prof)
    low, high = figure.layout.yaxis.range
    held, peak = prof.memory.held_bytes, prof.memory.peak_bytes
    assert peak - held < 0.25 * held  # activations are a few kB on top of what the run holds from the start
    assert 0 < low < held < peak < high  # the axis shows the part that moves
    assert "held from the start" in figure.layout.title.text


def test_the_readme_says_plot_compare_takes_two_profiles():
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    line = next(row for row in readme.splitlines() if row.startswith("fxprof.plot_compare("))
    assert "from fxprof.compare" not in line and "two profiles" in line


def test_every_byte_column_is_printed_with_its_unit_beside_the_memory_columns():
    model = nn.Sequential(nn.Linear(128, 128), nn.ReLU()).eval()
    prof = fxprof.profile(model, torch.randn(128, 128), warmup=1, iters=2, memory=True, peaks=None)
    text = prof.summary(columns=["out_bytes", "bytes", "mem_peak_bytes", "mem_live_bytes"])
    row = next(line for line in text.splitlines() if line.startswith("_1 "))  # the relu: 128 x 128 float32 out
    assert "65.5 kB" in row and "65,536" not in row and "131,072" not in row


def test_a_session_of_a_part_of_a_model_under_a_session_is_refused_but_profiling_the_part_works():
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU())
    with fxprof.session(model, schedule=fxprof.schedule(wait=0, warmup=1, active=2)) as s:
        for step in range(3):
            model(torch.randn(2, 4))
            if step == 1:
                with pytest.raises(RuntimeError, match="inside an open fxprof.session of the model that holds it"):
                    fxprof.session(model[0]).__enter__()
                part = fxprof.profile(model[0], torch.randn(2, 4), warmup=0, iters=1)  # called directly: no hook
                assert part.num_runs == 1
            s.step()
    assert s.profiles[0].num_runs == 2
    assert "forward" not in model[0].__dict__


def test_a_reader_that_stops_early_gets_no_error_line(saved_profiles):
    """`fxprof show x.json | head -2` printed `fxprof: error: [Errno 32] Broken pipe`: a closed
    stdout now ends the command quietly, with the status a shell tool killed by SIGPIPE has."""
    import signal

    proc = subprocess.Popen([sys.executable, "-m", "fxprof", "show", str(saved_profiles["five"]), "--top", "0"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, bufsize=0)
    proc.stdout.close()  # the reader goes away before anything is written (the child is still importing)
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) in (0, 128 + signal.SIGPIPE) and "Broken pipe" not in err and "error" not in err, err
