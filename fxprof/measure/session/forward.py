"""The session's forward as the model shows it: a function with the model's forward's signature
(Hugging Face's ``generate`` reads it to choose the inputs it passes)."""

from __future__ import annotations

import inspect
from typing import Any

__all__ = ["signed_like"]


def signed_like(call: Any, like: Any) -> Any:
    """A function that calls ``call`` and shows ``like``'s signature, name and docs to anything
    that inspects it (``inspect.signature``), and nothing else of it: no ``__wrapped__``, none of
    its attributes (a compiled forward's ``_torchdynamo_orig_callable`` would make the hook look
    compiled)."""

    def forward(*args: Any, **kwargs: Any) -> Any:
        return call(*args, **kwargs)

    for name in ("__name__", "__qualname__", "__doc__", "__module__"):
        try:
            setattr(forward, name, getattr(like, name))
        except (AttributeError, TypeError):
            pass
    try:
        forward.__signature__ = inspect.signature(like)  # type: ignore[attr-defined]
    except (TypeError, ValueError):  # a callable without one: the plain (*args, **kwargs)
        pass
    return forward
