"""The decoder's own stack of layers in a causal LM: the path of the ``nn.ModuleList`` that
holds its ``num_hidden_layers`` blocks (``model.layers``, ``transformer.h``,
``transformer.blocks``), so that generate numbers layers by it and not by the first ``.N`` of a
path (an expert list, per-kind block lists, a sub-layer index)."""

from __future__ import annotations

from torch import nn

__all__ = ["decoder_stack"]


def decoder_stack(model: nn.Module) -> str | None:
    """The dotted path of the decoder's stack of layers, or None when none is clear.

    The stack is a ``ModuleList`` whose children are one class (or, for mixed layer kinds,
    several classes whose names end alike, ``...DecoderLayer``) and as many as the config's
    ``num_hidden_layers``; among several (per-kind lists, experts in every layer), the one
    nearest the root that holds the most parameters. Without a config count, the largest such
    list by parameters."""
    config = getattr(model, "config", None)
    text = config.get_text_config() if config is not None and hasattr(config, "get_text_config") else config
    want = getattr(text, "num_hidden_layers", None) if text is not None else None
    found: list[tuple[int, int, str]] = []
    for path, module in model.named_modules():
        if not isinstance(module, nn.ModuleList) or len(module) < 1:
            continue
        if want is not None and len(module) != int(want):
            continue
        kinds = {type(child).__name__ for child in module}
        if not all(isinstance(child, nn.Module) for child in module) or len(kinds) > 1 and not _alike(kinds):
            continue
        size = sum(p.numel() for p in module.parameters())
        found.append((size, -path.count("."), path))
    if not found:
        return None
    return max(found)[2]


def _alike(kinds: set[str]) -> bool:
    """Class names of one family of layers (``MiniMaxDecoderLayer``, ``MiniMaxLightningDecoderLayer``)."""
    ends = {k[-8:] for k in kinds}
    return len(ends) == 1 and next(iter(ends)).endswith("Layer")
