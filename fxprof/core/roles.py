"""Which rows are which, read from the ``role`` column (no torch): plumbing, communication, FSDP's steps.

A row's role is set where the row is made (:data:`fxprof.vocab.ROLES`); these are its only
readers in the analyses, so that nothing depends on how a target's text is spelled (renaming the
module that makes FSDP's rows cannot empty ``fxprof.overlap``). Files written before the column
existed get their roles derived once on load (:mod:`fxprof.io.roles`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterable

import pandas as pd

from ..vocab import COLLECTIVE, COLLECTIVE_KINDS, FSDP, PARALLEL_ROLES, PLUMBING

if TYPE_CHECKING:
    from .nodes import NodeInfo

__all__ = ["roles_of", "is_plumbing", "is_communication", "fsdp_steps"]


def roles_of(table: pd.DataFrame) -> pd.Series:
    """The ``role`` column of a per-node table; a clear error for a table without one."""
    if "role" not in table.columns:
        raise ValueError("this per-node table has no 'role' column, so fxprof cannot tell its plumbing and "
                         "communication rows from the model's work: use a profile's own table (Profile.df), "
                         "or one read back by fxprof.read_csv, which derives the roles of older files")
    return table["role"].astype(str)


def is_plumbing(table: pd.DataFrame) -> pd.Series:
    """Per row: the graph's inputs, attribute reads, output or guards (role ``plumbing``). A
    table made by hand without roles (``compare_blocks`` and ``group_by`` take any per-node
    table) reads its graph ops: placeholders, attribute reads and the output."""
    if "role" not in table.columns and "op" in table.columns:
        return table["op"].isin(["placeholder", "get_attr", "output"])
    return roles_of(table) == PLUMBING


def is_communication(table: pd.DataFrame) -> pd.Series:
    """Per row: a collective (role ``collective``), or a parallel layout's step fxprof times
    (FSDP's, tensor parallelism's, DDP's) whose kind is a collective (an all-gather, its wait,
    a redistribution's all-reduce; not FSDP's reshard nor a redistribution that issued none)."""
    role = roles_of(table)
    return (role == COLLECTIVE) | (role.isin(PARALLEL_ROLES) & table["kind"].isin(COLLECTIVE_KINDS))


def fsdp_steps(nodes: Iterable["NodeInfo"]) -> dict[str, str]:
    """FSDP's step rows among ``nodes`` (role ``fsdp``): node name -> step, the row's kind
    (``all_gather``, ``wait``, ``reshard``, ``reduce_scatter``)."""
    return {n.name: n.kind for n in nodes if n.role == FSDP}
