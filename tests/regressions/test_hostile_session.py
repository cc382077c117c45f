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
from fxprof.core.breaks import BREAK, OVERHEAD

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


def test_a_forward_the_loop_sets_during_the_session_is_run_and_left_in_place():
    model = Masked()
    x = torch.randn(2, 8)
    s = fxprof.session(model, schedule=fxprof.schedule(warmup=1, active=3))
    with torch.no_grad():
        s.__enter__()
        model(x)
        s.step()
        _wrapped(model)  # wraps the session's forward
        want = Masked.forward(model, torch.cat([x, x, x, x])) * 2
        for _ in range(3):
            assert torch.equal(model(x), want)
            s.step()
        with pytest.warns(UserWarning, match="set Masked.forward during the session"):
            s.__exit__(None, None, None)
        assert model.__dict__["forward"].__name__ == "forward"  # the user's wrapper stays
        assert torch.equal(model(x), want)  # and runs the model's own forward inside it, eagerly
    assert s.profiles[0].meta["run_steps"] == [2, 3]  # step 1: the wrapper's batch of 8, a new signature, untimed


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


# --------------------------------------- 36.4 / 36.5 / 36.8: backward=True in a real training loop
class Odd(nn.Module):
    """Its forward's first parameter is not called ``self``."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(8, 8)
        self.b = nn.Linear(8, 4)

    def forward(s, x: torch.Tensor) -> torch.Tensor:  # noqa: N805
        return s.b(torch.relu(s.a(x)))


def _siamese_loop(model: nn.Module, batches: list, session: "fxprof.measure.session.session.Session | None" = None) -> list[float]:
    """Two forwards feeding one loss, then a validation pass in eval mode, with and without no_grad."""
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    losses = []
    for x1, x2 in batches:
        loss = (model(x1) - model(x2)).pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
        model.eval()
        with torch.no_grad():
            losses.append(model(x1).sum().item())
        losses.append(model(x2).sum().item())  # eval, gradients on
        model.train()
        if session is not None:
            session.step()
    return losses


def test_backward_true_times_every_backward_of_several_forwards_and_lets_validation_run():
    torch.manual_seed(0)
    model = Odd()
    twin = copy.deepcopy(model)
    batches = [(torch.randn(4, 8), torch.randn(4, 8)) for _ in range(5)]
    with fxprof.session(model, schedule=fxprof.schedule(warmup=1, active=3), backward=True) as s:
        losses = _siamese_loop(model, batches, s)
    assert losses == pytest.approx(_siamese_loop(twin, batches), rel=1e-5)
    (prof,) = s.profiles
    assert prof.meta["run_steps"] == [1, 2, 3]  # one run per step, not one per forward
    table = prof.df
    # every forward and backward graph execution of a step: two of each per run
    assert (table.loc[table["phase"] == "backward", "calls"] == 6).all()
    assert (table.loc[(table["phase"] == "forward") & (table["op"] == "call_function"), "calls"] == 6).all()
    notes = " ".join(prof.meta["notes"])
    assert "each run holds 2 forward and 2 backward graph execution(s)" in notes
    assert "6 eval/no-grad forward(s) (validation) ran as the eager model, untimed" in notes
    # 36.8: scopes from the module path, whatever the forward's first parameter is called
    assert {"a", "b"} <= set(table["scope"]) and not any(str(v).startswith("L.") for v in table["scope"])


# --------------------------------------- 36.6: the numerics the runs had, not those at the end
def test_the_environment_line_says_what_autocast_and_grad_the_runs_had():
    model = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 4))
    x = torch.randn(4, 8)
    with fxprof.session(model, schedule=fxprof.schedule(warmup=1, active=3)) as s:
        for _ in range(4):
            with torch.autocast("cpu", dtype=torch.bfloat16):
                model(x)
            s.step()
    (prof,) = s.profiles
    assert prof.meta["env"]["autocast"] == "cpu bfloat16"
    assert "autocast cpu bfloat16 | grad on" in prof.summary()
    with fxprof.session(model, schedule=fxprof.schedule(warmup=1, active=4)) as s:
        for step in range(6):
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=step < 3), torch.set_grad_enabled(step < 3):
                model(x)
            s.step()
    (prof,) = s.profiles
    assert prof.meta["run_steps"] == [1, 2, 4]  # step 3 was a new setting: warmed up, untimed
    assert "autocast cpu bfloat16 (steps 1, 2); off (step 4) | grad on (steps 1, 2); off (step 4)" in prof.summary()
    assert prof.meta["no_grad"] is False


# --------------------------------------- 36.10: compile= options checked up front
@pytest.mark.parametrize("options, message", [
    ({"dynamic": "yes"}, "compile option dynamic must be True, False or None"),
    ({"fullgraph": 1}, "compile option fullgraph must be True or False"),
    ({"options": ["max_autotune"]}, "compile option options must be a dict"),
])
def test_compile_options_are_checked_before_anything_runs(options, message, monkeypatch):
    import torch._dynamo

    monkeypatch.setattr(torch, "compile", lambda *a, **k: pytest.fail("compiled before checking its options"))
    with pytest.raises(ValueError, match=message) as caught:
        fxprof.profile(Masked(), torch.randn(2, 8), compile=options)
    assert len(str(caught.value).splitlines()) == 1


# --------------------------------------- 31 (i): a session that times nothing says so, and how to step
def _generate(model: nn.Module, x: torch.Tensor, tokens: int) -> list[torch.Tensor]:
    """A loop the user does not own (Hugging Face generate(), a trainer): it never calls s.step()."""
    out = []
    with torch.no_grad():
        for _ in range(tokens):
            x = torch.tanh(model(x))
            out.append(x)
    return out


def test_a_session_with_no_timed_step_warns_and_says_how_to_step_from_inside_the_loop():
    model = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 8))
    x = torch.randn(1, 8)
    want = _generate(model, x, 6)
    with pytest.warns(UserWarning, match=r"ended with no timed step.*ran 6 time\(s\) in 1 step\(s\).*register_forward_hook"):
        with fxprof.session(model) as s:
            got = _generate(model, x, 6)
    assert not s.profiles and all(torch.equal(a, b) for a, b in zip(got, want))
    with pytest.warns(UserWarning, match="never called"):
        with fxprof.session(model):
            pass
    # what the warning says to do
    with fxprof.session(model, schedule=fxprof.schedule(warmup=1, active=4)) as s:
        handle = model.register_forward_hook(lambda *_: s.step())
        got = _generate(model, x, 6)
        handle.remove()
    assert all(torch.equal(a, b) for a, b in zip(got, want))
    (prof,) = s.profiles
    assert prof.meta["run_steps"] == [1, 2, 3, 4]


# --------------------------------------- 31 (g): a session of a compiled model times the compiled program
def test_a_session_of_a_compiled_model_times_its_compiled_kernels():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 8)).eval()
    compiled = torch.compile(model)
    x = torch.randn(4, 16)
    with torch.no_grad():
        want = compiled(x)
    with torch.no_grad(), fxprof.session(compiled, schedule=fxprof.schedule(wait=1, warmup=1, active=3)) as s:
        for _ in range(6):
            assert torch.allclose(compiled(x), want, atol=1e-6)
            s.step()
    assert "forward" in compiled.__dict__ and compiled.__dict__["forward"] is not s._hook  # dynamo's own, put back
    (prof,) = s.profiles
    assert prof.meta["capture"] == "compiled" and prof.meta["model"] == "Sequential"
    assert prof.meta["run_steps"] == [2, 3, 4] and len(prof.runs) == 3
    df = prof.df
    assert (df["calls"] == 3).all()  # every kernel once in every timed step
    # kernels charged to the layers' eager nodes; the compiled program's own Python (wrapper,
    # guards: kind compiled_overhead, issue 33) has rows of its own, with no eager origin
    kernels = df[~df["kind"].isin([BREAK, OVERHEAD])]
    assert {"0", "2"} <= set(kernels["scope"]) and (kernels["origins"] != "").all()
    assert len(kernels) < len(df)
    assert not any(str(n).startswith("g0:") for n in df.index)  # no eager dynamo graph rows
    with pytest.raises(ValueError, match="backward=True.*compiled"):
        fxprof.session(compiled, backward=True)
