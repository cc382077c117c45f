"""Exceptions raised by fxprof.

Every error says what was wrong and what to do about it. They all derive from
:class:`FxprofError`, so ``except fxprof.FxprofError`` catches anything fxprof raises on
purpose.
"""

from __future__ import annotations

__all__ = [
    "FxprofError",
    "TraceError",
    "TimerUnavailableError",
    "NodeExecutionError",
    "ProfileFormatError",
    "ProfileWriteError",
    "NodeFailure",
    "node_failure",
    "name_failed_node",
    "add_note",
]


class FxprofError(Exception):
    """Base class of every error fxprof raises on purpose."""


class TraceError(FxprofError):
    """The model could not be turned into an ``fx.GraphModule``."""


class TimerUnavailableError(FxprofError, RuntimeError):
    """The requested timer cannot run here (for example a CUDA timer without a GPU)."""


class NodeExecutionError(FxprofError, RuntimeError):
    """Kept for code that imports it; fxprof no longer raises it for the model's own errors.

    A node that raises while it runs re-raises the model's own exception (a ``ValueError``, a
    ``torch.linalg.LinAlgError``, a ``torch.OutOfMemoryError``: the type the loop catches
    without fxprof), with a note naming the node and what it received and the same facts as
    its ``fxprof_node`` attribute (a :class:`NodeFailure`; read it with :func:`node_failure`).

    Attributes:
        node: the fx node name.
        op: the node's op (``call_module``, ``call_function``...).
        target: the node's target, as text.
        inputs: one line per argument the node received (shape, dtype, device for tensors).
    """

    def __init__(self, message: str, *, node: str, op: str, target: str, inputs: list[str]):
        super().__init__(message)
        self.node = node
        self.op = op
        self.target = target
        self.inputs = inputs


class ProfileFormatError(FxprofError, ValueError):
    """A saved profile or CSV file is not one fxprof can read."""


class ProfileWriteError(FxprofError, OSError):
    """A profile could not be written. The in-memory profile is untouched."""




class NodeFailure:
    """Which graph node raised, attached to the model's own exception as ``exc.fxprof_node``.

    Attributes:
        node: the fx node name.
        op: the node's op (``call_module``, ``call_function``...).
        target: the node's target, as text.
        inputs: one line per argument the node received (shape, dtype, device for tensors).
        advice: the note's lines after the first: what the node received, what to check.
    """

    __slots__ = ("node", "op", "target", "inputs", "advice")

    def __init__(self, node: str, op: str, target: str, inputs: list[str], advice: list[str] | None = None):
        self.node = node
        self.op = op
        self.target = target
        self.inputs = inputs
        self.advice = advice or []

    def __repr__(self) -> str:
        return f"NodeFailure(node={self.node!r}, op={self.op!r}, target={self.target!r})"


def node_failure(exc: BaseException) -> NodeFailure | None:
    """The graph node ``exc`` came from, when it was raised inside a profiled node (else None)."""
    info = getattr(exc, "fxprof_node", None)
    return info if isinstance(info, NodeFailure) else None


def name_failed_node(exc: BaseException, info: NodeFailure, note: str) -> BaseException:
    """Name the node on the model's own exception: ``exc.fxprof_node`` and a note (PEP 678), so
    that ``except ThatType`` still catches it and the traceback still says which node failed.
    Returns ``exc`` itself; an exception already named (by a nested graph) is left as it is."""
    if node_failure(exc) is not None:
        return exc
    try:
        exc.fxprof_node = info  # type: ignore[attr-defined]
    except (AttributeError, TypeError):  # an exception type without attributes: the note still says it
        pass
    add_note(exc, note)
    return exc


def add_note(exc: BaseException, note: str) -> None:
    """Add ``note`` to ``exc`` (PEP 678) on every Python fxprof supports: ``add_note`` from 3.11;
    on 3.10, PEP 678's ``__notes__`` attribute, which tracebacks from 3.11 and pytest read."""
    if hasattr(exc, "add_note"):
        exc.add_note(note)
    else:
        exc.__notes__ = [*getattr(exc, "__notes__", []), note]  # type: ignore[attr-defined]
