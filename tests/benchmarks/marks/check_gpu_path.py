"""The GPU path's plumbing, checked on a CPU: a wrapper shaped as inductor writes it for CUDA
(Triton launches inside ``with torch.cuda._DeviceGuard(0):``, an extern mm, provenance comments),
instrumented with the event marks; events and kernels are stand-ins (a host clock, a torch op), so
this checks the rewrite, the rows per call and the reading, not CUDA timing.

    PYTHONPATH=$PWD nice -n 19 python tests/benchmarks/marks/check_gpu_path.py
"""
import json
import os
import sys
import time
import types

import torch

sys.path.insert(0, os.path.dirname(__file__))
from ktimer import KernelTimer

SOURCE = '''
import torch
from contextlib import nullcontext
class _Guard:
    def __init__(self, i): pass
    def __enter__(self): return self
    def __exit__(self, *a): return False
class _Kernel:
    def __init__(self, f): self.f = f
    def run(self, *a, stream=None): self.f(*a)
class _AC:
    def triton(self, name, src): return _Kernel(lambda out, x, n: out.copy_(x.relu()))
async_compile = _AC()
class extern_kernels:
    mm = staticmethod(lambda a, b, out: torch.mm(a, b, out=out))
def get_raw_stream(i): return 0
empty_strided_cuda = lambda size, stride, dtype: torch.empty_strided(size, stride, dtype=dtype)

triton_poi_fused_relu_0 = async_compile.triton('triton_poi_fused_relu_0', """...""")
triton_poi_fused_relu_1 = async_compile.triton('triton_poi_fused_relu_1', """...""")

class Runner:
    def __init__(self, partitions):
        self.partitions = partitions

    def call(self, args):
        arg0_1, arg1_1 = args
        args.clear()
        with _Guard(0):
            torch.cuda.set_device if False else None
            buf0 = empty_strided_cuda((8, 8), (8, 1), torch.float32)
            # Topologically Sorted Source Nodes: [mm], Original ATen: [aten.mm]
            # [Provenance debug handles] extern_kernels.mm:1
            extern_kernels.mm(arg0_1, arg1_1, out=buf0)
            buf1 = empty_strided_cuda((8, 8), (8, 1), torch.float32)
            # Topologically Sorted Source Nodes: [relu], Original ATen: [aten.relu]
            # [Provenance debug handles] triton_poi_fused_relu_0:2
            stream0 = get_raw_stream(0)
            triton_poi_fused_relu_0.run(buf1, buf0, 64, stream=stream0)
            del buf0
            buf2 = empty_strided_cuda((8, 8), (8, 1), torch.float32)
            # [Provenance debug handles] triton_poi_fused_relu_1:3
            triton_poi_fused_relu_1.run(buf2, buf1, 64, stream=stream0)
            del buf1
        return (buf2, )

runner = Runner(partitions=[])
call = runner.call
'''

PROV = {"triton_kernel_to_post_grad": {"extern_kernels.mm:1": ["mm"], "triton_poi_fused_relu_0:2": ["relu"],
                                       "triton_poi_fused_relu_1:3": ["relu_1"]},
        "postToPre": {"mm": ["matmul"], "relu": ["act"], "relu_1": ["act_1"]}}


class FakeEvent:
    def record(self, stream=None):
        self.t = time.perf_counter_ns()

    def elapsed_time(self, other):  # ms, as torch.cuda.Event
        return (other.t - self.t) / 1e6


mod = types.ModuleType("fake_wrapper")
mod.__file__ = "<fake wrapper>"
mod.key = "fake"
exec(compile(SOURCE, mod.__file__, "exec"), mod.__dict__)
graph = types.SimpleNamespace(current_callable=mod.call, source_code=SOURCE, cache_key="fake",
                              inductor_provenance_mapping_str=json.dumps(PROV))
KernelTimer._module = lambda self: mod  # the stand-in module, not PyCodeCache's
t = KernelTimer(graph, event=FakeEvent)
print("sites:", [(s.kind, s.kernel, s.handle, s.pre) for s in t.sites])
a, b = torch.randn(8, 8), torch.randn(8, 8)
want = graph.current_callable([a, b])[0]
print("install:", t.install())
for _ in range(3):  # three calls of the graph in one run (a re-entered frame)
    got = graph.current_callable([a, b])[0]
t.keep_run()
t.remove()
assert graph.current_callable == mod.call
print("equal:", torch.equal(want, got), "calls in run:", t.calls_per_run(), "pool rows:", len(t.events.free))
print("per-site ns (summed over calls):", t.durations_ns()[0].tolist())
graph.current_callable = lambda inputs: mod.call(inputs)  # a wrapper inductor put around call
t2 = KernelTimer(graph, event=FakeEvent)
print("wrapped install:", t2.install())
got2 = graph.current_callable([a, b])[0]
t2.keep_run(); t2.remove()
print("equal:", torch.equal(want, got2), "code restored:", "_fxk_t" not in mod.Runner.call.__code__.co_varnames,
      "calls:", t2.calls_per_run())
