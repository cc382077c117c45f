"""Produces the real output quoted in docs/capture.md (feature extractor, dynamo sites, Hugging
Face, nested compile): python docs/scripts/capture_page.py"""
import logging, warnings
import torch, torchvision, fxprof
from torch import nn
from torchvision.models.feature_extraction import create_feature_extractor

torch._logging.set_logs(dynamo=logging.ERROR)
warnings.filterwarnings("ignore")
torch.manual_seed(0)
m = torchvision.models.resnet18(weights=None).eval()
x = torch.randn(1, 3, 64, 64)
fe = create_feature_extractor(m, {"layer4": "features", "fc": "logits"})
p = fxprof.profile(fe, x, warmup=3, iters=10, name="resnet18 feature extractor")
print("### FE1"); print(p.df.loc[p.df.kind == "add", ["op", "target", "scope", "scope_source", "median_ms"]].to_string())
print("### FE2"); print(p.summary(group_by="scope", depth=2, top=6))


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(256, 256)

    def forward(self, x):
        y = self.fc(x)
        if y.sum().item() > -1e9:  # a graph break inside every block
            y = torch.relu(y)
        return y


class Repeated(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList([Block() for _ in range(4)])

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return x


r = Repeated().eval()
pr = fxprof.profile(r, torch.randn(64, 256), warmup=3, iters=20)
print("### D1"); print(pr.summary(sort=None, columns=["graph", "kind", "scope", "scope_source", "calls_per_run", "median_ms", "pct", "flops"]))

import transformers as T
bert = T.BertModel(T.BertConfig(vocab_size=1000, hidden_size=64, num_hidden_layers=2, num_attention_heads=2,
                                intermediate_size=128, max_position_embeddings=64)).eval()
ids = torch.randint(0, 1000, (1, 32))
pb = fxprof.profile(bert, ids, warmup=3, iters=10, name="bert (2 layers, hidden 64)")
print("### H1"); print(pb.summary(group_by="scope", depth=3, top=6))
gpt2 = T.GPT2Model(T.GPT2Config(vocab_size=1000, n_embd=64, n_layer=2, n_head=2, n_positions=64, bos_token_id=0, eos_token_id=0)).eval()
try:
    fxprof.profile(gpt2, ids, capture="export")
except fxprof.TraceError as exc:
    print("### H2"); print(exc)
pg = fxprof.profile(gpt2, ids, capture="export", use_cache=False, warmup=3, iters=10, name="gpt2 (2 layers, hidden 64)")
print("### H3"); print(pg.summary(top=5, columns=["kind", "scope", "median_ms", "pct"]))


def passthrough(gm, example_inputs):
    return gm


class HoldsCompiled(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(8, 8)
        self.b = torch.compile(nn.Sequential(nn.Linear(8, 8), nn.ReLU()), backend=passthrough)

    def forward(self, x):
        return self.b(self.a(x))


pn = fxprof.profile(HoldsCompiled().eval(), torch.randn(2, 8), warmup=1, iters=3)
print("### N1"); print(pn.summary(top=3))
