"""Regenerate the column table of docs/anatomy.md from fxprof/columns.py (the one declaration
of the per-node table's columns). tests/core/test_columns.py fails while the page differs.

    python docs/scripts/columns_table.py          # rewrite the table in docs/anatomy.md
    python docs/scripts/columns_table.py --print  # print it instead
"""

from __future__ import annotations

import pathlib
import sys

from fxprof.columns import markdown_table, with_table

PAGE = pathlib.Path(__file__).resolve().parents[1] / "anatomy.md"

if __name__ == "__main__":
    if "--print" in sys.argv[1:]:
        print(markdown_table())
    else:
        PAGE.write_text(with_table(PAGE.read_text()))
        print(f"wrote the column table into {PAGE}")
