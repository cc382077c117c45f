"""torch's config modules changed for fxprof's own calls and put back after, cheaply enough for a
call in every run (:func:`config_patcher`), and dynamo's running count of the frames it converted,
which tells when a call compiled (:func:`frame_counter`)."""

from __future__ import annotations

from typing import Any, Callable

__all__ = ["config_patcher", "frame_counter"]


def config_patcher(config: Any, changes: dict[str, Any]) -> Callable[[], Callable[[], None]]:
    """``changes`` to a torch config module as a function that applies them and returns the
    function that reverts them: torch's own closure patcher where the release has it (made for
    patches on a hot path: ``config.patch`` builds a context object per use), else ``patch``."""
    make = getattr(config, "_make_closure_patcher", None)
    if make is not None:
        return make(**changes)

    def change() -> Callable[[], None]:
        patch = config.patch(changes)
        patch.__enter__()
        return lambda: patch.__exit__(None, None, None)

    return change


def frame_counter() -> Callable[[], int | None]:
    """A function that reads dynamo's running count of the frames it converted (compiled, or
    tried to), or None: dynamo's counters looked up once (``torch._dynamo.reset()`` clears the
    same dict), not at every read."""
    try:
        from torch._dynamo.utils import counters
    except Exception:  # pragma: no cover - a release without the counters
        return lambda: None

    def read() -> int | None:
        try:
            return int(counters["frames"]["total"])
        except Exception:  # pragma: no cover - a release without the counter
            return None

    return read
