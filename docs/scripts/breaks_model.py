"""The model of docs/compiled.md's worked example on graph breaks: a stack of residual blocks,
each of which checks its activations with ``.item()`` (a guard against blow-ups), and the same
model with the check written as a tensor op."""

import torch
from torch import nn


class Block(nn.Module):
    def __init__(self, dim: int = 64):
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.fc = nn.Linear(dim, dim)

    def forward(self, x):
        y = self.fc(self.norm(x))
        if y.abs().max().item() > 1e4:  # a Python check on a tensor's value: a graph break
            y = y.clamp(-1e4, 1e4)
        return x + torch.relu(y)


class FixedBlock(Block):
    def forward(self, x):
        y = self.fc(self.norm(x)).clamp(-1e4, 1e4)  # the same result, as a tensor op: no break
        return x + torch.relu(y)


class Net(nn.Module):
    def __init__(self, block=Block, depth: int = 6, dim: int = 64):
        super().__init__()
        self.blocks = nn.Sequential(*[block(dim) for _ in range(depth)])
        self.head = nn.Linear(dim, 10)

    def forward(self, x):
        return self.head(self.blocks(x))


def checked():
    torch.manual_seed(0)
    return Net(Block).eval()


def fixed():
    torch.manual_seed(0)
    return Net(FixedBlock).eval()
