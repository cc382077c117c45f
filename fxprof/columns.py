"""Every column of a profile's per-node table, declared once. Imports nothing (no torch, no pandas).

One :class:`Column` a line: its name, pandas dtype, unit, a one-line description, how a roll-up
combines it, and where it comes from. Everything else is derived from :data:`COLUMNS`:

- the per-node table's columns and dtypes (``fxprof.core.profile.COLUMNS``, ``TABLE_COLUMNS``)
  and what the anatomy and memory passes store (``fxprof.vocab.ANATOMY_COLUMNS``);
- the saved profile's schema for those columns and which numbers may be negative
  (``fxprof.io.validate``), and what a per-node CSV from before a column was added means
  (``fxprof.io.csvfile``);
- the roll-up rules of ``group_by`` (``fxprof.core.rollup``, ``fxprof.core.memory.ROLLUP``);
- how views print each number (``fxprof.views.tables.formatter_for``, by unit);
- the ``--sort``/``--columns`` choices (``TABLE_COLUMNS``, ``GROUP_COLUMNS``);
- the column table of docs/anatomy.md (:func:`markdown_table`; regenerate it with
  ``python docs/scripts/columns_table.py``; tests/core/test_columns.py fails when it differs).

A new column is one line in :data:`COLUMNS` plus its computation (a pass writing its values
per node, or a line in ``Profile._build_table``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Sequence

__all__ = ["Column", "COLUMNS", "BY_NAME", "UNITS", "ROLLUPS", "SOURCES", "table_columns", "table_dtypes",
           "stored_columns", "rank_dtypes", "node_columns", "PER_CALL", "PER_CALL_RULES", "rollup_columns", "signed_columns", "old_csv_defaults", "number_format",
           "markdown_table", "group_columns"]

#: units a column may have, and how views print a number of that unit when the column says no
#: otherwise (``fmt``): ``"ms"``: a time with the unit that suits its size; ``"bytes"``: decimal
#: units (``412 MB``); ``"count"``: a whole number with thousands separators; a format spec
#: (``".1f"``); None: text, printed as it is
UNITS: dict[str, str | None] = {
    "text": None,
    "ms": "ms",
    "pct": ".1f",
    "count": "count",
    "bytes": "bytes",
    "flops": "count",
    "gflop/s": ".3g",
    "flop/byte": ".3g",
}
#: the unit as docs write it
UNIT_WORDS = {"text": "", "ms": "ms", "pct": "%", "count": "count", "bytes": "bytes", "flops": "FLOP", "gflop/s": "GFLOP/s",
              "flop/byte": "FLOP/byte"}

#: how ``group_by`` combines a column over a group's nodes:
#: ``sum``: the total, a missing value counting as 0 (times and shares: a node that did not run took none);
#: ``sum_known``: the total of the values known, ``<NA>`` when no node of the group has one (counted
#: quantities: a group nothing measured stays unmeasured); ``max``: the group's highest;
#: ``running``: ``cum_X`` is the running sum of ``X`` over the roll-up's rows, in their order
#: (``cum_pct``); None: not in roll-ups
ROLLUPS = ("sum", "sum_known", "max", "running", None)

#: how the anatomy and memory passes combine a node's calls within one run (a dynamo graph called
#: several times a run): ``sum``, ``max``, ``last`` (the value after the last call), ``first`` (the
#: default: shapes are the first call's)
PER_CALL_RULES = ("sum", "max", "last", "first")

#: where a column's values come from: ``node``: the graph (``NodeInfo``, before anything runs);
#: ``stats``: the timed samples (``SampleColumns.node_stats``); ``anatomy``: the untimed anatomy
#: pass (shapes, FLOPs, bytes); ``memory``: the untimed memory pass; ``derived``: computed in the
#: per-node table from the others (``Profile._build_table``, ``fxprof.core.roofline``); ``ranks``:
#: only in a profile gathered over torch.distributed ranks, after the other columns
SOURCES = ("node", "stats", "anatomy", "memory", "derived", "ranks")


@dataclass(frozen=True)
class Column:
    """One column of the per-node table (or, ``table=False``, a per-node value saved with the
    anatomy but not shown in the table)."""

    name: str
    #: the pandas dtype: ``str``, ``int64``, ``Int64`` (whole numbers, ``<NA>`` when not
    #: measured) or ``float64`` (NaN when not measured)
    dtype: str
    unit: str
    description: str
    rollup: str | None = None
    source: str = "derived"
    #: the number may be negative (every other number in a profile never is)
    signed: bool = False
    #: a roll-up shows it only when some node of the table has a value (the memory columns)
    rollup_if_measured: bool = False
    #: what a per-node CSV written before the column existed means by its absence (``""``: not
    #: measured; ``"forward"``...); None: every per-node CSV fxprof reads has it
    old_default: str | None = None
    #: how views print it when its unit's way (:data:`UNITS`) does not fit
    fmt: str | None = None
    #: a column of every ``Profile.df`` (False: kept in ``Profile.anatomy`` and saved, not shown; or
    #: only in some profiles, source ``ranks``)
    table: bool = True
    #: a stored column: how a node's calls within one run combine (:data:`PER_CALL_RULES`)
    per_call: str = "first"

    def __post_init__(self) -> None:
        if self.unit not in UNITS:
            raise ValueError(f"column {self.name}: unit {self.unit!r} is not one of {', '.join(UNITS)}")
        if self.rollup not in ROLLUPS:
            raise ValueError(f"column {self.name}: roll-up {self.rollup!r} is not one of {ROLLUPS}")
        if self.source not in SOURCES:
            raise ValueError(f"column {self.name}: source {self.source!r} is not one of {', '.join(SOURCES)}")
        if self.per_call not in PER_CALL_RULES:
            raise ValueError(f"column {self.name}: per-call rule {self.per_call!r} is not one of {', '.join(PER_CALL_RULES)}")
        if self.dtype not in ("str", "int64", "Int64", "float64"):
            raise ValueError(f"column {self.name}: dtype {self.dtype!r} is not str, int64, Int64 or float64")

    @property
    def format(self) -> str | None:
        """How views print it: ``ms``, ``bytes``, ``count``, a format spec, or None (text)."""
        if self.fmt is not None:
            return self.fmt
        found = UNITS[self.unit]
        if found == "count" and self.dtype == "float64":
            return ".4g"
        return found


_MEASURED = "; <NA> when not measured"

#: every column of the per-node table, in the table's order (``Profile.df``, the CSV), then the
#: per-node values saved with the anatomy that the table does not show
COLUMNS: tuple[Column, ...] = (
    # what the graph says about the node (fxprof.core.nodes.NodeInfo)
    Column("op", "str", "text", "the fx node op: `placeholder`, `get_attr`, `call_module`, `call_function`, `call_method` or `output`", source="node"),
    Column("target", "str", "text", "what the node calls, as text: a module path, a qualified function, a method name or an attribute path", source="node"),
    Column("kind", "str", "text", "the operation, however it was called: the `Conv2d` module `conv1`, `torch.conv2d`, `F.conv2d` and `aten.conv2d.default` are all `conv2d`; `operator.add`, `x.add_()` and `aten.add.Tensor` are all `add`", source="node"),
    Column("module_type", "str", "text", "the class of the called module (`call_module` nodes), else empty", source="node"),
    Column("scope", "str", "text", "the path of the innermost module the node runs in (`layer1.0` for a BasicBlock's residual add); empty at the root", source="node"),
    Column("range", "str", "text", "the innermost `record_function` label the node runs under, else empty", source="node"),
    Column("graph", "str", "text", "the captured graph the node belongs to (`g0`, `g1`... when the model was captured in pieces), else empty", source="node"),
    Column("scope_source", "str", "text", "how `scope` was found: `recorded`, `frame`, `inferred`, `common` or empty", source="node", old_default=""),
    Column("phase", "str", "text", "the part of a training step: `forward`, `loss`, `backward` or `optimizer`", source="node", old_default="forward"),
    Column("forward_node", "str", "text", "a backward node: the forward node it differentiates, else empty", source="node", old_default=""),
    Column("origins", "str", "text", "a compiled kernel: the graph nodes it computes, joined by `+`, else empty", source="node", old_default=""),
    Column("raw_name", "str", "text", "the node's name in its capture, when the table shows it under another", source="node", old_default=""),
    Column("role", "str", "text", "what the row is: `model` (the model's work), `plumbing` (inputs, attribute reads, output, guards), `range` (a `record_function` range's enter or exit), `collective`, `fsdp`, `tp` and `ddp` (a parallel layout's steps fxprof times), `optimizer`, and a compiled model's `kernel`, `unmatched`, `graph_break` and `outside` rows; set where the row is made (files from before it: derived on load)", source="node"),
    # the timed samples (fxprof.core.columnar)
    Column("calls", "int64", "count", "samples of the node: one per call, in every run in which it executed", source="stats"),
    Column("calls_per_run", "float64", "count", "calls per model run (1.0 unless the node's graph runs several times in one model call, as dynamo graphs of a repeated block do; 0 for a node that never ran)", source="stats", old_default=None),
    Column("mean_ms", "float64", "ms", "the mean of the node's time per model run (a node's calls within one run are summed first)", "sum", "stats"),
    Column("median_ms", "float64", "ms", "the median of the node's time per model run", "sum", "stats"),
    Column("std_ms", "float64", "ms", "the sample standard deviation of the node's time per run (NaN with one run)", source="stats"),
    Column("iqr_ms", "float64", "ms", "the 75th minus the 25th percentile of the node's time per run", source="stats"),
    Column("min_ms", "float64", "ms", "the node's least time in a run", source="stats"),
    Column("max_ms", "float64", "ms", "the node's largest time in a run", source="stats"),
    Column("total_ms", "float64", "ms", "the sum over all the node's samples", source="stats"),
    Column("host_mean_ms", "float64", "ms", "the host (Python) time of the node; on the GPU, the cost of launching its work", source="stats"),
    Column("kernel_mean_ms", "float64", "ms", "`timer=\"kernel\"` only: the mean device activity (kernels, memcpy, memset) the node launched, matched by correlation id", source="stats"),
    Column("kernel_median_ms", "float64", "ms", "`timer=\"kernel\"` only: the median of that device activity per run", source="stats"),
    # derived in the table
    Column("bound", "str", "text", "GPU only: `launch`, `device`, `sync` or empty; see [the rule](#launch-or-device-the-bound-verdict)"),
    Column("pct", "float64", "pct", "the node's share of the summed median node times (sums to 100)", "sum"),
    Column("cum_pct", "float64", "pct", "the running sum of `pct` in the table's order", "running"),
    # the anatomy pass (fxprof.measure.passes.anatomy), and what is derived from it
    Column("flops", "Int64", "flops", "floating-point operations of one call, from `torch.utils.flop_counter.FlopCounterMode`. Only ops with a formula count (convolutions, matrix products, attention kernels); the rest report 0, not a guess", "sum_known", "anatomy", per_call="sum"),
    Column("flops_pct", "float64", "pct", "the node's share of the model's FLOPs", "sum_known"),
    Column("gflops_per_s", "float64", "gflop/s", "`flops` over the median time: the throughput the node achieved"),
    Column("bytes", "Int64", "bytes", "what the node reads and writes: each distinct tensor input (a called module's parameters and buffers too) and output once, 0 for nodes that run no aten op doing work (views, `getitem`, inputs). A lower bound; with `intensity`, `roof_ms`, `roof_pct`, `headroom_ms` and `limit` it makes the roofline: [roofline.md](roofline.md)", source="anatomy", old_default="", fmt="bytes"),
    # the roofline (fxprof.core.roofline: against the peaks in meta["peaks"]); NaN and "" without peaks
    Column("intensity", "float64", "flop/byte", "`flops` over `bytes`", old_default=""),
    Column("roof_ms", "float64", "ms", "the least time the node could take at the machine's peaks (`meta[\"peaks\"]`)", "sum_known", old_default=""),
    Column("roof_pct", "float64", "pct", "`roof_ms` over the median time, percent", old_default="", fmt=".3g"),
    Column("headroom_ms", "float64", "ms", "the median time above the roof (negative when the node beat its roof: data in a cache the bandwidth roof does not see)", "sum_known", signed=True, old_default=""),
    Column("limit", "str", "text", "what bounds the node at the peaks: `compute`, `memory` or `overhead`", old_default=""),
    Column("input_shapes", "str", "text", "the shape of each argument the node received, in order (keyword arguments as `name=...`; non-tensors by value)", source="anatomy"),
    Column("output_shape", "str", "text", "the shape of what the node returned, keeping its structure: `[1, 64, 16, 16]`, `([2, 2], [2, 2])` for a tuple, `{'a': [2]}` for a dict", source="anatomy"),
    Column("dtype", "str", "text", "the dtypes of the tensors returned (`float32`, or `float32,int64` for a mix)", source="anatomy"),
    Column("out_bytes", "Int64", "bytes", "the size of the tensors returned (a view counts in full: this is the logical size, not new memory)", source="anatomy", fmt="bytes", per_call="sum"),
    # the memory pass (fxprof.measure.passes.memory; docs/memory.md)
    Column("mem_delta_bytes", "Int64", "bytes", "bytes allocated inside the node and still held when it returns, minus what it freed of older memory; CPU or CUDA allocator, on by default (docs/memory.md)", "sum_known", "memory", signed=True, rollup_if_measured=True, per_call="sum"),
    Column("mem_temp_bytes", "Int64", "bytes", "bytes allocated and freed inside the node (temporaries, workspaces)", "sum_known", "memory", rollup_if_measured=True, old_default="", per_call="sum"),
    Column("mem_peak_bytes", "Int64", "bytes", "the highest allocation while the node ran, above where it started (outputs plus temporaries)", "max", "memory", rollup_if_measured=True, per_call="max"),
    Column("mem_live_bytes", "Int64", "bytes", "everything the run holds after the node: parameters, buffers, inputs, live values", "max", "memory", rollup_if_measured=True, old_default="", per_call="last"),
    Column("mem_saved_bytes", "Int64", "bytes", "with a backward pass: the node's allocations autograd keeps for the backward", "sum_known", "memory", rollup_if_measured=True, old_default="", per_call="sum"),
    Column("skip_reason", "str", "text", "isolated mode: why the node was not re-run (empty if it was)", source="anatomy"),
    # only in a profile gathered over torch.distributed ranks (fxprof.gather; fxprof.core.rankstats)
    Column("rank_min_ms", "float64", "ms", "a profile gathered over ranks (`fxprof.gather`): the smallest of the ranks' median times", source="ranks", table=False),
    Column("rank_max_ms", "float64", "ms", "a profile gathered over ranks: the largest of the ranks' median times", source="ranks", table=False),
    Column("slowest_rank", "Int64", "count", "a profile gathered over ranks: the rank with the largest median time", source="ranks", table=False),
    # saved with the anatomy, used by the ``bound`` verdict, not table columns
    Column("device_ops", "Int64", "count", "aten ops the node ran that do work (views, metadata queries and `empty` do not count)", source="anatomy", table=False),
    Column("syncs", "Int64", "count", "CUDA synchronizations the node made (torch.cuda sync debug mode)", source="anatomy", table=False),
)

BY_NAME: dict[str, Column] = {c.name: c for c in COLUMNS}

#: the stored columns whose calls do not simply keep the first call's value: name -> rule
PER_CALL: dict[str, str] = {c.name: c.per_call for c in COLUMNS if c.per_call != "first"}

#: the anatomy fields every saved profile has written in this order since before the memory
#: columns (saved files stay byte for byte the same); the other stored columns follow in the
#: table's order
_STORED_FIRST = ("input_shapes", "output_shape", "dtype", "out_bytes", "bytes", "flops")


def table_columns(columns: Sequence[Column] | None = None) -> tuple[str, ...]:
    """The per-node table's column names, in order."""
    columns = COLUMNS if columns is None else columns
    return tuple(c.name for c in columns if c.table)


def table_dtypes(columns: Sequence[Column] | None = None) -> dict[str, str]:
    """The per-node table's columns and their pandas dtypes, in order."""
    columns = COLUMNS if columns is None else columns
    return {c.name: c.dtype for c in columns if c.table}


def rank_dtypes(columns: Sequence[Column] | None = None) -> dict[str, str]:
    """The columns a profile gathered over ranks adds to the per-node table, with their dtypes."""
    columns = COLUMNS if columns is None else columns
    return {c.name: c.dtype for c in columns if c.source == "ranks"}


def node_columns(columns: Sequence[Column] | None = None) -> tuple[str, ...]:
    """The descriptive columns taken from ``NodeInfo``, in order."""
    columns = COLUMNS if columns is None else columns
    return tuple(c.name for c in columns if c.source == "node")


def stored_columns(columns: Sequence[Column] | None = None) -> dict[str, str]:
    """What the anatomy and memory passes store per node (``Profile.anatomy``, a saved file's
    ``anatomy``): name -> pandas dtype, in the order files hold them."""
    columns = COLUMNS if columns is None else columns
    stored = [c for c in columns if c.source in ("anatomy", "memory")]
    first = [c for name in _STORED_FIRST for c in stored if c.name == name]
    return {c.name: c.dtype for c in [*first, *(c for c in stored if c.name not in _STORED_FIRST)]}


def rollup_columns(columns: Sequence[Column] | None = None) -> dict[str, Column]:
    """The columns ``group_by`` keeps, in the table's order."""
    columns = COLUMNS if columns is None else columns
    return {c.name: c for c in columns if c.table and c.rollup is not None}


def group_columns(columns: Sequence[Column] | None = None) -> tuple[str, ...]:
    """The columns of a roll-up, in order (``nodes``: the node count, then the rolled-up ones)."""
    columns = COLUMNS if columns is None else columns
    return ("nodes", *rollup_columns(columns))


def signed_columns(columns: Sequence[Column] | None = None) -> frozenset[str]:
    """Number columns that may be negative."""
    columns = COLUMNS if columns is None else columns
    return frozenset(c.name for c in columns if c.signed)


def old_csv_defaults(columns: Sequence[Column] | None = None) -> dict[str, str]:
    """What a per-node CSV written before a column existed gets for it (column -> cell text)."""
    columns = COLUMNS if columns is None else columns
    return {c.name: c.old_default for c in columns if c.table and c.old_default is not None}


def number_format(name: str, columns: Sequence[Column] | None = None) -> str | None:
    """How views print column ``name`` (see :attr:`Column.format`); None for text or a name
    that is not a column."""
    columns = COLUMNS if columns is None else columns
    found = next((c for c in columns if c.name == name), None)
    return None if found is None else found.format


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def markdown_table(columns: Iterable[Column] | None = None) -> str:
    """The per-node table's columns (a gathered profile's per-rank ones last) as a Markdown table
    (column, unit, roll-up, meaning): the one in docs/anatomy.md."""
    columns = COLUMNS if columns is None else columns
    rollup_words = {"sum": "sum", "sum_known": "sum", "max": "max", "running": "running sum", None: ""}
    lines = ["| column | unit | roll-up | meaning |", "| --- | --- | --- | --- |"]
    for c in columns:
        if c.table or c.source == "ranks":
            lines.append(f"| `{c.name}` | {UNIT_WORDS[c.unit]} | {rollup_words[c.rollup]} | {_cell(c.description)} |")
    return "\n".join(lines)


#: the markers around the generated table in docs/anatomy.md
DOC_MARKERS = ("<!-- columns: generated by `python docs/scripts/columns_table.py` from fxprof/columns.py -->",
               "<!-- end of generated columns -->")


def with_table(text: str, table: str | None = None) -> str:
    """``text`` (a docs page) with the part between :data:`DOC_MARKERS` replaced by ``table``
    (default: :func:`markdown_table`)."""
    start, end = DOC_MARKERS
    if start not in text or end not in text:
        raise ValueError(f"the page lacks the markers {start!r} and {end!r} around its column table")
    head, rest = text.split(start, 1)
    _, tail = rest.split(end, 1)
    return f"{head}{start}\n{markdown_table() if table is None else table}\n{end}{tail}"
