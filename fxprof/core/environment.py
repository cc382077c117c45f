"""What two profiles' environments disagree on (from their ``meta``; no torch).

:func:`fxprof.measure.passes.environment.environment` reads the settings that change what the same
model costs; :func:`differences` lists where two profiles' settings differ.
"""

from __future__ import annotations

from typing import Any, Mapping

from ..vocab import ENV_KEYS

__all__ = ["differences"]


def differences(a: Mapping[str, Any], b: Mapping[str, Any]) -> list[str]:
    """``"key: a-value vs b-value"`` for every environment setting two metas disagree on.

    Takes ``profile.meta`` dicts; settings one side did not record are not compared.
    """
    env_a, env_b = dict(a.get("env") or {}), dict(b.get("env") or {})
    for side, meta in ((env_a, a), (env_b, b)):  # top-level facts every profile has
        for key in ("torch", "timer", "device"):
            if key in meta:
                side.setdefault(key, meta[key])
    out = []
    for key in ("torch", "timer", "device", *ENV_KEYS):
        if key in env_a and key in env_b and env_a[key] != env_b[key]:
            out.append(f"{key}: {env_a[key]!r} vs {env_b[key]!r}")
    return out
