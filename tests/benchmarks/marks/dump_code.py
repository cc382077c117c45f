"""Print inductor's generated wrapper for a small MLP (and resnet18), found through compile_fx's inner_compile."""
import sys

import torch
from torch import nn
from torch._inductor.compile_fx import compile_fx, compile_fx_inner

captured = []

def inner(gm, example_inputs, **kw):
    out = compile_fx_inner(gm, example_inputs, **kw)
    captured.append(out)
    return out

def backend(gm, inputs):
    return compile_fx(gm, inputs, inner_compile=inner)

torch.set_num_threads(1)
which = sys.argv[1] if len(sys.argv) > 1 else "mlp"
if which == "mlp":
    m = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 64), nn.LayerNorm(64)).eval()
    x = torch.randn(1, 64)
else:
    import torchvision
    m = torchvision.models.resnet18(weights=None).eval()
    x = torch.randn(1, 3, 32, 32)
torch._inductor.config.trace.provenance_tracking_level = 1
c = torch.compile(m, backend=backend)
with torch.no_grad():
    c(x)
for g in captured:
    print(type(g).__name__, "current_callable:", g.current_callable, getattr(g.current_callable, "__module__", None))
    print(g.source_code if which == "mlp" else g.source_code[-6000:])
for g in captured:
    print("PROVENANCE", g.inductor_provenance_mapping_str)
