"""The kernel call sites of inductor's generated wrapper, and the wrapper's ``call`` rewritten with
fxprof's marks (compiled mode's own kernel timer; :mod:`fxprof.measure.compiled.wrapper_timer`
runs it). Reads text only: no torch here, so a torch release whose wrapper changes shape fails
these functions loudly (:class:`NotInstrumentable`, with the reason) and compiled mode falls back
to torch.profiler.

Inductor writes one Python module per compiled graph. Its ``call(args)`` (``Runner.call(self,
args)`` where graph partitions are on, the default since torch 2.8; a module-level ``call`` before)
runs the graph: allocations, then one statement per kernel call, in order:

- a generated kernel, a module-level name bound to ``async_compile.cpp_pybinding(...)`` /
  ``async_compile.triton(...)``, called as ``cpp_fused_relu_0(buf0, ...)`` or launched as
  ``triton_poi_fused_relu_0.run(..., stream=stream0)``;
- an extern call: a library op (``extern_kernels.addmm(...)``, ``torch.ops.aten.mm.default(...)``).

With ``trace.provenance_tracking_level=1`` inductor writes ``# [Provenance debug handles] k:N``
above every such statement; ``k:N`` is the key of the graph's provenance (``cppCodeToPost``,
``triton_kernel_to_post_grad``), which names the FX nodes the call computes. So a call site is
joined to its nodes with no name or order matching (:attr:`Site.key`).

:func:`instrument` gives the ``call`` function with a mark before and after every kernel call
and at the call's start and end. A mark on the CPU is one clock read stored into this call's row
of slots (``_fxk_t[j] = _fxk_c()``; the row is allocated and kept once per call, so a graph that
runs several times in a model run, a block after a graph break, keeps a row per call). The
generated source is never edited: the rewritten function is compiled apart and swapped in while
fxprof times, then swapped out.
"""

from __future__ import annotations

import ast
import dataclasses
import re

__all__ = ["Site", "Instrumented", "NotInstrumentable", "HANDLE", "instrument", "kernel_names", "find_call", "dotted",
           "handle_above"]

#: inductor's provenance handle comment above a kernel call; its group is the provenance key
HANDLE = re.compile(r"#\s*\[Provenance debug handles\]\s*(\S+)")
#: how an extern call's callee starts (a library op called from the wrapper)
EXTERN_PREFIXES = ("extern_kernels.", "torch.ops.", "aten.")
#: the names the rewritten ``call`` reads from its globals: where a finished row goes, the clock
KEEP, CLOCK = "_FXK_KEEP", "_FXK_CLOCK"


class NotInstrumentable(Exception):
    """The generated wrapper has no Python ``call`` whose kernel calls fxprof can mark; the
    message says why (``cpp_wrapper``, no kernel call found, a shape fxprof does not know)."""


@dataclasses.dataclass(frozen=True)
class Site:
    """One kernel call statement of the generated ``call``.

    Attributes:
        index: its place among the call's sites, in code order.
        line: its line in the generated source (1-based).
        callee: the callee as written: ``cpp_fused_relu_0``, ``extern_kernels.addmm``,
            ``triton_poi_fused_relu_0.run``.
        kind: ``generated`` (a C++ kernel), ``triton`` (a Triton launch) or ``extern``.
        key: inductor's provenance key (``cpp_fused_relu_0:3``), "" where it wrote no handle.
        start, end: the slots of its two marks in a call's row.
    """

    index: int
    line: int
    callee: str
    kind: str
    key: str
    start: int
    end: int


@dataclasses.dataclass(frozen=True)
class Instrumented:
    """The generated ``call`` rewritten with marks: compile :attr:`module` (an ``ast.Module``
    holding only the function) and exec it in globals that hold :data:`KEEP` and :data:`CLOCK`.
    A row has :attr:`width` slots: slot 0 is the call's start, the last its end."""

    module: ast.Module
    sites: tuple[Site, ...]
    is_method: bool
    width: int


def dotted(node: ast.AST) -> str:
    """``a.b.c`` for a Name/Attribute chain, "" for anything else."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return ""


def kernel_names(tree: ast.Module) -> set[str]:
    """The module-level names bound to ``async_compile.<x>(...)``: the generated kernels."""
    out: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call) and \
                dotted(node.value.func).startswith("async_compile."):
            out.update(t.id for t in node.targets if isinstance(t, ast.Name))
    return out


def find_call(tree: ast.Module) -> tuple[ast.FunctionDef, bool]:
    """The generated ``call``: ``(its def, is a method)``, ``Runner.call(self, args)`` or a
    module-level ``call(args)``. Raises :class:`NotInstrumentable` when there is neither (a
    ``cpp_wrapper`` module binds ``call`` to its C++ entry)."""
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == "Runner":
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name == "call":
                    return item, True
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == "call":
            return node, False
    cpp = any(isinstance(n, ast.Assign) and isinstance(n.value, ast.Call) and "_wrap_func" in dotted(n.value.func)
              for n in tree.body)
    raise NotInstrumentable(
        "the generated wrapper is C++ (inductor's cpp_wrapper): its kernel calls are not Python statements" if cpp else
        "the generated wrapper has no Python call() (neither Runner.call nor a module-level def call)")


def _classify(stmt: ast.stmt, kernels: set[str]) -> tuple[str, str] | None:
    """``(kind, callee)`` when ``stmt`` is one kernel call (``f(...)`` or ``buf = f(...)``)."""
    value = stmt.value if isinstance(stmt, (ast.Expr, ast.Assign, ast.AnnAssign)) else None
    if not isinstance(value, ast.Call):
        return None
    name = dotted(value.func)
    if name in kernels:
        return "generated", name
    if name.endswith(".run") and name[:-4] in kernels:
        return "triton", name
    if name.startswith(EXTERN_PREFIXES):
        return "extern", name
    return None


def handle_above(lines: list[str], lineno: int, after: int, callee: str) -> str:
    """The provenance key written for the call at line ``lineno``: the nearest handle comment
    above it and below line ``after`` (the previous site) whose kernel is the callee (a Triton
    launch has ``stream0 = get_raw_stream(0)`` between its comment and its ``.run``), else the
    nearest handle there, else ""."""
    base = callee[:-4] if callee.endswith(".run") else callee
    nearest = ""
    for i in range(lineno - 2, max(after, 0) - 1, -1):
        found = HANDLE.search(lines[i])
        if found:
            if found.group(1).rsplit(":", 1)[0] == base:
                return found.group(1)
            nearest = nearest or found.group(1)
    return nearest


def _mark(slot: int) -> ast.stmt:
    return ast.parse(f"_fxk_t[{slot}] = _fxk_c()").body[0]


def instrument(source: str) -> Instrumented:
    """``source`` (a generated wrapper module's text) with its ``call`` rewritten: a mark before
    and after every kernel call statement (also inside ``with``/``if`` blocks, such as a CUDA
    wrapper's device guard), one at the call's start and one before its return. Raises
    :class:`NotInstrumentable` (why) where there is no Python ``call``."""
    try:
        tree = ast.parse(source)
    except SyntaxError as exc:
        raise NotInstrumentable(f"the generated wrapper does not parse as Python ({exc.msg}, line {exc.lineno})") from exc
    lines = source.splitlines()
    kernels = kernel_names(tree)
    fn, is_method = find_call(tree)
    sites: list[Site] = []
    next_slot = [1]  # slot 0 is the call's start

    def take() -> int:
        next_slot[0] += 1
        return next_slot[0] - 1

    def rewrite(block: list[ast.stmt]) -> list[ast.stmt]:
        out: list[ast.stmt] = []
        for stmt in block:
            found = _classify(stmt, kernels)
            if found is not None:
                kind, callee = found
                after = sites[-1].line if sites else fn.lineno
                start, end = take(), take()
                sites.append(Site(len(sites), stmt.lineno, callee, kind, handle_above(lines, stmt.lineno, after, callee),
                                  start, end))
                out.extend([_mark(start), stmt, _mark(end)])
                continue
            for field in ("body", "orelse", "finalbody"):  # a device guard's or a stream's with-block, an if
                inner = getattr(stmt, field, None)
                if isinstance(inner, list) and inner and isinstance(inner[0], ast.stmt):
                    setattr(stmt, field, rewrite(inner))
            out.append(stmt)
        return out

    body = rewrite(fn.body)  # a graph of views alone has no kernel call: its call is timed as a whole
    last = take()
    returns = [i for i, stmt in enumerate(body) if isinstance(stmt, ast.Return)]
    if len(returns) != 1 or returns[0] != len(body) - 1 or any(isinstance(n, ast.Return) for s in body[:-1]
                                                                 for n in ast.walk(s)):
        raise NotInstrumentable("the generated call() does not end in its one return statement")
    body.insert(len(body) - 1, _mark(last))
    width = next_slot[0]
    # one row per call of the graph, kept before it is filled; the clock and the row are locals, so a
    # mark is LOAD_FAST, CALL, LOAD_FAST, STORE_SUBSCR
    prologue = ast.parse(f"_fxk_t = [0] * {width}\n{KEEP}(_fxk_t)\n_fxk_c = {CLOCK}").body
    fn.body = prologue + [_mark(0)] + body
    fn.decorator_list = []
    module = ast.fix_missing_locations(ast.Module(body=[fn], type_ignores=[]))
    return Instrumented(module, tuple(sites), is_method, width)
