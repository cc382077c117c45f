"""The prototype's models: small MLP (batch 1, 32), resnet18 (weights=None, 1x3x32x32), and one
decode step of a tiny Llama with a static cache (hidden 128, 2 layers, as tests/benchmarks)."""
from __future__ import annotations

import torch
from torch import nn


class DecodeStep(nn.Module):
    """One greedy decode step of a tiny Llama at a fixed position of a StaticCache."""

    def __init__(self, hidden: int = 128, layers: int = 2, max_len: int = 64):
        super().__init__()
        from transformers import LlamaConfig, LlamaForCausalLM, StaticCache

        torch.manual_seed(0)
        heads = max(2, hidden // 32)
        cfg = LlamaConfig(hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=layers,
                          num_attention_heads=heads, num_key_value_heads=max(1, heads // 2), vocab_size=2000)
        self.llm = LlamaForCausalLM(cfg).eval()
        self.cache = StaticCache(config=cfg, max_cache_len=max_len)
        self.pos0 = 7

    def forward(self, ids: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        if self.cache.is_initialized:  # every step at the same position: the cache's counters rewound
            for layer in self.cache.layers:
                layer.cumulative_length.fill_(int(self.pos0))
        return self.llm(input_ids=ids, cache_position=pos, past_key_values=self.cache, use_cache=True).logits


def make(which: str):
    torch.manual_seed(0)
    if which.startswith("mlp"):
        batch = int(which[3:] or 1)
        m = nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 512), nn.GELU(), nn.Linear(512, 256),
                          nn.LayerNorm(256)).eval()
        return m, torch.randn(batch, 256)
    if which == "resnet18":
        import torchvision

        return torchvision.models.resnet18(weights=None).eval(), torch.randn(1, 3, 32, 32)
    if which == "llama":
        step = DecodeStep().eval()
        args = (torch.tensor([[5]]), torch.tensor([7]))
        with torch.no_grad():
            step(*args)  # the static cache makes its tensors on the first call: eagerly, before any compile
        return step, args
    raise ValueError(which)
