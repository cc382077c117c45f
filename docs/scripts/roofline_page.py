"""Produces the real output and the figure in docs/roofline.md: python docs/scripts/roofline_page.py

Measures this machine's peaks (refreshing the cache), profiles resnet18 at 1x3x224x224 with
torch's default thread count, prints the nodes with the most time above their roof, the roll-up
by op, draws docs/img/roofline_resnet18.png, and times the worked example (max_pool2d in
channels-last memory format, and a fresh output against out=).
"""
import os
import time

import matplotlib

matplotlib.use("Agg")
import torch  # noqa: E402
import torchvision  # noqa: E402

import fxprof  # noqa: E402
from fxprof.cli.app import main  # noqa: E402

print("### P1 (fxprof peaks --refresh)")
main(["peaks", "--refresh"])
print("### P2 (fxprof peaks --threads 1 --refresh)")
main(["peaks", "--threads", "1", "--refresh"])

torch.manual_seed(0)
m = torchvision.models.resnet18(weights=None).eval()
x = torch.randn(1, 3, 224, 224)
p = fxprof.profile(m, x, warmup=5, iters=20, name="resnet18")
print("### R1"); print(p.summary(sort="headroom_ms", top=12))
print("### R2"); print(p.summary(group_by="op", columns=["nodes", "median_ms", "pct", "roof_ms", "headroom_ms"]))
print("### R3"); print(p.df.loc[["conv1", "maxpool", "layer1_0_conv1", "layer4_0_conv2", "fc"],
                             ["kind", "median_ms", "flops", "bytes", "intensity", "roof_ms", "roof_pct", "limit"]].to_string())
here = os.path.dirname(os.path.abspath(__file__))
ax = fxprof.plot_roofline(p, label=8)
ax.figure.set_size_inches(9, 6)
ax.figure.savefig(os.path.join(here, "..", "img", "roofline_resnet18.png"), dpi=110)

# the worked example: what to do about a node far below its roof
def best_ms(fn, reps=30):
    fn()
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    times.sort()
    return times[len(times) // 2] * 1e3, times[0] * 1e3

pool = torch.nn.MaxPool2d(3, 2, 1)
a = torch.randn(1, 64, 112, 112)
b = a.contiguous(memory_format=torch.channels_last)
print("### W1 max_pool2d 1x64x112x112 (median, best ms): contiguous", best_ms(lambda: pool(a)), "channels_last", best_ms(lambda: pool(b)))
ml = torchvision.models.resnet18(weights=None).eval().to(memory_format=torch.channels_last)
pl = fxprof.profile(ml, x.contiguous(memory_format=torch.channels_last), warmup=5, iters=20, name="resnet18 channels_last")
print("### W2"); print(pl.summary(sort="headroom_ms", top=6))
n = 8 * 2**20
u, v, out = torch.randn(n), torch.randn(n), torch.empty(n)
print("### W3 add of two 32 MiB tensors (median, best ms): fresh output", best_ms(lambda: u + v), "out=", best_ms(lambda: torch.add(u, v, out=out)))
print("### load", os.getloadavg())
