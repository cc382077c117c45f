"""The one column table (fxprof/columns.py): everything said about a column is derived from it.

Each derived list (the per-node table's dtypes, what files store, the schema, the signed columns,
the roll-up rules and columns, the views' formats, the CLI's choices, the docs' table) is checked
against what the table says, and a column added to the table (in a child process, before fxprof
is imported) shows up in all of them without another line of code.
"""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys
import textwrap

import pandas as pd
import pytest

from fxprof import columns as C

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_names_are_unique_and_every_rule_is_known():
    names = [c.name for c in C.COLUMNS]
    assert len(names) == len(set(names))
    assert set(C.BY_NAME) == set(names)
    for c in C.COLUMNS:
        assert c.unit in C.UNITS and c.rollup in C.ROLLUPS and c.source in C.SOURCES
        assert c.description and "\n" not in c.description
        if c.signed or c.rollup not in (None, "running") or c.fmt:
            assert c.dtype != "str", c.name  # only numbers are signed, rolled up or formatted


def test_a_column_with_an_unknown_unit_or_rule_is_refused():
    with pytest.raises(ValueError, match="unit 'furlongs'"):
        C.Column("x", "float64", "furlongs", "a length")
    with pytest.raises(ValueError, match="roll-up 'median'"):
        C.Column("x", "float64", "ms", "a time", rollup="median")
    with pytest.raises(ValueError, match="per-call rule 'mean'"):
        C.Column("x", "Int64", "bytes", "a size", source="anatomy", per_call="mean")
    with pytest.raises(ValueError, match="dtype 'int32'"):
        C.Column("x", "int32", "count", "a count")


def test_the_per_node_table_and_its_files_derive_from_the_table():
    from fxprof import vocab
    from fxprof.core import profile
    from fxprof.io import header, validate

    table = [c for c in C.COLUMNS if c.table]
    assert profile.COLUMNS == {c.name: c.dtype for c in table}
    assert profile.TABLE_COLUMNS == tuple(c.name for c in table)
    assert profile.NODE_COLUMNS == tuple(c.name for c in C.COLUMNS if c.source == "node")
    stored = {c.name: c.dtype for c in C.COLUMNS if c.source in ("anatomy", "memory")}
    assert vocab.ANATOMY_COLUMNS == stored
    # the order saved files have always held them in (files stay byte for byte the same)
    assert list(vocab.ANATOMY_COLUMNS)[:6] == ["input_shapes", "output_shape", "dtype", "out_bytes", "bytes", "flops"]
    rules = validate.SCHEMA["properties"]["anatomy"]["properties"]
    assert list(rules) == list(vocab.ANATOMY_COLUMNS)
    for name, rule in rules.items():
        c = C.BY_NAME[name]
        assert c.description in rule["description"]
        items = rule["items"]
        if c.dtype == "str":
            assert items["type"] == ["string", "null"]
        else:
            assert items["type"] == ["integer", "null"]
            assert items["minimum"] == (-(2**63) if c.signed else 0)
    assert validate._SIGNED == {c.name for c in C.COLUMNS if c.signed} == {"mem_delta_bytes", "headroom_ms"}
    assert header.NODE_DEFAULTS == {"phase": "forward"}
    from fxprof.core.rankstats import RANK_TABLE_COLUMNS

    assert RANK_TABLE_COLUMNS == {"rank_min_ms": "float64", "rank_max_ms": "float64", "slowest_rank": "Int64"}


def test_old_csv_defaults_are_the_columns_added_after_the_first_tables():
    from fxprof.io.csvfile import read_csv  # noqa: F401 - the reader that uses them

    defaults = C.old_csv_defaults()
    assert defaults["phase"] == "forward"
    assert {k for k, v in defaults.items() if v == ""} >= {"bytes", "roof_ms", "headroom_ms", "mem_temp_bytes",
                                                           "mem_live_bytes", "mem_saved_bytes", "scope_source"}
    # the columns every per-node CSV has had are required
    assert not {"calls", "mean_ms", "median_ms", "pct", "flops", "mem_peak_bytes", "mem_delta_bytes"} & set(defaults)


def test_roll_up_rules_and_columns_derive_from_the_table():
    from fxprof.core.memory import ROLLUP
    from fxprof.views.memory import MEMORY_COLUMNS
    from fxprof.views.text import GROUP_COLUMNS

    assert GROUP_COLUMNS == ("nodes", *(c.name for c in C.COLUMNS if c.table and c.rollup))
    assert GROUP_COLUMNS == ("nodes", "mean_ms", "median_ms", "pct", "cum_pct", "flops", "flops_pct", "roof_ms",
                             "headroom_ms", "mem_delta_bytes", "mem_temp_bytes", "mem_peak_bytes", "mem_live_bytes",
                             "mem_saved_bytes")
    assert ROLLUP == {"mem_delta_bytes": "sum_known", "mem_temp_bytes": "sum_known", "mem_peak_bytes": "max",
                      "mem_live_bytes": "max", "mem_saved_bytes": "sum_known"}
    assert MEMORY_COLUMNS == tuple(ROLLUP)


def test_group_by_applies_each_rule():
    from fxprof.core.rollup import group_by

    table = pd.DataFrame({
        "op": ["call_function"] * 4, "kind": ["a", "a", "b", "b"], "mean_ms": [1.0, 2.0, float("nan"), float("nan")],
        "median_ms": [1.0, 1.0, 2.0, float("nan")], "pct": [20.0, 20.0, 60.0, 0.0],
        "flops": pd.array([10, pd.NA, pd.NA, pd.NA], dtype="Int64"), "flops_pct": [100.0, float("nan"), float("nan"), float("nan")],
        "mem_peak_bytes": pd.array([5, 7, pd.NA, pd.NA], dtype="Int64"), "mem_delta_bytes": pd.array([-4, 6, pd.NA, pd.NA], dtype="Int64"),
        "mem_saved_bytes": pd.array([pd.NA] * 4, dtype="Int64"),
    }, index=pd.Index(list("wxyz"), name="node"))
    g = group_by(table, "op")
    assert list(g.index) == ["b", "a"]  # by pct
    assert g.loc["b", "mean_ms"] == 0.0  # sum: a node with no time took none
    assert g.loc["a", "mean_ms"] == 3.0 and g.loc["b", "median_ms"] == 2.0
    assert g.loc["a", "flops"] == 10 and pd.isna(g.loc["b", "flops"])  # sum_known: nothing measured stays <NA>
    assert str(g["flops"].dtype) == "Int64"
    assert g.loc["a", "mem_peak_bytes"] == 7 and g.loc["a", "mem_delta_bytes"] == 2  # max, sum
    assert list(g["cum_pct"]) == [60.0, 100.0]  # running, in the roll-up's order
    assert "mem_saved_bytes" not in g.columns and "mem_live_bytes" not in g.columns  # shown only when measured
    assert g["roof_ms"].isna().all()  # a column the table lacks: NaN
    assert list(g.columns) == [c for c in C.group_columns() if c in g.columns]


def test_views_print_each_column_by_its_unit():
    from fxprof.views.memory import format_bytes
    from fxprof.views.tables import format_count, format_ms, formatter_for

    for c in C.COLUMNS:
        if not c.table:
            continue
        fmt = formatter_for(c.name, pd.Series([], dtype=c.dtype).dtype)
        if c.format is None:
            assert fmt is None, c.name
        elif c.format == "ms":
            assert fmt is format_ms, c.name
        elif c.format == "bytes":
            assert fmt is format_bytes, c.name
        elif c.format == "count" and c.dtype != "float64":
            assert fmt is format_count, c.name
        else:
            assert fmt(1234.5678) == format(1234.5678, c.format), c.name
    assert formatter_for("pct", "float64")(12.345) == "12.3"
    assert formatter_for("mem_peak_bytes", "Int64")(412_000_000) == "412 MB"
    assert formatter_for("delta_mem_peak_bytes", "Int64")(2000) == "+2.00 kB"  # a comparison's change: signed
    assert formatter_for("out_bytes", "Int64")(1_000_000) == "1.00 MB"  # bytes with their unit, as the memory columns (issue 47)
    assert formatter_for("calls_per_run", "float64")(0.5) == "0.5"


def test_the_cli_choices_are_the_tables_columns():
    import argparse

    from fxprof.cli.common import check_node_view

    for name in C.table_columns():
        check_node_view(argparse.Namespace(group_by=None, sort=name, columns=name), training=False, ranked=False)
    for name in C.group_columns():
        check_node_view(argparse.Namespace(group_by="scope", sort=name, columns=name), training=False, ranked=False)
    from fxprof.errors import FxprofError

    with pytest.raises(FxprofError, match="bad --sort 'std_ms'"):
        check_node_view(argparse.Namespace(group_by="scope", sort="std_ms", columns=None), training=False, ranked=False)


def test_the_docs_column_table_is_the_generated_one():
    page = (ROOT / "docs" / "anatomy.md").read_text()
    assert C.with_table(page) == page, "docs/anatomy.md's column table is stale: run python docs/scripts/columns_table.py"
    for c in C.COLUMNS:
        assert (f"| `{c.name}` |" in page) == (c.table or c.source == "ranks")


def test_markdown_table_lists_units_and_rollups():
    lines = C.markdown_table().splitlines()
    assert lines[0] == "| column | unit | roll-up | meaning |"
    row = next(line for line in lines if line.startswith("| `mem_peak_bytes` |"))
    assert row.startswith("| `mem_peak_bytes` | bytes | max | ")
    assert len(lines) == 2 + len(C.table_columns()) + len(C.rank_dtypes())


# A column added to the table shows up everywhere: run in a child process that extends the table
# before fxprof imports anything derived from it.
_NEW_COLUMN = textwrap.dedent('''
    import importlib.util, json, sys, pathlib
    spec = importlib.util.spec_from_file_location("fxprof.columns", pathlib.Path({root!r}) / "fxprof" / "columns.py")
    columns = importlib.util.module_from_spec(spec)
    sys.modules["fxprof.columns"] = columns
    spec.loader.exec_module(columns)
    new = columns.Column("mem_extra_bytes", "Int64", "bytes", "a test column the anatomy stores", "sum_known",
                         "anatomy", signed=True, old_default="")
    columns.COLUMNS = columns.COLUMNS + (new,)
    columns.BY_NAME["mem_extra_bytes"] = new

    import argparse
    import torch, fxprof
    from fxprof.cli.common import check_node_view
    from fxprof.io.validate import SCHEMA, _SIGNED
    from fxprof.views.text import GROUP_COLUMNS, render_table
    from fxprof.views.tables import formatter_for

    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU())
    prof = fxprof.profile(model, torch.randn(2, 4), warmup=0, iters=2, memory=False)
    out = pathlib.Path(sys.argv[1])
    prof.save(out / "p.json")
    doc = json.loads((out / "p.json").read_text())
    doc["anatomy"]["mem_extra_bytes"] = [-3 if i == 1 else 2000 for i in range(len(doc["nodes"]))]
    (out / "p.json").write_text(json.dumps(doc))
    loaded = fxprof.load(out / "p.json")
    loaded.to_csv(out / "p.csv")
    back = fxprof.read_csv(out / "p.csv")
    check_node_view(argparse.Namespace(group_by=None, sort="mem_extra_bytes", columns="mem_extra_bytes"), False, False)
    check_node_view(argparse.Namespace(group_by="op", sort="mem_extra_bytes", columns="mem_extra_bytes"), False, False)
    groups = loaded.group_by("op")
    print(json.dumps({{
        "dtype": str(loaded.df["mem_extra_bytes"].dtype),
        "values": [int(v) for v in loaded.df["mem_extra_bytes"]],
        "csv": [int(v) for v in back["mem_extra_bytes"]],
        "schema": SCHEMA["properties"]["anatomy"]["properties"]["mem_extra_bytes"]["items"],
        "signed": "mem_extra_bytes" in _SIGNED,
        "group_columns": "mem_extra_bytes" in GROUP_COLUMNS,
        "group_sum": int(groups["mem_extra_bytes"].sum()),
        "printed": render_table(loaded.df[["mem_extra_bytes"]].head(2), None),
        "format": formatter_for("mem_extra_bytes", "Int64")(2000),
        "docs": "| `mem_extra_bytes` | bytes | sum | a test column the anatomy stores |" in columns.markdown_table(),
    }}))
''')


def test_a_new_column_is_one_line_in_the_table(tmp_path):
    script = _NEW_COLUMN.format(root=str(ROOT))
    done = subprocess.run([sys.executable, "-c", script, str(tmp_path)], capture_output=True, text=True, cwd=ROOT,
                          timeout=280)
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert found["dtype"] == "Int64"
    assert found["values"][1] == -3 and found["values"][0] == 2000
    assert found["csv"] == found["values"]  # written and read back with the other columns
    assert found["schema"]["minimum"] < 0  # signed, as declared
    assert found["signed"] and found["group_columns"] and found["docs"]
    assert found["group_sum"] == sum(found["values"])
    assert found["format"] == "2.00 kB" and "2.00 kB" in found["printed"] and "mem_extra" in found["printed"]


def test_a_nodes_calls_combine_by_each_columns_per_call_rule():
    from fxprof.measure.capture.dynamo import _accumulate

    assert C.PER_CALL == {"flops": "sum", "out_bytes": "sum", "mem_delta_bytes": "sum", "mem_temp_bytes": "sum",
                          "mem_peak_bytes": "max", "mem_live_bytes": "last", "mem_saved_bytes": "sum"}
    first = {"output_shape": "[2]", "flops": 10, "bytes": 8, "mem_peak_bytes": 5, "mem_live_bytes": 100, "mem_saved_bytes": None}
    second = {"output_shape": "[3]", "flops": 4, "bytes": 16, "mem_peak_bytes": 3, "mem_live_bytes": 90, "mem_saved_bytes": 7}
    into: dict = {}
    _accumulate(into, {"n": first})
    _accumulate(into, {"n": second})
    assert into["n"] == {"output_shape": "[2]", "flops": 14, "bytes": 8, "mem_peak_bytes": 5, "mem_live_bytes": 90,
                         "mem_saved_bytes": 7}
