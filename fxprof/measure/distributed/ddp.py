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

import contextlib
import sys
import threading
from typing import Any, Callable, Iterator

import torch
from torch import nn

from ...errors import TraceError

__all__ = ["is_ddp", "TimedBuckets", "bucket_modules", "bucket_limit", "bucket_limit_error", "BUCKET_LIMIT_ASSERTION"]

#: the words of torch's bare ``AssertionError`` in dynamo's DDPOptimizer
#: (``torch/_dynamo/backends/distributed.py``) when DDP's bucket cap is below its first bucket's
BUCKET_LIMIT_ASSERTION = "First bucket should be smaller/equal to other buckets"


def is_ddp(model: nn.Module) -> bool:
    """Whether ``model`` is a ``DistributedDataParallel`` wrapper (with its reducer)."""
    ddp = sys.modules.get("torch.nn.parallel.distributed")
    return ddp is not None and isinstance(model, ddp.DistributedDataParallel) and hasattr(model, "reducer")


def _mb(nbytes: float) -> str:
    return f"{nbytes / 2**20:g} MB"


def bucket_limit_error(exc: AssertionError, model: nn.Module) -> TraceError | None:
    """fxprof's words for torch's bare assertion in DDPOptimizer; None for any other assertion."""
    if BUCKET_LIMIT_ASSERTION not in str(exc):
        return None
    ddp = next((m for m in model.modules() if is_ddp(m)), None)
    cap = getattr(ddp, "bucket_bytes_cap", None)
    first = getattr(torch.distributed, "_DEFAULT_FIRST_BUCKET_BYTES", 2**20)
    given = f"DistributedDataParallel(bucket_cap_mb={cap / 2**20:.3g})" if cap else "the DistributedDataParallel model"
    return TraceError(
        f"torch cannot capture {given}: dynamo's DDPOptimizer (torch._dynamo.config.optimize_ddp, on by default), which "
        f"splits the graph at DDP's gradient buckets, needs every bucket at least as large as DDP's first bucket "
        f"({_mb(first)}), and stopped with a bare AssertionError ('{exc}'; it is this error's __cause__). This is "
        f"torch's limit, met wherever dynamo compiles the model (fxprof.profile, fxprof.session, torch.compile). Either "
        f"set torch._dynamo.config.optimize_ddp = False before profiling (dynamo then compiles the model whole, not "
        f"split at its buckets; DDP's all-reduce runs as before), or give DistributedDataParallel a bucket_cap_mb of "
        f"at least {first / 2**20:g}.")


@contextlib.contextmanager
def bucket_limit(model: nn.Module) -> Iterator[None]:
    """Around a call of a dynamo-compiled model: torch's bare ``AssertionError`` for a DDP bucket
    cap below DDP's first bucket (:data:`BUCKET_LIMIT_ASSERTION`) becomes a :class:`TraceError`
    that names the limit and the ways out, the original its ``__cause__``."""
    try:
        yield
    except AssertionError as exc:
        error = bucket_limit_error(exc, model)
        if error is None:
            raise
        raise error from exc


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
