"""The generated call alone vs its instrumented copy (no dynamo, no AOT wrappers): where a run's
extra time under the marks comes from, and what the cheaper mark layouts save. Interleaved, medians of 2000 calls each."""
import os
import sys
import time

os.environ.setdefault("TORCHINDUCTOR_FX_GRAPH_CACHE", "0")
os.environ.setdefault("TORCHINDUCTOR_AUTOGRAD_CACHE", "0")
import numpy as np
import torch

sys.path.insert(0, os.path.dirname(__file__))
from ktimer import KernelTimer, capturing_backend
from models import make

torch.set_num_threads(1)
which = sys.argv[1] if len(sys.argv) > 1 else "mlp1"
model, x = make(which)
args = x if isinstance(x, tuple) else (x,)
store, seen = [], []
from torch._inductor import config as ic

with torch.no_grad(), ic.patch({"trace.provenance_tracking_level": 1}):
    ours = torch.compile(model, backend=capturing_backend(store))
    ours(*args)
g = store[0]
t = KernelTimer(g)
orig = g.current_callable
# the graph's inputs as the AOT wrapper hands them over: capture once
real = g.current_callable
def spy(inputs):
    seen.append(list(inputs))
    return real(inputs)
g.current_callable = spy
with torch.no_grad():
    ours(*args)
g.current_callable = orig
inputs = seen[0]
t.install(); timed = g.current_callable; t.remove()
variants = {}
for marks in ("shared", "boundaries"):
    tv = KernelTimer(g, marks=marks)
    tv.install(); variants[marks] = (tv, g.current_callable); tv.remove()
# a copy with no marks at all, compiled the same way (own globals, exec'd): isolates exec/globals effects
import ast
import types

from ktimer import find_call

tree = ast.parse(g.source_code); fn, is_method = find_call(tree); fn.decorator_list = []
code = compile(ast.fix_missing_locations(ast.Module(body=[fn], type_ignores=[])), t.mod.__file__, "exec")
ns = {}; exec(code, dict(t.mod.__dict__), ns)
copy = types.MethodType(ns["call"], orig.__self__) if is_method else ns["call"]
fns = {"orig": orig, "copy_no_marks": copy, "instrumented": timed, **{k: f for k, (_, f) in variants.items()}}
res = {k: [] for k in fns}
with torch.no_grad():
    for i in range(2000):
        for k, f in fns.items():
            a = list(inputs)
            t0 = time.perf_counter_ns(); f(a); res[k].append(time.perf_counter_ns() - t0)
        if i % 100 == 0:
            t.rows.clear()
            for tv, _ in variants.values():
                tv.rows.clear()
base = np.median(res["orig"])
print(which, "load", os.getloadavg()[0], "sites", len(t.sites), "reads per call: pairs", t.width,
      {k: tv.width for k, (tv, _) in variants.items()})
with torch.no_grad():  # the variants' times agree?
    for tv, f in [(t, timed)] + list(variants.values()):
        tv.rows.clear()
        f(list(inputs)); tv.keep_run()
print("  per-site us (one call), pairs|shared|boundaries:", [ [round(float(v) / 1e3, 1) for v in tv.durations_ns()[-1][:6]] for tv, _ in [(t, timed)] + list(variants.values())])
for k, v in res.items():
    print(f"  {k:14s} {np.median(v)/1e3:8.2f} us  ratio {np.median(v)/base:.3f}  paired {np.median(np.asarray(v)/np.asarray(res['orig'])):.3f}")
