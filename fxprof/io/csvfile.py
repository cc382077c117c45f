"""The per-node CSV: a profile's table (``Profile.df``) as text, read back with the same dtypes."""

from __future__ import annotations

import csv
import os

import pandas as pd

from ..columns import old_csv_defaults
from ..core.profile import COLUMNS, TABLE_COLUMNS
from ..errors import ProfileFormatError
from .atomic import atomic_write
from .roles import derive_roles
from .validate import check_roles, parse_table

__all__ = ["write_csv", "read_csv"]


def write_csv(table: pd.DataFrame, path: str | os.PathLike) -> None:
    """Write a per-node table; floats are written with full precision (exact round trip). A
    row whose role :func:`read_csv` would refuse is refused first, and nothing is written."""
    if "role" in table.columns and "kind" in table.columns:
        def refused(what: str, fix: str, file_fix: str) -> ProfileFormatError:
            return ProfileFormatError(f"cannot write {os.fspath(path)!r}: {what}. Nothing was written and the profile in "
                                      f"memory is unchanged: {fix}, then write again")

        check_roles(table.index, table["role"], table["kind"], refused)
    atomic_write(path, lambda handle: table.to_csv(handle, index=True, index_label="node"))


def read_csv(path: str | os.PathLike) -> pd.DataFrame:
    """Read a per-node table written by :meth:`Profile.to_csv`.

    Returns the same index (``node``), columns and dtypes the profile's :attr:`~Profile.df`
    has. Raises :class:`~fxprof.errors.ProfileFormatError` for a file that is not such a table,
    or whose values no profile can hold (negative or infinite times, fractional counts, a
    node listed twice); see :func:`fxprof.io.validate.parse_table`.
    """
    path = os.fspath(path)
    try:  # every cell as text: numbers are parsed and checked one by one (exact round trip)
        table = pd.read_csv(path, dtype=str, keep_default_na=False)
    except FileNotFoundError:
        raise
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError, ValueError, OverflowError) as exc:
        raise ProfileFormatError(f"{path!r} is not a CSV table fxprof can read: {exc}") from exc
    _check_rows_whole(path, len(table.columns))
    # tables from before a column existed (training steps: phase "forward"; inferred scopes, compiled models,
    # the roofline, memory per node on the CPU: empty, not measured): each column's old_default in fxprof/columns.py
    for col, default in old_csv_defaults().items():
        if col not in table.columns:
            table[col] = default
    if "role" not in table.columns and {"op", "target", "kind"} <= set(table.columns):
        table["role"] = derive_roles(table)  # a table from before rows carried their role
    if "calls_per_run" not in table.columns and "calls" in table.columns:
        # tables from before per-run statistics: every graph ran once a run, so a node that ran
        # was called once a run (0.0 for one that never ran, as Profile.df has it)
        table["calls_per_run"] = ["0.0" if cell.strip() in ("0", "+0", "-0") else "1.0" for cell in table["calls"]]
    expected = ["node", *TABLE_COLUMNS]
    missing = [c for c in expected if c not in table.columns]
    if missing:
        listed = ", ".join(missing[:6]) + (f" and {len(missing) - 6} more" if len(missing) > 6 else "")
        raise ProfileFormatError(
            f"{path!r} is not an fxprof per-node CSV: it lacks the column(s) {listed}. "
            f"Such tables are written by Profile.to_csv() or 'fxprof profile --csv'."
        )
    from ..core.rankstats import RANK_TABLE_COLUMNS  # a gathered profile's per-rank columns, when there

    ranked = {c: kind for c, kind in RANK_TABLE_COLUMNS.items() if c in table.columns}
    parsed = parse_table(table, {**COLUMNS, **ranked}, repr(path))

    def refused(what: str, fix: str, file_fix: str) -> ProfileFormatError:
        return ProfileFormatError(f"{path!r} is not a per-node table fxprof can read: {what}. {file_fix}")

    check_roles(parsed.index, parsed["role"], parsed["kind"], refused, lines=range(2, len(parsed) + 2))
    return parsed[[*TABLE_COLUMNS, *ranked]]


def _check_rows_whole(path: str, width: int) -> None:
    """Every row of the file as many cells as its header has: a file cut off mid-row (a copy
    that stopped, a disk that filled) would read as a table with the cut row's last columns
    empty, or fail later on a cell that is not one; refused with the row's line. pandas leaves
    short rows filled and says nothing, so the rows are counted here, by the csv module."""
    with open(path, encoding="utf-8", newline="") as handle:
        rows = csv.reader(handle)
        next(rows, None)  # the header, read by pandas
        for cells in rows:
            if cells and len(cells) < width:
                raise ProfileFormatError(
                    f"{path!r} is cut short: line {rows.line_num} has {len(cells)} of the table's {width} cells (the file "
                    f"was truncated or edited). Write the table again (Profile.to_csv or 'fxprof profile --csv')"
                )
