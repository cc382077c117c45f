"""A session's cycle: its timed runs with the step, signature and numerics of each, the captures
they went through, and the words its profile says about them (environment, backward)."""

from __future__ import annotations

from typing import Any

import torch

from ...core.nodes import NodeInfo
from ...core.recording import Recording
from ..capture.captures import Capture
from ..passes.environment import autocast


class Cycle:
    """One cycle's timed runs, with the step and signature of each."""

    def __init__(self, number: int, first_step: int):
        self.number = number
        self.first_step = first_step
        self.recording = Recording()
        self.run_steps: list[int] = []
        self.run_signatures: list[int] = []
        self.untimed_first: list[dict[str, int]] = []  # first batches of a new signature
        self.raised: list[str] = []  # the exceptions of its forwards that raised (the loop caught them), by type
        self.captures: list[Capture] = []
        self.last_inputs: list[str] = []
        self.active_steps = 0
        self.run_modes: list[tuple] = []  # the numerics each timed run had (see numerics_settings)
        self.eager_calls = 0  # eval / no-grad forwards of a backward=True session, run eagerly
        self.plain_calls = 0  # forwards dynamo ran as plain Python (no graph to time), run as the model's own
        self.run_graphs: list[tuple[int, int]] = []  # backward=True: (forward, backward) graph executions per run
        #: the memory of the warm-up steps before it: (per-node records, meta) (fxprof.measure.session.memory)
        self.memory: tuple[dict[str, dict[str, Any]], dict[str, Any]] = ({}, {})
        #: the contention meter's reading where the cycle began, and (lost ms, wall ms) over the
        #: cycle where it ended: what the process lost between its runs too (fxprof.core.contention)
        self.window: Any = None
        self.window_lost: tuple[float, float] = (float("nan"), float("nan"))
        self.window_captures = 0  # the session's captures where the cycle began: one more inside, a compile was in the window

    @property
    def runs(self) -> int:
        return self.recording.runs


def capture_words(captures: list[Capture], signatures: int, count: int, recaptures: int) -> str:
    """What a session captured: its signatures, its captures and how they are counted."""
    kinds = sorted({c.kind for c in captures})
    if "dynamo" in kinds:
        how = "dynamo: every graph it compiled so far, recompiles for new shapes included"
    elif "compiled" in kinds:
        how = "compiled: every graph torch.compile (inductor) compiled so far, recompiles included"
    elif "aot" in kinds:
        how = "aot: every forward/backward pair dynamo and AOTAutograd compiled so far, recompiles included"
    elif len(captures) > 1:
        how = (f"{', '.join(kinds)}: one graph per mode (train, eval) and call pattern (optional inputs None or "
               f"given), for every signature")
    else:
        how = f"{', '.join(kinds)}: one graph for every signature"
    if recaptures:
        how += f"; captured again {recaptures} time(s) after the loop changed the model's modules"
    return f"{signatures} input signature(s) seen, {count} capture(s) ({how})"


def plain_words(calls: int) -> str:
    """Why ``calls`` forwards of a cycle ran as the model's own Python, untimed."""
    return (f"dynamo ran the model's forward as plain Python, with no graph to time, in {calls} call(s) of this cycle "
            f"(each ran as the model's own forward, untimed). dynamo skips a forward for good where it cannot compile it: "
            f"it raised while dynamo compiled it (an error on its first call), or a graph break dynamo cannot resume from "
            f"(Python's random or numpy drawn in forward); and runs it so once it recompiled past its limit (a forward "
            f"that formats a counter it keeps, say); TORCH_LOGS=graph_breaks,recompiles says which. A session opened after "
            f"the forward's first successful call, or capture='symbolic' where the forward writes no state and draws no "
            f"random numbers, can time it")


def untimed_cycle(cycle: Cycle, last_step: int) -> str:
    """Why a cycle that ended timed no run: its forwards raised, or its batches were all new."""
    where = f"fxprof: cycle {cycle.number} (steps {cycle.first_step}-{last_step}) timed no run: "
    if cycle.plain_calls:
        return where + plain_words(cycle.plain_calls)
    if cycle.raised and len(cycle.raised) >= len(cycle.untimed_first):
        kinds = ", ".join(sorted({name.lstrip("_") for name in cycle.raised}))
        return (where + f"the model's forward raised in every active step ({len(cycle.raised)} call(s): {kinds}; the loop "
                f"caught them), so no forward ran to its end to be timed. Fix the error, or give the session steps "
                f"whose forward succeeds")
    raised = f" ({len(cycle.raised)} forward(s) raised)" if cycle.raised else ""
    return (where + f"every active step's batch had a signature not seen before (those run untimed){raised}; more "
            f"warm-up steps or fewer distinct shapes help")


class Captures(Capture):
    """The captures a cycle's runs went through, as one for :func:`fxprof.measure.eager.loop.build_profile`:
    their nodes, in order, each name once."""

    def __init__(self, captures: list[Capture]):
        super().__init__()
        self.captures = captures

    def nodes_in(self, recorded: set[str]) -> tuple[list[NodeInfo], str]:
        nodes: dict[str, NodeInfo] = {}
        notes = []
        for captured in self.captures:
            kept, note = captured.nodes_in(recorded)
            for n in kept:
                nodes.setdefault(n.name, n)
            if note:
                notes.append(note)
        return list(nodes.values()), "; ".join(notes)

    def readable_names(self, nodes: list[NodeInfo]) -> dict[str, str]:
        """The first capture that renames (dynamo: ``g0:l_x_``, ``g1:out_3``) names them all,
        unique over every graph of the cycle."""
        return next((names for names in (c.readable_names(nodes) for c in self.captures) if names), {})


def numerics_settings() -> tuple[str, str, bool]:
    """The settings of the loop at a forward that change what it computes and costs: autocast,
    float32 matmul precision, gradients on."""
    return autocast(), torch.get_float32_matmul_precision(), torch.is_grad_enabled()


def run_environment(env: dict[str, Any], cycle: Cycle) -> dict[str, Any]:
    """``env`` with the settings the cycle's runs had, read at each run (the loop's autocast or
    no_grad block is over when the cycle ends): one value, or each distinct one with its steps."""
    modes = cycle.run_modes
    if not modes:
        return env

    def spread(index: int, show: Any = str) -> str:
        values: dict[str, list[int]] = {}
        for mode, step in zip(modes, cycle.run_steps):
            values.setdefault(show(mode[index]), []).append(step)
        if len(values) == 1:
            return next(iter(values))
        return "; ".join(f"{v} (step{'s' if len(set(st)) > 1 else ''} {', '.join(map(str, sorted(set(st))))})"
                         for v, st in values.items())

    return {**env, "autocast": spread(0), "float32_matmul_precision": spread(1),
            "grad": spread(2, lambda on: "on" if on else "off")}


def backward_words(cycle: Cycle) -> str:
    """What a run of a backward=True cycle holds, from the graph executions counted in it."""
    def spread(values: list[int]) -> str:
        lo, hi = min(values), max(values)
        return str(lo) if lo == hi else f"{lo}-{hi}"

    graphs = cycle.run_graphs or [(1, 1)]
    fw, bw = spread([g[0] for g in graphs]), spread([g[1] for g in graphs])
    # a capture whose runs span more than its graphs (FSDP2: its hooks' work before the first forward
    # and after the last backward) says so
    span = next((c.run_span for c in cycle.captures if getattr(c, "run_span", "")),
                "from the first forward's start to the last backward's end")
    text = (f"backward=True: each run holds {fw} forward and {bw} backward graph execution(s): every forward of a "
            f"step before its backward (several forwards feeding one loss are one run) and every backward they owe, "
            f"timed inside the loop's own backward; {span}, the "
            f"loss and the loop's code between them in the run but in no node (coverage)")
    if cycle.eager_calls:
        text += (f"; {cycle.eager_calls} eval/no-grad forward(s) (validation) ran as the eager model, untimed: "
                 f"backward=True times training-mode forwards with gradients on")
    return text
