"""The JSON Schema of a saved profile: what a file may hold, published in ``docs/format.md``.

:data:`SCHEMA` (format version 2, what fxprof writes), :data:`SCHEMA_V1` (version 1, still
read) and :data:`NPZ_HEADER_SCHEMA` (a binary profile's ``header.json``). The rules of ``meta``
are derived from ``fxprof/core/metakeys.py``, those of the anatomy columns from
``fxprof/columns.py``. The checks that apply them are :mod:`fxprof.io.validate`'s.
"""

from __future__ import annotations

from typing import Any

from ..columns import BY_NAME, Column, stored_columns
from ..core.metakeys import schema_keys

__all__ = ["SCHEMA", "SCHEMA_V1", "NPZ_HEADER_SCHEMA", "INT64_MAX"]

INT64_MAX = 2**63 - 1
_NONNEG_INT = {"type": "integer", "minimum": 0, "maximum": INT64_MAX}
_TIME = {"type": "number", "minimum": 0}
_OPTIONAL_TIME = {"type": ["number", "null"], "minimum": 0}
_TEXT = {"type": "string"}


#: the rules a saved profile's ``meta`` keys are checked by, by the name that
#: fxprof/core/metakeys.py gives each key's ``schema``
_META_RULES: dict[str, dict[str, Any]] = {
    "text": _TEXT,
    "count": _NONNEG_INT,
    "threads": {"type": "integer", "minimum": 1, "maximum": INT64_MAX},
    "flag": {"type": "boolean"},
    "texts": {"type": "array", "items": _TEXT},
    "mode": {"enum": ["timed", "isolated"]},
    "epoch_ns": {**_NONNEG_INT, "description": "Unix time (ns) of the first timed run's start"},
    "peaks": {
        "type": "object",
        "description": "the machine's roofs the roofline columns are against (fxprof.core.roofline.Peaks)",
        "required": ["flops_per_s", "bytes_per_s"],
        "properties": {
            **{k: {"type": "number", "exclusiveMinimum": 0} for k in ("flops_per_s", "bytes_per_s")},
            "overhead_s": {"type": "number", "minimum": 0},
            **{k: _TEXT for k in ("device", "device_name", "dtype", "torch", "source")},
            "threads": {"type": ["integer", "null"], "minimum": 1},
            "details": {"type": "object"},
        },
    },
}


def _column(item: dict[str, Any], description: str) -> dict[str, Any]:
    return {"type": "array", "items": item, "description": description}


def _anatomy(item: dict[str, Any], description: str) -> dict[str, Any]:
    return _column(item, description + "; one value per node, in the order of \"nodes\"; null: not measured")


def _anatomy_rule(column: Column) -> dict[str, Any]:
    """The schema of a stored per-node column (fxprof/columns.py): text, or a number within
    int64 (whole numbers) that is never negative unless the column is ``signed``."""
    if column.dtype == "str":
        item: dict[str, Any] = {"type": ["string", "null"]}
    elif column.dtype.lower() == "int64":
        item = {"type": ["integer", "null"], "minimum": -INT64_MAX - 1 if column.signed else 0, "maximum": INT64_MAX}
    else:
        item = {"type": ["number", "null"]} if column.signed else {"type": ["number", "null"], "minimum": 0}
    return _anatomy(item, f"{column.name}: {column.description}")


#: The JSON Schema of a saved profile written before version 2 (sample nodes by name); still read.
SCHEMA_V1: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "fxprof saved profile, format version 1",
    "description": "Times are milliseconds. Columns are parallel arrays: entry i of every samples column is one sample.",
    "type": "object",
    "required": ["format", "version", "nodes", "samples", "runs"],
    "properties": {
        "format": {"const": "fxprof.profile"},
        "version": {"const": 1},
        "meta": {
            "type": "object",
            "description": "what was measured and how; keys not listed here are kept as they are",
            "properties": {name: _META_RULES[rule] for name, rule in schema_keys()},
        },
        "nodes": {
            "type": "array",
            "description": "one entry per graph node, in graph order; names are unique",
            "items": {
                "type": "object",
                "required": ["name"],
                "properties": {
                    "name": {"type": "string", "minLength": 1},
                    **{k: _TEXT for k in ("op", "target", "kind", "module_type", "scope", "range", "graph")},
                },
            },
        },
        "samples": {
            "type": "object",
            "description": "one entry per node per run, every column the same length",
            "required": ["node", "run", "time_ms", "host_ms"],
            "properties": {
                "node": _column(_TEXT, "the node's name, one of nodes[].name"),
                "run": _column(_NONNEG_INT, "the timed run (index into runs.run); in isolated mode the repeat"),
                "time_ms": _column(_TIME, "the timer's measurement"),
                "host_ms": _column(_OPTIONAL_TIME, "the host clock's measurement"),
                "start_ms": _column(_OPTIONAL_TIME, "start from the run's start, timer"),
                "host_start_ms": _column(_OPTIONAL_TIME, "start from the run's start, host clock"),
                "kernel_ms": _column(_OPTIONAL_TIME, "CUDA kernel time (timer kernel); null otherwise"),
            },
        },
        "runs": {
            "type": "object",
            "description": "one entry per timed run, every column the same length; empty in isolated mode",
            "required": ["run", "total_ms"],
            "properties": {
                "run": _column(_NONNEG_INT, "0, 1, 2... in order"),
                "total_ms": _column(_TIME, "the whole run, timer"),
                "host_ms": _column(_OPTIONAL_TIME, "the whole run, host clock"),
                "start_ms": _column(_OPTIONAL_TIME, "the run's start from the first run's start, host clock"),
                "rank": _column(_NONNEG_INT, "a profile gathered over torch.distributed ranks: the rank that ran it"),
                "rank_run": _column(_NONNEG_INT, "a gathered profile: the run's number on its own rank"),
                "barrier_ms": _column(_OPTIONAL_TIME, "a gathered profile: the wait at the barrier before the run"),
            },
        },
        "anatomy": {
            "type": "object",
            "properties": {name: _anatomy_rule(BY_NAME[name]) for name in stored_columns()},
        },
    },
}

def _version_2(v1: dict[str, Any]) -> dict[str, Any]:
    """Version 2 is version 1 with each sample's node given by its position in ``nodes``
    (an integer, not the name) and ``kernel_ms`` left out when kernel time was not measured."""
    import copy

    schema = copy.deepcopy(v1)
    schema["title"] = "fxprof saved profile, format version 2"
    props = schema["properties"]
    props["version"] = {"const": 2}
    props["samples"]["properties"]["node"] = _column(_NONNEG_INT, "the node: an index into nodes (0 is nodes[0])")
    props["samples"]["properties"]["kernel_ms"]["description"] = "CUDA kernel time (timer kernel); absent when not measured"
    return schema


#: The JSON Schema of a saved profile (``Profile.save``), format version 2 (what fxprof writes).
SCHEMA: dict[str, Any] = _version_2(SCHEMA_V1)


#: what a binary (.npz) profile's ``header.json`` may hold: ``meta``, ``nodes`` and ``anatomy``
#: exactly as the JSON format says; ``samples`` and ``runs`` are the columns' lengths
NPZ_HEADER_SCHEMA: dict[str, Any] = {
    "$schema": SCHEMA["$schema"],
    "type": "object",
    "required": ["format", "version", "nodes", "samples", "runs"],
    "properties": {
        **{k: SCHEMA["properties"][k] for k in ("meta", "nodes", "anatomy")},
        "samples": {**_NONNEG_INT, "description": "the number of samples: the length of every samples/ column"},
        "runs": {**_NONNEG_INT, "description": "the number of runs: the length of every runs/ column"},
    },
}
