"""The three short excerpts of docs/session.md that the example scripts do not print (the loops of
tests/regressions/test_hostile_session.py): the env line of a session whose runs changed autocast and grad mode,
the warning of a session that timed nothing, and the capture/env/note lines of a backward=True session
of two forwards feeding one loss.

Run: python docs/scripts/session_excerpts.py   (CPU)
"""
import warnings

import torch
from torch import nn

import fxprof

torch.manual_seed(0)
print("### ENV")
model = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 4))
x = torch.randn(4, 8)
with fxprof.session(model, schedule=fxprof.schedule(warmup=1, active=4)) as s:
    for step in range(6):
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=step < 3), torch.set_grad_enabled(step < 3):
            model(x)
        s.step()
print(next(line for line in s.profiles[0].summary(top=0).splitlines() if line.startswith("env:")))

print("### WARN")
model = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 8))
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    with fxprof.session(model) as s:
        with torch.no_grad():
            y = torch.randn(1, 8)
            for _ in range(6):  # a loop the user does not own: it never calls s.step()
                y = torch.tanh(model(y))
for w in caught:
    if "no timed step" in str(w.message):
        print(f"{w.category.__name__}: {w.message}")


print("### ODD")


class Odd(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(8, 8)
        self.b = nn.Linear(8, 4)

    def forward(s, x):  # noqa: N805
        return s.b(torch.relu(s.a(x)))


model = Odd()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
with fxprof.session(model, schedule=fxprof.schedule(warmup=1, active=3), backward=True) as s:
    for _ in range(5):
        x1, x2 = torch.randn(4, 8), torch.randn(4, 8)
        loss = (model(x1) - model(x2)).pow(2).mean()  # two forwards feeding one loss
        loss.backward()
        opt.step()
        opt.zero_grad()
        model.eval()
        with torch.no_grad():
            model(x1)  # a validation pass
        model(x2)
        model.train()
        s.step()
for line in s.profiles[0].summary(top=0).splitlines():
    if line.startswith(("capture:", "env:", "note: backward=True")):
        print(line)
