"""What :class:`~fxprof.core.profile.Profile`'s convenience methods do, one function each.

``Profile`` sits in ``core``, below the views and writers; its methods call these through
:mod:`fxprof.core.hooks` (``fxprof/__init__.py`` provides this module there), so the object
users get keeps ``prof.summary()``, ``prof.save(...)`` and the rest while ``core`` imports
nothing above it.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, Sequence

if TYPE_CHECKING:
    from ..core.profile import Profile


def summary(profile: "Profile", sort: str | None, top: int | None, columns: Sequence[str] | None, group_by: str | None,
            depth: int, ascending: bool, width: int | None, bookkeeping: bool) -> str:
    from .options import ViewOptions
    from .text import render_summary

    return render_summary(profile, ViewOptions.of(sort, top, columns, group_by, depth, ascending, width, bookkeeping))


def repr_html(profile: "Profile") -> str:
    from .notebook import render_html

    return render_html(profile)


def to_csv(profile: "Profile", path: str | os.PathLike) -> None:
    from ..io import write_csv

    write_csv(profile.df, path)


def to_chrome_trace(profile: "Profile", path: str | os.PathLike, runs: Any) -> None:
    from .chrome_trace import write_chrome_trace

    write_chrome_trace(profile, path, runs=runs)


def to_html(profile: "Profile", path: str | os.PathLike) -> None:
    from .report import write_report

    write_report(profile, path)


def save(profile: "Profile", path: str | os.PathLike) -> None:
    from ..io import save_profile

    save_profile(profile, path)


__all__ = ["summary", "repr_html", "to_csv", "to_chrome_trace", "to_html", "save"]
