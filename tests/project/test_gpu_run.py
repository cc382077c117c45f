"""tests/benchmarks/gpu_run.sh, the one command for a lent GPU machine (issue 40): its CPU parts.

The real run needs a GPU; here its dry run checks the wheel list and prints the steps, and the
list is checked against the project's own dependencies, so a new dependency cannot silently be
missing on the GPU machine (which has no package registry)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "tests" / "benchmarks" / "gpu_run.sh"
LIST = ROOT / "tests" / "benchmarks" / "gpu_wheels.txt"

#: what the GPU machine's image already holds (../shared/gpu/README.md and the device tool's
#: package list), normalised
ON_THE_GPU_MACHINE = {
    "torch", "torchvision", "pandas", "numpy", "scipy", "tabulate", "tqdm", "jinja2", "matplotlib", "pytest",
    "pytest_xdist", "hypothesis", "transformers", "timm", "attrs", "click", "rich", "psutil", "narwhals",
    "packaging", "pygments", "typing_extensions", "python_dateutil", "markupsafe",
}


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "_", name).lower()


def _listed() -> dict[str, str]:
    out = {}
    for line in LIST.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, version = line.split("==")
            out[_norm(name)] = version
    return out


def _fake_wheels(folder: Path, skip: str = "") -> None:
    folder.mkdir()
    for name, version in _listed().items():
        if name != skip:
            (folder / f"{name}-{version}-py3-none-any.whl").touch()


def _dry(folder: Path) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(SCRIPT), "--dry-run", str(folder)], capture_output=True, text=True, timeout=60)


def test_the_dry_run_lists_every_step_the_issue_asks_for(tmp_path):
    _fake_wheels(tmp_path / "w")
    done = _dry(tmp_path / "w")
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert f"{len(_listed())} wheels listed" in out
    budgets = [int(s) for s in re.findall(r"^\S+\s+(\d+)s -> ", out, flags=re.M)]
    assert len(budgets) >= 10 and all(b > 0 for b in budgets)
    assert "budget 520 s" in out  # the whole run stays under 9 minutes whatever the steps' own limits
    assert "selfcheck --device cuda" in out
    assert "-m cuda -p no:xdist" in out and "-m 'not cuda and not slow' -n" in out  # GPU tests never share the GPU
    for flags in ("--timer kernel", "--backward", "--compile --json", "--compile-mode reduce-overhead", "gpu_models.py:bert_base"):
        assert flags in out, flags
    assert "--input 32x3x224x224 --dtype float16" in out


def test_a_missing_wheel_is_named_and_stops_the_run(tmp_path):
    _fake_wheels(tmp_path / "w", skip="orjson")
    done = _dry(tmp_path / "w")
    assert done.returncode == 1
    assert "0 wheel(s) for orjson==" in done.stderr and "--download" in done.stderr
    assert subprocess.run(["bash", str(SCRIPT)], capture_output=True, text=True).returncode == 2  # usage


def test_every_dependency_is_on_the_gpu_machine_or_in_the_wheel_list():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    needed = list(project["dependencies"]) + list(project["optional-dependencies"]["test"])
    names = {_norm(re.split(r"[<>=!~\[; ]", req, maxsplit=1)[0]) for req in needed}
    # ruff and mypy: .ci/run runs them on the code; no test does, so the GPU machine needs neither
    missing = names - ON_THE_GPU_MACHINE - set(_listed()) - {"pytest_xdist", "ruff", "mypy"}
    assert not missing, f"add these to {LIST.name} (or to the image list here): {sorted(missing)}"


def test_the_bert_factory_builds_without_a_download():
    import sys

    sys.path.insert(0, str(SCRIPT.parent))
    try:
        import gpu_models
    finally:
        sys.path.remove(str(SCRIPT.parent))
    model = gpu_models.bert_base()
    assert model.config.hidden_size == 768 and model.config.num_hidden_layers == 12 and not model.training


def test_the_gpu_script_resolves_a_relative_output_folder_where_it_was_started(tmp_path):
    _fake_wheels(tmp_path / "w")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    done = subprocess.run(["bash", str(SCRIPT), "--dry-run", "../w", "results"], capture_output=True, text=True,
                          timeout=60, cwd=elsewhere)
    assert done.returncode == 0, done.stderr
    assert f"results go to {elsewhere / 'results'}\n" in done.stdout  # not the repository root's results/
    assert f"all in {elsewhere / '../w'}" in done.stdout
