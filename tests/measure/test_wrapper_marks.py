"""Compiled mode's own kernel timer (issue 60): inductor's generated wrapper read and rewritten
with marks (fxprof.measure.compiled.wrapper_sites), the marks swapped in and out of the generated
module (wrapper_timer), the spans of a run (every moment in one span), and compiled profiles
timed by them on real models."""

from __future__ import annotations

import json
import pathlib
import types

import pytest
import torch
from known_cost import spin
from torch import nn

import fxprof
from fxprof.measure.compiled.breaks import OUTSIDE_SPAN, OVERHEAD_SPAN, PART_PREFIX, TAIL_SPAN
from fxprof.measure.compiled.wrapper_sites import NotInstrumentable, instrument
from fxprof.measure.compiled.wrapper_timer import WrapperTimer, installed, spans_from_marks

WRAPPERS = pathlib.Path(__file__).parent / "wrappers"


def _text(name: str) -> str:
    return (WRAPPERS / name).read_text()


def test_every_kernel_call_of_a_real_cpu_wrapper_is_a_site_keyed_by_its_provenance_handle():
    """torch 2.14's wrapper of a Linear-ReLU-Linear-LayerNorm (saved): its four kernel calls, in
    order, each joined to exactly the key inductor's provenance gives it."""
    done = instrument(_text("mlp_cpu_2_14.py.txt"))
    provenance = json.loads(_text("mlp_cpu_2_14.provenance.json"))
    assert [s.key for s in done.sites] == list(provenance["cppCodeToPost"])
    assert [s.kind for s in done.sites] == ["extern", "generated", "extern", "generated"]
    assert [s.callee for s in done.sites] == ["extern_kernels.addmm", "cpp_fused_relu_0", "extern_kernels.addmm",
                                              "cpp_fused_native_layer_norm_1"]
    assert done.is_method and done.width == 2 * len(done.sites) + 2
    slots = sorted(x for s in done.sites for x in (s.start, s.end))
    assert slots == list(range(1, done.width - 1))  # each site two marks of its own; 0 and the last: the call's


def test_a_cuda_shaped_wrapper_keys_each_launch_by_its_own_handle_and_runs_marked_and_restored():
    """A wrapper shaped as inductor writes it for CUDA (launches inside a device guard,
    ``stream0 = get_raw_stream(0)`` between a handle and its ``.run``), with stand-in kernels:
    sites found inside the with-block, each call of the graph a row of its own, outputs equal,
    inductor's code and module exactly as before once removed."""
    source = _text("cuda_shaped.py.txt")
    module = types.ModuleType("fxprof_test_wrapper")
    module.__file__ = "<cuda-shaped wrapper>"
    exec(compile(source, module.__file__, "exec"), module.__dict__)
    before = dict(module.__dict__)
    code = module.Runner.call.__code__
    timer = WrapperTimer("0/0", module, source)
    assert [(s.kind, s.key) for s in timer.sites] == [("extern", "extern_kernels.mm:1"),
                                                      ("triton", "triton_poi_fused_relu_0:2"),
                                                      ("triton", "triton_poi_fused_relu_1:3")]
    a, b = torch.randn(8, 8), torch.randn(8, 8)
    want = module.call([a, b])[0]
    with installed([timer]):
        got = [module.call([a, b])[0] for _ in range(3)]
    rows = timer.take_rows()
    assert len(rows) == 3 and all(len(r) == timer.width for r in rows)
    assert all(r[0] <= r[s.start] <= r[s.end] <= r[-1] for r in rows for s in timer.sites)
    assert all(torch.equal(want, g) for g in got)
    assert module.Runner.call.__code__ is code and module.__dict__.keys() == before.keys()
    module.call([a, b])
    assert timer.take_rows() == []  # removed: no marks kept


def test_a_module_level_call_is_instrumented_and_torch_ops_calls_are_extern_sites():
    source = (
        "import torch\n"
        "def call(args):\n"
        "    a, b = args\n"
        "    # [Provenance debug handles] torch.ops.aten.mm.default:1\n"
        "    buf0 = torch.ops.aten.mm.default(a, b)\n"
        "    return (buf0, )\n"
    )
    done = instrument(source)
    assert not done.is_method
    assert [(s.kind, s.callee, s.key) for s in done.sites] == [("extern", "torch.ops.aten.mm.default",
                                                               "torch.ops.aten.mm.default:1")]


def test_wrappers_that_cannot_be_marked_say_why():
    cpp = ("from torch._inductor.codecache import CppWrapperCodeCache\n"
           "inductor_entry = CppWrapperCodeCache.load_pybinding(['std::vector<AtenTensorHandle>'], 'src', 'cpu', 1)\n"
           "call = _wrap_func(inductor_entry)\n")
    with pytest.raises(NotInstrumentable, match="cpp_wrapper"):
        instrument(cpp)
    views = instrument("def call(args):\n    x, = args\n    return (x, )\n")  # a graph of views: timed as a whole
    assert views.sites == () and views.width == 2
    with pytest.raises(NotInstrumentable, match="does not parse"):
        instrument("def call(args:\n")


class _Timer:
    def __init__(self, sites):
        self.sites = sites


def test_spans_of_a_marked_run_cover_every_moment_once():
    """Two graphs (the first ends in a graph break and its frame runs twice): kernels, each call's
    own Python, the time after each call up to the next (or the run's end), and the entry before
    the first call add up to the run exactly."""
    done = instrument(_text("mlp_cpu_2_14.py.txt"))
    sites = done.sites
    width = done.width

    def row(start: int) -> list[int]:
        r = [0] * width
        r[0] = start
        t = start + 100
        for s in sites:
            r[s.start], r[s.end] = t, t + 1000
            t += 1300
        r[-1] = t + 50
        return r

    a0, a1, b0 = row(2_000), row(30_000), row(60_000)
    kept = [{"0/0": [a0, a1], "1/0": [b0]}]
    spans = spans_from_marks({"0/0": _Timer(sites), "1/0": _Timer(sites)}, kept, [(0, 90_000)])
    parts = [s for s in spans if s.name.startswith(PART_PREFIX)]
    counted = [s for s in spans if not s.name.startswith(PART_PREFIX)]
    assert sum(s.duration_ms for s in counted) == pytest.approx(0.09)
    assert [s.duration_ms for s in counted if s.name == OUTSIDE_SPAN] == [pytest.approx(0.002)]
    tails = sorted((s.graph, s.call, s.duration_ms) for s in counted if s.name == TAIL_SPAN)
    assert tails == [("0/0", 0, pytest.approx((30_000 - a0[-1]) / 1e6)), ("0/0", 1, pytest.approx((60_000 - a1[-1]) / 1e6)),
                     ("1/0", 0, pytest.approx((90_000 - b0[-1]) / 1e6))]
    kernels = [s for s in counted if s.name in {x.key for x in sites}]
    assert len(kernels) == 3 * len(sites) and all(s.duration_ms == pytest.approx(0.001) for s in kernels)
    own = [s.duration_ms for s in counted if s.name == OVERHEAD_SPAN]
    assert own == [pytest.approx((100 + 300 * len(sites) + 50) / 1e6)] * 3 and len(parts) == 3


class _MLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1, self.fc2, self.norm = nn.Linear(64, 128), nn.Linear(128, 64), nn.LayerNorm(64)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(self.fc2(torch.relu(self.fc1(x))) + x)


def _generated_calls(profile_model: nn.Module) -> list[types.CodeType]:
    """The code objects of the generated calls of fxprof's compile of ``profile_model``."""
    from torch._inductor.codecache import PyCodeCache

    from fxprof.measure.compiled.reuse import _KEPT

    files = [p for ref in _KEPT.get(profile_model, []) if ref() is not None for ps in ref().kept.catcher.files.values()
             for p in ps]
    mods = [m for m in PyCodeCache.modules if getattr(m, "__file__", None) in files]
    return [WrapperTimer._generated_call(m).__code__ for m in mods]


def test_a_compiled_profile_is_timed_by_the_marks_charged_by_key_and_leaves_the_program_as_it_was():
    """The compiled MLP's profile: no torch.profiler, every kernel call site a row keyed as the
    profiler-timed profile keys it (same rows, origins and FLOPs), no unmatched row, the rows
    adding up to the profiled run; the model's output bitwise the same after, and fxprof's copy of
    the generated code runs inductor's own code again."""
    torch.manual_seed(0)
    model = _MLP().eval()
    x = torch.randn(4, 64)
    compiled = torch.compile(model)
    with torch.no_grad():
        before = compiled(x)
        profile = fxprof.profile(compiled, x, warmup=2, iters=8, memory=False)
        after = compiled(x)
    assert torch.equal(before, after)
    compiled_meta = profile.meta["compiled"]
    assert profile.meta["timer"] == "marks" and "marks" in compiled_meta["kernel_source"]
    assert "kernel_source_reason" not in compiled_meta and compiled_meta["clock_read_ns"] > 0
    assert "profiler_cost" not in compiled_meta
    df = profile.df
    kernels = df[df["role"] == "kernel"]
    assert len(kernels) == compiled_meta["kernels"] and (kernels["calls_per_run"] == 1).all()
    assert not (df["role"] == "unmatched").any()
    assert not any("no call site among the marks" in n for n in profile.meta.get("notes", []))  # every kernel's site found
    assert "marks" in profile.summary(width=120)
    codes = _generated_calls(model)
    assert codes and all("_fxk_t" not in c.co_varnames for c in codes)

    import fxprof.measure.compiled.mode as mode

    real = mode.not_marked_reason
    mode.not_marked_reason = lambda *a, **k: "asked by the test"
    try:
        with torch.no_grad():
            by_profiler = fxprof.profile(compiled, x, warmup=2, iters=8, memory=False)
    finally:
        mode.not_marked_reason = real
    assert by_profiler.meta["compiled"]["kernel_source_reason"] == "asked by the test"
    theirs = by_profiler.df[by_profiler.df["role"] == "kernel"]
    assert list(theirs.index) == list(kernels.index)
    assert theirs["origins"].tolist() == kernels["origins"].tolist()
    assert theirs["flops"].tolist() == kernels["flops"].tolist()


class _Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(32, 32), nn.Linear(32, 32)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.relu(self.fc1(x))
        torch._dynamo.graph_break()
        return self.fc2(x) * 2


class _Breaks(nn.Module):
    """A graph break inside a block three layers run: the block's graphs are entered again and again."""

    def __init__(self) -> None:
        super().__init__()
        self.b0, self.b1, self.b2 = _Block(), _Block(), _Block()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.b2(self.b1(self.b0(x)))


def test_graph_breaks_under_the_marks_keep_a_row_per_call_and_the_rows_add_up_to_the_run():
    model = _Breaks().eval()
    x = torch.randn(2, 32)
    with torch.no_grad():
        profile = fxprof.profile(torch.compile(model), x, warmup=2, iters=8, memory=False)
    assert profile.meta["timer"] == "marks"
    df = profile.df
    assert (df["op"] == "graph_break").any()
    assert (df.loc[df["role"] == "kernel", "calls_per_run"] >= 1).all()
    assert df.loc[df["role"] == "kernel", "calls_per_run"].max() >= 2  # a re-entered graph: a row per call
    samples = profile.samples
    per_run = samples.groupby("run")["time_ms"].sum()
    totals = profile.runs.set_index("run")["total_ms"]
    assert (per_run / totals.loc[per_run.index]).between(0.98, 1.0 + 1e-9).all()


class _LogsBetweenBreaks(nn.Module):
    """torchvision's first line of a forward, ``torch._C._log_api_usage_once``, alone between two
    breaks: dynamo compiles a graph of it, and inductor generates no code for a graph that makes
    no tensor (fasterrcnn_mobilenet_v3_large_320_fpn fell back to torch.profiler for it)."""

    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = nn.Linear(8, 8), nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.a(x)
        torch._dynamo.graph_break()
        torch._C._log_api_usage_once("fxprof.test")
        torch._dynamo.graph_break()
        return self.b(y)


def test_a_graph_that_makes_no_tensor_needs_no_marks_and_the_others_keep_theirs():
    torch.manual_seed(0)
    model = _LogsBetweenBreaks().eval()
    x = torch.randn(2, 8)
    with torch.no_grad():
        expected = model(x)
        profile = fxprof.profile(model, x, compile=True, warmup=1, iters=4, memory=False)
    assert profile.meta["timer"] == "marks", profile.meta["compiled"].get("kernel_source_reason")
    assert profile.meta["compiled"]["graphs"] == 3
    kernels = profile.df[profile.df["role"] == "kernel"]
    assert {"a", "b"} <= {o for origins in kernels["origins"] for o in str(origins).split(",")}
    per_run = profile.samples.groupby("run")["time_ms"].sum()
    totals = profile.runs.set_index("run")["total_ms"]
    assert (per_run / totals.loc[per_run.index]).between(0.98, 1.0 + 1e-9).all()  # its time is still in a row
    with torch.no_grad():
        torch.testing.assert_close(model(x), expected)


class _Spins(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for us in (300, 40, 1200):
            x = torch.relu(spin(x, us))
        return x


def test_the_marks_read_kernels_of_known_cost_each_at_its_own_site():
    """Ground truth: three extern calls that hold the CPU for 300, 40 and 1200 us of wall time.
    Each row reads at least its own time (a span holds the whole call), not much more (one op
    dispatch; generous for a busy machine), and in its own place: a mark misplaced by one site
    would give a row its neighbour's time. tests/benchmarks/marks_truth.py holds the same and
    library mms against torch.utils.benchmark.Timer (docs/performance.md section 17)."""
    with torch.no_grad():
        profile = fxprof.profile(torch.compile(_Spins()), torch.randn(16, 16), warmup=2, iters=9, memory=False)
    assert profile.meta["timer"] == "marks"
    df = profile.df
    spins = df[(df["op"] == "extern") & df["target"].str.contains("spin")]
    assert len(spins) == 3
    for (_, row), us in zip(spins.iterrows(), (300, 40, 1200)):  # rows in call order
        assert us / 1e3 <= row["median_ms"] <= 1.5 * us / 1e3 + 0.2, (row.name, row["median_ms"], us)
    others = df[(df["role"] == "kernel") & ~df.index.isin(spins.index)]
    assert (others["median_ms"] < 0.04).all()  # the relus between them: none took a spin's time


@pytest.mark.slow
def test_a_cpp_wrapper_program_is_timed_by_torch_profiler_and_says_why():
    """inductor's cpp_wrapper writes the wrapper in C++: no Python statements to mark, so the
    profile falls back to torch.profiler, its reason in meta and in the header."""
    model = _MLP().eval()
    x = torch.randn(2, 64)
    with torch.no_grad():
        profile = fxprof.profile(model, x, compile={"options": {"cpp_wrapper": True}}, warmup=1, iters=4, memory=False)
    compiled = profile.meta["compiled"]
    assert profile.meta["timer"] != "marks" and "cpp_wrapper" in compiled["kernel_source_reason"]
    assert "timed by torch.profiler (cpp_wrapper=True" in profile.summary(width=200)
    assert (profile.df["role"] == "kernel").sum() == compiled["kernels"]


def test_a_session_marks_a_graph_compiled_after_its_first_timed_step():
    """A second input shape (dynamic=False) compiles a second graph in the middle of a session: its
    calls get marks of their own from the next timed step on, and both graphs' kernels are rows
    with samples; no note of unmarked graphs."""
    torch.manual_seed(0)
    model = _MLP().eval()
    compiled = torch.compile(model, dynamic=False)
    small, large = torch.randn(2, 64), torch.randn(5, 64)
    with torch.no_grad(), fxprof.session(compiled, schedule=fxprof.schedule(wait=1, warmup=1, active=8)) as s:
        for i in range(10):
            compiled(small if i < 5 else large)
            s.step()
    p = s.profiles[0]
    assert p.meta["timer"] == "marks"
    kernels = p.df[p.df["role"] == "kernel"]
    graphs = set(kernels["graph"])
    assert len(graphs) == 2, graphs
    sampled = set(p.samples["node"].astype(str))
    assert all(set(kernels.index[kernels["graph"] == g]) & sampled for g in graphs)
    assert not any("had no marks" in n for n in p.meta.get("notes", []))


def test_a_session_puts_its_marks_in_once_a_graph_and_runs_them_warm_before_the_timed_steps(monkeypatch):
    """Swapping the marks in and out around every timed step made each step a first call of the
    swapped code (about 3% of a compiled decode step), and making them at the first timed step put
    milliseconds of fxprof's work (parsing and compiling the wrappers) before it: a compiled decode
    step's first timed steps read 1.1-0.7 ms against 0.4 ms after (docs/performance.md section 17).
    Each graph's marks now go in after the call that compiled it, a warm-up or a new signature's
    first call, which run them as the timed steps will (their rows dropped), and stay to the cycle's
    end: after the session, fxprof's copy runs inductor's code."""
    from fxprof.measure.compiled import in_session

    swaps: list[str] = []
    install, remove = WrapperTimer.install, WrapperTimer.remove

    def counted_install(self: WrapperTimer) -> None:
        swaps.append("" if self.installed else "in")
        install(self)

    def counted_remove(self: WrapperTimer) -> None:
        swaps.append("out" if self.installed else "")
        remove(self)

    marked: list[bool] = []  # at each call of fxprof's copy: were its marks in?
    real_call = in_session.LoopCompiledCapture._call

    def spied(self: in_session.LoopCompiledCapture, args: tuple, kwargs: dict) -> object:
        marked.append(any(t.installed for t in self._timers.values()))
        return real_call(self, args, kwargs)

    monkeypatch.setattr(WrapperTimer, "install", counted_install)
    monkeypatch.setattr(WrapperTimer, "remove", counted_remove)
    monkeypatch.setattr(in_session.LoopCompiledCapture, "_call", spied)
    torch.manual_seed(0)
    model = _MLP().eval()
    compiled = torch.compile(model, dynamic=False)
    small, large = torch.randn(2, 64), torch.randn(5, 64)
    with torch.no_grad(), fxprof.session(compiled, schedule=fxprof.schedule(warmup=1, active=5)) as s:
        for x in (small, small, small, large, small, large):  # step 3: a new signature's first call, untimed
            compiled(x)
            s.step()
        capture = next(iter(s._captures.values()))
    assert marked == [False, True, True, True, True, True]  # from the call after the warm-up's compile on
    assert [w for w in swaps if w] == ["in", "in", "out", "out"]  # once a graph, not a step
    timers = list(capture._timers.values())
    assert len(timers) == 2 and not any(t.installed for t in timers)
    assert all(t._target.__code__ is t._original for t in timers)
    p = s.profiles[0]
    assert p.meta["timer"] == "marks" and len(p.runs) == 4
    assert all(not t.rows for t in timers)


def test_a_session_that_defers_builds_makes_each_cycles_profile_of_its_own_runs_after_the_run_of_cycles():
    """fxprof.generate's prefill is a cycle of its own and the decode steps the next one: making
    the prefill's profile between them (45 ms of Python) left the first decode steps in cold
    caches (1 ms against 0.4). With ``defer_builds`` a cycle another follows at the next step is
    built when that run of cycles ends: each profile holds its own cycle's runs, in order, exactly
    as built at once; with ``on_ready`` the cycles are built at once, as before."""
    torch.manual_seed(0)
    model = _MLP().eval()
    compiled = torch.compile(model, dynamic=False)
    inputs = [torch.randn(2, 64), torch.randn(2, 64), torch.randn(3, 64), torch.randn(3, 64), torch.randn(3, 64)]
    seen: list[list[int]] = []
    ready: list[int] = []

    def plan(step: int) -> str:  # as fxprof.generate's: a cycle of one step, then right away one of two
        return ["warmup", "warmup", "active_last", "active", "active_last"][step] if step < 5 else "none"

    def loop(defer: bool, on_ready=None) -> list:
        with torch.no_grad(), fxprof.session(compiled, schedule=plan, on_ready=on_ready) as s:
            s.defer_builds = defer
            for x in (inputs[0], inputs[2], inputs[1], inputs[3], inputs[4], inputs[0]):  # warm-ups (both shapes), cycles
                compiled(x)
                s.step()
                seen.append([len(s.profiles)])
        return s.profiles

    at_once = loop(False)
    counts_at_once, seen[:] = [c[0] for c in seen], []
    later = loop(True)
    counts_later, seen[:] = [c[0] for c in seen], []
    assert counts_at_once[-1] == 2 and counts_later[-1] == 2
    assert counts_at_once == [0, 0, 1, 1, 2, 2] and counts_later == [0, 0, 0, 0, 2, 2]  # the first came with the second
    for a, b, runs in zip(at_once, later, (1, 2)):
        assert b.meta["timer"] == "marks" and len(b.runs) == len(a.runs) == runs
        assert b.meta["cycle"] == a.meta["cycle"] and b.meta["run_steps"] == a.meta["run_steps"]
        assert b.meta["run_signatures"] == a.meta["run_signatures"]
        assert list(b.df.index) == list(a.df.index) and (b.samples.groupby("node", observed=True).size()
                                                       == a.samples.groupby("node", observed=True).size()).all()
    loop(True, on_ready=lambda p: ready.append(p.meta["cycle"]))
    assert ready == [0, 1] and [c[0] for c in seen] == [0, 0, 1, 1, 2, 2]  # on_ready: each at its cycle's end
