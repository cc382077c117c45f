"""The zoo's DDP case, run by zoo.py under ``torchrun --standalone --nproc-per-node 2``:
``python zoo_ddp.py OUT.json ITERS WARMUP``. Every rank profiles DistributedDataParallel(resnet18)
(gloo, 1x3x64x64) eager; rank 0 gathers, checks (a)-(e) with zoo.py's functions on the gathered
profile and writes the row to OUT.json. Compiled mode and sessions are not run here."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import torch
import torch.distributed as dist
import torchvision

sys.path.insert(0, str(Path(__file__).resolve().parent))

import zoo  # noqa: E402
from zoo_models import ZOO  # noqa: E402

import fxprof  # noqa: E402


def main() -> None:
    out, iters, warmup = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    clock = sys.argv[4] if len(sys.argv) > 4 else "wall"
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = torch.nn.parallel.DistributedDataParallel(torchvision.models.resnet18(weights=None).eval())
    x = torch.randn(1, 3, 64, 64, generator=torch.Generator().manual_seed(0))
    run = zoo.Run(ZOO["ddp_resnet18"], model=model, args=(x,), kwargs={})
    from torch.utils.flop_counter import FlopCounterMode

    with zoo.quiet(), torch.no_grad():
        for _ in range(warmup):
            model(x)
        with FlopCounterMode(display=False) as counter:
            model(x)
        run.flops_ref = int(counter.get_total_flops())
        run.own_ms += zoo._time_own(model, (x,), {}, iters, clock)
        try:
            prof = fxprof.profile(model, x, warmup=warmup, iters=iters, timer=zoo.timer_for(clock))
            gathered = fxprof.gather(prof)
            run.eager = gathered if rank == 0 else prof
        except Exception as exc:  # noqa: BLE001
            run.eager_error = zoo._error(exc)
        run.own_ms += zoo._time_own(model, (x,), {}, iters, clock)
    if rank == 0:
        skip = ("d_compiled", "f", "g", "h", "i", "j")
        checks = zoo.run_checks(run, skip=skip)
        row = zoo.result_row(run, checks)
        if run.eager is not None:
            row["ranks"] = run.eager.ranks
            # rows of a gathered profile hold every rank's samples: coverage per rank's run
            row["coverage"] = float(run.eager.coverage)
        row["note"] = "torchrun gloo, 2 ranks, 1x3x64x64; compiled and sessions not run"
        row["clock"] = clock
        out.write_text(json.dumps(row, indent=1, default=str))
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main()
