"""fxprof's vocabulary: the names every layer shares. Imports nothing heavy (no torch, no pandas).

What may be asked for (timers, captures, modes, group keys, phases) is written here once; what a
profile's tables hold (column names, dtypes, units, roll-ups) is declared in fxprof/columns.py.
The measurement code, the files, the views and the command line's ``choices=`` read them there.
"""

from __future__ import annotations

from .columns import stored_columns

__all__ = [
    "__version__", "TIMER_NAMES", "CUDA_TIMERS", "EVENT_TIMERS", "CAPTURES", "COMPILE_MODES", "MODES", "OPTIMIZERS",
    "GROUP_KEYS", "PHASES", "RANGE_KIND", "SCOPE_SOURCES", "ANATOMY_COLUMNS", "TIME_COLUMNS", "ENV_KEYS",
]

__version__ = "0.1.0"

#: ``timer=`` values: ``auto`` picks ``cuda`` for tensors on a GPU, else ``cpu``
TIMER_NAMES = ("auto", "cpu", "cuda", "sync", "kernel")
#: timers that need a CUDA GPU; their ``time_ms`` is device time (its own track in a Chrome trace)
CUDA_TIMERS = ("cuda", "sync", "kernel")
#: timers whose marks are CUDA events on the stream: the device has a timeline of its own beside
#: the host's, so the ``bound`` verdict and the ``host_mean_ms`` column mean something.
#: ``sync`` is not one: it reads the host clock after synchronizing, one timeline.
EVENT_TIMERS = ("cuda", "kernel")

#: ``capture=`` values (see fxprof.measure.capture.captures)
CAPTURES = ("auto", "symbolic", "dynamo", "export")
#: torch.compile modes for ``compile={"mode": ...}`` and ``--compile-mode`` (fxprof.measure.compiled.mode)
COMPILE_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
#: ``mode=`` values: every node in whole runs, or each node re-run on its own inputs
MODES = ("timed", "isolated")
#: ``optimizer=`` names for a training step
OPTIMIZERS = ("sgd", "adamw")

#: ``group_by`` keys; ``rank`` only for a profile gathered from several ranks
GROUP_KEYS = ("op", "module_type", "range", "scope", "graph", "phase", "comm", "rank")
#: the ``kind`` of a ``record_function`` range's enter and exit nodes: the range's own
#: bookkeeping (opening and closing the profiler range), not the model's work. Views keep them
#: out of the hotspot ranking by default and show their summed cost on a line of its own.
RANGE_KIND = "record_function"
#: the parts of a training step, in order
PHASES = ("forward", "loss", "backward", "optimizer")

#: where a node's ``scope`` came from (the ``scope_source`` column):
#: ``recorded``: the graph says so (the called module, or the node's ``nn_module_stack``);
#: ``frame``: dynamo code with no module stack (resumed after a graph break): the module whose
#: ``forward`` was running; ``inferred``: from the modules that feed the node and consume it
#: (graphs that other tools made without metadata); ``common``: a compiled kernel whose origins
#: lie in several modules, charged to the innermost module holding them all; "": no scope.
SCOPE_SOURCES = ("recorded", "frame", "inferred", "common", "")

#: per-node columns from the anatomy and memory passes: name -> pandas dtype, in the order saved
#: files hold them (declared with every other column in fxprof/columns.py)
ANATOMY_COLUMNS: dict[str, str] = stored_columns()

#: per-sample float columns of a recording, in order (``kernel_ms`` is kept apart: only
#: ``timer="kernel"`` has it)
TIME_COLUMNS = ("time_ms", "host_ms", "start_ms", "host_start_ms")

#: keys of ``meta["env"]`` that change the numbers (compared by ``fxprof.core.environment.differences``)
ENV_KEYS = (
    "devices",
    "cuda",
    "cudnn",
    "tf32_matmul",
    "tf32_cudnn",
    "float32_matmul_precision",
    "cudnn_benchmark",
    "cudnn_deterministic",
    "deterministic_algorithms",
    "autocast",
    "threads",
)

#: what ``fxprof compare --fail-on`` fails on: the whole run slower, or any node slower
#: (:mod:`fxprof.core.gate`)
FAIL_ON = ("slower", "node-slower")
#: the exit status of ``fxprof compare`` when its gate fails (2 stays the usage error's)
GATE_EXIT = 3
