"""Models for tests/benchmarks/gpu_run.sh's command-line runs that are not torchvision's.

``fxprof profile tests/benchmarks/gpu_models.py:bert_base --input input_ids=8x128:int64``:
Hugging Face BERT-base from its config class (random weights, nothing downloaded), SDPA
attention, eval mode: the model of FACTS.md's fifth round (math attention under dynamo).

``fxprof generate tests/benchmarks/gpu_models.py:llama_decoder --device cuda --dtype float16``:
a Llama-shaped causal LM of about 160M parameters (8 layers, hidden 1024, grouped-query attention,
vocabulary 32000) from its config class, for prefill and decode on the GPU (issue 50).
"""

from __future__ import annotations


def bert_base():
    import transformers

    config = transformers.BertConfig(attn_implementation="sdpa")
    return transformers.BertModel(config).eval()


def llama_decoder():
    import torch
    import transformers

    torch.manual_seed(0)
    config = transformers.LlamaConfig(hidden_size=1024, intermediate_size=2816, num_hidden_layers=8,
                                      num_attention_heads=16, num_key_value_heads=8, vocab_size=32000)
    model = transformers.LlamaForCausalLM(config).eval()
    model.generation_config.eos_token_id = None  # random weights: never stop before --new-tokens
    return model
