"""What putting back a trace's effects costs (fxprof/measure/capture/effects.py): the snapshot
before a symbolic trace and the comparison and restore after it, against the trace itself, on real
models. Untimed work (a trace is never inside a timed run); printed as medians over repeats.

    PYTHONPATH=$PWD python tests/benchmarks/trace_effects_cost.py [--models resnet50,swin_t] [--repeats 5]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import warnings
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from zoo_models import ZOO  # noqa: E402

from fxprof.measure.capture.effects import undone_effects  # noqa: E402
from fxprof.measure.capture.tracer import trace  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--models", default="resnet50,swin_t,convnext_tiny,timm_swin_tiny,timm_efficientnet_b0")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    print(f"{'model':26s} {'modules':>8s} {'effects ms':>11s} {'trace ms':>9s} {'share':>6s}")
    for name in args.models.split(","):
        model = ZOO[name].build()[0]
        effects, traces = [], []
        for _ in range(args.repeats):
            start = time.perf_counter()
            with undone_effects(model):
                pass
            effects.append((time.perf_counter() - start) * 1e3)
            start = time.perf_counter()
            trace(model)  # itself inside undone_effects: its total includes one snapshot and restore
            traces.append((time.perf_counter() - start) * 1e3)
        e, t = statistics.median(effects), statistics.median(traces)
        print(f"{name:26s} {len(list(model.modules())):8d} {e:11.2f} {t:9.1f} {e / t:6.1%}")


if __name__ == "__main__":
    main()
