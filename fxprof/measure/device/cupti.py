"""CUPTI settings of the process that fxprof's profiler timers cannot work under.

kineto reads ``TEARDOWN_CUPTI`` each time a ``torch.profiler`` stops: set to ``1``, it detaches
CUPTI then and attaches it again at the next start. That removes the slowdown a process keeps
after a profile (launches 1.37-1.57x slower on an H200 host without it, none with it:
tests/benchmarks/gpu_after_profiler.py), but fxprof's compiled mode on a GPU starts and stops
the profiler once per timed run, and under it the kernels read wrong: compiled resnet50 (bs32
fp16, H200, torch 2.11) read 29.1 ms of kernels a run with every run alike, against 1.54 ms
with the variable unset (docs/performance.md section 18). So those timers refuse to run with it.
"""

from __future__ import annotations

import os
from typing import Mapping

from ...errors import TimerUnavailableError

TEARDOWN_ENV = "TEARDOWN_CUPTI"


def teardown_refusal(what: str, environ: Mapping[str, str] | None = None) -> str:
    """Why ``what`` (a timer that starts and stops torch.profiler per timed run, on a GPU) cannot
    run in this environment; "" where it can."""
    environ = os.environ if environ is None else environ
    if str(environ.get(TEARDOWN_ENV, "")).strip() != "1":
        return ""
    return (f"{TEARDOWN_ENV}=1 is set in the environment: kineto then detaches CUPTI each time torch.profiler stops, "
            f"and {what} starts and stops it once per timed run, where the kernels read wrong (compiled resnet50 on an "
            f"H200: 29.1 ms of kernels a run against 1.54 ms with it unset). Unset {TEARDOWN_ENV} (or set it to 0) "
            f"for this profile, or profile eagerly with timer='cuda'")


def refuse_teardown(what: str) -> None:
    """Raise :class:`TimerUnavailableError` where :func:`teardown_refusal` gives a reason."""
    why = teardown_refusal(what)
    if why:
        raise TimerUnavailableError(why)
