"""Static facts about graph nodes, read from the graph once (never on the timed path).

A :class:`NodeInfo` is keyed by the fx node name (unique within a graph) and holds what a
reader needs to place a node: its op, a readable target, the class of the module it calls,
its module scope and its innermost ``record_function`` range.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

import torch
from torch import fx

from .tracer import RANGE_ENTER_TARGETS, RANGE_EXIT_TARGETS

__all__ = ["NodeInfo", "describe_graph", "target_name", "op_kind"]


@dataclasses.dataclass(frozen=True)
class NodeInfo:
    """What fxprof knows about a node before running it.

    Attributes:
        name: the fx node name (unique in its graph).
        op: ``placeholder``, ``get_attr``, ``call_module``, ``call_function``,
            ``call_method`` or ``output``.
        target: the target as text: a module path (``layer1.0.conv1``), a qualified function
            (``operator.add``, ``torch.flatten``), a method name (``size``) or an attribute path.
        module_type: the class name of the called module for ``call_module`` nodes, else "".
        scope: the path of the innermost module the node runs in (``layer1.0`` for the
            residual add of a BasicBlock, ``layer1.0.conv1`` for that conv); "" at the root.
        range: the innermost ``record_function`` label the node runs under, else "".
        kind: the operation, the same whether it came from a module or a function: a
            ``Conv2d`` module, ``torch.conv2d``, ``F.conv2d`` and ``aten.conv2d.default`` are
            all ``conv2d``; ``operator.add``, ``x.add_`` and ``aten.add.Tensor`` are ``add``.
    """

    name: str
    op: str
    target: str
    module_type: str
    scope: str
    range: str
    kind: str = ""


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


def _scope(node: fx.Node) -> str:
    stack = node.meta.get("nn_module_stack")
    if stack:
        path = list(stack.values())[-1]
        if isinstance(path, (tuple, list)):
            path = path[0]
        return str(path)
    if node.op == "call_module":
        return str(node.target)
    return ""


def _module_type(gm: fx.GraphModule, node: fx.Node) -> str:
    if node.op != "call_module":
        return ""
    try:
        return type(gm.get_submodule(str(node.target))).__name__
    except AttributeError:
        return ""


def _range_label(node: fx.Node) -> str:
    name: Any = node.args[0] if node.args else node.kwargs.get("name", "")
    return str(name)


def describe_graph(gm: fx.GraphModule) -> list[NodeInfo]:
    """One :class:`NodeInfo` per node of ``gm``, in graph order."""
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
        infos.append(
            NodeInfo(
                name=node.name,
                op=node.op,
                target=target_name(node),
                module_type=_module_type(gm, node),
                scope=_scope(node),
                range=current,
                kind=op_kind(gm, node),
            )
        )
    return infos
