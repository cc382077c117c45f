"""Node anatomy: shapes, sizes and FLOPs, measured in an untimed pass (memory: fxprof.measure.passes.memory).

These passes run the graph once each, outside the timed runs, so their own costs (the FLOP
counter costs hundreds of microseconds per node) never reach the timings. Each returns one
record per executed node, keyed by node name.
"""

from __future__ import annotations

import contextlib
import warnings
from typing import Any

import torch
from torch import fx, nn
from torch.utils._python_dispatch import TorchDispatchMode

from ...vocab import ANATOMY_COLUMNS
from ..common.tree import PlainContainers, tensors_in
from .touched import Touched

__all__ = ["ANATOMY_COLUMNS", "anatomy_pass", "describe_shape"]



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


#: aten ops that return a tensor but launch no device work (allocation without a kernel)
_NO_WORK = frozenset({"empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "alias", "detach", "lift_fresh", "_unsafe_view", "_reshape_alias", "resolve_conj", "resolve_neg"})


def _does_work(func: Any) -> bool:
    """True for an aten op that runs device work: not a view, not a metadata query (its
    results include a tensor, or it reads a tensor's value to the host)."""
    if getattr(func, "is_view", False):
        return False
    packet = getattr(func, "_opname", None) or str(func).split(".")[-2 if str(func).count(".") >= 2 else -1]
    if packet in _NO_WORK:
        return False
    if packet in ("_local_scalar_dense", "item", "equal", "is_nonzero"):
        return True
    returns = getattr(getattr(func, "_schema", None), "returns", [])
    return any("Tensor" in str(r.type) for r in returns)


class _OpCounter(TorchDispatchMode):
    """Counts the aten ops that do work, for telling nodes that launch nothing apart, and the
    bytes they touch (:class:`fxprof.measure.passes.touched.Touched`)."""

    def __init__(self) -> None:
        super().__init__()
        self.count = 0
        self.touched = Touched()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[override]
        kwargs = kwargs or {}
        result = func(*args, **kwargs)
        if _does_work(func):
            self.count += 1
            self.touched.op(func, args, kwargs, result)
        return result


class _AnatomyInterpreter(PlainContainers, fx.Interpreter):
    """Runs each node once, recording shapes, output bytes, (optionally) FLOPs, the aten ops
    that do work and, on CUDA, the synchronizations the node makes."""

    def __init__(self, gm: fx.GraphModule, count_flops: bool, watch_syncs: bool = False):
        super().__init__(gm)
        self.records: dict[str, dict[str, Any]] = {}
        self.flop_mode = None
        self.watch_syncs = watch_syncs
        if count_flops:
            from torch.utils.flop_counter import FlopCounterMode

            self.flop_mode = FlopCounterMode(display=False)

    def run_node(self, n: fx.Node) -> Any:
        args, kwargs = self.fetch_args_kwargs_from_env(n)
        shapes = [describe_shape(a) for a in args] + [f"{k}={describe_shape(v)}" for k, v in kwargs.items()]
        counter = _OpCounter()
        with contextlib.ExitStack() as stack:
            caught = stack.enter_context(warnings.catch_warnings(record=True)) if self.watch_syncs else []
            if self.watch_syncs:
                warnings.simplefilter("always")
            if self.flop_mode is not None:
                stack.enter_context(self.flop_mode)
            stack.enter_context(counter)
            result = super().run_node(n)
        flops = int(self.flop_mode.get_total_flops()) if self.flop_mode is not None else None
        if flops == 0 and n.op == "call_module" and isinstance(self.module.get_submodule(str(n.target)), nn.MultiheadAttention):
            flops = _attention_flops(self.module.get_submodule(str(n.target)), args, kwargs)
        syncs = sum("synchroniz" in str(w.message) for w in caught)
        for w in caught:  # give the user back every warning that was not ours
            if "synchroniz" not in str(w.message):
                warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
        self.records[n.name] = {
            "input_shapes": ", ".join(shapes),
            "output_shape": describe_shape(result),
            "dtype": _dtypes(result),
            "out_bytes": sum(t.numel() * t.element_size() for t in tensors_in(result)),
            # what its aten ops read from tensors that existed before it and wrote to tensors it
            # leaves behind, each region once (fxprof.measure.passes.touched)
            "bytes": counter.touched.total(tensors_in(result)) if counter.count else 0,
            "flops": flops,
            "device_ops": counter.count,
            "syncs": syncs if self.watch_syncs else None,
            "devices": {str(t.device) for t in tensors_in(result)},
        }
        return result


def _attention_flops(module: nn.Module, args: tuple, kwargs: dict) -> int:
    """FLOPs of an ``nn.MultiheadAttention`` call that took its inference fast path: one op
    (``_native_multi_head_attention``) without a FLOP formula, so FlopCounterMode read 0 (vit_b_16:
    a third of the model's FLOPs). Counted on a second call with the fast path off, the same
    projections and attention as separate ops; its result is dropped, the RNG state kept."""
    from torch.utils.flop_counter import FlopCounterMode

    fast = torch.backends.mha.get_fastpath_enabled()
    rng = torch.get_rng_state()
    torch.backends.mha.set_fastpath_enabled(False)
    try:
        with torch.no_grad(), FlopCounterMode(display=False) as counter:
            module(*args, **kwargs)
        return int(counter.get_total_flops())
    except Exception:  # a count, never a failure of the profile
        return 0
    finally:
        torch.backends.mha.set_fastpath_enabled(fast)
        torch.set_rng_state(rng)


@contextlib.contextmanager
def _sync_debug(enabled: bool) -> Any:
    """``torch.cuda`` sync debug mode "warn" (every synchronizing call warns), restored after."""
    if not enabled:
        yield
        return
    previous = torch.cuda.get_sync_debug_mode()
    with warnings.catch_warnings():  # torch's note that the mode is a prototype, on the user's terminal
        warnings.filterwarnings("ignore", message=".*Synchronization debug mode is a prototype")
        torch.cuda.set_sync_debug_mode("warn")
    try:
        yield
    finally:
        torch.cuda.set_sync_debug_mode(previous)


def anatomy_pass(count_flops: bool = True, watch_syncs: bool = False):
    """A pass (graph, label, inputs) -> (output, records) recording, per node, shapes, dtype,
    output bytes and FLOPs from one untimed run.

    ``flops`` come from ``torch.utils.flop_counter.FlopCounterMode``: only ops with a formula
    (convolutions, matrix products, attention...) count; the rest report 0, not a guess.
    ``out_bytes`` is the logical size of the tensors a node returns (a view counts in full).
    ``bytes`` is what the node's aten ops read and write (:mod:`fxprof.measure.passes.touched`: the
    parts of its inputs, a called module's parameters and buffers included, that they touch,
    and its outputs), 0 for a node that runs no aten op doing work.
    ``device_ops`` counts the aten ops that do work (0: the node launches nothing: a
    placeholder, a ``getitem``, a view). With ``watch_syncs`` (CUDA), ``syncs`` counts the
    synchronizations the node makes (``.item()``, ``nonzero``, a copy to the host...), read
    with ``torch.cuda.set_sync_debug_mode("warn")``, which is restored afterwards.
    """

    def run(gm: fx.GraphModule, label: str, inputs: tuple) -> tuple[Any, dict[str, dict[str, Any]]]:
        interpreter = _AnatomyInterpreter(gm, count_flops, watch_syncs)
        with _sync_debug(watch_syncs):
            out = interpreter.run(*inputs)
        return out, _prefixed(interpreter.records, label)

    return run


def _prefixed(records: dict[str, dict[str, Any]], label: str) -> dict[str, dict[str, Any]]:
    return {f"{label}:{k}": v for k, v in records.items()} if label else records
