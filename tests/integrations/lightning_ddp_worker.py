"""One Lightning fit under ``strategy="ddp"`` on the CPU (gloo, 2 processes), with or without
``FxprofCallback``; each rank writes what it saw to ``<root>/out<profiled>-rank<r>.json``. Run by
tests/integrations/test_lightning.py (slow); Lightning starts rank 1 by running this script again.

    python tests/integrations/lightning_ddp_worker.py ROOT BACKWARD(0|1) PROFILED(0|1)
"""

from __future__ import annotations

import json
import logging
import os
import sys
import warnings

import lightning.pytorch as pl
import torch
from torch import nn

import fxprof
from fxprof.integrations.lightning import FxprofCallback


class Net(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(12, 24), nn.ReLU(), nn.Linear(24, 3))
        self.losses: list[float] = []

    def forward(self, x):
        return self.net(x)

    def training_step(self, batch, batch_idx):
        loss = nn.functional.cross_entropy(self(batch[0]), batch[1])
        self.losses.append(loss.item())
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def main() -> None:
    warnings.simplefilter("ignore")
    for name in ("lightning.pytorch", "lightning.fabric", "lightning"):
        logging.getLogger(name).setLevel(logging.ERROR)
    torch.set_num_threads(1)
    root, backward, profiled = sys.argv[1], sys.argv[2] == "1", sys.argv[3] == "1"
    pl.seed_everything(0, verbose=False)
    g = torch.Generator().manual_seed(1)
    data = torch.utils.data.TensorDataset(torch.randn(128, 12, generator=g), torch.randint(0, 3, (128,), generator=g))
    callbacks = [FxprofCallback(fxprof.schedule(wait=1, warmup=1, active=2), backward=backward, html=False)] if profiled else []
    trainer = pl.Trainer(accelerator="cpu", devices=2, strategy="ddp", max_steps=5, logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False, default_root_dir=root, callbacks=callbacks,
                         accumulate_grad_batches=2)
    model = Net()
    trainer.fit(model, torch.utils.data.DataLoader(data, batch_size=8))
    cb = callbacks[0] if callbacks else None
    out = {"rank": trainer.global_rank, "losses": model.losses, "weights": [p.detach().tolist() for p in model.parameters()],
           "ranks": [p.meta.get("ranks") for p in cb.profiles] if cb else None,
           "run_steps": [p.meta["run_steps"] for p in cb.profiles] if cb else None,
           "phases": [sorted(set(p.df["phase"])) if "phase" in p.df.columns else [] for p in cb.profiles] if cb else None,
           "paths": cb.paths if cb else None}
    with open(os.path.join(root, f"out{int(profiled)}-rank{trainer.global_rank}.json"), "w") as f:
        json.dump(out, f)


if __name__ == "__main__":
    main()
