"""What the clock-mark instrumentation handles beyond one inference graph: graph breaks (a frame's
graph entered several times a run), training (AOTAutograd's forward and backward graphs), dynamic
shapes, C++ wrapper mode, max-autotune's C++ GEMM templates. Each case: compile with the capturing
backend, instrument every graph, run, check outputs (and grads) equal bit for bit to the same
program uninstrumented, print sites and calls per run.

    PYTHONPATH=$PWD nice -n 19 python tests/benchmarks/marks/cases.py [case ...]
"""

from __future__ import annotations

import os
import sys
import traceback

os.environ.setdefault("TORCHINDUCTOR_FX_GRAPH_CACHE", "0")
os.environ.setdefault("TORCHINDUCTOR_AUTOGRAD_CACHE", "0")

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(__file__))
from ktimer import KernelTimer, capturing_backend  # noqa: E402


class Block(nn.Module):
    def __init__(self, d: int = 64):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(d, d), nn.Linear(d, d)

    def forward(self, x):
        x = torch.relu(self.fc1(x))
        torch._dynamo.graph_break()
        return x + self.fc2(x).sigmoid()


class Stack(nn.Module):
    def __init__(self, n: int = 3, d: int = 64):
        super().__init__()
        self.blocks = nn.ModuleList(Block(d) for _ in range(n))

    def forward(self, x):
        for b in self.blocks:
            x = b(x)
        return x


def mlp(d: int = 64) -> nn.Module:
    return nn.Sequential(nn.Linear(d, 2 * d), nn.GELU(), nn.Linear(2 * d, d), nn.LayerNorm(d))


def run_case(name: str) -> None:
    torch.manual_seed(0)
    store: list = []
    patches: dict = {"trace.provenance_tracking_level": 1}
    train = False
    inputs = [torch.randn(4, 64)]
    dynamic = None
    if name == "graph_break":
        model = Stack().eval()
    elif name == "training":
        model, train = mlp().train(), True
    elif name == "dynamic":
        model, dynamic = mlp().eval(), True
        inputs = [torch.randn(4, 64), torch.randn(7, 64)]
    elif name == "cpp_wrapper":
        model = mlp().eval()
        patches["cpp_wrapper"] = True
    elif name == "max_autotune":
        model = mlp().eval()
        patches.update({"max_autotune": True, "max_autotune_gemm_backends": "CPP,ATEN"})
    else:
        raise ValueError(name)
    from torch._inductor import config as ic

    grad = torch.enable_grad() if train else torch.no_grad()
    with grad:
        with ic.patch(patches):
            compiled = torch.compile(model, backend=capturing_backend(store), dynamic=dynamic)

            def step(x):
                out = compiled(x)
                if train:
                    model.zero_grad(set_to_none=True)
                    out.sum().backward()
                    return [out.detach()] + [p.grad.clone() for p in model.parameters()]
                return [out]

            for x in inputs:
                step(x)
        kinds = [("backward" if g.fx_kwargs.get("is_backward") else "forward") for g in store]
        print(f"[{name}] graphs compiled: {len(store)} {kinds}")
        timers = []
        for g in store:
            try:
                timers.append(KernelTimer(g))
            except Exception as e:  # noqa: BLE001 - a case that cannot be instrumented says why
                print(f"  cannot instrument a graph: {type(e).__name__}: {e}")
                print("  its code begins: " + " | ".join(g.source_code.splitlines()[-12:-6]))
                return
        for x in inputs:
            want = step(x)
            modes = [t.install() for t in timers]
            got = step(x)
            for t in timers:
                t.keep_run()
                t.remove()
            again = step(x)
            same = all(torch.equal(a, b) for a, b in zip(want, got)) and all(torch.equal(a, b) for a, b in zip(want, again))
            print(f"  input {tuple(x.shape)}: install={modes} bitwise_equal={same} "
                  f"calls/run={[t.calls_per_run()[-1] for t in timers]}")
        for gi, t in enumerate(timers):
            d = t.durations_ns()[-1]
            print(f"  graph {gi} ({kinds[gi]}): {len(t.sites)} sites; "
                  + "; ".join(f"{s.kernel}[{s.handle.rsplit(':', 1)[-1]}]->{list(s.pre)[:3]} {v / 1e3:.1f}us"
                              for s, v in list(zip(t.sites, d))[:5]))
            lost = [s.kernel for s in t.sites if not s.pre]
            if lost:
                print(f"    sites with no dynamo node: {lost}")


if __name__ == "__main__":
    torch.set_num_threads(1)
    for case in sys.argv[1:] or ["graph_break", "training", "dynamic", "cpp_wrapper", "max_autotune"]:
        try:
            run_case(case)
        except Exception:  # noqa: BLE001
            print(f"[{case}] FAILED")
            traceback.print_exc(limit=6)
