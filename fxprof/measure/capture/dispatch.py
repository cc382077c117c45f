"""Which profile a compiled graph reports to: one mechanism for each of fxprof's torch.compile backends.

A ``torch.compile`` backend is called once per graph, long before (and long after) a profile
runs, and the graphs it returns are reused by later profiles of the same model. So a backend
returns a :class:`GraphRunner`, which runs its graph plainly unless a profile is on; while one
is, the runner hands the call to that profile's session (``session.run_graph(runner, args)``):
timed through the interpreter, or an untimed pass. :class:`ActiveSession` holds which session
that is, for dynamo captures and for training steps alike:

- dynamo's forward graphs run on the thread that called the model: per thread, so two threads
  can profile two models at once (``ActiveSession(per_thread=True)``);
- AOTAutograd runs backward graphs on autograd's worker threads, which a thread-local would not
  reach: one session for the process, and a second profile at the same time is refused
  (``ActiveSession(per_thread=False)``).
"""

from __future__ import annotations

import contextlib
import threading
from typing import Any, Callable, Hashable, Iterator

from torch import fx

from .interpreter import ProfilingInterpreter

__all__ = ["ActiveSession", "GraphRunner", "GraphSession"]


class ActiveSession:
    """The session the graph runners of one backend dispatch to, if any (see the module docs)."""

    def __init__(self, per_thread: bool, busy: str = "another profile is running in this process; profile one at a time"):
        self.per_thread = per_thread
        self.busy = busy
        self._local = threading.local()
        self._shared: Any = None
        self._lock = threading.Lock()

    def current(self) -> Any:
        """The active session, or None."""
        return getattr(self._local, "session", None) if self.per_thread else self._shared

    @contextlib.contextmanager
    def active(self, session: Any) -> Iterator[None]:
        """Make ``session`` the one the runners dispatch to for the duration of the block."""
        if self.per_thread:
            previous = getattr(self._local, "session", None)
            self._local.session = session
            try:
                yield
            finally:
                self._local.session = previous
            return
        if not self._lock.acquire(blocking=False):
            raise RuntimeError(self.busy)
        self._shared = session
        try:
            yield
        finally:
            self._shared = None
            self._lock.release()


class GraphRunner:
    """What a backend hands to dynamo (or AOTAutograd) for one graph: runs it plainly unless a
    session of ``slot`` is active, then through that session."""

    def __init__(self, gm: fx.GraphModule, slot: ActiveSession):
        self.gm = gm
        self.slot = slot

    def __call__(self, *args: Any) -> Any:
        session = self.slot.current()
        if session is None:
            return self.gm(*args)
        return session.run_graph(self, args)


class GraphSession:
    """What graph runners dispatch to while one profile runs, whatever the backend.

    A call goes, in this order, to the untimed pass being collected (``make_pass``: its records
    are added with :meth:`add_records`), to a :class:`ProfilingInterpreter` bound to the
    profile's ``recorder`` (one per place, made again when the recorder changes), or, with
    neither, to the plain graph. Subclasses say where a call belongs (:meth:`place`): dynamo's
    captures by the module that ran the graph, training steps by forward/backward pair.
    """

    def __init__(self) -> None:
        self.recorder: Any = None
        self.make_pass: Callable[..., Any] | None = None
        self.records: dict[str, dict[str, Any]] = {}
        self.interpreters: dict[Hashable, ProfilingInterpreter] = {}

    def place(self, runner: GraphRunner) -> tuple[Hashable, str]:
        """The key of this call's interpreter and its node-name prefix (``g0``, ``fw0``...)."""
        raise NotImplementedError

    def add_records(self, records: dict[str, dict[str, Any]]) -> None:
        self.records.update(records)

    def run_graph(self, runner: GraphRunner, args: tuple) -> Any:
        key, prefix = self.place(runner)
        if self.make_pass is not None:
            out, records = self.make_pass(runner.gm, prefix, args)
            self.add_records(records)
            return out
        if self.recorder is None:
            return runner.gm(*args)
        interp = self.interpreters.get(key)
        if interp is None or interp.recorder is not self.recorder:
            interp = ProfilingInterpreter(runner.gm, recorder=self.recorder, prefix=f"{prefix}:")
            self.interpreters[key] = interp
        return interp.run(*args)

    @contextlib.contextmanager
    def collecting(self, make_pass: Callable[..., Any]) -> Iterator[dict[str, dict[str, Any]]]:
        """Route calls to the untimed pass ``make_pass`` for the block; yields its records."""
        self.make_pass, self.records = make_pass, {}
        try:
            yield self.records
        finally:
            self.make_pass = None

    def close(self) -> None:
        self.interpreters.clear()
        self.recorder = None
