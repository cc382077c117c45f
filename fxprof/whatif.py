"""``fxprof.whatif``: what each usual remedy would do to this model on this machine, measured.

The baseline and every variant are timed **interleaved** run by run (:mod:`fxprof.measure.whatif.variants`),
so drift hits all alike; then each is profiled node by node (:func:`fxprof.profile`) for the
per-block comparison. The analysis is :class:`fxprof.core.whatif.WhatIf`.
"""

from __future__ import annotations

import warnings
from typing import Any, Callable, Iterable, Mapping

import numpy as np
import torch
from torch import nn

from .api import profile
from .core.compare import ALPHA, MIN_EFFECT
from .core.roofline import peaks_off
from .core.whatif import WhatIf
from .measure.common.machine import machine_load
from .measure.common.state import preserved_rng, refuse_inside_session
from .measure.timing.contention import ContentionMeter
from .measure.whatif.variants import NoChange, Prepared, parse_variant, prepare, time_interleaved

__all__ = ["whatif"]


def whatif(
    model: nn.Module,
    inputs: Any,
    variants: Iterable[str] | Mapping[str, Callable] = ("channels_last", "compile", "inference_mode"),
    *,
    iters: int = 20,
    warmup: int = 3,
    blocks: bool = True,
    block_iters: int | None = None,
    depth: int = 1,
    alpha: float = ALPHA,
    min_effect: float = MIN_EFFECT,
    peaks: Any = "auto",
    model_kwargs: dict[str, Any] | None = None,
    progress: Callable[[str], None] | None = None,
) -> WhatIf:
    """Measure what each variant does to ``model(*inputs)`` against the model as given.

    Args:
        model: an ``nn.Module``; never changed (every variant works on a deep copy).
        inputs: a tensor or a tuple of positional inputs; ``model_kwargs`` the keyword ones.
        variants: built-in names (``channels_last``, ``compile``, ``compile:MODE``, ``bf16``,
            ``fp16`` (autocast, where the device supports it), ``inference_mode``,
            ``threads=N``, ``batch=N``: the inputs' first dimension made N, compared per
            sample), a dict ``{name: fn(model, inputs) -> (model, inputs)}`` of your own, or a
            mix: a list whose items are names or ``(name, fn)`` pairs.
        iters: rounds of the interleaved timing: in each, every variant runs once (the order
            rotating), so 20 rounds give each variant 20 timed runs.
        warmup: untimed calls of each variant first (a compiled one compiles here).
        blocks: also profile the baseline and each variant node by node (``fxprof.profile``,
            ``block_iters`` runs, default ``iters``) for the per-block comparison and the
            roofline's "why" (``peaks``, as :func:`fxprof.profile`'s).
        depth: module depth of the block comparison (1: ``layer1``).
        alpha, min_effect: the verdict's rules, as :func:`fxprof.compare`'s.
        progress: called with a line saying what runs now.

    Returns:
        A :class:`~fxprof.core.whatif.WhatIf`: ``.table`` (index ``variant``: ``speedup`` with
        its 95% interval ``low``/``high``, ``verdict``, ``gained``/``lost`` blocks, ``why``,
        ``error``), ``.blocks(name)``, ``.profiles``, ``.times``; its repr is the ranked summary.
        A variant that fails (an unsupported dtype, a compile error) is a row with its reason.
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"fxprof.whatif takes an nn.Module, got {type(model).__name__}")
    refuse_inside_session(model, "fxprof.whatif")
    for label, value, minimum in (("iters", iters, 2), ("warmup", warmup, 0), ("depth", depth, 1)):
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise ValueError(f"{label} must be an integer >= {minimum}, got {value!r}")
    peaks = _check_peaks(peaks) if blocks else peaks  # a bad value fails now, not after every timing
    args = tuple(inputs) if isinstance(inputs, (tuple, list)) else (inputs,)
    kwargs = dict(model_kwargs or {})
    items = _variant_items(variants)
    parsed = [parse_variant(item) for item in items]  # a bad name fails before anything runs
    names = [v.name for v in parsed]
    duplicated = sorted({n for n in names if names.count(n) > 1} | ({"baseline"} & set(names)))
    if duplicated:
        raise ValueError(f"variant name(s) {', '.join(duplicated)} given twice (or 'baseline', the model as given)")
    with preserved_rng():  # train-mode dropout draws in every call: the caller's sequence is kept, as profile() keeps it
        return _whatif(model, args, kwargs, parsed, names, iters=iters, warmup=warmup, blocks=blocks,
                       block_iters=block_iters, depth=depth, alpha=alpha, min_effect=min_effect, peaks=peaks,
                       progress=progress)


def _variant_items(variants: Any) -> list[Any]:
    """The variants as a list of names and ``(name, fn)`` pairs: a ``{name: fn}`` mapping, or a
    list of names, pairs and ``{name: fn}`` mappings (``["bf16", {"mine": fn}]``)."""
    if isinstance(variants, Mapping):
        return list(variants.items())
    if isinstance(variants, str):
        return [variants]
    items: list[Any] = []
    for item in variants:
        items.extend(item.items() if isinstance(item, Mapping) else [item])
    return items


def _check_peaks(peaks: Any) -> Any:
    """``peaks`` as :func:`fxprof.profile` takes it, checked before any timing; ``"off"`` (the
    CLI's spelling) is ``None``."""
    if peaks_off(peaks):
        return None
    if peaks is None or peaks is False or (isinstance(peaks, str) and peaks in ("auto", "quick")):
        return peaks
    from .measure.passes.peaks import resolve_peaks

    try:
        return resolve_peaks(peaks)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"fxprof.whatif: bad peaks={peaks!r}: {exc}") from exc


def _whatif(model: nn.Module, args: tuple, kwargs: dict, parsed: list, names: list[str], *, iters: int, warmup: int,
            blocks: bool, block_iters: int | None, depth: int, alpha: float, min_effect: float, peaks: Any,
            progress: Callable[[str], None] | None) -> WhatIf:
    say = progress or (lambda line: None)
    errors: dict[str, str] = {}

    def failed(name: str, exc: BaseException) -> None:
        errors[name] = _first_line(exc) if isinstance(exc, NoChange) else f"{type(exc).__name__}: {_first_line(exc)}"
        say(f"{name}: {errors[name]}, not timed" if isinstance(exc, NoChange) else f"{name} failed: {errors[name]}")

    base = prepare(None, model, args, kwargs)
    ready: list[Prepared] = [base]
    for variant in parsed:
        try:
            ready.append(prepare(variant, model, args, kwargs))
        except Exception as exc:
            failed(variant.name, exc)
    say(f"timing {len(ready)} variants interleaved: {warmup} warm-up and {iters} timed runs each")
    lost: dict[str, list[float]] = {}
    meter = ContentionMeter()
    times = time_interleaved(ready, iters, warmup, on_error=failed, lost=lost, meter=meter)
    window_lost, window_ms = meter.window_lost_ms()  # the timed calls and what lay between them
    if "baseline" not in times:
        error = RuntimeError(f"the model as given failed to run: {errors.get('baseline', 'unknown error')}")
        error.errors = dict(errors)  # type: ignore[attr-defined]  # every failure by name (fxprof ab names its sides)
        raise error
    result = WhatIf(times=times, samples={p.name: p.samples for p in ready}, order=names, errors=errors,
                    lost_ms={n: np.asarray(v, dtype=np.float64) for n, v in lost.items() if n in times},
                    alpha=alpha, min_effect=min_effect, depth=depth,
                    meta={"iters": iters, "warmup": warmup, "threads": torch.get_num_threads(), "torch": torch.__version__,
                          "device": _device(base), "interleaved": True,
                          "load": [meter.load_start, machine_load()], "cores": meter.cores,
                          **({"window_lost_ms": round(window_lost, 6), "window_ms": round(window_ms, 6)}
                             if window_lost == window_lost and window_ms == window_ms else {})})  # NaN: not measured
    if blocks:
        for p in ready:
            if p.name not in times:
                continue
            say(f"profiling {p.name} node by node")
            try:
                result.profiles[p.name] = _profile(p, block_iters or iters, peaks)
            except Exception as exc:  # the whole-run figures stand; say what is missing
                warnings.warn(f"fxprof.whatif: {p.name} could not be profiled node by node ({_first_line(exc)}); "
                              f"its row has no blocks", stacklevel=2)
    return result


def _profile(p: Prepared, iters: int, peaks: Any) -> Any:
    """``p`` profiled node by node in its own context (autocast, inference mode, threads)."""
    model = p.profile_model if p.profile_model is not None else p.model
    options: dict[str, Any] = dict(iters=iters, warmup=2, name=p.name, model_kwargs=p.kwargs)
    if p.profile_options.get("compile"):
        options["compile"] = p.profile_options["compile"]
        options.pop("model_kwargs")
        with p.context():
            return profile(model, *p.args, **options, **p.kwargs)
    with p.context():
        return profile(model, *p.args, peaks=peaks, **options)


def _device(p: Prepared) -> str:
    for t in [*p.model.parameters(), *(a for a in p.args if isinstance(a, torch.Tensor))]:
        return str(t.device)
    return "cpu"


def _first_line(exc: BaseException) -> str:
    return str(exc).split("Exception raised from")[0].strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
