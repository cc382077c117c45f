"""A session's schedule (torch.profiler's names and meaning: wait, warm-up, active, repeat,
skip_first), what each step does, and the input signature that keys a step's timed runs."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Callable

import torch
from torch import nn
from torch.utils import _pytree as pytree

from ..common.tree import describe_value

#: what a step does: ``none`` (eager), ``warmup`` (interpreter, untimed), ``active`` (timed),
#: ``active_last`` (timed; the cycle ends with this step)
ACTIONS = ("none", "warmup", "active", "active_last")

#: torch.profiler.ProfilerAction names -> ours
_TORCH_ACTIONS = {"NONE": "none", "WARMUP": "warmup", "RECORD": "active", "RECORD_AND_SAVE": "active_last"}


@dataclass(frozen=True)
class Schedule:
    """Which steps are eager, warm-up and timed: torch.profiler.schedule's names and meaning.

    After ``skip_first`` steps, cycles of ``wait`` eager steps, ``warmup`` untimed steps through
    the interpreter and ``active`` timed steps repeat ``repeat`` times (``0``: until the loop
    ends); then every step is eager again. Calling it with a step number (0-based) gives the
    step's action, one of :data:`ACTIONS`.
    """

    wait: int = 0
    warmup: int = 1
    active: int = 3
    repeat: int = 1
    skip_first: int = 0

    def __post_init__(self) -> None:
        for name in ("wait", "warmup", "active", "repeat", "skip_first"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"schedule {name} must be an integer >= 0, got {value!r}")
        if self.active < 1:
            raise ValueError("schedule active must be >= 1: an active step is what gets timed (torch.profiler asks the same)")

    def __call__(self, step: int) -> str:
        if step < self.skip_first:
            return "none"
        step -= self.skip_first
        cycle = self.wait + self.warmup + self.active
        if self.repeat > 0 and step // cycle >= self.repeat:
            return "none"
        at = step % cycle
        if at < self.wait:
            return "none"
        if at < self.wait + self.warmup:
            return "warmup"
        return "active" if at < cycle - 1 else "active_last"


def schedule(wait: int = 0, warmup: int = 1, active: int = 3, repeat: int = 1, skip_first: int = 0) -> Schedule:
    """A :class:`Schedule`; the same arguments as ``torch.profiler.schedule``."""
    return Schedule(wait=wait, warmup=warmup, active=active, repeat=repeat, skip_first=skip_first)


def schedule_action(plan: Callable[[int], Any], step: int) -> str:
    """The action of ``step`` from a :class:`Schedule` or a ``torch.profiler.schedule`` function."""
    action = plan(step)
    name = getattr(action, "name", action)
    name = _TORCH_ACTIONS.get(name, name)
    if name not in ACTIONS:
        raise ValueError(f"the schedule returned {action!r} for step {step}; expected one of {', '.join(ACTIONS)} "
                         f"or a torch.profiler.ProfilerAction")
    return name


# --------------------------------------------------------------------- signatures
#: input values a signature holds as they are
_SCALARS = (bool, int, float, str)


def signature_of(args: tuple, kwargs: dict, training: bool) -> tuple:
    """What decides whether a batch needs a capture or a warm-up of its own: the input
    structure, every tensor's shape, dtype and device, the other inputs' values, the mode.
    Read at every step: inputs that hold no container (a tensor, a scalar, an object that is
    no pytree node: a KV cache) are keyed without flattening."""
    key = _flat_signature(args, kwargs, training)
    if key is not None:
        return key
    leaves, spec = pytree.tree_flatten((args, kwargs))
    key: list[Any] = [str(spec), training]
    for leaf in leaves:
        if isinstance(leaf, torch.Tensor):
            key.append(("T", tuple(leaf.shape), leaf.dtype, leaf.device))
        elif leaf is None or isinstance(leaf, _SCALARS):
            key.append((type(leaf).__name__, leaf))
        else:
            key.append((type(leaf).__name__,))
    return tuple(key)


def _flat_signature(args: tuple, kwargs: dict, training: bool) -> tuple | None:
    """:func:`signature_of` of inputs that are each a leaf, None where one is a container."""
    key: list[Any] = ["flat", len(args), tuple(kwargs), training]
    nodes = pytree.SUPPORTED_NODES
    for value in (*args, *kwargs.values()):
        kind = type(value)
        if isinstance(value, torch.Tensor):
            key.append(("T", tuple(value.shape), value.dtype, value.device))
        elif value is None or isinstance(value, _SCALARS):
            key.append((kind.__name__, value))
        elif kind in nodes or isinstance(value, (list, tuple, dict)):
            return None
        else:
            key.append((kind.__name__,))
    return tuple(key)


def tree_key(model: nn.Module) -> tuple:
    """What a symbolic graph of ``model`` holds on to: its modules, parameters and buffers
    (the objects, by identity, and where they sit). A loop that replaces, adds or removes one
    changes it; updating a tensor in place (an optimizer step, running statistics) does not."""
    return (tuple((p, id(m)) for p, m in model.named_modules(remove_duplicate=False)),
            tuple((p, id(t)) for p, t in model.named_parameters(remove_duplicate=False)),
            tuple((p, id(t)) for p, t in model.named_buffers(remove_duplicate=False)))


def describe_inputs(args: tuple, kwargs: dict) -> list[str]:
    return [describe_value(v) for v in args] + [f"{k}={describe_value(v)}" for k, v in kwargs.items()]


# ------------------------------------------------------------------------ cycles
def schedule_words(plan: Any) -> str:
    described = describe_schedule(plan)
    if isinstance(described, dict):
        return "schedule " + " ".join(f"{k}={v}" for k, v in described.items())
    return f"schedule {described}"


def describe_schedule(plan: Any) -> dict[str, Any] | str:
    if isinstance(plan, Schedule):
        return asdict(plan)
    return getattr(plan, "__qualname__", type(plan).__name__)


def nothing_timed(plan: Any, name: str, calls: int, step_num: int) -> str:
    """Why a session that ends without a profile has none, and what to do."""
    first = next((k for k in range(10_000) if schedule_action(plan, k).startswith("active")), None)
    if not calls:
        seen = "the model was never called inside the session's with-block"
    else:
        seen = (f"the model ran {calls} time(s) in {step_num + 1} step(s) (s.step() was called "
                f"{step_num} time(s)), and with {schedule_words(plan)} the first timed step is "
                f"{'never' if first is None else f'step {first}'}")
    return (f"fxprof: the session of {name} ended with no timed step, so it made no profile: {seen}. Call "
            f"s.step() once per iteration of your loop. When the loop is not yours (Hugging Face generate(), a "
            f"trainer), step from inside it, once per model call: "
            f"handle = model.register_forward_hook(lambda *_: s.step()) (handle.remove() afterwards); or use a "
            f"schedule with fewer warm-up steps (fxprof.schedule(warmup=0, active=...)) for fewer calls.")
