"""docs/session.md, "A torch.compile'd model": the header of a session over a compiled resnet18.

Run: python docs/scripts/session_compiled.py   (CPU; resnet18, 10 classes, 2x3x32x32, no_grad)
"""
import torch
import torchvision

import fxprof

torch.manual_seed(0)
model = torchvision.models.resnet18(weights=None, num_classes=10).eval()
compiled = torch.compile(model)
x = torch.randn(2, 3, 32, 32)
with torch.no_grad(), fxprof.session(compiled) as s:
    for _ in range(4):
        s.model(x)
        s.step()
print(s.profiles[0].summary(top=5))
