"""The README's two set-up commands stay true: CI runs the test one, the main job is real."""

from __future__ import annotations

import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _bash_blocks() -> list[str]:
    return re.findall(r"```bash\n(.*?)```", (ROOT / "README.md").read_text(), flags=re.S)


def test_readme_test_command_is_what_ci_runs():
    blocks = [b.strip() for b in _bash_blocks()]
    test_cmd = next(b for b in blocks if "pytest" in b)
    assert test_cmd in (ROOT / ".ci" / "run").read_text()


def test_readme_main_command_profiles_resnet18_on_the_cpu():
    blocks = [b.strip() for b in _bash_blocks()]
    main_cmd = next(b for b in blocks if "fxprof profile" in b)
    assert main_cmd.endswith("fxprof profile resnet18")
    assert "pip install -e ." in main_cmd
    # the line works from PyPI alone (the registry every machine here reaches); the CPU-wheel advice,
    # for machines that reach torch's own index, is said before it, where a reader sees it first
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Set up and run", 1)[1]
    advice = section.find("pip install torch torchvision --index-url https://download.pytorch.org/whl/cpu")
    assert 0 <= advice < section.find(main_cmd)
