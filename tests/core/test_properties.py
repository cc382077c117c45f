"""Property tests: random small graphs mixing modules, functions, methods, getitem and in-place
ops. For each: every executed node is timed on every run, outputs equal the GraphModule's own
execution, and shares sum to 100."""

from __future__ import annotations

import operator

import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch import fx, nn

import fxprof

WIDTH = 6
OPS = ["linear", "relu_module", "relu", "add", "mul_scalar", "tanh_method", "chunk_cat", "add_inplace", "sum_keep", "relu_inplace_alias"]


def build(ops: list[str], picks: list[int]) -> fx.GraphModule:
    root = nn.Module()
    graph = fx.Graph()
    values = [graph.placeholder("x")]
    for i, op in enumerate(ops):
        a = values[picks[i] % len(values)]
        b = values[(picks[i] // 7) % len(values)]
        if op == "linear":
            root.add_module(f"lin{i}", nn.Linear(WIDTH, WIDTH))
            out = graph.call_module(f"lin{i}", (a,))
        elif op == "relu_module":
            root.add_module(f"act{i}", nn.ReLU())
            out = graph.call_module(f"act{i}", (a,))
        elif op == "relu":
            out = graph.call_function(torch.relu, (a,))
        elif op == "add":
            out = graph.call_function(operator.add, (a, b))
        elif op == "mul_scalar":
            out = graph.call_function(operator.mul, (a, 0.5))
        elif op == "tanh_method":
            out = graph.call_method("tanh", (a,))
        elif op == "chunk_cat":
            parts = graph.call_method("chunk", (a, 2), {"dim": 1})
            first = graph.call_function(operator.getitem, (parts, 0))
            second = graph.call_function(operator.getitem, (parts, 1))
            out = graph.call_function(torch.cat, ((second, first),), {"dim": 1})
        elif op == "add_inplace":
            fresh = graph.call_method("clone", (a,))
            out = graph.call_method("add_", (fresh, 1.0))
        elif op == "relu_inplace_alias":
            # in place on a value other nodes may still read (not a fresh clone): aliasing
            if a.op == "placeholder":
                a = graph.call_method("clone", (a,))
            out = graph.call_method("relu_", (a,))
        else:  # sum_keep: a reduction broadcast back
            s = graph.call_method("sum", (a,), {"dim": 1, "keepdim": True})
            out = graph.call_function(operator.add, (a, s))
        values.append(out)
    graph.output((values[-1], values[len(values) // 2]))
    gm = fx.GraphModule(root, graph)
    gm.graph.lint()
    return gm


graphs = st.integers(min_value=1, max_value=12).flatmap(
    lambda n: st.tuples(st.lists(st.sampled_from(OPS), min_size=n, max_size=n),
                        st.lists(st.integers(min_value=0, max_value=10_000), min_size=n, max_size=n))
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(spec=graphs, iters=st.integers(min_value=1, max_value=3), batch=st.integers(min_value=1, max_value=3))
def test_random_graphs_are_fully_timed_and_unchanged(spec, iters, batch):
    ops, picks = spec
    torch.manual_seed(0)
    gm = build(ops, picks).eval()
    x = torch.randn(batch, WIDTH)
    with torch.no_grad():
        expected = gm(x.clone())
        got = fxprof.ProfilingInterpreter(gm).run(x.clone())
    torch.testing.assert_close(got, expected, rtol=0, atol=0)

    prof = fxprof.profile(gm, x, warmup=1, iters=iters, anatomy=False)
    df = prof.df
    names = [n.name for n in gm.graph.nodes]
    assert list(df.index) == names
    assert (df["calls"] == iters).all()
    samples = prof.samples
    assert len(samples) == len(names) * iters
    assert samples.groupby("run", observed=True).size().eq(len(names)).all()
    total = df["pct"].sum()
    assert abs(total - 100.0) < 1e-9 or (total == 0 and df["mean_ms"].sum() == 0)
    assert (samples["time_ms"] >= 0).all()
