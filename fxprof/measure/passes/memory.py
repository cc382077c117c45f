"""Memory per node, on the CPU and the GPU, from one untimed pass (issue 34).

The pass runs the graph(s) once more with every node inside a ``record_function("fxprof::<node>")``
range, under ``torch.profiler`` with ``profile_memory=True``. The profiler reports every
allocation and free of the CPU allocator and of the CUDA caching allocator with its address,
size and time (``experimental_event_tree``); fxprof pairs each free with its allocation by
address and places both in the node ranges by time. So the same four numbers mean the same on
both devices:

``mem_delta_bytes``  bytes allocated inside the node and still held when it returns, minus the
                     bytes it freed of what was allocated before it;
``mem_temp_bytes``   bytes allocated and freed inside the node (workspaces, temporaries);
``mem_peak_bytes``   the highest the allocated bytes rose above the node's start while it ran;
``mem_live_bytes``   all bytes the run holds after the node, once the values it was the last user
                     of are freed (the interpreter frees them as eager code does): the model's
                     parameters, buffers and inputs (each storage once), optimizer state, and
                     what the run allocated and still holds;
``mem_saved_bytes``  with a backward pass: the bytes of this node's allocations that autograd
                     saved for the backward (``torch.autograd.graph.saved_tensors_hooks``; each
                     storage once, charged to the node that allocated it; parameters are not
                     counted: they are held anyway).

Only allocations made during the pass are followed: a free of memory allocated before it (the
caller's tensors) changes nothing here. Sizes are what the allocator was asked for (the CUDA
caching allocator rounds blocks up to 512 bytes; its reserved, cached memory is not counted).

The pass also finds the run's peak (``peak_bytes``, ``peak_node``) and what was held at that
moment, by category: ``parameters``, ``buffers``, ``optimizer_state``, ``gradients`` (the
``.grad`` tensors the backward left), ``temporaries`` (the peak node's own allocations it frees
before returning) and ``activations`` (the rest: inputs, node outputs, saved tensors).
"""

from __future__ import annotations

import bisect
import contextlib
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Iterator

import torch
from torch import fx, nn

from ...core.memory import CATEGORIES
from ..common.tree import PlainContainers, tensors_in
from ..device.bridge import RANGE_PREFIX, UNKNOWN_BLOCK_LINE, kineto_quiet, profiler_running

__all__ = ["MemoryRecording", "account", "allocations", "Alloc", "CATEGORIES", "device_keys", "held_breakdown", "is_sharded",
           "local_shard", "memory_pass", "memory_per_node", "ranged_pass"]

_SAVED_PREFIX = "fxprof_saved::"


@dataclass
class Alloc:
    """One allocation seen during the pass: its address, size, when it was made and freed
    (profiler clock, ns; ``freed`` None: still held at the end) and the range it was made in
    (index into the ranges, -1: between ranges)."""

    ptr: int
    size: int
    made: int
    freed: int | None = None
    node: int = -1
    freed_in: int = -2


@dataclass
class _Accounted:
    records: dict[str, dict[str, int]] = field(default_factory=dict)
    summary: dict[str, Any] = field(default_factory=dict)
    #: the followed allocations' bytes still held after the last event
    end_level: int = 0


def local_shard(t: torch.Tensor) -> torch.Tensor:
    """The bytes this rank holds of ``t``: a DTensor's local shard (an FSDP2 or tensor-parallel
    parameter, its gradient, the optimizer's state of it), any other tensor itself. A DTensor's
    own storage is not its shard's, so without this its bytes would count as none."""
    local = getattr(t, "_local_tensor", None)
    return local if isinstance(local, torch.Tensor) else t


def is_sharded(t: Any) -> bool:
    """Whether ``t`` is a DTensor (its bytes here are this rank's shard of it)."""
    return isinstance(getattr(t, "_local_tensor", None), torch.Tensor)


def _storage_key(t: torch.Tensor) -> tuple[int, int] | None:
    try:
        s = local_shard(t).untyped_storage()
        return (s.data_ptr(), s.nbytes())
    except Exception:  # tensors without storage (sparse, some subclasses, meta)
        return None


def _unique_bytes(tensors: Iterable[torch.Tensor], seen: set[int]) -> int:
    total = 0
    for t in tensors:
        key = _storage_key(t)
        if key is None or key[0] in seen or key[0] == 0:
            continue
        seen.add(key[0])
        total += key[1]
    return total


def held_bytes(module: nn.Module | None, inputs: Any, optimizer: Any) -> dict[str, int]:
    """Bytes the run holds before it starts, by category, each storage once."""
    seen: set[int] = set()
    out = {"parameters": 0, "buffers": 0, "optimizer_state": 0, "inputs": 0}
    if module is not None:
        out["parameters"] = _unique_bytes(module.parameters(), seen)
        out["buffers"] = _unique_bytes(module.buffers(), seen)
    if optimizer is not None:
        out["optimizer_state"] = _unique_bytes(tensors_in(list(optimizer.state.values())), seen)
    out["inputs"] = _unique_bytes(tensors_in(inputs), seen)
    return out


def _held_tensors(module: nn.Module | None, optimizer: Any) -> list[Any]:
    held: list[Any] = list(module.parameters()) if module is not None else []
    if optimizer is not None:
        held += list(tensors_in(list(optimizer.state.values())))
    return held


class _RangedInterpreter(PlainContainers, fx.Interpreter):
    """Runs each node inside a ``record_function("fxprof::<label:node>")`` range, freeing each
    value after its last use (``garbage_collect_values``, as eager code drops it)."""

    def __init__(self, gm: fx.GraphModule, label: str):
        super().__init__(gm, garbage_collect_values=True)
        self.label = f"{label}:" if label else ""

    def run_node(self, n: fx.Node) -> Any:
        with torch.profiler.record_function(RANGE_PREFIX + self.label + n.name):
            return super().run_node(n)


def ranged_pass(gm: fx.GraphModule, label: str, inputs: tuple) -> tuple[Any, dict[str, dict[str, Any]]]:
    """A pass (graph, label, inputs) -> (output, {}) running every node in its range; the
    records come from :class:`MemoryRecording` around the whole pass."""
    return _RangedInterpreter(gm, label).run(*inputs), {}


class MemoryRecording:
    """Around one untimed pass (``with MemoryRecording(...) as rec: capture.run_pass(ranged_pass, ...)``):
    afterwards ``rec.records`` holds the per-node columns and ``rec.summary`` the run's peak.

    Args:
        devices: the devices whose allocations count (``cpu``, ``cuda:0``...).
        module: the model (its parameters and buffers are held before the run).
        inputs: the pass's inputs (held by the caller throughout, as in eager code).
        optimizer: a training step's optimizer (its state is held), or None.
        backward: also record what autograd saves for the backward (``mem_saved_bytes``).
    """

    def __init__(self, devices: Iterable[torch.device | str], module: nn.Module | None = None, inputs: Any = (),
                 optimizer: Any = None, backward: bool = False):
        self.keys = device_keys(devices)
        self.module = module
        self.optimizer = optimizer
        self.backward = backward
        self.held = held_bytes(module, inputs, optimizer)
        #: parameters, gradients or optimizer state held as DTensors: their bytes are this rank's shards
        self.shards = any(is_sharded(t) for t in _held_tensors(module, optimizer))
        self.saved: list[tuple[int, int]] = []  # (storage address, bytes) per pack, in order
        self.records: dict[str, dict[str, int]] = {}
        self.summary: dict[str, Any] = {}
        self.kept_bytes = 0

    def _pack(self, t: torch.Tensor) -> torch.Tensor:
        key = _storage_key(t)
        if key is not None:
            # a marker on the profiler's clock: which allocation held this address then
            with torch.profiler.record_function(f"{_SAVED_PREFIX}{len(self.saved)}"):
                pass
            self.saved.append(key)
        return t

    @contextlib.contextmanager
    def _hooks(self) -> Iterator[None]:
        if not self.backward:
            yield
            return
        with torch.autograd.graph.saved_tensors_hooks(self._pack, lambda t: t):
            yield

    def __enter__(self) -> "MemoryRecording":
        from torch.profiler import ProfilerActivity, profile

        self._prof = profile(activities=[ProfilerActivity.CPU], profile_memory=True)
        with kineto_quiet():
            self._prof.__enter__()
        self._stack = contextlib.ExitStack()
        try:
            self._stack.enter_context(self._hooks())
        except BaseException:
            with kineto_quiet():
                self._prof.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, *exc: Any) -> None:
        try:
            self._stack.close()
        finally:
            with kineto_quiet():
                self._prof.__exit__(None, None, None)
        if exc[0] is not None:
            return
        grads = self._grad_addresses()
        ranges, allocs, markers = _flatten(self._prof.profiler.kineto_results.experimental_event_tree(), self.keys)
        done = account(ranges, allocs, self.held, grads, [(markers.get(i), ptr) for i, (ptr, _) in enumerate(self.saved)]
                       if self.backward else None)
        self.records, self.summary = done.records, done.summary
        if self.shards and self.summary:
            # the figures are this rank's: a DTensor's bytes are its local shard (passes/memory.local_shard)
            self.summary["shards"] = True
        #: the followed allocations still held at the end, in bytes (what the recorded span kept)
        self.kept_bytes = done.end_level

    def _grad_addresses(self) -> set[int]:
        if self.module is None:
            return set()
        found = set()
        for p in self.module.parameters():
            if p.grad is not None:
                key = _storage_key(p.grad)
                if key is not None:
                    found.add(key[0])
        return found


def device_keys(devices: Iterable[torch.device | str]) -> set[tuple[str, int]]:
    """The ``(type, index)`` keys of the devices whose allocations count (an index-less
    ``cuda`` is the current device now)."""
    return {_device_key(torch.device(d)) for d in devices}


def allocations(roots: list[Any], keys: set[tuple[str, int]],
                visit: Callable[[Any], None] | None = None) -> list[tuple[int, int, int]]:
    """The allocation events ``(time ns, address, signed bytes)`` of the devices ``keys``
    (:func:`device_keys`) in the profiler's event tree (``experimental_event_tree()``), sorted by
    time (frees negative); every other event is passed to ``visit`` (if given) as the walk meets
    it, and its children walked."""
    from torch._C._profiler import _EventType

    allocs: list[tuple[int, int, int]] = []
    stack = list(roots)
    while stack:
        e = stack.pop()
        if e.tag == _EventType.Allocation:
            f = e.extra_fields
            device = f.device
            if (device.type, -1 if device.index is None else device.index) in keys and f.ptr:
                allocs.append((e.start_time_ns, int(f.ptr), int(f.alloc_size)))
            continue
        if visit is not None:
            visit(e)
        stack.extend(e.children)
    allocs.sort(key=lambda a: a[0])
    return allocs


def _flatten(roots: list[Any], keys: set[tuple[str, int]]) -> tuple[list[tuple[str, int, int]], list[tuple[int, int, int]], dict[int, int]]:
    """From the profiler's event tree: the ``fxprof::`` ranges (name, start, end) by start, the
    allocation events (time, address, signed bytes) of the watched devices by time, and the
    saved-tensor markers (index -> time)."""
    ranges: list[tuple[str, int, int]] = []
    markers: dict[int, int] = {}

    def visit(e: Any) -> None:
        name = e.name
        if name.startswith(RANGE_PREFIX):
            ranges.append((name[len(RANGE_PREFIX):], e.start_time_ns, e.end_time_ns))
        elif name.startswith(_SAVED_PREFIX):
            markers[int(name[len(_SAVED_PREFIX):])] = e.start_time_ns

    allocs = allocations(roots, keys, visit)
    ranges.sort(key=lambda r: r[1])
    return ranges, allocs, markers


def account(ranges: list[tuple[str, int, int]], events: list[tuple[int, int, int]], held: dict[str, int],
            grads: set[int] = frozenset(), saved: list[tuple[int | None, int]] | None = None) -> _Accounted:  # type: ignore[assignment]
    """The per-node columns and the peak from ranges ``(name, start, end)`` sorted by start and
    allocation events ``(time, address, signed bytes)`` sorted by time. ``held``: bytes held
    before the run by category; ``grads``: addresses of the ``.grad`` tensors after the run;
    ``saved``: ``(time, address)`` of every tensor autograd saved (None: no backward)."""
    starts = [r[1] for r in ranges]

    def range_at(t: int) -> int:
        """Index of the range containing ``t``, else -1."""
        i = bisect.bisect_right(starts, t) - 1
        return i if i >= 0 and t <= ranges[i][2] else -1

    alive: dict[int, Alloc] = {}
    allocs: list[Alloc] = []
    n = len(ranges)
    level = 0
    start_level = [0] * n
    peak = [0] * n
    temp = [0] * n
    after = [None] * n  # level once the node's dead values are freed (before the next range)
    best, best_t = 0, None
    cur = -1  # the last range that began
    for t, ptr, size in events:
        while cur + 1 < n and starts[cur + 1] <= t:
            if cur >= 0 and after[cur] is None:
                after[cur] = level
            cur += 1
            start_level[cur] = peak[cur] = level
        inside = cur >= 0 and t <= ranges[cur][2]
        if size > 0:
            a = Alloc(ptr, size, t, node=cur if inside else -1)
            old = alive.pop(ptr, None)
            if old is not None:  # an address reused without a free we saw: the old block is gone
                old.freed = t
                level -= old.size
            alive[ptr] = a
            allocs.append(a)
            level += size
        else:
            a = alive.pop(ptr, None)
            if a is None:
                continue  # memory allocated before the pass: not followed
            a.freed, a.freed_in = t, cur if inside else -1
            level -= a.size
            if inside and a.node == cur:
                temp[cur] += a.size
        if inside:
            peak[cur] = max(peak[cur], level)
        if level > best:
            best, best_t = level, t
    while cur + 1 < n:  # ranges after the last event
        if cur >= 0 and after[cur] is None:
            after[cur] = level
        cur += 1
        start_level[cur] = peak[cur] = level
    if cur >= 0 and after[cur] is None:
        after[cur] = level

    base = sum(held.values())
    # the level at each range's end: delta is what the node still holds minus what it freed
    end_level = _levels_at([r[2] for r in ranges], allocs)
    records: dict[str, dict[str, int]] = {}
    packs = [when for when, _ in saved or () if when is not None]
    last_pack = max(packs) if packs else None
    for i, (name, _, _) in enumerate(ranges):
        record = {
            "mem_delta_bytes": end_level[i] - start_level[i],
            "mem_temp_bytes": temp[i],
            "mem_peak_bytes": max(0, peak[i] - start_level[i]),
            "mem_live_bytes": base + (after[i] or 0),
        }
        if saved is not None and (last_pack is None or ranges[i][1] <= last_pack):
            record["mem_saved_bytes"] = 0  # a forward node (the backward runs after the last save)
        seen = records.get(name)
        if seen is None:
            records[name] = record
        else:  # a graph run twice in the pass: bytes add up, the peak is the highest, live is the last
            seen["mem_delta_bytes"] += record["mem_delta_bytes"]
            seen["mem_temp_bytes"] += record["mem_temp_bytes"]
            seen["mem_peak_bytes"] = max(seen["mem_peak_bytes"], record["mem_peak_bytes"])
            seen["mem_live_bytes"] = record["mem_live_bytes"]
    saved_total = 0
    if saved is not None:
        by_ptr: dict[int, list[Alloc]] = {}
        for a in allocs:
            by_ptr.setdefault(a.ptr, []).append(a)
        counted: set[int] = set()
        for when, ptr in saved:
            owner = _holding(by_ptr.get(ptr, []), when)
            if owner is None or id(owner) in counted:
                continue  # a parameter, an input or memory from before the pass
            counted.add(id(owner))
            saved_total += owner.size
            if owner.node >= 0:
                record = records[ranges[owner.node][0]]
                record["mem_saved_bytes"] = record.get("mem_saved_bytes", 0) + owner.size
    summary: dict[str, Any] = {}
    if ranges:
        if best_t is None:
            at, best_t = 0, ranges[0][1]
        else:
            at = range_at(best_t)
            if at < 0:  # between ranges: charged to the node that ran last
                at = max(0, bisect.bisect_right(starts, best_t) - 1)
        summary = {"peak_bytes": base + best, "peak_node": ranges[at][0],
                   "breakdown": _breakdown(allocs, best_t, at, held, grads), "held_bytes": base}
        again = []  # other nodes that raise the level to the run's peak too (reached, freed, reached again);
        for i, (name, _, _) in enumerate(ranges):  # not those that only run while it is held (an output, an in-place op)
            if best > 0 and peak[i] == best > start_level[i] and i != at and name != ranges[at][0] and name not in again:
                again.append(name)
        if again:
            summary["peak_again"] = again
        if best > 0 and (best_t < ranges[0][1] or best_t > max(r[2] for r in ranges)):
            summary["peak_outside"] = True  # before the first range or after the last (a session's loop code)
        if saved is not None:
            summary["saved_bytes"] = saved_total
    elif allocs:  # no node ran inside the recording (a session step of a compiled model): the peak alone
        summary = {"peak_bytes": base + best, "peak_node": "", "held_bytes": base, "peak_outside": True,
                   "breakdown": _breakdown(allocs, best_t if best_t is not None else allocs[0].made, -1, held, grads)}
    return _Accounted(records, summary, level)


def _levels_at(times: list[int], allocs: list[Alloc]) -> list[int]:
    """The followed allocations' level at each of ``times``."""
    changes = sorted([(a.made, a.size) for a in allocs] + [(a.freed, -a.size) for a in allocs if a.freed is not None])
    at = [c[0] for c in changes]
    running = [0]
    for _, d in changes:
        running.append(running[-1] + d)
    return [running[bisect.bisect_right(at, t)] for t in times]


def _holding(candidates: list[Alloc], when: int | None) -> Alloc | None:
    """The allocation at an address alive at ``when`` (the latest made before it)."""
    best = None
    for a in candidates:
        if (when is None or a.made <= when) and (a.freed is None or when is None or a.freed > when):
            best = a
    return best


def held_breakdown(held: dict[str, int]) -> dict[str, int]:
    """A peak's breakdown (every category of :data:`CATEGORIES`) before the run's own
    allocations are added: what the run held before it began (its inputs count as activations)."""
    out = {c: 0 for c in CATEGORIES}
    out["parameters"] = held.get("parameters", 0)
    out["buffers"] = held.get("buffers", 0)
    out["optimizer_state"] = held.get("optimizer_state", 0)
    out["activations"] = held.get("inputs", 0)
    return out


def _breakdown(allocs: list[Alloc], t: int, node: int, held: dict[str, int], grads: set[int]) -> dict[str, int]:
    out = held_breakdown(held)
    for a in allocs:
        if a.made > t or (a.freed is not None and a.freed <= t):
            continue
        if a.node == node and a.node >= 0 and a.freed is not None and a.freed_in == node:
            out["temporaries"] += a.size
        elif a.freed is None and a.ptr in grads:
            out["gradients"] += a.size
        else:
            out["activations"] += a.size
    return out


def _device_key(device: torch.device) -> tuple[str, int]:
    index = device.index
    if index is None:
        index = torch.cuda.current_device() if device.type == "cuda" and torch.cuda.is_available() else -1
    return (device.type, index)


@dataclass(frozen=True)
class MemoryPass:
    """What :func:`fxprof.measure.eager.loop` asks for: memory on these devices."""

    devices: tuple[torch.device, ...]


def memory_pass(devices: Iterable[torch.device | str]) -> MemoryPass:
    return MemoryPass(tuple(torch.device(d) for d in devices))


def memory_per_node(captured: Any, spec: MemoryPass, args: tuple, kwargs: dict, backward: bool = False,
                    meta: dict[str, Any] | None = None) -> dict[str, dict[str, int]]:
    """Run ``captured``'s untimed pass once under a :class:`MemoryRecording`; return the per-node
    columns and put the run's peak in ``meta["memory"]``."""
    if profiler_running():  # the caller's own torch.profiler: profilers cannot nest
        if meta is not None:
            meta["notes"] = meta.get("notes", []) + [
                "memory pass skipped: torch.profiler was already running around fxprof.profile (profilers do not nest)"]
        return {}
    rec = MemoryRecording(spec.devices, getattr(captured, "module", None), (args, kwargs),
                          getattr(captured, "optimizer", None), backward)
    with kineto_quiet(UNKNOWN_BLOCK_LINE), rec:
        captured.run_pass(ranged_pass, args, kwargs)
    if meta is not None and rec.summary:
        meta["memory"] = rec.summary
    return rec.records
