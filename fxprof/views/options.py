"""How a table is shown: one options object from the API and the command line down to every renderer.

``Profile.summary(sort=..., top=...)`` and the CLI's ``--sort/--top/--columns/--group-by/--depth
/--ascending`` build a :class:`ViewOptions`; :func:`~fxprof.views.text.render_summary`,
:func:`~fxprof.views.text.render_body` and :func:`~fxprof.views.text.render_compare` take it
whole, so a new view option is added in one place.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Iterable

__all__ = ["ViewOptions"]


@dataclass(frozen=True)
class ViewOptions:
    """What a table shows and how.

    Attributes:
        sort: column to sort by, descending unless ``ascending``; None keeps the table's own
            order (graph order for nodes, largest change first for a comparison).
        top: show only the first ``top`` rows (a footer counts the rest); None or 0: all.
        columns: the columns to show; None: a readable default for the table.
        group_by: a roll-up key (``op``, ``module_type``, ``range``, ``scope``, ``graph``,
            ``phase``, ``comm``, ``rank``) instead of one row per node; None: per node.
        depth: the module depth for ``group_by="scope"``.
        ascending: sort ascending.
        width: fit the table to this many characters; None: no limit.
        bookkeeping: rank the enter/exit nodes of ``record_function`` ranges with the other
            nodes. By default a sorted node table leaves them out and states their count and
            share on a line of its own (their time counts in every share either way; see
            :func:`fxprof.views.text.ranked`).
    """

    sort: str | None = "pct"
    top: int | None = None
    columns: tuple[str, ...] | None = None
    group_by: str | None = None
    depth: int = 1
    ascending: bool = False
    width: int | None = None
    bookkeeping: bool = False

    def __post_init__(self) -> None:
        if self.columns is not None and not isinstance(self.columns, tuple):
            object.__setattr__(self, "columns", tuple(self.columns))

    @classmethod
    def of(cls, sort: str | None = "pct", top: int | None = None, columns: Iterable[str] | None = None,
           group_by: str | None = None, depth: int = 1, ascending: bool = False, width: int | None = None,
           bookkeeping: bool = False) -> "ViewOptions":
        """The options from keywords (the signature ``Profile.summary`` shows its users)."""
        return cls(sort, top, None if columns is None else tuple(columns), group_by, depth, ascending, width, bookkeeping)

    def but(self, **changes: Any) -> "ViewOptions":
        """A copy with some options changed."""
        return replace(self, **changes)
