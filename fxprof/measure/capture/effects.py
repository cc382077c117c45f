"""What a symbolic trace does to the program, undone, and named.

``torch.fx`` traces a model by running its forward's Python once, with Proxies for tensors. Whatever
that Python does beyond computing tensors happens then, once, and never again when the graph runs:

- attributes and containers it writes on the model (``self.last_h = h``, ``self.cache["h"] = h``,
  ``self.calls += 1``) hold Proxies or a count one too high after the trace, and the graph never
  writes them again;
- random numbers drawn without a traced input (``torch.rand(2, 8)``, ``random.random()``,
  ``np.random.rand()``) are drawn once: the graph repeats that one draw in every run, and the
  generator is one draw ahead of the program's;
- prints happen once, while tracing;
- module-level state its code writes (a ``global`` counter, a list it appends to) moves once;
- an object the forward returns that the model holds (``return self.cache``) comes back from the
  graph as a new copy.

:func:`undone_effects` puts all of that back as it was after the trace (the model's attributes
and containers, fx's own ``_tensor_constant`` attributes on the root, every random generator,
the forward's module globals; prints are held back) and names what it found, so a capture can
choose one that keeps the forward's Python (dynamo) instead of a graph the program would see
through. Buffers are :func:`fxprof.measure.common.state.preserved_buffers`'s (tracing with the
buffers as inputs records their updates).

Not seen: state outside the model and its forward modules' globals (an object reached through a
closure or another module), output written to a stream the code opened itself or through logging.
"""

from __future__ import annotations

import contextlib
import io
import random
import re
import sys
import threading
from collections import deque
from types import SimpleNamespace
from typing import Any, Iterator

import torch
from torch import fx, nn

__all__ = ["TraceEffects", "undone_effects"]

#: what fx itself sets on the traced root (tensors and objects it bakes into the graph as attributes)
_FX_CONSTANT = re.compile(r"^_(?:tensor_constant|torchbind_obj|tree_spec_constant|opaque_obj|\w+_constant_)\d+$")
#: the attributes nn.Module itself keeps (hooks, parameters, buffers, submodules: a dozen dicts a
#: module, no forward's doing): compared by identity, not followed into (preserved_buffers puts the
#: buffers back)
_MODULE_OWN = frozenset(vars(nn.Module()))
_CONTAINERS = (dict, list, set, deque)
_DEPTH = 3  # containers and plain objects followed this deep from a module's attributes
_STDLIB = frozenset(getattr(sys, "stdlib_module_names", ())) | {"builtins"}


class TraceEffects:
    """What one trace did that its graph will not repeat, as phrases (``found``), after
    :func:`undone_effects` put it back. ``returned``: the object the forward returned (set by the
    tracer), checked against the objects the model holds."""

    def __init__(self) -> None:
        self.found: list[str] = []
        self.returned: Any = None

    def __bool__(self) -> bool:
        return bool(self.found)

    def words(self) -> str:
        return "; ".join(self.found)


class _Shallow:
    """One object's shallow state (a namespace's or a container's items, by identity), to
    compare and put back. A namespace (a module's or a plain object's ``__dict__``, a module's
    globals) names what changed ``where.key``; a dict ``where['key']``."""

    __slots__ = ("obj", "kind", "items", "where")

    def __init__(self, obj: Any, where: str, namespace: bool = False):
        self.obj, self.where = obj, where
        if namespace or isinstance(obj, dict):
            self.kind, self.items = "namespace" if namespace else "dict", list(obj.items())
        elif isinstance(obj, (list, deque)):
            self.kind, self.items = "seq", list(obj)
        elif isinstance(obj, set):
            self.kind, self.items = "set", list(obj)
        else:
            raise TypeError(f"no shallow state for {type(obj).__name__}")

    def current(self) -> list:
        return list(self.obj.items()) if self.kind in ("namespace", "dict") else list(self.obj)

    def changed(self) -> list[str]:
        """What differs from the snapshot, named: the keys written, or the container whose
        contents moved."""
        now = self.current()
        if self.kind in ("namespace", "dict"):
            before, after = dict(self.items), dict(now)
            keys = [k for k in [*before, *(k for k in after if k not in before)]
                    if k not in before or k not in after or before[k] is not after[k]]
            return [f"{self.where}.{k}" if self.kind == "namespace" else f"{self.where}[{k!r}]" for k in keys]
        if self.kind == "set":
            same = {id(v) for v in now} == {id(v) for v in self.items}
        else:
            same = len(now) == len(self.items) and all(a is b for a, b in zip(now, self.items))
        return [] if same else [self.where]

    def restore(self) -> None:
        obj = self.obj
        if self.kind in ("namespace", "dict"):  # key by key: the object is never empty meanwhile
            before = dict(self.items)
            for key in [k for k in obj if k not in before]:
                del obj[key]
            for key, value in self.items:
                if key not in obj or obj[key] is not value:
                    obj[key] = value
        elif self.kind == "set":
            obj.clear()
            obj.update(self.items)
        elif isinstance(obj, deque):
            obj.clear()
            obj.extend(self.items)
        else:
            obj[:] = self.items


def _followed(value: Any) -> bool:
    """A value whose contents a forward may write and a snapshot can hold: a builtin container, or
    a plain data object (a ``SimpleNamespace``, a dataclass, a config) of the user's or a
    library's. Not a module, tensor, class or function, nor the standard library's machinery (a
    ``threading.Event`` another thread sets, a lock, a logger, a stream), which is no model state
    and must never be put back."""
    if isinstance(value, _CONTAINERS):
        return True
    if isinstance(value, (nn.Module, torch.Tensor, type, fx.Proxy)) or callable(value) or not hasattr(value, "__dict__"):
        return False
    if isinstance(value, SimpleNamespace):
        return True
    root = (type(value).__module__ or "").partition(".")[0]
    return root not in _STDLIB and root != "torch"


def _module_state(model: nn.Module) -> tuple[list[_Shallow], dict[int, str]]:
    """Every module's attributes, and the containers and plain objects they hold (to
    :data:`_DEPTH`), each once; and the ids of the containers held, with where."""
    shots: list[_Shallow] = []
    held: dict[int, str] = {}
    seen: set[int] = set()

    def follow(obj: Any, where: str, depth: int) -> None:
        if id(obj) in seen or depth > _DEPTH:
            return
        seen.add(id(obj))
        namespace = not isinstance(obj, _CONTAINERS)
        shot = _Shallow(vars(obj) if namespace else obj, where, namespace=namespace)
        shots.append(shot)
        if not namespace:
            held.setdefault(id(obj), where)
        for key, value in (shot.items if shot.kind in ("namespace", "dict") else enumerate(shot.items)):
            if _followed(value):
                follow(value, f"{where}.{key}" if namespace else f"{where}[{key!r}]", depth + 1)

    for path, module in model.named_modules(remove_duplicate=True):
        prefix = f"self.{path}" if path else "self"
        state = vars(module)
        shots.append(_Shallow(state, prefix, namespace=True))
        for key, value in state.items():
            if key not in _MODULE_OWN and _followed(value):
                follow(value, f"{prefix}.{key}", 1)
    return shots, held


def _forward_globals(model: nn.Module) -> list[_Shallow]:
    """The module globals of the model's forward code (torch's own excepted: fx patches and
    restores some while it traces), with one level of the containers they hold."""
    spaces: dict[int, tuple[dict, str]] = {}
    for module in model.modules():
        forward = getattr(type(module), "forward", None)
        space = getattr(forward, "__globals__", None)
        name = getattr(forward, "__module__", "") or ""
        if isinstance(space, dict) and not (name == "torch" or name.startswith("torch.")):
            spaces.setdefault(id(space), (space, name))
    shots: list[_Shallow] = []
    for space, name in spaces.values():
        shots.append(_Shallow(space, name, namespace=True))
        shots.extend(_Shallow(v, f"{name}.{k}") for k, v in list(space.items())
                     if isinstance(v, _CONTAINERS) and not k.startswith("__"))
    return shots


class _Generators:
    """Every random generator the program may draw from: torch's (CPU, and each CUDA device's
    when CUDA is in use), Python's ``random`` and numpy's global one (when numpy is imported)."""

    def __init__(self) -> None:
        self.torch = torch.get_rng_state()
        self.cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_available() and torch.cuda.is_initialized() else None
        self.python = random.getstate()
        numpy = sys.modules.get("numpy")
        self.numpy = numpy.random.get_state() if numpy is not None else None

    def moved(self) -> list[str]:
        now = _Generators()
        moved = []
        if not torch.equal(now.torch, self.torch) or (self.cuda is not None and now.cuda is not None
                                                     and any(not torch.equal(a, b) for a, b in zip(now.cuda, self.cuda))):
            moved.append("torch's generator")
        if now.python != self.python:
            moved.append("Python's random module")
        if self.numpy is not None and now.numpy is not None and not _same_numpy_state(now.numpy, self.numpy):
            moved.append("numpy's global generator")
        return moved

    def restore(self) -> None:
        torch.set_rng_state(self.torch)
        if self.cuda is not None:
            torch.cuda.set_rng_state_all(self.cuda)
        random.setstate(self.python)
        numpy = sys.modules.get("numpy")
        if numpy is not None and self.numpy is not None:
            numpy.random.set_state(self.numpy)


def _same_numpy_state(a: tuple, b: tuple) -> bool:
    return all((x == y).all() if hasattr(x, "shape") else x == y for x, y in zip(a, b))


class _HeldOutput(io.TextIOBase):
    """A stream that keeps what one thread writes (the trace's prints) and passes every other
    thread's writes to the stream it replaced."""

    def __init__(self, stream: Any, thread: int):
        self.stream, self.thread, self.kept = stream, thread, io.StringIO()

    def write(self, text: str) -> int:
        if threading.get_ident() == self.thread:
            return self.kept.write(text)
        return self.stream.write(text)

    def flush(self) -> None:
        if threading.get_ident() != self.thread:
            self.stream.flush()

    def __getattr__(self, name: str) -> Any:  # encoding, isatty, fileno...: the real stream's
        return getattr(self.stream, name)


@contextlib.contextmanager
def _held_output() -> Iterator[list[_HeldOutput]]:
    thread = threading.get_ident()
    out, err = _HeldOutput(sys.stdout, thread), _HeldOutput(sys.stderr, thread)
    sys.stdout, sys.stderr = out, err  # type: ignore[assignment]
    try:
        yield [out, err]
    finally:
        if sys.stdout is out:
            sys.stdout = out.stream
        if sys.stderr is err:
            sys.stderr = err.stream


@contextlib.contextmanager
def undone_effects(model: nn.Module) -> Iterator[TraceEffects]:
    """Around a symbolic trace of ``model``: on exit (the trace succeeded or failed) the model's
    attributes and the containers it holds, its forward modules' globals and every random
    generator are as they were before, fx's constants are gone from the model (the GraphModule
    made inside keeps its own reference), and the trace's prints were held back. The yielded
    :class:`TraceEffects` then names what the trace did that its graph will not repeat."""
    effects = TraceEffects()
    state, held = _module_state(model)
    spaces = _forward_globals(model)
    generators = _Generators()
    try:
        with _held_output() as streams:
            yield effects
    finally:
        written: list[str] = []
        for shot in state:
            names = shot.changed()
            if not names:
                continue
            shot.restore()
            if shot.obj is vars(model):  # fx's own constants on the root: gone, but not the forward's doing
                names = [n for n in names if not _FX_CONSTANT.match(n.rpartition(".")[2])]
            written.extend(names)
        globals_written = []
        for shot in spaces:
            names = shot.changed()
            if names:
                globals_written.extend(names)
                shot.restore()
        moved = generators.moved()
        generators.restore()
        printed = sum(len(s.kept.getvalue()) for s in streams)
        returned = _held_return(effects.returned, held)
        if written:
            effects.found.append(f"the forward writes {_listed(written)} on the model, and a graph would not write it in "
                                 f"its runs (while tracing it held torch.fx Proxies)")
        if returned:
            effects.found.append(f"the forward returns an object the model holds ({returned}), and a graph returns a "
                                 f"new one")
        if moved:
            effects.found.append(f"the forward draws random numbers from {_listed(moved)} outside the graph's inputs "
                                 f"(a graph would repeat one draw in every run)")
        if printed:
            effects.found.append("the forward prints (a graph would print once, while tracing)")
        if globals_written:
            effects.found.append(f"the forward writes module-level state ({_listed(globals_written)}), and a graph "
                                 f"would not write it in its runs")


def _held_return(returned: Any, held: dict[int, str]) -> str:
    """Where the model holds the object the forward returned (or a container inside it), or ""."""
    stack, seen = [(returned, 0)], set()
    while stack:
        value, depth = stack.pop()
        if id(value) in seen or depth > 2 or not isinstance(value, _CONTAINERS):
            continue
        seen.add(id(value))
        if id(value) in held:
            return held[id(value)]
        stack.extend((v, depth + 1) for v in (value.values() if isinstance(value, dict) else value))
    return ""


def _listed(names: list[str], most: int = 4) -> str:
    names = list(dict.fromkeys(names))
    shown = ", ".join(names[:most])
    return shown + (f" and {len(names) - most} more" if len(names) > most else "")
