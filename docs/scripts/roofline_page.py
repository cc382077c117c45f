"""Produces the real output and the figure in docs/roofline.md: python docs/scripts/roofline_page.py

Measures this machine's peaks (refreshing the cache: it keeps the best of all measurements),
profiles resnet18 at 1x3x224x224 on one thread through the command line, sorted by headroom,
prints the roll-up by op and a few nodes' roofline columns, draws docs/img/roofline_resnet18.png,
and times the worked example (max_pool2d in channels-last memory format; a fresh output
against out=). One thread: on this shared 2-core machine, two OpenMP threads wait for each
other whenever another process takes a core, and their times swing tenfold.
"""
import os
import tempfile
import time

import matplotlib

matplotlib.use("Agg")
import torch  # noqa: E402
import torchvision  # noqa: E402

import fxprof  # noqa: E402
from fxprof.cli.app import main  # noqa: E402

print("### load before", os.getloadavg())
print("### P1 (fxprof peaks --threads 1 --refresh)")
main(["peaks", "--threads", "1", "--refresh"])
print("### P2 (fxprof peaks --threads 2 --refresh)")
main(["peaks", "--threads", "2", "--refresh"])

saved = os.path.join(tempfile.mkdtemp(), "resnet18.json")
print("### R1 (fxprof profile resnet18 --threads 1 --sort headroom_ms --top 12)")
main(["profile", "resnet18", "--threads", "1", "--sort", "headroom_ms", "--top", "12", "--json", saved, "--quiet"])
p = fxprof.load(saved)
print("### R2"); print(p.summary(group_by="op", columns=["nodes", "median_ms", "pct", "roof_ms", "headroom_ms"]))
print("### R3"); print(p.df.loc[["conv1", "maxpool", "layer1_0_conv1", "layer4_0_conv2", "fc"],
                             ["kind", "median_ms", "flops", "bytes", "intensity", "roof_ms", "roof_pct", "limit"]].to_string())
here = os.path.dirname(os.path.abspath(__file__))
ax = fxprof.plot_roofline(p, label=8)
ax.figure.savefig(os.path.join(here, "..", "img", "roofline_resnet18.png"), dpi=100)


def median_and_best_ms(fn, reps=30):
    fn()
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    times.sort()
    return round(times[len(times) // 2] * 1e3, 3), round(times[0] * 1e3, 3)


torch.set_num_threads(1)
pool = torch.nn.MaxPool2d(3, 2, 1)
a = torch.randn(1, 64, 112, 112)
b = a.contiguous(memory_format=torch.channels_last)
print("### W1 max_pool2d on 1x64x112x112, (median, best) ms: contiguous", median_and_best_ms(lambda: pool(a)),
      "channels_last", median_and_best_ms(lambda: pool(b)))
torch.manual_seed(0)
ml = torchvision.models.resnet18(weights=None).eval().to(memory_format=torch.channels_last)
x = torch.randn(1, 3, 224, 224).contiguous(memory_format=torch.channels_last)
pl = fxprof.profile(ml, x, warmup=5, iters=20, name="resnet18 channels_last")
cols = ["median_ms", "roof_ms", "roof_pct", "headroom_ms", "limit"]
print("### W2 maxpool, contiguous then channels_last"); print(p.df.loc[["maxpool"], cols].to_string()); print(pl.df.loc[["maxpool"], cols].to_string())
diff = fxprof.compare(p, pl, warn=False)
print("### W2b the compare of the two runs, maxpool and the largest changes"); print(diff.head(6)[["kind", "a_ms", "b_ms", "ratio", "verdict"]].to_string())
print("run medians (ms):", round(float(torch.tensor(p.kept_totals()).median()), 2), round(float(torch.tensor(pl.kept_totals()).median()), 2))
n = 8 * 2**20
u, v, out = torch.randn(n), torch.randn(n), torch.empty(n)
print("### W3 add of two 32 MiB tensors, (median, best) ms: fresh output", median_and_best_ms(lambda: u + v),
      "out=", median_and_best_ms(lambda: torch.add(u, v, out=out)))
print("### load after", os.getloadavg())
