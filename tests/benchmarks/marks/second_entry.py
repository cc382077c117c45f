"""Does the user's compiled model run slower once fxprof has compiled its own copy of the same
forward (a second dynamo cache entry)? Blocks of calls: the user's program alone, then after
fxprof's copy is compiled (user's, fxprof's, user's again), medians per block.

    PYTHONPATH=$PWD nice -n 19 python tests/benchmarks/marks/second_entry.py llama
"""
import os
import sys
import time

os.environ.setdefault("TORCHINDUCTOR_FX_GRAPH_CACHE", "0")
os.environ.setdefault("TORCHINDUCTOR_AUTOGRAD_CACHE", "0")
import numpy as np
import torch

sys.path.insert(0, os.path.dirname(__file__))
from ktimer import capturing_backend
from models import make


def block(f, args, n=300):
    for _ in range(20):
        f(*args)
    out = []
    for _ in range(n):
        t0 = time.perf_counter_ns()
        f(*args)
        out.append((time.perf_counter_ns() - t0) / 1e3)
    return float(np.median(out))


torch.set_num_threads(1)
which = sys.argv[1] if len(sys.argv) > 1 else "llama"
model, x = make(which)
args = x if isinstance(x, tuple) else (x,)
with torch.no_grad():
    user = torch.compile(model)
    user(*args)
    res = [("user alone", block(user, args)), ("user alone", block(user, args))]
    from torch._inductor import config as ic
    with ic.patch({"trace.provenance_tracking_level": 1}):
        ours = torch.compile(model, backend=capturing_backend([]))
        ours(*args)
    from torch._dynamo.eval_frame import _debug_get_cache_entry_list
    forward = type(model).forward.__code__
    entries = len(_debug_get_cache_entry_list(forward))
    for name, f in [("user, 2 entries", user), ("fxprof's copy", ours), ("user, 2 entries", user), ("fxprof's copy", ours)]:
        res.append((name, block(f, args)))
print(f"{which}: cache entries of forward after fxprof's compile: {entries}; load {os.getloadavg()[0]:.2f}")
for name, v in res:
    print(f"  {name:18s} median {v:8.1f} us")
