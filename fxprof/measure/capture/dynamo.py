"""The dynamo capture: ``torch.compile`` with fxprof's backend, one graph per region between graph
breaks, each reporting to the profile that runs it (:class:`DynamoCapture`,
:func:`fxprof_backend`), and the module each of dynamo's nodes runs in (:class:`Resolver`)."""
from __future__ import annotations

import contextlib
import dataclasses
import os
import re
import sys
from typing import Any, Callable

import torch
from torch import fx, nn

from ...columns import PER_CALL
from ...core.nodes import NodeInfo
from ...errors import TraceError
from ..common.settings import config_patcher, frame_counter
from ..distributed.ddp import bucket_limit_error
from .base import HERE, Capture, PassFn
from .dispatch import ActiveSession, GraphRunner, GraphSession
from .graph import describe_graph, normalize_scope, readable_node_names
from .interpreter import Recorder
from .sdpa import drop_all_true_masks

__all__ = ["DynamoCapture", "Resolver", "compiled_frame_paths", "frame_module_paths", "fxprof_backend"]

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
            local_paths = frame_module_paths(frame.f_locals, self.paths)
            outer = frame
            while outer is not None:
                owner = outer.f_locals.get("self")
                if isinstance(owner, nn.Module) and id(owner) in self.paths:
                    enclosing = self.paths[id(owner)]
                    if "self" not in local_paths:  # the graph runs from dynamo's own code: a split GraphModule
                        local_paths["self"] = enclosing  # (DDP's buckets), whose L['self'] is the frame dynamo compiled
                    break
                outer = outer.f_back
        place = (tuple(sorted(local_paths.items())), enclosing)
        keys = self.site_keys.setdefault(id(runner), [])
        if place not in keys:
            keys.append(place)
            site = len(keys) - 1
            prefix = label if site == 0 else f"{label}@{site}"
            self.prefixes[(id(runner), site)] = prefix
            infos = describe_graph(runner.gm, graph=label, prefix=f"{prefix}:", infer=False,
                                   resolve=Resolver(self.root, local_paths), frame_scope=enclosing)
            self.nodes.extend(_unwrapped(infos, self.root))
        return keys.index(place)

    def place(self, runner: "GraphRunner") -> tuple[tuple[int, int], str]:
        site, prefix = self.site(runner)
        return (id(runner), site), prefix

    def add_records(self, records: dict[str, dict[str, Any]]) -> None:
        _accumulate(self.records, records)  # a graph called several times a run: its calls add up


def _unwrapped(infos: list[NodeInfo], root: nn.Module | None) -> list[NodeInfo]:
    """Scopes of a ``DistributedDataParallel`` model's graphs as the wrapped model's own paths
    (``layers.0``, not ``module.layers.0``), as a training step's are: every node sits under the
    wrapper's ``module``, which says nothing per layer."""
    ddp = sys.modules.get("torch.nn.parallel.distributed")
    if root is None or ddp is None or not isinstance(root, ddp.DistributedDataParallel):
        return infos
    def strip(scope: str) -> str:
        return "" if scope == "module" else scope[len("module."):] if scope.startswith("module.") else scope
    return [dataclasses.replace(i, scope=strip(i.scope)) if i.scope.startswith("module") else i for i in infos]


_TORCH_PRIVATE = os.path.join(os.path.dirname(torch.__file__), "_")
_FXPROF_DIR = HERE


def _is_internal(filename: str) -> bool:
    """Frames between a dynamo graph and the user's code that ran it (dynamo's wrappers, ours)."""
    return filename.startswith(_TORCH_PRIVATE) or filename.startswith(_FXPROF_DIR)


_EVAL_FRAME = os.path.join(os.path.dirname(torch.__file__), "_dynamo", "eval_frame.py")


def compiled_frame_paths(frame: Any, paths: dict[int, str]) -> tuple[dict[str, str], str]:
    """The model paths of the local modules of the frame whose compiled graph is running
    (:func:`frame_module_paths`), and the path of the innermost module of the model whose call is
    running there ("" none), from a frame inside the graph's call. The compiled frame is the one
    that called dynamo's wrapper of the compiled code (torch/_dynamo/eval_frame.py), which may be
    fxprof's own (the training step's ``forward``); without that wrapper, the first frame outside
    torch's private modules and fxprof. The module is the first ``self`` of the model from that
    frame outwards (a block's ``forward``, or the ``Module.__call__`` that ran it when its
    ``forward`` names its module otherwise), up to fxprof's own frames."""
    start, passed, found = frame, False, None
    while frame is not None:
        inside = frame.f_code.co_filename == _EVAL_FRAME
        if passed and not inside:
            found = frame
            break
        passed = passed or inside
        frame = frame.f_back
    if found is None:
        found = start
        while found is not None and _is_internal(found.f_code.co_filename):
            found = found.f_back
    if found is None:
        return {}, ""
    local = frame_module_paths(found.f_locals, paths)
    outer, enclosing = found, ""
    while outer is not None and (outer is found or not outer.f_code.co_filename.startswith(_FXPROF_DIR)):
        owner = outer.f_locals.get("self")
        if isinstance(owner, nn.Module) and id(owner) in paths:
            enclosing = paths[id(owner)]
            break
        outer = outer.f_back
    return local, enclosing


def frame_module_paths(f_locals: dict, paths: dict[int, str]) -> dict[str, str]:
    """The model paths of a frame's local modules, as dynamo names them: ``self``, and a
    wrapper's ``*args`` (transformers' decorators: ``L['args'][0]`` is the module)."""
    found = {n: paths[id(v)] for n, v in f_locals.items() if isinstance(v, nn.Module) and id(v) in paths}
    for n, v in f_locals.items():
        if isinstance(v, (tuple, list)):
            found.update({f"{n}[{i}]": paths[id(m)] for i, m in enumerate(v[:8]) if isinstance(m, nn.Module) and id(m) in paths})
    return found


class Resolver:
    """Turns a dynamo module path (``L['self'].fc``, relative to the frame dynamo compiled)
    into a path of the root model (``blocks.2.fc``) that ``model.get_submodule`` accepts."""

    _LOCAL = re.compile(r"""^L\[['"]([^'"]+)['"]\](.*)$""")
    _INDEXED = re.compile(r"""^L\[['"]([^'"]+)['"]\]\[(\d+)\](.*)$""")  # L['args'][0].fc: a module passed in *args

    def __init__(self, root: nn.Module | None, local_paths: dict[str, str]):
        self.root = root
        self.local_paths = local_paths
        self.cache: dict[str, str] = {}

    def knows(self, raw: str) -> bool:
        """Whether ``raw`` starts at one of the frame's local modules (``L['self']``, ``L['args'][0]``)."""
        match, indexed = self._LOCAL.match(str(raw)), self._INDEXED.match(str(raw))
        return bool(indexed and f"{indexed.group(1)}[{indexed.group(2)}]" in self.local_paths
                    or match and match.group(1) in self.local_paths)

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


#: the dynamo session this thread's graphs report to (see fxprof.measure.capture.dispatch)
_ACTIVE = ActiveSession(per_thread=True)


def fxprof_backend(gm: fx.GraphModule, example_inputs: list) -> Callable[..., Any]:
    """The one torch.compile backend fxprof uses. Being a single object, the graphs dynamo
    compiled for it are reused by later profiles of the same model instead of piling up
    (dynamo stops compiling a function after a few recompiles and would then run it eagerly)."""
    drop_all_true_masks(gm)  # attention as the eager model calls it (fxprof.measure.capture.sdpa)
    return GraphRunner(gm, _ACTIVE)


class DynamoCapture(Capture):
    kind = "dynamo"

    def __init__(self, model: nn.Module, reason: str = ""):
        super().__init__(reason)
        self.model = model
        self.compiled = torch.compile(model, backend=fxprof_backend)
        self.session = _DynamoSession(model)
        self.timed_from: int | None = None
        self._settings = _call_settings()
        self._frames = frame_counter()
        self._frames_seen: int | None = None  # dynamo's count of converted frames after the last call
        self._settle_calls = 2  # calls still to run under _settings: the first ones, and those after a compile
        #: a session's capture (the loop's own calls): a run in which no graph ran returns the
        #: model's output, is not kept as a run, and sets ``ran_no_graph`` instead of raising
        self.loop = False
        #: the last run ran the whole forward as plain Python, no graph: dynamo skips a forward for
        #: good where it cannot compile it (it raised while compiled, a graph break it cannot resume
        #: from) and runs it so past its recompile limit
        self.ran_no_graph = False

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
        with self._active():
            recorder.begin_run()
            try:
                out = self._call(args, kwargs)
            except BaseException:
                recorder.abort_run()
                raise
            self.ran_no_graph = not self.session.calls
            if self.ran_no_graph and self.loop:  # the loop's step ran as plain Python: no run of the graphs
                recorder.abort_run()
                return out
            recorder.end_run()
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
        revert = self._settings() if self._settle_calls and self._settings is not None else None
        try:
            return self.compiled(*args, **kwargs)
        except Exception as exc:
            limit = bucket_limit_error(exc, self.model) if isinstance(exc, AssertionError) else None
            if limit is not None:  # torch's bare assertion on a small DDP bucket cap, in words
                raise limit from exc
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
        finally:
            if revert is not None:
                revert()
            self._settled()

    def _settled(self) -> None:
        """After a call: the next two run under :func:`_call_settings` where this one compiled (a
        changed int is made dynamic on dynamo's next compile, which must see the setting), else one
        fewer. Reading dynamo's count costs a lookup; patching the config, 5 us a call."""
        frames = self._frames()
        if frames != self._frames_seen:
            self._frames_seen, self._settle_calls = frames, 2
        elif self._settle_calls:
            self._settle_calls -= 1

    def close(self) -> None:
        self.session.close()


def _call_settings() -> Callable[[], Callable[[], None]] | None:
    """What fxprof's dynamo calls run under while they may compile (:meth:`DynamoCapture._settled`):
    a module's int attributes left unspecialised (``allow_unspec_int_on_nn_module``). dynamo
    treats them as constants of the graph by default, so a forward that counts its calls on
    ``self`` (``self.calls += 1``) recompiled at every call and, past dynamo's recompile limit (8),
    ran as plain Python with no graph: an unprofiled loop's forward runs that Python at every
    call, and so must the capture that stands in for it."""
    config = getattr(getattr(torch, "_dynamo", None), "config", None)
    if config is None or not hasattr(config, "allow_unspec_int_on_nn_module"):
        return None
    return config_patcher(config, {"allow_unspec_int_on_nn_module": True})


def _recursion_in(exc: BaseException) -> bool:
    """A RecursionError in ``exc``'s chain (dynamo wraps it in InternalTorchDynamoError)."""
    seen = 0
    current: BaseException | None = exc
    while current is not None and seen < 50:
        if isinstance(current, RecursionError) or "maximum recursion depth exceeded" in str(current)[:2000]:
            return True
        current, seen = current.__cause__ or current.__context__, seen + 1
    return False

