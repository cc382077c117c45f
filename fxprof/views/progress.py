"""An honest progress bar: one line on stderr that names each phase with its own count.

``fxprof.profile(progress=True)`` and the command line show ``fxprof: tracing 0/1``,
``fxprof: warm-up 3/5``, ``fxprof: timed runs 12/20``, ``fxprof: anatomy pass 0/1``... on a
single tqdm bar that is reset at each phase. Nothing is printed unless the stream is a
terminal (tqdm's ``disable=None``), so logs and pipes stay clean. This module imports no
torch: the command line starts its bar before torch is imported.
"""

from __future__ import annotations

import sys
from typing import IO, Any

__all__ = ["Progress", "as_progress"]

_FORMAT = "{desc} {n_fmt}/{total_fmt} [{elapsed}]"


class Progress:
    """Phases on one bar. ``phase(name, total)`` starts a phase, ``step()`` counts one unit.

    Args:
        enabled: False makes every call a no-op.
        file: the stream (default stderr).
        force: show the bar even when ``file`` is not a terminal (tests).
    """

    def __init__(self, enabled: bool = True, file: IO[str] | None = None, force: bool = False):
        self.phases: list[str] = []  # every phase started, in order (what the user was shown)
        self._bar: Any = None
        if enabled:
            from tqdm import tqdm

            self._bar = tqdm(
                total=1, desc="fxprof: starting", file=file if file is not None else sys.stderr,
                disable=False if force else None, leave=False, bar_format=_FORMAT, mininterval=0.1,
            )
            self._bar.refresh()

    def phase(self, name: str, total: int = 1) -> None:
        """Start phase ``name`` with ``total`` steps (the count restarts at 0)."""
        self.phases.append(name)
        if self._bar is not None:
            self._bar.refresh()  # the finished phase's last count, e.g. "warm-up 5/5"
            self._bar.reset(total=max(int(total), 1))
            self._bar.set_description_str(f"fxprof: {name}", refresh=False)
            self._bar.refresh()

    def step(self, count: int = 1) -> None:
        if self._bar is not None:
            self._bar.update(count)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None

    def __enter__(self) -> "Progress":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def as_progress(progress: "bool | Progress") -> tuple[Progress, bool]:
    """The Progress to report to, and whether the caller owns it (and must close it)."""
    if isinstance(progress, Progress):
        return progress, False
    return Progress(enabled=bool(progress)), True
