"""Models for tests/benchmarks/gpu_run.sh's command-line runs that are not torchvision's.

``fxprof profile tests/benchmarks/gpu_models.py:bert_base --input input_ids=8x128:int64``:
Hugging Face BERT-base from its config class (random weights, nothing downloaded), SDPA
attention, eval mode: the model of FACTS.md's fifth round (math attention under dynamo).
"""

from __future__ import annotations


def bert_base():
    import transformers

    config = transformers.BertConfig(attn_implementation="sdpa")
    return transformers.BertModel(config).eval()
