"""docs/generate.md, "Compiled decoding": the tiny Llama of generate_models.py with its forward
compiled in place (Hugging Face's static-cache recipe), profiled by fxprof.generate on the CPU.

    PYTHONPATH=. python docs/scripts/generate_compiled.py
"""

import logging

import torch

import fxprof
from generate_models import tiny_llama

torch._logging.set_logs(dynamo=logging.ERROR)
model = tiny_llama().eval()
model.forward = torch.compile(model.forward)
ids = torch.randint(0, 2000, (1, 16), generator=torch.Generator().manual_seed(0))
plain = model.generate(ids, max_new_tokens=8, do_sample=False, cache_implementation="static")
gen = fxprof.generate(model, ids, max_new_tokens=8, peaks=(1.0, 20.0), cache_implementation="static")
print("tokens equal to the compiled model's own generate:", torch.equal(gen.tokens, plain))
print(gen.summary(rows=8))
print()
print(gen.decode.df.reset_index()[["node", "op", "scope", "graph", "mean_ms"]].sort_values("mean_ms", ascending=False).head(8).to_string(index=False))
