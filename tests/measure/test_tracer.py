"""ProfilerTracer keeps record_function ranges, restores its patch, and traces real models."""

from __future__ import annotations

import pytest
import torch
from torch import fx, nn
from torch.profiler import ProfilerActivity, record_function

import fxprof
from fxprof.measure.capture.tracer import RANGE_ENTER_TARGETS, RANGE_EXIT_TARGETS

_ORIGINAL_ENTER = record_function.__enter__
_ORIGINAL_EXIT = record_function.__exit__


@record_function("helper")
def helper(x: torch.Tensor) -> torch.Tensor:
    return torch.relu(x) * 3


class Ranged(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        with record_function("outer"):
            x = self.lin(x)
            with record_function("inner"):
                x = torch.sigmoid(x)
            x = x + 1
        x = helper(x)
        x = helper(x)
        return x.sum(dim=-1)


def _range_nodes(gm: fx.GraphModule) -> list[tuple[str, str]]:
    out = []
    for n in gm.graph.nodes:
        if n.op == "call_function" and n.target in RANGE_ENTER_TARGETS:
            out.append(("enter", n.args[0]))
        elif n.op == "call_function" and n.target in RANGE_EXIT_TARGETS:
            out.append(("exit", n.args[0].args[0]))
    return out


def test_plain_symbolic_trace_drops_ranges_and_ours_keeps_them():
    model = Ranged()
    assert _range_nodes(fx.symbolic_trace(model)) == []
    gm = fxprof.trace(model)
    assert _range_nodes(gm) == [
        ("enter", "outer"),
        ("enter", "inner"),
        ("exit", "inner"),
        ("exit", "outer"),
        ("enter", "helper"),
        ("exit", "helper"),
        ("enter", "helper"),
        ("exit", "helper"),
    ]


def test_traced_module_computes_the_same_and_survives_dead_code_elimination():
    torch.manual_seed(0)
    model = Ranged()
    x = torch.randn(4, 8)
    gm = fxprof.trace(model)
    before = len(gm.graph.nodes)
    gm.graph.eliminate_dead_code()
    gm.recompile()
    assert len(gm.graph.nodes) == before
    torch.testing.assert_close(gm(x), model(x), rtol=0, atol=0)


def test_ranges_are_visible_to_torch_profiler_with_parentage():
    gm = fxprof.trace(Ranged())
    with torch.profiler.profile(activities=[ProfilerActivity.CPU]) as prof:
        gm(torch.randn(2, 8))
    events = {e.name: e for e in prof.events()}
    assert {"outer", "inner", "helper"} <= set(events)
    helpers = [e for e in prof.events() if e.name == "helper"]
    assert len(helpers) == 2
    inner = events["inner"]
    assert inner.cpu_parent is not None and inner.cpu_parent.name == "outer"


def test_patch_is_undone_after_success_and_after_failure():
    fxprof.trace(Ranged())
    assert record_function.__enter__ is _ORIGINAL_ENTER
    assert record_function.__exit__ is _ORIGINAL_EXIT

    class Untraceable(nn.Module):
        def forward(self, x):
            with record_function("doomed"):
                if x.sum() > 0:  # data-dependent control flow
                    return x
                return -x

    with pytest.raises(fxprof.TraceError) as info:
        fxprof.trace(Untraceable())
    assert record_function.__enter__ is _ORIGINAL_ENTER
    assert record_function.__exit__ is _ORIGINAL_EXIT
    message = str(info.value)
    assert "Untraceable" in message and "leaf_modules" in message and "concrete_args" in message
    # record_function still works for real afterwards
    with torch.profiler.profile(activities=[ProfilerActivity.CPU]) as prof:
        with record_function("after"):
            torch.ones(2) + 1
    assert "after" in {e.name for e in prof.events()}


def test_decorator_instance_state_is_cleared_between_traces():
    (instance,) = [c.cell_contents for c in helper.__closure__ if isinstance(c.cell_contents, record_function)]
    gm1 = fxprof.trace(Ranged())
    assert not any(k.startswith("_fxprof") for k in vars(instance))
    gm2 = fxprof.trace(Ranged())
    assert _range_nodes(gm1) == _range_nodes(gm2)
    assert not any(k.startswith("_fxprof") for k in vars(instance))


def test_leaf_modules_by_type_and_name(resnet18):
    by_type = fxprof.trace(resnet18, leaf_modules=[type(resnet18.layer1[0])])
    blocks = [n.target for n in by_type.graph.nodes if n.op == "call_module" and n.target.count(".") == 1]
    assert blocks == [f"layer{i}.{j}" for i in range(1, 5) for j in range(2)]
    by_name = fxprof.trace(resnet18, leaf_modules=["layer3"])
    assert "layer3" in [n.target for n in by_name.graph.nodes if n.op == "call_module"]
    with pytest.raises(TypeError, match="leaf_modules"):
        fxprof.trace(resnet18, leaf_modules=[42])


def test_resnet18_graph_matches_symbolic_trace(resnet18):
    ours = fxprof.trace(resnet18)
    theirs = fx.symbolic_trace(resnet18)
    assert [n.name for n in ours.graph.nodes] == [n.name for n in theirs.graph.nodes]
    assert len(ours.graph.nodes) == 71
    # shares, not copies, the model's parameters
    assert ours.conv1.weight is resnet18.conv1.weight


def test_other_threads_ranges_run_for_real_while_tracing(resnet18):
    import threading

    stop = threading.Event()
    errors = []

    def background():
        try:
            while not stop.is_set():
                with record_function("bg"):
                    torch.ones(4).sum()
        except Exception as exc:  # pragma: no cover - the failure being tested for
            errors.append(exc)

    worker = threading.Thread(target=background)
    worker.start()
    try:
        for _ in range(3):
            gm = fxprof.trace(resnet18)
            assert _range_nodes(gm) == []
    finally:
        stop.set()
        worker.join()
    assert errors == []


class _Autocast(nn.Module):
    """A bfloat16 autocast region inside forward (the first linear), the second in float32."""

    def __init__(self, fail: bool = False):
        super().__init__()
        self.a = nn.Linear(16, 16)
        self.b = nn.Linear(16, 16)
        self.fail = fail

    def forward(self, x):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            y = self.a(x)
            if self.fail:
                y = y @ torch.ones(3, 3)  # wrong shapes: fails inside the region
        return self.b(y.float())


def test_autocast_inside_forward_is_kept_in_the_symbolic_graph():
    """issue 26 #4: symbolic tracing ran torch.autocast's __enter__ at trace time and left no
    node, so the default capture ran (and timed) the region in float32."""
    torch.manual_seed(0)
    model = _Autocast().eval()
    x = torch.randn(4, 16)
    gm = fxprof.trace(model)
    targets = [n.target for n in gm.graph.nodes if n.op == "call_function"]
    assert torch.amp.autocast_mode._enter_autocast in targets and torch.amp.autocast_mode._exit_autocast in targets
    assert torch.equal(gm(x), model(x))
    prof = fxprof.profile(model, x, warmup=0, iters=2)
    assert prof.meta["capture"] == "symbolic"
    assert prof.df.loc["a", "dtype"] == "bfloat16" and prof.df.loc["b", "dtype"] == "float32"
    assert not torch.is_autocast_enabled("cpu")
    # a failure inside the region does not leave the caller's process in autocast
    with pytest.raises(RuntimeError, match="fxprof: node"):
        fxprof.profile(_Autocast(fail=True).eval(), x, warmup=0, iters=2, capture="symbolic")
    assert not torch.is_autocast_enabled("cpu") and torch.get_autocast_dtype("cpu") == torch.bfloat16
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert model.a(x).dtype == torch.bfloat16
    assert model.a(x).dtype == torch.float32
