"""Run under ``torchrun`` by tests/measure/test_fsdp_state.py (not a test module itself).

``torchrun --nproc-per-node 2 fsdp_state_worker.py OUTDIR``: on each rank, FSDP2 models
(:func:`sharded_worker.sharded_model`) after a validation pass (a ``torch.no_grad()`` forward,
after which FSDP2 keeps the root's parameters unsharded) are profiled, then trained a few steps
beside a twin that went through the same validation pass and was never profiled. Each case's
record says whether the losses, the local parameter shards and the gradients match the twin's
bit for bit, and which parameters hold a ``.grad`` after the profile. Written to
``OUTDIR/rankN.json``.
"""

from __future__ import annotations

import json
import os
import sys

import torch
import torch.distributed as dist
from sharded_worker import _local, sharded_model
from torch import nn


def _validation(model: nn.Module, x: torch.Tensor) -> None:
    model.eval()
    with torch.no_grad():
        model(x)
    model.train()


def _train(model: nn.Module, optimizer: torch.optim.Optimizer, xs: list[torch.Tensor]) -> dict:
    seen: dict = {"losses": [], "params": [], "grads": []}
    for x in xs:
        loss = model(x).square().mean()
        loss.backward()
        seen["grads"].append([_local(p.grad) for p in model.parameters()])
        optimizer.step()
        optimizer.zero_grad()
        seen["losses"].append(loss.detach().clone())
        seen["params"].append([_local(p) for p in model.parameters()])
    return seen


def _same(a: dict, b: dict) -> bool:
    return (len(a["losses"]) == len(b["losses"]) > 0
            and all(torch.equal(x, y) for x, y in zip(a["losses"], b["losses"]))
            and all(len(g) == len(h) and all(torch.equal(x, y) for x, y in zip(g, h))
                    for key in ("grads", "params") for g, h in zip(a[key], b[key])))


def _full(model: nn.Module) -> list[torch.Tensor]:
    """Every parameter whole (a collective for a sharded one), whether FSDP registered the shards or
    the gathered parameters."""
    return [(p.full_tensor() if hasattr(p, "full_tensor") else p).detach().clone() for p in model.parameters()]


def _grads_left(model: nn.Module) -> list[str]:
    return [name for name, p in model.named_parameters() if p.grad is not None]


def case(name: str, x: torch.Tensor, xs: list[torch.Tensor], optimizer: bool, before: str) -> dict:
    """A model and its twin, each with an SGD (momentum) optimizer made before anything ran; both
    run ``before`` (a validation pass, or the model a forward profile and the twin a validation
    pass); then the model alone a training-step profile (with the optimizer or without); then both
    train on ``xs``."""
    import fxprof

    model, twin = sharded_model(), sharded_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    twin_opt = torch.optim.SGD(twin.parameters(), lr=0.1, momentum=0.9)
    _validation(twin, x)
    if before == "profile":
        fxprof.profile(model, x, warmup=0, iters=1, anatomy=False)
    else:
        _validation(model, x)
    params = _full(model)
    error = ""
    try:
        fxprof.profile(model, x, backward=True, optimizer=opt if optimizer else None, warmup=1, iters=2, anatomy=False)
    except Exception as exc:  # a clear error is an answer too; the record says which
        error = f"{type(exc).__name__}: {exc}"
    record = {"error": error, "grads_left": _grads_left(model),
              "same_params": all(torch.equal(p, v) for p, v in zip(_full(model), params))}
    record["same_training"] = _same(_train(model, opt, xs), _train(twin, twin_opt, xs))
    return record


def in_a_session(x: torch.Tensor, xs: list[torch.Tensor]) -> dict:
    """A validation pass, then a session over a training loop, then a training-step profile with
    the loop's optimizer, then more training: all against a twin never profiled."""
    import fxprof

    model, twin = sharded_model(), sharded_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    twin_opt = torch.optim.SGD(twin.parameters(), lr=0.1, momentum=0.9)
    _validation(model, x)
    _validation(twin, x)
    with fxprof.session(model, schedule=fxprof.schedule(wait=0, warmup=1, active=2), backward=True, gather=False) as s:
        got = {"losses": [], "params": [], "grads": []}
        for step_x in xs:
            part = _train(model, opt, [step_x])
            for key in got:
                got[key] += part[key]
            s.step()
    expected = _train(twin, twin_opt, xs)
    record = {"same_session": _same(got, expected), "grads_left_session": _grads_left(model)}
    _validation(model, x)
    _validation(twin, x)
    fxprof.profile(model, x, backward=True, optimizer=opt, warmup=1, iters=2, anatomy=False)
    record["grads_left"] = _grads_left(model)
    record["same_training"] = _same(_train(model, opt, xs), _train(twin, twin_opt, xs))
    return record


def main(outdir: str) -> None:
    import fxprof

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    try:
        torch.manual_seed(1 + rank)
        x = torch.randn(8, 16)
        xs = [torch.randn(8, 16) for _ in range(3)]
        record: dict = {"rank": rank}
        for optimizer in (True, False):
            for before in ("validation", "profile"):
                record[f"{before}_{'opt' if optimizer else 'no_opt'}"] = case(before, x, xs, optimizer, before)
        record["session"] = in_a_session(x, xs)
        # an optimizer built after a validation pass holds the root's gathered parameters: refused, in words
        model = sharded_model()
        _validation(model, x)
        late = torch.optim.SGD(model.parameters(), lr=0.1)
        try:
            fxprof.profile(model, x, backward=True, optimizer=late, warmup=0, iters=1, anatomy=False)
            record["late_optimizer"] = ""
        except ValueError as exc:
            record["late_optimizer"] = str(exc)
        # gradient accumulation: with sync off, or with a microbatch's gradients pending, a profiled backward
        # would add into FSDP's kept gradients: refused in words, and the training goes on as a twin's
        model, twin = sharded_model(), sharded_model()
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        twin_opt = torch.optim.SGD(twin.parameters(), lr=0.1)
        refused = []
        for m in (model, twin):
            m.set_requires_gradient_sync(False)
        for attempt in ("off", "pending"):
            if attempt == "pending":
                for m in (model, twin):
                    m(x).square().mean().backward()  # a microbatch: its gradients kept for the next reduce-scatter
                    m.set_requires_gradient_sync(True)
            try:
                fxprof.profile(model, x, backward=True, warmup=0, iters=1, anatomy=False)
                refused.append("")
            except ValueError as exc:
                refused.append(str(exc))
        record["accumulating"] = {"refused": refused, "same_training": _same(_train(model, opt, xs), _train(twin, twin_opt, xs))}
        with open(os.path.join(outdir, f"rank{rank}.json"), "w") as handle:
            json.dump(record, handle)
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1])
