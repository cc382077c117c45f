"""Shared helpers of the benchmark scripts: interleaved timing, models, tables, JSON."""

from __future__ import annotations

import json
import platform
import statistics
import time
from typing import Any, Callable

import numpy as np
import pandas as pd
import torch
import torchvision

MODELS = ("resnet18", "mobilenet_v3_large", "vit_b_16")


def build(name: str, size: int, device: str = "cpu") -> tuple[torch.nn.Module, torch.Tensor]:
    """A torchvision model (weights=None, eval) and a 1x3xSxS input on ``device``."""
    torch.manual_seed(0)
    kwargs = {"image_size": size} if name.startswith("vit") else {}
    model = torchvision.models.get_model(name, weights=None, **kwargs).eval().to(device)
    return model, torch.randn(1, 3, size, size, device=device)


def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def interleaved(variants: dict[str, Callable[[], Any]], repeats: int, calls: int, device: str = "cpu",
                after: Callable[[], None] | None = None) -> dict[str, list[float]]:
    """Per variant, ``repeats`` medians of ``calls`` timed calls (ms); every repeat runs each
    variant in turn, so slow drifts of the machine hit all variants alike."""
    out: dict[str, list[float]] = {k: [] for k in variants}
    for fn in variants.values():  # warm-up
        for _ in range(2):
            fn()
        sync(device)
    for _ in range(repeats):
        for name, fn in variants.items():
            times = []
            for _ in range(calls):
                sync(device)
                t0 = time.perf_counter_ns()
                fn()
                sync(device)
                times.append((time.perf_counter_ns() - t0) / 1e6)
            out[name].append(statistics.median(times))
            if after is not None:
                after()
    return out


def spearman(a: pd.Series, b: pd.Series) -> float:
    """Rank correlation without scipy: Pearson correlation of the ranks."""
    return float(a.rank().corr(b.rank()))


def env(device: str = "cpu") -> dict[str, Any]:
    info = {
        "torch": torch.__version__,
        "python": platform.python_version(),
        "machine": platform.machine(),
        "threads": torch.get_num_threads(),
        "device": device,
    }
    if device.startswith("cuda") and torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name()
    return info


def print_table(title: str, rows: list[dict[str, Any]]) -> None:
    print(f"\n## {title}\n")
    if not rows:
        print("(no rows)")
        return
    headers = list(rows[0])
    print("| " + " | ".join(headers) + " |")
    print("| " + " | ".join("---" for _ in headers) + " |")
    for row in rows:
        print("| " + " | ".join(_fmt(row[h]) for h in headers) + " |")


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        if np.isnan(value):
            return "n/a"
        return f"{value:.4g}" if abs(value) < 1000 else f"{value:.1f}"
    return str(value)


def write_json(path: str | None, payload: dict[str, Any]) -> None:
    if path:
        with open(path, "w") as handle:
            json.dump(payload, handle, indent=2, default=str)
        print(f"\nwrote {path}")
