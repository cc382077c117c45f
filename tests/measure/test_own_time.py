"""A node's time is the node's own: between its two marks there is only its call.

A fake clock that only moves when something costs time makes this exact: lookups, argument
fetching and bookkeeping are made expensive on purpose, and the node times must not see them.
"""

from __future__ import annotations

import gc
import operator
import weakref

import pytest
import torch
from conftest import FakeClock, FakeTimer
from torch import fx, nn

import fxprof
from fxprof import ProfilingInterpreter, node_failure
from fxprof.measure.timing.recorder import Recorder


class Costly(nn.Module):
    """A leaf that costs exactly ``ms`` of fake time per call."""

    def __init__(self, clock: FakeClock, ms: float) -> None:
        super().__init__()
        self.clock, self.ms = clock, ms

    def forward(self, x):
        self.clock.advance(self.ms)
        return x + 1


class SlowLookups(nn.Module):
    """A container whose attribute lookups cost 5 ms each (as a deep hierarchy's do, in small)."""

    def __init__(self, clock: FakeClock, inner: nn.Module | None = None) -> None:
        super().__init__()
        object.__setattr__(self, "_clock", clock)
        if inner is not None:
            self.inner = inner
        self.register_buffer("scale", torch.full((1,), 2.0))

    def __getattr__(self, name):
        self._clock.advance(5.0)
        return super().__getattr__(name)


class Deep(nn.Module):
    """A 1 ms module three slow containers deep, a parameter read through them, and functions."""

    def __init__(self, clock: FakeClock) -> None:
        super().__init__()
        leaf = nn.Module()
        leaf.work = Costly(clock, 1.0)
        self.outer = SlowLookups(clock, SlowLookups(clock, SlowLookups(clock, leaf)))

    def forward(self, x):
        y = self.outer.inner.inner.inner.work(x)
        y = y * self.outer.inner.scale
        return torch.relu(y).sum(0)


def _traced(clock: FakeClock) -> fx.GraphModule:
    model = Deep(clock)
    gm = fxprof.trace(model, leaf_modules=[Costly])
    assert {"call_module", "get_attr", "call_function", "call_method"} <= {n.op for n in gm.graph.nodes}
    # GraphModule copies the hierarchy into plain containers: put the slow ones back
    gm.outer = model.outer
    assert type(gm.outer.inner) is SlowLookups
    return gm


def _times(interp: ProfilingInterpreter) -> dict[str, float]:
    rec = interp.recording
    return dict(zip(rec.node, rec.time_ms))


@pytest.mark.parametrize("lean", [True, False], ids=["compiled-plan", "generic-loop"])
def test_lookups_and_argument_fetching_stay_outside_the_marks(lean):
    clock = FakeClock()

    class Generic(ProfilingInterpreter):
        def fetch_args_kwargs_from_env(self, n):  # argument fetching made expensive on purpose
            clock.advance(3.0)
            return super().fetch_args_kwargs_from_env(n)

    gm = _traced(clock)
    cls = ProfilingInterpreter if lean else Generic
    interp = cls(gm, FakeTimer(clock))
    assert interp.lean is lean
    x = torch.ones(2, 3)
    out = interp.run(x)
    torch.testing.assert_close(out, gm(x))
    times = _times(interp)
    module_node = next(n.name for n in gm.graph.nodes if n.op == "call_module")
    # the module's own 1 ms, none of the 15 ms of lookups that reach it
    assert times[module_node] == pytest.approx(1.0)
    # every other node is free: reading a buffer through slow containers costs the model nothing
    assert sum(t for name, t in times.items() if name != module_node) == pytest.approx(0.0)
    # the run's total still holds what the interpreter did between nodes (so coverage shows
    # it): at least the 5 ms attribute read that every run repeats
    assert interp.recording.run_total_ms[0] >= 6.0
    if lean:  # the plan looked everything else up once, before the run: only that read remains
        assert interp.recording.run_total_ms[0] == pytest.approx(6.0)


def test_attributes_are_read_every_run_so_a_reassigned_buffer_is_seen():
    clock = FakeClock()
    gm = _traced(clock)
    interp = ProfilingInterpreter(gm, FakeTimer(clock))
    x = torch.ones(2, 3)
    first = interp.run(x)
    gm.outer.inner.scale = torch.full((1,), 3.0)  # reassigned, not changed in place
    second = interp.run(x)
    torch.testing.assert_close(second, first * 1.5)


def test_subclass_overrides_still_run_and_are_what_gets_timed():
    clock = FakeClock()
    seen = []

    class Counting(ProfilingInterpreter):
        def call_module(self, target, args, kwargs):
            seen.append(target)
            clock.advance(2.0)  # the override's own work is the node's call now
            return super().call_module(target, args, kwargs)

    gm = _traced(clock)
    interp = Counting(gm, FakeTimer(clock))
    assert not interp.lean
    interp.run(torch.ones(2, 3))
    assert seen == ["outer.inner.inner.inner.work"]
    module_node = next(n.name for n in gm.graph.nodes if n.op == "call_module")
    # 2 ms of override + 1 ms of module + fx's fetch_attr (hasattr and getattr at each of the
    # three slow levels: 30 ms): the override put them inside the node, and that is its choice
    assert _times(interp)[module_node] == pytest.approx(33.0)


_alive: list = []


def make(x):
    y = x + 1
    _alive.append(weakref.ref(y))
    return y


def check_freed(x):
    gc.collect()
    assert _alive[-1]() is None, "a value outlived its last use"
    return x * 2


fx.wrap("make")
fx.wrap("check_freed")


class Frees(nn.Module):
    def forward(self, x):
        a = make(x)
        b = a * 3  # last use of a
        return check_freed(b)


def test_values_are_freed_after_their_last_use_and_outputs_match():
    gm = fxprof.trace(Frees())
    x = torch.ones(4)
    out = ProfilingInterpreter(gm).run(x)
    torch.testing.assert_close(out, gm(x))
    keep = ProfilingInterpreter(gm, garbage_collect_values=False)
    with pytest.raises(AssertionError, match="outlived its last use"):
        keep.run(x)


def test_compiled_plan_handles_placeholder_defaults_star_args_containers_and_methods():
    class M(nn.Module):
        def forward(self, x, scale=2.0):
            parts = x.chunk(2, dim=0)
            joined = torch.cat([parts[1], parts[0]], dim=0)
            y = joined[:, 1:]
            return {"y": y * scale, "shape": y.shape, "pair": (y.sum(), operator.neg(y).mean())}

    gm = fxprof.trace(M())
    x = torch.randn(4, 3)
    interp = ProfilingInterpreter(gm)
    out = interp.run(x)
    ref = gm(x)
    assert out.keys() == ref.keys() and out["shape"] == ref["shape"]
    torch.testing.assert_close(out["y"], ref["y"])
    torch.testing.assert_close(out["pair"], ref["pair"])
    torch.testing.assert_close(interp.run(x, 3.0)["y"], gm(x, 3.0)["y"])

    graph = fx.Graph()  # a *args placeholder takes every remaining input, as torch.fx does
    rest = graph.placeholder("*args")
    graph.output(graph.call_function(torch.stack, (rest,)))
    star = fx.GraphModule(nn.Module(), graph)
    torch.testing.assert_close(ProfilingInterpreter(star).run(torch.ones(2), torch.zeros(2)),
                               torch.stack([torch.ones(2), torch.zeros(2)]))


def test_compiled_plan_errors_name_the_node_and_keep_earlier_runs():
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(8, 4)

        def forward(self, x):
            return self.fc(x.view(x.shape[0], -1))

    gm = fxprof.trace(M())
    interp = ProfilingInterpreter(gm)
    interp.run(torch.randn(2, 8))
    with pytest.raises(RuntimeError, match=r"(?s)node 'fc'.*Tensor\(shape=\[2, 5\]") as info:
        interp.run(torch.randn(2, 5))
    assert node_failure(info.value).node == "fc"
    with pytest.raises(RuntimeError, match="Expected positional argument"):
        interp.run()
    assert interp.recording.runs == 1


def test_boxed_run_clears_the_list_and_matches():
    gm = fxprof.trace(Frees())
    x = torch.ones(4)
    args = [x]
    out = ProfilingInterpreter(gm).boxed_run(args)
    assert args == []
    torch.testing.assert_close(out, gm(x))


def test_graphs_of_every_capture_return_what_the_model_returns():
    import torchvision

    torch.manual_seed(0)
    model = torchvision.models.resnet18(weights=None, num_classes=10).eval()
    x = torch.randn(1, 3, 32, 32)
    with torch.no_grad():
        ref = model(x)
        for capture in ("symbolic", "export", "dynamo"):
            prof = fxprof.profile(model, x, warmup=0, iters=1, capture=capture, anatomy=False)
            assert prof.num_runs == 1 and prof.df["calls"].sum() > 0, capture
        gm = torch.export.export(model, (x,)).module()
        out = ProfilingInterpreter(gm).run(x)
    torch.testing.assert_close(out, ref, rtol=0, atol=0)


def test_shared_recorder_graphs_join_one_run():
    clock = FakeClock()
    recorder = Recorder(FakeTimer(clock))
    gm = _traced(clock)
    first = ProfilingInterpreter(gm, recorder=recorder, prefix="g0:")
    second = ProfilingInterpreter(gm, recorder=recorder, prefix="g1:")
    with recorder.run():
        second.run(first.run(torch.ones(2, 3)).unsqueeze(0).expand(2, 3))
    rec = recorder.recording
    assert rec.runs == 1 and set(rec.run) == {0}
    assert {name.split(":")[0] for name in rec.node} == {"g0", "g1"}
    assert sum(rec.time_ms) == pytest.approx(2.0)


def test_graphs_from_other_tools_run_on_the_compiled_plan():
    import torchvision
    from torch.fx.experimental.proxy_tensor import make_fx
    from torchvision.models.feature_extraction import create_feature_extractor

    torch.manual_seed(0)
    model = torchvision.models.resnet18(weights=None, num_classes=10).eval()
    x = torch.randn(1, 3, 32, 32)
    with torch.no_grad():
        extractor = create_feature_extractor(model, {"layer2": "mid", "fc": "logits"})
        interp = ProfilingInterpreter(extractor)
        out, ref = interp.run(x), extractor(x)
        assert interp.lean and out.keys() == ref.keys()
        for key in ref:
            torch.testing.assert_close(out[key], ref[key], rtol=0, atol=0)
        aten = make_fx(model)(x)  # parameters become get_attr nodes, ops aten calls
        assert any(n.op == "get_attr" for n in aten.graph.nodes)
        torch.testing.assert_close(ProfilingInterpreter(aten).run(x), model(x), rtol=0, atol=0)


def test_container_arguments_are_built_before_the_marks():
    """cat([x, x], dim=0) and view(b, -1): the list and the shape are built before the start mark;
    between the marks stays a plain call (no ``*a, **k`` unpacking, no dict copied)."""
    class Containers(nn.Module):
        def forward(self, x):
            y = torch.cat([x, x], dim=0)
            return y.view(y.shape[0], -1)

    gm = fxprof.trace(Containers())
    interp = ProfilingInterpreter(gm)
    x = torch.randn(2, 3, 4)
    torch.testing.assert_close(interp.run(x), Containers()(x))
    source = interp._compiled.source
    assert "*a" not in source and "**k" not in source
    cat = source.splitlines()
    at = next(i for i, line in enumerate(cat) if "= p0" in line or line.strip().startswith("p0 ="))
    call = next(line.strip() for line in cat[at:] if "(p0" in line)
    assert "dim=0" in call  # the keyword written out in the call itself
