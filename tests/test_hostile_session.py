"""Regression tests for issue 36 (a session never changes what the loop computes) and issue 31's
session invariants (g, i, j): hostile loops, run against the eager model they must match."""

from __future__ import annotations

import copy
import logging
import warnings

import pytest
import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

import fxprof

torch._logging.set_logs(dynamo=logging.ERROR)


class Masked(nn.Module):
    """The Hugging Face pattern: optional inputs that default to None and steer the forward."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(8, 8)
        self.b = nn.Linear(8, 4)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None, scale: float | None = None) -> torch.Tensor:
        h = self.a(x)
        if mask is not None:
            h = h * mask
        if scale is not None:
            h = h * scale
        return self.b(h)


class Flagged(Masked):
    """With a bool flag that steers the forward too (``return_dict``, ``output_attentions``)."""

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None, scale: float | None = None,
                double: bool = False) -> torch.Tensor:
        out = super().forward(x, mask, scale)
        return out + out if double else out


def _calls(flags: bool) -> list[tuple[tuple, dict]]:
    x = torch.randn(2, 8)
    mask = torch.rand(2, 8)
    calls = [((x,), {}), ((x,), {"mask": None}), ((x,), {"mask": mask}), ((x, mask), {}), ((x, None, 2.0), {}),
             ((x,), {"scale": 2.0, "mask": mask}), ((x,), {"scale": 3.0})]
    if flags:
        calls += [((x,), {"double": True, "mask": None}), ((x, mask), {"double": False})]
    return calls


# --------------------------------------- 31 (j): every call pattern the eager model accepts
@pytest.mark.parametrize("cls", [Masked, Flagged])
@pytest.mark.parametrize("capture", ["auto", "symbolic", "dynamo"])
def test_a_session_gives_the_eager_results_for_every_pattern_of_optional_inputs(capture, cls):
    torch.manual_seed(0)
    model = cls()
    calls = _calls(flags=cls is Flagged)
    with torch.no_grad():
        expected = [model(*a, **k) for a, k in calls]
    with torch.no_grad(), fxprof.session(model, schedule=fxprof.schedule(wait=1, warmup=1, active=3), capture=capture) as s:
        for step in range(6):
            for (a, k), want in zip(calls, expected):
                assert torch.equal(model(*a, **k), want), (step, k)
            s.step()
    (prof,) = s.profiles
    assert prof.meta["run_steps"]  # timed, not just run eagerly
    assert "forward" not in model.__dict__


def test_profile_takes_an_optional_input_given_as_none():
    model = Masked()
    x = torch.randn(2, 8)
    prof = fxprof.profile(model, x, mask=None, warmup=0, iters=1, peaks=None)
    assert "mul" not in set(prof.df["kind"])  # the branch the eager model takes with mask=None
    with FlopCounterMode(display=False) as whole, torch.no_grad():
        model(x, mask=None)
    assert int(prof.df["flops"].sum()) == whole.get_total_flops()


# --------------------------------------- 36.1: a module replaced during the session
@pytest.mark.parametrize("capture", ["auto", "symbolic"])
def test_a_replaced_submodule_is_what_the_next_steps_run(capture):
    torch.manual_seed(0)
    model = Masked()
    x = torch.randn(2, 8)
    with torch.no_grad(), fxprof.session(model, schedule=fxprof.schedule(warmup=1, active=4), capture=capture) as s:
        assert torch.equal(model(x), Masked.forward(model, x))
        s.step()
        model.a = nn.Linear(8, 8)  # a new head, a LoRA wrap, a reload
        with pytest.warns(UserWarning, match="changed Masked's modules"):
            out = model(x)
        assert torch.equal(out, Masked.forward(model, x))
        s.step()
        del model.b  # removed, then added back as another module
        model.b = nn.Sequential(nn.Linear(8, 4))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for _ in range(3):
                assert torch.equal(model(x), Masked.forward(model, x))
                s.step()
    (prof,) = s.profiles
    assert "captured again 2 time(s)" in " ".join(prof.meta["notes"])
    assert "b.0" in set(prof.df["scope"])  # the new module's nodes were timed


# --------------------------------------- 36.2 / 36.3: a forward set on the instance
def _wrapped(model: nn.Module) -> nn.Module:
    inner = model.forward

    def forward(x: torch.Tensor) -> torch.Tensor:  # as accelerate-style wrappers do
        return inner(torch.cat([x, x, x, x])) * 2

    model.forward = forward
    return model


@pytest.mark.parametrize("capture", ["auto", "dynamo"])
def test_a_session_runs_the_forward_set_on_the_instance(capture):
    model = _wrapped(Masked())
    x = torch.randn(2, 8)
    with torch.no_grad():
        want = model(x)
    with torch.no_grad(), fxprof.session(model, schedule=fxprof.schedule(wait=1, warmup=1, active=2), capture=capture) as s:
        for _ in range(5):
            assert torch.equal(model(x), want)
            s.step()
    assert s.profiles[0].meta["capture"] == "dynamo"
    assert model.__dict__["forward"].__name__ == "forward"  # the user's wrapper, put back


def test_symbolic_capture_refuses_a_forward_set_on_the_instance():
    model = _wrapped(Masked())
    with pytest.raises(fxprof.TraceError, match="set on the instance"):
        fxprof.profile(model, torch.randn(2, 8), capture="symbolic", iters=1)


def test_profile_times_what_model_x_runs_with_a_forward_set_on_the_instance():
    model = _wrapped(Masked())
    x = torch.randn(2, 8)
    prof = fxprof.profile(model, x, warmup=0, iters=1, peaks=None)
    with FlopCounterMode(display=False) as whole, torch.no_grad():
        model(x)
    assert int(prof.df["flops"].sum()) == whole.get_total_flops()  # 4x the class forward's batch
    assert "set on the instance" in prof.meta["capture_reason"]
