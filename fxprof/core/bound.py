"""The ``bound`` verdict: did the GPU wait for the host in this node, or the host for the GPU?

Measured per sample with the CUDA event timers, on the run's two timelines (both start at
the run's first mark, when the device queue is empty after the previous run's synchronize):

- ``start_ms``: when the **device** reached the node's start (its start event);
- ``host_start_ms``: when the **host** began issuing the node.

``lag = start_ms - host_start_ms`` is how far the device was behind the host when the node
started: the work already queued. The host spends ``host_ms`` issuing the node; the device can
only run the node's work once it is launched, so it can sit idle inside the node's interval for
at most ``idle = host_ms - lag`` (clipped to ``[0, time_ms]``): none when the queue held more
work than the launch takes, all of the launch when the queue was empty.

Per node, from the medians of its samples:

``""``       the node launches no device work (a placeholder, ``getitem``, a view: no aten op
             that does work ran in it, from the anatomy pass, and its stream time holds no
             device work either), or it was not measured;
``"sync"``   the node synchronized with the device (``.item()``, ``nonzero``, a boolean mask,
             ``.cpu()``: counted with ``torch.cuda.set_sync_debug_mode`` in the anatomy pass):
             the host waited for the device, so it is never ``"launch"``;
``"launch"`` the device was idle for more than :data:`LAUNCH_IDLE_SHARE` of the node's stream
             time: the GPU mostly waited for the host to launch it;
``"device"`` otherwise: the device had work queued, the launch was hidden behind it.

A kernel launched directly, with no aten op (``torch.cuda._sleep``, a custom extension's or a
Triton kernel called as a function), is device work too: without the kernel timer (which sees
such launches through their runtime call) a node whose stream time, less the most the device can
have idled in it, exceeds :data:`DIRECT_LAUNCH_MS` counts as launching, whatever the anatomy says.

A node launched behind milliseconds of backlog is ``"device"`` however slow its launch: it
never starved the GPU. The rule needs no ratio measured on one machine; the one threshold is
"more than half of the node's stream time was idle".
"""

from __future__ import annotations

from typing import Iterable

import numpy as np
import pandas as pd

from ..vocab import EVENT_TIMERS

__all__ = ["bound_verdicts", "LAUNCH_IDLE_SHARE", "DIRECT_LAUNCH_MS", "DEVICE_TIMERS", "VERDICTS"]

#: a node is launch-bound when the device idled for more than this share of its stream time
LAUNCH_IDLE_SHARE = 0.5
#: device-busy stream time (ms) that marks a node with no aten op as launching work directly:
#: well above an empty node's event pair and launch latency (a few microseconds)
DIRECT_LAUNCH_MS = 0.05
#: timers whose samples carry device timelines (the verdict is empty for the others)
DEVICE_TIMERS = EVENT_TIMERS  # the timers with a device timeline of their own
VERDICTS = ("", "sync", "launch", "device")


def idle_ms(samples: pd.DataFrame) -> pd.DataFrame:
    """Per node: median ``lag_ms`` (device behind host at the node's start), ``host_ms``,
    ``time_ms`` and the resulting ``idle_ms`` bound, from the raw samples."""
    frame = samples.assign(lag_ms=samples["start_ms"] - samples["host_start_ms"])
    med = frame.groupby("node", sort=False, observed=True)[["lag_ms", "host_ms", "time_ms"]].median()
    med["idle_ms"] = (med["host_ms"] - med["lag_ms"]).clip(lower=0.0)
    med["idle_ms"] = np.minimum(med["idle_ms"], med["time_ms"].clip(lower=0.0))
    return med


def bound_verdicts(samples: pd.DataFrame, table: pd.DataFrame, no_event: Iterable[str] = ()) -> pd.Series:
    """The verdict per node of ``table`` (which has ``calls`` and, from the anatomy,
    ``device_ops``, ``syncs``, and ``kernel_median_ms``), from ``samples``. Nodes in ``no_event``
    (the event timers gave them no event: they launch nothing, whatever their inputs; see
    fxprof.measure.timing.launches) get ``""``: their device time is 0 by construction, not measured."""
    out = pd.Series("", index=table.index, dtype=object)
    if samples.empty:
        return out.astype(str)
    med = idle_ms(samples).reindex(table.index)
    measured = (table["calls"] > 0) & med["time_ms"].notna()
    ops = pd.to_numeric(table.get("device_ops"), errors="coerce") if "device_ops" in table else pd.Series(np.nan, index=table.index)
    kernel = pd.to_numeric(table.get("kernel_median_ms"), errors="coerce") if "kernel_median_ms" in table else pd.Series(np.nan, index=table.index)
    # launches work: the anatomy saw an aten op doing work, or device activity was attributed;
    # with neither measured (anatomy off, no kernel timer) a measured node counts as launching
    known = ops.notna() | kernel.notna()
    # a direct launch: no aten op, no kernel timer to ask, but the device was busy inside the node
    busy = (med["time_ms"] - med["idle_ms"]) > DIRECT_LAUNCH_MS
    direct = kernel.isna() & busy.fillna(False)
    launches = (ops.fillna(0) > 0) | (kernel.fillna(0) > 0) | ~known | direct
    syncs = pd.to_numeric(table.get("syncs"), errors="coerce").fillna(0) > 0 if "syncs" in table else pd.Series(False, index=table.index)
    launch = med["idle_ms"] > LAUNCH_IDLE_SHARE * med["time_ms"]
    verdict = np.where(syncs, "sync", np.where(launch, "launch", "device"))
    out[:] = np.where(measured & launches & ~table.index.isin(list(no_event)), verdict, "")
    return out.astype(str)
