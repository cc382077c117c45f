"""Static facts about graph nodes, read from the graph once (never on the timed path).

A :class:`NodeInfo` is keyed by the fx node name (unique within a graph) and holds what a
reader needs to place a node: its op, a readable target, the class of the module it calls,
its module scope and its innermost ``record_function`` range.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from torch import fx

from .tracer import RANGE_ENTER_TARGETS, RANGE_EXIT_TARGETS

__all__ = ["NodeInfo", "describe_graph", "target_name"]


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
    """

    name: str
    op: str
    target: str
    module_type: str
    scope: str
    range: str


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
            )
        )
    return infos
