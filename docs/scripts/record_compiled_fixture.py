"""Record the profiler events and inductor kernels of a small compiled model, for the tests of
fxprof.measure.compiled's modules that run without compiling (tests/golden/compiled_cpu.json).

    PYTHONPATH=. python docs/scripts/record_compiled_fixture.py tests/golden/compiled_cpu.json

The model is tests/measure/test_compiled.py's ``Small`` (a conv block, a pooled linear, an activation),
on the CPU, 1 thread, 3 profiled runs. Only the events inside the runs' ``fxprof::run``
ranges are kept.
"""

from __future__ import annotations

import dataclasses
import json
import sys

import torch
from torch import nn

sys.path[:0] = ["tests", "tests/measure"]
from test_compiled import Small  # noqa: E402

from fxprof.measure.device.bridge import events_from_kineto, kineto_quiet  # noqa: E402
from fxprof.measure.compiled.compiling import CompiledSession, catch_trace, inductor_settings  # noqa: E402
from fxprof.measure.compiled.mode import _kernels  # noqa: E402
from fxprof.measure.compiled.spans import RUN_RANGE  # noqa: E402


def main(path: str) -> None:
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = Small().eval()
    x = torch.randn(2, 3, 16, 16)
    user = torch.compile(model)
    from fxprof.measure.compiled.compiling import read_compiled

    root, backend, _ = read_compiled(user)
    session = CompiledSession(root, backend)
    compiled = torch.compile(root, backend=session)
    with inductor_settings(), catch_trace() as caught, torch.no_grad():
        compiled(x)
        compiled(x)
        from torch.profiler import ProfilerActivity, profile, record_function

        with kineto_quiet(), profile(activities=[ProfilerActivity.CPU]) as prof:
            for _ in range(3):
                with record_function(RUN_RANGE):
                    compiled(x)
    events = events_from_kineto(prof.profiler.kineto_results.events())
    runs = [(e.start_ns, e.end_ns) for e in events if e.name == RUN_RANGE]
    kept = [e for e in events if any(a <= e.start_ns and e.end_ns <= b for a, b in runs)]
    kernels = [k for g in session.order for k in _kernels(g, caught.code.get(g, ""), caught.provenance.get(g, {}))]
    doc = {
        "torch": torch.__version__,
        "events": [dataclasses.asdict(e) for e in kept],
        "kernels": [dataclasses.asdict(k) for k in kernels],
        "nodes": {g: [dataclasses.asdict(n) for n in nodes.values()] for g, nodes in session.nodes.items()},
    }
    with open(path, "w") as handle:
        json.dump(doc, handle, indent=0)
    print(f"{len(kept)} events, {len(kernels)} kernels -> {path}")


if __name__ == "__main__":
    main(sys.argv[1])
