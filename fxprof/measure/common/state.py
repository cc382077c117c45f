"""The model's state across a profile: every buffer put back as it was, one profile at a time.

A forward may update buffers (batch-norm running statistics in training mode, a step counter)
in place or by assigning a new tensor to the attribute; symbolic tracing may even run such an
update once while it traces. :func:`preserved_buffers` puts back, on exit, the very tensor
each module held under each buffer name, with its value, and can say which buffers moved.

The random number generators (torch's, Python's ``random``, numpy's global one) and the
autocast state are put back too (:func:`preserved_rng`,
:func:`preserved_autocast`).

Profiles in one process run one at a time (:data:`PROFILING`): two threads profiling the same
model would otherwise snapshot each other's half-updated buffers, and threads running Python
side by side would time each other's work (the interpreter holds the GIL between nodes).
"""

from __future__ import annotations

import contextlib
import random
import sys
import threading
from typing import Iterator

import torch
from torch import nn

__all__ = ["PROFILING", "OPEN_SESSIONS", "refuse_inside_session", "preserved_autocast", "preserved_buffers",
           "preserved_rng"]

#: held for the whole of one ``fxprof.profile`` call; a second thread waits for it
PROFILING = threading.RLock()

#: the modules an open ``fxprof.session`` instruments (``id`` -> the session's name for it and the
#: module); the lock above is re-entrant, so a profile or session in the session's own thread gets past it
OPEN_SESSIONS: dict[int, tuple[str, nn.Module]] = {}


def refuse_inside_session(model: nn.Module, what: str) -> None:
    """Refuse ``what`` (``"fxprof.profile"``...) of ``model`` while an open session instruments
    it or one of its modules: the session's forward would run inside ``what``'s runs (they would
    land in the session's cycle, and ``what`` would time fxprof's own code). A second session of
    a module inside an instrumented model is refused too: the outer session's runs would call it."""
    if not OPEN_SESSIONS:
        return
    for path, module in model.named_modules(remove_duplicate=True):
        if id(module) in OPEN_SESSIONS:
            which = "the same model" if not path else f"its module {path!r}"
            raise RuntimeError(
                f"{what} of {type(model).__name__} inside an open fxprof.session of {which} "
                f"({OPEN_SESSIONS[id(module)][0]}): the session instruments its forward, so these runs would land in "
                f"the session's cycle and time fxprof's own code. Profile it before or after the with-block, or "
                f"profile a copy (copy.deepcopy(model)) made before the session opened; inside the session, its own "
                f"profile comes from its schedule.")
    if what != "fxprof.session":
        return  # profiling a part of the instrumented model calls that part directly, not the session's forward
    for name, outer in OPEN_SESSIONS.values():
        if any(m is model for m in outer.modules()):
            raise RuntimeError(
                f"fxprof.session of {type(model).__name__} inside an open fxprof.session of the model that holds it "
                f"({name}): that session's runs call this module, and each session would time the other's code. "
                f"Open one session, of the model you want timed.")


@contextlib.contextmanager
def preserved_buffers(module: nn.Module, report: bool = False) -> Iterator[list[str]]:
    """Put every buffer of ``module`` back on exit, identity and value.

    Yields a list that, with ``report=True``, holds on exit the qualified names of the buffers
    that were changed in place or replaced inside the block (before they were put back).
    """
    saved = [
        (owner, prefix, name, tensor, tensor.detach().clone())
        for prefix, owner in module.named_modules(remove_duplicate=True)
        for name, tensor in list(owner._buffers.items())
        if tensor is not None
    ]
    changed: list[str] = []
    try:
        yield changed
    finally:
        with torch.no_grad():
            for owner, prefix, name, tensor, value in saved:
                current = owner._buffers.get(name)
                if current is not tensor:
                    owner._buffers[name] = tensor  # a forward that reassigned the attribute
                    moved = True
                else:
                    moved = report and _differs(tensor, value)
                if tensor.shape == value.shape:
                    tensor.copy_(value)
                else:
                    tensor.data = value
                if moved:
                    changed.append(f"{prefix}.{name}" if prefix else name)


@contextlib.contextmanager
def preserved_rng() -> Iterator[None]:
    """Put every random number generator the block may draw from back on exit: torch's CPU
    generator (and every CUDA device's, when CUDA is in use), Python's ``random`` and numpy's
    global ``np.random``. A model with dropout in training mode draws from torch's in every run,
    and a model or a what-if variant of the user's may draw from the others; profiling must leave
    the caller's random sequences where they were."""
    cpu = torch.get_rng_state()
    cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_available() and torch.cuda.is_initialized() else None
    python = random.getstate()
    numpy = sys.modules.get("numpy")  # a dependency, always loaded by then; never imported here only for this
    legacy = numpy.random.get_state() if numpy is not None else None
    try:
        yield
    finally:
        torch.set_rng_state(cpu)
        if cuda is not None:
            torch.cuda.set_rng_state_all(cuda)
        random.setstate(python)
        if numpy is not None:
            numpy.random.set_state(legacy)


@contextlib.contextmanager
def preserved_autocast() -> Iterator[None]:
    """Leave ``torch.autocast`` as it was on exit: a graph that enters autocast in a node
    (``_enter_autocast``) and fails before its ``_exit_autocast`` would otherwise leave the
    caller's process in autocast (enabled flag, dtype and nesting, per device type)."""
    devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    saved = [(d, torch.is_autocast_enabled(d), torch.get_autocast_dtype(d)) for d in devices]
    cache = torch.is_autocast_cache_enabled()
    level = _autocast_nesting()
    try:
        yield
    finally:
        for device, enabled, dtype in saved:
            torch.set_autocast_enabled(device, enabled)
            torch.set_autocast_dtype(device, dtype)
        torch.set_autocast_cache_enabled(cache)
        while _autocast_nesting() > level:
            if torch.autocast_decrement_nesting() == 0:
                torch.clear_autocast_cache()


def _autocast_nesting() -> int:
    level = torch.autocast_increment_nesting() - 1
    torch.autocast_decrement_nesting()
    return level


def _differs(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a.shape != b.shape:
        return True
    try:
        return not torch.equal(a, b)
    except (RuntimeError, NotImplementedError):  # tensors without data (device="meta")
        return False
