"""A data-parallel block with a torch.distributed all_reduce, profiled on every rank and gathered
on rank 0. Run: torchrun --nproc-per-node 2 docs/scripts/distributed_example.py (gloo, CPU)."""
import torch
import torch.distributed as dist
from torch import nn

import fxprof


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(256, 1024)
        self.fc2 = nn.Linear(1024, 256)

    def forward(self, x):
        h = self.fc2(torch.relu(self.fc1(x)))
        dist.all_reduce(h)  # sum over the ranks (in place)
        return h / dist.get_world_size()


dist.init_process_group("gloo")
torch.manual_seed(0)
model = Block().eval()
x = torch.randn(64, 256)
prof = fxprof.profile(model, x, warmup=3, iters=20)  # a barrier before each of the 20 runs
merged = fxprof.gather(prof, dst=0)  # every rank's samples on rank 0, None elsewhere
if merged is not None:
    print("### E1")
    print(merged.summary(columns=["kind", "median_ms", "rank_min_ms", "rank_max_ms", "slowest_rank", "pct"]))
    print("### E2")
    print(merged.summary(group_by="comm"))
    print("### E3")
    by_rank = merged.by_rank()  # rows picked by kind: node names depend on how the graph was captured
    picked = by_rank[by_rank["kind"].isin(["linear", "all_reduce", "wait_tensor"])]
    print(picked[["kind", "median_ms", "pct", "vs_median"]].to_string())
    merged.save("distributed_example.json")
dist.destroy_process_group()
