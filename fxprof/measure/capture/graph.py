"""Static facts about graph nodes, read from the graph once (never on the timed path).

A :class:`NodeInfo` is keyed by the fx node name (unique within a graph) and holds what a
reader needs to place a node: its op, a readable target, the class of the module it calls,
its module scope and its innermost ``record_function`` range.
"""

from __future__ import annotations

import re
from typing import Any, Callable

import torch
from torch import fx

from ...core.names import lifted_weight
from ...core.nodes import NodeInfo
from ...vocab import COLLECTIVE, COLLECTIVE_KINDS, COLLECTIVE_NAMESPACES, MODEL, PLUMBING, RANGE, SCOPE_SOURCES
from .tracer import RANGE_ENTER_TARGETS, RANGE_EXIT_TARGETS

__all__ = ["NodeInfo", "ModulePaths", "describe_graph", "target_name", "op_kind", "node_role", "normalize_scope", "infer_scopes", "SCOPE_SOURCES",
           "module_kinds", "readable_node_names"]



def _is_collective(node: fx.Node) -> bool:
    """Whether ``node`` calls a torch.distributed collective, read from the target itself."""
    target = node.target
    if node.op == "call_method":
        return target in ("wait", "wait_tensor")  # an AsyncCollectiveTensor's wait
    if node.op != "call_function":
        return False
    namespace = getattr(target, "namespace", None)  # an OpOverload
    if namespace is None and isinstance(getattr(target, "_qualified_op_name", None), str):  # an OpOverloadPacket
        namespace = target._qualified_op_name.split("::")[0]  # type: ignore[union-attr]
    if namespace in COLLECTIVE_NAMESPACES:
        return True
    module = getattr(target, "__module__", None) or ""
    return module.startswith("torch.distributed") and getattr(target, "__name__", "") in COLLECTIVE_KINDS


def node_role(node: fx.Node, kind: str) -> str:
    """What the row of ``node`` is (:data:`fxprof.vocab.ROLES`), from the node and its target:
    a step fxprof put in the graph says its own (``fxprof_role``: FSDP's, tensor parallelism's)."""
    if node.op in ("placeholder", "get_attr", "output") or kind == "guards_fn":
        return PLUMBING
    if node.op == "call_function" and (node.target in RANGE_ENTER_TARGETS or node.target in RANGE_EXIT_TARGETS):
        return RANGE
    own = getattr(node.target, "fxprof_role", None) if node.op == "call_function" else None
    if isinstance(own, str):
        return own
    return COLLECTIVE if _is_collective(node) else MODEL


def target_name(node: fx.Node) -> str:
    """A readable, stable name for a node's target."""
    target = node.target
    if node.op == "call_function":
        try:
            from torch.fx.node import _get_qualified_name

            name = _get_qualified_name(target)
            return "operator." + name[len("_operator."):] if name.startswith("_operator.") else name
        except Exception:  # targets without a module (lambdas, some builtins)
            return getattr(target, "__name__", None) or str(target)
    return str(target)


# Module classes whose functional name is not their snake-cased class name.
_MODULE_KINDS = {
    "ReLU": "relu", "ReLU6": "relu6", "LeakyReLU": "leaky_relu", "PReLU": "prelu", "GELU": "gelu",
    "SiLU": "silu", "ELU": "elu", "SELU": "selu", "CELU": "celu", "GLU": "glu", "Mish": "mish",
    "BatchNorm1d": "batch_norm", "BatchNorm2d": "batch_norm", "BatchNorm3d": "batch_norm",
    "SyncBatchNorm": "batch_norm", "FrozenBatchNorm2d": "batch_norm",
    "InstanceNorm1d": "instance_norm", "InstanceNorm2d": "instance_norm", "InstanceNorm3d": "instance_norm",
    "MultiheadAttention": "multi_head_attention", "Upsample": "interpolate",
    "Softmax2d": "softmax", "LogSoftmax": "log_softmax", "Identity": "identity",
}
# Function names that mean the same operation as another.
_FUNCTION_ALIASES = {
    "iadd": "add", "radd": "add", "isub": "sub", "imul": "mul", "rmul": "mul", "itruediv": "div",
    "truediv": "div", "floordiv": "floor_divide", "_record_function_enter_new": "record_function",
    "_record_function_enter": "record_function", "_record_function_exit": "record_function",
}


def _snake(name: str) -> str:
    name = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", name)
    name = re.sub(r"(?<=[A-Z])(?=[A-Z][a-z])", "_", name)
    return re.sub(r"_(\d)", r"\1", name.lower())


def op_kind(gm: fx.GraphModule | None, node: fx.Node) -> str:
    """The operation a node performs, independent of how it is called (see NodeInfo.kind)."""
    if node.op == "placeholder" and (weight := lifted_weight(str(node.target))) is not None:
        return weight[0]  # a parameter or buffer dynamo lifted into a graph input
    if node.op in ("placeholder", "output", "get_attr"):
        return node.op
    if node.op == "call_module":
        cls = _module_type(gm, node) if gm is not None else ""
        return _MODULE_KINDS.get(cls) or (_snake(cls) if cls else "module")
    if node.op == "call_method":
        name = str(node.target)
    else:
        target = node.target
        name = getattr(target, "__name__", None) or str(target)
        if isinstance(target, torch._ops.OpOverload):  # aten.add.Tensor -> add
            name = target._schema.name.split("::")[-1]
        elif isinstance(target, torch._ops.OpOverloadPacket):
            name = target._qualified_op_name.split("::")[-1]
        name = name.split(".")[-1]
    if name.endswith("_") and not name.startswith("_"):  # in-place variants: add_ -> add
        name = name[:-1]
    return _FUNCTION_ALIASES.get(name, name)


#: the root of a frame dynamo compiled, as its module paths spell it: ``L['self']`` (a module's ``forward``),
#: ``L['fn'].__self__`` (a bound ``forward`` compiled as a function: fxprof.session's, FSDP2's modules)
_ROOT_PREFIX = re.compile(r"""^(?:L\[['"]self['"]\]|L__self__|self|L\[['"]fn['"]\]\.__self__|L__fn___self__)(?:\.|$)""")


def frame_root(path: str) -> bool:
    """Whether a dynamo module path starts at the root of the frame dynamo compiled (``L['self'].fc``,
    ``L['fn'].__self__.0``), not at another of its locals (``L['s'].fc``, ``L['___stack0']``: a
    frame resumed after a graph break names its locals so)."""
    return bool(_ROOT_PREFIX.match(str(path)))


def normalize_scope(path: str) -> str:
    """A module path as ``named_modules()`` spells it, from any capture's spelling.

    ``L['self'].layer1.0`` and ``L['self'].layer1._modules['0']`` (dynamo) and
    ``layer1.0`` (symbolic trace, export) all become ``layer1.0``; the root is "".
    """
    path = str(path)
    while True:  # getattr(L['self'].blocks, '0') -> L['self'].blocks.0
        unwrapped = re.sub(r"""^getattr\((.*), ['"]([^'"]+)['"]\)""", r"\1.\2", path, count=1)
        if unwrapped == path:
            break
        path = unwrapped
    path = _ROOT_PREFIX.sub("", path)
    return ".".join(_path_parts(path))


def _path_parts(path: str) -> list[str]:
    """The names in a dynamo-spelled path after its root: ``a.b``, ``_modules['0']``,
    ``['0']``, ``_modules["q'uote"]`` (a Python string literal, read with ``ast.literal_eval``)
    and attribute names dynamo wrote with escapes (``a\\nb`` for a name holding a newline; a
    module name can hold anything but a dot)."""
    import ast

    parts: list[str] = []
    i = 0
    while i < len(path):
        if path[i] == ".":
            i += 1
            continue
        if path[i] == "[":
            end = path.find("]", i)
            while end != -1:  # the first ']' that closes a whole literal (a name may hold ']')
                text = path[i + 1:end]
                try:
                    value = ast.literal_eval(text) if text[:1] in "'\"" else text
                except (ValueError, SyntaxError):
                    end = path.find("]", end + 1)
                    continue
                break
            if end == -1:  # not a subscript after all: the rest is one name
                parts.append(path[i:])
                break
            if parts and parts[-1] in ("_modules", "_parameters", "_buffers"):
                parts.pop()  # _modules['0'] is the submodule '0'
            parts.append(str(value))
            i = end + 1
            continue
        end = i
        while end < len(path) and path[end] not in ".[":
            end += 1
        parts.append(_unescape(path[i:end]))
        i = end
    return [p for p in parts if p]


def _unescape(name: str) -> str:
    r"""``a\nb`` -> ``a`` newline ``b``, ``r\u202etl`` -> ``r`` U+202E ``tl``: dynamo writes names escaped."""
    if "\\" not in name:
        return name
    import codecs

    try:
        return codecs.decode(name.encode("latin-1", "backslashreplace"), "unicode_escape")
    except (UnicodeDecodeError, UnicodeEncodeError):
        return name


class ModulePaths:
    """A model's modules by identity, to read a module-stack entry as one of the model's own paths.

    Dynamo keys each entry of ``nn_module_stack`` by the called module's ``id`` (``"1403..."``,
    ``"1403...@1"`` for its second call; torch/_dynamo/variables/nn_module.py) and gives its class,
    so the module is found whatever name the compiled frame gave it (``L['fn'].__self__.0`` in a
    compiled bound ``forward``, ``L['___stack0']`` or a block's own ``L['s']`` in a frame resumed
    after a graph break). The module found is the one dynamo traced: a graph reused by an identical
    module (the next block) still names the first. A ``DistributedDataParallel`` wrapper's paths
    are its module's own (``layers.0``, not ``module.layers.0``)."""

    def __init__(self, root: torch.nn.Module):
        import sys

        ddp = sys.modules.get("torch.nn.parallel.distributed")
        #: the wrapper's attribute holding the model, which the text of a path may still start with
        self.wrapper = ""
        if ddp is not None and isinstance(root, ddp.DistributedDataParallel):
            root, self.wrapper = root.module, "module"
        self.by_id: dict[int, tuple[str, type]] = {}
        self.by_type: dict[type, list[str]] = {}
        for path, module in root.named_modules(remove_duplicate=False):
            self.by_id.setdefault(id(module), (path, type(module)))
            self.by_type.setdefault(type(module), []).append(path)
        #: id(module) -> path, as :func:`fxprof.measure.capture.dynamo.frame_module_paths` takes it
        self.ids = {ident: path for ident, (path, _) in self.by_id.items()}
        self.paths = {path for path, _ in self.by_id.values()} | {p for ps in self.by_type.values() for p in ps}

    def of(self, key: Any, cls: Any) -> str | None:
        """The path of the module an entry's key names by ``id``, when it is a module of the model of
        the entry's class; None otherwise (another key, or a module the model does not hold)."""
        ident = str(key).partition("@")[0]
        if not ident.isdigit() or int(ident) not in self.by_id:
            return None
        path, kind = self.by_id[int(ident)]
        return path if cls is None or _same_class(cls, kind) else None

    def of_type(self, cls: Any, tail: str = "") -> str | None:
        """The path of the one module of the model of this class whose path ends in ``tail``
        (``w_in``: ``block.w_in``); None when none or several are."""
        found = {p for kind, paths in self.by_type.items() if cls is not None and _same_class(cls, kind) for p in paths
                 if not tail or p == tail or p.endswith("." + tail)}
        return found.pop() if len(found) == 1 else None

    def clamp(self, path: str) -> str:
        """The longest prefix of ``path`` that is a module of the model ("" the root)."""
        parts = path.split(".") if path else []
        if self.wrapper and parts[:1] == [self.wrapper] and path not in self.paths:
            parts = parts[1:]
        while parts and ".".join(parts) not in self.paths:
            parts.pop()
        return ".".join(parts)


def _same_class(cls: Any, kind: type) -> bool:
    """A stack entry's class (a class, or its name as export writes it) is ``kind``."""
    if isinstance(cls, type):
        return cls is kind
    name = str(cls)
    return name in (kind.__name__, kind.__qualname__, f"{kind.__module__}.{kind.__qualname__}")


def _stack(node: fx.Node, resolve: Callable[[str], str] = normalize_scope) -> list[tuple[str, Any]]:
    stack = node.meta.get("nn_module_stack") or {}
    out = []
    for value in stack.values():
        path, cls = (value[0], value[1]) if isinstance(value, (tuple, list)) and len(value) > 1 else (value, None)
        out.append((resolve(path), cls))
    return out


def _scope(node: fx.Node, resolve: Callable[[str], str] = normalize_scope) -> str:
    stack = _stack(node, resolve)
    if stack:
        return stack[-1][0]
    if node.op == "call_module":
        return str(node.target)
    return ""


def _parent(path: str) -> str:
    return path.rpartition(".")[0]


def _common(a: str, b: str) -> str:
    parts = []
    for x, y in zip(a.split(".") if a else [], b.split(".") if b else []):
        if x != y:
            break
        parts.append(x)
    return ".".join(parts)


def _param_owners(gm: fx.GraphModule, node: fx.Node) -> list[str]:
    """Modules owning the parameters a node reads through ``get_attr`` (``layer1.0.conv1``)."""
    owners = []
    for arg in node.all_input_nodes:
        if arg.op == "get_attr" and "." in str(arg.target):
            owner = _parent(str(arg.target))
            try:
                gm.get_submodule(owner)
            except AttributeError:
                continue
            owners.append(owner)
    return owners


_MODULE_CALL = re.compile(r'File "[^"]*nn[/\\]modules[/\\]module\.py", line \d+, in _call_impl')


def _call_depth(node: fx.Node) -> int | None:
    """How many module calls deep the node was created, from its ``stack_trace`` (kept by
    some passes, e.g. ``convert_fx``): one ``Module._call_impl`` frame per module entered
    below the root. None without such frames."""
    depth = len(_MODULE_CALL.findall(node.meta.get("stack_trace") or ""))
    return depth or None


def infer_scopes(gm: fx.GraphModule) -> dict[str, str]:
    """Scopes of the functional nodes of a graph that carries no module metadata.

    Graphs from ``create_feature_extractor``, ``convert_fx`` and other passes keep the
    modules they call (``call_module`` nodes) but no ``nn_module_stack`` on functions. A
    function is placed from its neighbours: the module that holds the node feeding it last
    (in graph order) and the module that holds the node consuming it first. When one holds the
    other, the outer one is the answer (a residual ``add`` after a block's ``downsample`` is in
    the block); when they are sibling blocks, the node finishes the block that fed it (a fused
    ``add_relu`` at the end of ``layer1.0`` is followed by ``layer1.1``). Where the node kept
    a ``stack_trace`` (``convert_fx`` keeps it), the number of module calls in it says how
    deep the node sits, and that prefix of the feeding module's path is the answer. A function reading a parameter through
    ``get_attr`` (``layer1.0.conv1.weight``) is in that parameter's module.
    Returns ``{node name: scope}`` for functional nodes ("" is the root).
    """
    nodes = list(gm.graph.nodes)
    order = {n: i for i, n in enumerate(nodes)}
    functional = ("call_function", "call_method")
    own: dict[fx.Node, str] = {}  # functions placed by the parameters they read
    for n in nodes:
        if n.op in functional:
            owners = _param_owners(gm, n)
            if owners:
                common = owners[0]
                for other in owners[1:]:
                    common = _common(common, other)
                own[n] = common

    def context(n: fx.Node) -> str | None:  # the module a neighbour sits in, if it says
        if n.op == "call_module":
            return _parent(str(n.target))
        if n in own:
            return _parent(own[n])
        if n.op in ("placeholder", "output"):
            return ""
        return None

    up: dict[fx.Node, str | None] = {}
    for n in nodes:
        up[n] = context(n)
        if up[n] is None and n.op in functional:
            fed = [a for a in n.all_input_nodes if up.get(a) is not None]
            up[n] = up[max(fed, key=order.__getitem__)] if fed else None
    down: dict[fx.Node, str | None] = {}
    for n in reversed(nodes):
        down[n] = context(n)
        if down[n] is None and n.op in functional:
            users = [u for u in n.users if down.get(u) is not None]
            down[n] = down[min(users, key=order.__getitem__)] if users else None
    scopes: dict[str, str] = {}
    for n in nodes:
        if n.op not in functional:
            continue
        if n in own:
            scopes[n.name] = own[n]
            continue
        a, b = up[n], down[n]
        depth = _call_depth(n)
        known = [p for p in (a, b) if p is not None and len(p.split(".")) >= (depth or 0) and p]
        if depth is not None and known:
            scopes[n.name] = ".".join(known[0].split(".")[:depth])
        elif a is None or b is None:
            scopes[n.name] = (a if a is not None else b) or ""
        else:
            common = _common(a, b)
            if common in (a, b):
                scopes[n.name] = common
            else:  # sibling blocks: the end of the block that fed it, at the consumer's depth
                depth = max(len(b.split(".")), len(common.split(".")) + 1 if common else 1)
                scopes[n.name] = ".".join(a.split(".")[:depth])
    return scopes


def is_torch_nn_leaf(cls: Any) -> bool:
    """Would symbolic tracing keep this module class as one call_module node?"""
    qualname = cls if isinstance(cls, str) else f"{getattr(cls, '__module__', '')}.{getattr(cls, '__name__', '')}"
    module, _, name = qualname.rpartition(".")
    return (module.startswith("torch.nn.") or module == "torch.nn") and name not in ("Sequential", "ModuleList", "ModuleDict")


def _module_type(gm: fx.GraphModule | None, node: fx.Node) -> str:
    """The class of the module that performs the node.

    For ``call_module`` nodes, the called module. Captures without ``call_module`` nodes
    (dynamo, export) run a ``Conv2d`` as a ``conv2d`` function inside the ``Conv2d``'s scope:
    such a node gets the class of its innermost module when that is a ``torch.nn`` leaf, which
    is what symbolic tracing would have shown.
    """
    if node.op == "call_module":
        if gm is not None:
            try:
                return type(gm.get_submodule(str(node.target))).__name__
            except AttributeError:
                pass
        return ""
    if node.op in ("call_function", "call_method"):
        stack = _stack(node)
        if stack and stack[-1][1] is not None and is_torch_nn_leaf(stack[-1][1]):
            cls = stack[-1][1]
            return cls.rpartition(".")[2] if isinstance(cls, str) else cls.__name__
    return ""


def _range_label(node: fx.Node) -> str:
    name: Any = node.args[0] if node.args else node.kwargs.get("name", "")
    return str(name)


def describe_graph(
    gm: fx.GraphModule,
    graph: str = "",
    prefix: str | None = None,
    resolve: Callable[[str], str] | None = None,
    frame_scope: str = "",
    infer: bool = True,
) -> list[NodeInfo]:
    """One :class:`NodeInfo` per node of ``gm``, in graph order.

    With ``graph`` (``"g1"``), node names are prefixed ``"g1:"`` (or ``prefix``) so that the
    nodes of several graphs stay unique in one profile. ``resolve`` turns a module path as
    the graph's ``nn_module_stack`` spells it into one of the model's own paths (default:
    :func:`normalize_scope`); ``frame_scope`` is the scope of functions that have no module
    stack (dynamo: the module whose ``forward`` was running). With ``infer``, a graph whose
    functions carry no module stack at all (one made by another tool) gets their scopes
    inferred (:func:`infer_scopes`); fxprof's own captures record every stack, so they pass
    ``infer=False`` (a function with no stack there is at the root).
    """
    if prefix is None:
        prefix = f"{graph}:" if graph else ""
    resolve = resolve or normalize_scope
    functional = ("call_function", "call_method")
    lost = infer and not any(n.meta.get("nn_module_stack") for n in gm.graph.nodes if n.op in functional)
    inferred = infer_scopes(gm) if lost else {}
    infos: list[NodeInfo] = []
    open_ranges: list[tuple[fx.Node, str]] = []  # (enter node, label), innermost last
    for node in gm.graph.nodes:
        if node.op == "call_function" and node.target in RANGE_ENTER_TARGETS:
            open_ranges.append((node, _range_label(node)))
            current = open_ranges[-1][1]
        elif node.op == "call_function" and node.target in RANGE_EXIT_TARGETS:
            handle = node.args[0] if node.args else None
            current = open_ranges[-1][1] if open_ranges else ""
            for i in range(len(open_ranges) - 1, -1, -1):
                if open_ranges[i][0] is handle:
                    current = open_ranges[i][1]
                    del open_ranges[i]
                    break
        else:
            current = open_ranges[-1][1] if open_ranges else ""
        scope = _scope(node, resolve)
        source = "recorded" if scope else ""
        if not scope and node.op in functional:
            if node.name in inferred and inferred[node.name]:
                scope, source = inferred[node.name], "inferred"
            elif frame_scope:
                scope, source = frame_scope, "frame"
        infos.append(
            NodeInfo(
                name=prefix + node.name,
                op=node.op,
                target=target_name(node),
                module_type=_module_type(gm, node),
                scope=scope,
                range=current,
                kind=(kind := op_kind(gm, node)),
                graph=graph,
                scope_source=source,
                role=node_role(node, kind),
            )
        )
    return infos


def module_kinds(root: torch.nn.Module) -> dict[str, str]:
    """Module path -> the op the module performs when it is one node (``conv2d`` for a
    ``Conv2d``, ``relu`` for a ``ReLU``): the ``torch.nn`` leaves of ``root``."""
    out = {}
    for path, module in root.named_modules():
        cls = type(module)
        if path and is_torch_nn_leaf(cls):
            out[path] = _MODULE_KINDS.get(cls.__name__) or _snake(cls.__name__)
    return out


def readable_node_names(nodes: list[NodeInfo], root: torch.nn.Module | None) -> dict[str, str]:
    """``{name: readable}`` for nodes named by dynamo's value names (``g0:out_49``): from the
    module path and op, unique over all the graphs (``layer4_1_conv1``, ``layer1_0_add``,
    ``flatten``); see :func:`fxprof.core.compiled.readable_names`."""
    from ...core.compiled import readable_names

    return readable_names(nodes, module_kinds(root) if root is not None else {})
