"""What two profiles were measured under, compared in words: only what changes the numbers.

:func:`fxprof.core.compare.comparability` lists the differences a reader must know before
trusting a comparison: the device, the timer, threads, inputs, dtype, versions, numeric
settings (TF32, matmul precision, autocast), how the graph was captured. Each is one sentence
with the setting named in words and its values in units (``CPU threads: a 1, b 2``). A
differing model *name* is no warning (the graph check says whether the graphs differ); nor
are outcomes of the measurement (the timed loop's wall time, compile time, kernel counts),
nor keys one side's older fxprof did not record at their default value.
"""

from __future__ import annotations

from typing import Any

__all__ = ["LABELS", "NOT_CONDITIONS", "DEFAULTS", "describe_difference"]

#: a measuring condition in words, by its (dotted) meta key
LABELS = {
    "device": "device",
    "gpu": "GPU",
    "timer": "timer (the clock each node is timed with)",
    "dtype": "dtype of the busiest nodes",
    "threads": "CPU threads",
    "inputs": "inputs",
    "torch": "torch version",
    "capture": "capture (how the graph was made: node names and counts follow it)",
    "mode": "mode (whole runs, or each node re-run on its own)",
    "no_grad": "no_grad",
    "training": "training mode (dropout, batch-norm statistics)",
    "backward": "training steps (forward and backward)",
    "machine": "machine",
    "python": "Python version (the interpreter's time between nodes)",
    "fxprof": "fxprof version",
    "env.tf32_matmul": "TF32 for matmuls",
    "env.tf32_cudnn": "TF32 for cuDNN convolutions",
    "env.float32_matmul_precision": "float32 matmul precision",
    "env.cudnn_benchmark": "cudnn.benchmark",
    "env.cudnn_deterministic": "cudnn.deterministic",
    "env.deterministic_algorithms": "deterministic algorithms",
    "env.autocast": "autocast",
    "env.devices": "devices",
    "env.cuda": "CUDA version",
    "env.cudnn": "cuDNN version",
    "compiled.backend": "torch.compile backend",
    "compiled.mode": "torch.compile mode",
    "compiled.options": "torch.compile options",
    "compiled.dynamic": "torch.compile dynamic shapes",
    "compiled.fullgraph": "torch.compile fullgraph",
}

#: meta keys that are names or outcomes of the measurement, not conditions of it
NOT_CONDITIONS = ("model", "timed_wall_ms", "env.threads", "compiled.compile_s", "compiled.unprofiled_ms", "compiled.unprofiled_after_profiler_ms",
                  "compiled.kernels", "compiled.graphs", "compiled.recompiles", "compiled.graph_breaks",
                  "compiled.kernel_source", "compiled.torch", "compiled.unprofiled_runs", "compiled.unprofiled_median_ms",
                  "compiled.reused")

#: the value a key has when an older fxprof did not record it
DEFAULTS = {"mode": "timed", "backward": False, "env.autocast": "off", "env.deterministic_algorithms": False,
            "env.cudnn_benchmark": False, "env.cudnn_deterministic": False}


def _show(value: Any) -> str:
    if type(value).__name__ == "_Missing":
        return "(not recorded)"
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, tuple):
        value = ", ".join(map(str, value))
    text = repr(value) if not isinstance(value, str) else value
    return text if len(text) <= 60 else text[:57] + "..."


def describe_difference(key: str, a: Any, b: Any, missing: Any) -> str:
    """One sentence for a meta key whose values differ, or "" when the difference does not
    change the numbers (a name, an outcome, a key one side lacks at its default value)."""
    if key in NOT_CONDITIONS or key.split(".")[0] in NOT_CONDITIONS:
        return ""
    if (a is missing or b is missing) and key in LABELS:  # a key fxprof records, on one side only
        known = b if a is missing else a
        if key not in DEFAULTS or DEFAULTS[key] == known:
            return ""  # recorded by one side's newer fxprof only: nothing says the other differed
        a, b = (DEFAULTS[key], b) if a is missing else (a, DEFAULTS[key])
    label = LABELS.get(key, key)
    return f"{label}: a {_show(a)}, b {_show(b)}"
