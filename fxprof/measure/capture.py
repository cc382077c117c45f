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
import operator
import os
import re
import sys
import traceback
import warnings
from typing import Any, Callable

import torch
from torch import fx, nn

from ..errors import TraceError
from .interpreter import ProfilingInterpreter, Recorder
from ..core.nodes import NodeInfo
from .graph import describe_graph, normalize_scope, readable_node_names
from .state import preserved_buffers
from ..columns import PER_CALL
from ..vocab import CAPTURES
from .dispatch import ActiveSession, GraphRunner, GraphSession
from .sdpa import drop_all_true_masks
from .tracer import trace

__all__ = ["CAPTURES", "Capture", "capture_model", "explain_trace_failure"]


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
_HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep  # the fxprof package
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
        frames = [f for f in frames if not f[0].startswith(_HERE)]
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
        if file.startswith(_HERE) or file.startswith(_TORCH_DIR) or file.startswith("<"):
            continue
        return f"{_short_path(file)}:{frame.lineno} in {frame.name}"
    return ""


def _forward_location(model: nn.Module) -> str:
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


class Capture:
    """One model, captured. Subclasses say how it runs."""

    kind = "?"

    def __init__(self, reason: str = ""):
        #: why this capture was chosen (filled by ``capture="auto"``)
        self.reason = reason
        #: facts about the capture for ``profile.meta`` (``nested_compile``...)
        self.notes: dict[str, Any] = {}

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
        return _bind_inputs(self.gm, args, kwargs), {}

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
class _DynamoSession(GraphSession):
    """What the shared backend dispatches to while one profile() runs.

    Dynamo compiles frames, not models: a graph of a block's ``forward`` (split by a graph
    break) is one graph that runs once per block, and its module paths are relative to that
    frame (``L['self'].fc``). So every call of a graph is placed in the model: in the untimed
    runs (compile and warm-up), the Python frame that ran it is read (its local modules and
    the ``self`` of the innermost module ``forward``), and each distinct place is a *site* of
    the graph with its own nodes (``g0:`` for the first, ``g0@1:``, ``g0@2:``...), scopes
    resolved to paths of the root model. In the timed runs, the k-th call of a graph within a
    model run goes to the site of the k-th call in the last untimed run (dynamo often
    recompiles in its first run, so a warm-up run fixes the order); a site called several
    times per run (one module applied in a loop) keeps every call (``calls_per_run`` > 1).
    """

    def __init__(self, model: nn.Module | None = None) -> None:
        super().__init__()
        self.labels: dict[int, str] = {}  # id(runner) -> g0, g1... in the order first run
        self.nodes: list[NodeInfo] = []
        self.root = model
        self.paths = {id(m): p for p, m in model.named_modules()} if model is not None else {}
        self.calls: dict[int, int] = {}  # id(runner) -> calls so far in this model run
        self.sites: dict[int, list[int]] = {}  # id(runner) -> site of its k-th call in a run
        self.site_keys: dict[int, list[tuple]] = {}  # id(runner) -> the places, in order seen
        self.prefixes: dict[tuple[int, int], str] = {}  # (id(runner), site) -> "g0@1"
        self.locating = True  # until the timed runs: the last untimed run's order is kept

    def label(self, runner: "GraphRunner") -> str:
        key = id(runner)
        if key not in self.labels:
            self.labels[key] = f"g{len(self.labels)}"
        return self.labels[key]

    def site(self, runner: "GraphRunner") -> tuple[int, str]:
        """The site of this call of ``runner`` and its name prefix (``g0``, ``g0@1``)."""
        key = id(runner)
        k = self.calls.get(key, 0)
        self.calls[key] = k + 1
        sites = self.sites.setdefault(key, [])
        if self.locating or k >= len(sites):  # untimed runs (or a call never seen): read the frame
            site = self._locate(runner)
            if k < len(sites):
                sites[k] = site
            else:
                sites.append(site)
        else:
            site = sites[k]
        return site, self.prefixes[(key, site)]

    def _locate(self, runner: "GraphRunner") -> int:
        label = self.label(runner)
        frame = sys._getframe(4)  # _locate <- site <- place <- run_graph <- GraphRunner.__call__
        while frame is not None and _is_internal(frame.f_code.co_filename):
            frame = frame.f_back
        local_paths: dict[str, str] = {}
        enclosing = ""
        if frame is not None:
            local_paths = {n: self.paths[id(v)] for n, v in frame.f_locals.items()
                           if isinstance(v, nn.Module) and id(v) in self.paths}
            for n, v in frame.f_locals.items():  # a wrapper's *args (transformers' decorators): L['args'][0] is self
                if isinstance(v, (tuple, list)):
                    local_paths.update({f"{n}[{i}]": self.paths[id(m)] for i, m in enumerate(v[:8])
                                        if isinstance(m, nn.Module) and id(m) in self.paths})
            outer = frame
            while outer is not None:
                owner = outer.f_locals.get("self")
                if isinstance(owner, nn.Module) and id(owner) in self.paths:
                    enclosing = self.paths[id(owner)]
                    break
                outer = outer.f_back
        place = (tuple(sorted(local_paths.items())), enclosing)
        keys = self.site_keys.setdefault(id(runner), [])
        if place not in keys:
            keys.append(place)
            site = len(keys) - 1
            prefix = label if site == 0 else f"{label}@{site}"
            self.prefixes[(id(runner), site)] = prefix
            self.nodes.extend(describe_graph(runner.gm, graph=label, prefix=f"{prefix}:", infer=False,
                                             resolve=_Resolver(self.root, local_paths), frame_scope=enclosing))
        return keys.index(place)

    def place(self, runner: "GraphRunner") -> tuple[tuple[int, int], str]:
        site, prefix = self.site(runner)
        return (id(runner), site), prefix

    def add_records(self, records: dict[str, dict[str, Any]]) -> None:
        _accumulate(self.records, records)  # a graph called several times a run: its calls add up


_TORCH_PRIVATE = os.path.join(os.path.dirname(torch.__file__), "_")
_FXPROF_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep


def _is_internal(filename: str) -> bool:
    """Frames between a dynamo graph and the user's code that ran it (dynamo's wrappers, ours)."""
    return filename.startswith(_TORCH_PRIVATE) or filename.startswith(_FXPROF_DIR)


class _Resolver:
    """Turns a dynamo module path (``L['self'].fc``, relative to the frame dynamo compiled)
    into a path of the root model (``blocks.2.fc``) that ``model.get_submodule`` accepts."""

    _LOCAL = re.compile(r"""^L\[['"]([^'"]+)['"]\](.*)$""")
    _INDEXED = re.compile(r"""^L\[['"]([^'"]+)['"]\]\[(\d+)\](.*)$""")  # L['args'][0].fc: a module passed in *args

    def __init__(self, root: nn.Module | None, local_paths: dict[str, str]):
        self.root = root
        self.local_paths = local_paths
        self.cache: dict[str, str] = {}

    def __call__(self, raw: str) -> str:
        raw = str(raw)
        if raw not in self.cache:
            self.cache[raw] = self._resolve(raw)
        return self.cache[raw]

    def _resolve(self, raw: str) -> str:
        match = self._LOCAL.match(raw)
        indexed = self._INDEXED.match(raw)
        if indexed and f"{indexed.group(1)}[{indexed.group(2)}]" in self.local_paths:
            base, rest = self.local_paths[f"{indexed.group(1)}[{indexed.group(2)}]"], normalize_scope(indexed.group(3))
            path = ".".join(p for p in (base, rest) if p)
        elif match and match.group(1) in self.local_paths:
            base, rest = self.local_paths[match.group(1)], normalize_scope(match.group(2))
            path = ".".join(p for p in (base, rest) if p)
        else:
            path = normalize_scope(raw)
        if self.root is None:
            return path
        parts = path.split(".") if path else []
        while parts:  # the longest prefix that is a module of the model
            try:
                self.root.get_submodule(".".join(parts))
                break
            except AttributeError:
                parts.pop()
        return ".".join(parts)


def _accumulate(into: dict[str, dict[str, Any]], records: dict[str, dict[str, Any]]) -> None:
    """Add one call's pass records to a run's: sizes and FLOPs add up over a node's calls,
    peak memory is the highest; shapes are the first call's."""
    for node, values in records.items():
        if node not in into:
            into[node] = dict(values)
            continue
        seen = into[node]
        for col, value in values.items():
            old, rule = seen.get(col), PER_CALL.get(col, "first")  # each column's rule: fxprof/columns.py
            if rule == "last":
                if value is not None:
                    seen[col] = value  # after the node's last call
            elif old is None:
                seen[col] = value
            elif value is not None and rule == "sum":
                seen[col] = old + value
            elif value is not None and rule == "max":
                seen[col] = max(old, value)


#: the dynamo session this thread's graphs report to (see fxprof.measure.dispatch)
_ACTIVE = ActiveSession(per_thread=True)


def fxprof_backend(gm: fx.GraphModule, example_inputs: list) -> Callable[..., Any]:
    """The one torch.compile backend fxprof uses. Being a single object, the graphs dynamo
    compiled for it are reused by later profiles of the same model instead of piling up
    (dynamo stops compiling a function after a few recompiles and would then run it eagerly)."""
    drop_all_true_masks(gm)  # attention as the eager model calls it (fxprof.measure.sdpa)
    return GraphRunner(gm, _ACTIVE)


class DynamoCapture(Capture):
    kind = "dynamo"

    def __init__(self, model: nn.Module, reason: str = ""):
        super().__init__(reason)
        self.model = model
        self.compiled = torch.compile(model, backend=fxprof_backend)
        self.session = _DynamoSession(model)
        self.timed_from: int | None = None

    @property
    def nodes(self) -> list[NodeInfo]:
        return list(self.session.nodes)

    def nodes_in(self, recorded: set[str]) -> tuple[list[NodeInfo], str]:
        """Only graphs that ran in the timed runs: dynamo may compile a graph, then replace it
        (a recompile, e.g. when it makes shapes dynamic) or take another branch for good."""
        # a site (g0, g0@1...) seen only in the untimed runs (their order differed) is left out
        ran = {n.name.partition(":")[0] for n in self.session.nodes if n.name in recorded}
        kept = [n for n in self.session.nodes if n.name.partition(":")[0] in ran]
        dropped = sorted({n.graph for n in self.session.nodes} - {n.graph for n in kept}, key=lambda g: int(g[1:]))
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

    def readable_names(self, nodes: list[NodeInfo]) -> dict[str, str]:
        """Dynamo names values (``g0:out_49``, ``g0:x_3``): rows are named from their module
        path and op instead (``layer4_1_conv1``, ``layer1_0_add``), the raw name kept."""
        return readable_node_names(nodes, self.model)

    def start_timing(self) -> None:
        """Called when the timed runs begin: graphs first seen after this were recompiles."""
        self.timed_from = len(self.session.labels)
        self.session.locating = False

    @property
    def module(self) -> nn.Module:
        return self.model

    def _active(self) -> contextlib.AbstractContextManager[None]:
        return _ACTIVE.active(self.session)

    def run(self, recorder: Recorder, args: tuple, kwargs: dict) -> Any:
        self.session.recorder, self.session.make_pass = recorder, None
        self.session.calls.clear()
        with self._active(), recorder.run():
            out = self._call(args, kwargs)
        if not self.session.labels:
            raise TraceError(
                "capture='dynamo' captured no graph: torch.compile ran the whole model as plain "
                "Python (nothing to profile). This happens when dynamo gave up on the model "
                "(see torch._dynamo's log) or hit its recompile limit; try capture='symbolic'."
            )
        return out

    def run_pass(self, make_pass: PassFn, args: tuple, kwargs: dict) -> dict[str, dict[str, Any]]:
        self.session.calls.clear()
        with self.session.collecting(make_pass) as records, self._active():
            self._call(args, kwargs)
        return records

    def _call(self, args: tuple, kwargs: dict) -> Any:
        try:
            return self.compiled(*args, **kwargs)
        except Exception as exc:
            if not _recursion_in(exc):
                raise
            depth = max((len(path.split(".")) for path, _ in self.model.named_modules() if path), default=0)
            raise TraceError(
                f"capture='dynamo' ran past Python's recursion limit ({sys.getrecursionlimit()}) on "
                f"{type(self.model).__name__}, whose modules nest {depth} deep: dynamo follows each level "
                f"by recursion. Raise the limit before profiling (sys.setrecursionlimit({max(20000, depth * 100)}); "
                f"from the command line: python -c \"import sys; sys.setrecursionlimit({max(20000, depth * 100)}); "
                f"from fxprof.cli import main; sys.exit(main())\" profile ...), or flatten the nesting"
            ) from exc

    def close(self) -> None:
        self.session.close()


def _recursion_in(exc: BaseException) -> bool:
    """A RecursionError in ``exc``'s chain (dynamo wraps it in InternalTorchDynamoError)."""
    seen = 0
    current: BaseException | None = exc
    while current is not None and seen < 50:
        if isinstance(current, RecursionError) or "maximum recursion depth exceeded" in str(current)[:2000]:
            return True
        current, seen = current.__cause__ or current.__context__, seen + 1
    return False


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
    captured.notes.update(_nested_compile_notes(model, captured))
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


def _nested_compile_notes(model: nn.Module, captured: Capture) -> dict[str, Any]:
    """Say when a compiled submodule was profiled uncompiled: dynamo and export inline it (its
    code's nodes are timed one by one, as eager code), and only a leaf keeps it compiled."""
    if isinstance(model, fx.GraphModule) and captured.kind == "graphmodule":
        return {}
    kept = {str(n.target) for n in getattr(getattr(captured, "gm", None), "graph", fx.Graph()).nodes if n.op == "call_module"}
    inlined = [p for p in compiled_submodules(model) if p not in kept]
    if not inlined:
        return {}
    listed = ", ".join(inlined)
    return {
        "nested_compile": inlined,
        "nested_compile_note": (
            f"torch.compile'd submodule(s) {listed} profiled uncompiled: capture={captured.kind!r} "
            f"traces through them, so their code is timed node by node as eager code. To time "
            f"them compiled, each as one node: capture='symbolic', leaf_modules={inlined!r}"
        ),
    }


def _capture(model: nn.Module, args: tuple, kwargs: dict, capture: str, concrete_args: Any, leaf_modules: Any, trace_into: Any = (),
             root_hooks_run: bool = False, forward: Any = None) -> Capture:
    if isinstance(model, fx.GraphModule) and capture in ("auto", "symbolic"):
        return GraphCapture(model, "graphmodule", "a GraphModule was given: used as is")
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
        return _symbolic(model, concrete_args, leaf_modules, trace_into=trace_into, specialised=specialised,
                         warn_hooks=True, root_hooks_run=root_hooks_run)
    if capture == "export":
        return _export(model, args, kwargs)
    if capture == "dynamo":
        return DynamoCapture(model, "asked for")
    try:
        traced = _symbolic(model, concrete_args, leaf_modules, reason="symbolic tracing succeeded", trace_into=trace_into,
                           specialised=specialised, warn_hooks=False)
        hooks = hooks_symbolic_tracing_loses(model, traced.gm, root_hooks_run)
        if hooks:
            return DynamoCapture(model, f"symbolic tracing would lose {'; '.join(hooks)} (it calls forward directly); "
                                        f"used dynamo, which runs them")
        return traced
    except TraceError as exc:
        cause = explain_trace_failure(exc.__cause__ or exc) or _first_line(exc.__cause__ or exc)
        where = where_tracing_stopped(exc.__cause__ or exc) or _forward_location(model)
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
              specialised: set[str] = frozenset(), warn_hooks: bool = True, root_hooks_run: bool = False) -> GraphCapture:  # type: ignore[assignment]
    try:
        with preserved_buffers(model, report=True) as changed:  # tracing may run buffer updates once
            gm = trace(model, concrete_args=concrete_args, leaf_modules=leaf_modules, trace_into=trace_into)
    except TraceError as exc:
        cause = exc.__cause__ or exc
        words = explain_trace_failure(cause)
        said = f"{words}. ({_first_line(cause)})" if words else f"{_first_line(cause)}."
        where = where_tracing_stopped(cause) or _forward_location(model)
        at = f" (tracing stopped at {where})" if where else ""
        raise TraceError(
            f"cannot trace {type(model).__name__} symbolically{at}: {said} Options: capture='dynamo' "
            f"(runs the model as Python and profiles the graphs between the lines tracing cannot "
            f"follow) or capture='auto' (tries symbolic tracing first); mark the submodule that "
            f"does it as a leaf (leaf_modules=[...]); or fix the argument that steers it "
            f"(concrete_args={{...}})."
        ) from cause
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
    if changed:
        warnings.warn(
            f"fxprof: {type(model).__name__}'s forward changes buffer(s) {', '.join(changed)}; symbolic tracing ran "
            f"that update once instead of recording it, so the timed graph leaves it out (fxprof put the buffers "
            f"back). capture='dynamo' or capture='export' keeps state updates in the graph.",
            stacklevel=4,
        )
    drop_all_true_masks(gm)  # attention as the eager model calls it (fxprof.measure.sdpa)
    return GraphCapture(gm, "symbolic", reason)


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
