"""Symbolic tracing that keeps the user's ``torch.profiler.record_function`` ranges.

Plain ``torch.fx.symbolic_trace`` runs ``record_function.__enter__``/``__exit__`` eagerly while
tracing, so the ranges vanish from the graph. :class:`ProfilerTracer` swaps those two methods
for the duration of ``trace()`` (and only then: they are restored in ``finally``) so that each
range becomes a pair of graph nodes::

    handle = torch.ops.profiler._record_function_enter_new(name, args)
    ...
    torch.ops.profiler._record_function_exit._RecordFunction(handle)

which are exactly the ops ``record_function`` calls when it runs. Both are side-effectful in
torch.fx's eyes, so dead-code elimination keeps them, and running the traced module under
``torch.profiler.profile`` shows the user's ranges as before.

``torch.autocast`` blocks are kept the same way, as ``torch.amp.autocast_mode._enter_autocast``
and ``_exit_autocast`` nodes (what dynamo and export emit), so the region runs in the autocast
dtype instead of float32.
"""

from __future__ import annotations

import contextlib
import threading
from typing import Any, Iterable, Iterator

import torch
from torch import fx, nn

from ...errors import TraceError
from .effects import undone_effects

__all__ = ["ProfilerTracer", "trace", "RANGE_ENTER_TARGETS", "RANGE_EXIT_TARGETS", "EFFECTS"]

#: ``GraphModule.meta`` key: what the trace did that the graph will not repeat, in words
#: (:mod:`fxprof.measure.capture.effects`); empty where the graph runs what the forward does
EFFECTS = "fxprof_trace_effects"

_record_function = torch.autograd.profiler.record_function
_ENTER_OP = torch.ops.profiler._record_function_enter_new
_EXIT_OP = torch.ops.profiler._record_function_exit._RecordFunction

#: node targets that open a record_function range (ours, the legacy op, and the overloads
#: that torch.export emits)
RANGE_ENTER_TARGETS = (
    _ENTER_OP,
    _ENTER_OP.default,
    torch.ops.profiler._record_function_enter,
    torch.ops.profiler._record_function_enter.default,
)
#: node targets that close a record_function range
RANGE_EXIT_TARGETS = (
    _EXIT_OP,
    torch.ops.profiler._record_function_exit,
    torch.ops.profiler._record_function_exit.default,
)

#: torch.autocast and the ops that enter and leave it inside a graph (None if this torch lacks them)
_amp = getattr(torch.amp, "autocast_mode", None)
_ENTER_AUTOCAST = getattr(_amp, "_enter_autocast", None)
_EXIT_AUTOCAST = getattr(_amp, "_exit_autocast", None)
_AUTOCAST = _amp.autocast if _amp is not None and _ENTER_AUTOCAST is not None and _EXIT_AUTOCAST is not None else None

# One trace at a time may patch record_function; others wait.
_PATCH_LOCK = threading.RLock()
_HANDLES = "_fxprof_trace_handles"


class ProfilerTracer(fx.Tracer):
    """An ``fx.Tracer`` that records ``record_function`` ranges as enter/exit nodes.

    Args:
        leaf_modules: modules not to trace into, given as classes (``nn.MultiheadAttention``)
            or qualified names (``"encoder.layer3"``). Torch's own ``nn`` modules are leaves
            already, as with ``symbolic_trace``.
        trace_into: ``torch.nn`` modules to trace inside instead of keeping them as one node,
            given as classes (``nn.TransformerEncoderLayer``) or qualified names; ``"all"``
            traces inside every module. ``leaf_modules`` wins where both name a module.
        past_hooks: module classes traced inside, always, with their forward hooks left out
            (FSDP2's modules: fxprof puts their work in the graph itself).
        **kwargs: passed to ``fx.Tracer``.
    """

    def __init__(self, leaf_modules: Iterable[type | str] = (), trace_into: Iterable[type | str] | str = (),
                 past_hooks: tuple[type, ...] = (), **kwargs: Any):
        super().__init__(**kwargs)
        self._past_hooks = tuple(past_hooks)
        leaf_modules = tuple(leaf_modules)
        self._leaf_types, self._leaf_names = _modules_option("leaf_modules", leaf_modules)
        self._into_all = trace_into == "all"
        self._into_types, self._into_names = _modules_option("trace_into", () if self._into_all else tuple(trace_into))

    def is_leaf_module(self, m: nn.Module, module_qualified_name: str) -> bool:
        if self._past_hooks and isinstance(m, self._past_hooks):
            return False
        if module_qualified_name in self._leaf_names or isinstance(m, self._leaf_types):
            return True
        if self._into_all or module_qualified_name in self._into_names or isinstance(m, self._into_types):
            return False
        return super().is_leaf_module(m, module_qualified_name)

    def call_module(self, m: nn.Module, forward: Any, args: tuple, kwargs: dict) -> Any:
        if not self._in_tracing_thread():
            return forward(*args, **kwargs)  # another thread's call: the module's own __call__, eagerly
        if self._past_hooks and isinstance(m, self._past_hooks):
            forward = m.forward  # the module's own code, not __call__ with its hooks
        return super().call_module(m, forward, args, kwargs)

    def create_arg(self, a: Any) -> Any:
        """fx's, keeping the last value made into a node's argument at the top level: after
        :meth:`trace`, the object the forward returned (:attr:`returned`)."""
        self._arg_depth = getattr(self, "_arg_depth", 0) + 1
        try:
            return super().create_arg(a)
        finally:
            self._arg_depth -= 1
            if not self._arg_depth:
                self.returned = a

    def getattr(self, attr: str, attr_val: Any, parameter_proxy_cache: dict[str, Any]) -> Any:
        if not self._in_tracing_thread():
            return attr_val  # another thread reads the module's real attribute
        return super().getattr(attr, attr_val, parameter_proxy_cache)

    def _in_tracing_thread(self) -> bool:
        return threading.get_ident() == getattr(self, "_tracing_thread", None)

    def trace(self, root: nn.Module | Any, concrete_args: dict[str, Any] | None = None) -> fx.Graph:
        """Trace ``root``. torch.fx patches ``nn.Module.__call__`` and ``__getattr__`` for the
        whole process while it traces; calls from other threads go through :meth:`call_module`
        and :meth:`getattr`, which run them eagerly (a thread serving the same model while a
        session captures it gets tensors, not Proxies, and leaves no node in this graph)."""
        self.stream_switches = 0
        with _PATCH_LOCK, self._keep_record_function(), self._keep_autocast(), self._count_stream_switches():
            self._tracing_thread = threading.get_ident()
            try:
                return super().trace(root, concrete_args)
            finally:
                self._tracing_thread = None

    def _keep_autocast(self) -> contextlib.AbstractContextManager[None]:
        """Record ``torch.autocast`` blocks as ``_enter_autocast``/``_exit_autocast`` nodes (the
        ops dynamo and export put in their graphs). Plain tracing runs ``__enter__`` at trace
        time and leaves nothing, so the region would run, and be timed, in float32."""
        if _AUTOCAST is None:  # pragma: no cover - every supported torch has the ops
            return contextlib.nullcontext()
        return self._context_as_nodes(_AUTOCAST, _ENTER_AUTOCAST, _EXIT_AUTOCAST,
                                      lambda ctx: (ctx.device, ctx.fast_dtype, ctx._enabled, ctx._cache_enabled),
                                      real=lambda ctx: torch._jit_internal.is_scripting())

    def _keep_record_function(self) -> contextlib.AbstractContextManager[None]:
        """Record ``record_function`` ranges as enter/exit nodes (the profiler's own ops)."""
        return self._context_as_nodes(_record_function, _ENTER_OP, _EXIT_OP, lambda rf: (rf.name, rf.args))

    @contextlib.contextmanager
    def _context_as_nodes(self, cls: type, enter_op: Any, exit_op: Any, enter_args: Any,
                          real: Any = lambda ctx: False) -> Iterator[None]:
        """While tracing, a context manager of class ``cls`` becomes two graph nodes,
        ``enter_op(*enter_args(ctx))`` where it is entered and ``exit_op(handle)`` where it is
        left, instead of running once at trace time. The patch is process-wide (class
        attributes): contexts that other threads enter while this one traces, and those
        ``real(ctx)`` says must run, run for real. The decorator form of ``record_function``
        reuses one instance for every call, and a helper may be re-entered while it is open: the
        handles are a stack on the instance, emptied on exit."""
        tracer, tracing_thread = self, threading.get_ident()
        original_enter, original_exit = cls.__enter__, cls.__exit__

        def __enter__(ctx: Any) -> Any:
            if threading.get_ident() != tracing_thread or real(ctx):
                return original_enter(ctx)
            handle = tracer.create_proxy("call_function", enter_op, enter_args(ctx), {})
            ctx.__dict__.setdefault(_HANDLES, []).append(handle)
            return ctx

        def __exit__(ctx: Any, exc_type: Any, exc_value: Any, traceback: Any) -> Any:
            handles = ctx.__dict__.get(_HANDLES)
            if not handles or threading.get_ident() != tracing_thread:  # not one of ours
                return original_exit(ctx, exc_type, exc_value, traceback)
            handle = handles.pop()
            if not handles:
                del ctx.__dict__[_HANDLES]
            tracer.create_proxy("call_function", exit_op, (handle,), {})
            return False

        cls.__enter__, cls.__exit__ = __enter__, __exit__  # type: ignore[method-assign]
        try:
            yield
        finally:
            cls.__enter__, cls.__exit__ = original_enter, original_exit  # type: ignore[method-assign]

    @contextlib.contextmanager
    def _count_stream_switches(self) -> Iterator[None]:
        """Count ``torch.cuda.stream(s)`` blocks entered while tracing: they run at trace time
        and leave no node, so the traced graph issues everything on the current stream."""
        context = getattr(torch.cuda, "StreamContext", None)
        if context is None:
            yield
            return
        original = context.__enter__
        tracer, tracing_thread = self, threading.get_ident()

        def __enter__(ctx: Any) -> Any:
            if threading.get_ident() == tracing_thread and getattr(ctx, "stream", None) is not None:
                tracer.stream_switches += 1
            return original(ctx)

        context.__enter__ = __enter__
        try:
            yield
        finally:
            context.__enter__ = original


def _modules_option(label: str, values: tuple) -> tuple[tuple[type, ...], frozenset[str]]:
    """Split a modules option into (classes, qualified names); refuse anything else."""
    for value in values:
        if not (isinstance(value, str) or (isinstance(value, type) and issubclass(value, nn.Module))):
            raise TypeError(f"{label} takes nn.Module classes or qualified names, got {value!r}")
    return tuple(v for v in values if isinstance(v, type)), frozenset(v for v in values if isinstance(v, str))


def trace(
    model: nn.Module,
    concrete_args: dict[str, Any] | None = None,
    leaf_modules: Iterable[type | str] = (),
    trace_into: Iterable[type | str] | str = (),
    proxy_buffers: bool = False,
    past_hooks: tuple[type, ...] = (),
) -> fx.GraphModule:
    """Symbolically trace ``model`` with :class:`ProfilerTracer`.

    ``proxy_buffers``: trace the model's buffers as graph inputs (``get_attr`` nodes), so that a
    value computed from a buffer is computed in every run and an in-place update of a buffer is
    a node, instead of running once while tracing (fx's default bakes such a value in as a
    ``_tensor_constant``).

    ``past_hooks``: module classes traced into with their forward hooks left out (FSDP2's
    ``FSDPModule``: :mod:`fxprof.measure.capture.fsdp` puts FSDP's work in the graph itself).

    Returns a ``GraphModule`` that shares the model's parameters and buffers and keeps its
    ``record_function`` ranges. The model is left as it was before the trace, whether it
    succeeded or not (:func:`~fxprof.measure.capture.effects.undone_effects`); what the trace did
    that the graph will not repeat is in ``gm.meta[EFFECTS]``. Raises :class:`TraceError` naming
    the cause and the options when ``torch.fx`` cannot trace the model.
    """
    if isinstance(model, fx.GraphModule):
        return model
    if not isinstance(model, nn.Module):
        raise TypeError(f"fxprof.trace takes an nn.Module, got {type(model).__name__}")
    tracer = ProfilerTracer(leaf_modules=leaf_modules, trace_into=trace_into, past_hooks=past_hooks)
    tracer.proxy_buffer_attributes = proxy_buffers
    try:
        # the forward's Python runs once here: what it did beyond tensors is put back and named
        with undone_effects(model) as effects:
            graph = tracer.trace(model, concrete_args=concrete_args)
            effects.returned = getattr(tracer, "returned", None)
            gm = fx.GraphModule(tracer.root, graph, type(model).__name__)
        if tracer.stream_switches:
            gm.meta["fxprof_dropped_stream_switches"] = tracer.stream_switches
        gm.meta[EFFECTS] = list(effects.found)
        return gm
    except Exception as exc:  # torch.fx raises many types (TraceError, TypeError, RuntimeError)
        raise TraceError(
            f"torch.fx could not trace {type(model).__name__}: {type(exc).__name__}: {exc}\n"
            "Symbolic tracing cannot follow Python control flow that depends on tensor values "
            "or iterate over traced values (torch.nn modules traced inside with trace_into often "
            "check shapes that way). Options: mark the offending submodule as a leaf "
            "(leaf_modules=[...]), fix arguments that steer control flow "
            "(concrete_args={...}), or trace the model yourself and pass the GraphModule."
        ) from exc
