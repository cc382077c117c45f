"""Training steps (``backward=True``) of an FSDP2 model, with FSDP's own work as rows.

The step is captured as any training step is (:mod:`fxprof.measure.capture.training`: dynamo
and AOTAutograd, every forward and backward node timed). Dynamo does not trace FSDP2's hooks
(``torch._dynamo.disable``): it breaks the graph at each of them and they run as in the model's
own training, so each FSDP module's layers are graphs of their own, run between its pre- and
post-forward hook, and the autograd hooks these register run FSDP's backward work: the
pre-backward all-gather, the post-backward reduce-scatter of the gradients, the root's final
callback. Gradients are FSDP's own (reduce-scattered onto every rank's shards).

What this module adds (:class:`FSDPTrainingCapture`):

* FSDP's work timed as rows (:class:`fxprof.measure.distributed.fsdp.TrainingSteps`):
  ``fsdp:<layer>_all_gather``, ``_wait``, ``_reshard`` in the forward and
  ``fsdp_bw:<layer>_all_gather``, ``_wait``, ``_reduce_scatter`` (and ``_reshard``) in the
  backward, each charged to its layer (``scope``), kinds ``all_gather``/``wait``/
  ``reduce_scatter`` being communication (``group_by("comm")``);
* the layers' scopes: a graph dynamo compiled from an FSDP module's own ``forward`` names its
  modules from that module (``fc1``), and identical blocks share one compiled graph; each call
  is placed by (graph, FSDP module) and its nodes put under the module's path (``blocks.0.fc1``)
  (:class:`FSDPPlacement`, the session's component).
"""

from __future__ import annotations

import contextlib
from typing import Any, Callable, Iterator

import torch
from torch import nn

from ...core.nodes import NodeInfo
from ...vocab import FSDP
from ..distributed.fsdp import TrainingSteps, compute_outside_graphs, fsdp_modules
from ..distributed.fsdp_state import owned_parameters, refuse_pending_gradients, refuse_unsharded_in_optimizer, reshard
from ..timing.recorder import Recorder
from .base import PassFn
from .graph import ModulePaths
from .training import SavedState, TrainingCapture, TrainingSession, describe_backward, describe_forward, training_backend

__all__ = ["FSDPTrainingCapture", "FSDPRows", "FSDPPlacement", "compiled_leaves", "FSDP_GRAPHS"]



#: the graph (node-name prefix) of FSDP's rows, per phase
FSDP_GRAPHS = {"forward": "fsdp", "backward": "fsdp_bw"}


class FSDPPlacement:
    """Places a training session's graph calls by the FSDP module they run for: a component of
    :class:`FSDPSession` and of the session's loop (:mod:`fxprof.measure.capture.fsdp_loop`).

    Dynamo compiles each FSDP module's ``forward`` as a frame of its own, and identical blocks
    share one compiled graph (the same code, the same guards: from the second block of a stack on,
    whose input requires grad). Each call is therefore placed by (graph, FSDP module): the forward
    by the innermost FSDP module whose forward is running (``running()``), the backward by the
    forward calls of the same graph, last first (autograd differentiates them in reverse). Each
    (graph, module) has its own label (``fw3``, ``bw3``) and its nodes are put under the module's
    path (``blocks.2.fc1``)."""

    def __init__(self, running: Callable[[], str] = lambda: ""):
        self.running = running
        self.slots: dict[tuple[int, str], int] = {}  # (id(pair), FSDP path) -> label index
        self.calls: dict[int, list[str]] = {}  # id(pair) -> FSDP paths of its forward calls not yet differentiated
        self.placed: set[tuple[int, str]] = set()  # (id(runner), path) described
        self.traced: dict[int, str] = {}  # id(pair) -> the FSDP path of its first forward call: the module dynamo traced

    def new_step(self) -> None:
        self.calls.clear()

    def _owner(self, runner: Any) -> str:
        pair = id(runner.pair)
        if runner.which == "forward":
            path = self.running()
            self.calls.setdefault(pair, []).append(path)
            return path
        pending = self.calls.get(pair)
        return pending.pop() if pending else ""

    def place(self, session: TrainingSession, runner: Any) -> tuple[Any, str]:
        """``runner``'s call placed (its nodes described into ``session`` the first time): its key and label."""
        path = self._owner(runner)
        session.pairs.setdefault(id(runner.pair), len(session.pairs))
        slot = (id(runner.pair), path)
        index = self.slots.setdefault(slot, len(self.slots))
        label = f"{'fw' if runner.which == 'forward' else 'bw'}{index}"
        if runner.which == "forward":
            self.traced.setdefault(id(runner.pair), path)
        if (id(runner), path) not in self.placed:
            self.placed.add((id(runner), path))
            if runner.which == "forward":
                session.read_frame(slot)
            where = session.where(slot, base=path, traced=self.traced.get(id(runner.pair), path))
            if runner.which == "forward":
                infos = describe_forward(runner.gm, label, where)
                session.forward_infos[slot] = {i.name.split(":", 1)[1]: i for i in infos}  # type: ignore[index]
            else:
                fw = runner.pair.forward
                infos = describe_backward(runner.gm, label, fw.gm if fw is not None else None,
                                          session.forward_infos.get(slot, {}), where)  # type: ignore[call-overload]
            session.nodes.extend(infos)
        return (id(runner), path), label


class FSDPSession(TrainingSession):
    """A training session whose graphs are told apart by the FSDP module they run for
    (:class:`FSDPPlacement`)."""

    def __init__(self, model_type: type, running: Callable[[], str] = lambda: ""):
        super().__init__(model_type)
        self.fsdp = FSDPPlacement(running)

    def new_step(self) -> None:
        self.fsdp.new_step()

    def place(self, runner: Any) -> tuple[Any, str]:
        return self.fsdp.place(self, runner)


class Clock:
    """Times one FSDP step for :class:`TrainingSteps` into the profile's recorder (while a timed
    run is on), and names its row."""

    def __init__(self, capture: "FSDPTrainingCapture"):
        self.capture = capture

    def start(self) -> Any:
        recorder = self.capture.timing
        if recorder is None:
            return None
        return recorder.timer.mark(), recorder.timer.host_ns()

    def end(self, token: Any) -> Any:
        """The step's end marks, taken the moment FSDP's method returns (naming the row comes after)."""
        recorder = self.capture.timing
        if token is None or recorder is None:
            return None
        h1 = recorder.timer.host_ns()
        return recorder.timer.mark(), h1

    def stop(self, token: Any, end: Any, name: str, kind: str, path: str, phase: str) -> None:
        recorder = self.capture.timing
        if token is None or end is None or recorder is None:
            return
        m1, h1 = end
        graph = FSDP_GRAPHS[phase]
        full = f"{graph}:{name}"
        recorder.append((full, token[0], m1, token[1], h1))
        self.capture.layout_rows.add_row(full, NodeInfo(name=full, op="call_function", target=f"fsdp.{kind}({path or 'root'})",
                                            module_type="", scope=path, range="", kind=kind, graph=graph, phase=phase, role=FSDP))


def compiled_leaves(modules: dict[str, nn.Module]) -> list[tuple[nn.Module, Any]]:
    """``(module, its forward compiled with the training backend)`` for each ``fully_shard``-ed
    module whose ``forward`` is torch.nn's own (a bare ``Linear``; see :meth:`FSDPRows.leaves_compiled`)."""
    return [(m, torch.compile(m.forward, backend=training_backend)) for m in modules.values()
            if getattr(type(m).forward, "__module__", "").startswith("torch.nn.")]


class FSDPRows:
    """What a capture of FSDP2 training steps adds to its graphs' nodes: FSDP's work as rows
    (:class:`Clock` adds them), and the note on compute that ran outside every graph. A component
    of :class:`FSDPTrainingCapture` and of the session's
    :class:`fxprof.measure.capture.fsdp_loop.FSDPLoopTrainingCapture`, given to the training
    capture they build on (its ``layout_rows``), which adds :attr:`nodes` to its own and passes
    its kept nodes through :meth:`nodes_in`."""

    def __init__(self, modules: dict[str, nn.Module]):
        self.modules = modules
        self.rows: dict[str, NodeInfo] = {}
        self.leaves = compiled_leaves(modules)

    def add_row(self, name: str, info: NodeInfo) -> None:
        self.rows.setdefault(name, info)

    @property
    def nodes(self) -> list[NodeInfo]:
        return list(self.rows.values())

    def nodes_in(self, kept: list[NodeInfo], note: str, recorded: set[str]) -> tuple[list[NodeInfo], str]:
        """The capture's ``kept`` nodes and ``note``, with the rows recorded and what the rows tell."""
        scopes = {n.scope for n in kept if n.phase == "forward" and n.op in ("call_function", "call_method", "call_module")
                  and n.graph not in FSDP_GRAPHS.values()}
        missed = compute_outside_graphs(self.modules, scopes)
        if missed:
            said = (f"the compute with the parameters of FSDP module(s) {'; '.join(missed)} ran outside every graph, so it "
                    f"is not timed (their FSDP rows are): dynamo ran that code eagerly (a graph break it could not resume "
                    f"from, such as one inside a loop, makes it skip the whole function)")
            note = f"{note}; {said}" if note else said
        return kept + [info for name, info in self.rows.items() if name in recorded], note

    @contextlib.contextmanager
    def leaves_compiled(self) -> Iterator[None]:
        """A ``fully_shard``-ed module whose ``forward`` is torch.nn's own (a bare ``Linear``) runs
        that forward as a frame of its own between FSDP's hooks, and dynamo does not compile a
        frame of torch.nn's code it was not asked to: for the step, such a module's ``forward`` is
        that same method compiled with the training backend (an instance attribute, deleted after)."""
        put = []
        try:
            for module, compiled in self.leaves:
                if "forward" not in vars(module):  # a forward of the caller's own is left alone
                    module.forward = compiled
                    put.append(module)
            yield
        finally:
            for module in put:
                del module.forward


class _FSDPSavedState(SavedState):
    """The training state of an FSDP2 model: the sharded parameters FSDP owns (their values, the
    ``.grad`` the reduce-scatters land on), whichever FSDP registered when the profile began (after
    a ``torch.no_grad()`` forward the root's are the unsharded ones); a restore reshards first, so
    that it writes into the parameters the next step reads
    (:mod:`fxprof.measure.distributed.fsdp_state`)."""

    def __init__(self, model: nn.Module, optimizer: Any):
        self.modules = fsdp_modules(model)
        refuse_unsharded_in_optimizer(self.modules, optimizer)
        refuse_pending_gradients(self.modules)
        super().__init__(model, optimizer)

    def owned(self, params: list[nn.Parameter]) -> list[nn.Parameter]:
        return owned_parameters(self.modules, params)

    def restore(self) -> None:
        reshard(self.modules)
        super().restore()


class FSDPTrainingCapture(TrainingCapture):
    """A training step of an FSDP2 model (see the module docs)."""

    def saved_state(self, model: nn.Module, optimizer: Any) -> SavedState:
        return _FSDPSavedState(model, optimizer)

    def __init__(self, model: nn.Module, loss_fn: Any = None, optimizer: Any = None):
        modules = fsdp_modules(model)
        super().__init__(model, loss_fn, optimizer, rows=FSDPRows(modules))
        self.reason = ("backward=True on an FSDP2 model: forward and backward graphs from AOTAutograd, "
                       "FSDP's hooks run as in training, its all-gathers and reduce-scatters timed as rows")
        self.modules = modules
        self.steps = TrainingSteps(self.modules, Clock(self), current_phase)
        self.session = FSDPSession(type(model), lambda: self.steps.running[-1] if self.steps.running else "")
        self.session.modules = ModulePaths(model)
        #: the recorder of the timed run going on, else None
        self.timing: Recorder | None = None

    @contextlib.contextmanager
    def _fsdp(self, recorder: Recorder | None) -> Iterator[None]:
        """FSDP's steps wrapped for one step, timed into ``recorder`` (None: untimed)."""
        self.timing = recorder
        self.steps.new_run()
        self.session.new_step()
        try:
            with self.steps, self.layout_rows.leaves_compiled():
                yield
        finally:
            self.timing = None

    def run(self, recorder: Recorder, args: tuple, kwargs: dict) -> Any:
        with self._fsdp(recorder):
            return super().run(recorder, args, kwargs)

    def run_pass(self, make_pass: PassFn, args: tuple, kwargs: dict) -> dict[str, dict[str, Any]]:
        with self._fsdp(None):
            return super().run_pass(make_pass, args, kwargs)



def current_phase() -> str:
    """``backward`` while autograd runs a backward on this thread (as FSDP itself tells it:
    the graph task id that ``torch._C`` gives, -1 outside a backward), else ``forward``."""
    return "backward" if torch._C._current_graph_task_id() != -1 else "forward"
