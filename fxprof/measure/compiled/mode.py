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
3. **timed runs**, interleaved with unprofiled ones (:func:`interleaved_runs`): each of the
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
import re
import time
import types
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd
import torch
from torch import nn

from ...core.compiled import (
    Kernel,
    Span,
    adopt_replaced,
    charge_by_key,
    charge_spans,
    extern_own_nodes,
    kernel_nodes,
    readable_names,
    strip_graph_prefix,
    unmatched_nodes,
)
from ...core.contention import quiet_runs
from ...core.profile import Profile
from ...errors import TraceError
from ...vocab import COMPILE_MODES, MARKS_TIMER
from ..capture.graph import module_kinds
from ..common.state import preserved_buffers, preserved_rng
from ..common.tree import clone_tensors
from ..device.bridge import Event, profiler_running
from ..device.cupti import refuse_teardown
from ..timing.contention import ContentionMeter
from .breaks import describe_breaks, frame_nodes
from .compiling import (
    RECORD,
    CompiledSession,
    TraceCatcher,
    catch_trace,
    compile_options,
    compiled_forward,
    dynamo_graph_breaks,
    inductor_settings,
    is_compiled,
    is_compiled_function,
    no_graph_message,
    read_compiled,
    read_compiled_forward,
    recursion_limit_kept,
    room_to_compile,
)
from .flops import custom_op_note, kernel_flops, missing_flops_notes
from .loop import interleaved_runs, marked_runs
from .memory import memory_devices, record_memory_run, with_memory
from .profiler_cost import PROFILER_SPAN, calibrate, in_situ
from .reuse import kept_session, remember, reuse_note, settle_first_call
from .spans import CALL_RANGE as _CALL
from .spans import KERNEL_COST, RUN_RANGE, spans_from_events
from .wrapper_timer import MARKS_SOURCE, NotInstrumentable, WrapperTimer, clock_read_ns, not_marked_reason, spans_from_marks, timers_for

if TYPE_CHECKING:
    from ..eager.plan import ProfilePlan

__all__ = ["is_compiled", "compile_options", "profile_compiled", "CompiledSession", "spans_from_events",
           "COMPILE_MODES", "describe_meta", "profile_compiled_model"]

def _pre(post: Any, post_to_pre: dict[str, Any]) -> list[str]:
    """The dynamo nodes of post-grad nodes ``post``, each once, in order."""
    pre: list[str] = []
    for p in post:
        for q in post_to_pre.get(p, []):
            if q not in pre:
                pre.append(q)
    return pre


def _kernels(graph: str, code: str, provenance: dict[str, Any]) -> list[Kernel]:
    """The kernels of one compiled graph, in call order, with their dynamo origins."""
    ranges = {strip_graph_prefix(name): name for name in RECORD.findall(code)}
    kernel_to_post = provenance.get("cppCodeToPost") or provenance.get("triton_kernel_to_post_grad") or {}
    post_to_pre = provenance.get("postToPre") or {}
    out = []
    for key, post in kernel_to_post.items():
        base = key.rsplit(":", 1)[0]
        generated = not (base.startswith("extern_kernels.") or base.startswith("torch.ops.") or "." in base)
        if not generated:  # one library op: not the producers inductor lowered into its input
            post = extern_own_nodes(base, post)
        pre = _pre(post, post_to_pre)
        # an extern op a pattern made (SDPA from eager attention) has no dynamo node: its inputs' nodes
        # let adopt_replaced find the ones it replaced
        inputs = tuple(_pre(kernel_to_post[key], post_to_pre)) if not generated and not pre else ()
        out.append(Kernel(graph=graph, key=key, generated=generated, range_name=ranges.get(base, base if generated else ""),
                          origins=tuple(pre), inputs=inputs))
    out.sort(key=lambda k: int(k.key.rsplit(":", 1)[1]) if re.search(r":\d+$", k.key) else 0)
    return out


def profile_compiled(model: nn.Module, args: tuple, kwargs: dict, compile: Any, warmup: int, iters: int,
                     no_grad: bool, name: str | None, meta_base: dict[str, Any], memory: bool = True) -> Profile:
    """Compile (or take the compiled) ``model``, time its kernels, return a Profile of them."""
    root, described, session, compiled = compiled_program(model, compile)
    on_cuda = any(t.is_cuda for t in [*root.parameters(), *root.buffers()]) or any(
        isinstance(a, torch.Tensor) and a.is_cuda for a in (*args, *kwargs.values()))
    if on_cuda:  # the kernels are CUPTI's there, a profiler cycle per timed run: before anything compiles
        refuse_teardown("compiled mode on a GPU")
    grad = torch.no_grad() if no_grad else contextlib.nullcontext()
    sync = torch.cuda.synchronize if on_cuda else (lambda: None)

    def call(fresh: tuple | None = None) -> Any:
        a, k = fresh if fresh is not None else clone_tensors((args, kwargs))
        return compiled(*a, **k)

    outer = profiler_running()  # the caller's own torch.profiler: no memory run
    with recursion_limit_kept(), room_to_compile(root), preserved_buffers(root), preserved_rng(), inductor_settings(), \
            catch_trace(session.kept.catcher) as caught, grad:
        _, compile_s, compiled_first = first_call(root, session, described, lambda: (call(), sync())[0],
                                                  "profile it eagerly instead")
        caught.phase = "warmup"
        for _ in range(warmup):
            call()
            sync()
        caught.phase = "timed"
        timers, why = marks_for(session, caught, on_cuda, described)
        meter = ContentionMeter()  # what each run lost to other processes (fxprof.core.contention)
        window = meter.start_window()  # and the whole window: the runs, the plain loops, what lay between
        graphs = len(session.order)
        if timers:
            plain, bounds, rows = marked_runs(call, sync, iters, args, kwargs, timers, meter)
            if len(session.order) > graphs:  # compiled during the timed runs: no marks of its own
                described["unmarked_graphs"] = session.order[graphs:]
        else:
            described["kernel_source_reason"] = why
            session.profiler_cost = calibrate(on_cuda)  # the profiler's own cost per event, taken out of the rows
            plain, events, after = interleaved_runs(call, sync, iters, args, kwargs, on_cuda, meter)
            if after:
                described["unprofiled_after_profiler_ms"] = [round(v, 6) for v in after]
        # the window, unless a graph compiled in it (its workers are processes of this run)
        window_lost, window_ms = meter.window_since(window) if len(session.order) == graphs else (float("nan"), float("nan"))
        recorded = record_memory_run(call, sync, lambda: clone_tensors((args, kwargs)), root, memory_devices(root, args, kwargs),
                                     meta_base, RUN_RANGE, outer) if memory else None  # untimed: memory per kernel
        described["recompile_reasons"] = [{"graph": g, "reason": r, "during": p} for g, r, p in caught.recompiles]
    if timers:
        profile = profile_from_marks(root, session, caught, timers, rows, bounds, plain, compile_s, described,
                                     compiled_first, meta_base, name, recorded)
    else:
        profile = profile_from_events(root, session, caught, events, on_cuda, plain, compile_s, described, compiled_first,
                                      meta_base, name, recorded, lost=(meter.lost_ms, meter.own_lost_ms))
    profile.meta = meter.describe(profile.meta, unprofiled_lost_ms=meter.own_lost_ms, window_lost_ms=round(window_lost, 6),
                                  window_ms=round(window_ms, 6))
    return profile


def compiled_program(model: nn.Module, compile: Any = True, forward: Any = None) -> tuple[nn.Module, dict[str, Any], "CompiledSession", Any]:
    """The program to time, for compiled mode and sessions alike: ``(root, described, session,
    compiled)``. ``model`` is an ``OptimizedModule`` (its backend and options kept), a module whose
    forward is compiled in place (``model.forward = torch.compile(model.forward)``: that forward's
    options kept) or an eager module compiled with the ``compile=`` options; ``compiled`` is the
    original module (or the function the forward compiled) compiled again with
    :class:`CompiledSession` in front of the user's backend. ``forward``: the forward the model
    runs, when a session replaced the instance attribute (the user's compiled one, if it is)."""
    if not is_compiled(model) and (is_compiled_function(forward) or compiled_forward(model) is not None):
        # the function itself is compiled again, not the module: the module's __call__ leads to its
        # instance forward (the user's compiled one, or a session's), not to the program
        root, function, backend, described = read_compiled_forward(model, forward)
        described["compiled_forward"] = True
        session = kept_session(root, backend, described["fullgraph"], function=True)  # compiled before: reused
        if session is not None:
            return root, described, session, session.kept.compiled
        session = CompiledSession(root, backend)
        compiled = torch.compile(function, backend=session, dynamic=described["dynamic"], fullgraph=described["fullgraph"])
        remember(session, compiled, TraceCatcher(), described["fullgraph"], function=True)
        return root, described, session, compiled
    if is_compiled(model):
        root, backend, described = read_compiled(model)
    else:
        options = compile_options(compile)
        user = torch.compile(model, **options)
        root, backend, described = read_compiled(user)
        described["mode"] = options.get("mode") or "default"
    session = kept_session(root, backend, described["fullgraph"])  # compiled before in this process: reused
    if session is not None:
        return root, described, session, session.kept.compiled
    session = CompiledSession(root, backend)
    compiled = torch.compile(root, backend=session, dynamic=described["dynamic"], fullgraph=described["fullgraph"])
    remember(session, compiled, TraceCatcher(), described["fullgraph"])
    return root, described, session, compiled


def first_call(root: nn.Module, session: "CompiledSession", described: dict[str, Any], call: Any,
               then: str) -> tuple[Any, float, int]:
    """The first call, which compiles (under fxprof's settings, entered by the caller):
    ``(its output, compile seconds, graphs compiled)``; dynamo's graph breaks of it go to
    ``described["graph_breaks"]``. Raises TraceError when dynamo compiled no graph (``then``:
    what to do instead)."""
    before, graphs_before = dynamo_graph_breaks(), len(session.order)
    t0 = time.perf_counter()
    out = call()
    compile_s = time.perf_counter() - t0
    if not session.order:
        raise TraceError(no_graph_message(root, then))
    after = dynamo_graph_breaks()
    described["graph_breaks"] = None if after is None or before is None else after - before
    return (out, *settle_first_call(session, described, compile_s, graphs_before))  # a reused program compiled nothing


def profile_from_events(root: nn.Module, session: "CompiledSession", caught: TraceCatcher, events: list[Event],
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
    kernels = adopt_replaced(_all_kernels(session, caught), session.nodes)
    profile = _build(root, session, kernels, spans, runs, plain, compile_s, described, compiled_first, meta, name)
    reuse_note(profile)
    return with_memory(profile, recorded, kernels, RUN_RANGE)  # memory per kernel, when recorded


def makes_no_tensor(gm: Any) -> bool:
    """True when none of a dynamo graph's calls makes a tensor (dynamo's ``example_value`` of
    each): such a graph (``torch._C._log_api_usage_once`` alone, torchvision's first line of a
    forward, between two breaks) runs no kernel. Dynamo records the value of every tensor it
    traces; a call that returns None has none recorded."""
    for node in gm.graph.nodes:
        if node.op in ("call_function", "call_method", "call_module") and any(
                isinstance(v, torch.Tensor) for v in torch.utils._pytree.tree_leaves(node.meta.get("example_value"))):
            return False
    return True


def marks_for(session: "CompiledSession", caught: TraceCatcher, on_cuda: bool, described: dict[str, Any],
              have: dict[str, WrapperTimer] | None = None) -> tuple[dict[str, WrapperTimer], str]:
    """The marks' timer of every graph compiled so far (:mod:`fxprof.measure.compiled.wrapper_timer`),
    or ``({}, why)`` where this program cannot be timed by them (torch.profiler times it)."""
    why = not_marked_reason(on_cuda, described)
    if why:
        return {}, why
    try:
        no_tensors = [g for g in session.order if g in session.graphs and makes_no_tensor(session.graphs[g])]
        return timers_for(session.order, caught.files, have, no_tensors), ""
    except NotInstrumentable as exc:
        return {}, f"inductor's generated code could not be marked ({exc})"


def profile_from_marks(root: nn.Module, session: "CompiledSession", caught: TraceCatcher, timers: dict[str, WrapperTimer],
                       rows: list[dict[str, list[list[int]]]], bounds: list[tuple[int, int]], plain: list[float],
                       compile_s: float, described: dict[str, Any], compiled_first: int, meta: dict[str, Any],
                       name: str | None, recorded: Any = None) -> Profile:
    """The profile of the marked runs (:func:`~fxprof.measure.compiled.loop.marked_runs`): each
    kernel call charged to its kernel by its provenance key; compiled mode and sessions alike."""
    session.reported_breaks(caught.breaks)
    session.profiler_cost, session.profiler_ms = None, []
    spans = spans_from_marks(timers, rows, bounds)
    kernels = adopt_replaced(_all_kernels(session, caught), session.nodes)
    described = {**described, "clock_read_ns": round(clock_read_ns(), 1)}
    meta = {**meta, "timer": MARKS_TIMER}
    profile = _build(root, session, kernels, spans, bounds, plain, compile_s, described, compiled_first, meta, name,
                     keyed=True)
    marked = {g + "|" + s.key for g, t in timers.items() for s in t.sites if s.key}
    unseen = [k.key for k in kernels if k.graph in timers and k.graph + "|" + k.key not in marked]
    if unseen:  # inductor's provenance names a kernel whose call the wrapper's parse did not find
        profile.meta.setdefault("notes", []).append(
            f"{len(unseen)} kernel(s) of inductor's provenance had no call site among the marks ({', '.join(unseen[:5])}"
            f"{', ...' if len(unseen) > 5 else ''}): their time is in their graph's overhead row, not in a kernel row")
    unmarked = described.get("unmarked_graphs") or []
    if unmarked:
        profile.meta.setdefault("notes", []).append(
            f"graph(s) {', '.join(unmarked)} compiled during the timed runs (new shapes or failed guards) and had no marks: "
            f"their kernels' time is in the rows around their calls (overhead, graph breaks), not in kernel rows")
    reuse_note(profile)
    return with_memory(profile, recorded, kernels, RUN_RANGE)


def _all_kernels(session: "CompiledSession", caught: TraceCatcher) -> list[Kernel]:
    kernels = [k for g in session.order for k in _kernels(g, caught.code.get(g, ""), caught.provenance.get(g, {}))]
    if not kernels:
        raise TraceError(
            "inductor reported no kernels for this model's compiled graphs (its provenance tracking gave "
            "nothing), so fxprof cannot say what the compiled program runs; profile it eagerly with "
            "capture='dynamo'"
        )
    return kernels


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
def _build(root: nn.Module, session: CompiledSession, kernels: list[Kernel], spans: list[Span], runs: list[tuple[int, int]],
           plain: list[float], compile_s: float, described: dict[str, Any], compiled_first: int, meta: dict[str, Any],
           name: str | None, keyed: bool = False) -> Profile:
    module_types = {p: type(m).__name__ for p, m in root.named_modules() if p}
    kinds = module_kinds(root)
    taken: dict[str, int] = {}
    names = {g: readable_names(list(session.nodes[g].values()), kinds, taken) for g in session.order}
    rows = kernel_nodes(kernels, session.nodes, names, module_types, type(root).__name__)
    spans, framed = [s for s in spans if not s.name.startswith("fxprof::")], [s for s in spans if s.name.startswith("fxprof::")]
    charged, unmatched = charge_by_key(kernels, spans) if keyed else charge_spans(kernels, spans)
    extra, extra_names = unmatched_nodes(unmatched, {r.name for r in rows})
    row_of = {k.graph + "|" + k.key: r.name for k, r in zip(kernels, rows)}
    frame_rows, frame_samples, outside = frame_nodes(session, framed, {r.name for r in rows + extra}, module_types,
                                                     type(root).__name__, marked=keyed)
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
            "kernel_source": MARKS_SOURCE if keyed else "torch.profiler: inductor C++ kernel ranges and extern ops" if not any(
                k.range_name.startswith("triton") for k in kernels) else "torch.profiler: CUPTI device kernels",
        },
    )
    flops_notes = missing_flops_notes(session.flops, session.flops_missing, kernels, rows, lost) + custom_op_note(session.custom_ops)
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
    from ..eager.loop import describe_run
    from ..passes.environment import environment
    from ..timing.timers import tensor_devices

    root = model._orig_mod if is_compiled(model) else model
    inputs = (*args, *kwargs.values())
    devices = tensor_devices([*root.parameters(), *root.buffers(), *inputs])
    from ..capture.base import CaptureNotes

    stub = types.SimpleNamespace(kind="compiled", reason="", notes=CaptureNotes())
    meta = describe_run(root, None, types.SimpleNamespace(name="profiler"), devices, inputs, warmup, iters, no_grad, stub)
    meta.update(env=environment(devices), mode="timed")
    return meta



#: fxprof.profile options that compiled mode does not take (each refused by name when given)
_NOT_COMPILED = ("timer", "concrete_args", "leaf_modules", "capture", "warmup_ms", "backward", "loss_fn", "optimizer",
                 "trace_into", "progress")


def profile_compiled_model(model: nn.Module, args: tuple, kwargs: dict, plan: "ProfilePlan") -> Profile:
    """:func:`fxprof.profile` for a compiled model (an ``OptimizedModule``, or ``compile=``), as
    ``plan`` (:class:`~fxprof.measure.eager.plan.ProfilePlan`) says."""
    from ..common.state import PROFILING

    refused = sorted(plan.given & set(_NOT_COMPILED)) + (["mode"] if plan.mode != "timed" else [])
    if refused:
        raise ValueError(
            f"{', '.join(map(repr, refused))} cannot be used when profiling a compiled model (its kernels are "
            f"timed by torch.profiler in whole timed runs); leave them out, or profile the eager model "
            f"(model._orig_mod) for them"
        )
    compile = plan.compile
    if is_compiled(model) and compile not in (None, False, True):
        raise ValueError("compile= options apply to an eager model; this one is already compiled (its own "
                         "options are kept): leave compile= out")
    PROFILING.acquire()
    try:
        meta = describe_meta(model, args, kwargs, plan.warmup, plan.iters, plan.no_grad)
        return profile_compiled(model, args, kwargs, True if compile in (None, False) else compile, plan.warmup, plan.iters,
                                plan.no_grad, plan.name, meta, plan.memory is not False)
    finally:
        PROFILING.release()
