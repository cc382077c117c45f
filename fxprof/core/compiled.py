"""A compiled model's kernels as profile rows: which eager nodes each computes, and its times.

Plain data and pure functions (no torch): :mod:`fxprof.measure.compiled.mode` compiles the model,
reads inductor's provenance (kernel -> post-grad nodes -> the dynamo graph's nodes) and the
profiler's events, and hands them here as :class:`Kernel` and :class:`Span` records. This
module charges every span (one kernel call in one run) to its kernel, and describes each kernel
as a :class:`~fxprof.core.nodes.NodeInfo` row: a readable name, its ``origins`` (the eager
nodes it computes, named as fxprof names them), the innermost module holding all of them
(``scope``; ``scope_source`` is ``common`` when they span several modules) and ``kind``
(``fused`` for a generated kernel of several origins, else the op).
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any, Iterable, Mapping, Sequence

from ..vocab import COLLECTIVE, COLLECTIVE_NAMESPACES, KERNEL, UNMATCHED
from .names import input_name, weight_name
from .nodes import NodeInfo

__all__ = ["own_run_ms", "quiet_own_run_ms", "Kernel", "Span", "common_scope", "readable_names", "charge_spans", "charge_by_key", "kernel_nodes", "adopt_replaced", "extern_op", "extern_own_nodes",
           "strip_graph_prefix", "unmatched_nodes", "short_kernel_name", "UNMATCHED"]

#: the ``op`` of a generated kernel's row and of an extern call's (``mm``, convolution...)
GENERATED, EXTERN = "kernel", "extern"
#: how an extern call of a torch.distributed collective starts (``torch.ops._c10d_functional.all_reduce_.default``):
#: its row's role is ``collective``, not ``kernel``
_COLLECTIVE_OPS = tuple(f"torch.ops.{namespace}." for namespace in COLLECTIVE_NAMESPACES)


@dataclasses.dataclass(frozen=True)
class Kernel:
    """One kernel call site in a compiled graph's generated code, in call order.

    Attributes:
        graph: the compile id of the graph (``"0/0"``: frame 0, its first compile), as the
            profiler's ``Torch-Compiled Region: 0/0`` range names it.
        key: inductor's provenance key, unique in the graph: ``cpp_fused_add_relu_0:3``,
            ``extern_kernels.addmm:4``, ``triton_poi_fused_add_0:1``.
        generated: True for a kernel inductor generated (C++ or Triton), False for an extern
            call (a library op: ``mm``, convolution...).
        range_name: the profiler name of a generated kernel (``graph_0_cpp_fused_add_relu_0``,
            or the Triton kernel's name); "" for an extern call.
        origins: the dynamo graph's nodes the kernel computes (raw names, graph order).
        inputs: for an extern call whose own op has no dynamo node (a pattern replacement made
            it: eager attention's matmul-softmax-matmul turned into SDPA), the dynamo nodes of
            the inputs inductor lowered into it; () otherwise (:func:`adopt_replaced`).
    """

    graph: str
    key: str
    generated: bool
    range_name: str
    origins: tuple[str, ...]
    inputs: tuple[str, ...] = ()

    @property
    def base(self) -> str:
        """The key without inductor's handle: ``cpp_fused_add_relu_0``, ``extern_kernels.addmm``."""
        return self.key.rsplit(":", 1)[0] if re.search(r":\d+$", self.key) else self.key


@dataclasses.dataclass(frozen=True)
class Span:
    """One profiler event directly inside a compiled graph's call, in one timed run.
    Times in milliseconds, ``start_ms`` from the run's start; ``call``: which call of the graph
    in that run (0 unless the graph runs several times per model call)."""

    graph: str
    run: int
    name: str
    start_ms: float
    duration_ms: float
    call: int = 0


def own_run_ms(meta: Mapping[str, Any]) -> tuple[float | None, int]:
    """The compiled model's own median run time (ms) and how many unprofiled runs it is from,
    derived from ``meta["compiled"]["unprofiled_ms"]`` (each unprofiled run, kept in order)."""
    runs = [float(v) for v in ((meta.get("compiled") or {}).get("unprofiled_ms") or ())]
    if not runs:
        return None, 0
    runs.sort()
    middle = len(runs) // 2
    return (runs[middle] if len(runs) % 2 else (runs[middle - 1] + runs[middle]) / 2.0), len(runs)


def quiet_own_run_ms(meta: Mapping[str, Any]) -> tuple[float | None, int]:
    """The compiled model's own median run time (ms) that its rows are set against, and how many
    unprofiled runs it is from: the runs that lost no time to other processes
    (:func:`fxprof.core.contention.quiet_values`, as the fidelity line and the profiler cost's
    yardstick take them); every run, as :func:`own_run_ms`, where none was measured."""
    from .contention import quiet_values

    runs = [float(v) for v in ((meta.get("compiled") or {}).get("unprofiled_ms") or ())]
    if not runs:
        return None, 0
    lost = (meta.get("contention") or {}).get("unprofiled_lost_ms")
    used, _ = quiet_values(runs, lost)
    return own_run_ms({"compiled": {"unprofiled_ms": used}})[0], len(used)


def extern_op(base: str) -> str:
    """The op an extern call runs, as the profiler's event ends: ``extern_kernels.addmm`` ->
    ``addmm``, ``torch.ops.mkldnn._convolution_pointwise.default`` -> ``_convolution_pointwise``,
    ``torch.ops.aten.sort.stable`` -> ``sort`` (any overload's name)."""
    name = base
    for prefix in ("extern_kernels.", "torch.ops."):
        if name.startswith(prefix):
            name = name[len(prefix):]
    parts = name.split(".")
    if base.startswith("torch.ops.") and len(parts) >= 3:  # NS.OP.OVERLOAD: any overload (sort.stable, add.Tensor)
        return parts[1]
    if len(parts) > 1 and parts[-1] in ("default", "Tensor", "Scalar", "out", "int", "self"):
        parts = parts[:-1]
    return parts[-1]


def extern_own_nodes(base: str, post: Sequence[str]) -> list[str]:
    """The post-grad nodes an extern call computes, of the ones inductor's provenance lists for it.

    Inductor names an extern call's ``origin_node`` when it has one, else all of the call's IR
    origins, and those include the producers it lowered into the call's input: torchvision's
    FPN's ``extern_kernels.convolution`` (``layer_blocks.0``'s conv) lists ``convolution_3``
    and the interpolate and add whose sum it convolves (``add_4``, ``_unsafe_index``...), which a
    generated kernel computes. The call runs one library op: its nodes are the ones named for
    that op (``convolution_3`` for ``extern_kernels.convolution``, FX's name for an op and its
    repeats); when none is, all of ``post``, as inductor gave them."""
    op = re.escape(extern_op(base))
    own = [p for p in post if re.fullmatch(rf"{op}(_default)?(_\d+)?", p)]
    return own or list(post)


_GRAPH_PREFIX = re.compile(r"^graph_\d+_")


def strip_graph_prefix(name: str) -> str:
    """``graph_0_cpp_fused_add_relu_0`` -> ``cpp_fused_add_relu_0`` (the C++ kernel profile's
    ranges carry inductor's graph number; older releases name the kernel alone)."""
    return _GRAPH_PREFIX.sub("", name)


def charge_spans(kernels: Sequence[Kernel], spans: Iterable[Span]) -> tuple[list[tuple[str, Span]], list[Span]]:
    """Charge every span to the kernel it timed: ``(charged, unmatched)``.

    ``charged`` pairs each matched span with its kernel's ``graph + key``. Within one call of a
    graph, a generated kernel is known by its name (with or without inductor's ``graph_N_``
    prefix) and its place among the calls of that name: inductor generates one kernel for
    identical layers and calls it once per layer (each call site its own provenance key, in
    call order), so the k-th call of ``cpp_fused_add_native_layer_norm_6`` in a call of the
    graph is the k-th call site of that kernel in the graph's code (calls beyond the last site
    go to the last). Those calls fix where in the code each moment of the call is; an extern
    call is matched by its op, in order, among the extern calls of the code between the
    generated kernels that ran before and after it (the k-th ``aten::addmm`` there is the k-th
    ``extern_kernels.addmm`` there), so an op never takes an extern call of a later layer.
    An extern call with no event of its own (a custom op such as transformers' experts'
    ``grouped_mm_fallback``, whose Python body runs ``aten::mm`` per expert) is charged the op
    events left over in its stretch, as one span (their times summed). Both are counted
    per call of the graph. Spans named ``fxprof::...`` (graph breaks and overhead,
    :mod:`fxprof.core.breaks`) are neither.
    """
    by_graph: dict[str, list[Kernel]] = {}
    for k in kernels:
        by_graph.setdefault(k.graph, []).append(k)
    generated: dict[str, dict[str, list[int]]] = {}  # graph -> kernel name -> its call sites' positions, in call order
    for g, ks in by_graph.items():
        for i, k in enumerate(ks):
            if k.generated:
                generated.setdefault(g, {}).setdefault(strip_graph_prefix(k.range_name or k.base), []).append(i)
    calls: dict[tuple[str, int, int], list[Span]] = {}
    for span in sorted(spans, key=lambda s: (s.run, s.call, s.start_ms)):
        if not span.name.startswith("fxprof::"):  # the time outside the kernels (fxprof.core.breaks): no kernel's
            calls.setdefault((span.graph, span.run, span.call), []).append(span)
    charged: list[tuple[str, Span]] = []
    unmatched: list[Span] = []
    for (graph, _, _), items in calls.items():
        ks = by_graph.get(graph, [])
        sites = generated.get(graph, {})
        seen: dict[str, int] = {}
        at: list[int | None] = []  # each span's generated call site, None for the rest
        for span in items:
            name = strip_graph_prefix(span.name)
            where = sites.get(name)
            if where:
                nth = seen.get(name, 0)
                seen[name] = nth + 1
                at.append(where[min(nth, len(where) - 1)])
            else:
                at.append(None)
        lo, i = -1, 0
        while i < len(items):
            site = at[i]
            if site is not None:
                charged.append((graph + "|" + ks[site].key, items[i]))
                lo = max(lo, site)
                i += 1
                continue
            j = i
            while j < len(items) and at[j] is None:
                j += 1
            after = at[j] if j < len(items) else None
            hi = after if after is not None and after > lo else len(ks)  # a kernel past its last site: the rest of the code
            _charge_stretch(graph, ks, [k for k in range(lo + 1, hi) if not ks[k].generated], items[i:j], charged, unmatched)
            i = j
    if unmatched:
        charged, unmatched = _charge_replayed(by_graph, charged, unmatched)
    return charged, unmatched


def charge_by_key(kernels: Sequence[Kernel], spans: Iterable[Span]) -> tuple[list[tuple[str, Span]], list[Span]]:
    """Charge every span named by a provenance key (compiled mode's marks time each kernel call
    site, :mod:`fxprof.measure.compiled.wrapper_timer`) to the kernel of that key in its graph:
    ``(charged, unmatched)``, as :func:`charge_spans` gives them; a span whose key no kernel has
    (a call site inductor wrote no handle for) is unmatched. Spans named ``fxprof::...`` are
    neither."""
    known = {k.graph + "|" + k.key for k in kernels}
    charged: list[tuple[str, Span]] = []
    unmatched: list[Span] = []
    for span in spans:
        if span.name.startswith("fxprof::"):
            continue
        key = span.graph + "|" + span.name
        if key in known:
            charged.append((key, span))
        else:
            unmatched.append(span)
    return charged, unmatched


def _charge_stretch(graph: str, ks: Sequence[Kernel], externs: list[int], spans: list[Span],
                    charged: list[tuple[str, Span]], unmatched: list[Span]) -> None:
    """The spans between two generated kernels' calls, to the extern calls of the code between
    them (``externs``: positions in ``ks``): by op in order, then the op events left over to an
    extern call that had no event of its own, merged into one span per run of them (their
    durations summed: what lies between them is the graph's overhead, where the profiler's own
    cost per event is taken out, as for any time outside the kernels)."""
    cursor, matched = 0, set()
    left: list[tuple[Span, int]] = []  # a span no extern's op matched, and the last extern matched before it
    for span in spans:
        op = span.name.split("::")[-1]
        hit = next((n for n in range(cursor, len(externs)) if extern_op(ks[externs[n]].base) == op), None)
        if hit is None:
            left.append((span, cursor - 1))
            continue
        cursor = hit + 1
        matched.add(hit)
        charged.append((graph + "|" + ks[externs[hit]].key, span))
    silent = [n for n in range(len(externs)) if n not in matched]
    owner_of: dict[int, Span] = {}  # the silent extern of the run being merged -> its span so far
    current: int | None = None
    for span, before in left:
        if not silent or not _OP_EVENT.match(span.name):  # a library kernel with no op (_charge_replayed) or no owner
            unmatched.append(span)
            continue
        owner = next((n for n in silent if n > before), silent[-1])
        if owner == current:  # its own time: the gaps between the nested ops are the graph's overhead, as elsewhere
            first = owner_of[owner]
            owner_of[owner] = dataclasses.replace(first, duration_ms=first.duration_ms + span.duration_ms)
            continue
        if current is not None:
            charged.append((graph + "|" + ks[externs[current]].key, owner_of.pop(current)))
        current = owner
        owner_of[owner] = dataclasses.replace(span, name=extern_op(ks[externs[owner]].base))
    if current is not None:
        charged.append((graph + "|" + ks[externs[current]].key, owner_of.pop(current)))


#: a profiler event of an op (``aten::copy_``, ``mkldnn::_convolution_pointwise``), not a device kernel
_OP_EVENT = re.compile(r"^[a-z_][a-z0-9_]*::[a-z_][a-z0-9_.]*$")


def _charge_replayed(by_graph: Mapping[str, Sequence[Kernel]], charged: list[tuple[str, Span]], unmatched: list[Span]
                     ) -> tuple[list[tuple[str, Span]], list[Span]]:
    """Library kernels that no op names (a CUDA graph's replay: cuDNN and cuBLAS kernels run
    with no ``aten::`` op around them) charged to the extern calls of the graph's code that lie
    between the kernels charged before and after them, in order: one extern in the gap takes
    every kernel there (an extern may launch several); several take them one by one, the last
    the rest. A span with an op's name (``aten::copy_``), or in a gap without externs, stays
    unmatched."""
    position = {g: {k.graph + "|" + k.key: i for i, k in enumerate(ks)} for g, ks in by_graph.items()}
    groups: dict[tuple[str, int, int], list[tuple[Span, int | None]]] = {}
    for key, span in charged:
        groups.setdefault((span.graph, span.run, span.call), []).append((span, position[span.graph].get(key)))
    for span in unmatched:
        groups.setdefault((span.graph, span.run, span.call), []).append((span, None))
    still: list[Span] = []
    for (graph, _, _), items in groups.items():
        items.sort(key=lambda t: t[0].start_ms)
        kernels = by_graph.get(graph, [])
        known = [i for _, i in items if i is not None]
        used: set[int] = set()
        before = -1
        seen = 0
        for span, index in items:
            if index is not None:
                before, seen = index, seen + 1
                continue
            after = known[seen] if seen < len(known) else len(kernels)
            gap = [i for i in range(before + 1, after) if not kernels[i].generated]
            if _OP_EVENT.match(span.name) or not gap:
                still.append(span)
                continue
            free = [i for i in gap if i not in used]
            chosen = free[0] if free else gap[-1]
            used.add(chosen)
            charged.append((kernels[chosen].graph + "|" + kernels[chosen].key, span))
    return charged, still


def common_scope(scopes: Iterable[str]) -> str:
    """The innermost module path that contains all of ``scopes`` ("" is the root):
    ``layer1.0.conv1`` and ``layer1.0.bn1`` -> ``layer1.0``."""
    paths = [s.split(".") if s else [] for s in scopes]
    if not paths:
        return ""
    common: list[str] = []
    for parts in zip(*paths):
        if len(set(parts)) != 1:
            break
        common.append(parts[0])
    return ".".join(common)


def _module_own_op(info: NodeInfo, module_kinds: Mapping[str, str]) -> bool:
    """Is ``info`` the op of the module it runs in (a ``conv2d`` in a ``Conv2d``)?"""
    return bool(info.scope) and module_kinds.get(info.scope) == info.kind


def _unique(base: str, taken: dict[str, int], keep: str = "") -> str:
    base = re.sub(r"[^\w%s]+" % re.escape(keep), "_", base) if keep else re.sub(r"\W+", "_", base)
    base = base or "node"
    if base not in taken:
        taken[base] = 0
        return base
    while True:
        taken[base] += 1
        name = f"{base}_{taken[base]}"
        if name not in taken:
            taken[name] = 0
            return name


def readable_names(nodes: Sequence[NodeInfo], module_kinds: Mapping[str, str] | None = None,
                   taken: dict[str, int] | None = None) -> dict[str, str]:
    """A readable, unique name per node, from its module path and op: ``layer4_1_conv1`` (the
    module's own op), ``layer1_0_add`` (an op inside a module), ``flatten`` (at the root); a
    repeat gets ``_1``, ``_2``... ``module_kinds`` maps a module path to the op that module
    performs (``conv2d`` for a ``Conv2d``). Returns ``{node.name: readable}``; ``taken``
    (shared between calls) keeps names unique across several graphs."""
    module_kinds = module_kinds or {}
    taken = {} if taken is None else taken
    out: dict[str, str] = {}
    for info in nodes:
        scope = info.scope.replace(".", "_")
        if info.op == "placeholder" and (weight := weight_name(info.target, info.scope)) is not None:
            out[info.name] = _unique(weight, taken, keep=".")  # layer3.1.bn1.running_var
            continue
        if info.op == "placeholder":
            base = input_name(info.name.split(":")[-1])  # l_x_ -> x
            if "." in base:  # a lifted module attribute: its module path, dots kept
                out[info.name] = _unique(base, taken, keep=".")
                continue
        elif info.op in ("output", "get_attr"):
            base = info.name.split(":")[-1]
        elif _module_own_op(info, module_kinds):
            base = scope
        else:
            base = "_".join(p for p in (scope, info.kind or info.name) if p)
        out[info.name] = _unique(base, taken)
    return out


def adopt_replaced(kernels: Sequence[Kernel], nodes: Mapping[str, Mapping[str, NodeInfo]]) -> list[Kernel]:
    """Extern calls a pattern replacement made, given the dynamo nodes they replaced.

    Inductor's joint-graph patterns turn eager attention (``matmul``, scale, ``softmax``,
    ``matmul``) into one SDPA call whose node has no dynamo origin: its row had no layer, a raw
    op name and no FLOPs, and the replaced nodes were on no row (compiled FLOPs 2-3% short on
    transformers with eager attention). An extern call with no origins but with ``inputs`` (the
    dynamo nodes of what it reads) takes the nodes after its inputs, in graph order, that no
    kernel computes and that lie in its inputs' module, up to the next node a kernel computes:
    the chain it replaced, so its row gets their module, their FLOPs and their names."""
    out = list(kernels)
    held: dict[str, set[str]] = {}
    for k in kernels:
        held.setdefault(k.graph, set()).update(k.origins)
    for i, k in enumerate(out):
        if k.generated or k.origins or not k.inputs:
            continue
        graph_nodes = nodes.get(k.graph, {})
        names = list(graph_nodes)
        order = {n: j for j, n in enumerate(names)}
        ins = [o for o in k.inputs if o in order]
        if not ins:
            continue
        scope = common_scope(sorted({graph_nodes[o].scope for o in ins}))
        taken = held.setdefault(k.graph, set())
        adopted: list[str] = []
        for name in names[max(order[o] for o in ins) + 1:]:
            info = graph_nodes[name]
            if info.op in ("placeholder", "output", "get_attr"):
                continue
            inside = not scope or info.scope == scope or info.scope.startswith(scope + ".")
            if name in taken or not inside:
                if adopted:
                    break  # the chain ended: a node a kernel computes, or another module's
                continue
            adopted.append(name)
        if adopted:
            taken.update(adopted)
            out[i] = dataclasses.replace(k, origins=tuple(adopted))
    return out


def kernel_nodes(
    kernels: Sequence[Kernel],
    origins: Mapping[str, Mapping[str, NodeInfo]],
    names: Mapping[str, Mapping[str, str]],
    module_types: Mapping[str, str],
    root_type: str = "",
) -> list[NodeInfo]:
    """One row per kernel, named from what it computes.

    ``origins[graph][raw]`` is the eager node ``raw`` of that graph, ``names[graph][raw]`` its
    readable name; ``module_types`` maps a module path to its class name (``root_type`` is the
    root's). A kernel's ``scope`` is the innermost module holding all its origins; when they lie
    in different modules, ``scope_source`` is ``common``. ``kind``: ``fused`` for a generated
    kernel of several ops, else the op (``conv2d``, ``addmm`` for an extern call with no
    origin in the graph). The row's name is its origin's readable name for a single origin, else
    the scope and the ops (``layer1_0_batch_norm_relu``), unique in the profile; ``raw_name``
    keeps the generated name, ``target`` the key without its handle.
    """
    taken: dict[str, int] = {}
    for graph_names in names.values():
        for n in graph_names.values():
            taken.setdefault(n, 0)
    rows: list[NodeInfo] = []
    used: set[str] = set()
    for k in kernels:
        graph_nodes = origins.get(k.graph, {})
        order = {name: i for i, name in enumerate(graph_nodes)}
        found = sorted((graph_nodes[o] for o in k.origins if o in graph_nodes), key=lambda f: order[f.name])
        work = [f for f in found if f.op not in ("placeholder", "output", "get_attr")] or found
        scopes = {f.scope for f in work}
        scope = common_scope(sorted(scopes))
        kinds = list(dict.fromkeys(f.kind for f in work))
        readable = [names.get(k.graph, {}).get(f.name, f.name) for f in work]
        if len(work) > 1 and k.generated:
            kind = "fused"
        elif len(kinds) == 1:
            kind = kinds[0]
        else:
            kind = extern_op(k.base) if not k.generated else "fused"
        if len(work) == 1:
            base = readable[0]
        else:
            base = "_".join(p for p in (scope.replace(".", "_"), "_".join(kinds[:3]) + ("_etc" if len(kinds) > 3 else "")) if p)
            base = base or (strip_graph_prefix(k.range_name or k.base) if k.generated else extern_op(k.base))
        name = base if base not in used else _unique(base, taken)
        while name in used:
            name = _unique(base, taken)
        used.add(name)
        rows.append(NodeInfo(
            name=name,
            op=GENERATED if k.generated else EXTERN,
            target=k.base,
            module_type=module_types.get(scope, "") if scope else root_type,
            scope=scope,
            range="",
            kind=kind,
            graph=k.graph,
            scope_source=("common" if len(scopes) > 1 else (work[0].scope_source or ("recorded" if scope else "")))
            if work else "",
            origins=",".join(readable),
            raw_name=k.range_name or k.key,
            role=COLLECTIVE if not k.generated and k.base.startswith(_COLLECTIVE_OPS) else KERNEL,
        ))
    return rows


def short_kernel_name(name: str, limit: int = 48) -> str:
    """A device kernel's name as a row can show it: ``void at::native::(anonymous
    namespace)::vectorized_elementwise_kernel<4, ...>(...)`` -> ``vectorized_elementwise_kernel``;
    a long library name (``sm90_xmma_fprop_implicit_gemm_f16f16_..._cudnn``) cut to ``limit``
    characters; ``aten::copy_`` -> ``aten_copy_``."""
    text = name.strip()
    text = re.sub(r"^(void|static|__global__)\s+", "", text)
    depth, cut = 0, len(text)
    for i, ch in enumerate(text):  # the name ends where its template arguments or parameters begin
        if ch in "<(" and depth == 0:
            cut = i
            break
    text = text[:cut]
    if "::" in text and not text.startswith("aten::"):
        text = text.rsplit("::", 1)[-1]
    text = re.sub(r"\W+", "_", text.replace("::", "_")).strip("_") or "kernel"
    return text[:limit].rstrip("_")


def unmatched_nodes(spans: Iterable[Span], taken: set[str]) -> tuple[list[NodeInfo], dict[tuple[str, str], str]]:
    """Rows for events inside a compiled graph's call that no kernel claims (one per graph and
    event name: ``unmatched_aten_copy``), and ``{(graph, event name): row name}``."""
    rows: list[NodeInfo] = []
    names: dict[tuple[str, str], str] = {}
    counter: dict[str, int] = {n: 0 for n in taken}
    for span in spans:
        key = (span.graph, span.name)
        if key in names:
            continue
        name = _unique("unmatched_" + short_kernel_name(span.name), counter)
        names[key] = name
        rows.append(NodeInfo(name=name, op=UNMATCHED, target=span.name, module_type="", scope="", range="",
                             kind=span.name.split("::")[-1], graph=span.graph, raw_name=span.name, role=UNMATCHED))
    return rows, names
