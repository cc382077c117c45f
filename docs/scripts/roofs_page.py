"""Real output for docs/roofline.md's sections on touched bytes, cache-aware roofs, the op floor
and where peaks come from: python docs/scripts/roofs_page.py [h100.json]

Run it from a checkout with PYTHONPATH set to that checkout (and again with an older checkout to
get the "before" figures). Uses its own peaks cache folder (a temporary one) unless
XDG_CACHE_HOME is set. One thread.
"""
import json
import os
import sys
import tempfile

import torch

import fxprof
from fxprof.cli.app import main

os.environ.setdefault("XDG_CACHE_HOME", tempfile.mkdtemp())
torch.set_num_threads(1)
print("### load before", os.getloadavg())
print("### P1 fxprof peaks --threads 1 (measured now)"); main(["peaks", "--threads", "1"])
print("### P2 fxprof peaks --threads 1 (again: from the cache)"); main(["peaks", "--threads", "1"])

T = __import__("transformers")
torch.manual_seed(0)
ids = torch.randint(0, 1000, (1, 64), generator=torch.Generator().manual_seed(0))
for name, model in (("bert", T.BertModel(T.BertConfig(num_hidden_layers=2, hidden_size=256, num_attention_heads=4,
                                                      intermediate_size=1024))),
                    ("gpt2", T.GPT2Model(T.GPT2Config(n_layer=2, n_embd=256, n_head=4)))):
    p = fxprof.profile(model.eval(), ids, warmup=2, iters=10)
    df = p.df
    timed = df[df["median_ms"] > 0.020]
    print(f"### B {name}: lookups")
    print(df[df["kind"] == "embedding"][["median_ms", "bytes", "roof_ms", "roof_pct", "limit"]].to_string())
    print(f"### B {name}: largest roof_pct among nodes over 20 us:", round(float(timed["roof_pct"].max()), 1),
          timed["roof_pct"].idxmax())

import torchvision  # noqa: E402

r18 = torchvision.models.resnet18(weights=None).eval()
p = fxprof.profile(r18, torch.randn(1, 3, 224, 224), warmup=3, iters=15)
timed = p.df[p.df["median_ms"] > 0.020]
print("### R resnet18 224: largest roof_pct among nodes over 20 us:", round(float(timed["roof_pct"].max()), 1),
      timed["roof_pct"].idxmax())
print(timed.sort_values("roof_pct", ascending=False).head(5)[["kind", "median_ms", "bytes", "out_bytes", "roof_ms", "roof_pct", "limit"]].to_string())

timm = __import__("timm")
for name, model in (("mobilenet_v3_small", torchvision.models.mobilenet_v3_small(weights=None)),
                    ("vit_tiny", timm.create_model("vit_tiny_patch16_224", pretrained=False)),
                    ("convnext_atto", timm.create_model("convnext_atto", pretrained=False))):
    p = fxprof.profile(model.eval(), torch.randn(1, 3, 224, 224), warmup=2, iters=8)
    t = p.df[p.df["median_ms"] > 0.020]
    print(f"### Z {name}: largest roof_pct among nodes over 20 us:", round(float(t["roof_pct"].max()), 1), t["roof_pct"].idxmax())

print("### E empty batch")
e = fxprof.profile(r18, torch.randn(0, 3, 32, 32), warmup=1, iters=5)
print("\n".join(line for line in str(e).splitlines() if line.startswith("roofline:")))

if len(sys.argv) > 1:
    h100 = fxprof.load(sys.argv[1])
    df = h100.df
    print("### G H100 resnet50 bs32 fp16: limits", df["limit"].value_counts().to_dict(),
          "batch norms", df[df["kind"] == "batch_norm"]["limit"].value_counts().to_dict())
    print("### G relus above 100%:", df[(df["kind"] == "relu") & (df["roof_pct"] > 100)]["roof_pct"].round(1).to_dict())
