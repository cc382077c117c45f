"""FSDP2 models (``torch.distributed.fsdp.fully_shard``): every layer's nodes, and FSDP's all-gathers as rows.

FSDP2 gathers a sharded module's parameters in a forward pre-hook and frees them in a post-hook.
No capture sees that work: dynamo skips FSDP's hooks, and symbolic tracing runs them once while
tracing (their all-gathers leave nothing in the graph). fxprof therefore traces the model with
FSDP's hooks left out (:func:`fsdp_modules` says which modules to call past their hooks) and
puts FSDP's work back into the graph itself (:func:`insert_fsdp_steps`), as three nodes per call
of a ``fully_shard``-ed module, each driving FSDP2's public API:

``all_gather``  ``module.unshard(async_op=...)``: FSDP's copy-in and the all-gather issued, with
                the module's own ``unshard_async_op`` (False unless set), as FSDP's pre-forward
                issues it: a synchronous one (gloo on the CPU) runs the whole collective and
                FSDP's copy-out inside this call
``wait``        the handle's ``wait()`` (an asynchronous all-gather's): the wait for the
                all-gather and FSDP's copy-out into the unsharded parameters (which FSDP then
                registers on the module); nothing to wait for after a synchronous one
``reshard``     ``module.reshard()``: the unsharded parameters freed, the shards registered
                again (only for the modules FSDP reshards after forward: not the root, by default)

before the module's first node and after its last. Their scope is the module, so the per-layer
roll-up charges a layer its own all-gather, and ``all_gather``/``wait`` are communication
(:data:`fxprof.core.rankstats.COLLECTIVE_KINDS`) for ``group_by("comm")``. The values are the
model's own: the same all-gather of the same shards gives the same parameters. A module called
twice is gathered and freed twice; nested modules are gathered outer first and freed inner
first; where FSDP's forward prefetch is set, the prefetched gather moves to right after the
prefetching module's wait (:func:`forward_prefetch`). The graph's own copies of traced-through
modules' parameters follow what FSDP registers (:func:`_mirrors`).

Training steps (``backward=True``) are not profiled from this graph: there FSDP's hooks run as in
training and :class:`TrainingSteps` times their work (:mod:`fxprof.measure.capture.fsdp_training`).

A session (``fxprof.session``) takes an FSDP2 model with ``backward=True`` only
(:mod:`fxprof.measure.capture.fsdp_loop`). Not supported yet (refused with the reason): a
forward-only session, mixed precision (FSDP's input
casts live in the hooks left out), ``reshard_after_forward`` as an int, and captures other than
symbolic tracing.
"""

from __future__ import annotations

import dataclasses
import sys
from typing import Any

from torch import fx, nn

from ...vocab import FSDP, FSDP_STEPS

__all__ = ["fsdp_modules", "is_fsdp", "async_gathers", "FSDPNotes", "insert_fsdp_steps", "refuse_unsupported", "forward_prefetch", "bypass_types", "FSDPStep", "FSDP_KINDS",
           "TrainingSteps", "param_groups_by_path", "compute_outside_graphs"]

#: the kinds of the nodes fxprof inserts for FSDP's work
FSDP_KINDS = FSDP_STEPS[:3]


def _fsdp_module_class() -> type | None:
    if "torch.distributed.fsdp" not in sys.modules:  # never imported: no module was sharded by it
        return None
    try:
        from torch.distributed.fsdp import FSDPModule
    except ImportError:  # a torch without torch.distributed
        return None
    return FSDPModule


def fsdp_modules(model: nn.Module) -> dict[str, nn.Module]:
    """The ``fully_shard``-ed modules of ``model`` by path (``""`` for the root), in
    ``named_modules`` order; empty for a model without FSDP2."""
    cls = _fsdp_module_class()
    if cls is None:
        return {}
    return {path: m for path, m in model.named_modules() if isinstance(m, cls)}



def is_fsdp(model: nn.Module) -> bool:
    """Whether ``model`` holds ``fully_shard``-ed (FSDP2) modules: the one test every capture asks."""
    return bool(fsdp_modules(model))


def _param_groups(module: nn.Module) -> list[Any]:
    """FSDP's parameter groups of one module (a private attribute, read only to decide what FSDP
    does after forward and to refuse what is not supported; torch 2.11 and later)."""
    state = module._get_fsdp_state()  # type: ignore[operator]
    groups = getattr(state, "_fsdp_param_groups", None)
    if groups is None:
        group = getattr(state, "_fsdp_param_group", None)
        groups = [group] if group is not None else []
    return list(groups)


def _reshards_after_forward(module: nn.Module) -> bool:
    """Whether FSDP frees this module's gathered parameters after its forward: its groups have a
    post-forward mesh (FSDP's lazy initialization, which the model's first forward runs, clears it
    for the root; ``reshard_after_forward=False`` never sets it)."""
    return any(getattr(g, "post_forward_mesh_info", None) is not None for g in _param_groups(module))


def refuse_unsupported(model: nn.Module, capture: str = "symbolic", backward: bool = False, session: bool = False) -> None:
    """Raise ValueError for an FSDP2 model and a request fxprof cannot yet profile faithfully."""
    modules = fsdp_modules(model)
    if not modules:
        return
    paths = ", ".join(p or "(root)" for p in modules)
    if session and not backward:
        raise ValueError(
            f"fxprof.session(model) on an FSDP2 model (fully_shard on {paths}) needs backward=True: inside the loop "
            f"FSDP's own hooks run around the session's forward, and only the training capture runs them as in "
            f"training. Use fxprof.session(model, backward=True) over the training loop (forward and backward, the "
            f"all-gathers and reduce-scatters as rows), or fxprof.profile(model, x) for the forward alone.")
    if not backward and capture not in ("auto", "symbolic"):  # a training step's capture checks its own
        raise ValueError(
            f"capture={capture!r} cannot profile an FSDP2 model (fully_shard on {paths}): dynamo skips FSDP's hooks "
            f"and export cannot hold them. Use capture='auto' or 'symbolic': fxprof traces the layers and times "
            f"FSDP's all-gathers as nodes of their own.")
    for path, module in modules.items():
        for group in _param_groups(module):
            policy = getattr(group, "mp_policy", None)
            if policy is not None and (policy.param_dtype is not None or policy.reduce_dtype is not None
                                       or policy.output_dtype is not None):
                raise ValueError(
                    f"{path or 'the root'} is sharded with a MixedPrecisionPolicy ({policy}); fxprof cannot profile FSDP "
                    f"mixed precision yet (the casts of inputs and outputs live in FSDP's hooks, which fxprof replaces). "
                    f"Profile the model without mp_policy, or one rank's unsharded copy of it.")
            if getattr(group, "_use_post_forward_mesh", False):
                raise ValueError(
                    f"{path or 'the root'} reshards to a smaller mesh after forward (reshard_after_forward as an int); "
                    f"fxprof cannot profile that yet. Use reshard_after_forward=True or False.")


class FSDPStep:
    """One of FSDP's steps for one module, as a graph node's target (see the module docs).

    A callable object, so that the node's ``kind`` is the step (``__name__``) and the module
    travels with the graph; ``all_gather`` returns the handle that ``wait`` takes."""

    def __init__(self, step: str, module: nn.Module, path: str, mirrors: tuple = ()):
        if step not in FSDP_KINDS:
            raise ValueError(f"unknown FSDP step {step!r}")
        self.__name__ = step
        self.__qualname__ = step
        self.__module__ = __name__
        self.step, self.module, self.path = step, module, path
        #: (graph's module, model's module, name): the graph's copies of parameters this module
        #: gathers, which must follow what FSDP registers on the model
        self.mirrors = mirrors

    #: the row's role (fxprof.vocab.ROLES), read by the capture that describes the graph
    fxprof_role = FSDP

    #: whether the all-gather is issued without waiting (its wait is the ``wait`` step): the module's
    #: own ``unshard_async_op``, set by :func:`insert_fsdp_steps`, so that what is timed is what FSDP
    #: does (and what ``meta["fsdp"]["unshard_async_op"]`` tells :mod:`fxprof.core.overlap`)
    async_op = True

    def __call__(self, *args: Any) -> Any:
        if self.step == "all_gather":
            return self.module.unshard(async_op=self.async_op)  # type: ignore[operator]
        if self.step == "wait":
            handle = args[0]
            if handle is not None:
                handle.wait()
        else:
            self.module.reshard()  # type: ignore[operator]
        for copy, real, name in self.mirrors:
            copy._parameters[name] = real._parameters[name]
        return None

    def __repr__(self) -> str:
        return f"fsdp.{self.step}({self.path or 'root'})"


def _in_module(node: fx.Node, path: str) -> bool:
    """Whether ``node`` runs inside the module at ``path`` (every node does for the root)."""
    if not path:
        return True
    for value in (node.meta.get("nn_module_stack") or {}).values():
        where = value[0] if isinstance(value, (tuple, list)) else value
        if str(where) == path:
            return True
    if node.op == "call_module":
        target = str(node.target)
        return target == path or target.startswith(path + ".")
    return False


def _stack_to(node: fx.Node, path: str) -> dict[str, Any]:
    """``node``'s module stack cut after ``path``: the stack of a node in that module itself."""
    out: dict[str, Any] = {}
    for key, value in (node.meta.get("nn_module_stack") or {}).items():
        out[key] = value
        where = value[0] if isinstance(value, (tuple, list)) else value
        if str(where) == path:
            return out
    return out


def _spans(nodes: list[fx.Node], path: str) -> list[tuple[fx.Node, fx.Node]]:
    """The runs of consecutive nodes in the module at ``path`` (one per call of it), first and last."""
    spans: list[tuple[fx.Node, fx.Node]] = []
    start = last = None
    for node in nodes:
        if _in_module(node, path):
            if start is None:
                start = node
            last = node
        elif start is not None:
            spans.append((start, last))  # type: ignore[arg-type]
            start = last = None
    if start is not None:
        spans.append((start, last))  # type: ignore[arg-type]
    return spans


def _fresh_reads(graph: fx.Graph) -> None:
    """One ``get_attr`` per use: tracing reads a parameter once and hands the value to every
    later use, but FSDP registers a new tensor at each unshard (a module called twice, its
    parameters freed in between, would get the first call's)."""
    for node in [n for n in graph.nodes if n.op == "get_attr" and len(n.users) > 1]:
        for user in list(node.users)[1:]:
            with graph.inserting_before(user):
                fresh = graph.get_attr(str(node.target))
            fresh.meta = dict(node.meta)
            user.replace_input_with(node, fresh)


def _mirrors(gm: fx.GraphModule, model: nn.Module, modules: dict[str, nn.Module]) -> dict[str, tuple]:
    """Per FSDP module path: the parameters the graph reads (``get_attr``) from its own copy of a
    module rather than the model's (a ``GraphModule`` copies the attributes of traced-through
    modules), as (copy, real module, name). FSDP registers new tensors at each unshard and
    reshard; the steps put them on the copies too."""
    out: dict[str, list] = {p: [] for p in modules}
    seen = set()
    for node in gm.graph.nodes:
        if node.op != "get_attr" or str(node.target) in seen:
            continue
        seen.add(str(node.target))
        owner, _, name = str(node.target).rpartition(".")
        real = model.get_submodule(owner)
        copy = gm.get_submodule(owner)
        if copy is real or name not in real._parameters or name not in copy._parameters:
            continue
        manager = max((p for p in modules if not p or owner == p or owner.startswith(p + ".")), key=len, default=None)
        if manager is not None:
            out[manager].append((copy, real, name))
    return {p: tuple(v) for p, v in out.items()}


def insert_fsdp_steps(gm: fx.GraphModule, modules: dict[str, nn.Module], model: nn.Module | None = None) -> fx.GraphModule:
    """Put FSDP's work for each call of each module in ``modules`` (:func:`fsdp_modules`) into
    ``gm``: ``all_gather`` and ``wait`` before the call's first node, ``reshard`` after its last
    (where FSDP reshards after forward). Nested modules: the outer module's all-gather comes
    first, as FSDP's pre-hooks run outer first. Returns ``gm``, recompiled."""
    graph = gm.graph
    _fresh_reads(graph)
    mirrors = _mirrors(gm, model, modules) if model is not None else {}
    work = [n for n in graph.nodes if n.op not in ("placeholder", "output")]
    # outer modules first, so that an inner module's steps land inside the outer's
    plan = []
    for path, module in sorted(modules.items(), key=lambda kv: (kv[0].count(".") + bool(kv[0]), kv[0])):
        spans = _spans(work, path) if path else ([(work[0], work[-1])] if work else [])
        plan.append((path, module, spans))
    count = {p: 0 for p in modules}
    steps: dict[str, list[tuple[fx.Node, fx.Node]]] = {p: [] for p in modules}  # per module, per call: gather, wait
    for path, module, spans in plan:
        reshard = _reshards_after_forward(module)
        label = path.replace(".", "_") or "root"
        for first, last in spans:
            n = count[path]
            count[path] += 1
            suffix = f"_{n}" if n else ""
            stack = _stack_to(first, path) if path else {}
            # the outer module's steps already sit before ``first``: insert right before it
            with graph.inserting_before(first):
                gather = graph.create_node("call_function", FSDPStep("all_gather", module, path), (), {},
                                           name=f"{label}_all_gather{suffix}")
                gather.target.async_op = _async_unshard(module)
                wait = graph.create_node("call_function", FSDPStep("wait", module, path, mirrors.get(path, ())), (gather,), {},
                                         name=f"{label}_wait{suffix}")
            for node in (gather, wait):
                node.meta["nn_module_stack"] = dict(stack)
            steps[path].append((gather, wait))
            if reshard:
                with graph.inserting_after(last):
                    free = graph.create_node("call_function", FSDPStep("reshard", module, path, mirrors.get(path, ())), (), {},
                                             name=f"{label}_reshard{suffix}")
                free.meta["nn_module_stack"] = dict(stack)
    _apply_prefetch(graph, modules, steps)
    graph.lint()
    gm.recompile()
    return gm


def forward_prefetch(modules: dict[str, nn.Module]) -> dict[str, list[str]]:
    """Per module path: the modules whose all-gather FSDP issues in its pre-forward
    (``set_modules_to_forward_prefetch``; read from FSDP's state), by path, in FSDP's order."""
    by_state = {}
    for path, module in modules.items():
        by_state[id(module._get_fsdp_state())] = path  # type: ignore[operator]
    out: dict[str, list[str]] = {}
    for path, module in modules.items():
        states = getattr(module._get_fsdp_state(), "_states_to_forward_prefetch", None) or []  # type: ignore[operator]
        targets = [by_state[id(state)] for state in states if id(state) in by_state]
        if targets:
            out[path] = targets
    return out


def _async_unshard(module: nn.Module) -> bool:
    """FSDP's ``unshard_async_op`` for ``module`` (False unless set): a prefetched all-gather is
    issued with it, so that on the CPU (gloo) it runs at once, as in FSDP, unless set."""
    return any(bool(getattr(g, "unshard_async_op", False)) for g in _param_groups(module))


def _apply_prefetch(graph: fx.Graph, modules: dict[str, nn.Module], steps: dict[str, list[tuple[fx.Node, fx.Node]]]) -> None:
    """Where FSDP's forward prefetch is set, move each target's next all-gather to right after the
    prefetching module's wait, as FSDP issues it at the end of that module's pre-forward; the
    target's ``wait`` stays before its layer and shows what the layer still waited."""
    prefetch = forward_prefetch(modules)
    if not prefetch:
        return
    order = {node: i for i, node in enumerate(graph.nodes)}
    taken: set[fx.Node] = set()
    for path, targets in prefetch.items():
        for _, wait in steps[path]:
            cursor = wait
            for target in targets:
                later = [g for g, _ in steps[target] if order[g] > order[wait] and g not in taken]
                if not later:
                    continue
                gather = min(later, key=order.__getitem__)
                taken.add(gather)
                gather.target.async_op = _async_unshard(modules[target])  # type: ignore[union-attr]
                cursor.append(gather)
                cursor = gather


def async_gathers(modules: dict[str, nn.Module]) -> dict[str, bool]:
    """Per FSDP module path: whether FSDP issues its all-gathers asynchronously (its
    ``unshard_async_op``, False unless set): on the CPU, gloo runs a synchronous one inside the
    issue (:mod:`fxprof.core.overlap` reads this from ``meta["fsdp"]``)."""
    return {path: _async_unshard(module) for path, module in modules.items()}


@dataclasses.dataclass(frozen=True)
class FSDPNotes:
    """What a capture of an FSDP2 model notes in the profile's metadata (``meta["fsdp"]``, read by
    :mod:`fxprof.core.overlap`): per FSDP module path, whether its all-gathers are issued
    asynchronously (:func:`async_gathers`)."""

    unshard_async_op: dict[str, bool]

    @classmethod
    def of(cls, modules: dict[str, nn.Module]) -> "FSDPNotes":
        return cls(async_gathers(modules))

    def meta(self) -> dict[str, Any]:
        """The note as the metadata holds it."""
        return {"unshard_async_op": self.unshard_async_op}


def bypass_types() -> tuple[type, ...]:
    """The module classes whose hooks fxprof's tracer leaves out (FSDP's own are put back as nodes)."""
    cls = _fsdp_module_class()
    return (cls,) if cls is not None else ()



# ------------------------------------------------------------------ training steps (backward=True)
def param_groups_by_path(modules: dict[str, nn.Module]) -> list[tuple[str, Any]]:
    """``(path, group)`` for every FSDP parameter group of ``modules`` (:func:`fsdp_modules`)."""
    return [(path, group) for path, module in modules.items() for group in _param_groups(module)]


class TrainingSteps:
    """FSDP2's own work in a training step, each piece timed as a row, while FSDP's hooks run.

    In a training step (``backward=True``) FSDP's hooks run as they do in the model's own training:
    dynamo does not trace them (they are ``torch._dynamo.disable``-d), so each layer's graph runs
    between its pre- and post-forward hook, and the autograd hooks those forward hooks register run
    FSDP's backward work (the pre-backward all-gather, the post-backward reduce-scatter of the
    gradients, the root's final callback). What this class adds is the timing: for as long as it is
    entered, the methods of each FSDP parameter group that do that work are wrapped on the group
    object itself (instance attributes, deleted on exit; nothing global), and each call that does
    work becomes a row through ``clock``:

    ==================  =================================================================
    ``all_gather``      ``unshard``: the all-gather issued (forward, backward, prefetch)
    ``wait``            ``wait_for_unshard``: its wait and FSDP's copy-out
    ``reshard``         ``reshard``: the gathered parameters freed (after forward, and after
                        backward where it is not inside the post-backward row)
    ``reduce_scatter``  ``post_backward``: the gradients reduce-scattered onto the shards
                        (with the reshard after backward inside it)
    ``accumulate``      ``post_backward`` with gradient sync off
                        (``set_requires_gradient_sync(False)``: a microbatch of gradient
                        accumulation): the gradients kept unsharded, nothing communicated; a
                        row of its own, so that the reduce-scatter's median is over real
                        reduce-scatters only
    ==================  =================================================================

    A call that does nothing (an all-gather of parameters already gathered or already issued by a
    prefetch, a wait with nothing pending, the root's reshard after forward, which FSDP skips, the
    post-backward of a group none of whose parameters got a gradient: a frozen block) is not a
    row. Rows are named ``<layer>_<step>`` (``_1``, ``_2``... for a layer's later calls in the
    same phase) and charged to the FSDP module's path. ``pre_forward``/``post_forward`` are wrapped
    too, untimed, to know which FSDP module's forward is running (:attr:`running`).

    ``clock`` has ``start() -> token``, ``end(token) -> end`` (the end marks, taken as FSDP's
    method returns) and ``stop(token, end, name, kind, path, phase)``; ``phase()``
    says ``forward`` or ``backward``. Private parts of FSDP2 used (torch 2.11 and later): the
    parameter group's methods above, ``is_unsharded`` and ``_all_gather_result``.
    """

    WRAPPED = ("pre_forward", "post_forward", "unshard", "wait_for_unshard", "reshard", "post_backward")

    def __init__(self, modules: dict[str, nn.Module], clock: Any, phase: Any):
        self.groups = param_groups_by_path(modules)
        self.clock = clock
        self.phase = phase
        #: paths of the FSDP modules whose forward is running, outermost first
        self.running: list[str] = []
        self._depth = 0
        self._calls: dict[tuple[str, str, str], int] = {}

    def new_run(self) -> None:
        """Count each layer's calls from 0 again (one training step)."""
        self._calls.clear()

    def __enter__(self) -> "TrainingSteps":
        taken = [(path, name) for path, group in self.groups for name in self.WRAPPED if name in vars(group)]
        if taken:  # another profile's wrappers, or someone's own: neither is ours to replace or remove
            raise RuntimeError(f"FSDP parameter group of {taken[0][0] or 'the root'} already has its own {taken[0][1]} "
                               f"attribute; fxprof cannot time FSDP's steps on it")
        for path, group in self.groups:
            for name in self.WRAPPED:
                setattr(group, name, self._wrap(path, group, name, getattr(group, name)))
        return self

    def __exit__(self, *exc: Any) -> None:
        for _, group in self.groups:
            for name in self.WRAPPED:
                vars(group).pop(name, None)
        self.running.clear()
        self._depth = 0

    def _wrap(self, path: str, group: Any, name: str, method: Any) -> Any:
        if name == "pre_forward":
            def pre_forward(*args: Any, **kwargs: Any) -> Any:
                self.running.append(path)
                return method(*args, **kwargs)
            return pre_forward
        if name == "post_forward":
            def post_forward(*args: Any, **kwargs: Any) -> Any:
                try:
                    return method(*args, **kwargs)
                finally:
                    if self.running and self.running[-1] == path:
                        self.running.pop()
            return post_forward
        step = {"unshard": "all_gather", "wait_for_unshard": "wait", "reshard": "reshard",
                "post_backward": "reduce_scatter"}[name]

        def timed(*args: Any, **kwargs: Any) -> Any:
            if self._depth or not self._does_work(group, step):
                return method(*args, **kwargs)
            was_unsharded = group.is_unsharded
            syncs = bool(getattr(group, "reduce_grads", True))  # gradient sync on: a reduce-scatter, else accumulation
            self._depth += 1
            try:
                token = self.clock.start()
                out = method(*args, **kwargs)
                end = self.clock.end(token)  # first: the bookkeeping below is not FSDP's time
                if step != "reshard" or (was_unsharded and not group.is_unsharded):  # FSDP may skip a reshard
                    self._stop(token, end, path, "accumulate" if step == "reduce_scatter" and not syncs else step)
                return out
            finally:
                self._depth -= 1
        return timed

    @staticmethod
    def _does_work(group: Any, step: str) -> bool:
        if step == "all_gather":
            return not group.is_unsharded and getattr(group, "_all_gather_result", None) is None
        if step == "wait":
            return getattr(group, "_all_gather_result", None) is not None
        if step == "reshard":
            return bool(group.is_unsharded)
        if step == "reduce_scatter":
            return _has_gradients(group)
        return True

    def _stop(self, token: Any, end: Any, path: str, step: str) -> None:
        phase = self.phase()
        key = (path, step, phase)
        n = self._calls.get(key, 0)
        self._calls[key] = n + 1
        label = path.replace(".", "_") or "root"
        self.clock.stop(token, end, f"{label}_{step}{f'_{n}' if n else ''}", step, path, phase)


def _has_gradients(group: Any) -> bool:
    """Whether FSDP's post-backward of ``group`` has gradients to reduce-scatter (or to keep, with
    gradient sync off): a parameter gathered this step with a gradient (or one accumulated by an
    earlier microbatch), as FSDP's own ``post_backward`` decides; none for a frozen block."""
    unused = bool(getattr(group, "reduce_scatter_unused_params", False))
    for fp in getattr(group, "fsdp_params", ()):
        unsharded = vars(fp).get("_unsharded_param")
        if unsharded is None:
            continue
        if getattr(fp, "unsharded_accumulated_grad", None) is not None or unsharded.grad is not None:
            return True
        if unused and unsharded.requires_grad:
            return True
    return False


def _within(scope: str, path: str) -> bool:
    return not path or scope == path or scope.startswith(path + ".")


def compute_outside_graphs(modules: dict[str, nn.Module], scopes: set[str]) -> list[str]:
    """The FSDP modules (by path, ``(root)`` for the root, with the submodules that hold those
    parameters) that hold parameters of their own (not
    of an FSDP module inside them) but none of whose ``scopes`` (those of the timed forward
    nodes) lies in them outside their inner FSDP modules: their layers' compute ran outside every
    graph (dynamo skipped the frame: a graph break it could not resume from, such as one inside a
    loop)."""
    out = []
    for path, module in modules.items():
        inner = [p for p in modules if p != path and _within(p, path)]
        own = [name for name, _ in module.named_parameters()
               if not any(_within(f"{path}.{name}" if path else name, p) for p in inner)]
        if not own:
            continue
        if not any(_within(s, path) and not any(_within(s, p) for p in inner) for s in scopes):
            owners = sorted({name.rpartition(".")[0] for name in own} - {""})
            out.append((path or "(root)") + (f" ({', '.join(owners)})" if owners else ""))
    return out
