"""A second compiled profile or session of the same model in one process compiles nothing.

fxprof compiles with inductor's caches off (it needs the generated code and provenance), so every
compile of its own is a full one; it keeps what it compiled per (model, torch.compile options)
(fxprof.measure.compiled.reuse) and a later compiled profile or session of the same module reuses
dynamo's cache entries. Compiles are counted with dynamo's own counter of graphs it compiled.
One torchvision model (squeezenet1_0, small input) in the default run; new shapes, other options
and ``torch._dynamo.reset()`` on a small module; resnet18 as the zoo runs it is ``slow``.
"""

from __future__ import annotations

import warnings

import pytest
import torch
from torch import nn

import fxprof
from fxprof.measure.compiled.reuse import REUSED_NOTE


def compiles() -> int:
    """Graphs dynamo has compiled in this process (every backend's)."""
    from torch._dynamo.utils import counters

    return int(counters["stats"]["unique_graphs"])


def kernel_rows(prof) -> set[str]:
    return set(prof.df.index[prof.df["op"].isin(("kernel", "extern"))])


pytestmark = pytest.mark.usefixtures("inductor_cache")  # conftest's: inductor's artifacts in this module's own folder


def profile_session_profile(model, x, first_compiled, user_compile=False):
    """Profile ``first_compiled``, then a session of a new ``torch.compile(model)``, then profile
    again: ``(profiles, graphs compiled by each step)``. ``user_compile``: the loop's results are
    held against the compiled model's own (its compile, with the user's settings, comes before
    the session, as in the zoo's check (g): dynamo then holds an entry of another backend beside
    fxprof's); else against the eager model's, within inductor's rounding."""
    counts, profiles = [], []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        before = compiles()
        profiles.append(fxprof.profile(first_compiled, x, warmup=1, iters=3))
        counts.append(compiles() - before)
        compiled = torch.compile(model)
        with torch.no_grad():
            expected = compiled(x) if user_compile else model(x)  # the user's own compile is not fxprof's
        before = compiles()
        with torch.no_grad(), fxprof.session(compiled, schedule=fxprof.schedule(warmup=1, active=2)) as s:
            outs = []
            for _ in range(3):
                outs.append(compiled(x))
                s.step()
        counts.append(compiles() - before)
        profiles.append(s.profiles[-1])
        before = compiles()
        profiles.append(fxprof.profile(compiled, x, warmup=1, iters=3))
        counts.append(compiles() - before)
    assert all(torch.allclose(o, expected, rtol=1e-4 if user_compile else 1e-3, atol=1e-5 if user_compile else 1e-4)
               for o in outs)  # the loop's results are the model's
    return profiles, counts


def assert_reused(first, later):
    """``later`` reused ``first``'s compile: same kernels, FLOPs and program; compile_s 0, said."""
    assert later.meta["capture"] == "compiled" and later.meta["compiled"]["reused"] is True
    assert later.meta["compiled"]["compile_s"] == 0.0 and REUSED_NOTE in later.meta["notes"]
    assert kernel_rows(later) == kernel_rows(first)
    for key in ("graphs", "graph_breaks", "recompiles", "kernels", "mode", "options", "dynamic"):
        assert later.meta["compiled"][key] == first.meta["compiled"][key], key
    flops = first.df["flops"].fillna(0)
    assert later.df.loc[flops.index, "flops"].fillna(0).equals(flops)
    assert "compile reused from an earlier profile in this process" in later.summary()
    assert "compiled in 0.00 s" not in later.summary()


@pytest.mark.slow  # 20-28 s: the README's command stays under ten minutes; CI runs it in the slow pass
def test_a_second_profile_and_a_session_of_a_torchvision_model_compile_nothing():
    import torchvision

    torch.manual_seed(0)
    model, x = torchvision.models.squeezenet1_0(weights=None).eval(), torch.randn(1, 3, 48, 48)
    (first, session, again), counts = profile_session_profile(model, x, torch.compile(model))
    assert counts[0] >= 1 and first.meta["compiled"]["compile_s"] > 0 and not first.meta["compiled"].get("reused")
    assert "compiled in" in first.summary()
    assert counts[1:] == [0, 0]  # the session and the profile after it: nothing compiled
    assert_reused(first, again)
    assert session.meta["compiled"]["compile_s"] == 0.0 and session.meta["compiled"]["reused"] is True
    assert kernel_rows(session) == kernel_rows(first)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.fc = nn.Linear(4, 8)

    def forward(self, x):
        return self.fc(self.conv(x).relu().mean((2, 3))).sigmoid()


@pytest.mark.slow  # issue 49 item 6: the README's command near ten minutes; CI runs it in the slow pass
def test_new_shapes_other_options_and_a_dynamo_reset_compile_again():
    import torch._dynamo

    torch.manual_seed(0)
    model, x = Net().eval(), torch.randn(2, 3, 16, 16)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        first = fxprof.profile(model, x, compile=True, warmup=1, iters=2)
        before = compiles()
        again = fxprof.profile(torch.compile(model), x, warmup=1, iters=2)  # compile=True and torch.compile: one program
        assert compiles() == before
        assert_reused(first, again)
        # a new input shape fails dynamo's guards: compiled (a recompile), caught and timed as in a first profile
        bigger = torch.randn(2, 3, 24, 24)
        shaped = fxprof.profile(torch.compile(model), bigger, warmup=1, iters=2)
        assert compiles() > before and shaped.meta["compiled"]["compile_s"] > 0
        assert shaped.meta["compiled"]["reused"] is True and shaped.meta["compiled"]["recompiles"] >= 1
        assert "compiled again here" in " ".join(shaped.meta["notes"]) and "compiled in" in shaped.summary()
        assert shaped.df.loc[list(kernel_rows(shaped)), "median_ms"].notna().any()
        # other options are another program: compiled afresh
        before = compiles()
        other = fxprof.profile(torch.compile(model, dynamic=False), x, warmup=1, iters=2)
        assert compiles() > before and not other.meta["compiled"].get("reused") and other.meta["compiled"]["dynamic"] is False
        # after torch._dynamo.reset() dynamo holds no compiled code: nothing is reused
        torch._dynamo.reset()
        before = compiles()
        fresh = fxprof.profile(torch.compile(model), x, warmup=1, iters=2)
        assert compiles() > before and fresh.meta["compiled"]["compile_s"] > 0 and not fresh.meta["compiled"].get("reused")
        assert kernel_rows(fresh) == kernel_rows(first) and fresh.meta["compiled"]["graphs"] == 1
        # and the fresh compile is the one kept from now on
        before = compiles()
        assert_reused(fresh, fxprof.profile(torch.compile(model), x, warmup=1, iters=2))
        assert compiles() == before


@pytest.mark.slow
def test_resnet18_as_the_zoo_runs_it_compiles_once():
    """The zoo's compiled pass (``fxprof.profile(model, compile=True)``) then its check (g), a
    session of ``torch.compile(model)``: one fxprof compile, not two."""
    import torchvision

    torch.manual_seed(0)
    model, x = torchvision.models.resnet18(weights=None).eval(), torch.randn(1, 3, 64, 64)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        first = fxprof.profile(model, x, compile=True, warmup=1, iters=3)
    (again, session, last), counts = profile_session_profile(model, x, torch.compile(model), user_compile=True)
    assert counts == [0, 0, 0]
    for later in (again, last):
        assert_reused(first, later)
    assert kernel_rows(session) == kernel_rows(first) and session.meta["compiled"]["compile_s"] == 0.0
