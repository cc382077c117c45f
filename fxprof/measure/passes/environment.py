"""What a measurement depended on: device, library versions, numerics flags.

:func:`environment` reads the settings that change what the same model costs (TF32, matmul
precision, cuDNN autotuning, autocast) and the devices it ran on; :func:`fxprof.profile` keeps
them in ``profile.meta["env"]`` and the summary header prints them. :func:`fxprof.core.environment.differences`
lists what two profiles disagree on, and :func:`fxprof.compare` warns about it: a TF32 run against a
full-precision one is not a like-for-like comparison.
"""

from __future__ import annotations

import warnings
from typing import Any, Iterable

import torch

__all__ = ["environment"]



def _quiet(fn: Any, default: Any = None) -> Any:
    """Read a flag; newer releases warn on some legacy flags: the value is still what counts."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            return fn()
        except Exception:
            return default


def _device_info(device: torch.device) -> str:
    if device.type == "cuda" and torch.cuda.is_available():
        index = device.index if device.index is not None else torch.cuda.current_device()
        name = _quiet(lambda: torch.cuda.get_device_name(index), "?")
        major, minor = _quiet(lambda: torch.cuda.get_device_capability(index), ("?", "?"))
        return f"cuda:{index} {name} (sm {major}.{minor})"
    return str(device)


def autocast() -> str:
    try:  # read at every step of a session: the one-call form first, with no warnings filter to set up
        if not (torch.is_autocast_enabled("cuda") or torch.is_autocast_enabled("cpu")):
            return "off"
    except (TypeError, RuntimeError):  # older releases: one function per device type (read below)
        pass
    on = []
    for kind in ("cuda", "cpu"):
        enabled = _quiet(lambda: torch.is_autocast_enabled(kind), None)
        if enabled is None:  # older releases: one function per device type
            enabled = _quiet(torch.is_autocast_enabled if kind == "cuda" else torch.is_autocast_cpu_enabled, False)
        if enabled:
            dtype = _quiet(lambda: torch.get_autocast_dtype(kind), None)
            on.append(f"{kind} {str(dtype).replace('torch.', '') if dtype is not None else ''}".strip())
    return ", ".join(on) or "off"


def environment(devices: Iterable[torch.device] = ()) -> dict[str, Any]:
    """The settings a measurement depended on. ``devices``: where the model's tensors are."""
    cuda_built = torch.version.cuda is not None
    devices = sorted(set(devices), key=_device_key)
    env: dict[str, Any] = {
        "devices": [_device_info(d) for d in devices],
        "cuda": torch.version.cuda or "",
        "cudnn": str(_quiet(torch.backends.cudnn.version, "") or "") if cuda_built else "",
        "tf32_matmul": bool(_quiet(lambda: torch.backends.cuda.matmul.allow_tf32, False)),
        "tf32_cudnn": bool(_quiet(lambda: torch.backends.cudnn.allow_tf32, False)),
        "float32_matmul_precision": _quiet(torch.get_float32_matmul_precision, ""),
        "cudnn_benchmark": bool(_quiet(lambda: torch.backends.cudnn.benchmark, False)),
        "cudnn_deterministic": bool(_quiet(lambda: torch.backends.cudnn.deterministic, False)),
        "deterministic_algorithms": bool(_quiet(torch.are_deterministic_algorithms_enabled, False)),
        "autocast": autocast(),
        "threads": torch.get_num_threads(),
    }
    return env


def _device_key(device: torch.device) -> tuple[str, int]:
    """Sort devices by type, then by index (``cuda:2`` before ``cuda:10``)."""
    return (device.type, -1 if device.index is None else device.index)


