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
"""

__version__ = "0.1.0"

from .errors import (  # noqa: E402
    FxprofError,
    NodeExecutionError,
    ProfileFormatError,
    ProfileWriteError,
    TimerUnavailableError,
    TraceError,
)
from .timers import CpuTimer, CudaEventTimer, KernelTimer, SyncTimer, Timer  # noqa: E402
from .tracer import ProfilerTracer, trace  # noqa: E402
from .nodes import NodeInfo  # noqa: E402
from .interpreter import ProfilingInterpreter, Recorder, Recording  # noqa: E402
from .profile import Profile  # noqa: E402
from .io import load_profile as load, read_csv  # noqa: E402
from .api import profile  # noqa: E402
from .compare import ComparabilityWarning, compare  # noqa: E402
from .selfcheck import selfcheck  # noqa: E402
from .distributed import gather  # noqa: E402
from .plot import plot_compare, plot_distribution, plot_groups, plot_top  # noqa: E402  (matplotlib is imported on first use)

__all__ = [
    "__version__",
    "profile",
    "compare",
    "selfcheck",
    "gather",
    "plot_top",
    "plot_groups",
    "plot_distribution",
    "plot_compare",
    "trace",
    "load",
    "read_csv",
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
    "FxprofError",
    "TraceError",
    "TimerUnavailableError",
    "NodeExecutionError",
    "ProfileFormatError",
    "ProfileWriteError",
    "ComparabilityWarning",
]
