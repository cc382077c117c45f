"""FLOPs of a compiled model's kernels: each eager node's FLOPs counted on its dynamo graph
(the graph before inductor, on fake tensors), carried to the kernels through inductor's
provenance, and said where they are missing.

``torch.utils.flop_counter.FlopCounterMode`` counts the dynamo graph node by node on fake
tensors (:func:`graph_flops`): they keep their device, so a graph that moves a tensor to the
real device (``embed_pos.to(cpu)``) counts, and each op dispatches as on that device, the kernels
the eager model's ``FlopCounterMode`` sees (``meta`` tensors failed on such moves, ``Cannot copy
out of meta tensor``, and took the math attention's matrix products where the CPU runs flash
attention, which FlopCounterMode does not count). :func:`kernel_flops` gives each node's FLOPs
to one kernel that computes it; :func:`missing_flops_notes` says which rows lack FLOPs and why.
"""

from __future__ import annotations

from typing import Any, Mapping

import torch
from torch import fx

from ...core.compiled import Kernel
from ...core.nodes import NodeInfo

__all__ = ["graph_flops", "kernel_flops", "missing_flops_notes", "custom_ops", "custom_op_note"]


class _FlopInterpreter(fx.Interpreter):
    """Runs each node once under ``FlopCounterMode``, keeping its FLOPs."""

    def __init__(self, gm: fx.GraphModule):
        super().__init__(gm)
        from torch.utils.flop_counter import FlopCounterMode

        self.counter = FlopCounterMode(display=False)
        self.flops: dict[str, int] = {}

    def run_node(self, n: fx.Node) -> Any:
        with self.counter:  # entering clears its counts: what it holds after is this node's
            result = super().run_node(n)
        self.flops[n.name] = int(self.counter.get_total_flops())
        return result


def graph_flops(gm: fx.GraphModule, example_inputs: list) -> tuple[dict[str, int | None], str]:
    """FLOPs per node of a dynamo graph, counted on fake tensors shaped like dynamo's example
    inputs (no real work), and ``""``; or ``({}, why)`` when the graph does not run on them
    (a data-dependent op, an op without a fake implementation)."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    try:
        mode = FakeTensorMode(allow_non_fake_inputs=True)
        inputs = tuple(mode.from_tensor(t) if isinstance(t, torch.Tensor) else t for t in example_inputs)
        interpreter = _FlopInterpreter(gm)
        with mode:
            interpreter.run(*inputs)
        return dict(interpreter.flops), ""
    except Exception as e:  # the count is a side view: its failure is reported, never the profile's
        text = str(e).strip().splitlines()[0] if str(e).strip() else ""
        return {}, f"{type(e).__name__}: {text}"[:200]


#: op namespaces whose ops FlopCounterMode knows (a formula, or none needed) or decomposes
_KNOWN_NAMESPACES = ("aten", "prims", "higher_order", "_c10d_functional", "c10d_functional", "profiler", "inductor")


def custom_ops(gm: fx.GraphModule) -> dict[str, int]:
    """The custom ops a dynamo graph calls (``transformers::grouped_mm_fallback``, the experts'
    matmuls of transformers' mixtures of experts), with their calls: FlopCounterMode has no
    formula for them and does not look inside, so their arithmetic is in no count, eager or
    compiled."""
    found: dict[str, int] = {}
    for n in gm.graph.nodes:
        if n.op != "call_function":
            continue
        name = getattr(n.target, "name", None)
        text = name() if callable(name) else str(getattr(n.target, "_qualified_op_name", "") or "")
        if "::" in text and text.split("::")[0] not in _KNOWN_NAMESPACES:
            text = text.split(".")[0]
            found[text] = found.get(text, 0) + 1
    return found


def kernel_flops(kernels: list[Kernel], rows: list[NodeInfo], flops: Mapping[str, Mapping[str, int | None]]
                 ) -> tuple[dict[str, int], dict[str, list[str]]]:
    """Each kernel row's FLOPs, the sum of its origins', and per graph the nodes with FLOPs that
    no kernel computes (their FLOPs are on no row).

    An origin that several kernels share is counted once: to an extern call rather than a
    generated kernel (a convolution and the layout copy of its input: the library op does the
    arithmetic), and among those to the one with the fewest origins, the most specific
    (inductor's provenance gives the CPU's attention call the Q, K and V projections feeding it
    as origins too; each projection's own ``mm`` computes it); a tie goes to the last. So the
    kernels' FLOPs add up to the graph's, each on the row of the kernel that does it."""
    owner: dict[tuple[str, str], int] = {}

    def rank(k: Kernel) -> tuple[int, int]:
        return (0 if k.generated else 1, -len(k.origins))

    for i, k in enumerate(kernels):
        for o in k.origins:
            held = owner.get((k.graph, o))
            if held is None or rank(k) >= rank(kernels[held]):
                owner[(k.graph, o)] = i
    out: dict[str, int] = {}
    for i, (k, row) in enumerate(zip(kernels, rows)):
        counted = flops.get(k.graph, {})
        if not counted:
            continue
        out[row.name] = int(sum(counted.get(o) or 0 for o in k.origins if owner.get((k.graph, o)) == i))
    lost = {g: [n for n, f in flops.get(g, {}).items() if f and (g, n) not in owner] for g in sorted({k.graph for k in kernels})}
    return out, {g: names for g, names in lost.items() if names}


def missing_flops_notes(flops: Mapping[str, Mapping[str, int | None]], failed: Mapping[str, str], kernels: list[Kernel],
                        rows: list[NodeInfo], lost: Mapping[str, list[str]]) -> list[str]:
    """The header's notes where FLOPs are missing: the rows of each graph whose count failed
    (``failed``: graph -> why; their ``flops`` are empty, not 0), and the FLOPs of nodes that no
    kernel row holds (``lost``, from :func:`kernel_flops`)."""
    notes = []
    for graph, why in failed.items():
        names = [r.name for k, r in zip(kernels, rows) if k.graph == graph]
        if not names:
            continue
        shown = ", ".join(names[:6]) + (f" and {len(names) - 6} more" if len(names) > 6 else "")
        notes.append(f"FLOPs unknown on the {len(names)} kernel row(s) of compiled graph {graph} ({shown}): counting "
                     f"its dynamo graph on fake tensors failed ({why}); their flops are empty, not 0")
    for graph, names in lost.items():
        total = sum(flops.get(graph, {}).get(n) or 0 for n in names)
        notes.append(f"{total:,} FLOPs of compiled graph {graph} are on no row: inductor's provenance ties node(s) "
                     f"{', '.join(names[:6])}{' ...' if len(names) > 6 else ''} to no kernel")
    return notes


def custom_op_note(ops: Mapping[str, Mapping[str, int]]) -> list[str]:
    """The header's note for custom ops no FLOP count sees (:func:`custom_ops`, per graph)."""
    total: dict[str, int] = {}
    for per_graph in ops.values():
        for name, calls in per_graph.items():
            total[name] = total.get(name, 0) + calls
    if not total:
        return []
    listed = ", ".join(f"{name} ({calls}x)" for name, calls in sorted(total.items()))
    return [f"FLOPs leave out custom op(s) {listed}: FlopCounterMode has no formula for them and does not count inside "
            f"them (a mixture of experts' matmuls run there), so neither fxprof's nor FlopCounterMode's count holds "
            f"their arithmetic"]
