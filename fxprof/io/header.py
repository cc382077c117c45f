"""The header every saved profile carries, JSON or ``.npz``: meta, nodes and anatomy, one codec.

Both file formats store a profile's descriptive part the same way (the ``.npz`` header is the
JSON document without its samples and runs); this module writes and reads that part, so the two
cannot drift apart. Fields missing from older files get the same defaults in both.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, Mapping, Sequence

import pandas as pd

from ..columns import old_csv_defaults
from ..core.nodes import NodeInfo
from ..core.profile import NODE_COLUMNS
from ..vocab import ANATOMY_COLUMNS
from .roles import derive_roles

if TYPE_CHECKING:
    from ..core.profile import Profile

__all__ = ["encode_header", "decode_nodes", "decode_anatomy", "NODE_DEFAULTS"]

#: what a node field missing from a file means: files from before training steps hold forward
#: passes (``phase``); every other missing field is empty
NODE_DEFAULTS: dict[str, str] = {c: d for c, d in old_csv_defaults().items() if c in NODE_COLUMNS and d}


def encode_header(profile: "Profile", meta: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """``{"meta", "nodes", "anatomy"}`` of ``profile`` as JSON-ready values; ``meta`` in place
    of its own, as :func:`fxprof.io.validate.check_saveable` gives it (checked, JSON values)."""
    return {
        "meta": profile.meta if meta is None else meta,
        "nodes": [{"name": n.name, **{col: getattr(n, col) for col in NODE_COLUMNS}} for n in profile.nodes],
        "anatomy": {
            col: [None if pd.isna(v) else (v if isinstance(v, str) else int(v)) for v in profile.anatomy[col]]
            for col in ANATOMY_COLUMNS
        },
    }


def decode_nodes(records: Sequence[Mapping[str, Any]]) -> list[NodeInfo]:
    """The nodes of a header's ``nodes`` list (raises KeyError/TypeError on damaged records)."""
    defaults = {c: NODE_DEFAULTS.get(c, "") for c in NODE_COLUMNS}
    every = {"name", *NODE_COLUMNS}
    # a record holding exactly the fields (what fxprof writes) is the keywords as it is
    nodes = [NodeInfo(**n) if type(n) is dict and n.keys() == every
             else NodeInfo(**{"name": n["name"], **{c: n.get(c, d) for c, d in defaults.items()}}) for n in records]
    old = [i for i, n in enumerate(records) if "role" not in n]
    if old:  # written before rows carried their role: derived once, here
        table = pd.DataFrame([{c: getattr(nodes[i], c) for c in ("op", "target", "kind", "phase")} for i in old])
        for i, role in zip(old, derive_roles(table)):
            nodes[i] = dataclasses.replace(nodes[i], role=role)
    return nodes


def decode_anatomy(columns: Mapping[str, Sequence[Any]] | None, nodes: Sequence[NodeInfo]) -> dict[str, dict[str, Any]]:
    """Per node name, the anatomy values of a header's ``anatomy`` columns (unknown columns ignored)."""
    known = [(col, values) for col, values in (columns or {}).items() if col in ANATOMY_COLUMNS]
    return {n.name: {col: values[i] for col, values in known} for i, n in enumerate(nodes)}
