"""Capturing a model as FX graphs: symbolic tracing, torch.export, or TorchDynamo.

A :class:`Capture` hides how the graphs were obtained. It runs the model once as a profiled
run (:meth:`Capture.run`), or once through an untimed pass (:meth:`Capture.run_pass`), and
describes its nodes (:attr:`Capture.nodes`).

``"symbolic"``  fxprof's :class:`~fxprof.ProfilerTracer` (keeps ``record_function`` ranges);
                one graph of modules and functions. Fails on data-dependent control flow.
``"export"``    ``torch.export.export(...).module()``: one graph of aten ops. Needs the whole
                model to be capturable in one graph.
``"dynamo"``    ``torch.compile`` with fxprof's backend: the model runs as Python, and every
                region between graph breaks arrives as its own graph (``g0``, ``g1``...). Takes
                nearly any model; the Python between graphs is not attributed to nodes (it
                shows as lower coverage).
``"auto"``      symbolic tracing, falling back to dynamo, saying why.
"""

from __future__ import annotations

import inspect
import operator
import re
import warnings
from typing import Any

import torch
from torch import fx, nn

from ...errors import TraceError
from ...vocab import CAPTURES
from ..common.state import preserved_buffers
from ..distributed.fsdp import is_fsdp
from .sdpa import drop_all_true_masks
from .tracer import EFFECTS, trace

__all__ = ["CAPTURES", "Capture", "capture_model", "explain_trace_failure"]
from .base import Capture, GraphCapture, explain_trace_failure, forward_location, where_tracing_stopped
from .dynamo import DynamoCapture
from .fsdp import capture_fsdp
from .tensor_parallel import split_tensor_parallel


# ------------------------------------------------------------------------- entry
def capture_model(
    model: nn.Module,
    args: tuple,
    kwargs: dict,
    capture: str = "auto",
    concrete_args: dict[str, Any] | None = None,
    leaf_modules: Any = (),
    trace_into: Any = (),
    root_hooks_run: bool = False,
    forward: Any = None,
) -> Capture:
    """Capture ``model`` as FX graph(s) by ``capture`` (see the module docstring).

    ``forward``: what ``model(...)`` runs where the caller has put its own ``forward`` on the
    instance (a session): the one it replaced (default: the instance's own, if any).

    ``root_hooks_run``: the caller runs the graph from inside the model's own ``__call__`` (a
    session replaces ``forward``), so the root module's hooks run around it and tracing loses
    none of them."""
    if capture not in CAPTURES:
        raise ValueError(f"unknown capture {capture!r}; choose one of {', '.join(CAPTURES)}")
    if isinstance(model, torch.jit.ScriptModule):
        raise TraceError(
            f"{type(model).__name__} is a TorchScript ScriptModule (from torch.jit.script or torch.jit.trace), and a "
            f"ScriptModule cannot be profiled node by node: TorchScript replaced its Python forward, which every "
            f"capture (symbolic tracing, dynamo, export) needs. Pass the eager nn.Module instead: the model as it "
            f"was before torch.jit.script/trace (a loaded .pt file: build the model class and load its state_dict)."
        )
    captured = _capture(model, args, kwargs, capture, concrete_args, leaf_modules, trace_into, root_hooks_run, forward)
    inlined, note = _nested_compile_notes(model, captured)
    if inlined:
        captured.notes.nested_compile, captured.notes.nested_compile_note = inlined, note
    return captured


def compiled_submodules(model: nn.Module) -> list[str]:
    """Paths of the ``torch.compile``'d submodules of ``model`` (``OptimizedModule`` children)."""
    try:
        from torch._dynamo.eval_frame import OptimizedModule
    except ImportError:  # pragma: no cover - every supported torch has it
        return []
    found: list[str] = []
    for path, module in model.named_modules():
        if path and isinstance(module, OptimizedModule) and not any(path.startswith(f + ".") for f in found):
            found.append(path)
    return found


def _nested_compile_notes(model: nn.Module, captured: Capture) -> tuple[list[str], str]:
    """Say when a compiled submodule was profiled uncompiled: dynamo and export inline it (its
    code's nodes are timed one by one, as eager code), and only a leaf keeps it compiled."""
    if isinstance(model, fx.GraphModule) and captured.kind == "graphmodule":
        return [], ""
    kept = {str(n.target) for n in getattr(getattr(captured, "gm", None), "graph", fx.Graph()).nodes if n.op == "call_module"}
    inlined = [p for p in compiled_submodules(model) if p not in kept]
    if not inlined:
        return [], ""
    listed = ", ".join(inlined)
    return inlined, (
        f"torch.compile'd submodule(s) {listed} profiled uncompiled: capture={captured.kind!r} "
        f"traces through them, so their code is timed node by node as eager code. To time "
        f"them compiled, each as one node: capture='symbolic', leaf_modules={inlined!r}"
    )


def _capture(model: nn.Module, args: tuple, kwargs: dict, capture: str, concrete_args: Any, leaf_modules: Any, trace_into: Any = (),
             root_hooks_run: bool = False, forward: Any = None) -> Capture:
    if isinstance(model, fx.GraphModule) and capture in ("auto", "symbolic"):
        return GraphCapture(model, "graphmodule", "a GraphModule was given: used as is")
    if is_fsdp(model):
        return capture_fsdp(model, args, kwargs, capture, concrete_args, leaf_modules, trace_into)
    own = instance_forward(model, forward)
    if own is not None and capture in ("auto", "symbolic", "export"):
        what = (f"{type(model).__name__}'s forward is set on the instance ({_callable_name(own)}), and that is what "
                f"model(...) runs; {'torch.export' if capture == 'export' else 'symbolic tracing'} would capture the "
                f"class's forward instead, a different program")
        if capture == "auto":
            return DynamoCapture(model, f"{what}; used dynamo, which runs the instance's forward")
        raise TraceError(f"cannot capture {type(model).__name__} with capture={capture!r}: {what}. Use capture='dynamo' "
                         f"(or 'auto'), which runs what model(...) runs, or capture the model before setting its forward.")
    specialised: set[str] = set()
    if capture in ("symbolic", "auto"):
        omitted = specialised_inputs(model, args, kwargs)
        specialised = set(omitted) - set(concrete_args or {})
        concrete_args = {**omitted, **(concrete_args or {})} or None
    if capture == "symbolic":
        return split_tensor_parallel(_symbolic(model, concrete_args, leaf_modules, trace_into=trace_into, specialised=specialised,
                                               warn_hooks=True, root_hooks_run=root_hooks_run, strict=root_hooks_run), args, kwargs)
    if capture == "export":
        return _export(model, args, kwargs)
    if capture == "dynamo":
        return DynamoCapture(model, "asked for")
    try:
        traced = _symbolic(model, concrete_args, leaf_modules, reason="symbolic tracing succeeded", trace_into=trace_into,
                           specialised=specialised, warn_hooks=False)
        effects = trace_effects(traced)
        if effects:  # the program would see the graph in place of its forward's Python
            return DynamoCapture(model, f"a symbolic graph would change what the program sees: {'; '.join(effects)}; "
                                        f"used dynamo, which runs the forward's Python in every call")
        hooks = hooks_symbolic_tracing_loses(model, traced.gm, root_hooks_run)
        if hooks:
            return DynamoCapture(model, f"symbolic tracing would lose {'; '.join(hooks)} (it calls forward directly); "
                                        f"used dynamo, which runs them")
        return split_tensor_parallel(traced, args, kwargs)
    except TraceError as exc:
        cause = explain_trace_failure(exc.__cause__ or exc) or _first_line(exc.__cause__ or exc)
        where = where_tracing_stopped(exc.__cause__ or exc) or forward_location(model)
        at = f" at {where}" if where else ""
        return DynamoCapture(model, f"symbolic tracing failed{at} ({cause}); fell back to dynamo")


def instance_forward(model: nn.Module, forward: Any = None) -> Any:
    """The ``forward`` set on the instance (``model.forward = wrapper``, as accelerate-style
    wrappers do), which ``model(x)`` runs instead of the class's; None when there is none.
    ``forward``: what the model runs, where a session has put its own in the instance's place."""
    if forward is None:
        forward = model.__dict__.get("forward")
    if forward is None or isinstance(model, fx.GraphModule):
        return None
    if getattr(forward, "__self__", None) is model and getattr(forward, "__func__", None) is type(model).forward:
        return None  # m.forward = m.forward: the class's own
    return forward


def specialised_inputs(model: nn.Module, args: tuple, kwargs: dict) -> dict[str, Any]:
    """The class ``forward``'s parameters that symbolic tracing fixes to their values for this
    call (``concrete_args``): left out at a ``None``/number default, or given as ``None`` or a
    bool. Left symbolic, a ``mask=None`` would be a traced value, ``if mask is not None`` would
    take the wrong branch, and the graph would fail on ``None`` (the Hugging Face
    ``attention_mask`` pattern); a bool flag steers control flow. The result is also the
    *call pattern* a session keys its graphs by: a graph serves only calls of its pattern."""
    forward = type(model).forward
    if hasattr(forward, "__wrapped__"):  # a decorated forward: tracing binds the wrapper's (*args, **kwargs)
        return {}
    try:
        signature = inspect.signature(forward.__get__(model))
        bound = signature.bind_partial(*args, **kwargs)
    except (TypeError, ValueError):  # inputs that do not fit are reported when binding them
        return {}
    fixed: dict[str, Any] = {}
    for name, p in signature.parameters.items():
        if p.kind not in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY):
            continue
        if name in bound.arguments:
            value = bound.arguments[name]
            if value is None or isinstance(value, bool):
                fixed[name] = value
        elif p.default is not p.empty and (p.default is None or type(p.default) in (bool, int, float)):
            fixed[name] = p.default
    return fixed


def _drop_default_guards(gm: fx.GraphModule, names: set[str]) -> None:
    """Remove the checks ``concrete_args`` adds for parameters fxprof specialised itself
    (``_assert_is_none(mask_1)``; ``eq`` then ``_assert`` for numbers): fxprof passes exactly
    those defaults, and the checks would be profiled as nodes of the model."""
    from torch.fx._symbolic_trace import _assert_is_none

    graph = gm.graph
    for ph in [n for n in graph.nodes if n.op == "placeholder" and re.sub(r"_\d+$", "", str(n.target)) in names]:
        for user in list(ph.users):
            if user.op == "call_function" and user.target is _assert_is_none and not user.users:
                graph.erase_node(user)
            elif (user.op == "call_function" and user.target is operator.eq and len(user.users) == 1
                  and next(iter(user.users)).target is torch._assert):
                graph.erase_node(next(iter(user.users)))
                graph.erase_node(user)
    gm.recompile()


def _callable_name(fn: Any) -> str:
    return getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or type(fn).__name__


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


def trace_effects(captured: Capture) -> list[str]:
    """What the symbolic trace of ``captured`` did that its graph will not repeat, one phrase
    each (:mod:`fxprof.measure.capture.effects`); empty for any other capture."""
    gm = getattr(captured, "gm", None)
    return list(gm.meta.get(EFFECTS) or []) if captured.kind == "symbolic" and gm is not None else []


def hooks_symbolic_tracing_loses(model: nn.Module, gm: fx.GraphModule, root_hooks_run: bool = False) -> list[str]:
    """Forward hooks and pre-hooks that a symbolic graph of ``model`` does not run, one phrase
    each: the root module's (tracing starts at its ``forward``, past ``__call__``), and those of
    modules traced through (their hooks ran once while tracing: tensor ops they return are in
    the graph, but the hook itself never runs again, so its Python effects are gone). Leaf
    modules are called as modules in every run, hooks included. With ``root_hooks_run`` the
    graph runs inside the root's own ``__call__`` (a session), which runs the root's hooks."""
    if isinstance(model, fx.GraphModule):
        return []
    from torch.nn.modules import module as _module

    leaves = {str(n.target) for n in gm.graph.nodes if n.op == "call_module"}
    traced = {""}
    for node in gm.graph.nodes:
        for value in (node.meta.get("nn_module_stack") or {}).values():
            traced.add(str(value[0] if isinstance(value, (tuple, list)) else value))
    found = []
    global_hooks = len(_module._global_forward_hooks) + len(_module._global_forward_pre_hooks)
    if global_hooks:
        found.append(f"{global_hooks} global module forward hook(s) (register_module_forward_hook) on the root module")
    for path, module in model.named_modules():
        count = len(module._forward_hooks) + len(module._forward_pre_hooks)
        if count and path not in leaves and path in traced and not (root_hooks_run and path == ""):
            where = f"the root module ({type(module).__name__})" if not path else f"{path} ({type(module).__name__})"
            found.append(f"{count} forward hook(s)/pre-hook(s) on {where}")
    return found


def _symbolic(model: nn.Module, concrete_args: Any, leaf_modules: Any, reason: str = "asked for", trace_into: Any = (),
              specialised: set[str] = frozenset(), warn_hooks: bool = True, root_hooks_run: bool = False,  # type: ignore[assignment]
              strict: bool = False) -> GraphCapture:
    """fxprof's symbolic trace of ``model``, its graph made to run what the forward runs
    (buffers live, fixed inputs' guards dropped, attention as eager calls it). Where the graph
    would not repeat what the forward does (:func:`trace_effects`), ``strict`` (a session: the
    program sees every call) refuses it; otherwise a warning names it."""
    try:
        with preserved_buffers(model, report=True) as changed:  # tracing may run buffer updates once
            gm = trace(model, concrete_args=concrete_args, leaf_modules=leaf_modules, trace_into=trace_into)
    except TraceError as exc:
        cause = exc.__cause__ or exc
        words = explain_trace_failure(cause)
        said = f"{words}. ({_first_line(cause)})" if words else f"{_first_line(cause)}."
        where = where_tracing_stopped(cause) or forward_location(model)
        at = f" (tracing stopped at {where})" if where else ""
        raise TraceError(
            f"cannot trace {type(model).__name__} symbolically{at}: {said} Options: capture='dynamo' "
            f"(runs the model as Python and profiles the graphs between the lines tracing cannot "
            f"follow) or capture='auto' (tries symbolic tracing first); mark the submodule that "
            f"does it as a leaf (leaf_modules=[...]); or fix the argument that steers it "
            f"(concrete_args={{...}})."
        ) from cause
    if not isinstance(model, fx.GraphModule) and (changed or _constants(gm)):  # buffer updates run once, values read from buffers baked in
        gm = _buffers_live(model, gm, changed, concrete_args, leaf_modules, trace_into)
    if specialised and not isinstance(model, fx.GraphModule):
        _drop_default_guards(gm, specialised)
    hooks = hooks_symbolic_tracing_loses(model, gm, root_hooks_run) if warn_hooks else []
    if hooks:
        warnings.warn(
            f"fxprof: symbolic tracing does not run {'; '.join(hooks)}: the root's hooks are left out of the graph, "
            f"and a traced-through module's hooks ran once while tracing (tensor ops they return are kept, their "
            f"Python effects are not repeated). capture='dynamo' (or 'auto') runs them in every run.",
            stacklevel=4,
        )
    effects = gm.meta.get(EFFECTS) or []
    if effects and strict:
        raise TraceError(
            f"capture='symbolic' cannot run {type(model).__name__} in a session without changing what the loop sees: "
            f"{'; '.join(effects)}. Use capture='auto' (the default) or capture='dynamo', which run the forward's "
            f"Python in every call.")
    if effects and warn_hooks:
        warnings.warn(f"fxprof: the symbolic graph of {type(model).__name__} leaves out what its forward does beyond "
                      f"tensors: {'; '.join(effects)}. The model was left as it was before tracing; capture='dynamo' "
                      f"(or 'auto') runs the forward's Python in every run.", stacklevel=4)
    drop_all_true_masks(gm)  # attention as the eager model calls it (fxprof.measure.capture.sdpa)
    return GraphCapture(gm, "symbolic", reason)


def _constants(gm: fx.GraphModule) -> int:
    """How many tensors tracing computed once and baked into the graph (``_tensor_constant``)."""
    return sum(1 for n in gm.graph.nodes if n.op == "get_attr" and str(n.target).split(".")[-1].startswith("_tensor_constant"))


def _buffers_live(model: nn.Module, gm: fx.GraphModule, changed: list[str], concrete_args: Any, leaf_modules: Any,
                  trace_into: Any) -> fx.GraphModule:
    """A graph that reads and updates the model's buffers in every run, as the model does.

    fx's default tracing runs a buffer's in-place update (``self.calls.add_(1)``) once, while
    tracing, and bakes a value computed from a buffer (``self.table.mean(0)``) into the graph:
    every run would then return what the buffer held when the model was traced. Traced with
    the buffers as graph inputs, both are nodes. That graph is taken where the first one
    updated a buffer or baked in a value the buffers gave (fewer constants); a forward whose
    buffer updates symbolic tracing cannot record (it reassigns the buffer, say) is refused
    with the reason (``capture='auto'`` then uses dynamo, which runs them)."""
    try:
        with preserved_buffers(model, report=True) as still:
            live = trace(model, concrete_args=concrete_args, leaf_modules=leaf_modules, trace_into=trace_into,
                         proxy_buffers=True)
    except TraceError as exc:
        if not changed:  # the constants may not come from buffers: the first graph stands
            return gm
        reason = _first_line(exc.__cause__ or exc)
        still = changed
    else:
        if not still and (changed or _constants(live) < _constants(gm)):
            return live
        if not changed:
            return gm
        reason = (f"the forward gives the buffer a new tensor (self.{still[0].rsplit('.', 1)[-1]} = ..., or += on it), "
                  f"which a graph cannot record; an in-place method such as .add_(1) can be")
    raise TraceError(
        f"cannot trace {type(model).__name__} symbolically: its forward changes buffer(s) {', '.join(still)}, and "
        f"symbolic tracing cannot record that update ({reason}): it would run once, while tracing, and every timed "
        f"run would leave it out, so the runs would compute something else than the model. Use capture='dynamo' "
        f"(or 'auto'), which runs the update in every run."
    )


def _export(model: nn.Module, args: tuple, kwargs: dict) -> GraphCapture:
    try:
        exported = torch.export.export(model, tuple(args), dict(kwargs) or None)
        gm = exported.module()
    except Exception as exc:
        raise TraceError(explain_export_failure(model, exc)) from exc
    return GraphCapture(gm, "export", "asked for")


def explain_export_failure(model: nn.Module, exc: BaseException) -> str:
    """Why ``torch.export`` failed, in plain words, where in the model, and what to do."""
    text = str(exc)
    name = type(model).__name__
    where = where_tracing_stopped(exc)
    at = f" (at {where})" if where else ""
    cache = re.search(r"Found <class '[\w.]*?(\w*Cache)'> in output", text)
    if cache:
        return (
            f"torch.export could not capture {name}: the model returns a {cache.group(1)} (the "
            f"key/value cache a generating model keeps between calls), which export cannot "
            f"flatten into tensors. Profile it without the cache: pass use_cache=False as a "
            f"model input (fxprof.profile(model, input_ids, use_cache=False, capture='export')) "
            f"or set model.config.use_cache = False; capture='dynamo' also takes it as it is."
        )
    return (
        f"torch.export could not capture {name}{at}: {_first_line(exc)}. Export needs the whole "
        f"model in one graph, with no Python that depends on tensor values; try capture='dynamo', "
        f"which splits the model at such lines and profiles the pieces."
    )
