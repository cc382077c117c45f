"""The header's ``env:`` line: what the numbers depend on (devices, CUDA and cuDNN, TF32, matmul
precision, autocast, grad mode, warm-up), from ``meta["env"]``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping

if TYPE_CHECKING:
    from ..core.profile import Profile

__all__ = ["env_line", "env_lines"]


def env_line(meta: Mapping[str, Any]) -> str:
    """One header line: what the numbers depend on (empty when ``meta`` has no ``env``)."""
    env = meta.get("env")
    if not env:
        return ""
    parts = []
    if env.get("cuda"):
        gpus = [d for d in env.get("devices", []) if d.startswith("cuda")]
        if gpus:
            parts.append("; ".join(gpus))
            parts.append(f"CUDA {env['cuda']}, cuDNN {env.get('cudnn') or '?'}")
            parts.append(f"TF32 matmul {'on' if env.get('tf32_matmul') else 'off'}, cuDNN {'on' if env.get('tf32_cudnn') else 'off'}")
            parts.append(f"cudnn.benchmark {'on' if env.get('cudnn_benchmark') else 'off'}"
                         + (", deterministic" if env.get("cudnn_deterministic") else ""))
    parts.append(f"matmul precision {env.get('float32_matmul_precision', '?')}")
    parts.append(f"autocast {env.get('autocast', '?')}")
    if env.get("grad"):  # a session's runs: the loop's own grad mode
        parts.append(f"grad {env['grad']}")
    if env.get("deterministic_algorithms"):
        parts.append("deterministic algorithms")
    warm = meta.get("warmup_runs")
    if warm is not None and meta.get("warmup_ms"):
        parts.append(f"warm-up {warm} runs / {meta['warmup_ms']:g} ms asked")
    return "env: " + " | ".join(parts)


def env_lines(profile: "Profile") -> list[str]:
    """The header's section: the ``env:`` line, or nothing when the profile has no ``env``."""
    line = env_line(profile.meta)
    return [line] if line else []
