"""Training steps: forward, loss, backward and optimizer, every node of every graph timed.

``fxprof.profile(model, x, backward=True)`` profiles a training step instead of a forward
pass. The model and its loss are captured together by ``torch.compile`` with fxprof's
training backend, which hands every graph to AOTAutograd (``aot_autograd``): AOTAutograd
splits it into a forward graph and a backward graph of aten ops, and both run through the
:class:`~fxprof.measure.capture.interpreter.ProfilingInterpreter` with the profile's recorder and timer, so
forward and backward nodes sit on one timeline in one run. The backward graph runs inside
``loss.backward()`` (on autograd's device thread for CUDA tensors, which is why the training
session is a process-wide value, not a thread-local one).

Each node gets a ``phase``:

``forward``    the model's forward graph (and its inputs and outputs);
``loss``       the loss computed from the model's output (``loss_fn``), also in the forward graph;
``backward``   the backward graph. AOTAutograd marks each backward node with the ``seq_nr`` of
               the forward op it differentiates and that op's module stack
               (``fwd_nn_module_stack``), so a backward node is charged to the forward node's
               ``scope`` and ``module_type``, and names it in ``forward_node``;
``optimizer``  ``optimizer.zero_grad()`` and ``optimizer.step()``, one node each (they are not
               graphs: each is timed as a whole).

Nothing is left changed: parameters, ``.grad`` (the tensors that were there, or None),
optimizer state and the CPU/CUDA random number generators are put back when profiling ends
(buffers are restored by :func:`fxprof.profile` itself). Within a run, gradients start from
None, so every run does the same work and its gradients are the eager gradients.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import re
import sys
import types
import weakref
from typing import Any, Callable

import torch
from torch import fx, nn

from ...core.nodes import NodeInfo
from ...errors import TraceError
from ...vocab import CAPTURES, OPTIMIZER, OPTIMIZERS, PHASES
from ..common.tree import tensors_in
from ..distributed.ddp import bucket_limit_error
from ..timing.recorder import Recorder
from .base import PassFn
from .captures import Capture
from .dispatch import ActiveSession, GraphRunner, GraphSession
from .dynamo import Resolver, compiled_frame_paths
from .graph import ModulePaths, describe_graph, frame_root, is_torch_nn_leaf, normalize_scope

__all__ = ["PHASES", "TrainingCapture", "capture_training", "default_loss", "make_optimizer", "OPTIMIZERS"]

#: the phases of a training step, in the order they run
#: scope labels of nodes that belong to no module of the model
LOSS_SCOPE = "(loss)"
OPTIMIZER_SCOPE = "(optimizer)"
#: the optimizers ``make_optimizer`` (and the CLI's ``--optimizer``) can build


def default_loss(output: Any) -> torch.Tensor:
    """The sum of every floating-point value the model returned (tensors in nested outputs
    included): a loss whose gradient reaches every output element."""
    total = None
    for t in tensors_in(output):
        if t.is_floating_point():
            part = t.float().sum()
            total = part if total is None else total + part
    if total is None:
        raise ValueError(
            "the model returned no floating-point tensor, so the default loss (the sum of the "
            "outputs) has nothing to differentiate; pass loss_fn=... that maps the output to a scalar"
        )
    return total


def make_optimizer(name: str, model: nn.Module) -> torch.optim.Optimizer:
    """A default optimizer over ``model``'s parameters: ``"sgd"`` (lr 0.01, momentum 0.9) or
    ``"adamw"`` (lr 1e-3)."""
    params = [p for p in model.parameters() if p.requires_grad]
    if name == "sgd":
        return torch.optim.SGD(params, lr=0.01, momentum=0.9)
    if name == "adamw":
        return torch.optim.AdamW(params, lr=1e-3)
    raise ValueError(f"unknown optimizer {name!r}; choose one of {', '.join(OPTIMIZERS)}")


# ------------------------------------------------------------------ the step module
class _Loss(nn.Module):
    """Holds the loss function, so that dynamo puts the loss's ops under this module's stack
    entry and the forward graph tells them from the model's ops."""

    def __init__(self, fn: Callable[[Any], torch.Tensor]):
        super().__init__()
        self.fn = fn

    def forward(self, output: Any) -> torch.Tensor:
        return self.fn(output)


class _StepBase(nn.Module):
    def __init__(self, model: nn.Module, loss_fn: Callable[[Any], torch.Tensor]):
        super().__init__()
        self.model = model
        self.loss = _Loss(loss_fn)


def _step_forward(self: Any, *args: Any, **kwargs: Any) -> torch.Tensor:
    return self.loss(self.model(*args, **kwargs))


# One step class (with its own copy of the forward's code object) per model class: dynamo
# keeps compiled graphs per code object and stops compiling one after a few recompiles, so
# a shared forward would run eagerly once a process had profiled a handful of model classes.
# Profiles of the same model class reuse the graphs compiled before.
_STEP_CLASSES: "weakref.WeakKeyDictionary[type, type]" = weakref.WeakKeyDictionary()


def _step_class(model_type: type) -> type:
    cls = _STEP_CLASSES.get(model_type)
    if cls is None:
        code = _step_forward.__code__.replace()  # a distinct code object, equal in content
        forward = types.FunctionType(code, _step_forward.__globals__, "forward")
        cls = type(f"TrainingStep[{model_type.__name__}]", (_StepBase,), {"forward": forward, "__module__": __name__})
        _STEP_CLASSES[model_type] = cls
    return cls


# ------------------------------------------------------------------ the backend
#: the training session every runner reports to: one for the process, since AOTAutograd runs
#: backward graphs on autograd's threads (see fxprof.measure.capture.dispatch)
ACTIVE = ActiveSession(per_thread=False, busy="another training profile is running in this process; profile one at a time")


class _Pair:
    """One dynamo graph after AOTAutograd: its forward and (once compiled) backward graphs."""

    def __init__(self) -> None:
        self.forward: TrainingGraphRunner | None = None
        self.backward: TrainingGraphRunner | None = None

    def compile_forward(self, gm: fx.GraphModule, example_inputs: Any) -> Callable[[list], Any]:
        self.forward = TrainingGraphRunner(gm, self, "forward")
        return _boxed(self.forward)

    def compile_backward(self, gm: fx.GraphModule, example_inputs: Any) -> Callable[[list], Any]:
        self.backward = TrainingGraphRunner(gm, self, "backward")
        return _boxed(self.backward)


def _boxed(runner: "TrainingGraphRunner") -> Callable[[list], Any]:
    """AOTAutograd's calling convention: compiled functions take their inputs as one list."""
    from functorch.compile import make_boxed_func

    return make_boxed_func(runner)


class TrainingGraphRunner(GraphRunner):
    """What AOTAutograd calls for one forward or backward graph. Runs the graph plainly unless
    a training session is active, then through the session (timed, or an untimed pass)."""

    def __init__(self, gm: fx.GraphModule, pair: _Pair, which: str):
        super().__init__(gm, ACTIVE)
        self.pair = pair
        self.which = which


def training_backend(gm: fx.GraphModule, example_inputs: list) -> Callable[..., Any]:
    """The torch.compile backend of training profiles: AOTAutograd with fxprof's runners as
    forward and backward compilers (the default partition: the backward reads the saved
    activations, as eager autograd does, nothing is recomputed). A single object, so that
    graphs compiled for it are reused by later profiles of the same model class."""
    from torch._dynamo.backends.common import aot_autograd

    pair = _Pair()
    return aot_autograd(fw_compiler=pair.compile_forward, bw_compiler=pair.compile_backward)(gm, example_inputs)


class TrainingSession(GraphSession):
    """What the runners dispatch to while one profile runs: labels, node descriptions,
    interpreters bound to the recorder, or the untimed pass and its records."""

    def __init__(self, model_type: type):
        super().__init__()
        self.model_type = model_type
        #: the name dynamo gives the model in its module paths (the compiled forward's first parameter)
        self.root_name = "self"
        #: the model's modules by identity, which place the nodes (:class:`ModulePaths`); None: the paths' text
        self.modules: ModulePaths | None = None
        self.frames: dict[Any, tuple[dict[str, str], str]] = {}  # id(pair) -> its forward's frame (Where.frame, .enclosing)
        self.pairs: dict[int, int] = {}  # id(pair) -> index, in the order first run
        self.described: set[int] = set()  # id(runner)
        self.nodes: list[NodeInfo] = []
        self.forward_infos: dict[int, dict[str, NodeInfo]] = {}  # id(pair) -> fx name -> info

    def label(self, runner: TrainingGraphRunner) -> str:
        index = self.pairs.setdefault(id(runner.pair), len(self.pairs))
        label = f"{'fw' if runner.which == 'forward' else 'bw'}{index}"
        if id(runner) not in self.described:
            self.described.add(id(runner))
            if runner.which == "forward":
                self.read_frame(id(runner.pair))
                infos = describe_forward(runner.gm, label, self.where(id(runner.pair)))
                self.forward_infos[id(runner.pair)] = {i.name.split(":", 1)[1]: i for i in infos}
            else:
                fw = runner.pair.forward
                infos = describe_backward(runner.gm, label, fw.gm if fw is not None else None,
                                          self.forward_infos.get(id(runner.pair), {}), self.where(id(runner.pair)))
            self.nodes.extend(infos)
        return label

    def place(self, runner: GraphRunner) -> tuple[int, str]:
        return id(runner), self.label(runner)

    def read_frame(self, key: Any) -> None:
        """Note, under ``key``, the local modules of the frame whose graph is running: called inside
        a forward graph's call (its backward's nodes are placed with the forward's frame)."""
        paths = self.modules.ids if self.modules is not None else {}
        self.frames[key] = compiled_frame_paths(sys._getframe(1), paths)

    def where(self, key: Any, base: str | None = None, traced: str = "") -> Where:
        """What places the nodes of the graphs noted under ``key`` (see :class:`Where`)."""
        frame, enclosing = self.frames.get(key, ({}, ""))
        return Where(self.model_type, self.root_name, self.modules, frame, enclosing, base, traced)


# ------------------------------------------------------------------ node descriptions
def _stack_entries(stack: Any, root_name: str = "self") -> list[tuple[str, Any, str, str]]:
    """``(path, class, key, raw)`` per module-stack entry, outermost first: ``path`` as the text rule
    reads it (from the compiled frame's root when it starts there), ``raw`` as dynamo wrote it with
    a compiled bound ``forward``'s ``L['fn'].__self__`` read as the frame's ``L['self']``."""
    out = []
    for key, value in (stack or {}).items():
        path, cls = (value[0], value[1]) if isinstance(value, (tuple, list)) and len(value) > 1 else (value, None)
        raw = re.sub(r"""^L\[['"]fn['"]\]\.__self__""", "L['self']", str(path))
        if root_name != "self":  # dynamo names the root after the forward's first parameter: L['s'].a is a
            path = re.sub(rf"""^L\[['"]{re.escape(root_name)}['"]\]""", "L['self']", str(path))
        out.append((normalize_scope(path), cls, str(key), raw))
    return out


_LOCAL_NAME = re.compile(r"""^L\[['"][^'"]+['"]\](?:\[\d+\])?""")  # L['s'], L['args'][0]: a frame's local


@dataclasses.dataclass
class Where:
    """What places a graph's nodes in the model (:func:`_placement`): its modules by identity
    (``modules``; None: the paths' text alone), the model paths of the local modules of the frame
    the graph ran from (``frame``: ``{"self": "block", "___stack0": "out"}``, read at its first call),
    and, when the caller knows which module's ``forward`` this call ran for, that module's path
    (``base``) and the path of the module the graph was traced for (``traced``)."""

    model_type: type
    root_name: str = "self"
    modules: ModulePaths | None = None
    frame: dict[str, str] = dataclasses.field(default_factory=dict)
    #: the module of the model whose call ran the graph (functions with no module stack are in it)
    enclosing: str = ""
    base: str | None = None
    traced: str = ""


def _placement(stack: Any, where: Where) -> tuple[str, str, bool]:
    """``(scope, module_type, is_loss)`` of an op from its module stack, as one of the model's own paths.

    The innermost entry names a module by the compiled frame's name for it (``L['self'].fc``,
    ``L['s'].w_in`` in a block's own frame, ``L['___stack0']`` in a frame resumed after a graph
    break), which is read, in order: from the frame's local modules, found by identity when the
    graph first ran (``where.frame``); by the module's identity in the entry's key
    (:class:`ModulePaths`: the module dynamo traced; with a ``base``, moved from the traced module
    to the base); from the text (the step module's ``model.layer1`` is ``layer1``; with a ``base``,
    under it; another local is the one module of its class, else the frame's module). The result
    is a module of the model (its longest such prefix)."""
    entries = _stack_entries(stack, where.root_name)
    if any(cls is _Loss for _, cls, _, _ in entries):
        inner = entries[-1][1]
        module_type = _class_name(inner) if inner is not _Loss and inner is not None and is_torch_nn_leaf(inner) else ""
        return LOSS_SCOPE, module_type, True
    if not entries:
        return where.base if where.base is not None else where.enclosing, "", False
    text, inner, key, raw = entries[-1]
    rooted = frame_root(raw)
    if rooted and entries[0][0] == "model" and entries[0][1] in (where.model_type, _class_name(where.model_type)):
        text = text[len("model"):].lstrip(".")  # the training step module's path to the model
    modules = where.modules
    frame = Resolver(None, where.frame)
    found = modules.of(key, inner) if modules is not None else None
    if frame.knows(raw):
        scope = frame(raw)
    elif where.base is not None:
        if rooted or found is None:
            scope = ".".join(p for p in (where.base, text if rooted else "") if p)
        elif where.traced and (found == where.traced or found.startswith(where.traced + ".")):
            scope = ".".join(p for p in (where.base, found[len(where.traced):].lstrip(".")) if p)
        else:
            scope = found
    elif found is not None:
        scope = found
    elif rooted:
        scope = text
    else:  # another local of the frame, found neither there nor by identity: the one module of its class and path's end
        tail = normalize_scope(_LOCAL_NAME.sub("", raw))
        scope = (modules.of_type(inner, tail) if modules is not None else None) or where.enclosing
    if modules is not None:
        scope = modules.clamp(scope)
    module_type = _class_name(inner) if inner is not None and is_torch_nn_leaf(inner) else ""
    return scope, module_type, False


def _class_name(cls: Any) -> str:
    return cls.rpartition(".")[2] if isinstance(cls, str) else getattr(cls, "__name__", str(cls))


def describe_forward(gm: fx.GraphModule, label: str, where: Where) -> list[NodeInfo]:
    """The forward graph's nodes: phase ``forward``, or ``loss`` for the loss's ops."""
    infos = []
    for node, info in zip(gm.graph.nodes, describe_graph(gm, graph=label)):
        phase = "forward"
        if node.op in ("call_function", "call_method", "call_module"):
            scope, module_type, is_loss = _placement(node.meta.get("nn_module_stack"), where)
            phase = "loss" if is_loss else "forward"
            info = dataclasses.replace(info, scope=scope, module_type=module_type)
        else:  # inputs (parameters, the batch) and outputs belong to no module
            info = dataclasses.replace(info, scope="", module_type="")
        infos.append(dataclasses.replace(info, phase=phase))
    return infos


def describe_backward(gm: fx.GraphModule, label: str, forward_gm: fx.GraphModule | None,
                      forward_infos: dict[str, NodeInfo], where: Where) -> list[NodeInfo]:
    """The backward graph's nodes, each charged to the forward op it differentiates: the
    forward node with the same ``seq_nr`` (its first op: ``convolution`` rather than the
    ``getitem`` after it) gives ``forward_node``, ``scope`` and ``module_type``; without one,
    the node's ``fwd_nn_module_stack`` gives the scope."""
    by_seq: dict[int, str] = {}
    if forward_gm is not None:
        for node in forward_gm.graph.nodes:
            seq = node.meta.get("seq_nr")
            if seq is not None and node.op == "call_function" and seq not in by_seq and node.name in forward_infos:
                by_seq[seq] = node.name
    infos = []
    for node, info in zip(gm.graph.nodes, describe_graph(gm, graph=label)):
        info = dataclasses.replace(info, phase="backward")
        if node.op == "call_function":
            fw_name = by_seq.get(node.meta.get("seq_nr"))  # type: ignore[arg-type]
            if fw_name is not None:
                fw = forward_infos[fw_name]
                info = dataclasses.replace(info, scope=fw.scope, module_type=fw.module_type, forward_node=fw.name)
            else:
                scope, module_type, _ = _placement(node.meta.get("fwd_nn_module_stack"), where)
                info = dataclasses.replace(info, scope=scope, module_type=module_type)
        else:  # saved activations, incoming gradients and outputs belong to no module
            info = dataclasses.replace(info, scope="", module_type="")
        infos.append(info)
    return infos


def _optimizer_nodes(optimizer: torch.optim.Optimizer) -> list[NodeInfo]:
    cls = type(optimizer).__name__
    return [
        NodeInfo(name=name, op="call_method", target=f"{cls}.{method}", module_type=cls, scope=OPTIMIZER_SCOPE,
                 range="", kind=kind, phase="optimizer", role=OPTIMIZER)
        for name, method, kind in (("optimizer.zero_grad", "zero_grad", "zero_grad"), ("optimizer.step", "step", "optimizer_step"))
    ]


# ------------------------------------------------------------------ saving the state
class SavedState:
    """Parameters (when an optimizer will change them), ``.grad``, optimizer state and RNG,
    taken before anything runs and put back by :meth:`restore`."""

    def __init__(self, model: nn.Module, optimizer: torch.optim.Optimizer | None):
        params = list(model.parameters())
        if optimizer is not None:
            seen = {id(p) for p in params}
            params += [p for g in optimizer.param_groups for p in g["params"] if id(p) not in seen]
        self.params = params = self.owned(params)
        self.grads = [p.grad for p in params]
        self.values = [p.detach().clone() for p in params] if optimizer is not None else []
        self.optimizer = optimizer
        self.optimizer_state = copy.deepcopy(optimizer.state_dict()) if optimizer is not None else None
        self.cpu_rng = torch.get_rng_state()
        self.cuda_rng = torch.cuda.get_rng_state_all() if torch.cuda.is_available() and torch.cuda.is_initialized() else None

    def owned(self, params: list[nn.Parameter]) -> list[nn.Parameter]:
        """The parameters whose values and ``.grad`` are the training's state (a subclass maps
        a wrapper's registered parameters to the ones it owns)."""
        return params

    def clear_grads(self) -> None:
        for p in self.params:
            p.grad = None

    def restore(self) -> None:
        with torch.no_grad():
            for p, value in zip(self.params, self.values):
                p.copy_(value)
        for p, grad in zip(self.params, self.grads):
            p.grad = grad
        if self.optimizer is not None:
            self.optimizer.load_state_dict(self.optimizer_state)
        torch.set_rng_state(self.cpu_rng)
        if self.cuda_rng is not None:
            torch.cuda.set_rng_state_all(self.cuda_rng)


# ------------------------------------------------------------------ the capture
class TrainingCapture(Capture):
    """A model captured for training steps (see the module docstring). One :meth:`run` is
    ``zero_grad`` (timed, with an optimizer), forward, loss, backward and ``step``."""

    kind = "aot"

    def __init__(self, model: nn.Module, loss_fn: Callable[[Any], torch.Tensor] | None = None,
                 optimizer: torch.optim.Optimizer | None = None, rows: Any = None):
        super().__init__("backward=True: forward and backward graphs from AOTAutograd (torch.compile)")
        if loss_fn is not None and not callable(loss_fn):
            raise TypeError(f"loss_fn must be callable (output -> scalar tensor), got {type(loss_fn).__name__}")
        if optimizer is not None and not isinstance(optimizer, torch.optim.Optimizer):
            raise TypeError(f"optimizer must be a torch.optim.Optimizer, got {type(optimizer).__name__}")
        if not any(p.requires_grad for p in model.parameters()):
            raise ValueError(
                f"{type(model).__name__} has no parameter that requires grad, so backward=True has "
                f"nothing to differentiate; unfreeze parameters (p.requires_grad_(True)) first"
            )
        self.model = model
        self.loss_fn = loss_fn if loss_fn is not None else default_loss
        self.optimizer = optimizer
        self.step = _step_class(type(model))(model, self.loss_fn)
        self.compiled = torch.compile(self.step, backend=training_backend)
        self.session = TrainingSession(type(model))
        self.session.modules = ModulePaths(model)
        self.saved = self.saved_state(model, optimizer)
        self._extra = _optimizer_nodes(optimizer) if optimizer is not None else []
        #: the rows a parallel layout's own work adds (its ``nodes``; ``nodes_in(kept, note, recorded)``),
        #: e.g. :class:`fxprof.measure.capture.fsdp_training.FSDPRows`; None: none
        self.layout_rows = rows

    def saved_state(self, model: nn.Module, optimizer: torch.optim.Optimizer | None) -> SavedState:
        """The state put back when profiling ends (taken before anything runs)."""
        return SavedState(model, optimizer)

    def describe(self) -> dict[str, Any]:
        """What the profile's metadata says about the step."""
        return {
            "backward": True,
            "loss": getattr(self.loss_fn, "__name__", None) or type(self.loss_fn).__name__,
            "optimizer": type(self.optimizer).__name__ if self.optimizer is not None else None,
        }

    @property
    def nodes(self) -> list[NodeInfo]:
        rows = self.layout_rows.nodes if self.layout_rows is not None else []
        return list(self.session.nodes) + self._extra + rows

    def nodes_in(self, recorded: set[str]) -> tuple[list[NodeInfo], str]:
        """The graphs that ran in the timed runs (a recompile can replace a graph), the
        optimizer's nodes, and a parallel layout's rows."""
        ran = {n.graph for n in self.session.nodes if n.name in recorded}
        kept = [n for n in self.session.nodes if n.graph in ran]
        dropped = sorted({n.graph for n in self.session.nodes} - ran)
        note = f"graphs compiled but not run in the timed runs, left out: {', '.join(dropped)}" if dropped else ""
        if self.layout_rows is not None:
            return self.layout_rows.nodes_in(kept + self._extra, note, recorded)
        return kept + self._extra, note

    @property
    def module(self) -> nn.Module:
        return self.model

    @property
    def _active(self) -> contextlib.AbstractContextManager[None]:
        return ACTIVE.active(self.session)

    def run(self, recorder: Recorder, args: tuple, kwargs: dict) -> Any:
        self.session.recorder, self.session.make_pass = recorder, None
        opt = self.optimizer
        if opt is None:
            self.saved.clear_grads()  # untimed: every run's backward starts from None
        with self._active, recorder.run():
            if opt is not None:
                _timed(recorder, "optimizer.zero_grad", opt.zero_grad)
            loss = self._compiled_step(args, kwargs)
            _check_loss(loss)
            self.backward(loss, recorder)
            if opt is not None:
                _timed(recorder, "optimizer.step", opt.step)
        if not self.session.pairs:
            raise TraceError(
                "backward=True captured no graph: torch.compile ran the training step as plain "
                "Python (dynamo gave up on the model, or hit its recompile limit; see "
                "torch._dynamo's log). Nothing could be timed per node."
            )
        return loss

    def _compiled_step(self, args: tuple, kwargs: dict) -> Any:
        """The compiled forward and loss; torch's bare assertion on a small DDP bucket cap in words
        (:func:`fxprof.measure.distributed.ddp.bucket_limit_error`)."""
        try:
            return self.compiled(*args, **kwargs)
        except AssertionError as exc:
            limit = bucket_limit_error(exc, self.model)
            if limit is None:
                raise
            raise limit from exc

    def backward(self, loss: torch.Tensor, recorder: Recorder | None) -> None:
        """The step's backward, in a timed run (``recorder``) or an untimed pass (None); a subclass
        may time work of its own around it."""
        loss.backward()

    def run_pass(self, make_pass: PassFn, args: tuple, kwargs: dict) -> dict[str, dict[str, Any]]:
        """An untimed pass over the forward and the backward graphs (no optimizer step)."""
        self.saved.clear_grads()
        with self.session.collecting(make_pass) as records, self._active:
            loss = self._compiled_step(args, kwargs)
            _check_loss(loss)
            self.backward(loss, None)
        return records

    def close(self) -> None:
        self.session.close()
        self.saved.restore()


def _timed(recorder: Recorder, name: str, call: Callable[[], Any]) -> None:
    """One optimizer call as one node: marks and host clock around it, as the interpreter does."""
    timer = recorder.timer
    m0 = timer.mark()
    h0 = timer.host_ns()
    call()
    h1 = timer.host_ns()
    m1 = timer.mark()
    recorder.append((name, m0, m1, h0, h1))


def _check_loss(loss: Any) -> None:
    if not isinstance(loss, torch.Tensor) or loss.numel() != 1 or not loss.is_floating_point():
        raise ValueError(
            f"loss_fn must return a floating-point scalar tensor, got {_what(loss)}; reduce it "
            f"(e.g. .mean() or .sum())"
        )
    if not loss.requires_grad:
        raise ValueError(
            "the loss does not require grad: no parameter of the model reaches it (frozen "
            "parameters, or a loss_fn that detaches the output)"
        )


def _what(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        return f"a {str(value.dtype).replace('torch.', '')} tensor of shape {list(value.shape)}"
    return type(value).__name__


def capture_training(model: nn.Module, capture: str, mode: str, loss_fn: Any, optimizer: Any,
                     cls: type[TrainingCapture] = TrainingCapture) -> TrainingCapture:
    """Check the options that a training profile cannot take, then capture ``model`` (with ``cls``:
    a subclass for a kind of model, e.g. FSDP2's)."""
    if capture not in CAPTURES:
        raise ValueError(f"unknown capture {capture!r}; choose one of {', '.join(CAPTURES)}")
    if capture not in ("auto", "dynamo"):
        raise ValueError(
            f"backward=True takes the forward and backward graphs from AOTAutograd through "
            f"torch.compile; capture={capture!r} cannot give a backward graph. Use capture='auto'."
        )
    if mode != "timed":
        raise ValueError("backward=True works with mode='timed' only (whole training steps)")
    return cls(model, loss_fn, optimizer)
