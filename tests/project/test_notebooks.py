"""Every notebook in notebooks/ runs top to bottom, headless, on this checkout's fxprof.

Each notebook is executed in a fresh Jupyter kernel of the interpreter running the tests (a
kernelspec written for ``sys.executable``, so no other Python on the PATH is picked up), with the
repository root first on ``PYTHONPATH``. A cell that raises fails the test and names the cell.

To refresh the committed outputs on purpose, run with ``FXPROF_SAVE_NOTEBOOKS=1``; the executed
notebooks are then written back in place.
"""

from __future__ import annotations

import json
import os
import pathlib
import sys

import ipykernel  # noqa: F401  (the kernel; all three come with pip install -e '.[test]')
import nbclient
import nbformat
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
CELL_TIMEOUT_S = 300
KERNEL = "fxprof-test-python"


@pytest.fixture
def kernel_env(tmp_path, monkeypatch) -> dict[str, str]:
    """A kernelspec for this interpreter, and the environment the kernel starts with."""
    spec = tmp_path / "kernels" / KERNEL
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "fxprof tests", "language": "python",
    }))
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path))
    env = dict(os.environ)
    env.pop("MPLBACKEND", None)  # let the kernel use its inline backend, so figures become outputs
    paths = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *(str(pathlib.Path(p).resolve()) for p in paths)])
    return env


def test_the_notebooks_are_there():
    assert [p.name for p in NOTEBOOKS] == [
        "01_resnet18_hotspots.ipynb", "02_before_after.ipynb", "03_custom_model_ranges.ipynb",
        "04_training_step.ipynb", "05_compiled.ipynb", "06_roofline.ipynb"]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_committed_notebook_has_the_outputs_of_one_clean_run(path):
    code = [c for c in nbformat.read(path, as_version=4).cells if c.cell_type == "code"]
    assert code, f"{path.name} has no code"
    assert [c.execution_count for c in code] == list(range(1, len(code) + 1)), \
        f"{path.name}: cells were not run once, top to bottom; re-run with FXPROF_SAVE_NOTEBOOKS=1"
    errors = [o for c in code for o in c.outputs if o.output_type == "error"]
    assert not errors, f"{path.name} was saved with an error: {errors[0].get('ename')}"


#: notebooks that compile a model with inductor (about a minute here): slow
#: and two more of the long ones, to keep the README's command near ten minutes (issue 49 item 6)
_RUN = [pytest.param(p, marks=pytest.mark.slow) if p.stem in ("05_compiled", "02_before_after", "04_training_step") else p
        for p in NOTEBOOKS]


@pytest.mark.parametrize("path", _RUN, ids=lambda p: p.stem)
def test_notebook_runs_top_to_bottom(path, kernel_env):
    nb = nbformat.read(path, as_version=4)
    client = nbclient.NotebookClient(
        nb, timeout=CELL_TIMEOUT_S, kernel_name=KERNEL, record_timing=False,
        resources={"metadata": {"path": str(path.parent)}},
    )
    client.execute(env=kernel_env)  # raises CellExecutionError naming the failing cell
    if os.environ.get("FXPROF_SAVE_NOTEBOOKS"):
        nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"}
        nbformat.write(nb, path)
