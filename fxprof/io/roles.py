"""The ``role`` of each row of a file written before rows carried one, derived once on load.

fxprof now sets every row's role where it makes the row (:data:`fxprof.vocab.ROLES`); older
files (JSON, ``.npz``, CSV) hold the facts those rows were told apart by then: the op, the kind,
and the text of the target. This is the one place that still reads them, so that an old file
reads as it always did: the same plumbing and FSDP rows; communication only where the target
comes from torch.distributed (a c10d operator, a torch.distributed function), as the capture
tells it now. The text rule of those days also counted ``torch.gather`` and ``scatter`` (whose
kinds a collective shares) as communication: 18% "communication" for a model on one process.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from ..vocab import (
    BREAK,
    COLLECTIVE,
    COLLECTIVE_KINDS,
    COLLECTIVE_NAMESPACES,
    DDP,
    FSDP,
    GRAPH_BREAK,
    KERNEL,
    MODEL,
    OPTIMIZER,
    OUTSIDE,
    OVERHEAD,
    PLUMBING,
    RANGE,
    RANGE_KIND,
    TP,
    UNMATCHED,
)

__all__ = ["derive_roles"]

#: how the old files spell FSDP's steps: ``fsdp.all_gather(b1)`` (a training step's rows) and
#: ``fxprof.measure.distributed.fsdp.all_gather`` (the nodes of a traced FSDP model)
_FSDP_STEP = re.compile(r"(?:^|\.)fsdp\.(all_gather|wait|reshard|reduce_scatter)\b")
#: the target of a tensor-parallel input or output step
_TP_STEP = re.compile(r"(?:^|\.)tensor_parallel\.")
#: targets (as the old files spell them) of torch.distributed's operators: ``torch.ops.<namespace>.``
#: or ``<namespace>.`` for a c10d namespace (an extern kernel may drop the ``torch.ops.``)
_C10D_TARGET = re.compile(r"^(?:torch\.ops\.)?(?:%s)\." % "|".join(map(re.escape, COLLECTIVE_NAMESPACES)))
#: a function of torch.distributed (``torch.distributed.distributed_c10d.all_reduce``,
#: ``torch.distributed._functional_collectives.all_gather_tensor``...), as the old rule read them
_DISTRIBUTED = "torch.distributed."


def derive_roles(table: pd.DataFrame) -> pd.Series:
    """Per row of ``table`` (columns ``op``, ``target``, ``kind``, ``phase``, ``origins``; any
    missing one reads empty): the role the row had when its file was written."""
    def col(name: str) -> pd.Series:
        return table[name].astype(str) if name in table.columns else pd.Series("", index=table.index, dtype=str)

    op, target, kind, phase = col("op"), col("target"), col("kind"), col("phase")
    fsdp_step = target.str.extract(_FSDP_STEP, expand=False).fillna("")
    collective = _collective(op, target)
    conditions = [
        op.isin(["placeholder", "get_attr", "output"]) | (kind == "guards_fn"),
        op == BREAK,
        op == OVERHEAD,
        op == UNMATCHED,
        (op.isin(["kernel", "extern"])) & ~collective,
        kind == RANGE_KIND,
        (fsdp_step != "") & (fsdp_step == kind),
        target.str.startswith("ddp.") & (phase == "backward"),
        target.str.contains(_TP_STEP) & (kind != "forward") & (kind.isin(COLLECTIVE_KINDS) | (kind == "redistribute")),
        (phase == "optimizer") & (op == "call_method"),
        collective,
    ]
    choices = [PLUMBING, GRAPH_BREAK, OUTSIDE, UNMATCHED, KERNEL, RANGE, FSDP, DDP, TP, OPTIMIZER, COLLECTIVE]
    return pd.Series(np.select(conditions, choices, default=MODEL), index=table.index, dtype=str)


def _collective(op: pd.Series, target: pd.Series) -> pd.Series:
    """Per row: a torch.distributed collective, by where its target comes from, as the capture
    tells them apart (``fxprof.measure.capture.graph``): a c10d operator, a function of
    torch.distributed, or an async collective tensor's ``wait``. Never by the op's
    name alone: ``torch.gather`` and ``Tensor.scatter`` are the model's work, of the kinds
    ``gather`` and ``scatter`` that torch.distributed's collectives share."""
    return (target.str.contains(_C10D_TARGET) | target.str.startswith(_DISTRIBUTED)
            | ((op == "call_method") & target.isin(["wait", "wait_tensor"])))
