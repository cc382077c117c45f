"""Compiling for compiled mode and sessions alike: the compile options (a user's OptimizedModule
read back, or compile= given), fxprof's backend in front of the user's
(:class:`CompiledSession`: every graph, its code and provenance), inductor's settings and logs
caught while it compiles, and room in dynamo's caches."""

from __future__ import annotations

import contextlib
import logging
import re
import sys
from typing import Any, Callable, Iterator

import torch
from torch import fx, nn

from ...core.nodes import NodeInfo
from ...errors import TraceError
from ...vocab import COMPILE_MODES
from ..capture.dynamo import Resolver, frame_module_paths
from ..capture.graph import describe_graph
from ..common.settings import config_patcher, frame_counter
from .breaks import break_site, recompile_reason, reported_site
from .flops import custom_ops, graph_flops
from .profiler_cost import ProfilerCost
from .reuse import cache_entries

_COMPILE_KEYS = ("mode", "dynamic", "fullgraph", "options", "backend")
RECORD = re.compile(r'RAIIAtenRecordFunctionHandle\s+\w+\("([^"]+)"')


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


def compiled_forward(model: Any) -> Any:
    """The ``torch.compile``d function ``model`` runs as its forward when the forward was compiled
    in place (``model.forward = torch.compile(model.forward)``, Hugging Face's static-cache
    recipe), or None. ``nn.Module.__call__`` calls that instance attribute, so the compiled program
    is what every call of the model (``generate`` included) runs."""
    if not isinstance(model, nn.Module) or is_compiled(model):
        return None
    forward = model.__dict__.get("forward")
    return forward if is_compiled_function(forward) else None


def is_compiled_function(fn: Any) -> bool:
    """Is ``fn`` what ``torch.compile(function)`` returns?"""
    return callable(fn) and not isinstance(fn, nn.Module) and hasattr(fn, "_torchdynamo_orig_callable")


def _context_of(compiled: Any) -> Any:
    """The dynamo context (its ``callback``: the backend; ``fullgraph``) a ``torch.compile``d
    function was made by: the object in its closure that has both (a torch release that keeps it
    elsewhere gives None, and the caller refuses)."""
    for cell in getattr(compiled, "__closure__", None) or ():
        try:
            value = cell.cell_contents
        except ValueError:  # an empty cell
            continue
        if hasattr(value, "callback") and hasattr(value, "fullgraph"):
            return value
    return None


def read_compiled_forward(model: nn.Module, forward: Any = None) -> tuple[nn.Module, Any, Any, dict[str, Any]]:
    """A model whose forward is compiled in place: ``(model, the function that was compiled (its
    bound forward), the user's backend, what it was compiled with)``, as :func:`read_compiled`
    reads an ``OptimizedModule``. ``forward``: that compiled forward, when the instance attribute
    is no longer it (a session put its own there)."""
    forward = forward if is_compiled_function(forward) else compiled_forward(model)
    ctx = _context_of(forward)
    if forward is None or ctx is None:
        raise TraceError(
            f"fxprof cannot read the torch.compile options of {type(model).__name__}.forward on torch {torch.__version__} "
            f"(the compiled function keeps them where fxprof does not look). Compile the module instead "
            f"(torch.compile(model)) or profile the eager model (del model.forward)"
        )
    root, backend, described = _read_context(ctx, model)
    return root, forward._torchdynamo_orig_callable, backend, described


def read_compiled(optimized: nn.Module) -> tuple[nn.Module, Any, dict[str, Any]]:
    """The original module, the user's backend and what it was compiled with."""
    return _read_context(getattr(optimized, "dynamo_ctx", None), optimized._orig_mod)


def _read_context(ctx: Any, root: nn.Module) -> tuple[nn.Module, Any, dict[str, Any]]:
    """``(root, the user's backend, what it was compiled with)`` from a dynamo context."""
    backend = _innermost_backend(getattr(ctx, "callback", None))
    name = getattr(backend, "compiler_name", None) or getattr(backend, "__name__", type(backend).__name__)
    if name != "inductor":
        raise TraceError(
            f"compiled mode times the kernels inductor generates; this model was compiled with backend "
            f"{name!r}, which generates none. Profile its graphs with capture='dynamo' on the original "
            f"module (model._orig_mod; for a forward compiled in place, capture='dynamo' on the model), or compile "
            f"it with the default backend (inductor)."
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
    return root, backend, described


def _inductor_patches() -> list[tuple[Any, dict[str, Any]]]:
    """Kernel ranges, provenance, no caches: each config module fxprof's compile patches, with its changes."""
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
    out: list[tuple[Any, dict[str, Any]]] = [(inductor_config, patches)]
    functorch_config = getattr(getattr(torch, "_functorch", None), "config", None)
    if functorch_config is not None and hasattr(functorch_config, "enable_autograd_cache"):
        out.append((functorch_config, {"enable_autograd_cache": False}))
    return out


@contextlib.contextmanager
def inductor_settings() -> Iterator[None]:
    """Kernel ranges, provenance, no caches: set for fxprof's compile, restored after."""
    with contextlib.ExitStack() as stack:
        for config, changes in _inductor_patches():
            stack.enter_context(config.patch(changes))
        yield


class CallSettings:
    """What each call of fxprof's compiled program runs under in a session (any call may compile:
    a new input signature): :func:`inductor_settings`, :func:`room_to_compile` and
    :func:`recursion_limit_kept`, the same settings, made once and applied per call. Entered
    between the user's steps, the context managers cost 80-160 us a call (a decode step is 300 us),
    and fxprof's Python there slows the user's next step by evicting the model's data from the
    caches (docs/performance.md section 17)."""

    def __init__(self, root: nn.Module):
        self.root = root
        self._fixed = [config_patcher(config, changes) for config, changes in _inductor_patches()]
        self._dynamo = getattr(getattr(torch, "_dynamo", None), "config", None)
        self._room: dict[int, Callable[[], Callable[[], None]] | None] = {}  # per count of held entries
        self._undo: list[list[Callable[[], None]]] = []
        self._limits: list[int] = []
        self._held = 0
        self._frames: int | None = None  # dynamo's count of frames it converted when _held was read
        self._frames_converted = frame_counter()

    def _held_now(self) -> int:
        """The compiled versions ``root``'s forward holds, read again only after dynamo converted a
        frame (its ``counters["frames"]["total"]``): a version is only ever added by a conversion,
        and reading them costs 5-20 us a call. A count grown stale by ``torch._dynamo.reset()``
        only raises the limit by more than the versions held."""
        frames = self._frames_converted()
        if frames is None or frames != self._frames:
            self._held, self._frames = _held_entries(self.root), frames
        return self._held

    def _room_for(self, held: int) -> Callable[[], Callable[[], None]] | None:
        if held not in self._room:
            changes = _room_changes(self._dynamo, held)
            self._room[held] = config_patcher(self._dynamo, changes) if changes is not None else None
        return self._room[held]

    def __enter__(self) -> "CallSettings":
        undo: list[Callable[[], None]] = []
        self._limits.append(sys.getrecursionlimit())
        try:
            room = self._room_for(self._held_now())
            for change in ([room] if room is not None else []) + self._fixed:
                undo.append(change())
        except BaseException:
            for revert in reversed(undo):
                revert()
            sys.setrecursionlimit(self._limits.pop())
            raise
        self._undo.append(undo)
        return self

    def __exit__(self, *exc: Any) -> None:
        undo = self._undo.pop()
        try:
            for revert in reversed(undo):
                revert()
        finally:
            sys.setrecursionlimit(self._limits.pop())


class TraceCatcher(logging.Handler):
    """Keeps inductor's generated code and provenance per compiled graph (``"0/0"``) from
    torch's structured trace while installed."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.code: dict[str, str] = {}
        self.provenance: dict[str, dict[str, Any]] = {}
        #: per graph, the generated modules' files in the order inductor wrote them (the forward's
        #: first; a training graph's backward after): what the marks instrument
        self.files: dict[str, list[str]] = {}
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
                written = meta["inductor_output_code"]
                if isinstance(written, dict) and written.get("file_path"):
                    self.files.setdefault(graph, []).append(str(written["file_path"]))
            artifact = meta.get("artifact")
            if isinstance(artifact, dict) and artifact.get("name") == "dynamo_graph_break_reason":
                self.breaks.setdefault(graph, str(getattr(record, "payload", "") or ""))
            if isinstance(artifact, dict) and artifact.get("name") == "recompile_reasons":
                self.recompiles.append((graph, recompile_reason(getattr(record, "payload", "")), self.phase))
            if isinstance(artifact, dict) and artifact.get("name") == "inductor_provenance_tracking_node_mappings":
                import json

                # the forward's (inductor compiles it first; a training graph's backward comes after and
                # would put its own kernel keys in place of those the timed forward runs)
                self.provenance.setdefault(graph, json.loads(getattr(record, "payload", "") or "{}"))
        except Exception:  # a malformed record costs that graph's provenance, never the run
            pass


@contextlib.contextmanager
def catch_trace(catcher: TraceCatcher | None = None) -> Iterator[TraceCatcher]:
    logger = logging.getLogger("torch.__trace")
    catcher = catcher if catcher is not None else TraceCatcher()
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
        #: per graph: the custom ops it calls, which no FLOP count sees (name -> calls)
        self.custom_ops: dict[str, dict[str, int]] = {}
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
        resolver = Resolver(self.root, local)
        self.nodes[graph] = {n.name: n for n in describe_graph(gm, graph=graph, prefix="", resolve=resolver, infer=False,
                                                               frame_scope=local.get("self", ""))}
        self.frame_scope[graph] = local.get("self", "")
        site = break_site(graph, gm, self.root, self.frame_scope[graph], self.nodes[graph])
        if site is not None:
            self.breaks[graph] = site
        self.flops[graph], why = graph_flops(gm, example_inputs)
        self.custom_ops[graph] = custom_ops(gm)
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
                # with a wrapper's *args, as eager dynamo capture reads them (hf_llama_gqa compiled: no scope at all)
                found = frame_module_paths(f_locals, self.paths)
                if found:
                    return found
            frame = frame.f_back
        return {"self": ""}


@contextlib.contextmanager
def recursion_limit_kept() -> Iterator[None]:
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
    config = getattr(getattr(torch, "_dynamo", None), "config", None)
    patches = _room_changes(config, _held_entries(root))
    if patches is None:
        yield
        return
    with config.patch(patches):  # type: ignore[union-attr]
        yield


def _room_changes(config: Any, held: int) -> dict[str, int] | None:
    """Dynamo's recompile limits raised by ``held`` versions (:func:`room_to_compile`), or None
    where nothing is held or the release has no such limit."""
    if not held or config is None or not hasattr(config, "recompile_limit"):
        return None
    changes = {"recompile_limit": config.recompile_limit + held}
    if hasattr(config, "accumulated_recompile_limit"):
        changes["accumulated_recompile_limit"] = config.accumulated_recompile_limit + held
    return changes


def no_graph_message(root: nn.Module, then: str) -> str:
    """Why compiled mode has nothing to time, when dynamo compiled no graph of ``root``."""
    held = _held_entries(root)
    limit = getattr(getattr(getattr(torch, "_dynamo", None), "config", None), "recompile_limit", None)
    why = (f"; dynamo holds {held} compiled versions of {type(root).__name__}.forward in this process (its recompile "
           f"limit is {limit}): torch._dynamo.reset() clears them" if limit and held >= limit else
           f"; dynamo holds {held} compiled versions of {type(root).__name__}.forward and reported its recompile limit "
           f"exceeded earlier in this process: a code object that once exceeded it is never compiled again, even "
           f"under a raised limit (torch._dynamo.reset() clears that)" if held and _limit_exceeded() else
           " (is its forward disabled for dynamo, or torch.compiler.set_stance('force_eager') in effect?)")
    return f"torch.compile compiled no graph of this model: dynamo ran it as plain Python{why}. There are no kernels to time; {then}"


def _limit_exceeded() -> bool:
    """Has dynamo reported a recompile limit exceeded in this process (its ``unimplemented`` counter)?"""
    try:
        from torch._dynamo.utils import counters

        return any("recompile limit" in str(key).lower() or "cache_size_limit" in str(key) for key in counters["unimplemented"])
    except Exception:  # pragma: no cover - a release without the counter
        return False


def dynamo_graph_breaks() -> int | None:
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
