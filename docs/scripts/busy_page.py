"""docs/methodology.md, "Busy machines": resnet18 profiled on one core, then again beside a busy
loop pinned to that same core; both headers printed, and the machine's load.

    PYTHONPATH=$PWD python docs/scripts/busy_page.py
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import warnings

import torch
import torchvision

import fxprof


def main() -> None:
    core = sorted(os.sched_getaffinity(0))[-1]
    os.sched_setaffinity(0, {core})
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = torchvision.models.resnet18(weights=None).eval()
    x = torch.randn(1, 3, 64, 64)
    warnings.simplefilter("ignore")
    print(f"# {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, load {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores; "
          f"this process pinned to core {core}, 1 thread\n")
    print("## alone on its core\n")
    prof = fxprof.profile(model, x, warmup=5, iters=20, name="resnet18")
    print(prof.summary(top=3, width=100))
    loop = subprocess.Popen([sys.executable, "-c", f"import os\nos.sched_setaffinity(0, {{{core}}})\nwhile True: pass"])
    try:
        time.sleep(0.5)
        print(f"\n## beside a busy loop pinned to core {core}\n")
        busy = fxprof.profile(model, x, warmup=5, iters=20, name="resnet18")
    finally:
        loop.kill()
    print(busy.summary(top=3, width=100))
    print("\n## the runs beside the busy loop (profile.runs)\n")
    print(busy.runs[["run", "total_ms", "lost_ms", "busy", "outlier"]].to_string(index=False))
    print(f"\nload at the end {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
