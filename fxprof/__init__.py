"""fxprof: a torch.fx graph-interpreter profiler that times every node of every run.

Quick start::

    import fxprof, torch, torchvision
    model = torchvision.models.resnet18(weights=None).eval()
    prof = fxprof.profile(model, torch.randn(1, 3, 224, 224))
    print(prof.summary(top=10))
    prof.df          # one row per node: times in ms, share of total in pct
    prof.samples     # every sample: one row per (node, run)
    prof.to_csv("resnet18.csv"); prof.save("resnet18.json")
    fxprof.plot_top(prof)   # matplotlib plots: pip install 'fxprof[plot]'

The names below are imported on first use (PEP 562), so ``import fxprof`` and the command
line's ``--help`` and ``--version`` do not pay for importing torch.
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import TYPE_CHECKING, Any

from .core import hooks as _hooks
from .vocab import __version__


def _conveniences() -> types.ModuleType:
    from .views import conveniences

    return conveniences


# Profile (fxprof.core) renders and writes itself through the views and writers above it: the
# package, above every layer, hands it the way to them (fxprof/core/hooks.py)
_hooks.provide(_conveniences)

#: The public names: the one list. Each but ``__version__`` is imported on first use from where
#: _LAZY says, and imported eagerly for type checkers under ``if TYPE_CHECKING:`` at the end;
#: tests/project/test_public_names.py holds the three to each other and to the docs.
__all__ = [
    "__version__",
    # profiling
    "profile",
    "session",
    "schedule",
    "by_signature",
    "trace",
    "Profile",
    "ProfilerTracer",
    "ProfilingInterpreter",
    "Recorder",
    "Recording",
    "NodeInfo",
    "Timer",
    "CpuTimer",
    "CudaEventTimer",
    "KernelTimer",
    "SyncTimer",
    # reading, comparing, showing
    "load",
    "read_csv",
    "compare",
    "ComparabilityWarning",
    "merge_chrome_traces",
    "plot_top",
    "plot_groups",
    "plot_distribution",
    "plot_compare",
    "plot_roofline",
    "show_report",
    # the machine, variants, generation, several processes
    "selfcheck",
    "machine_peaks",
    "Peaks",
    "whatif",
    "WhatIf",
    "generate",
    "Generation",
    "load_generation",
    "gather",
    "overlap",
    # errors
    "FxprofError",
    "TraceError",
    "TimerUnavailableError",
    "NodeExecutionError",
    "NodeFailure",
    "node_failure",
    "ProfileFormatError",
    "ProfileWriteError",
]

#: where each public name lives: name -> (module, attribute in it)
_LAZY: dict[str, tuple[str, str]] = {
    "profile": ("api", "profile"),
    "session": ("session", "session"),
    "schedule": ("session", "schedule"),
    "by_signature": ("core.signatures", "by_signature"),
    "trace": ("measure.capture.tracer", "trace"),
    "Profile": ("core.profile", "Profile"),
    "ProfilerTracer": ("measure.capture.tracer", "ProfilerTracer"),
    "ProfilingInterpreter": ("measure.capture.interpreter", "ProfilingInterpreter"),
    "Recorder": ("measure.timing.recorder", "Recorder"),
    "Recording": ("core.recording", "Recording"),
    "NodeInfo": ("core.nodes", "NodeInfo"),
    "Timer": ("measure.timing.timers", "Timer"),
    "CpuTimer": ("measure.timing.timers", "CpuTimer"),
    "CudaEventTimer": ("measure.timing.timers", "CudaEventTimer"),
    "KernelTimer": ("measure.timing.timers", "KernelTimer"),
    "SyncTimer": ("measure.timing.timers", "SyncTimer"),
    "load": ("io", "load_profile"),
    "read_csv": ("io", "read_csv"),
    "compare": ("core.compare", "compare"),
    "ComparabilityWarning": ("core.compare", "ComparabilityWarning"),
    "merge_chrome_traces": ("views.chrome_trace", "merge_chrome_traces"),
    "plot_top": ("views.plot", "plot_top"),  # matplotlib itself is imported on first use
    "plot_groups": ("views.plot", "plot_groups"),
    "plot_distribution": ("views.plot", "plot_distribution"),
    "plot_compare": ("views.plot", "plot_compare"),
    "plot_roofline": ("views.plot", "plot_roofline"),
    "show_report": ("views.report", "show_report"),  # plotly itself is imported on first use
    "selfcheck": ("selfcheck", "selfcheck"),
    "machine_peaks": ("measure.passes.peaks", "machine_peaks"),
    "Peaks": ("core.roofline", "Peaks"),
    "whatif": ("whatif", "whatif"),
    "WhatIf": ("core.whatif", "WhatIf"),
    "generate": ("generate", "generate"),
    "Generation": ("core.generation", "Generation"),
    "load_generation": ("io.generation", "load_generation"),
    "gather": ("measure.distributed.ranks", "gather"),
    "overlap": ("core.overlap", "overlap"),
    "FxprofError": ("errors", "FxprofError"),
    "TraceError": ("errors", "TraceError"),
    "TimerUnavailableError": ("errors", "TimerUnavailableError"),
    "NodeExecutionError": ("errors", "NodeExecutionError"),
    "NodeFailure": ("errors", "NodeFailure"),
    "node_failure": ("errors", "node_failure"),
    "ProfileFormatError": ("errors", "ProfileFormatError"),
    "ProfileWriteError": ("errors", "ProfileWriteError"),
}


def __getattr__(name: str) -> Any:
    """Import a public name (or a submodule, ``fxprof.views.text``) the first time it is used."""
    if name in _LAZY:
        module, attr = _LAZY[name]
        value = getattr(importlib.import_module(f".{module}", __name__), attr)
        globals()[name] = value  # later lookups skip this function
        return value
    try:
        return importlib.import_module(f".{name}", __name__)
    except ModuleNotFoundError as exc:
        if exc.name != f"{__name__}.{name}":
            raise
    raise AttributeError(f"module 'fxprof' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


class _Package(types.ModuleType):
    """``fxprof.profile`` and ``fxprof.compare`` are the functions, even after the submodules of
    those names are imported (importing a submodule binds it on its package); the modules stay
    in ``sys.modules``."""

    def __setattr__(self, name: str, value: Any) -> None:
        if name in _LAZY and isinstance(value, types.ModuleType):
            return
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package


if TYPE_CHECKING:  # what type checkers and IDEs see: the same names as _LAZY's, imported eagerly
    from .api import profile
    from .core.compare import ComparabilityWarning, compare
    from .core.generation import Generation
    from .core.nodes import NodeInfo
    from .core.overlap import overlap
    from .core.profile import Profile
    from .core.recording import Recording
    from .core.roofline import Peaks
    from .core.signatures import by_signature
    from .core.whatif import WhatIf
    from .errors import (
        FxprofError,
        NodeExecutionError,
        NodeFailure,
        ProfileFormatError,
        ProfileWriteError,
        TimerUnavailableError,
        TraceError,
        node_failure,
    )
    from .generate import generate
    from .io import load_profile as load
    from .io import read_csv
    from .io.generation import load_generation
    from .measure.capture.interpreter import ProfilingInterpreter
    from .measure.capture.tracer import ProfilerTracer, trace
    from .measure.distributed.ranks import gather
    from .measure.passes.peaks import machine_peaks
    from .measure.timing.recorder import Recorder
    from .measure.timing.timers import CpuTimer, CudaEventTimer, KernelTimer, SyncTimer, Timer
    from .selfcheck import selfcheck
    from .session import schedule, session
    from .views.chrome_trace import merge_chrome_traces
    from .views.plot import plot_compare, plot_distribution, plot_groups, plot_roofline, plot_top
    from .views.report import show_report
    from .whatif import whatif
