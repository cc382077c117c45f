"""What-if variants of a model, and their whole runs timed interleaved.

A variant is a remedy applied to a copy of the model and its inputs: ``channels_last``,
``compile`` (``compile:MODE``), ``bf16``/``fp16`` (autocast), ``inference_mode``,
``threads=N``, ``batch=N``, or the user's ``fn(model, inputs) -> (model, inputs)``
(:func:`parse_variant`). :func:`prepare` builds it (never touching the user's model: every
variant works on a ``copy.deepcopy``); :func:`time_interleaved` times the baseline and every
variant **run by run in turn** (the order rotating each round), so that a machine that drifts
(thermals, other processes) slows every variant alike. The times are whole calls of the real
model (the compiled program itself for ``compile``), with a device synchronization around
each on CUDA: the interpreter's per-node overhead is not in them.

The analysis of the times (speed-up, interval, verdict) is in :mod:`fxprof.core.whatif`.
"""

from __future__ import annotations

import contextlib
import copy
import re
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

import numpy as np
import torch
from torch import nn

from ...core.whatif import NO_CHANGE
from ...vocab import COMPILE_MODES
from ..common.tree import clone_tensors

__all__ = ["Variant", "Prepared", "NoChange", "parse_variant", "prepare", "time_interleaved", "BUILTIN_VARIANTS"]

#: the built-in variants' names (``threads=N`` and ``batch=N`` take a number, ``compile`` a mode)
BUILTIN_VARIANTS = ("channels_last", "compile", "bf16", "fp16", "inference_mode", "threads=N", "batch=N")

UserFn = Callable[[nn.Module, tuple], "tuple[nn.Module, tuple]"]


class NoChange(ValueError):
    """A variant that would run exactly what the baseline runs: it is not timed (its "speed-up"
    would be noise), and its row says why. Its message starts with
    :data:`fxprof.core.whatif.NO_CHANGE`, the word the table's ``verdict`` and the summary show.

    Known up front for ``channels_last`` (no 4-d tensor, or all already channels-last),
    ``threads=N`` (the process's count already), ``inference_mode`` (called inside
    ``torch.inference_mode()``) and ``batch=N`` (the batch already N, or nothing to batch).
    ``bf16``/``fp16`` are always timed: autocast runs its fp32-listed ops in fp32 even on a
    model already in that dtype; ``compile`` always changes the program; a user's function
    cannot be judged before it runs."""


def _top_tensors(args: tuple, kwargs: dict) -> list[torch.Tensor]:
    return [v for v in [*args, *kwargs.values()] if isinstance(v, torch.Tensor)]


def _changes_nothing(kind: str, n: Any, model: nn.Module, args: tuple, kwargs: dict) -> None:
    """Raise :class:`NoChange` (or ValueError for an empty batch) where ``kind`` would leave the
    model and its inputs as they are."""
    inputs = _top_tensors(args, kwargs)
    if kind == "channels_last":
        four = [t for t in [*inputs, *model.parameters(), *model.buffers()] if t.dim() == 4]
        if not four:
            raise NoChange(f"{NO_CHANGE}: channels_last reorders 4-d (N, C, H, W) tensors, and neither this model's "
                           "parameters nor its inputs have 4 dimensions")
        if all(t.is_contiguous(memory_format=torch.channels_last) for t in four):
            raise NoChange(f"{NO_CHANGE}: every 4-d parameter, buffer and input of this model is already in "
                           "channels_last memory format")
    elif kind == "threads":
        if n == torch.get_num_threads():
            raise NoChange(f"{NO_CHANGE}: this process already runs {n} intra-op thread(s) "
                           f"(torch.get_num_threads())")
    elif kind == "inference_mode":
        if torch.is_inference_mode_enabled():
            raise NoChange(f"{NO_CHANGE}: fxprof.whatif was called inside torch.inference_mode(), so the baseline "
                           "already runs in inference mode")
    elif kind == "batch":
        batched = [t for t in inputs if t.dim() >= 1]
        if not batched:
            raise NoChange(f"{NO_CHANGE}: batch={n} repeats the inputs along their first dimension, and no input "
                           f"tensor has one (0-d tensors and other values are passed as they are)")
        rows = int(batched[0].shape[0])
        if rows == 0:
            raise ValueError(f"batch={n}: the inputs' batch is empty (0 rows along the first dimension), so there is "
                             f"nothing to repeat; give a batch of at least one sample")
        if rows == n:
            raise NoChange(f"{NO_CHANGE}: the inputs' batch already has {n} row(s)")


@dataclass(frozen=True)
class Variant:
    """A named change: ``kind`` is the built-in's name or ``"user"``; ``value`` its argument
    (the compile mode, the thread or batch count, the user's function)."""

    name: str
    kind: str
    value: Any = None


def parse_variant(spec: "str | tuple[str, UserFn]") -> Variant:
    """``"channels_last"``, ``"compile"``, ``"compile:max-autotune"``, ``"bf16"``, ``"fp16"``,
    ``"inference_mode"``, ``"threads=4"``, ``"batch=8"``, or a ``(name, fn)`` pair. Raises
    ValueError naming what is accepted."""
    if isinstance(spec, tuple):
        name, fn = spec
        if not callable(fn):
            raise TypeError(f"variant {name!r}: expected a function fn(model, inputs) -> (model, inputs), got {type(fn).__name__}")
        return Variant(str(name), "user", fn)
    text = str(spec).strip()
    if text in ("channels_last", "bf16", "fp16", "inference_mode"):
        return Variant(text, text)
    if text == "compile" or text.startswith("compile:"):
        mode = text.partition(":")[2] or None
        if mode is not None and mode not in COMPILE_MODES:
            raise ValueError(f"bad variant {text!r}: the compile mode is one of {', '.join(COMPILE_MODES)}")
        return Variant(text, "compile", mode)
    found = re.fullmatch(r"(threads|batch)=(\d+)", text)
    if found and int(found.group(2)) >= 1:
        return Variant(text, found.group(1), int(found.group(2)))
    import difflib

    close = difflib.get_close_matches(text.split("=")[0], ["channels_last", "compile", "bf16", "fp16", "inference_mode",
                                                           "threads", "batch"], n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    raise ValueError(f"unknown variant {text!r}{hint}: the built-in ones are {', '.join(BUILTIN_VARIANTS)} "
                     f"(N >= 1); a variant of your own is a {{name: fn(model, inputs) -> (model, inputs)}} entry")


@dataclass
class Prepared:
    """A variant ready to run: its model and inputs, the context each call runs in (autocast,
    inference mode, threads), the samples a call computes (the batch), and what
    :func:`fxprof.profile` needs to profile it (``profile_options``)."""

    name: str
    model: nn.Module
    args: tuple
    kwargs: dict
    samples: int
    context: Callable[[], Any] = contextlib.nullcontext
    profile_options: dict = field(default_factory=dict)
    #: the model to hand to fxprof.profile (the eager copy for compile: profiled with compile=)
    profile_model: nn.Module | None = None

    def call(self) -> Any:
        args, kwargs = clone_tensors((self.args, self.kwargs))
        with self.context():
            return self.model(*args, **kwargs)


def _samples(args: tuple, kwargs: dict) -> int:
    """The batch: the first dimension of the first tensor input (1 without one)."""
    for value in [*args, *kwargs.values()]:
        if isinstance(value, torch.Tensor) and value.dim() >= 1:
            return int(value.shape[0])
    return 1


def _device_type(model: nn.Module, args: tuple) -> str:
    for t in [*model.parameters(), *(a for a in args if isinstance(a, torch.Tensor))]:
        return t.device.type
    return "cpu"


@contextlib.contextmanager
def _threads(n: int) -> Iterator[None]:
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _rebatch(value: Any, n: int) -> Any:
    """A tensor with ``n`` rows along dimension 0 (its rows repeated, or cut)."""
    if not isinstance(value, torch.Tensor) or value.dim() == 0:
        return value
    reps = -(-n // value.shape[0])
    return value.repeat(reps, *([1] * (value.dim() - 1)))[:n].clone()


def prepare(variant: Variant | None, model: nn.Module, args: tuple, kwargs: dict) -> Prepared:
    """The baseline (``variant=None``: a copy of the model as given) or ``variant`` applied to a
    copy of ``model`` and of the inputs. Raises what the change raises (unsupported dtype, a
    compile error shows at the first call)."""
    name = "baseline" if variant is None else variant.name
    kind = None if variant is None else variant.kind
    if variant is not None:
        _changes_nothing(variant.kind, variant.value, model, tuple(args), dict(kwargs))  # before any copy
    model = copy.deepcopy(model)  # never the user's model: no variant changes it in place
    args, kwargs = clone_tensors((tuple(args), dict(kwargs)))
    context: Callable[[], Any] = contextlib.nullcontext
    options: dict[str, Any] = {}
    profile_model = None
    if kind == "channels_last":
        model = model.to(memory_format=torch.channels_last)
        args = tuple(a.contiguous(memory_format=torch.channels_last) if isinstance(a, torch.Tensor) and a.dim() == 4 else a
                     for a in args)
    elif kind == "compile":
        profile_model = model
        options["compile"] = {"mode": variant.value} if variant.value else True
        model = torch.compile(copy.deepcopy(model), mode=variant.value)
    elif kind in ("bf16", "fp16"):
        device_type = _device_type(model, args)
        dtype = torch.bfloat16 if kind == "bf16" else torch.float16
        available = getattr(torch.amp, "is_autocast_available", lambda d: d in ("cpu", "cuda"))
        if not available(device_type):
            raise ValueError(f"autocast is not available on {device_type}")
        if device_type == "cuda" and kind == "bf16" and not torch.cuda.is_bf16_supported():
            raise ValueError("this GPU does not support bfloat16")
        torch.autocast(device_type, dtype=dtype)  # an unsupported device/dtype pair raises here

        def context() -> Any:
            return torch.autocast(device_type, dtype=dtype)
    elif kind == "inference_mode":
        context = torch.inference_mode
    elif kind == "threads":
        n = variant.value

        def context() -> Any:
            return _threads(n)
    elif kind == "batch":
        args = tuple(_rebatch(a, variant.value) for a in args)
        kwargs = {k: _rebatch(v, variant.value) for k, v in kwargs.items()}
    elif kind == "user":
        result = variant.value(model, args)
        if not (isinstance(result, tuple) and len(result) == 2 and isinstance(result[0], nn.Module)):
            raise TypeError(f"variant {name!r} must return (model, inputs), got {type(result).__name__}")
        model, new_args = result
        args = tuple(new_args) if isinstance(new_args, (tuple, list)) else (new_args,)
    return Prepared(name, model, args, kwargs, _samples(args, kwargs), context, options, profile_model)


def _sync(device_type: str) -> None:
    if device_type == "cuda":
        torch.cuda.synchronize()


def time_interleaved(prepared: list[Prepared], iters: int, warmup: int, no_grad: bool = True,
                     on_error: Callable[[str, BaseException], None] | None = None,
                     step: Callable[[], None] | None = None,
                     lost: dict[str, list[float]] | None = None, meter: Any = None) -> dict[str, np.ndarray]:
    """Warm every variant up (``warmup`` calls each; a compiled one compiles here), then
    ``iters`` rounds in which each variant's model is called once, the order rotating by one
    each round. Returns each variant's call times in ms (host clock, the device synchronized
    before and after each call on CUDA). A variant whose call raises is dropped from the
    remaining rounds and reported to ``on_error(name, exc)`` (raised when None). With ``meter``
    (a :class:`~fxprof.measure.timing.contention.ContentionMeter`, given by the caller: this
    package sits beside ``timing``, not above it) and ``lost``, ``lost`` receives per variant
    what each timed call lost to other processes, in ms, measured outside the timed span; the
    meter's window (:meth:`~fxprof.measure.timing.contention.ContentionMeter.start_window`) starts
    after the warm-up, so a compile's workers are not in it (none is started without one)."""
    device_type = _device_type(prepared[0].model, prepared[0].args) if prepared else "cpu"
    grad = torch.no_grad if no_grad else contextlib.nullcontext
    alive = list(prepared)
    times: dict[str, list[float]] = {p.name: [] for p in prepared}

    def failed(p: Prepared, exc: BaseException) -> None:
        if on_error is None:
            raise exc
        alive.remove(p)
        times.pop(p.name, None)
        on_error(p.name, exc)

    with grad():
        for p in list(alive):
            try:
                for _ in range(warmup):
                    p.call()
                _sync(device_type)
            except Exception as exc:
                failed(p, exc)
        if meter is not None and warmup > 0:  # without a warm-up a compiled variant compiles in its first timed call
            meter.start_window()
        for i in range(iters):
            order = alive[i % len(alive):] + alive[: i % len(alive)] if alive else []
            for p in order:
                def timed(p: Prepared = p) -> None:
                    _sync(device_type)
                    start = time.perf_counter_ns()
                    p.call()
                    _sync(device_type)
                    times[p.name].append((time.perf_counter_ns() - start) / 1e6)

                try:
                    if meter is not None and lost is not None:
                        meter.around(timed, into=lost.setdefault(p.name, []))
                    else:
                        timed()
                except Exception as exc:
                    if lost is not None:
                        lost.pop(p.name, None)
                    failed(p, exc)
            if step is not None:
                step()
    return {name: np.asarray(values, dtype=np.float64) for name, values in times.items()}
