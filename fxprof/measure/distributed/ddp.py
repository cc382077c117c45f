"""DistributedDataParallel's gradient all-reduce, timed per bucket while a training step runs.

DDP all-reduces the gradients in buckets from autograd hooks during the backward (its C++
``Reducer``), and waits for every bucket at the end of the backward. None of that is in a graph,
so a training-step profile of a DDP model had no row for it: the time read as interpreter
overhead between nodes. What this module adds (:class:`TimedBuckets`): for one step, the
reducer's process group is a wrapper (``Reducer._update_process_group``) whose backend passes
every call to the real group and reads the clock around each all-reduce: its issue (the call
itself, on autograd's thread) and its completion (a callback chained to the collective's
future, which DDP waits on, so it has run when the backward returns). On exit the reducer gets
its own group back. Nothing else changes: the same collective on the same group, the same
tensors, the same result (the chained future returns the collective's own value), and no hook
is registered (DDP's ``register_comm_hook`` cannot be undone, so it is not used).

Private parts of torch used (torch 2.11 and later): ``Reducer._update_process_group``, a Python
subclass of ``torch._C._distributed_c10d.Backend`` registered on a ``ProcessGroup``,
``torch._C._distributed_c10d._create_work_from_future``.
"""

from __future__ import annotations

import sys
import threading
from typing import Any, Callable

import torch
from torch import nn

__all__ = ["is_ddp", "TimedBuckets", "bucket_modules"]


def is_ddp(model: nn.Module) -> bool:
    """Whether ``model`` is a ``DistributedDataParallel`` wrapper (with its reducer)."""
    ddp = sys.modules.get("torch.nn.parallel.distributed")
    return ddp is not None and isinstance(model, ddp.DistributedDataParallel) and hasattr(model, "reducer")


def _backend_class() -> type:
    from torch._C._distributed_c10d import Backend

    class _Timing(Backend):
        """Passes every call to ``inner``; times each all-reduce through ``on_issue``."""

        def __init__(self, inner: Any, on_issue: Callable[[list, Any, Any], Any]):
            super().__init__(inner.rank(), inner.size())
            self.inner = inner
            self.on_issue = on_issue

        def allreduce(self, tensors: list, opts: Any = None) -> Any:
            return self.on_issue(tensors, opts, self.inner)

        def broadcast(self, tensors: list, opts: Any = None) -> Any:  # DDP's bucket rebuild
            return self.inner.broadcast(tensors, opts) if opts is not None else self.inner.broadcast(tensors)

        def allgather(self, outputs: list, inputs: list, opts: Any = None) -> Any:
            return self.inner.allgather(outputs, inputs, opts) if opts is not None else self.inner.allgather(outputs, inputs)

        def barrier(self, opts: Any = None) -> Any:
            return self.inner.barrier(opts) if opts is not None else self.inner.barrier()

        def getBackendName(self) -> str:  # noqa: N802 (torch's name)
            return "fxprof_timing"

    return _Timing


class TimedBuckets:
    """While entered, DDP's all-reduces of ``model`` are timed with ``clock`` (a host clock in
    nanoseconds, readable from any thread). :meth:`take` returns, per all-reduce of floating-point
    gradients since the last call, in the order DDP issued them (bucket 0 first),
    ``(issue start, issue end, completion, elements)``."""

    def __init__(self, model: nn.Module, clock: Callable[[], int]):
        self.model = model
        self.clock = clock
        self._pending: list[list[int]] = []
        self._lock = threading.Lock()
        self._own: Any = None
        #: why the all-reduces could not be timed (this torch lacks a private part used), else ""
        self.unavailable = ""

    def __enter__(self) -> "TimedBuckets":
        import torch.distributed as dist

        own = self.model.process_group
        try:
            wrapper = dist.ProcessGroup(own.rank(), own.size())
            backend = _backend_class()(own, self._issue)
            for device in ("cpu", "cuda"):
                wrapper._register_backend(torch.device(device), dist.ProcessGroup.BackendType.CUSTOM, backend)
            wrapper._set_default_backend(dist.ProcessGroup.BackendType.CUSTOM)
            self.model.reducer._update_process_group(wrapper)
        except (AttributeError, TypeError, RuntimeError) as exc:  # a torch without these private parts: DDP as it is
            self.unavailable = f"{type(exc).__name__}: {exc}"
            return self
        self._own = own
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._own is not None:
            self.model.reducer._update_process_group(self._own)
            self._own = None

    def _issue(self, tensors: list, opts: Any, inner: Any) -> Any:
        from torch._C._distributed_c10d import _create_work_from_future

        t0 = self.clock()
        work = inner.allreduce(tensors, opts) if opts is not None else inner.allreduce(tensors)
        t1 = self.clock()
        if not all(t.is_floating_point() for t in tensors):  # DDP's map of used parameters, not a bucket
            return work
        entry = [t0, t1, 0, sum(t.numel() for t in tensors)]
        with self._lock:
            self._pending.append(entry)

        def done(fut: Any) -> Any:
            entry[2] = self.clock()
            return fut.value()

        return _create_work_from_future(work.get_future().then(done))

    def take(self) -> list[tuple[int, int, int, int]]:
        """The all-reduces issued since the last call (each completed: DDP waited for them)."""
        with self._lock:
            taken, self._pending = self._pending, []
        return [tuple(e) for e in taken if e[2]]  # type: ignore[misc]


def bucket_modules(model: nn.Module) -> list[tuple[int, list[str]]]:
    """Per DDP bucket, in DDP's order: ``(gradient values, the paths of the modules whose parameters
    it holds)``, paths of the wrapped model (``layers.5``), in the bucket's order. Empty where the
    reducer cannot say (``Reducer._get_zeros_like_grad_buckets``, which allocates a zero copy of
    every bucket once)."""
    names = {id(p): n for n, p in model.named_parameters()}
    try:
        buckets = model.reducer._get_zeros_like_grad_buckets()  # type: ignore[union-attr,operator]
    except (AttributeError, RuntimeError):
        return []
    out = []
    for bucket in sorted(buckets, key=lambda b: b.index()):
        paths: list[str] = []
        for p in bucket.parameters():
            name = names.get(id(p), "")
            path = name.rpartition(".")[0]
            path = "" if path == "module" else path[len("module."):] if path.startswith("module.") else path
            if path not in paths:
                paths.append(path)
        out.append((int(bucket.buffer().numel()), paths))
    return out
