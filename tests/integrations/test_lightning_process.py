"""tests/integrations/test_lightning.py in a process of its own (see tests/conftest.py): the
non-slow tests with the suite, the slow ones (DDP on two processes) in the slow pass."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

# found, not imported: importing it here would change this process (tests/conftest.py)
pytestmark = pytest.mark.skipif(importlib.util.find_spec("lightning") is None, reason="lightning is not installed")

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent


def _run(marker: str) -> None:
    env = {**os.environ, "FXPROF_LIGHTNING_TESTS": "1"}
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", marker,
                           str(HERE / "test_lightning.py")], cwd=ROOT, env=env, capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, timeout=1800)
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-3000:]
    assert " passed" in done.stdout.splitlines()[-1], done.stdout[-2000:]


def test_the_lightning_callbacks_tests():
    _run("not slow")


@pytest.mark.slow
def test_the_lightning_callbacks_slow_tests():
    _run("slow")
