"""Roll-ups: node times summed by op kind, module type, record_function range or module scope."""

from __future__ import annotations

import pandas as pd

__all__ = ["group_by", "GROUP_KEYS", "ROOT", "scope_at_depth"]

GROUP_KEYS = ("op", "module_type", "range", "scope", "graph", "comm")
#: the label of nodes that sit at the model's root (no enclosing module) in scope roll-ups
ROOT = "(root)"
#: the label of graph plumbing: inputs (under dynamo these include the lifted parameters),
#: attribute reads (export's parameters), outputs and export's guard check
PLUMBING = "(graph)"


def _plumbing(table: pd.DataFrame) -> pd.Series:
    return table["op"].isin(["placeholder", "get_attr", "output"]) | (table["kind"] == "guards_fn")


def scope_at_depth(scope: str, depth: int) -> str:
    """``layer1.0.conv1`` at depth 1 is ``layer1``, at depth 2 ``layer1.0``; "" is the root."""
    if not scope:
        return ROOT
    return ".".join(scope.split(".")[:depth])


def _labels(table: pd.DataFrame, key: str, depth: int) -> pd.Series:
    if key == "op":
        return table["kind"]
    if key == "module_type":
        functional = table["op"].isin(["call_function", "call_method"])
        labels = table["module_type"].where(table["module_type"] != "", PLUMBING)
        labels = labels.mask(functional & (table["module_type"] == ""), "(function)")
        return labels.mask(_plumbing(table), PLUMBING)
    if key == "range":
        return table["range"].where(table["range"] != "", "(no range)")
    if key == "graph":
        return table["graph"].where(table["graph"] != "", "(single graph)")
    if key == "comm":  # collectives vs the rest (fxprof.distributed)
        from .distributed import comm_labels

        return comm_labels(table)
    if key == "scope":
        if isinstance(depth, bool) or not isinstance(depth, int) or depth < 1:
            raise ValueError(f"depth must be an integer >= 1, got {depth!r}")
        return table["scope"].map(lambda s: scope_at_depth(s, depth)).mask(_plumbing(table), PLUMBING)
    raise ValueError(f"cannot group by {key!r}; choose one of {', '.join(GROUP_KEYS)}")


def group_by(table: pd.DataFrame, key: str = "op", depth: int = 1) -> pd.DataFrame:
    """Sum a per-node table (:attr:`Profile.df`) by ``key``.

    Keys:
        ``"op"``: the operation kind (``conv2d``, ``add``, ``flatten``...), the same whether a
            module or a function performed it (the ``kind`` column).
        ``"module_type"``: the called module's class; ``(function)`` for functional nodes,
            ``(graph)`` for placeholders, outputs and attribute reads.
        ``"range"``: the innermost ``record_function`` label; ``(no range)`` outside ranges.
        ``"graph"``: the captured graph (``g0``, ``g1``... with ``capture="dynamo"``).
        ``"scope"``: the module path cut to ``depth`` parts (depth 1: ``layer1``; depth 2:
            ``layer1.0``). A module's group includes the functional nodes inside it (a
            BasicBlock's residual ``add`` counts to its block); nodes at the root are ``(root)``.
            Graph plumbing (inputs, outputs, attribute reads: under dynamo and export these
            carry the parameters) is ``(graph)`` in scope and module-type roll-ups, so that a
            module's node count is the same whichever capture made the graph.
        ``"comm"``: ``communication`` (collective operations: ``all_reduce``, ``wait_tensor``...,
            see :func:`fxprof.distributed.is_communication`), ``computation`` (the rest) and
            ``(graph)`` (plumbing).

    Returns:
        A DataFrame indexed by the group label (index name = ``key``), sorted by ``pct``
        descending, with columns ``nodes`` (node count), ``mean_ms`` and ``median_ms`` (sums
        of the nodes' mean and median times), ``pct`` (sum of the nodes' ``pct``: share of the
        summed median node time, so one slow sample cannot reorder groups; sums to 100),
        ``cum_pct``, ``flops`` (sum; ``<NA>`` if not counted) and ``flops_pct``.
    """
    labels = _labels(table, key, depth).rename(key)
    grouped = table.groupby(labels, sort=False)
    out = pd.DataFrame(
        {
            "nodes": grouped.size(),
            "mean_ms": grouped["mean_ms"].sum(),
            "median_ms": grouped["median_ms"].sum(),
            "pct": grouped["pct"].sum(),
            "flops": grouped["flops"].sum(min_count=1).astype("Int64"),
            "flops_pct": grouped["flops_pct"].sum(min_count=1),
        }
    )
    out = out.sort_values("pct", ascending=False, kind="stable")
    out.insert(out.columns.get_loc("pct") + 1, "cum_pct", out["pct"].cumsum())
    out.index.name = key
    return out
