"""The profiling interpreter: runs a GraphModule node by node and times every node.

Between a node's two marks there is the node's call and nothing else. Everything a node needs
that does not change between runs is resolved once per graph, before the first run (the
*plan*): the submodule a ``call_module`` node calls, the object whose attribute a ``get_attr``
node reads, the method name of a ``call_method`` node, where each argument comes from, and
which values die after which node. The plan is compiled into one Python function, like the
``GraphModule``'s own generated ``forward``, in which every node is::

    <bind: fetch arguments, read an attribute, look the method up>     untimed
    m0 = mark(); h0 = host()                                          the node's marks
    value = call(args)                                                 the node's own work
    h1 = host(); m1 = mark()
    mb[2k] = m0; mb[2k+1] = m1; hb[2k] = h0; hb[2k+1] = h1            untimed
    <free the values whose last use this was>                          untimed

(with the CPU clock, one reading serves as mark and host time: ``t0 = mark()`` ... ``t1 = mark()``).

With an event timer (``timer.boundary_marks``: ``"cuda"``, ``"kernel"``) a mark is a CUDA event
that costs the host about as much as a kernel launch, so the plan records ONE per node
boundary: what lies between two nodes (binding arguments, freeing values) is host-only work
that enqueues nothing on the stream, so a node's end mark is the next node's start mark::

    e = first or mark()                                                the plan's first boundary
    <bind>
    h0 = host(); value = call(args); h1 = host(); m1 = mark()          a node that launches
    mb[2k] = e; mb[2k+1] = e = m1; hb[2k] = h0; hb[2k+1] = h1
    <bind>
    h0 = host(); value = x.view(...); h1 = host()                      a node that launches nothing
    mb[2k] = e; mb[2k+1] = e; ...                                      (device time 0, host time kept)

A graph of N launching nodes takes N + 1 marks (and the run's own first and last marks are
these when the interpreter opens the run itself); which nodes launch nothing is decided from
the graph (:mod:`fxprof.measure.timing.launches`). The slot layout (``mb[2k]``/``mb[2k+1]``) is the
same for every timer, so the recorder, the isolated pass and the training step read it as before.
The marks go straight into preallocated buffers (``mb``/``hb``, :meth:`Recorder.plan_buffers`),
slot ``k`` for the plan's ``k``-th node: no tuple is made and no list grows per node, and
after the run the buffers become samples in a few numpy operations.

Reading a placeholder, an attribute (a parameter read costs nothing in the model) or the
output is not work the model does: those nodes get marks around nothing. Only the raw marks
are kept during a run; the recorder turns them into milliseconds after the run's one
synchronization point (``timer.end_run()``), so the CUDA timer never stalls the host.

A subclass that overrides how nodes run (``run_node``, ``call_module``, ``fetch_args_kwargs_from_env``...)
gets fx.Interpreter's generic loop instead, still with the call alone between the marks
(:meth:`ProfilingInterpreter.run_node`); so do runs with ``initial_env`` and runs inside
``torch.profiler`` ranges (``timer="kernel"``).
"""

from __future__ import annotations

import contextlib
import keyword
import math
from typing import Any, Callable

import torch
from torch import fx

from ...core.recording import Recording
from ...errors import NodeFailure, name_failed_node, node_failure
from ..common.tree import PlainContainers, describe_value
from ..device.bridge import RANGE_PREFIX
from ..timing.launches import launches_nothing
from ..timing.recorder import PlanSlots, Recorder, append_marks
from ..timing.timers import Timer
from .graph import target_name

__all__ = ["ProfilingInterpreter", "Recorder", "Recording", "append_marks", "resolve_call"]

#: Interpreter methods that decide how a node runs; a subclass overriding one gets the generic loop
_HOOKS = ("run_node", "call_module", "call_function", "call_method", "get_attr", "placeholder", "output",
          "fetch_args_kwargs_from_env", "fetch_attr", "map_nodes_to_values")

#: ops whose "call" only reads a value: timed as marks around nothing
_READS = ("placeholder", "get_attr", "output")


def resolve_call(interp: fx.Interpreter, n: fx.Node, args: tuple, kwargs: dict,
                 base: type = fx.Interpreter) -> tuple[Callable[..., Any], tuple, dict]:
    """What running ``n`` on ``args``/``kwargs`` means, looked up before any timing: the
    callable and the arguments to call it with. Only the call itself belongs in a node's time.

    A ``call_module`` node's submodule and a ``call_method`` node's bound method are looked up
    here (``fx.Interpreter`` does it inside its ``call_module``/``call_method``); an op whose
    method ``type(interp)`` overrides relative to ``base`` runs through that override.
    """
    op = n.op
    if getattr(type(interp), op) is not getattr(base, op):
        return getattr(interp, op), (n.target, args, kwargs), {}
    if op == "call_function":
        return n.target, args, kwargs  # type: ignore[return-value]
    if op == "call_module":
        return interp.fetch_attr(n.target), args, kwargs  # type: ignore[arg-type]
    if op == "call_method":
        self_obj, *rest = args
        return getattr(self_obj, n.target), tuple(rest), kwargs  # type: ignore[arg-type]
    return getattr(interp, op), (n.target, args, kwargs), {}


class ProfilingInterpreter(PlainContainers, fx.Interpreter):
    """An ``fx.Interpreter`` that times every node of every run.

    Args:
        module: the ``GraphModule`` to run.
        timer: a :class:`~fxprof.measure.timing.timers.Timer`; defaults to the CPU clock.
        garbage_collect_values: free intermediate values once their last user ran (as eager
            execution would), passed to ``fx.Interpreter``.
        recorder: share a :class:`Recorder` with other graphs (default: a new one).
        prefix: prepended to node names in the recording (``"g1:"`` for a second graph).

    Every call of :meth:`run` appends one sample per executed node to :attr:`recording` and
    returns exactly what the module returns. Inside a run the recorder already began (another
    graph's caller opened it), nodes join that run. A node that raises re-raises
    its own exception (the type the model raises without fxprof), with a note naming the node,
    its op and target and what it received (also as ``exc.fxprof_node``,
    :class:`~fxprof.errors.NodeFailure`); runs that completed before stay in :attr:`recording`.

    Submodules and attribute owners are looked up once, at the first run: a submodule
    replaced on the model after that is not seen by this interpreter (make a new one).
    """

    def __init__(
        self,
        module: fx.GraphModule,
        timer: Timer | None = None,
        garbage_collect_values: bool = True,
        recorder: Recorder | None = None,
        prefix: str = "",
    ):
        super().__init__(module, garbage_collect_values=garbage_collect_values)
        self.recorder = recorder if recorder is not None else Recorder(timer)
        self.timer: Timer = self.recorder.timer
        self.prefix = prefix
        self._names = {n: prefix + n.name for n in self.graph.nodes}
        self._calls: dict[fx.Node, Any] = {}  # generic loop: call_module targets, looked up once
        self._compiled: Callable[..., Any] | None = None
        self._slots: PlanSlots | None = None  # the nodes the compiled plan marks, in order
        cls = type(self)
        plain = all(getattr(cls, hook) is getattr(ProfilingInterpreter, hook) for hook in _HOOKS)
        #: True when runs take the compiled plan; False: fx.Interpreter's loop over run_node
        self.lean = not self.recorder.node_ranges and plain
        #: one mark per node boundary (an event timer, and no subclass hook that might enqueue
        #: device work between two nodes' calls); the names of the nodes that get no mark
        self.boundaries = plain and bool(getattr(self.timer, "boundary_marks", False))
        self.unmarked: frozenset[str] = frozenset(
            self._names[n] for n in self.graph.nodes if launches_nothing(n, self.module)) if self.boundaries else frozenset()
        self._boundary: Any = None  # the generic loop's last boundary mark in this call
        self.recorder.unmarked.update(self.unmarked)
        if self.recorder.node_ranges:
            self.run_node = self._run_node_in_range  # type: ignore[method-assign]
        # The graph position is already in our error message; torch.fx's own
        # "While executing ..." suffix would repeat it.
        self.extra_traceback = False

    @property
    def recording(self) -> Recording:
        return self.recorder.recording

    def reset(self) -> None:
        """Forget every recorded run (used after warm-up)."""
        self.recorder.reset()

    def run(self, *args: Any, initial_env: dict[fx.Node, Any] | None = None,
            enable_io_processing: bool = True) -> Any:
        if self.lean and self._compiled is None:  # once per graph, before any run's marks
            self._compiled, self._slots = compile_plan(self)
        recorder = self.recorder
        if recorder.active:
            return self._run(args, initial_env, enable_io_processing)
        if not self.boundaries:
            with recorder.run():
                return self._run(args, initial_env, enable_io_processing)
        # this call is the whole run: nothing is enqueued between the run's first mark and the
        # graph's first node, nor after its last: the run's marks are the graph's first and last
        recorder.begin_run()
        try:
            out = self._run(args, initial_env, enable_io_processing, recorder.start_mark)
        except BaseException:
            recorder.abort_run()
            raise
        recorder.end_run(self._boundary)
        return out

    def boxed_run(self, args_list: list[Any]) -> Any:
        """Run with the boxed calling convention (``args_list`` is cleared, so inputs can be
        freed once their last user ran), as AOTAutograd calls compiled graphs."""
        if not self.lean:
            return super().boxed_run(args_list)
        args = list(args_list)
        args_list.clear()
        return self.run(*args)

    def _run(self, args: tuple, initial_env: dict[fx.Node, Any] | None, enable_io_processing: bool,
             first: Any = None) -> Any:
        """One call of the graph; ``first``: a mark already taken with nothing enqueued since
        (the run's own first mark), used as the first boundary (boundary marks only)."""
        if initial_env is not None or not self.lean:
            if self.boundaries:
                self._boundary = first if first is not None else self.timer.mark()
            return fx.Interpreter.run(self, *args, initial_env=initial_env, enable_io_processing=enable_io_processing)
        run = self._compiled
        assert run is not None
        if enable_io_processing:
            args = self.graph.process_inputs(*args)
        timer = self.timer
        marks, host = self.recorder.plan_buffers(self._slots)
        if self.boundaries:
            out = run(iter(args), timer.mark, timer.host_ns, marks, host, first)
            self._boundary = marks[-1] if marks else first  # the last boundary of this call
        else:
            out = run(iter(args), timer.mark, timer.host_ns, marks, host)
        return self.graph.process_outputs(out) if enable_io_processing else out

    def run_node(self, n: fx.Node) -> Any:
        """The generic loop's step: fetch and resolve outside the marks, call between them."""
        set_current = getattr(self, "_set_current_node", None)
        with set_current(n) if set_current is not None else contextlib.nullcontext():
            args, kwargs = self.fetch_args_kwargs_from_env(n)
            try:
                if n.op in _READS:  # reading a value is not work of the model
                    fn: Any = None
                    result = getattr(self, n.op)(n.target, args, kwargs)
                elif n.op == "call_module" and type(self).call_module is ProfilingInterpreter.call_module:
                    fn = self._calls.get(n)
                    if fn is None:
                        fn = self._calls[n] = self.fetch_attr(n.target)  # type: ignore[arg-type]
                    call_args, call_kwargs = args, kwargs
                else:
                    fn, call_args, call_kwargs = resolve_call(self, n, args, kwargs, ProfilingInterpreter)
                timer = self.timer
                if self.boundaries:  # one mark per boundary, none for a node that launches nothing
                    m0 = self._boundary
                    h0 = timer.host_ns()
                    if fn is not None:
                        result = fn(*call_args, **call_kwargs)
                    h1 = timer.host_ns()
                    m1 = m0 if self._names[n] in self.unmarked else timer.mark()
                    self._boundary = m1
                else:
                    m0 = timer.mark()
                    h0 = timer.host_ns()
                    if fn is not None:
                        result = fn(*call_args, **call_kwargs)
                    h1 = timer.host_ns()
                    m1 = timer.mark()
            except Exception as exc:
                raise node_error(n, args, kwargs, exc)  # the model's own exception, the node named on it
            self.recorder.append((self._names[n], m0, m1, h0, h1))
            return result

    def _run_node_in_range(self, n: fx.Node) -> Any:
        # The range opens before the first mark and closes after the last, so its own cost
        # (about 10 us of host time) stays out of the node's time.
        with torch.profiler.record_function(RANGE_PREFIX + self._names[n]):
            return ProfilingInterpreter.run_node(self, n)


# ----------------------------------------------------------------- the compiled plan
def compile_plan(interp: ProfilingInterpreter) -> tuple[Callable[..., Any], PlanSlots]:
    """The plan of ``interp``'s graph as one function ``run(inputs, mark, host, mb, hb)``, and
    the nodes it marks, in order (slot ``k``: ``mb[2k]``/``mb[2k+1]``, likewise ``hb``).

    Every node's value lives in a local variable ``v<i>`` (``i``: graph position). Callables
    and constants are bound once, as globals of the generated function; arguments that are
    plain values or other nodes are written into the call; containers of them are built
    before the first mark. The function returns the output node's value.
    """
    nodes = list(interp.graph.nodes)
    index = {n: i for i, n in enumerate(nodes)}
    namespace: dict[str, Any] = {"_slice": slice}
    one_clock = interp.recorder.one_clock  # the recorder reads its buffers the same way
    boundaries = interp.boundaries  # one mark per node boundary (an event timer)

    def bind(value: Any) -> str:
        name = f"_c{len(namespace)}"
        namespace[name] = value
        return name

    def src(a: Any) -> str:
        if isinstance(a, fx.Node):
            return f"v{index[a]}"
        if a is None or isinstance(a, (bool, int, str)) and type(a) in (bool, int, str):
            return repr(a)
        if type(a) is float and math.isfinite(a):
            return repr(a)
        if type(a) is tuple:
            return "(" + "".join(src(x) + ", " for x in a) + ")"
        if isinstance(a, tuple) and hasattr(a, "_fields"):  # a namedtuple keeps its type
            return f"{bind(type(a))}(" + ", ".join(src(x) for x in a) + ")"
        if isinstance(a, list) and type(a) in (list, fx.immutable_collections.immutable_list):
            return "[" + ", ".join(src(x) for x in a) + "]"
        if isinstance(a, dict) and type(a) in (dict, fx.immutable_collections.immutable_dict):
            return "{" + ", ".join(f"{bind(k)}: {src(v)}" for k, v in a.items()) + "}"
        if type(a) is slice:
            return f"_slice({src(a.start)}, {src(a.stop)}, {src(a.step)})"
        return bind(a)

    def flat(a: Any) -> bool:
        return not isinstance(a, (tuple, list, dict, slice)) or (type(a) is tuple and not a)

    def call_args(args: tuple, kwargs: dict) -> tuple[list[str], str]:
        """(lines to run before the marks, the argument list of the call). A container argument
        (``cat([x, y])``, ``view(x, (b, -1))``) is built into its own local before the marks;
        between them stays a plain call with its arguments written out."""
        prepare: list[str] = []

        def arg(a: Any) -> str:
            if flat(a):
                return src(a)
            local = f"p{len(prepare)}"
            prepare.append(f"{local} = {src(a)}")
            return local

        if all(k.isidentifier() and not keyword.iskeyword(k) for k in kwargs):
            parts = [arg(a) for a in args] + [f"{k}={arg(v)}" for k, v in kwargs.items()]
            return prepare, ", ".join(parts)
        return [f"a = ({''.join(src(a) + ', ' for a in args)})",  # a keyword that is not a name: rare
                "k = {" + ", ".join(f"{k!r}: {src(v)}" for k, v in kwargs.items()) + "}"], "*a, **k"

    placeholders = [i for i, n in enumerate(nodes) if n.op == "placeholder"]
    last_placeholder = placeholders[-1] if placeholders else -1
    last_uses = interp.user_to_last_uses if interp.garbage_collect_values else {}
    body: list[str] = []
    line_node: list[int] = []  # the node each line of the body belongs to (errors name it by line)
    slots: list[str] = []
    for i, n in enumerate(nodes):
        v, k = f"v{i}", 2 * len(slots)
        slots.append(interp._names[n])
        before: list[str] = []
        call = ""
        if n.op == "placeholder":
            target = str(n.target)
            if target.startswith("*"):
                before.append(f"{v} = list(it)")
            else:
                default = bind(n.args[0]) if n.args else "_missing"
                before += [f"{v} = next(it, _missing)",
                           f"if {v} is _missing: {v} = _placeholder({default}, {target!r})"]
        elif n.op == "get_attr":
            owner, atom = _attr_owner(interp, str(n.target))
            before.append(f"{v} = getattr({bind(owner)}, {atom!r})")
        elif n.op == "output":
            before.append(f"{v} = {src(n.args[0])}")
        else:
            fn, args, kwargs = n.target, tuple(n.args), dict(n.kwargs)
            if n.op == "call_module":
                callee = bind(interp.fetch_attr(str(n.target)))
            elif n.op == "call_function":
                callee = bind(fn)
            elif n.op == "call_method":
                method = str(n.target)
                attr = f".{method}" if method.isidentifier() and not keyword.iskeyword(method) else None
                obj = src(args[0])
                before.append(f"b = {obj}{attr}" if attr else f"b = getattr({obj}, {method!r})")
                callee, args = "b", args[1:]
            else:
                raise NotImplementedError(f"node {n.name!r} has op {n.op!r}, which fxprof cannot run")
            prepare, arglist = call_args(args, kwargs)
            before += prepare
            call = f"{v} = {callee}({arglist})"
        line_node += [i - 1] * (len(body) - len(line_node))  # frees after the previous node
        body += before
        if boundaries:
            end = "e" if interp._names[n] in interp.unmarked else "m1 = mark()"
            body += ["h0 = host()", call, "h1 = host()", end if end != "e" else "",
                     f"mb[{k}] = e", f"mb[{k + 1}] = e" if end == "e" else f"mb[{k + 1}] = e = m1",
                     f"hb[{k}] = h0", f"hb[{k + 1}] = h1"]
        elif one_clock:
            body += ["t0 = mark()", call, "t1 = mark()", f"mb[{k}] = t0", f"mb[{k + 1}] = t1"]
        else:
            body += ["m0 = mark()", "h0 = host()", call, "h1 = host()", "m1 = mark()",
                     f"mb[{k}] = m0", f"mb[{k + 1}] = m1", f"hb[{k}] = h0", f"hb[{k + 1}] = h1"]
        body = [line for line in body if line]  # a read has no call line
        line_node += [i] * (len(body) - len(line_node))
        if n.op == "output":
            body.append(f"return {v}")
            break
        dead = [d for d in last_uses.get(n, ()) if d is not n]
        if interp.garbage_collect_values and not n.users:
            dead.append(n)  # a value nobody reads dies at once, as in eager code
        body += [f"v{index[d]} = None" for d in dead]
        if i == last_placeholder:
            body.append("it = None")  # the inputs list no longer keeps inputs alive
    else:
        body.append("return None")

    line_node += [-1] * (len(body) - len(line_node))
    # no per-node bookkeeping of which node runs: a failure is placed by the plan's line number
    # where it surfaced (the traceback's first entry is the plan's own frame)
    first_line = 3
    fail = _failure(interp, nodes, index, lambda lineno: line_node[lineno - first_line]
                    if 0 <= lineno - first_line < len(line_node) else -1)
    namespace.update(_missing=_MISSING, _placeholder=_placeholder_default, _fail=fail)
    if boundaries:  # the first boundary: the run's own first mark when nothing ran since it
        body.insert(0, "e = mark() if first is None else first")
        line_node.insert(0, -1)
    lines = ["def run(it, mark, host, mb, hb, first=None):", "    try:"]
    lines += [f"        {line}" for line in body]
    lines += ["    except Exception as e:",
              "        err = _fail(e.__traceback__.tb_lineno, locals(), e)",
              "        if err is e:",
              "            raise",
              "        raise err from e"]
    code = compile("\n".join(lines) + "\n", f"<fxprof plan of {type(interp.module).__name__}>", "exec")
    exec(code, namespace)
    namespace["run"].source = "\n".join(lines)  # what runs between the marks, for reading and tests
    return namespace["run"], PlanSlots(slots)


class _Missing:
    def __repr__(self) -> str:
        return "<missing>"


_MISSING = _Missing()


def _placeholder_default(default: Any, target: str) -> Any:
    if default is _MISSING:
        raise RuntimeError(f"Expected positional argument for parameter {target}, but one was not passed in!")
    return default


def _attr_owner(interp: fx.Interpreter, target: str) -> tuple[Any, str]:
    """The object holding attribute ``target`` (a dotted path from the module) and the name."""
    path, _, atom = target.rpartition(".")
    owner = interp.fetch_attr(path) if path else interp.module
    if not hasattr(owner, atom):
        raise RuntimeError(f"Node referenced nonexistent target {target}")
    return owner, atom


def _failure(interp: ProfilingInterpreter, nodes: list[fx.Node], index: dict[fx.Node, int], node_at: Callable[[int], int]):
    """The compiled plan's error handler: the node at line ``lineno`` of the plan failed
    (``node_at`` maps the line to its node's position); name it and its inputs."""

    def fail(lineno: int, scope: dict[str, Any], exc: Exception) -> Exception:
        cur = node_at(lineno)
        if cur < 0 or node_failure(exc) is not None:
            return exc
        n = nodes[cur]
        value = lambda node: scope.get(f"v{index[node]}")  # noqa: E731
        args = fx.node.map_arg(tuple(n.args), value)
        kwargs = fx.node.map_arg(dict(n.kwargs), value)
        return node_error(n, tuple(args), dict(kwargs), exc)

    return fail


def node_error(n: fx.Node, args: tuple, kwargs: dict, exc: Exception) -> Exception:
    """``exc`` itself (profiling never changes the model's exceptions), named: a note saying which
    node raised it and what the node received, and ``exc.fxprof_node``."""
    if node_failure(exc) is not None:  # raised by a nested interpreter: keep its node
        return exc
    inputs = [f"arg{i}: {describe_value(a)}" for i, a in enumerate(args)]
    inputs += [f"{k}: {describe_value(v)}" for k, v in kwargs.items()]
    target = target_name(n)
    lines = [
        f"fxprof: node {n.name!r} ({n.op} {target}) raised this {type(exc).__name__}",
        f"it received {', '.join(inputs)}" if inputs else "it received no arguments",
        "check that the inputs have the shapes, dtypes and devices the model expects "
        "(and match the example used for tracing)",
    ]
    if "CUDA" in str(exc) or "cuda" in " ".join(inputs):
        lines.append(
            "CUDA reports kernel errors asynchronously, so the failing kernel may belong to an "
            "earlier node: re-run with timer='sync' or CUDA_LAUNCH_BLOCKING=1 to pin it down"
        )
    return name_failed_node(exc, NodeFailure(n.name, n.op, target, inputs, lines[1:]), "\n".join(lines))  # type: ignore[return-value]
