"""The example of docs/integrations.md's Lightning section: a small classifier fitted by Lightning's
Trainer with FxprofCallback (accumulation, validation, a CSV logger, backward=True).

Run: python docs/scripts/lightning_example.py OUTDIR   (CPU, 1 thread)
"""
import logging
import os
import sys
import warnings

import lightning.pytorch as pl
import torch
from lightning.pytorch.loggers import CSVLogger
from torch import nn

import fxprof
from fxprof.integrations.lightning import FxprofCallback

out = sys.argv[1] if len(sys.argv) > 1 else "."
torch.set_num_threads(1)  # on a shared 2-core machine, a second intra-op thread waits for a free core
warnings.simplefilter("ignore")
for name in ("lightning.pytorch", "lightning.fabric", "lightning"):
    logging.getLogger(name).setLevel(logging.ERROR)


class Classifier(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(64, 256), nn.GELU(), nn.LayerNorm(256), nn.Linear(256, 10))

    def forward(self, x):
        return self.net(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = nn.functional.cross_entropy(self(x), y)
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("val_loss", nn.functional.cross_entropy(self(x), y))

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=1e-3)


pl.seed_everything(0, verbose=False)
data = torch.utils.data.TensorDataset(torch.randn(1024, 64), torch.randint(0, 10, (1024,)))
train = torch.utils.data.DataLoader(data, batch_size=32, shuffle=True)
val = torch.utils.data.DataLoader(data, batch_size=128)

callback = FxprofCallback(fxprof.schedule(wait=2, warmup=1, active=4), backward=True)
trainer = pl.Trainer(accelerator="cpu", devices=1, max_steps=10, accumulate_grad_batches=2, val_check_interval=8,
                     limit_val_batches=2, logger=CSVLogger(out), enable_checkpointing=False, enable_progress_bar=False,
                     enable_model_summary=False, default_root_dir=out, callbacks=[callback])
trainer.fit(Classifier(), train, val)

print("profiles:", callback.profiles)
print("saved:", *[os.path.relpath(p, out) for p in callback.paths])
print("logged:", callback.metrics[0])
profile = callback.profiles[0]
print("runs at optimizer steps:", profile.meta["run_steps"])
print(profile.summary(top=8))
