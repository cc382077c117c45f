"""Compiled mode: time the kernels a ``torch.compile``d model runs, charged to its FX nodes.

``fxprof.profile(torch.compile(model), x)`` (or ``compile=True``) profiles the program the user
deploys, not an eager stand-in:

1. **compile** with the user's own backend and options (read from the ``OptimizedModule``:
   mode, options and ``dynamic`` stay as given), through a thin backend of ours that keeps each
   graph dynamo hands over (the eager graph, with its module stacks) before passing it on. While
   fxprof compiles, inductor's config is patched in a context (restored after, also on errors):
   ``cpp.enable_kernel_profile`` (every generated C++ kernel becomes a profiler range),
   ``trace.provenance_tracking_level`` (inductor records which post-grad nodes each kernel
   computes, and which dynamo nodes those came from) and no FX-graph/AOT cache (a cache hit
   generates no code, so no provenance). Inductor's provenance and generated code are read from
   its structured trace (``torch.__trace`` logger; a handler of ours, removed after).
2. **warm up** (the first call compiles: its time is ``meta["compiled"]["compile_s"]``, kept
   out of every run).
3. **timed runs**, interleaved with unprofiled ones (:func:`_interleaved_runs`): each of the
   ``iters`` cycles runs the model once with the profiler off, timed by the host clock (the
   compiled model's own run time, ``unprofiled_ms``, whose median the kernel times are held
   against), once to start the profiler, and once recorded in an ``fxprof::run`` range. Every event
   directly inside a compiled graph's call (``## Call CompiledFxGraph``) is one kernel call: a
   generated kernel's range, or an extern op (``aten::addmm``...); on a GPU, the device
   kernels each launched (correlation ids, as in :mod:`fxprof.measure.device.bridge`). Each is
   charged to its kernel (:func:`fxprof.core.compiled.charge_spans`).

Rows are kernels (see :mod:`fxprof.core.compiled` for the columns). Nothing is left changed:
inductor's config, the loggers and the model (buffers restored as for eager profiles).
"""

from __future__ import annotations

import contextlib
import logging
import re
import sys
import time
import types
import warnings
from typing import Any, Iterator

import numpy as np
import pandas as pd
import torch
from torch import fx, nn

from ...core.compiled import Kernel, Span, charge_spans, kernel_nodes, readable_names, strip_graph_prefix, unmatched_nodes
from ...core.nodes import NodeInfo
from ...core.profile import Profile
from ...errors import TraceError
from ...vocab import COMPILE_MODES
from ..device.bridge import Event, events_from_kineto, kineto_quiet, profiler_running
from .flops import graph_flops, kernel_flops, missing_flops_notes
from .memory import memory_devices, record_memory_run, with_memory
from .reuse import cache_entries, kept_session, remember, reuse_note, settle_first_call
from .spans import CALL_RANGE as _CALL, KERNEL_COST, RUN_RANGE, spans_from_events
from ..capture.dynamo import _Resolver
from ..timing.contention import ContentionMeter, quiet_runs
from .breaks import break_site, describe_breaks, frame_nodes, recompile_reason, reported_site
from ..capture.graph import describe_graph, module_kinds
from .profiler_cost import PROFILER_SPAN, ProfilerCost, calibrate, in_situ
from ..common.state import preserved_buffers
from ..common.tree import clone_tensors

__all__ = ["is_compiled", "compile_options", "profile_compiled", "CompiledSession", "spans_from_events",
           "COMPILE_MODES", "describe_meta", "profile_compiled_model"]

_COMPILE_KEYS = ("mode", "dynamic", "fullgraph", "options", "backend")
_RECORD = re.compile(r'RAIIAtenRecordFunctionHandle\s+\w+\("([^"]+)"')


def is_compiled(model: Any) -> bool:
    """Is ``model`` what ``torch.compile(module)`` returns (an ``OptimizedModule``)?"""
    optimized = getattr(getattr(torch, "_dynamo", None), "eval_frame", None)
    cls = getattr(optimized, "OptimizedModule", None)
    return cls is not None and isinstance(model, cls)


def compile_options(compile: Any) -> dict[str, Any]:
    """``compile=True`` / ``{"mode": ..., "dynamic": ..., "fullgraph": ..., "options": ...}``
    checked, as ``torch.compile`` keywords; raises ValueError/TypeError naming what is wrong."""
    if compile is True:
        return {}
    if not isinstance(compile, dict):
        raise TypeError(f"compile must be True or a dict of torch.compile options ({', '.join(_COMPILE_KEYS)}), got {compile!r}")
    unknown = sorted(set(compile) - set(_COMPILE_KEYS))
    if unknown:
        raise ValueError(f"unknown compile option(s) {', '.join(map(repr, unknown))}; choose from {', '.join(_COMPILE_KEYS)}")
    if compile.get("dynamic", None) not in (None, True, False):
        raise ValueError(f"compile option dynamic must be True, False or None (torch.compile's), got {compile['dynamic']!r}")
    if not isinstance(compile.get("fullgraph", False), bool):
        raise ValueError(f"compile option fullgraph must be True or False, got {compile['fullgraph']!r}")
    options = compile.get("options")
    if options is not None and not (isinstance(options, dict) and all(isinstance(k, str) for k in options)):
        raise ValueError(f"compile option options must be a dict of inductor settings by name "
                         f"(e.g. {{'max_autotune': True}}), got {options!r}")
    mode = compile.get("mode")
    if mode is not None and mode not in COMPILE_MODES:
        raise ValueError(f"unknown compile mode {mode!r}; choose one of {', '.join(COMPILE_MODES)}")
    if compile.get("backend", "inductor") != "inductor":
        raise ValueError(f"compiled mode times inductor's kernels; backend {compile['backend']!r} generates none "
                         f"(profile its graphs eagerly with capture='dynamo')")
    return {k: v for k, v in compile.items() if k != "backend"}


def _innermost_backend(callback: Any) -> Any:
    """The backend a dynamo callback wraps (what ``torch.compile(backend=...)`` was given)."""
    seen = 0
    while hasattr(callback, "_torchdynamo_orig_backend") and seen < 16:
        callback = callback._torchdynamo_orig_backend
        seen += 1
    return callback


def _mode_of(config: dict[str, Any], dynamic: Any) -> str:
    """The torch.compile mode whose options are ``config`` ("default" when none matches)."""
    try:
        from torch._inductor import list_mode_options
    except ImportError:  # pragma: no cover
        return "unknown"
    for mode in COMPILE_MODES[1:]:
        try:
            wanted = list_mode_options(mode, dynamic)
        except Exception:
            continue
        if wanted and all(config.get(k) == v for k, v in wanted.items()):
            return mode
    return "default"


def _read_compiled(optimized: nn.Module) -> tuple[nn.Module, Any, dict[str, Any]]:
    """The original module, the user's backend and what it was compiled with."""
    ctx = getattr(optimized, "dynamo_ctx", None)
    backend = _innermost_backend(getattr(ctx, "callback", None))
    name = getattr(backend, "compiler_name", None) or getattr(backend, "__name__", type(backend).__name__)
    if name != "inductor":
        raise TraceError(
            f"compiled mode times the kernels inductor generates; this model was compiled with backend "
            f"{name!r}, which generates none. Profile its graphs with capture='dynamo' on the original "
            f"module (model._orig_mod), or compile it with the default backend (inductor)."
        )
    config = dict(getattr(backend, "config", {}) or {})
    dynamic = getattr(backend, "dynamic", None)
    described = {
        "backend": "inductor",
        "mode": _mode_of(config, dynamic),
        "options": {k: v for k, v in config.items() if isinstance(v, (bool, int, float, str))},
        "dynamic": dynamic,
        "fullgraph": bool(getattr(ctx, "fullgraph", False)),
    }
    return optimized._orig_mod, backend, described


@contextlib.contextmanager
def _inductor_settings() -> Iterator[None]:
    """Kernel ranges, provenance, no caches: set for fxprof's compile, restored after."""
    from torch._inductor import config as inductor_config

    patches: dict[str, Any] = {"cpp.enable_kernel_profile": True, "fx_graph_cache": False}
    trace = getattr(inductor_config, "trace", None)
    if hasattr(trace, "provenance_tracking_level"):
        patches["trace.provenance_tracking_level"] = 1
    elif hasattr(trace, "provenance_tracking"):
        patches["trace.provenance_tracking"] = True
    else:
        raise TraceError(
            f"compiled mode reads inductor's provenance tracking (which FX nodes each kernel computes), "
            f"which torch {torch.__version__} does not have; upgrade torch, or profile the eager graphs "
            f"with capture='dynamo'"
        )
    with contextlib.ExitStack() as stack:
        stack.enter_context(inductor_config.patch(patches))
        functorch_config = getattr(getattr(torch, "_functorch", None), "config", None)
        if functorch_config is not None and hasattr(functorch_config, "enable_autograd_cache"):
            stack.enter_context(functorch_config.patch({"enable_autograd_cache": False}))
        yield


class _TraceCatcher(logging.Handler):
    """Keeps inductor's generated code and provenance per compiled graph (``"0/0"``) from
    torch's structured trace while installed."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.code: dict[str, str] = {}
        self.provenance: dict[str, dict[str, Any]] = {}
        #: dynamo's recompiles while installed: (graph, reason, phase), phase as set by the caller
        self.recompiles: list[tuple[str, str, str]] = []
        #: dynamo's graph break reports per compile id (where and why, as text)
        self.breaks: dict[str, str] = {}
        self.phase = "compile"

    def emit(self, record: logging.LogRecord) -> None:
        meta = getattr(record, "metadata", None)
        if not isinstance(meta, dict):
            return
        graph = f"{meta.get('frame_id')}/{meta.get('frame_compile_id')}"
        try:
            if "inductor_output_code" in meta:
                self.code[graph] = self.code.get(graph, "") + str(getattr(record, "payload", "") or "")
            artifact = meta.get("artifact")
            if isinstance(artifact, dict) and artifact.get("name") == "dynamo_graph_break_reason":
                self.breaks.setdefault(graph, str(getattr(record, "payload", "") or ""))
            if isinstance(artifact, dict) and artifact.get("name") == "recompile_reasons":
                self.recompiles.append((graph, recompile_reason(getattr(record, "payload", "")), self.phase))
            if isinstance(artifact, dict) and artifact.get("name") == "inductor_provenance_tracking_node_mappings":
                import json

                self.provenance[graph] = json.loads(getattr(record, "payload", "") or "{}")
        except Exception:  # a malformed record costs that graph's provenance, never the run
            pass


@contextlib.contextmanager
def _catch_trace(catcher: _TraceCatcher | None = None) -> Iterator[_TraceCatcher]:
    logger = logging.getLogger("torch.__trace")
    catcher = catcher if catcher is not None else _TraceCatcher()
    logger.addHandler(catcher)
    try:
        yield catcher
    finally:
        logger.removeHandler(catcher)


class CompiledSession:
    """The graphs dynamo compiled for this profile, with what fxprof needs of each."""

    def __init__(self, root: nn.Module, backend: Any):
        self.root = root
        self.backend = backend
        self.paths = {id(m): p for p, m in root.named_modules()}
        self.graphs: dict[str, fx.GraphModule] = {}
        self.nodes: dict[str, dict[str, NodeInfo]] = {}
        self.flops: dict[str, dict[str, int | None]] = {}
        #: per graph whose FLOPs could not be counted: why (its rows' flops are unknown, not 0)
        self.flops_missing: dict[str, str] = {}
        self.order: list[str] = []
        #: per graph: the module path whose ``forward`` dynamo was compiling (its frame's ``self``)
        self.frame_scope: dict[str, str] = {}
        #: per graph that ends in a graph break: where and why (dynamo's ``compile_subgraph_reason``)
        self.breaks: dict[str, Any] = {}
        #: per graph, the median ms a run of each part of its overhead torch's ranges name
        self.overhead_parts: dict[str, dict[str, float]] = {}
        #: the profiler's own cost per event (calibrated before the timed runs), and per run what
        #: was taken out of the rows (ms)
        self.profiler_cost: ProfilerCost | None = None
        self.profiler_ms: list[float] = []

    def __call__(self, gm: fx.GraphModule, example_inputs: list) -> Any:
        graph = _compile_id()
        if graph not in self.graphs:  # dynamo may hand over a graph again under one compile id (a restart)
            self.order.append(graph)
        self.graphs[graph] = gm
        local = self._frame_modules()
        resolver = _Resolver(self.root, local)
        self.nodes[graph] = {n.name: n for n in describe_graph(gm, graph=graph, prefix="", resolve=resolver, infer=False,
                                                               frame_scope=local.get("self", ""))}
        self.frame_scope[graph] = local.get("self", "")
        site = break_site(graph, gm, self.root, self.frame_scope[graph], self.nodes[graph])
        if site is not None:
            self.breaks[graph] = site
        self.flops[graph], why = graph_flops(gm, example_inputs)
        if why:
            self.flops_missing[graph] = why
        return self.backend(gm, example_inputs)

    def reported_breaks(self, reports: dict[str, str]) -> None:
        """Break sites of the frames dynamo compiled to no graph (nothing before the break: no
        backend call, so no ``compile_subgraph_reason``), from its graph break reports."""
        for graph, text in reports.items():
            if graph not in self.graphs and graph not in self.breaks:
                site = reported_site(graph, text, self.root)
                if site is not None:
                    self.breaks[graph] = site

    def _frame_modules(self) -> dict[str, str]:
        """The model paths of the modules local to the frame dynamo is compiling (its ``self``
        above all): a graph's module paths (``L['self'].fc``) are relative to them, which
        matters for a graph after a break inside a block. Dynamo's frame conversion holds
        that frame in a local named ``frame``."""
        frame = sys._getframe(1)
        while frame is not None:
            candidate = frame.f_locals.get("frame")
            f_locals = getattr(candidate, "f_locals", None)
            if isinstance(f_locals, dict):
                found = {n: self.paths[id(v)] for n, v in f_locals.items() if isinstance(v, nn.Module) and id(v) in self.paths}
                if found:
                    return found
            frame = frame.f_back
        return {"self": ""}


@contextlib.contextmanager
def _recursion_limit_kept() -> Iterator[None]:
    """Inductor raises Python's recursion limit for good when it compiles (to 2000); fxprof's
    compile puts it back afterwards, so profiling leaves the process as it found it."""
    limit = sys.getrecursionlimit()
    try:
        yield
    finally:
        sys.setrecursionlimit(limit)


def _held_entries(root: nn.Module) -> int:
    """How many compiled versions dynamo already holds for ``root``'s ``forward`` in this process
    (every ``torch.compile`` of a model of this class with any backend, every fxprof profile)."""
    return len(cache_entries(root))


@contextlib.contextmanager
def room_to_compile(root: nn.Module) -> Iterator[None]:
    """Dynamo's recompile limits raised, while fxprof compiles and runs, by the compiled versions
    ``root``'s ``forward`` already holds. Dynamo counts every version of a code object against
    ``torch._dynamo.config.recompile_limit`` (8), whatever backend made it, so a model profiled
    late in a process (its class compiled before by the user, by other profiles, by eager
    dynamo captures) got fxprof's compile refused: dynamo ran the model as plain Python and
    compiled mode had no graph (issue 31 g). Those versions can never serve fxprof's backend;
    its compile is a first compile, not a recompile. Restored after (also on errors)."""
    held = _held_entries(root)
    config = getattr(getattr(torch, "_dynamo", None), "config", None)
    if not held or config is None or not hasattr(config, "recompile_limit"):
        yield
        return
    patches = {"recompile_limit": config.recompile_limit + held}
    if hasattr(config, "accumulated_recompile_limit"):
        patches["accumulated_recompile_limit"] = config.accumulated_recompile_limit + held
    with config.patch(patches):
        yield


def no_graph_message(root: nn.Module, then: str) -> str:
    """Why compiled mode has nothing to time, when dynamo compiled no graph of ``root``."""
    held = _held_entries(root)
    limit = getattr(getattr(getattr(torch, "_dynamo", None), "config", None), "recompile_limit", None)
    why = (f"; dynamo holds {held} compiled versions of {type(root).__name__}.forward in this process (its recompile "
           f"limit is {limit}): torch._dynamo.reset() clears them" if limit and held >= limit else
           " (is its forward disabled for dynamo, or torch.compiler.set_stance('force_eager') in effect?)")
    return f"torch.compile compiled no graph of this model: dynamo ran it as plain Python{why}. There are no kernels to time; {then}"


def _dynamo_graph_breaks() -> int | None:
    """Dynamo's running count of graph breaks (``torch._dynamo.utils.counters``), or None."""
    try:
        from torch._dynamo.utils import counters

        return int(sum(counters["graph_break"].values()))
    except Exception:  # pragma: no cover - a release without the counter
        return None


def _compile_id() -> str:
    try:
        cid = torch._guards.CompileContext.current_compile_id()
        return f"{cid.frame_id}/{cid.frame_compile_id}"
    except Exception:  # pragma: no cover - releases without compile ids
        return "0/0"


def _kernels(graph: str, code: str, provenance: dict[str, Any]) -> list[Kernel]:
    """The kernels of one compiled graph, in call order, with their dynamo origins."""
    ranges = {strip_graph_prefix(name): name for name in _RECORD.findall(code)}
    kernel_to_post = provenance.get("cppCodeToPost") or provenance.get("triton_kernel_to_post_grad") or {}
    post_to_pre = provenance.get("postToPre") or {}
    out = []
    for key, post in kernel_to_post.items():
        base = key.rsplit(":", 1)[0]
        generated = not (base.startswith("extern_kernels.") or base.startswith("torch.ops.") or "." in base)
        pre: list[str] = []
        for p in post:
            for q in post_to_pre.get(p, []):
                if q not in pre:
                    pre.append(q)
        out.append(Kernel(graph=graph, key=key, generated=generated, range_name=ranges.get(base, base if generated else ""),
                          origins=tuple(pre)))
    out.sort(key=lambda k: int(k.key.rsplit(":", 1)[1]) if re.search(r":\d+$", k.key) else 0)
    return out


def profile_compiled(model: nn.Module, args: tuple, kwargs: dict, compile: Any, warmup: int, iters: int,
                     no_grad: bool, name: str | None, meta_base: dict[str, Any], memory: bool = True) -> Profile:
    """Compile (or take the compiled) ``model``, time its kernels, return a Profile of them."""
    root, described, session, compiled = compiled_program(model, compile)
    on_cuda = any(t.is_cuda for t in [*root.parameters(), *root.buffers()]) or any(
        isinstance(a, torch.Tensor) and a.is_cuda for a in (*args, *kwargs.values()))
    grad = torch.no_grad() if no_grad else contextlib.nullcontext()
    sync = torch.cuda.synchronize if on_cuda else (lambda: None)

    def call(fresh: tuple | None = None) -> Any:
        a, k = fresh if fresh is not None else clone_tensors((args, kwargs))
        return compiled(*a, **k)

    outer = profiler_running()  # the caller's own torch.profiler: no memory run
    with _recursion_limit_kept(), room_to_compile(root), preserved_buffers(root), _inductor_settings(), \
            _catch_trace(session.kept.catcher) as caught, grad:
        _, compile_s, compiled_first = first_call(root, session, described, lambda: (call(), sync())[0],
                                                  "profile it eagerly instead")
        caught.phase = "warmup"
        for _ in range(warmup):
            call()
            sync()
        caught.phase = "timed"
        session.profiler_cost = calibrate(on_cuda)  # the profiler's own cost per event, taken out of the rows
        meter = ContentionMeter()  # what each run lost to other processes (fxprof.core.contention)
        plain, events = _interleaved_runs(call, sync, iters, args, kwargs, on_cuda, meter)
        recorded = record_memory_run(call, sync, lambda: clone_tensors((args, kwargs)), root, memory_devices(root, args, kwargs),
                                     meta_base, RUN_RANGE, outer) if memory else None  # untimed: memory per kernel
        described["recompile_reasons"] = [{"graph": g, "reason": r, "during": p} for g, r, p in caught.recompiles]
    profile = profile_from_events(root, session, caught, events, on_cuda, plain, compile_s, described, compiled_first,
                                  meta_base, name, recorded, lost=(meter.lost_ms, meter.own_lost_ms))
    profile.meta = meter.describe(profile.meta, unprofiled_lost_ms=meter.own_lost_ms)
    return profile


def compiled_program(model: nn.Module, compile: Any = True) -> tuple[nn.Module, dict[str, Any], "CompiledSession", Any]:
    """The program to time, for compiled mode and sessions alike: ``(root, described, session,
    compiled)``. ``model`` is an ``OptimizedModule`` (its backend and options kept) or an eager
    module compiled with the ``compile=`` options; ``compiled`` is the original module compiled
    again with :class:`CompiledSession` in front of the user's backend."""
    if is_compiled(model):
        root, backend, described = _read_compiled(model)
    else:
        options = compile_options(compile)
        user = torch.compile(model, **options)
        root, backend, described = _read_compiled(user)
        described["mode"] = options.get("mode") or "default"
    session = kept_session(root, backend, described["fullgraph"])  # compiled before in this process: reused
    if session is not None:
        return root, described, session, session.kept.compiled
    session = CompiledSession(root, backend)
    compiled = torch.compile(root, backend=session, dynamic=described["dynamic"], fullgraph=described["fullgraph"])
    remember(session, compiled, _TraceCatcher(), described["fullgraph"])
    return root, described, session, compiled


def first_call(root: nn.Module, session: "CompiledSession", described: dict[str, Any], call: Any,
               then: str) -> tuple[Any, float, int]:
    """The first call, which compiles (under fxprof's settings, entered by the caller):
    ``(its output, compile seconds, graphs compiled)``; dynamo's graph breaks of it go to
    ``described["graph_breaks"]``. Raises TraceError when dynamo compiled no graph (``then``:
    what to do instead)."""
    before, graphs_before = _dynamo_graph_breaks(), len(session.order)
    t0 = time.perf_counter()
    out = call()
    compile_s = time.perf_counter() - t0
    if not session.order:
        raise TraceError(no_graph_message(root, then))
    after = _dynamo_graph_breaks()
    described["graph_breaks"] = None if after is None or before is None else after - before
    return (out, *settle_first_call(session, described, compile_s, graphs_before))  # a reused program compiled nothing


def profile_from_events(root: nn.Module, session: "CompiledSession", caught: _TraceCatcher, events: list[Event],
                        on_cuda: bool, plain: list[float], compile_s: float, described: dict[str, Any],
                        compiled_first: int, meta: dict[str, Any], name: str | None, recorded: Any = None,
                        lost: tuple[list[float], list[float]] | None = None) -> Profile:
    """The profile of the recorded runs (``fxprof::run`` ranges in ``events``): kernels from
    inductor's code and provenance (``caught``), break sites dynamo reported for frames without
    a graph, spans with the profiler's own cost taken out; compiled mode and sessions alike."""
    session.reported_breaks(caught.breaks)
    spans, runs = spans_from_events(events, device=on_cuda, cost=session.profiler_cost)
    if plain and not on_cuda and session.profiler_cost is not None:  # the event's cost in this model's runs
        nested, framed = _taken_per_run(spans)
        profiled, yardstick = [(r1 - r0) / 1e6 for r0, r1 in runs], plain
        if lost is not None:  # the profiler's cost from runs that had the CPU to themselves (fxprof.core.contention)
            profiled, framed, nested = quiet_runs(lost[0], profiled, framed, nested)
            yardstick, = quiet_runs(lost[1], plain)
        scaled = in_situ(session.profiler_cost, profiled, yardstick, framed, nested)
        if scaled != session.profiler_cost:
            session.profiler_cost = scaled
            if scaled.scale != 1.0 or scaled.nested_scale != 1.0:
                spans, runs = spans_from_events(events, device=on_cuda, cost=scaled)
    if not spans:
        raise TraceError(
            f"torch.profiler recorded no kernel call inside the compiled graphs' calls ('{_CALL} ...' ranges) in "
            f"{len(runs)} run(s): torch {torch.__version__} may name those ranges differently. Nothing to charge; "
            f"profile the eager graphs with capture='dynamo'"
        )
    kernels = [k for g in session.order for k in _kernels(g, caught.code.get(g, ""), caught.provenance.get(g, {}))]
    if not kernels:
        raise TraceError(
            "inductor reported no kernels for this model's compiled graphs (its provenance tracking gave "
            "nothing), so fxprof cannot say what the compiled program runs; profile it eagerly with "
            "capture='dynamo'"
        )
    profile = _build(root, session, kernels, spans, runs, plain, compile_s, described, compiled_first, meta, name)
    reuse_note(profile)
    return with_memory(profile, recorded, kernels, RUN_RANGE)  # memory per kernel, when recorded


def _taken_per_run(spans: list[Span]) -> tuple[list[float], list[float]]:
    """What the profiler's cost per event took out of each run's rows (ms): ``(nested in kernel
    spans, outside the kernels)``."""
    nested: dict[int, float] = {}
    framed: dict[int, float] = {}
    for s in spans:
        if s.name == PROFILER_SPAN:
            into = nested if s.graph == KERNEL_COST else framed
            into[s.run] = into.get(s.run, 0.0) + s.duration_ms
    runs = sorted(set(nested) | set(framed))
    return [nested.get(r, 0.0) for r in runs], [framed.get(r, 0.0) for r in runs]


#: untimed calls before each timed one (unprofiled and profiled) in compiled mode's cycles: the first
#: calls after torch.profiler stops or starts run cold (its trace processing evicts the model's data
#: and code from the caches): on a 0.04 ms compiled model (2 Linears, 1 thread) the first call after
#: the profiler stopped took 0.11 ms, the third 0.04 ms, as in a loop without the profiler; the
#: first recorded call 0.14 ms, the fourth 0.07 ms (docs/performance.md section 11)
SETTLE_CALLS = 2
#: at least this many unprofiled runs (the compiled model's own run time)
PLAIN_RUNS_MIN = 6


def run_range() -> Any:
    """The ``fxprof::run`` range around a timed run: ``_RecordFunctionFast`` (C++ enter and exit,
    about 1 us under the profiler) where torch has it. ``torch.profiler.record_function`` put
    10-25 us of its own Python inside every run (its exit resolves
    ``torch.ops.profiler._record_function_exit`` before the range ends): the largest part of
    the ``compiled_entry`` row of a toy model."""
    fast = getattr(getattr(torch._C, "_profiler", None), "_RecordFunctionFast", None)
    if fast is None:  # pragma: no cover - an old release
        from torch.profiler import record_function

        return record_function(RUN_RANGE)
    return fast(RUN_RANGE)


def _plain_loop(call: Any, sync: Any, runs: int, args: tuple, kwargs: dict, meter: ContentionMeter, into: list[float],
                lost: list[float]) -> None:
    """``runs`` calls of the compiled model back to back with no profiler alive, after
    :data:`SETTLE_CALLS` untimed ones: the compiled model's own run time as a plain loop of the
    user's sees it, into ``into`` (ms), what each lost to other processes into ``lost``."""
    for _ in range(SETTLE_CALLS):
        call()
    sync()
    for _ in range(runs):
        fresh = clone_tensors((args, kwargs))

        def timed() -> None:
            t0 = time.perf_counter_ns()
            call(fresh)
            sync()
            into.append((time.perf_counter_ns() - t0) / 1e6)

        meter.around(timed, into=lost)


def _interleaved_runs(call: Any, sync: Any, iters: int, args: tuple, kwargs: dict, on_cuda: bool,
                      meter: ContentionMeter | None = None) -> tuple[list[float], list[Event]]:
    """The unprofiled runs and ``iters`` profiled cycles on ``torch.profiler``'s own schedule
    (wait 1, warm-up 1, active 1): the warm-up call lets the profiler start; while active,
    :data:`SETTLE_CALLS` calls outside every run, then the run, in an ``fxprof::run`` range.

    The unprofiled runs (the compiled model's own run time) are a plain loop, half before the
    profiler is created and half after it is gone (:func:`_plain_loop`): taken between the
    profiler's cycles they read 8-21% slower than the same model in a loop of the user's (the
    profiler's start, stop and trace processing leave the model's code and data cold beyond
    what settling calls warm again; docs/performance.md). ``meter`` keeps what each run, profiled
    and unprofiled, lost to other processes (``lost_ms``; ``meter.own`` for the unprofiled).
    Returns the unprofiled times (ms) and the events."""
    from torch.profiler import ProfilerActivity, profile, schedule

    meter = meter if meter is not None else ContentionMeter()
    events: list[Event] = []
    plain: list[float] = []
    plain_lost: list[float] = []
    half = max(PLAIN_RUNS_MIN, iters) // 2
    _plain_loop(call, sync, half, args, kwargs, meter, plain, plain_lost)

    def collect(done: Any) -> None:
        events.extend(events_from_kineto(done.profiler.kineto_results.events()))

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if on_cuda else [])
    quiet = warnings.catch_warnings()  # each cycle's events are collected: its note about clearing them is moot
    quiet.__enter__()
    warnings.filterwarnings("ignore", message=".*Profiler clears events at the end of each cycle")
    try:
        prof = profile(activities=activities, schedule=schedule(wait=1, warmup=1, active=1, repeat=iters),
                       on_trace_ready=collect)
        with kineto_quiet():
            prof.__enter__()
    except BaseException:
        quiet.__exit__(None, None, None)
        raise
    try:
        for _ in range(iters):
            call()  # the wait step: the profiler is off
            sync()
            with kineto_quiet():
                prof.step()  # -> warm-up: the profiler starts
            call()
            sync()
            with kineto_quiet():
                prof.step()  # -> active
            for _ in range(SETTLE_CALLS):  # recorded, outside every run: the first calls after the start run cold
                call()
            sync()
            fresh = clone_tensors((args, kwargs))  # outside the run's range

            def run() -> None:
                with run_range():
                    call(fresh)
                    sync()

            meter.around(run)
            with kineto_quiet():
                prof.step()  # the cycle's events reach collect()
    finally:
        with kineto_quiet():
            prof.__exit__(None, None, None)
        quiet.__exit__(None, None, None)
    _plain_loop(call, sync, max(PLAIN_RUNS_MIN, iters) - half, args, kwargs, meter, plain, plain_lost)
    meter.own_lost_ms = plain_lost
    return plain, events


def _build(root: nn.Module, session: CompiledSession, kernels: list[Kernel], spans: list[Span], runs: list[tuple[int, int]],
           plain: list[float], compile_s: float, described: dict[str, Any], compiled_first: int, meta: dict[str, Any],
           name: str | None) -> Profile:
    module_types = {p: type(m).__name__ for p, m in root.named_modules() if p}
    kinds = module_kinds(root)
    taken: dict[str, int] = {}
    names = {g: readable_names(list(session.nodes[g].values()), kinds, taken) for g in session.order}
    rows = kernel_nodes(kernels, session.nodes, names, module_types, type(root).__name__)
    spans, framed = [s for s in spans if not s.name.startswith("fxprof::")], [s for s in spans if s.name.startswith("fxprof::")]
    charged, unmatched = charge_spans(kernels, spans)
    extra, extra_names = unmatched_nodes(unmatched, {r.name for r in rows})
    row_of = {k.graph + "|" + k.key: r.name for k, r in zip(kernels, rows)}
    frame_rows, frame_samples, outside = frame_nodes(session, framed, {r.name for r in rows + extra}, module_types,
                                                     type(root).__name__)
    nodes = rows + extra + frame_rows
    samples = [(row_of[key], s) for key, s in charged] + [(extra_names[(s.graph, s.name)], s) for s in unmatched] + frame_samples
    frame = pd.DataFrame({
        "node": [n for n, _ in samples],
        "run": np.asarray([s.run for _, s in samples], dtype=np.int64),
        "time_ms": [s.duration_ms for _, s in samples],
        "host_ms": [s.duration_ms for _, s in samples],
        "start_ms": [s.start_ms for _, s in samples],
        "host_start_ms": [s.start_ms for _, s in samples],
    })
    totals = [(r1 - r0) / 1e6 for r0, r1 in runs]
    run_frame = pd.DataFrame({
        "run": np.arange(len(runs), dtype=np.int64),
        "total_ms": totals,
        "host_ms": totals,
        "start_ms": [(r0 - runs[0][0]) / 1e6 for r0, _ in runs] if runs else [],
    })
    per_row, lost = kernel_flops(kernels, rows, session.flops)
    anatomy = {row: {"flops": f} for row, f in per_row.items()}
    frames = [g.split("/")[0] for g in session.order]
    meta = dict(meta)
    meta.update(
        model=name or type(root).__name__,
        capture="compiled",
        capture_reason="",
        compiled={
            **described,
            "torch": torch.__version__,
            "compile_s": round(compile_s, 3),
            "graphs": len(session.order),
            # dynamo's own count of the breaks in the first call; each splits the frames that
            # hold it, so graphs - 1 can be more (a break inside a block splits its caller too)
            "graph_breaks": described["graph_breaks"] if described.get("graph_breaks") is not None
            else max(0, len(set(frames[:compiled_first])) - 1),
            # a frame compiled again (guards failed, or new shapes)
            "recompiles": len(frames) - len(set(frames)),
            "kernels": len(kernels),
            # each unprofiled run, in order; their median is derived (fxprof.core.compiled.own_run_ms)
            "unprofiled_ms": [round(v, 6) for v in plain],
            "kernel_source": "torch.profiler: inductor C++ kernel ranges and extern ops" if not any(
                k.range_name.startswith("triton") for k in kernels) else "torch.profiler: CUPTI device kernels",
        },
    )
    flops_notes = missing_flops_notes(session.flops, session.flops_missing, kernels, rows, lost)
    if flops_notes:
        meta.setdefault("notes", []).extend(flops_notes)
    if unmatched:
        meta.setdefault("notes", []).append(
            f"{len(extra)} kind(s) of profiler event inside compiled graphs matched no kernel of inductor's code: "
            f"kept as 'unmatched' rows")
    profile = Profile(nodes, frame, run_frame, meta, anatomy)
    describe_breaks(profile, session, outside)
    return profile


def describe_meta(model: nn.Module, args: tuple, kwargs: dict, warmup: int, iters: int, no_grad: bool) -> dict[str, Any]:
    """The run's description, as :func:`fxprof.measure.eager.loop.describe_run` gives eager profiles."""
    from ..passes.environment import environment
    from ..eager.loop import describe_run
    from ..timing.timers import tensor_devices

    root = model._orig_mod if is_compiled(model) else model
    inputs = (*args, *kwargs.values())
    devices = tensor_devices([*root.parameters(), *root.buffers(), *inputs])
    stub = types.SimpleNamespace(kind="compiled", reason="", notes={})
    meta = describe_run(root, None, types.SimpleNamespace(name="profiler"), devices, inputs, warmup, iters, no_grad, stub)
    meta.update(env=environment(devices), mode="timed")
    return meta



#: fxprof.profile options that compiled mode does not take (each refused by name when given)
_NOT_COMPILED = ("timer", "concrete_args", "leaf_modules", "capture", "warmup_ms", "backward", "loss_fn", "optimizer",
                 "trace_into", "progress")


def profile_compiled_model(model: nn.Module, args: tuple, kwargs: dict, compile: Any, explicit: set[str], mode: str,
                           warmup: int, iters: int, no_grad: bool, name: str | None, memory: bool = True) -> Profile:
    """:func:`fxprof.profile` for a compiled model (an ``OptimizedModule``, or ``compile=``)."""
    from ..common.state import PROFILING

    refused = sorted(explicit & set(_NOT_COMPILED)) + (["mode"] if mode != "timed" else [])
    if refused:
        raise ValueError(
            f"{', '.join(map(repr, refused))} cannot be used when profiling a compiled model (its kernels are "
            f"timed by torch.profiler in whole timed runs); leave them out, or profile the eager model "
            f"(model._orig_mod) for them"
        )
    if is_compiled(model) and compile not in (None, False, True):
        raise ValueError("compile= options apply to an eager model; this one is already compiled (its own "
                         "options are kept): leave compile= out")
    PROFILING.acquire()
    try:
        meta = describe_meta(model, args, kwargs, warmup, iters, no_grad)
        return profile_compiled(model, args, kwargs, True if compile in (None, False) else compile, warmup, iters,
                                no_grad, name, meta, memory)
    finally:
        PROFILING.release()
