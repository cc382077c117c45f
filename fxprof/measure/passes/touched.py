"""The bytes a node really touches, counted op by op as the node's aten ops run.

A node's ``bytes`` (the roofline's memory term) is what it must read and write at least once.
Counting a node's tensor inputs and outputs in full overcounts whatever only part of a tensor
is read: an embedding of 64 tokens reads 64 rows of its table, not the table (HF BERT's
``word_embeddings`` was charged 31.3 MB for a 64 KiB lookup and shown at 4352% of its roof).
So the anatomy pass watches every aten op a node runs (a ``TorchDispatchMode``) and counts:

- each tensor an op reads, in full (the memory its strides span when that is smaller: a
  broadcast view reads the few elements it has), except where the op reads only part of it:
  ``embedding``/``embedding_bag`` (one row per index), ``index_select``, ``index``, ``gather``,
  ``take`` (what they select);
- each tensor an op writes: its outputs, an ``out=`` tensor (written, not read), and the
  operand of an in-place op (read and written once; ``copy_``, ``fill_``, ``zero_`` and the
  random fills only write it; ``index_put_``, ``index_copy_``, ``index_add_`` and ``scatter_``
  touch only what they index);
- views and metadata move nothing; an op whose tensor outputs are all empty (a convolution
  over an empty batch) touches nothing, not even its weight.

Per node, a tensor region is counted once however many ops read it; data the node itself
created and dropped (temporaries inside a called module) is not counted, only what it read
from before it ran and what it left behind (its outputs, the tensors it changed in place).
"""

from __future__ import annotations

import math
from typing import Any, Callable

import torch

__all__ = ["Touched", "tensor_bytes"]


def tensor_bytes(t: torch.Tensor) -> int:
    """The bytes a kernel must touch to read or write ``t`` at least once: its logical size, or
    the memory its strides span when that is smaller (a broadcast view, ``expand``, reads the
    few elements it has)."""
    logical = t.numel() * t.element_size()
    try:
        if t.layout != torch.strided or t.numel() == 0:
            return logical
        span = 1 + sum((size - 1) * abs(stride) for size, stride in zip(t.shape, t.stride()))
        return min(logical, span * t.element_size())
    except Exception:  # tensors without strides (some subclasses)
        return logical


#: in-place ops that overwrite their operand without reading it
_OVERWRITE = frozenset({"copy_", "fill_", "zero_", "uniform_", "normal_", "random_", "bernoulli_", "exponential_",
                        "geometric_", "cauchy_", "log_normal_", "resize_", "set_"})


def _row_bytes(t: torch.Tensor) -> int:
    return math.prod(t.shape[1:]) * t.element_size() if t.dim() else t.element_size()


def _slice_elements(t: torch.Tensor, dim: int) -> int:
    size = t.shape[dim] if t.dim() else 1
    return t.numel() // size if size else 0


def _indexed_elements(t: torch.Tensor, indices: Any) -> int:
    """Elements of ``t`` that ``t[indices]`` (advanced indexing with a list of index tensors,
    None meaning the whole dimension) selects."""
    indices = list(indices or [])
    given = [i for i in indices if isinstance(i, torch.Tensor)]
    try:
        shape = torch.broadcast_shapes(*(i.shape for i in given)) if given else ()
    except RuntimeError:
        return t.numel()
    count = math.prod(shape)
    for d in range(t.dim()):
        if d >= len(indices) or not isinstance(indices[d], torch.Tensor):
            count *= t.shape[d]
    if given and all(i.dtype == torch.bool for i in given):  # a mask selects at most its size
        return t.numel()
    return count


#: partial reads: op -> (argument name, elements read from it), from the op's bound arguments
_PARTIAL_READ: dict[str, tuple[str, Callable[[dict[str, Any], list[torch.Tensor]], int]]] = {
    "embedding": ("weight", lambda a, out: a["indices"].numel() * _row_bytes(a["weight"]) // a["weight"].element_size()),
    "embedding_bag": ("weight", lambda a, out: a["indices"].numel() * _row_bytes(a["weight"]) // a["weight"].element_size()),
    "_embedding_bag": ("weight", lambda a, out: a["indices"].numel() * _row_bytes(a["weight"]) // a["weight"].element_size()),
    "_embedding_bag_forward_only": ("weight", lambda a, out: a["indices"].numel() * _row_bytes(a["weight"]) // a["weight"].element_size()),
    "index_select": ("self", lambda a, out: a["index"].numel() * _slice_elements(a["self"], a["dim"])),
    "index": ("self", lambda a, out: _indexed_elements(a["self"], a["indices"])),
    "_unsafe_index": ("self", lambda a, out: _indexed_elements(a["self"], a["indices"])),
    "gather": ("self", lambda a, out: a["index"].numel()),
    "take": ("self", lambda a, out: a["index"].numel()),
}

#: in-place ops that touch (read and write) only part of their operand ``self``
_PARTIAL_INPLACE: dict[str, Callable[[dict[str, Any]], int]] = {
    "index_put_": lambda a: _indexed_elements(a["self"], a["indices"]),
    "_index_put_impl_": lambda a: _indexed_elements(a["self"], a["indices"]),
    "index_copy_": lambda a: a["source"].numel(),
    "index_add_": lambda a: a["source"].numel(),
    "index_fill_": lambda a: a["index"].numel() * _slice_elements(a["self"], a["dim"]),
    "scatter_": lambda a: a["index"].numel(),
    "scatter_add_": lambda a: a["index"].numel(),
    "scatter_reduce_": lambda a: a["index"].numel(),
    "masked_scatter_": lambda a: a["source"].numel(),
}


def _storage_key(t: torch.Tensor) -> Any:
    try:
        ptr = t.untyped_storage().data_ptr()
    except Exception:  # tensors without storage (some subclasses)
        return ("id", id(t))
    return ("ptr", t.device.type, ptr) if ptr else ("id", id(t))  # meta and empty tensors have no address


def _region(t: torch.Tensor) -> Any:
    try:
        return (t.storage_offset(), tuple(t.shape), tuple(t.stride()), t.dtype)
    except Exception:
        return (id(t),)


def _storage_bytes(t: torch.Tensor) -> float:
    try:
        return float(t.untyped_storage().nbytes())
    except Exception:
        return math.inf


class Touched:
    """Collects, for one node, the regions its aten ops read and write (:meth:`op`), and
    totals them (:meth:`total`)."""

    def __init__(self) -> None:
        self.reads: dict[Any, dict[Any, int]] = {}
        self.writes: dict[Any, dict[Any, int]] = {}
        self.created: set[Any] = set()
        self.capacity: dict[Any, float] = {}

    def _add(self, book: dict[Any, dict[Any, int]], t: torch.Tensor, nbytes: int, tag: str = "") -> None:
        key = _storage_key(t)
        self.capacity.setdefault(key, _storage_bytes(t))
        regions = book.setdefault(key, {})
        region = (tag, _region(t))
        regions[region] = max(regions.get(region, 0), int(nbytes))

    def op(self, func: Any, args: tuple, kwargs: dict, result: Any) -> None:
        """Record one aten op that does work (the caller has checked that) and its result. An
        op the rules cannot read (an odd schema, a tensor subclass) counts every tensor
        argument as read in full and every output as written: the count never stops a profile."""
        from ..common.tree import tensors_in

        try:
            self._op(func, args, kwargs, result)
        except Exception:
            for t in tensors_in((args, kwargs)):
                self._add(self.reads, t, tensor_bytes(t), tag="fallback")
            for t in tensors_in(result):
                self._add(self.writes, t, tensor_bytes(t), tag="fallback")

    def _op(self, func: Any, args: tuple, kwargs: dict, result: Any) -> None:
        from ..common.tree import tensors_in

        outputs = tensors_in(result)
        if outputs and all(o.numel() == 0 for o in outputs):
            return  # nothing produced: nothing had to be read (an empty batch reads no weight)
        schema = getattr(func, "_schema", None)
        name = getattr(func, "_opname", None) or (schema.name.split("::")[-1] if schema is not None else str(func))
        bound = _bind(schema, args, kwargs)
        written: set[Any] = set()
        if bound is None:  # no schema: every tensor argument read in full
            for t in tensors_in((args, kwargs)):
                self._add(self.reads, t, tensor_bytes(t))
        else:
            partial_read = _PARTIAL_READ.get(name)
            partial_inplace = _PARTIAL_INPLACE.get(name)
            for arg, value in bound:
                is_write = bool(getattr(arg, "alias_info", None) is not None and arg.alias_info.is_write)
                for t in tensors_in(value):
                    full = tensor_bytes(t)
                    if is_write:
                        written.add((_storage_key(t), _region(t)))
                        touched = full
                        if partial_inplace is not None and arg.name == "self":
                            touched = min(full, _safe(lambda: partial_inplace(dict(_named(bound))), full // t.element_size() or 0) * t.element_size())
                        self._add(self.writes, t, touched)
                        if not arg.kwarg_only and name not in _OVERWRITE:  # out= is written, not read
                            self._add(self.reads, t, touched)
                        continue
                    touched = full
                    if partial_read is not None and arg.name == partial_read[0]:
                        elements = _safe(lambda: partial_read[1](dict(_named(bound)), outputs), None)
                        if elements is not None:
                            touched = min(full, elements * t.element_size())
                            self._add(self.reads, t, touched, tag=name)
                            continue
                    self._add(self.reads, t, touched)
        for t in outputs:
            if (_storage_key(t), _region(t)) in written:
                continue
            key = _storage_key(t)
            if key not in self.reads and key not in self.writes:
                self.created.add(key)  # a fresh tensor: a temporary unless the node returns it
            self._add(self.writes, t, tensor_bytes(t))

    def total(self, outputs: list[torch.Tensor]) -> int:
        """Bytes the node read from tensors it did not create, plus bytes it wrote to tensors it
        returns or that existed before it ran; each region once, each storage at most its size."""
        kept = {_storage_key(t) for t in outputs}
        total = 0.0
        for key, regions in self.reads.items():
            if key not in self.created:
                total += min(sum(regions.values()), self.capacity.get(key, math.inf))
        for key, regions in self.writes.items():
            if key not in self.created or key in kept:
                total += min(sum(regions.values()), self.capacity.get(key, math.inf))
        return int(total)


def _safe(fn: Callable[[], Any], default: Any) -> Any:
    try:
        return int(fn())
    except Exception:
        return default


def _bind(schema: Any, args: tuple, kwargs: dict) -> list[tuple[Any, Any]] | None:
    """(schema argument, value) pairs of one call, or None without a schema."""
    if schema is None:
        return None
    pairs = []
    positional = list(args)
    for i, arg in enumerate(schema.arguments):
        if i < len(positional) and not arg.kwarg_only:
            pairs.append((arg, positional[i]))
        elif arg.name in kwargs:
            pairs.append((arg, kwargs[arg.name]))
    return pairs


def _named(bound: list[tuple[Any, Any]]) -> list[tuple[str, Any]]:
    return [(arg.name, value) for arg, value in bound]
