"""Roll-ups: node times summed by op kind, module type, record_function range or module scope."""

from __future__ import annotations

from typing import Any, Sequence

import pandas as pd

from ..columns import Column, rollup_columns
from ..vocab import GROUP_KEYS, PHASES, RANGE_KIND
from .roles import is_plumbing, roles_of

__all__ = ["group_by", "rolled_up", "GROUP_KEYS", "ROOT", "scope_at_depth", "is_bookkeeping", "bookkeeping_note"]

#: the phases of a training step (fxprof.measure.capture.training), in the order they run
#: the label of nodes that sit at the model's root (no enclosing module) in scope roll-ups
ROOT = "(root)"
#: the label of graph plumbing: inputs (under dynamo these include the lifted parameters),
#: attribute reads (export's parameters), outputs and export's guard check
PLUMBING = "(graph)"
#: the roll-up's columns recomputed after sorting (rule ``running``: ``cum_pct`` from ``pct``)
_RUNNING = [name for name, c in rollup_columns().items() if c.rollup == "running"]


def is_bookkeeping(table: pd.DataFrame) -> pd.Series:
    """Per node: True for a ``record_function`` range's enter or exit node (kind
    :data:`~fxprof.vocab.RANGE_KIND`). Their time is real (the profiler range is opened and
    closed there) and stays in every share and roll-up; it is the range's bookkeeping, not a
    hotspot of the model, so the views keep these nodes out of their rankings by default."""
    if "kind" not in table.columns:
        return pd.Series(False, index=table.index)
    return table["kind"] == RANGE_KIND


def bookkeeping_note(table: pd.DataFrame) -> str:
    """One line with what the ranges' enter/exit nodes cost, or "" when there are none."""
    mask = is_bookkeeping(table)
    if not mask.any():
        return ""
    ranges = table.loc[mask, "range"].replace("", pd.NA).dropna().nunique() if "range" in table.columns else 0
    pct = float(table.loc[mask, "pct"].sum()) if "pct" in table.columns else float("nan")
    return (f"record_function bookkeeping: {int(mask.sum())} enter/exit nodes of {ranges} range(s), "
            f"{pct:.1f}% of node time, counted in every share and in their range's roll-up (group by range), "
            f"not ranked as hotspots")


def scope_at_depth(scope: str, depth: int) -> str:
    """``layer1.0.conv1`` at depth 1 is ``layer1``, at depth 2 ``layer1.0``; "" is the root."""
    if not scope:
        return ROOT
    return ".".join(scope.split(".")[:depth])


def rollup_labels(table: pd.DataFrame, key: str, depth: int) -> pd.Series:
    if key == "op":
        return table["kind"]
    if key == "module_type":
        functional = table["op"].isin(["call_function", "call_method"])
        labels = table["module_type"].where(table["module_type"] != "", PLUMBING)
        labels = labels.mask(functional & (table["module_type"] == ""), "(function)")
        return labels.mask(is_plumbing(table), PLUMBING)
    if key == "range":
        return table["range"].where(table["range"] != "", "(no range)")
    if key == "graph":
        return table["graph"].where(table["graph"] != "", "(single graph)")
    if key == "phase":
        return _phases(table)
    if key == "role":  # what each row is (fxprof.vocab.ROLES)
        return roles_of(table)
    if key == "comm":  # collectives vs the rest (fxprof.core.ranks)
        from .rankstats import comm_labels

        return comm_labels(table)
    if key == "scope":
        if isinstance(depth, bool) or not isinstance(depth, int) or depth < 1:
            raise ValueError(f"depth must be an integer >= 1, got {depth!r}")
        return table["scope"].map(lambda s: scope_at_depth(s, depth)).mask(is_plumbing(table), PLUMBING)
    raise ValueError(f"cannot group by {key!r}; choose one of {', '.join(GROUP_KEYS)}")


def _phases(table: pd.DataFrame) -> pd.Series:
    if "phase" not in table.columns:  # tables from before training steps: forward passes
        return pd.Series("forward", index=table.index, dtype=str)
    return table["phase"].where(table["phase"] != "", "forward")


def _phase_columns(table: pd.DataFrame, labels: pd.Series, out: pd.DataFrame) -> pd.DataFrame:
    """``forward_ms``, ``backward_ms``... (summed mean times of each phase's nodes) beside the
    total, and ``bwd_fwd_ratio``, when the table holds more than one phase (a training step)."""
    phases = _phases(table)
    present = [p for p in PHASES if (phases == p).any()] + sorted(set(phases) - set(PHASES))
    if len(present) < 2:
        return out
    at = out.columns.get_loc("mean_ms") + 1
    for i, phase in enumerate(present):
        values = table["mean_ms"].where(phases == phase, 0.0).groupby(labels, sort=False, observed=True).sum()
        out.insert(at + i, f"{phase}_ms", values.reindex(out.index))
    if "forward" in present and "backward" in present:
        forward = out["forward_ms"].where(out["forward_ms"] > 0)
        out.insert(at + len(present), "bwd_fwd_ratio", out["backward_ms"] / forward)
    return out


def _comm_columns(table: pd.DataFrame, labels: pd.Series, out: pd.DataFrame) -> pd.DataFrame:
    """``comm_ms`` and ``compute_ms`` (summed median times of the group's communication nodes and
    of the rest) after ``median_ms``, when the table holds collectives: a layer's own all-gathers
    and redistributions against its computation."""
    from .roles import is_communication

    if not {"kind", "role"} <= set(table.columns):
        return out
    comm = is_communication(table)
    if not comm.any():
        return out
    at = out.columns.get_loc("median_ms") + 1
    summed = table["median_ms"].where(comm, 0.0).groupby(labels, sort=False, observed=True).sum()
    out.insert(at, "comm_ms", summed.reindex(out.index))
    out.insert(at + 1, "compute_ms", out["median_ms"] - out["comm_ms"])
    return out


def group_by(table: pd.DataFrame, key: str = "op", depth: int = 1) -> pd.DataFrame:
    """Sum a per-node table (:attr:`Profile.df`) by ``key``.

    Keys:
        ``"op"``: the operation kind (``conv2d``, ``add``, ``flatten``...), the same whether a
            module or a function performed it (the ``kind`` column).
        ``"module_type"``: the called module's class; ``(function)`` for functional nodes,
            ``(graph)`` for placeholders, outputs and attribute reads.
        ``"range"``: the innermost ``record_function`` label; ``(no range)`` outside ranges.
        ``"graph"``: the captured graph (``g0``, ``g1``... with ``capture="dynamo"``).
        ``"phase"``: the part of a training step: ``forward``, ``loss``, ``backward``,
            ``optimizer`` (see :mod:`fxprof.measure.capture.training`).
        ``"scope"``: the module path cut to ``depth`` parts (depth 1: ``layer1``; depth 2:
            ``layer1.0``). A module's group includes the functional nodes inside it (a
            BasicBlock's residual ``add`` counts to its block); nodes at the root are ``(root)``.
            Graph plumbing (inputs, outputs, attribute reads: under dynamo and export these
            carry the parameters) is ``(graph)`` in scope and module-type roll-ups, so that a
            module's node count is the same whichever capture made the graph.
        ``"comm"``: ``communication`` (collective operations: ``all_reduce``, ``wait_tensor``...,
            see :func:`fxprof.core.ranks.is_communication`), ``computation`` (the rest) and
            ``(graph)`` (plumbing).
        ``"role"``: what each row is (:data:`fxprof.vocab.ROLES`): the model's work, plumbing,
            ``record_function`` ranges, collectives, a parallel layout's steps (``fsdp``, ``tp``,
            ``ddp``), the optimizer, a compiled model's kernels and its time outside them.

    Returns:
        A DataFrame indexed by the group label (index name = ``key``), sorted by ``pct``
        descending, with columns ``nodes`` (node count), ``mean_ms`` and ``median_ms`` (sums
        of the nodes' mean and median times), ``pct`` (sum of the nodes' ``pct``: share of the
        summed median node time, so one slow sample cannot reorder groups; sums to 100),
        ``cum_pct``, ``flops`` (sum; ``<NA>`` if not counted), ``flops_pct``, ``roof_ms`` and
        ``headroom_ms`` (sums of the nodes' least times at the machine peaks and of their time
        above them; NaN without peaks), and the memory columns when the memory pass measured them
        (``mem_delta_bytes``, ``mem_temp_bytes``, ``mem_saved_bytes`` summed; ``mem_peak_bytes``,
        ``mem_live_bytes`` the group's highest). Which columns and how: their ``rollup`` in
        fxprof/columns.py.
        A training-step table (more than one phase) also has, after ``mean_ms``, one
        ``<phase>_ms`` column per phase (``forward_ms``, ``backward_ms``...: the group's mean
        time in that phase; they add up to ``mean_ms``) and ``bwd_fwd_ratio`` (backward over
        forward time; NaN without forward time). Backward nodes count to the scope and module
        type of the forward op they differentiate.
        A table holding collectives (``"comm"``'s communication) also has, after ``median_ms``,
        ``comm_ms`` and ``compute_ms`` (the group's summed median time in communication nodes and
        in the rest), except by ``"op"`` and ``"comm"``, whose groups are one or the other.
    """
    labels = rollup_labels(table, key, depth).rename(key)
    grouped = table.groupby(labels, sort=False, observed=True)
    out = pd.DataFrame({"nodes": grouped.size(), **rolled_up(grouped, table)})
    if key != "phase":
        out = _phase_columns(table, labels, out)
    if key not in ("comm", "op"):
        out = _comm_columns(table, labels, out)
    out = out.sort_values("pct", ascending=False, kind="stable")
    for col in _RUNNING:  # cum_pct: over the roll-up's rows, in its order
        out[col] = out[col.replace("cum_", "", 1)].cumsum()
    out.index.name = key
    return out



def rolled_up(grouped: Any, table: pd.DataFrame, columns: Sequence[Column] | None = None) -> dict[str, Any]:
    """Each column with a roll-up rule (fxprof/columns.py), combined over ``grouped`` (the
    per-node ``table`` grouped), in the table's order: ``sum`` (missing as 0), ``sum_known``
    (``<NA>`` when no node of a group has a value), ``max``; ``running`` columns are placeholders
    filled after sorting. A column the table lacks is NaN, or left out when its values are shown
    only when measured (the memory columns), as is one no node has a value in."""
    out: dict[str, Any] = {}
    for name, col in rollup_columns(columns).items():
        present = name in table.columns
        if col.rollup_if_measured and not (present and table[name].notna().any()):
            continue
        if col.rollup == "running" or not present:
            out[name] = float("nan")
            continue
        if col.rollup == "max":
            values = grouped[name].max()
        else:
            values = grouped[name].sum(min_count=1 if col.rollup == "sum_known" else 0)
        out[name] = values.astype(col.dtype) if col.dtype != "str" else values
    return out
