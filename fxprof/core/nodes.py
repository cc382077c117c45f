"""What fxprof knows about a node before running it, as plain data (no torch).

A :class:`NodeInfo` is keyed by the fx node name (unique within a graph). The measurement layer
reads these facts from the graph (:func:`fxprof.measure.capture.graph.describe_graph`); files store them;
tables show them.
"""

from __future__ import annotations

import dataclasses

from ..vocab import MODEL, SCOPE_SOURCES

__all__ = ["NodeInfo", "SCOPE_SOURCES"]


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
        graph: which captured graph the node belongs to (``g0``, ``g1``... when a model is
            captured in several pieces, e.g. by ``capture="dynamo"`` at graph breaks); "" when
            there is one graph.
        scope_source: how ``scope`` was found: ``recorded``, ``frame``, ``inferred`` or ""
            (see :data:`SCOPE_SOURCES`).
        phase: the part of a training step the node belongs to: ``forward``, ``loss``,
            ``backward`` or ``optimizer`` (see :mod:`fxprof.measure.capture.training`); ``forward`` when only
            the forward pass is profiled.
        forward_node: for a backward node, the forward node it differentiates (the one with
            the same autograd ``seq_nr``); else "".
        origins: for a kernel of a compiled model (:mod:`fxprof.core.compiled`), the nodes of
            the eager (dynamo) graph it computes, comma separated; else "".
        raw_name: the name the node had where it came from, when fxprof gave it a readable one
            (a generated kernel's profiler range, ``graph_0_cpp_fused_add_relu_0``); else "".
        role: what the row is (:data:`fxprof.vocab.ROLES`): ``model``, ``plumbing``, ``range``,
            ``collective``, ``fsdp``, ``tp``, ``ddp``, ``optimizer``, ``kernel``, ``unmatched``,
            ``graph_break`` or ``outside``; set by the code that makes the row, read by the
            analyses in place of the target's text.
    """

    name: str
    op: str
    target: str
    module_type: str
    scope: str
    range: str
    kind: str = ""
    graph: str = ""
    scope_source: str = ""
    phase: str = "forward"
    forward_node: str = ""
    origins: str = ""
    raw_name: str = ""
    role: str = MODEL
