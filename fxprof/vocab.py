"""fxprof's vocabulary: the names every layer shares. Imports nothing heavy (no torch, no pandas).

What may be asked for (timers, captures, modes, group keys, phases) is written here once; what a
profile's tables hold (column names, dtypes, units, roll-ups) is declared in fxprof/columns.py.
The measurement code, the files, the views and the command line's ``choices=`` read them there.
"""

from __future__ import annotations

from .columns import stored_columns

__all__ = [
    "__version__", "TIMER_NAMES", "CUDA_TIMERS", "EVENT_TIMERS", "MARKS_TIMER", "HOST_CLOCK_TIMERS", "CAPTURES", "COMPILE_MODES", "MODES", "OPTIMIZERS",
    "GROUP_KEYS", "PHASES", "RANGE_KIND", "SCOPE_SOURCES", "ANATOMY_COLUMNS", "TIME_COLUMNS", "ENV_KEYS",
    "ROLES", "MODEL", "PLUMBING", "RANGE", "COLLECTIVE", "FSDP", "TP", "DDP", "OPTIMIZER", "KERNEL", "UNMATCHED",
    "GRAPH_BREAK", "OUTSIDE", "PARALLEL_ROLES", "COLLECTIVE_KINDS", "COLLECTIVE_NAMESPACES", "FSDP_STEPS", "NO_COLLECTIVE", "BREAK", "OVERHEAD",
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

#: ``meta["timer"]`` of a compiled profile timed by fxprof's marks in inductor's generated code (a host
#: clock, as ``cpu``); one timed by torch.profiler says ``profiler``
MARKS_TIMER = "marks"
#: ``meta["timer"]`` values whose run times are the host clock's wall time (what the contention meter's
#: lost time is taken out of)
HOST_CLOCK_TIMERS = ("cpu", MARKS_TIMER)

#: ``capture=`` values (see fxprof.measure.capture.captures)
CAPTURES = ("auto", "symbolic", "dynamo", "export")
#: torch.compile modes for ``compile={"mode": ...}`` and ``--compile-mode`` (fxprof.measure.compiled.mode)
COMPILE_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
#: ``mode=`` values: every node in whole runs, or each node re-run on its own inputs
MODES = ("timed", "isolated")
#: ``optimizer=`` names for a training step
OPTIMIZERS = ("sgd", "adamw")

#: ``group_by`` keys; ``rank`` only for a profile gathered from several ranks
GROUP_KEYS = ("op", "module_type", "range", "scope", "graph", "phase", "comm", "role", "rank")
#: the ``kind`` of a ``record_function`` range's enter and exit nodes: the range's own
#: bookkeeping (opening and closing the profiler range), not the model's work. Views keep them
#: out of the hotspot ranking by default and show their summed cost on a line of its own.
RANGE_KIND = "record_function"
#: the parts of a training step, in order
PHASES = ("forward", "loss", "backward", "optimizer")

# ------------------------------------------------------------------------ what a row is
# A row's ``role`` (the ``role`` column) is set where the row is made: by the capture that
# describes a graph's nodes (fxprof.measure.capture.graph), by the code that adds rows of its
# own (FSDP's and DDP's steps, the optimizer, a compiled model's kernels, graph breaks). Analyses
# read it (FSDP's overlap, communication against computation, plumbing), never a target's text;
# files written before the column existed get it derived once on load (fxprof.io.roles).
MODEL = "model"
PLUMBING = "plumbing"
RANGE = "range"
COLLECTIVE = "collective"
FSDP = "fsdp"
TP = "tp"
DDP = "ddp"
OPTIMIZER = "optimizer"
KERNEL = "kernel"
UNMATCHED = "unmatched"
GRAPH_BREAK = "graph_break"
OUTSIDE = "outside"
#: every role, with what it means
ROLES: dict[str, str] = {
    MODEL: "a node of the model's graph doing the model's work",
    PLUMBING: "the graph's inputs, attribute reads, output and guards: no work of the model",
    RANGE: "the enter or exit of a record_function range (the range's own bookkeeping)",
    COLLECTIVE: "a torch.distributed collective, point-to-point op or wait in the graph",
    FSDP: "one of FSDP2's steps, timed by fxprof: all_gather, wait, reshard or reduce_scatter (its kind)",
    TP: "a tensor-parallel module's input or output redistribution (its kind: the collective it issued, or redistribute)",
    DDP: "DDP's gradient all-reduce of a bucket, or the wait for them all",
    OPTIMIZER: "the optimizer's zero_grad or step in a training step",
    KERNEL: "a compiled model's kernel (generated or extern)",
    UNMATCHED: "a compiled model's profiler event that no kernel claims",
    GRAPH_BREAK: "a compiled model's graph break: the Python between two compiled graphs",
    OUTSIDE: "a compiled model's time outside its kernels: guards, wrappers, the call into the compiled region",
}
#: roles of rows fxprof adds for a parallel layout's own work; communication when their kind is a collective
PARALLEL_ROLES = (FSDP, TP, DDP)

#: ``kind`` values of collective operations, in every spelling the captures produce: the
#: functional collectives of dynamo/export graphs (``all_reduce`` then ``wait_tensor``), the
#: in-place ``torch.distributed`` calls, and point-to-point operations
COLLECTIVE_KINDS = frozenset({
    "all_reduce", "all_reduce_coalesced", "all_gather", "all_gather_into_tensor",
    "all_gather_into_tensor_coalesced", "all_gather_object", "reduce_scatter", "reduce_scatter_tensor",
    "reduce_scatter_tensor_coalesced", "all_to_all", "all_to_all_single", "broadcast", "reduce",
    "gather", "scatter", "barrier", "send", "recv", "isend", "irecv", "batch_isend_irecv",
    "wait_tensor", "wait", "_wrap_tensor_autograd",
})
#: the operator namespaces of torch.distributed's collectives (functional and in place): a node or
#: an extern kernel calling ``torch.ops.<namespace>.*`` is a collective
COLLECTIVE_NAMESPACES = ("_c10d_functional", "c10d_functional", "_c10d_functional_autograd", "c10d")
#: the kinds of FSDP's step rows (role ``fsdp``): the first three in a forward's graph, the
#: reduce-scatter in a training step's backward
FSDP_STEPS = ("all_gather", "wait", "reshard", "reduce_scatter")
#: the kind of a tensor-parallel input or output step that issued no collective
NO_COLLECTIVE = "redistribute"
#: the ``op`` and ``kind`` of a compiled profile's graph-break rows and of its rows of time
#: outside the kernels
BREAK, OVERHEAD = "graph_break", "compiled_overhead"

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
