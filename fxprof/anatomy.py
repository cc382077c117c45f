"""Node anatomy: shapes, sizes, FLOPs and CUDA memory, each measured in an untimed pass.

These passes run the graph once each, outside the timed runs, so their own costs (the FLOP
counter costs hundreds of microseconds per node) never reach the timings. Each returns one
record per executed node, keyed by node name.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import fx

from ._tree import tensors_in

__all__ = ["ANATOMY_COLUMNS", "anatomy_pass", "memory_pass", "describe_shape"]

#: per-node columns from the anatomy passes: name -> pandas dtype
ANATOMY_COLUMNS: dict[str, str] = {
    "input_shapes": "str",
    "output_shape": "str",
    "dtype": "str",
    "out_bytes": "Int64",
    "flops": "Int64",
    "mem_delta_bytes": "Int64",
    "mem_peak_bytes": "Int64",
    "skip_reason": "str",
}


def describe_shape(value: Any) -> str:
    """Shapes of a value, keeping its structure: ``[1, 64, 8, 8]``, ``([2, 4], [2, 4])``."""
    if isinstance(value, torch.Tensor):
        return str(list(value.shape))
    if isinstance(value, torch.Size):
        return f"Size({list(value)})"
    if isinstance(value, tuple):
        inner = ", ".join(describe_shape(v) for v in value)
        return f"({inner},)" if len(value) == 1 else f"({inner})"
    if isinstance(value, list):
        return "[" + ", ".join(describe_shape(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k!r}: {describe_shape(v)}" for k, v in value.items()) + "}"
    if value is None or isinstance(value, (bool, int, float, str, torch.dtype, torch.device)):
        text = repr(value)
        return text if len(text) <= 40 else text[:37] + "..."
    return type(value).__name__


def _dtypes(value: Any) -> str:
    seen: list[str] = []
    for t in tensors_in(value):
        name = str(t.dtype).replace("torch.", "")
        if name not in seen:
            seen.append(name)
    return ",".join(seen)


class _AnatomyInterpreter(fx.Interpreter):
    """Runs each node once, recording shapes, output bytes and (optionally) FLOPs."""

    def __init__(self, gm: fx.GraphModule, count_flops: bool):
        super().__init__(gm)
        self.records: dict[str, dict[str, Any]] = {}
        self.flop_mode = None
        if count_flops:
            from torch.utils.flop_counter import FlopCounterMode

            self.flop_mode = FlopCounterMode(display=False)

    def run_node(self, n: fx.Node) -> Any:
        args, kwargs = self.fetch_args_kwargs_from_env(n)
        shapes = [describe_shape(a) for a in args] + [f"{k}={describe_shape(v)}" for k, v in kwargs.items()]
        if self.flop_mode is not None:
            with self.flop_mode:
                result = super().run_node(n)
            flops = int(self.flop_mode.get_total_flops())
        else:
            result = super().run_node(n)
            flops = None
        self.records[n.name] = {
            "input_shapes": ", ".join(shapes),
            "output_shape": describe_shape(result),
            "dtype": _dtypes(result),
            "out_bytes": sum(t.numel() * t.element_size() for t in tensors_in(result)),
            "flops": flops,
        }
        return result


def anatomy_pass(count_flops: bool = True):
    """A pass (graph, label, inputs) -> (output, records) recording, per node, shapes, dtype,
    output bytes and FLOPs from one untimed run.

    ``flops`` come from ``torch.utils.flop_counter.FlopCounterMode``: only ops with a formula
    (convolutions, matrix products, attention...) count; the rest report 0, not a guess.
    ``out_bytes`` is the logical size of the tensors a node returns (a view counts in full).
    """

    def run(gm: fx.GraphModule, label: str, inputs: tuple) -> tuple[Any, dict[str, dict[str, Any]]]:
        interpreter = _AnatomyInterpreter(gm, count_flops)
        out = interpreter.run(*inputs)
        return out, _prefixed(interpreter.records, label)

    return run


def _prefixed(records: dict[str, dict[str, Any]], label: str) -> dict[str, dict[str, Any]]:
    return {f"{label}:{k}": v for k, v in records.items()} if label else records


class _MemoryInterpreter(fx.Interpreter):
    def __init__(self, gm: fx.GraphModule, device: torch.device):
        super().__init__(gm)
        self.device = device
        self.records: dict[str, dict[str, Any]] = {}

    def run_node(self, n: fx.Node) -> Any:
        device = self.device
        before = torch.cuda.memory_allocated(device)
        torch.cuda.reset_peak_memory_stats(device)
        result = super().run_node(n)
        after = torch.cuda.memory_allocated(device)
        peak = torch.cuda.max_memory_allocated(device)
        self.records[n.name] = {"mem_delta_bytes": after - before, "mem_peak_bytes": peak - before}
        return result


def memory_pass(device: torch.device):
    """A pass recording, per node, from the CUDA caching allocator's counters in one untimed run:

    ``mem_delta_bytes``: allocated memory right after the node minus right before (mostly its
    outputs; inputs whose last use it was are freed only after this reading);
    ``mem_peak_bytes``: the highest allocation reached while the node ran, above the
    allocation when it started (outputs plus workspace and temporaries).

    Resets the device's peak-memory statistics (``torch.cuda.reset_peak_memory_stats``).
    """

    def run(gm: fx.GraphModule, label: str, inputs: tuple) -> tuple[Any, dict[str, dict[str, Any]]]:
        interpreter = _MemoryInterpreter(gm, device)
        out = interpreter.run(*inputs)
        return out, _prefixed(interpreter.records, label)

    return run
