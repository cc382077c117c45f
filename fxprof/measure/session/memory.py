"""Memory in sessions (issue 34 item 4): per cycle, what the loop's steps allocate, hold and peak
at, and per node where the session's graph runs through fxprof's interpreter.

A session's timed steps must stay lean (a memory-recording profiler around them would be in
every node's time), so memory is measured in the cycle's **warm-up steps**, which already run
through the interpreter untimed: from the start of such a step (the ``step()`` before it) to its
end (its own ``step()``), ``torch.profiler(profile_memory=True)`` records every allocation and free
of the watched allocator (the CUDA devices the model is on, else the CPU), and the step's forward
runs with every node in a ``fxprof::<node>`` range (:mod:`fxprof.measure.passes.memory`'s accounting).
So each warm-up step gives:

- the step's ``peak_bytes``: the parameters and buffers plus the highest the step's own
  allocations rose (forward, loss, backward, optimizer step, and the batch when the loop makes
  it inside the step), ``peak_node`` (the node running then, or :data:`OUTSIDE` when the peak is
  in the loop's own code: the loss, the backward, the optimizer; :data:`WHOLE_STEP` when no node
  was recorded one by one), and ``end_bytes``: the
  parameters and buffers plus what the step allocated and still holds when it ends
  (``meta["memory_steps"]``, one entry per warm-up step of the cycle);
- per node (the last warm-up step's), the columns of eager profiles (``mem_delta_bytes``,
  ``mem_temp_bytes``, ``mem_peak_bytes``, ``mem_live_bytes``), and ``meta["memory"]``
  (``profile.memory``) from that step.

What is not covered: memory allocated before the step (optimizer state made in an earlier
step, gradients kept from one) is counted only as far as it is the model's parameters and
buffers; the step's frees of it are not followed. Per-node columns need a graph fxprof
interprets: a compiled session (``torch.compile``d model) and a ``backward=True`` session get
the per-step figures only. A schedule without warm-up steps (``schedule(warmup=0)``) measures
no memory (the notes say so).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from ..device.bridge import UNKNOWN_BLOCK_LINE, kineto_quiet, profiler_running
from ..passes.memory import MemoryRecording
from ..timing.recorder import Recorder
from ..timing.timers import tensor_devices

__all__ = ["StepMemory", "OUTSIDE", "WHOLE_STEP", "rebind_interpreters"]

#: the peak node named when a step's peak is outside every node (the loop's own code)
OUTSIDE = "the loop's own code (loss, backward, optimizer)"
#: ... and when no node ran in a range (a compiled or ``backward=True`` session: per-step figures only)
WHOLE_STEP = "the step (its nodes not recorded one by one)"


class StepMemory:
    """The memory of a session's warm-up steps; see the module's doc."""

    def __init__(self, model: nn.Module, enabled: bool = True):
        self.model = model
        self.enabled = enabled
        self._recording: MemoryRecording | None = None
        self._step = -1
        self._recorder: Recorder | None = None
        self._steps: list[dict[str, Any]] = []
        self._records: dict[str, dict[str, int]] = {}
        self._summary: dict[str, Any] = {}
        self._notes: list[str] = []

    @property
    def recording(self) -> bool:
        return self._recording is not None

    def recorder(self, timer: Any) -> Recorder:
        """A recorder whose runs put every node in a ``fxprof::`` range (thrown-away marks)."""
        if self._recorder is None or self._recorder.timer is not timer:
            self._recorder = Recorder(timer, node_ranges=True)
        return self._recorder

    def open(self, step: int) -> None:
        """A warm-up step begins: record its allocations until :meth:`close`."""
        if not self.enabled or self._recording is not None:
            return
        if profiler_running():
            note = ("memory not measured: torch.profiler was already running around the session's warm-up steps "
                    "(profilers do not nest)")
            if note not in self._notes:
                self._notes.append(note)
            return
        held = list(self.model.parameters()) + list(self.model.buffers())
        devices = sorted((d for d in tensor_devices(held) if d.type == "cuda"), key=lambda d: d.index or 0) or [torch.device("cpu")]
        recording = MemoryRecording(devices, self.model)
        with kineto_quiet(UNKNOWN_BLOCK_LINE):
            recording.__enter__()
        self._recording, self._step = recording, step

    def close(self) -> None:
        """The warm-up step ended: its figures are kept for the next cycle's profile."""
        recording, self._recording = self._recording, None
        if recording is None:
            return
        with kineto_quiet(UNKNOWN_BLOCK_LINE):
            recording.__exit__(None, None, None)
        summary = dict(recording.summary)
        if not summary:
            return
        if not recording.records:
            summary["peak_node"] = WHOLE_STEP
        elif summary.get("peak_outside"):
            summary["peak_node"] = OUTSIDE
        summary.pop("peak_outside", None)
        self._steps.append({"step": self._step, "peak_bytes": summary["peak_bytes"], "peak_node": summary["peak_node"],
                            "end_bytes": summary["held_bytes"] + recording.kept_bytes,
                            "held_bytes": summary["held_bytes"]})
        self._records = recording.records
        self._summary = summary

    def abort(self) -> None:
        """The session ends inside a warm-up step: stop recording, keep nothing of it."""
        recording, self._recording = self._recording, None
        if recording is not None:
            with kineto_quiet(UNKNOWN_BLOCK_LINE):
                recording.__exit__(RuntimeError, RuntimeError("aborted"), None)

    def take(self) -> tuple[dict[str, dict[str, int]], dict[str, Any]]:
        """For a cycle's profile: the per-node records and what goes into its meta (``memory``,
        ``memory_steps``, notes); the steps taken are forgotten."""
        meta: dict[str, Any] = {}
        notes = list(self._notes)
        if self._steps:
            how = ("its forward through the interpreter, the loop's code around it" if self._records
                   else "the whole step; no per-node figures")
            meta["memory"] = {**self._summary, "covers": f"warm-up step {self._steps[-1]['step']} of the session ({how})"}
            meta["memory_steps"] = list(self._steps)
            steps = ", ".join(str(s["step"]) for s in self._steps)
            notes.append(f"memory from the cycle's warm-up step(s) {steps} (untimed, the whole step recorded): "
                         f"meta['memory_steps'] has each step's peak and end bytes; per-node columns from "
                         f"step {self._steps[-1]['step']}" + ("" if self._records else " (none: this session's graph is not "
                                                                                         "interpreted node by node)"))
        elif self.enabled and not notes:
            notes.append("memory not measured: the cycle had no warm-up step (memory is recorded in warm-up steps, "
                         "untimed; schedule(warmup=1) or more gives it)")
        if notes:
            meta["notes"] = notes
        records = self._records
        self._steps, self._records, self._summary, self._notes = [], {}, {}, []
        return records, meta


def rebind_interpreters(captured: Any, recorder: Recorder) -> None:
    """After a warm-up call through :meth:`StepMemory.recorder`: the capture's interpreters
    (a graph capture's one, a dynamo capture's one per graph) made again for the session's own
    ``recorder``, their run plans compiled, as a warm-up through that recorder would have left
    them, so the next timed run pays for neither (its total would hold them)."""
    from ..capture.interpreter import ProfilingInterpreter, compile_plan

    def again(old: Any) -> Any:
        if not isinstance(old, ProfilingInterpreter) or old.recorder is recorder:
            return old
        new = ProfilingInterpreter(old.module, recorder=recorder, prefix=old.prefix)  # type: ignore[arg-type]
        if new.lean:
            new._compiled, new._slots = compile_plan(new)
        return new

    if hasattr(captured, "_interpreter"):
        captured._interpreter = again(captured._interpreter)
    interpreters = getattr(getattr(captured, "session", None), "interpreters", None)
    if isinstance(interpreters, dict):
        for key, old in list(interpreters.items()):
            interpreters[key] = again(old)
