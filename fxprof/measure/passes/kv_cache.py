"""A causal LM's KV cache layout: per decoder layer, the bytes one token adds and how many tokens
it keeps at most (a sliding-window layer stops growing at its window).

Read from the cache a plain ``generate`` leaves where it is a dynamic cache (its layers' key and
value tensors are the truth: heads, head size, dtype, and the layer's window), else from the
configuration, whose spellings differ between families: ``num_key_value_heads``,
``num_kv_heads`` (Falcon's new decoder architecture), ``multi_query`` (one KV head),
``n_head_kv``; a window from ``sliding_window`` with ``layer_types`` (``sliding_attention`` per
layer) where the config has them. :class:`KVLayout` says which rule applied.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

__all__ = ["KVLayout", "kv_layout"]


@dataclass(frozen=True)
class KVLayout:
    """Per layer, ``per_token`` (bytes one token of one sequence adds: keys and values) and
    ``keep`` (the most tokens the layer holds, None: every token); ``kv_heads``/``head_dim`` as
    found (the first layer's); ``rule``: where the figures come from, in words."""

    per_token: tuple[float, ...]
    keep: tuple[int | None, ...]
    kv_heads: int
    head_dim: int
    rule: str

    def bytes_at(self, seq: float, batch: int = 1) -> float:
        """The cache's bytes after ``seq`` tokens of ``batch`` sequences."""
        return float(batch) * sum(p * (min(seq, k) if k is not None else seq) for p, k in zip(self.per_token, self.keep))

    @property
    def per_token_total(self) -> float:
        """The bytes one token adds while no window is full."""
        return float(sum(self.per_token))

    @property
    def windowed(self) -> int:
        return sum(k is not None for k in self.keep)


def _config_kv_heads(text: Any, heads: int) -> tuple[int, str]:
    """The KV heads a config spells, and which spelling said it."""
    if getattr(text, "new_decoder_architecture", False) and getattr(text, "num_kv_heads", None):
        return int(text.num_kv_heads), "num_kv_heads"
    if getattr(text, "multi_query", False):  # before num_key_value_heads: GPTBigCode keeps one KV head whatever it says
        return 1, "multi_query: one KV head"
    for key in ("num_key_value_heads", "n_head_kv"):
        value = getattr(text, key, None)
        if isinstance(value, int) and value > 0:
            return value, key
    value = getattr(text, "num_kv_heads", None)
    if isinstance(value, int) and value > 0 and not hasattr(text, "new_decoder_architecture"):
        return value, "num_kv_heads"
    return heads, "as many KV heads as attention heads"


def _config_windows(text: Any, layers: int) -> list[int | None]:
    window = getattr(text, "sliding_window", None)
    if not isinstance(window, int) or window <= 0:
        return [None] * layers
    types = getattr(text, "layer_types", None)
    if isinstance(types, (list, tuple)) and len(types) == layers:
        return [window - 1 if "sliding" in str(t) else None for t in types]
    if getattr(text, "use_sliding_window", True) is False:
        return [None] * layers
    return [window - 1] * layers


def _from_cache(cache: Any, layers: int) -> KVLayout | None:
    found = getattr(cache, "layers", None)
    if not found or len(found) != layers:
        return None
    per_token, keep, first = [], [], None
    for layer in found:
        keys, values = getattr(layer, "keys", None), getattr(layer, "values", None)
        if not (isinstance(keys, torch.Tensor) and isinstance(values, torch.Tensor)) or keys.dim() != 4:
            return None
        if "Static" in type(layer).__name__:
            return None  # preallocated to its maximum length: its shape is not what a token adds
        first = first or (int(keys.shape[1]), int(keys.shape[3]))
        per_token.append(float(keys.shape[1] * keys.shape[3] * keys.element_size()
                               + values.shape[1] * values.shape[3] * values.element_size()))
        window = getattr(layer, "sliding_window", None)
        keep.append(int(window) - 1 if isinstance(window, int) and window > 0 else None)
    assert first is not None
    windowed = sum(k is not None for k in keep)
    rule = (f"from the cache a plain generate left ({first[0]} KV head(s) x {first[1]} a layer"
            + (f"; {windowed} of {layers} layers slide, keeping {min(k for k in keep if k is not None)} token(s)"
               if windowed else "") + ")")
    return KVLayout(tuple(per_token), tuple(keep), first[0], first[1], rule)


def kv_layout(model: torch.nn.Module, cache: Any = None) -> KVLayout:
    """The KV layout of ``model`` (a Hugging Face style causal LM): from ``cache`` (what a plain
    ``generate(..., return_dict_in_generate=True)`` left) where it is a dynamic cache, else from
    the config."""
    config = model.config
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    layers = int(text.num_hidden_layers)
    found = _from_cache(cache, layers) if cache is not None else None
    if found is not None:
        return found
    heads = int(text.num_attention_heads)
    kv_heads, spelled = _config_kv_heads(text, heads)
    head_dim = int(getattr(text, "head_dim", None) or text.hidden_size // heads)
    item = next(model.parameters()).element_size()
    keep = _config_windows(text, layers)
    windowed = sum(k is not None for k in keep)
    rule = (f"from the config ({kv_heads} KV head(s): {spelled}"
            + (f"; {windowed} of {layers} layers slide, keeping {min(k for k in keep if k is not None)} token(s)"
               if windowed else "") + ")")
    return KVLayout(tuple([2.0 * kv_heads * head_dim * item] * layers), tuple(keep), kv_heads, head_dim, rule)
