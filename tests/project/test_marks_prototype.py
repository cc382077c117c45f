"""The prototype of issue 60's kernel timer (tests/benchmarks/marks/: clock marks written into a copy
of inductor's generated ``call``, no torch.profiler) stays true on the installed torch: the copy
computes bit for bit what the generated program does, every call site is joined to inductor's
provenance and to dynamo's nodes, each run keeps a row of marks per call of the graph, and removing
it leaves the generated program as it was. It is not fxprof's timer yet (FINDINGS.md there says what
is left); this keeps the design's measurements from rotting while it is built."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks" / "marks"))

pytestmark = pytest.mark.slow  # one inductor compile (about 10-20 s here)


def test_the_marks_time_every_kernel_call_and_change_nothing():
    from ktimer import KernelTimer, capturing_backend
    from torch._inductor import config as ic

    torch._dynamo.reset()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 32), nn.GELU(), nn.LayerNorm(32)).eval()
    x = torch.randn(4, 16)
    store: list = []
    with torch.no_grad():
        want = model(x)
        # no cache: a cache hit skips the inner compile whose graph the prototype instruments
        with ic.patch({"trace.provenance_tracking_level": 1, "fx_graph_cache": False}):
            compiled = torch.compile(model, backend=capturing_backend(store))
            plain = compiled(x)
        (graph,) = store
        timer = KernelTimer(graph)
        generated = timer.mod.call
        assert timer.install() == "callable" and graph.current_callable is not generated
        for _ in range(3):
            got = compiled(x)
            timer.keep_run()
        timer.remove()
    assert graph.current_callable == generated  # the generated program is back, untouched
    assert torch.equal(got, plain) and torch.allclose(got, want, atol=1e-5)
    kinds = {s.kind for s in timer.sites}
    assert len(timer.sites) >= 4 and {"extern", "generated"} <= kinds, [(s.kernel, s.kind) for s in timer.sites]
    assert all(s.handle and s.pre for s in timer.sites), [(s.kernel, s.handle, s.pre) for s in timer.sites]
    assert timer.calls_per_run() == [1, 1, 1]
    durations, calls = timer.durations_ns(), timer.call_ns()
    assert durations.shape == (3, len(timer.sites)) and (durations > 0).all()
    assert (durations.sum(axis=1) <= calls).all()  # the kernels lie inside their graph's call
