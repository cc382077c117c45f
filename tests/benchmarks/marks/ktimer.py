"""Prototype (issue 60): time inductor's kernel calls without torch.profiler.

After inductor generates a graph's wrapper module (its ``call``), a copy of ``call`` is made whose
every kernel call statement (generated C++/Triton kernels, ``extern_kernels.*``, ``torch.ops.*``
fallbacks) is bracketed by two clock reads stored into a preallocated list (two slots per call
site). Each call site is joined to inductor's provenance (``# [Provenance debug handles] k:N``
comment in front of it -> ``cppCodeToPost`` / ``triton_kernel_to_post_grad`` -> ``postToPre``), so
it is charged to post-grad and dynamo FX nodes as fxprof does today.

The instrumented copy is exec'd into its own globals (a copy of the generated module's dict plus
the buffer and the clock): the generated module and its ``call`` stay untouched. It is switched in
for fxprof's own compiled graph by replacing ``CompiledFxGraph.current_callable`` (mode
"callable"), or, where inductor wrapped ``call`` in a closure (cudagraphs, input realignment, the
compiled-region HOP), by swapping the code object of the generated ``Runner.call`` and swapping it
back after (mode "code"). Not part of the fxprof package.
"""

from __future__ import annotations

import ast
import dataclasses
import json
import time
import types
from typing import Any, Callable

import numpy as np

# the wrapper's parsing is the package's (fxprof.measure.compiled.wrapper_sites); this prototype keeps
# only its mark layouts, install modes and the GPU stand-in
from fxprof.measure.compiled.wrapper_sites import HANDLE, dotted, find_call, handle_above, kernel_names  # noqa: E402,F401
from fxprof.measure.compiled.wrapper_timer import clock_read_ns as mark_cost_ns  # noqa: E402,F401

EXTERN_PREFIXES = ("extern_kernels.", "torch.ops.", "aten.", "inductor_ops.", "_quantized.")


@dataclasses.dataclass
class Site:
    index: int          # its place among the call's sites
    line: int           # line in the generated source
    kernel: str         # the callee as written (cpp_fused_relu_0, extern_kernels.addmm, triton_poi_x.run)
    kind: str           # generated | triton | extern
    handle: str         # provenance key (kernel:N), '' when inductor wrote none
    post: tuple = ()    # post-grad nodes (inductor's provenance)
    pre: tuple = ()     # dynamo FX nodes
    start: int = -1     # the slots of its start and end marks in a row
    end: int = -1


def classify(stmt: ast.stmt, kernels: set[str]) -> tuple[str, str] | None:
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


#: how a mark reads the time, per device: a host clock into the row's slot, or (GPU) the row's
#: preallocated CUDA event for that slot recorded on the current stream (read once a run, after a sync)
MARKS = {"cpu": "_fxk_t[{slot}] = _fxk_c()", "cuda": "_fxk_t[{slot}].record()"}
PROLOGUES = {"cpu": "_fxk_t = [0] * {n}\n_FXK_KEEP(_fxk_t)\n_fxk_c = _FXK_CLOCK",
             "cuda": "_fxk_t = _FXK_ROW()"}


def instrument(source: str, device: str = "cpu", marks: str = "pairs") -> tuple[ast.FunctionDef, list[Site], bool, int]:
    """The generated ``call`` rewritten with marks: ``(def, sites, is_method, slots per row)``.

    ``marks``: "pairs" (a mark before and after every call site), "shared" (as pairs, but two
    sites with nothing between them share the mark between them: the same times, fewer reads) or
    "boundaries" (a mark before each site and after the last one of a block: a site's time also
    holds the allocations and ``del``s between it and the next site; about half the reads)."""
    tree = ast.parse(source)
    lines = source.splitlines()
    kernels = kernel_names(tree)
    fn, is_method = find_call(tree)
    sites: list[Site] = []

    def mark(slot: int) -> ast.stmt:
        return ast.parse(MARKS[device].format(slot=slot)).body[0]

    slots = [1]  # slot 0: the call's start; the last slot: its end (before its return)

    def new_mark() -> tuple[int, ast.stmt]:
        slots[0] += 1
        return slots[0] - 1, mark(slots[0] - 1)

    def rewrite(block: list[ast.stmt]) -> list[ast.stmt]:
        out: list[ast.stmt] = []
        last_end: ast.stmt | None = None  # the end mark just appended (shared)
        open_site: Site | None = None     # a site whose end mark is deferred (boundaries)

        def close() -> None:
            nonlocal open_site
            if open_site is not None:
                open_site.end, m = new_mark()
                out.append(m)
                open_site = None

        for stmt in block:
            found = classify(stmt, kernels)
            if found is not None:
                kind, name = found
                after = sites[-1].line if sites else fn.lineno
                site = Site(len(sites), stmt.lineno, name, kind, handle_above(lines, stmt.lineno, after, name))
                sites.append(site)
                if marks == "boundaries" and open_site is not None:
                    site.start, m = new_mark()
                    open_site.end = site.start
                    out.append(m)
                elif marks == "shared" and last_end is not None and out and out[-1] is last_end:
                    site.start = sites[-2].end
                else:
                    site.start, m = new_mark()
                    out.append(m)
                out.append(stmt)
                if marks == "boundaries":
                    open_site = site
                else:
                    site.end, last_end = new_mark()
                    out.append(last_end)
                continue
            if any(isinstance(getattr(stmt, f, None), list) for f in ("body", "orelse", "finalbody")):
                close()  # a nested block: its sites are marked inside it
            for field in ("body", "orelse", "finalbody"):  # with DeviceGuard / stream blocks, ifs
                inner = getattr(stmt, field, None)
                if isinstance(inner, list) and inner and isinstance(inner[0], ast.stmt):
                    setattr(stmt, field, rewrite(inner))
            out.append(stmt)
        if open_site is not None:  # after the block's last statement unless that is a return
            if out and isinstance(out[-1], ast.Return):
                ret = out.pop()
                close()
                out.append(ret)
            else:
                close()
        return out

    body = rewrite(fn.body)
    end_slot = slots[0]
    slots[0] += 1
    if body and isinstance(body[-1], ast.Return):  # the call's own span: its Python between the kernels too
        body[-1:-1] = [mark(end_slot)]
    else:
        body.append(mark(end_slot))
    # one row of marks per call of the graph (a graph runs several times in one model run when a
    # frame compiled once is entered again: a block after a graph break, every layer), kept first,
    # filled after; locals, so a mark is LOAD_FAST, CALL, LOAD_FAST, STORE_SUBSCR
    fn.body = ast.parse(PROLOGUES[device].format(n=slots[0])).body + [mark(0)] + body
    fn.decorator_list = []
    return fn, sites, is_method, slots[0]


def join_provenance(sites: list[Site], provenance: str | None) -> None:
    """Post-grad and dynamo nodes of each site, from inductor's provenance JSON."""
    prov = json.loads(provenance or "{}")
    to_post = prov.get("cppCodeToPost") or {}
    to_post = {**to_post, **(prov.get("triton_kernel_to_post_grad") or {})}
    post_to_pre = prov.get("postToPre") or {}
    for s in sites:
        s.post = tuple(to_post.get(s.handle, ()))
        pre: list[str] = []
        for p in s.post:
            for q in post_to_pre.get(p, ()):
                if q not in pre:
                    pre.append(q)
        s.pre = tuple(pre)


class KernelTimer:
    """One compiled graph's instrumented ``call``: install / remove, one row of marks per run."""

    def __init__(self, compiled_graph: Any = None, *, module: types.ModuleType | None = None, source: str | None = None,
                 provenance: str | None = None, clock: Callable[[], int] = time.perf_counter_ns, event: Any = None,
                 marks: str = "pairs"):
        """From a ``CompiledFxGraph`` (compile_fx's inner_compile hook), or from the generated
        ``module`` alone with its ``source`` and ``provenance`` JSON (what the structured trace
        gives: no hold on the CompiledFxGraph; installs by swapping code). ``event``: a CUDA event
        factory (``lambda: torch.cuda.Event(enable_timing=True)``) for a graph whose kernels run on
        a GPU: marks then record events, read by :meth:`keep_run`."""
        self.graph = compiled_graph
        self.original = compiled_graph.current_callable if compiled_graph is not None else None
        self.mod = module if module is not None else self._module()
        self.device = "cuda" if event is not None else "cpu"
        source = source if source is not None else compiled_graph.source_code
        if provenance is None and compiled_graph is not None:
            provenance = getattr(compiled_graph, "inductor_provenance_mapping_str", None)
        fn_def, self.sites, self.is_method, self.width = instrument(source, self.device, marks)
        self.events = EventRows(event, self.width) if event is not None else None
        join_provenance(self.sites, provenance)
        self.rows: list[list[int]] = []  # this run's calls of the graph, a row of marks each
        code = compile(ast.fix_missing_locations(ast.Module(body=[fn_def], type_ignores=[])),
                       self.mod.__file__, "exec")
        self.globals = dict(self.mod.__dict__)  # own globals: the generated module stays as it was
        self.globals.update(_FXK_KEEP=self.rows.append, _FXK_CLOCK=clock, _FXK_ROW=self.events)
        scratch: dict[str, Any] = {}
        exec(code, self.globals, scratch)
        self.function = scratch["call"]
        self.runs: list[list[list[int]]] = []
        self.mode = ""

    def _module(self) -> types.ModuleType:
        """The generated module behind ``current_callable`` (a bound ``Runner.call`` on 2.8+)."""
        from torch._inductor.codecache import PyCodeCache

        key = self.graph.cache_key
        for mod in reversed(PyCodeCache.modules):
            if getattr(mod, "key", None) == key:
                return mod
        raise LookupError(f"no PyCodeCache module for key {key}")

    @classmethod
    def from_file(cls, path: str, provenance: str | None, **kwargs: Any) -> "KernelTimer":
        """The timer of the generated module written at ``path`` (the ``inductor_output_code``
        trace record's ``file_path``): the module is PyCodeCache's, its source the file's."""
        from torch._inductor.codecache import PyCodeCache

        for mod in reversed(PyCodeCache.modules):
            if getattr(mod, "__file__", None) == path:
                with open(path) as f:
                    return cls(module=mod, source=f.read(), provenance=provenance, **kwargs)
        raise LookupError(f"no PyCodeCache module from {path}")

    def _generated_call(self) -> Any:
        call = self.mod.call
        return call.__func__ if isinstance(call, types.MethodType) else call

    def install(self, mode: str | None = None) -> str:
        """Switch the instrumented copy in for this graph: replace current_callable when it is the
        generated call itself, else (or with ``mode="code"``) swap the code object of the generated
        function (every holder of it then runs the marks, until :meth:`remove`)."""
        generated = self.mod.call
        if mode != "code" and self.graph is not None and self.original == generated:  # (func, self) equal
            self.graph.current_callable = (types.MethodType(self.function, generated.__self__)
                                           if self.is_method else self.function)
            self.mode = "callable"
        else:
            target = self._generated_call()
            self._code = target.__code__
            # the swapped-in code reads its buffer and clock from the generated module's globals
            self.mod.__dict__.update({k: self.globals[k] for k in ("_FXK_KEEP", "_FXK_CLOCK", "_FXK_ROW")})
            target.__code__ = self.function.__code__
            self.mode = "code"
        return self.mode

    def remove(self) -> None:
        if self.mode == "callable":
            self.graph.current_callable = self.original
        elif self.mode == "code":
            self._generated_call().__code__ = self._code
            for k in ("_FXK_KEEP", "_FXK_CLOCK", "_FXK_ROW"):
                self.mod.__dict__.pop(k, None)
        self.mode = ""

    def keep_run(self) -> None:
        """Close one model run: its calls' rows move to ``runs`` (GPU: after the caller's sync, the
        events' times, as ns from each row's first event, and the events go back to the pool)."""
        if self.events is not None:
            self.runs.append(self.events.read())
            return
        self.runs.append(self.rows[:])
        self.rows.clear()

    def durations_ns(self) -> np.ndarray:
        """runs x sites: each site's end - start mark, summed over the graph's calls in the run."""
        out = np.zeros((len(self.runs), len(self.sites)), dtype=np.int64)
        for r, rows in enumerate(self.runs):
            if rows:
                a = np.asarray(rows, dtype=np.int64)
                ends = [x.end for x in self.sites]
                starts = [x.start for x in self.sites]
                out[r] = (a[:, ends] - a[:, starts]).sum(axis=0)
        return out

    def call_ns(self) -> np.ndarray:
        """runs: the graph's calls' own time (first to last mark), summed over its calls in the run;
        less the sites' time it is the wrapper's Python (allocations, asserts, ``del``s, marks)."""
        return np.asarray([sum(row[-1] - row[0] for row in rows) for rows in self.runs], dtype=np.int64)

    def calls_per_run(self) -> list[int]:
        return [len(rows) for rows in self.runs]


class EventRows:
    """GPU marks: a row of ``width`` preallocated timing events per call of the graph, taken from a
    pool (grown in the first runs, then reused: no allocation in timed runs), read once a run."""

    def __init__(self, factory: Callable[[], Any], width: int):
        self.factory, self.width = factory, width
        self.free: list[list[Any]] = []
        self.taken: list[list[Any]] = []

    def __call__(self) -> list[Any]:
        row = self.free.pop() if self.free else [self.factory() for _ in range(self.width)]
        self.taken.append(row)
        return row

    def read(self) -> list[list[int]]:
        """Each taken row as ns offsets from its first event (``elapsed_time`` is in ms); the rows
        go back to the pool. The caller has synchronized."""
        out = []
        for row in self.taken:
            first = row[0]
            out.append([int(round(first.elapsed_time(e) * 1e6)) for e in row])
        self.free.extend(self.taken)
        self.taken.clear()
        return out


def capturing_backend(store: list, config_patches: dict | None = None) -> Callable:
    """A torch.compile backend: inductor's compile_fx, keeping each CompiledFxGraph it makes."""
    from torch._inductor.compile_fx import compile_fx, compile_fx_inner

    def inner(gm, example_inputs, **kwargs):
        out = compile_fx_inner(gm, example_inputs, **kwargs)
        store.append(out)
        return out

    def backend(gm, example_inputs):
        return compile_fx(gm, example_inputs, inner_compile=inner, config_patches=config_patches)

    return backend
