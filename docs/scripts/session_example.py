"""The examples of docs/session.md: a training loop and a text loop, each under fxprof.session.

Run: python docs/scripts/session_example.py OUTDIR   (CPU, 1 thread; saves each cycle as OUTDIR/stepN.npz,
making OUTDIR first where it does not exist)
"""
import os
import sys

import torch
import torchvision
from torch import nn

import fxprof

out = sys.argv[1] if len(sys.argv) > 1 else "."
os.makedirs(out, exist_ok=True)  # the first cycle saves at step 4: a missing folder must not stop the run there
torch.manual_seed(0)
torch.set_num_threads(1)  # on a shared 2-core machine, a second intra-op thread waits for a free core

# ---- E1: resnet18 trained on a synthetic loader of 11 batches, the last one short
model = torchvision.models.resnet18(weights=None, num_classes=10).train()
opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
loader = [(torch.randn(8, 3, 32, 32), torch.randint(0, 10, (8,))) for _ in range(10)]
loader.append((torch.randn(3, 3, 32, 32), torch.randint(0, 10, (3,))))


def save(prof):
    path = f"{out}/step{prof.meta['step']}.npz"
    prof.save(path)
    print(f"on_ready: cycle {prof.meta['cycle']}, runs at steps {prof.meta['run_steps']} -> {path}")


with fxprof.session(model, schedule=fxprof.schedule(wait=1, warmup=1, active=3, repeat=2), on_ready=save) as s:
    for x, y in loader:
        loss = nn.functional.cross_entropy(s.model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        s.step()
print("forward restored:", "forward" not in model.__dict__)
print("### E1")
print(s.profiles[1].summary(top=6))


# ---- E2: a tiny transformer on batches of varying length (padding mask)
class TinyTransformer(nn.Module):
    def __init__(self, vocab=1000, dim=64, classes=4):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.pos = nn.Parameter(torch.randn(512, dim) * 0.02)
        self.attn = nn.MultiheadAttention(dim, 4, batch_first=True)
        self.norm = nn.LayerNorm(dim)
        self.ff = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))
        self.head = nn.Linear(dim, classes)

    def forward(self, ids, mask):
        h = self.embed(ids) + self.pos[: ids.size(1)]
        a, _ = self.attn(h, h, h, key_padding_mask=~mask)
        h = self.norm(h + a)
        h = h + self.ff(h)
        return self.head((h * mask.unsqueeze(-1)).sum(1) / mask.sum(1, keepdim=True))


text = TinyTransformer().train()
opt = torch.optim.AdamW(text.parameters(), lr=1e-3)
lengths = [64, 128, 64, 128, 64, 128, 256, 64]  # bucketed lengths; 256 first appears while timing
with fxprof.session(text, schedule=fxprof.schedule(warmup=2, active=6)) as s:
    for n in lengths:
        ids = torch.randint(1, 1000, (16, n))
        mask = torch.rand(16, n) < 0.9
        mask[:, 0] = True
        loss = nn.functional.cross_entropy(s.model(ids, mask), torch.randint(0, 4, (16,)))
        loss.backward()
        opt.step()
        opt.zero_grad()
        s.step()
prof = s.profiles[0]
print("### E2")
print(prof.summary(top=5))
print("### E3")
with __import__("pandas").option_context("display.width", 200, "display.max_columns", 10, "display.max_colwidth", 100):
    print(fxprof.by_signature(prof).round(2).to_string())
    print("### E4")
    print(fxprof.by_signature(prof, "module_type")[["nodes", "median_ms", "pct"]].round(2).to_string())


# ---- E7: backward=True: the loop's own loss.backward() timed too (AOTAutograd graphs)
model = torchvision.models.resnet18(weights=None, num_classes=10).train()
opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
with fxprof.session(model, schedule=fxprof.schedule(warmup=1, active=3), backward=True) as s:
    for x, y in loader[:4]:
        loss = nn.functional.cross_entropy(s.model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        s.step()
prof = s.profiles[0]
print("### E7")
print(prof.summary(top=6))
print("### E8")
print(prof.group_by("scope")[["nodes", "forward_ms", "backward_ms", "bwd_fwd_ratio", "pct"]].round(2).head(8).to_string())
