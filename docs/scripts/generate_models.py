"""Tiny causal LMs built from configs (no download) for `fxprof generate` and docs/generate.md."""

import torch
from transformers import LlamaConfig, LlamaForCausalLM


def tiny_llama():
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                                         num_attention_heads=4, num_key_value_heads=2, vocab_size=2000))
    model.generation_config.eos_token_id = None  # a random model: never stop before --new-tokens
    return model
