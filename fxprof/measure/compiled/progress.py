"""Lines while ``torch.compile`` compiles: when the first graph starts, how long each graph of a
second or more took, a line every ``every_s`` seconds while one is still compiling (a decode graph
of a 7B model can take minutes on a CPU, with nothing else to show that the process is alive), and
how many graphs compiled in how long when the block ends.

Dynamo's own compile callbacks (``torch._dynamo.callback.callback_handler``) say when a compile
starts and ends; they are registered only inside :func:`compile_progress` and removed after. The
heartbeat thread sleeps on a condition between compiles: it never wakes during a timed step that
compiles nothing (a thread that runs in a timed step would be read by the contention meter).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

__all__ = ["compile_progress", "QUIET_S"]

#: a graph that compiles faster than this gets no line of its own (only the summary counts it)
QUIET_S = 1.0


def _handler() -> Any:
    try:
        from torch._dynamo.callback import callback_handler
    except ImportError:  # a torch without dynamo's compile callbacks: no lines, nothing else changes
        return None
    return callback_handler if hasattr(callback_handler, "register_start_callback") else None


class _Progress:
    def __init__(self, say: Callable[[str], None], every_s: float):
        self.say, self.every_s = say, every_s
        self.cond = threading.Condition()
        self.started: float | None = None
        self.graph = ""
        self.count = 0
        self.total = 0.0
        self.done = False

    def start(self, *args: Any) -> None:
        cid = getattr(args[0], "compile_id", None) if args else None
        with self.cond:
            self.count += 1
            self.graph = str(cid) if cid is not None else f"#{self.count}"
            self.started = time.perf_counter()
            self.cond.notify_all()
        if self.count == 1:  # one line to start; a model with graph breaks compiles dozens of small graphs
            self.say(f"compiling graph {self.graph} (torch.compile; a line for each graph that takes a second or more)")

    def end(self, *_: Any) -> None:
        with self.cond:
            started, graph, self.started = self.started, self.graph, None
        if started is not None:
            took = time.perf_counter() - started
            self.total += took
            if took >= QUIET_S:
                self.say(f"compiled graph {graph} in {took:.1f} s")

    def summary(self) -> None:
        if self.count:
            self.say(f"{self.count} graph(s) compiled, {self.total:.1f} s in all")

    def beat(self) -> None:
        with self.cond:
            while not self.done:
                if self.started is None:
                    self.cond.wait()  # asleep until a compile starts or the block ends
                    continue
                started = self.started
                self.cond.wait(self.every_s)
                if self.started is started and not self.done:
                    graph, took = self.graph, time.perf_counter() - started
                    self.cond.release()
                    try:
                        self.say(f"still compiling graph {graph}: {took:.0f} s so far")
                    finally:
                        self.cond.acquire()


@contextlib.contextmanager
def compile_progress(say: Callable[[str], None] | None, every_s: float = 20.0) -> Iterator[None]:
    """Within the block, ``say`` gets a line when a dynamo compile starts and ends, and one every
    ``every_s`` seconds while it lasts. ``say=None`` (or a torch without the callbacks): nothing."""
    handler = _handler() if say is not None else None
    if handler is None or say is None:
        yield
        return
    progress = _Progress(say, every_s)
    handler.register_start_callback(progress.start)
    handler.register_end_callback(progress.end)
    thread = threading.Thread(target=progress.beat, name="fxprof-compile-progress", daemon=True)
    thread.start()
    try:
        yield
    finally:
        with progress.cond:
            progress.done = True
            progress.cond.notify_all()
        thread.join()
        progress.summary()
        for remove, callback in ((handler.remove_start_callback, progress.start), (handler.remove_end_callback, progress.end)):
            try:
                remove(callback)
            except ValueError:  # already gone: torch.compiler.reset() clears the handler
                pass
