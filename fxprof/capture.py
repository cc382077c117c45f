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

import contextlib
import inspect
import re
import threading
from typing import Any, Callable, Iterator

import torch
from torch import fx, nn

from .errors import TraceError
from .interpreter import ProfilingInterpreter, Recorder
from .nodes import NodeInfo, describe_graph
from .tracer import trace

__all__ = ["CAPTURES", "Capture", "capture_model", "explain_trace_failure"]

CAPTURES = ("auto", "symbolic", "dynamo", "export")

# A pass over one graph: (graph module, graph label, inputs) -> (output, {node: record})
PassFn = Callable[[fx.GraphModule, str, tuple], "tuple[Any, dict[str, dict[str, Any]]]"]

_PLAIN_WORDS = [
    ("cannot be used as inputs to control flow",
     "the model's Python control flow (an if or while) depends on the value of a tensor, which "
     "symbolic tracing cannot know"),
    ("Proxy object cannot be iterated",
     "the model iterates over a traced value (a loop over a tensor or over a list whose length "
     "depends on the input), which symbolic tracing cannot unroll"),
    ("cannot be used as a Python",
     "the model converts a traced tensor to a Python number or bool"),
]


def explain_trace_failure(exc: BaseException) -> str:
    """A plain-words cause for a symbolic-tracing failure, or ""."""
    text = str(exc)
    for needle, words in _PLAIN_WORDS:
        if needle in text:
            return words
    return ""


class Capture:
    """One model, captured. Subclasses say how it runs."""

    kind = "?"

    def __init__(self, reason: str = ""):
        #: why this capture was chosen (filled by ``capture="auto"``)
        self.reason = reason

    @property
    def nodes(self) -> list[NodeInfo]:
        raise NotImplementedError

    def nodes_in(self, recorded: set[str]) -> tuple[list[NodeInfo], str]:
        """The nodes a profile should list, given the node names that have samples, and a
        note on what was left out ("" if nothing)."""
        return self.nodes, ""

    @property
    def module(self) -> nn.Module:
        """What holds the parameters and buffers that the runs use."""
        raise NotImplementedError

    def bind(self, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
        """The inputs as :meth:`run` takes them: ``(positional, keyword)``."""
        return tuple(args), dict(kwargs)

    def input_names(self) -> set[str]:
        """The names of the model's inputs (to catch keywords that are also profile options)."""
        return _signature_names(self.module)

    def run(self, recorder: Recorder, args: tuple, kwargs: dict) -> Any:
        """One profiled run: every node's marks go to ``recorder``."""
        raise NotImplementedError

    def start_timing(self) -> None:
        """Called when the timed runs begin."""

    def run_pass(self, make_pass: PassFn, args: tuple, kwargs: dict) -> dict[str, dict[str, Any]]:
        """One untimed pass (shapes/FLOPs, memory) over every graph; records keyed by node."""
        raise NotImplementedError

    def close(self) -> None:
        """Release what the capture holds (interpreters, graphs) once profiling is over."""


class GraphCapture(Capture):
    """A single GraphModule (symbolic tracing, export, or one the user passed)."""

    def __init__(self, gm: fx.GraphModule, kind: str, reason: str = ""):
        super().__init__(reason)
        self.gm = gm
        self.kind = kind
        self._nodes = describe_graph(gm)
        self._interpreter: ProfilingInterpreter | None = None

    @property
    def nodes(self) -> list[NodeInfo]:
        return self._nodes

    @property
    def module(self) -> nn.Module:
        return self.gm

    def bind(self, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
        # An exported module flattens nested inputs (dicts, tuples of tensors) itself, from
        # its forward's signature; other graphs take one value per placeholder.
        if self.kind == "export":
            return _bind_by_signature(self.gm, args, kwargs), {}
        return _bind_inputs(self.gm, args, kwargs), {}

    def input_names(self) -> set[str]:
        if self.kind == "export":
            return _signature_names(self.gm)
        return {re.sub(r"_\d+$", "", str(n.target)) for n in self.gm.graph.nodes if n.op == "placeholder"}

    def run(self, recorder: Recorder, args: tuple, kwargs: dict) -> Any:
        if self._interpreter is None or self._interpreter.recorder is not recorder:
            self._interpreter = ProfilingInterpreter(self.gm, recorder=recorder)
        with recorder.run():
            return self._interpreter.run(*args)

    def run_pass(self, make_pass: PassFn, args: tuple, kwargs: dict) -> dict[str, dict[str, Any]]:
        return make_pass(self.gm, "", args)[1]

    def close(self) -> None:
        self._interpreter = None


# ----------------------------------------------------------------------- inputs
def _signature_names(module: nn.Module) -> set[str]:
    try:
        return set(inspect.signature(module.forward).parameters)
    except (TypeError, ValueError):
        return set()


def _bind_by_signature(gm: fx.GraphModule, args: tuple, kwargs: dict[str, Any]) -> tuple:
    """Inputs in the positional structure of the module's ``forward`` (an exported module
    flattens nested inputs, dicts and tuples of tensors, itself)."""
    signature = inspect.signature(gm.forward)
    try:
        bound = signature.bind(*args, **kwargs)
    except TypeError as exc:
        raise ValueError(f"the inputs do not fit the model's forward{signature}: {exc}") from exc
    bound.apply_defaults()
    if bound.kwargs:
        raise ValueError(f"keyword-only inputs {', '.join(map(repr, bound.kwargs))} are not supported with capture='export'")
    return tuple(bound.args)


def _bind_inputs(gm: fx.GraphModule, args: tuple, kwargs: dict[str, Any]) -> tuple:
    """Order positional and keyword inputs as the graph's placeholders expect them.

    A ``*args`` placeholder takes every remaining positional input. A placeholder that
    ``concrete_args`` specialised is named with a suffix (``bias`` becomes ``bias_1``); it
    accepts its original keyword too.
    """
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    names = [str(p.target) for p in placeholders]
    positional = list(args)
    remaining = dict(kwargs)
    values: list[Any] = []
    for p in placeholders:
        key = str(p.target)
        if key.startswith("**"):
            values.append(remaining)
            remaining = {}
        elif key.startswith("*"):
            values.extend(positional)
            positional = []
        elif positional:
            values.append(positional.pop(0))
        else:
            original = re.sub(r"_\d+$", "", key)
            if key in remaining:
                values.append(remaining.pop(key))
            elif original != key and original in remaining:
                values.append(remaining.pop(original))
            elif p.args:  # the placeholder's default value
                values.append(p.args[0])
            else:
                raise ValueError(f"missing input {key!r}: the model's inputs are {', '.join(names)}")
    if positional:
        raise ValueError(
            f"the model takes {len(placeholders)} input(s) ({', '.join(names) or 'none'}) "
            f"but {len(args)} positional input(s) were given"
        )
    if remaining:
        raise ValueError(
            f"unexpected keyword input(s) {', '.join(map(repr, remaining))}; the model's inputs "
            f"are {', '.join(names) or 'none'}"
        )
    return tuple(values)


# ------------------------------------------------------------------------ dynamo
class _DynamoSession:
    """What the shared backend dispatches to while one profile() runs."""

    def __init__(self) -> None:
        self.recorder: Recorder | None = None
        self.make_pass: PassFn | None = None
        self.records: dict[str, dict[str, Any]] = {}
        self.labels: dict[int, str] = {}  # id(runner) -> g0, g1... in the order first run
        self.nodes: list[NodeInfo] = []
        self.interpreters: dict[int, ProfilingInterpreter] = {}

    def label(self, runner: "_GraphRunner") -> str:
        key = id(runner)
        if key not in self.labels:
            self.labels[key] = f"g{len(self.labels)}"
            self.nodes.extend(describe_graph(runner.gm, graph=self.labels[key]))
        return self.labels[key]

    def run_graph(self, runner: "_GraphRunner", args: tuple) -> Any:
        label = self.label(runner)
        if self.make_pass is not None:
            out, records = self.make_pass(runner.gm, label, args)
            self.records.update(records)
            return out
        if self.recorder is None:
            return runner.gm(*args)
        interp = self.interpreters.get(id(runner))
        if interp is None or interp.recorder is not self.recorder:
            interp = ProfilingInterpreter(runner.gm, recorder=self.recorder, prefix=f"{label}:")
            self.interpreters[id(runner)] = interp
        return interp.run(*args)


_STATE = threading.local()


class _GraphRunner:
    """What the backend hands to dynamo for one graph: runs it plainly unless a session is on."""

    def __init__(self, gm: fx.GraphModule):
        self.gm = gm

    def __call__(self, *args: Any) -> Any:
        session = getattr(_STATE, "session", None)
        if session is None:
            return self.gm(*args)
        return session.run_graph(self, args)


def fxprof_backend(gm: fx.GraphModule, example_inputs: list) -> Callable[..., Any]:
    """The one torch.compile backend fxprof uses. Being a single object, the graphs dynamo
    compiled for it are reused by later profiles of the same model instead of piling up
    (dynamo stops compiling a function after a few recompiles and would then run it eagerly)."""
    return _GraphRunner(gm)


class DynamoCapture(Capture):
    kind = "dynamo"

    def __init__(self, model: nn.Module, reason: str = ""):
        super().__init__(reason)
        self.model = model
        self.compiled = torch.compile(model, backend=fxprof_backend)
        self.session = _DynamoSession()
        self.timed_from: int | None = None

    @property
    def nodes(self) -> list[NodeInfo]:
        return list(self.session.nodes)

    def nodes_in(self, recorded: set[str]) -> tuple[list[NodeInfo], str]:
        """Only graphs that ran in the timed runs: dynamo may compile a graph, then replace it
        (a recompile, e.g. when it makes shapes dynamic) or take another branch for good."""
        ran = {n.graph for n in self.session.nodes if n.name in recorded}
        kept = [n for n in self.session.nodes if n.graph in ran]
        dropped = sorted({n.graph for n in self.session.nodes} - ran, key=lambda g: int(g[1:]))
        notes = []
        if dropped:
            notes.append(f"graphs compiled but not run in the timed runs, left out: {', '.join(dropped)}")
        if self.timed_from is not None and len(self.session.labels) > self.timed_from:
            new = len(self.session.labels) - self.timed_from
            notes.append(
                f"dynamo recompiled during the timed runs ({new} new graph(s)): those runs' totals "
                f"include compile time; more warm-up, or a model whose Python state dynamo does not "
                f"guard on, avoids it"
            )
        return kept, "; ".join(notes)

    def start_timing(self) -> None:
        """Called when the timed runs begin: graphs first seen after this were recompiles."""
        self.timed_from = len(self.session.labels)

    @property
    def module(self) -> nn.Module:
        return self.model

    @contextlib.contextmanager
    def _active(self) -> Iterator[None]:
        previous = getattr(_STATE, "session", None)
        _STATE.session = self.session
        try:
            yield
        finally:
            _STATE.session = previous

    def run(self, recorder: Recorder, args: tuple, kwargs: dict) -> Any:
        self.session.recorder, self.session.make_pass = recorder, None
        with self._active(), recorder.run():
            out = self.compiled(*args, **kwargs)
        if not self.session.labels:
            raise TraceError(
                "capture='dynamo' captured no graph: torch.compile ran the whole model as plain "
                "Python (nothing to profile). This happens when dynamo gave up on the model "
                "(see torch._dynamo's log) or hit its recompile limit; try capture='symbolic'."
            )
        return out

    def run_pass(self, make_pass: PassFn, args: tuple, kwargs: dict) -> dict[str, dict[str, Any]]:
        self.session.make_pass, self.session.records = make_pass, {}
        try:
            with self._active():
                self.compiled(*args, **kwargs)
        finally:
            self.session.make_pass = None
        return self.session.records

    def close(self) -> None:
        self.session.interpreters.clear()
        self.session.recorder = None


# ------------------------------------------------------------------------- entry
def capture_model(
    model: nn.Module,
    args: tuple,
    kwargs: dict,
    capture: str = "auto",
    concrete_args: dict[str, Any] | None = None,
    leaf_modules: Any = (),
    trace_into: Any = (),
) -> Capture:
    """Capture ``model`` as FX graph(s) by ``capture`` (see the module docstring)."""
    if capture not in CAPTURES:
        raise ValueError(f"unknown capture {capture!r}; choose one of {', '.join(CAPTURES)}")
    if isinstance(model, fx.GraphModule) and capture in ("auto", "symbolic"):
        return GraphCapture(model, "graphmodule", "a GraphModule was given: used as is")
    if capture == "symbolic":
        return _symbolic(model, concrete_args, leaf_modules, trace_into=trace_into)
    if capture == "export":
        return _export(model, args, kwargs)
    if capture == "dynamo":
        return DynamoCapture(model, "asked for")
    try:
        return _symbolic(model, concrete_args, leaf_modules, reason="symbolic tracing succeeded", trace_into=trace_into)
    except TraceError as exc:
        cause = explain_trace_failure(exc.__cause__ or exc) or _first_line(exc.__cause__ or exc)
        return DynamoCapture(model, f"symbolic tracing failed ({cause}); fell back to dynamo")


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


def _symbolic(model: nn.Module, concrete_args: Any, leaf_modules: Any, reason: str = "asked for", trace_into: Any = ()) -> GraphCapture:
    try:
        gm = trace(model, concrete_args=concrete_args, leaf_modules=leaf_modules, trace_into=trace_into)
    except TraceError as exc:
        cause = exc.__cause__ or exc
        words = explain_trace_failure(cause)
        said = f"{words}. ({_first_line(cause)})" if words else f"{_first_line(cause)}."
        raise TraceError(
            f"cannot trace {type(model).__name__} symbolically: {said} Options: capture='dynamo' "
            f"(runs the model as Python and profiles the graphs between the lines tracing cannot "
            f"follow) or capture='auto' (tries symbolic tracing first); mark the submodule that "
            f"does it as a leaf (leaf_modules=[...]); or fix the argument that steers it "
            f"(concrete_args={{...}})."
        ) from cause
    return GraphCapture(gm, "symbolic", reason)


def _export(model: nn.Module, args: tuple, kwargs: dict) -> GraphCapture:
    try:
        exported = torch.export.export(model, tuple(args), dict(kwargs) or None)
        gm = exported.module()
    except Exception as exc:
        raise TraceError(
            f"torch.export could not capture {type(model).__name__}: {_first_line(exc)}. "
            f"Export needs the whole model in one graph; try capture='dynamo', which splits it."
        ) from exc
    return GraphCapture(gm, "export", "asked for")
