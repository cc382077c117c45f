"""Isolated mode: each node re-run N times on its real inputs, for a steady-state cost.

In a whole-model run a node's time includes what its neighbours leave behind (cold caches, a
GPU still busy with the previous kernel, allocator state). Isolated mode runs the model once;
at every node it first computes the node's real output (untimed), then re-runs the node
``repeats`` times back to back on the same inputs, timing each. Nodes for which a re-run is not
safe are skipped, and the reason is kept:

- nodes that do no work (placeholders, outputs, attribute reads);
- impure nodes (``record_function`` ranges, asserts, anything torch.fx calls side-effectful);
- random nodes (re-running would consume random numbers);
- nodes that modify their inputs in place (found by running the node once on clones of its
  inputs and checking the clones' version counters): repeating them would compound the change.

The global random number generators are restored afterwards.

On a GPU, repeats launched back to back onto an idle device would be paced by the host for any
node whose launch costs more than its kernel (isolated mode would measure the launch rate).
So with a device timer that can (``hold_device``: the CUDA event timer), a spin kernel
(``torch.cuda._sleep``) long enough to cover the host's issuing of all repeats is queued
first; the repeats then run back to back at device speed, and each event pair measures the
node's device time.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import fx

from ...core.recording import Recording
from ..capture.interpreter import resolve_call
from ..common.tree import PlainContainers, clone_tensors, tensors_in
from ..timing.recorder import append_marks
from ..timing.timers import Timer

__all__ = ["isolated_pass", "HOLD_FACTOR", "HOLD_MARGIN_MS"]

#: with a device timer, the spin kernel queued before a node's repeats lasts this many times
#: the host time of issuing them (estimated from the node's untimed real run), plus a margin
HOLD_FACTOR = 2.0
HOLD_MARGIN_MS = 1.0

_RANDOM_KINDS = {"dropout", "rand", "randn", "randint", "rand_like", "randn_like", "bernoulli", "normal", "multinomial", "randperm", "uniform", "alpha_dropout", "feature_alpha_dropout"}


class _IsolatedInterpreter(PlainContainers, fx.Interpreter):
    def __init__(self, gm: fx.GraphModule, timer: Timer, repeats: int, recording: Recording,
                 skips: dict[str, str], kinds: dict[str, str], prefix: str):
        super().__init__(gm)
        self.timer, self.repeats, self.recording = timer, repeats, recording
        self.skips, self.kinds, self.prefix = skips, kinds, prefix
        self.extra_traceback = False

    def _static_reason(self, n: fx.Node) -> str | None:
        if n.op in ("placeholder", "output", "get_attr"):
            return f"{n.op}: no work to repeat"
        if self._random(n):
            return "random: re-running would consume random numbers"
        try:
            impure = n.is_impure()
        except Exception:  # older torch.fx without every check
            impure = False
        if impure:
            return "impure: torch.fx marks it side-effectful"
        return None

    def _random(self, n: fx.Node) -> bool:
        kind = self.kinds.get(self.prefix + n.name, "")
        if kind not in _RANDOM_KINDS:
            return False
        if not kind.endswith("dropout"):
            return True
        # Dropout draws random numbers only in training: a module's own flag, or the
        # functional form's training argument (F.dropout(x, p, training); aten.dropout(x, p, train)).
        if n.op == "call_module":
            return bool(self.module.get_submodule(str(n.target)).training)
        flag = n.kwargs.get("training", n.kwargs.get("train", n.args[2] if len(n.args) > 2 else True))
        return bool(flag) if isinstance(flag, bool) else True

    def _mutates(self, n: fx.Node, args: tuple, kwargs: dict) -> bool:
        clones_args, clones_kwargs = clone_tensors(args), clone_tensors(kwargs)
        before = [t._version for t in tensors_in((clones_args, clones_kwargs))]
        getattr(self, n.op)(n.target, clones_args, clones_kwargs)
        after = [t._version for t in tensors_in((clones_args, clones_kwargs))]
        return before != after

    def run_node(self, n: fx.Node) -> Any:
        args, kwargs = self.fetch_args_kwargs_from_env(n)
        try:
            return self._repeat(n, args, kwargs)
        except Exception as exc:  # name the node and what it received, as timed mode does
            from ..capture.interpreter import node_error

            raise node_error(n, args, kwargs, exc)

    def _repeat(self, n: fx.Node, args: tuple, kwargs: dict) -> Any:
        name = self.prefix + n.name
        reason = self._static_reason(n)
        if reason is None and self._mutates(n, args, kwargs):
            reason = "modifies its inputs in place: repeating it would compound the change"
        fn, call_args, call_kwargs = resolve_call(self, n, args, kwargs)  # looked up once, untimed
        h = self.timer.host_ns()
        result = fn(*call_args, **call_kwargs)  # the real run, untimed
        host_ms = (self.timer.host_ns() - h) / 1e6
        if reason is not None:
            self.skips[name] = reason
            return result
        timer = self.timer
        mark, host_ns = timer.mark, timer.host_ns
        marks = []
        timer.begin_run()
        hold = getattr(timer, "hold_device", None)
        if hold is not None:
            # keep the host ahead: the device works through a spin kernel while the host queues
            # every repeat, so repeats run back to back at device speed, not at launch rate
            hold(HOLD_FACTOR * host_ms * self.repeats + HOLD_MARGIN_MS)
        for _ in range(self.repeats):
            m0, h0 = mark(), host_ns()
            fn(*call_args, **call_kwargs)
            h1, m1 = host_ns(), mark()
            marks.append((name, m0, m1, h0, h1))
        timer.end_run()
        # sample r is repeat r; start offsets count from the node's first repeat
        append_marks(self.recording, timer, marks, list(range(self.repeats)), marks[0][1], marks[0][3])
        return result


def isolated_pass(timer: Timer, repeats: int, recording: Recording, skips: dict[str, str], kinds: dict[str, str]):
    """A pass (graph, label, inputs) -> (output, {}) that appends isolated samples to
    ``recording`` and skip reasons to ``skips`` (both keyed by profile node name)."""

    def run(gm: fx.GraphModule, label: str, inputs: tuple) -> tuple[Any, dict[str, dict[str, Any]]]:
        cpu_state = torch.random.get_rng_state()
        cuda_states = torch.cuda.get_rng_state_all() if torch.cuda.is_available() and torch.cuda.is_initialized() else None
        try:
            interpreter = _IsolatedInterpreter(gm, timer, repeats, recording, skips, kinds, f"{label}:" if label else "")
            return interpreter.run(*inputs), {}
        finally:
            torch.random.set_rng_state(cpu_state)
            if cuda_states is not None:
                torch.cuda.set_rng_state_all(cuda_states)

    return run
