"""The capture every mode runs: :class:`Capture` (runs a model's graphs once as a profiled run or
an untimed pass, and describes their nodes), :class:`GraphCapture` (one graph: symbolic tracing,
export, a ``GraphModule``), binding inputs to placeholders, and why tracing stopped, in words."""
from __future__ import annotations

import dataclasses
import inspect
import os
import re
import traceback
from typing import Any, Callable

import torch
from torch import fx, nn

from ...core.nodes import NodeInfo
from ...core.profile import Profile
from .graph import describe_graph
from .interpreter import ProfilingInterpreter, Recorder

__all__ = ["Capture", "GraphCapture", "PassFn", "explain_trace_failure", "where_tracing_stopped"]


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
    ("object does not support item assignment",
     "the model writes into a traced value by index (x[i] = ...), which symbolic tracing cannot "
     "record"),
    ("co_varnames is too small",
     "the model's forward is wrapped (a decorator taking *args/**kwargs) in a way symbolic "
     "tracing cannot bind its inputs to"),
    ("maximum recursion depth exceeded",
     "the model nests modules (or calls) deeper than Python's recursion limit lets tracing follow; "
     "raise it before profiling (sys.setrecursionlimit) or flatten the nesting"),
    ("symbolically trace a dynamo-optimized function",
     "the model holds a torch.compile'd submodule, which symbolic tracing cannot enter "
     "(leaf_modules=[its path] keeps it as one node, run compiled)"),
]


def explain_trace_failure(exc: BaseException) -> str:
    """A plain-words cause for a symbolic-tracing failure, or ""."""
    text = str(exc)
    for needle, words in _PLAIN_WORDS:
        if needle in text:
            return words
    return ""


_TORCH_DIR = os.path.dirname(torch.__file__) + os.sep
_FX_DIR = os.path.join(_TORCH_DIR, "fx") + os.sep
HERE = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))) + os.sep  # the fxprof package
# "from user code:\n   File "x.py", line 12, in forward" (dynamo and export errors)
_USER_CODE = re.compile(r'File "([^"]+)", line (\d+), in (\S+)')


def where_tracing_stopped(exc: BaseException) -> str:
    """``file:line in function`` of the model's own code where a capture failed, or "".

    The innermost frame of the traceback outside torch and fxprof (symbolic tracing), or the
    last frame of the "from user code" stack that dynamo and export put in their messages.
    """
    text = str(exc)
    if "from user code" in text:
        frames = _USER_CODE.findall(text.split("from user code", 1)[1])
        frames = [f for f in frames if not f[0].startswith(HERE)]
        if frames:
            file, line, func = frames[-1]
            return f"{_short_path(file)}:{line} in {func}"
    seen: list[traceback.FrameSummary] = []
    current: BaseException | None = exc
    while current is not None and len(seen) < 1000:
        seen.extend(traceback.extract_tb(current.__traceback__))
        current = current.__cause__
    for frame in reversed(seen):
        file = frame.filename or ""
        if file.startswith(HERE) or file.startswith(_TORCH_DIR) or file.startswith("<"):
            continue
        return f"{_short_path(file)}:{frame.lineno} in {frame.name}"
    return ""


def forward_location(model: nn.Module) -> str:
    """``file:line in forward`` of the model's own ``forward`` (where tracing starts), or "":
    for failures inside torch.fx itself, such as a ``forward`` wrapped by a decorator."""
    forward = inspect.unwrap(type(model).forward)
    code = getattr(forward, "__code__", None)
    if code is None:
        return ""
    return f"{_short_path(code.co_filename)}:{code.co_firstlineno} in {forward.__name__}"


def _short_path(file: str) -> str:
    """A file path from its package on (``transformers/models/bert/modeling_bert.py``)."""
    marker = f"site-packages{os.sep}"
    if marker in file:
        return file.split(marker, 1)[1]
    here = os.getcwd() + os.sep
    return file[len(here):] if file.startswith(here) else file


@dataclasses.dataclass
class CaptureNotes:
    """What a capture found, for ``profile.meta``: each field a key declared in
    :mod:`fxprof.core.metakeys`, written only when set."""

    #: paths of torch.compile'd submodules the capture traced through (timed as eager code)
    nested_compile: list[str] | None = None
    #: the note saying so, and what to do
    nested_compile_note: str | None = None
    #: an FSDP2 model's facts (:class:`fxprof.measure.distributed.fsdp.FSDPNotes`), read by fxprof.core.overlap
    fsdp: Any = None

    def add(self, name: str, note: Any) -> None:
        """Set the note ``name`` (a parallel layout's, by its name); an undeclared name is an error."""
        if name not in {f.name for f in dataclasses.fields(self)}:
            raise TypeError(f"no capture note is declared as {name!r}: add it to CaptureNotes and to fxprof/core/metakeys.py")
        setattr(self, name, note)

    def meta(self) -> dict[str, Any]:
        """The notes as the profile's metadata holds them (a typed note through its own ``meta()``)."""
        out: dict[str, Any] = {}
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if value is not None:
                out[field.name] = value.meta() if hasattr(value, "meta") else value
        return out


class Capture:
    """One model, captured. Subclasses say how it runs."""

    kind = "?"

    def __init__(self, reason: str = ""):
        #: why this capture was chosen (filled by ``capture="auto"``)
        self.reason = reason
        #: facts about the capture for ``profile.meta`` (``nested_compile``...)
        self.notes = CaptureNotes()

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

    def run_timed(self, recorder: Recorder, args: tuple, kwargs: dict) -> Any:
        """A run of a session's timed step (a capture timed by other means than ``recorder`` says so here)."""
        return self.run(recorder, args, kwargs)

    def start_timing(self) -> None:
        """Called when the timed runs begin."""

    def readable_names(self, nodes: list[NodeInfo]) -> dict[str, str]:
        """``{name: readable name}`` for the profile's nodes where the capture's own names mean
        nothing to a reader (dynamo's value names); ``{}`` keeps them."""
        return {}

    def run_pass(self, make_pass: PassFn, args: tuple, kwargs: dict) -> dict[str, dict[str, Any]]:
        """One untimed pass (shapes/FLOPs, memory) over every graph; records keyed by node."""
        raise NotImplementedError

    # a session cycle's profile (fxprof.measure.session): the session builds it from the recorder's
    # samples, unless the capture timed its runs by other means (a compiled program's kernels)
    def build(self, meta: dict[str, Any], name: str | None) -> Profile | None:
        """The profile of the session cycle's runs timed since the last build, where the capture
        timed them itself; None (every capture but a compiled program's): the session builds it
        from its recorder's samples."""
        return None

    def can_build_later(self) -> bool:
        """Whether the runs timed since the last build can be taken apart now, from the next
        cycle's, and their profile made later (:meth:`build_later`): a session builds a cycle
        another follows at the next step after the run of cycles, not between them
        (``Session.defer_builds``)."""
        return False

    def build_later(self, name: str | None) -> Callable[[dict[str, Any]], Profile]:
        """:meth:`build` in two parts, where :meth:`can_build_later`: the runs taken now, the
        profile made when the returned function is given the cycle's meta (made then too)."""
        raise NotImplementedError(f"a {self.kind} capture's cycle is built at once (can_build_later() is False)")

    def close(self) -> None:
        """Release what the capture holds (interpreters, graphs) once profiling is over."""


class GraphCapture(Capture):
    """A single GraphModule (symbolic tracing, export, or one the user passed)."""

    def __init__(self, gm: fx.GraphModule, kind: str, reason: str = ""):
        super().__init__(reason)
        self.gm = gm
        self.kind = kind
        # only a graph someone else made may have lost its functions' module stacks
        self._nodes = describe_graph(gm, infer=kind == "graphmodule")
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
        return bind_inputs(self.gm, args, kwargs), {}

    def input_names(self) -> set[str]:
        if self.kind == "export":
            return _signature_names(self.gm)
        return {re.sub(r"_\d+$", "", str(n.target)) for n in self.gm.graph.nodes if n.op == "placeholder"}

    def run(self, recorder: Recorder, args: tuple, kwargs: dict) -> Any:
        if self._interpreter is None or self._interpreter.recorder is not recorder:
            self._interpreter = ProfilingInterpreter(self.gm, recorder=recorder)
        return self._interpreter.run(*args)  # the graph is the whole run: it opens and closes it

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


def bind_inputs(gm: fx.GraphModule, args: tuple, kwargs: dict[str, Any]) -> tuple:
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

