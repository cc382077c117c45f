"""The least intrusive hook: the model compiled through the user's own backend (inductor as
torch.compile builds it, behind a pass-through backend like fxprof's CompiledSession); the
generated module found from the structured trace fxprof already listens to
(``inductor_output_code``'s ``file_path``, ``inductor_provenance_tracking_node_mappings``),
instrumented by swapping its ``call``'s code object, and swapped back after.

    PYTHONPATH=$PWD nice -n 19 python tests/benchmarks/marks/trace_hook.py
"""
import logging
import os
import sys
import time

os.environ.setdefault("TORCHINDUCTOR_FX_GRAPH_CACHE", "0")
os.environ.setdefault("TORCHINDUCTOR_AUTOGRAD_CACHE", "0")
import numpy as np
import torch

sys.path.insert(0, os.path.dirname(__file__))
from ktimer import KernelTimer
from models import make


class Catcher(logging.Handler):
    """Per compile id: the generated files in order, and the provenance JSON (as fxprof's TraceCatcher)."""

    def __init__(self):
        super().__init__(logging.DEBUG)
        self.files, self.provenance = {}, {}

    def emit(self, record):
        meta = getattr(record, "metadata", None)
        if not isinstance(meta, dict):
            return
        graph = f"{meta.get('frame_id')}/{meta.get('frame_compile_id')}"
        out = meta.get("inductor_output_code")
        if isinstance(out, dict) and out.get("file_path"):
            self.files.setdefault(graph, []).append(out["file_path"])
        art = meta.get("artifact")
        if isinstance(art, dict) and art.get("name") == "inductor_provenance_tracking_node_mappings":
            self.provenance.setdefault(graph, []).append(getattr(record, "payload", "") or "{}")


def main():
    torch.set_num_threads(1)
    which = sys.argv[1] if len(sys.argv) > 1 else "mlp1"
    model, x = make(which)
    args = x if isinstance(x, tuple) else (x,)
    user_backend = torch.compile(model).dynamo_ctx.callback  # noqa: F841 - shows what fxprof reads
    from torch._dynamo.backends.registry import lookup_backend
    inductor = lookup_backend("inductor")

    def session(gm, example_inputs):  # fxprof's CompiledSession: keep the graph, call the user's backend
        return inductor(gm, example_inputs)

    catcher = Catcher()
    log = logging.getLogger("torch.__trace")
    log.addHandler(catcher)
    from torch._inductor import config as ic
    try:
        with torch.no_grad(), ic.patch({"trace.provenance_tracking_level": 1}):
            ours = torch.compile(model, backend=session)
            want = ours(*args)
    finally:
        log.removeHandler(catcher)
    print("graphs:", {g: [os.path.basename(f) for f in fs] for g, fs in catcher.files.items()})
    timers = []
    for g, files in catcher.files.items():
        provs = catcher.provenance.get(g, [])
        for i, path in enumerate(files):  # forward then backward, each its own file and provenance record
            timers.append(KernelTimer.from_file(path, provs[i] if i < len(provs) else None))
    plain, timed = [], []
    with torch.no_grad():
        for i in range(400):
            for t in timers:
                t.install("code")
            ours(*args)
            for t in timers:
                t.rows.clear()
            t0 = time.perf_counter_ns()
            got = ours(*args)
            timed.append(time.perf_counter_ns() - t0)
            for t in timers:
                t.keep_run()
                t.remove()
            ours(*args)
            t0 = time.perf_counter_ns()
            ours(*args)
            plain.append(time.perf_counter_ns() - t0)
    print(f"{which}: bitwise_equal={torch.equal(want, got)} modes=code sites={[len(t.sites) for t in timers]} "
          f"load={os.getloadavg()[0]:.2f}")
    print(f"  plain after removal {np.median(plain) / 1e3:.1f} us, instrumented {np.median(timed) / 1e3:.1f} us, "
          f"paired ratio {np.median(np.asarray(timed) / np.asarray(plain)):.3f}")
    for t in timers:
        d = np.median(t.durations_ns(), axis=0)
        print("  " + "; ".join(f"{s.kernel}->{list(s.pre)[:2]} {v / 1e3:.2f}us" for s, v in zip(t.sites, d)))
        print("  code restored:", "_fxk_t" not in t._generated_call().__code__.co_varnames)


if __name__ == "__main__":
    main()
