"""One compile per model and options in a process: compiled profiles and sessions reuse it.

Compiled mode compiles the model again, through :class:`fxprof.measure.compiled.compiling.CompiledSession`
in front of the user's backend, with inductor's caches off (a cache hit generates no code, so no
provenance): every compile is a full one (swin_t: 65 s here). A notebook user who profiles
``torch.compile(model)`` twice (a cell run again, or ``fxprof.profile`` then ``fxprof.session``)
waited for it each time, and so did the zoo (its session check (g) compiled every model a second
time: over a third of its compiled pass).

What fxprof compiled is kept per (model, compile options), weakly: the
:class:`~fxprof.measure.compiled.compiling.CompiledSession` (dynamo's graphs with their nodes, names, FLOPs
and break sites), the trace catcher (inductor's generated code and provenance per graph) and the
``torch.compile``\\d module whose backend dynamo's cache entries are keyed on. A later compiled
profile or session of the same module (the ``_orig_mod`` of any ``torch.compile`` of it) with equal
options (the backend compares equal: inductor with the same mode, options and ``dynamic``; the
same ``fullgraph``) calls that module, so dynamo finds its entries and compiles nothing: the
profile's ``meta["compiled"]`` has ``compile_s`` 0 and ``reused`` True, and a note says so. A new
input shape, a changed module tree or mode still fails dynamo's guards and compiles, caught as in
a first profile (a recompile; its compile time is then the profile's ``compile_s``).

Kept weakly: the registry holds weak references to the sessions; dynamo's own cache entries keep
a session alive (through the backend wrapped around it). After ``torch._dynamo.reset()`` those
entries are gone: the session is not reused (checked against dynamo's cache entry list of the
model's ``forward``, not only by the weak reference), and the next profile compiles afresh.
Where that list cannot be read (a release without it, a forward dynamo does not enter directly),
nothing is reused.
"""

from __future__ import annotations

import dataclasses
import weakref
from typing import Any

from torch import nn

__all__ = ["Kept", "cache_entries", "kept_session", "remember", "settle_first_call", "reuse_note", "REUSED_NOTE"]

REUSED_NOTE = ("reused the compile of an earlier profile of this model in this process (same torch.compile options): "
               "compile_s is 0, no compile time was spent")

#: per module: weak references to the sessions fxprof compiled it with (one per set of options)
_KEPT: "weakref.WeakKeyDictionary[nn.Module, list[weakref.ref]]" = weakref.WeakKeyDictionary()


@dataclasses.dataclass
class Kept:
    """What a later profile of the same compiled program needs besides the session itself."""

    compiled: nn.Module  #: the torch.compile'd module whose backend is the session (dynamo's entries are keyed on it)
    catcher: Any  #: the trace catcher: inductor's code and provenance per graph, dynamo's break reports
    fullgraph: bool
    first: dict[str, Any] | None = None  #: the first call's compile seconds, graphs and graph breaks, once compiled
    #: ``compiled`` is the model's forward function compiled (a forward compiled in place), not the module: kept
    #: apart, since calling it skips the module's ``__call__`` (its hooks) where a compiled module runs them
    function: bool = False


def _unwrap(backend: Any) -> Any:
    """The backend under dynamo's and torch.compile's wrappers."""
    for _ in range(16):
        inner = getattr(backend, "_torchdynamo_orig_backend", None) or getattr(backend, "compiler_fn", None)
        if inner is None or inner is backend:
            return backend
        backend = inner
    return backend


def cache_entries(root: nn.Module) -> list[Any]:
    """Dynamo's cache entries for ``root``'s ``forward`` in this process: every compiled version
    (any backend: the user's ``torch.compile``, eager dynamo captures, fxprof's profiles); empty
    where the list cannot be read (a release without it).

    A ``torch.nn`` module of torch's own (``nn.Sequential``...) is compiled through an extra frame
    (``torch._dynamo.external_utils.wrap_inline``'s ``inner``, one code object for every such
    module: torch 2.14 ``OptimizedModule._initialize``), so its versions are that code's entries
    whose guards hold it; they count too. Without them, every profile of a compiled
    ``nn.Sequential`` compiled it again and the ninth found dynamo's recompile limit reached
    ("compiled no graph")."""
    try:
        from torch._dynamo.eval_frame import _debug_get_cache_entry_list

        entries = list(_debug_get_cache_entry_list(type(root).forward.__code__))
    except Exception:  # pragma: no cover - a release without it
        return []
    inner = _wrap_inline_code()
    if inner is not None:
        try:
            entries.extend(_debug_get_cache_entry_list(inner))
        except Exception:  # pragma: no cover
            pass
    return entries


def _wrap_inline_code() -> Any:
    """The code object of the frame dynamo wraps a ``torch.nn`` module of torch's own in, or None."""
    try:
        from torch._dynamo import external_utils

        return external_utils.wrap_inline(_wrap_inline_code).__code__
    except Exception:  # pragma: no cover - a release without it
        return None


def _entries_of(session: Any) -> int:
    """How many of those entries ``session`` compiled (0 after ``torch._dynamo.reset()``, or where
    the list or an entry's backend cannot be read: never reuse then)."""
    return sum(1 for e in cache_entries(session.root) if _unwrap(getattr(e, "backend", None)) is session)


def _same_backend(a: Any, b: Any) -> bool:
    try:
        return bool(a is b or a == b)
    except Exception:
        return False


def kept_session(root: nn.Module, backend: Any, fullgraph: bool, function: bool = False) -> Any:
    """The :class:`~fxprof.measure.compiled.compiling.CompiledSession` fxprof compiled ``root`` with under
    the same options, if dynamo still holds its compiled code; None otherwise. ``function``: the
    program of a forward compiled in place (see :attr:`Kept.function`)."""
    try:
        refs = _KEPT.get(root, [])
    except TypeError:  # a module that cannot be hashed or weakly referenced
        return None
    for ref in refs:
        session = ref()
        kept = getattr(session, "kept", None)
        if kept is None or kept.first is None or kept.fullgraph != fullgraph or kept.function != function:
            continue
        if _same_backend(session.backend, backend) and _entries_of(session):
            session.profiler_cost = None  # measured again for each profile, as for a fresh one
            kept.catcher.phase = "compile"
            return session
    return None


def remember(session: Any, compiled: Any, catcher: Any, fullgraph: bool, function: bool = False) -> None:
    """Keep ``session`` for later profiles of its module with equal options (weakly)."""
    session.kept = Kept(compiled, catcher, fullgraph, function=function)
    try:
        refs = [r for r in _KEPT.get(session.root, []) if r() is not None]
        _KEPT[session.root] = refs + [weakref.ref(session)]
    except TypeError:
        pass


def settle_first_call(session: Any, described: dict[str, Any], compile_s: float, graphs_before: int) -> tuple[float, int]:
    """The first call's ``(compile seconds, graphs it compiled)`` as the profile reports them.
    A first compile is remembered; a reused program reports the first compile's graphs and
    graph breaks, ``compile_s`` 0 unless this call compiled new graphs (a new shape), and
    ``described["reused"] = True``."""
    kept = getattr(session, "kept", None)
    if kept is None:
        return compile_s, len(session.order)
    if kept.first is None:
        kept.first = {"compile_s": compile_s, "graphs": len(session.order), "graph_breaks": described.get("graph_breaks")}
        return compile_s, len(session.order)
    described["reused"] = True
    described["graph_breaks"] = kept.first["graph_breaks"]
    new = len(session.order) - graphs_before
    return (compile_s if new else 0.0), kept.first["graphs"]


def reuse_note(profile: Any) -> None:
    """The note of a profile that reused an earlier compile."""
    compiled = profile.compiled
    if compiled.get("reused"):
        note = REUSED_NOTE if not compiled.get("compile_s") else (
            "reused the compile of an earlier profile of this model in this process; new input shapes or guards "
            f"compiled again here (compile_s {compiled['compile_s']:.2f} s)")
        profile.meta.setdefault("notes", []).append(note)
