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
]


class FxprofError(Exception):
    """Base class of every error fxprof raises on purpose."""


class TraceError(FxprofError):
    """The model could not be turned into an ``fx.GraphModule``."""


class TimerUnavailableError(FxprofError, RuntimeError):
    """The requested timer cannot run here (for example a CUDA timer without a GPU)."""


class NodeExecutionError(FxprofError, RuntimeError):
    """A graph node raised while it ran.

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


