"""Fidelity (issue 39 items 1-2, issue 31 d): every profile times the model's own forward beside
its runs and says how close the profiled run is; the time in no node is a row; a captured
program that dispatches other aten ops than the model is named."""

from __future__ import annotations

import pathlib
import time
import warnings

import pytest
import torch
from torch import nn

import fxprof
from fxprof.core.fidelity import describe_differences, dispatch_differences, fidelity
from fxprof.measure.eager.fidelity import own_run_slots

GOLDEN = pathlib.Path(__file__).parents[1] / "golden"

from conftest import HoldsCompiled


# ------------------------------------------------------------------------- pure figures
def test_differences_name_the_ops_and_their_counts():
    eager = {"aten::_scaled_dot_product_cudnn_attention": 12, "aten::addmm": 48}
    captured = {"aten::_scaled_dot_product_attention_math": 12, "aten::addmm": 48}
    found = dispatch_differences(eager, captured)
    assert {op for op, _, _ in found} == {"aten::_scaled_dot_product_cudnn_attention", "aten::_scaled_dot_product_attention_math"}
    text = describe_differences(found)
    assert text.startswith("the captured graph runs aten::_scaled_dot_product_attention_math 12x where the model runs "
                           "aten::_scaled_dot_product_cudnn_attention 12x")
    assert dispatch_differences(eager, dict(eager)) == [] and describe_differences([]) == ""
    only_missing = describe_differences(dispatch_differences({"aten::relu": 2}, {}))
    assert only_missing.startswith("the captured graph does not run aten::relu 2x")


def test_ratio_and_outside_time_from_the_own_runs():
    meta = {"own_runs_ms": [10.0, 12.0, 11.0], "device": "cuda:0"}
    found = fidelity(meta, [13.0, 13.2, 12.8], [4.0, 5.0])
    assert found.own_ms == 11.0 and found.profiled_ms == 13.0
    assert found.ratio == pytest.approx(13.0 / 11.0)
    assert found.outside_ms == pytest.approx(2.0) and found.outside_shown
    assert not found.too_slow  # 1.18x
    assert fidelity({**meta, "own_runs_ms": [10.0]}, [12.5], [9.0]).too_slow  # 1.25x on a GPU
    assert not fidelity({"own_runs_ms": [10.0], "device": "cpu"}, [12.5], [9.0]).too_slow  # the limit is the GPU's
    assert fidelity({}, [1.0], [1.0]) is None  # nothing measured, nothing said
    compiled = fidelity({"compiled": {"unprofiled_ms": [2.0, 4.0]}}, [3.3], [])
    assert compiled.own_ms == 3.0 and compiled.ratio == pytest.approx(1.1)


@pytest.mark.parametrize("iters, count", [(1, 1), (3, 3), (10, 3), (20, 5), (200, 5)])
def test_a_few_own_runs_spread_over_the_profiled_runs(iters, count):
    slots = own_run_slots(iters)
    assert len(slots) == count and all(0 <= s < iters for s in slots)


# ------------------------------------------------------------------------- real profiles
def _quiet_profile(*args, **kwargs):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        prof = fxprof.profile(*args, peaks=None, **kwargs)
    return prof, [str(w.message) for w in caught if str(w.message).startswith("fxprof:")]


def test_every_profile_says_how_close_it_is_to_the_models_own_run(resnet18, small_image):
    from conftest import stated

    warned = []

    def make():
        prof, said = _quiet_profile(resnet18, small_image, warmup=1, iters=6)
        warned.append(said)
        return prof

    prof = stated(make)
    said = warned[-1]
    own = prof.meta["own_runs_ms"]
    assert len(own) == 3 and all(v > 0 for v in own)
    line = next(line for line in prof.summary().splitlines() if line.startswith("fidelity: profiled run"))
    assert "x the model's own (" in line and "median of 3 unprofiled runs" in line
    assert said == [] and "dispatch_differences" not in prof.meta  # resnet18's graph runs what the model runs


def test_saved_profile_keeps_the_own_runs(tmp_path, resnet18, small_image):
    prof, _ = _quiet_profile(resnet18, small_image, warmup=1, iters=3)
    path = tmp_path / "p.json"
    prof.save(path)
    loaded = fxprof.load(path)
    assert loaded.meta["own_runs_ms"] == prof.meta["own_runs_ms"]
    assert [line for line in loaded.summary().splitlines() if line.startswith("fidelity:")] == \
        [line for line in prof.summary().splitlines() if line.startswith("fidelity:")]


def test_a_timer_of_the_users_gets_no_own_runs(clock, fake_timer):
    from conftest import FakeCostModel

    prof = fxprof.profile(FakeCostModel(clock), torch.ones(2, 2), timer=fake_timer, warmup=0, iters=2, peaks=None)
    assert "own_runs_ms" not in prof.meta
    assert "fidelity:" not in prof.summary()


def test_own_runs_are_read_on_the_timers_clock(resnet18, small_image):
    """Rows and own runs on one clock: a CPU timer reading another clock (the zoo's thread CPU
    clock) times the own runs on it too; on the wall clock, a loaded machine's own runs read 5x
    the thread-clock rows (the zoo's (d): 121.6 ms of rows against 21.4 ms own)."""
    from fxprof.measure.timing.timers import CpuTimer

    ticks = iter(range(0, 10**15, 10**6))  # every reading 1 ms after the last

    class TickTimer(CpuTimer):
        name = "cpu"

        def __init__(self):
            self.mark = self.host_ns = lambda: next(ticks)

    prof = fxprof.profile(resnet18, small_image, timer=TickTimer(), warmup=1, iters=6, peaks=None, anatomy=False,
                          memory=False)
    own = prof.meta["own_runs_ms"]
    assert own and all(ms == 1.0 for ms in own), own  # two readings of the timer's clock a run


class Branchy(nn.Module):
    """Takes another path while it is traced (the pattern of models that check
    ``torch.compiler.is_compiling()``): relu in the graph, sigmoid when it runs eagerly."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(8, 8)

    def forward(self, x):
        y = self.lin(x)
        if torch.compiler.is_compiling() or torch.fx._symbolic_trace.is_fx_tracing():
            return torch.relu(y)
        return torch.sigmoid(y)


@pytest.mark.parametrize("capture", ["symbolic", "dynamo"])
def test_a_graph_that_runs_other_ops_than_the_model_is_named(capture):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch's own is_fx_tracing advice
        prof, said = _quiet_profile(Branchy().eval(), torch.randn(2, 8), warmup=1, iters=3, capture=capture)
    expected = "the captured graph runs aten::relu 1x where the model runs aten::sigmoid 1x"
    assert any(expected in s for s in said)
    assert any(expected in note for note in prof.meta["notes"])
    assert expected in prof.summary()  # the header (and so the HTML report, which shows it)
    diffs = {d["op"]: (d["model"], d["captured"]) for d in prof.meta["dispatch_differences"]}
    assert diffs["aten::sigmoid"] == (1, 0) and diffs["aten::relu"] == (0, 1)


def test_in_place_and_out_of_place_twins_are_the_same_work():
    class InPlace(nn.Module):  # `y += x` traces as operator.iadd, which the graph runs out of place
        def forward(self, x):
            y = x * 2
            y += x
            return y

    _, said = _quiet_profile(InPlace(), torch.randn(4), warmup=1, iters=3)
    assert said == []


class SlowPython(nn.Module):
    """Eager Python that no dynamo graph holds: a function dynamo is told to leave alone."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(16, 16)
        self.b = nn.Linear(16, 16)

    def forward(self, x):
        x = self.a(x)
        _wait()
        return self.b(x)


@torch.compiler.disable
def _wait() -> None:
    time.sleep(0.004)


def test_time_outside_the_graph_is_a_row_with_its_measured_time():
    from conftest import stated

    prof = stated(lambda: _quiet_profile(SlowPython().eval(), torch.randn(2, 16), warmup=1, iters=6, capture="dynamo")[0])
    text = prof.summary()
    row = next(line for line in text.splitlines() if line.startswith("(outside the graph)"))
    assert row.split()[3] == "outside"  # its kind
    from fxprof.views.fidelity import profile_fidelity

    found = profile_fidelity(prof)
    assert found.outside_ms >= 3.5  # the 4 ms sleep between the graphs, at least
    assert found.node_ms + found.outside_ms == pytest.approx(found.own_ms)  # the rows add up to the own run
    # the row stays out of the ranking: sorted tables rank nodes only, and it comes after them
    ranked = prof.summary(sort="median_ms").splitlines()
    table = [line for line in ranked if line.startswith(("a", "b", "(outside"))]
    assert table[-1].startswith("(outside the graph)")
    assert "(outside the graph)" not in prof.df.index  # the data stays the nodes'


@pytest.mark.slow
def test_a_small_hf_bert_through_dynamo_does_not_warn():
    transformers = pytest.importorskip("transformers")
    config = transformers.BertConfig(num_hidden_layers=2, hidden_size=64, num_attention_heads=2, intermediate_size=128,
                                     vocab_size=1000)
    torch.manual_seed(0)
    model = transformers.BertModel(config).eval()
    # dynamo's caches start empty: after another BERT of other sizes was captured in this process,
    # dynamo recompiles BertModel.forward with dynamic shapes, whose graph really does run extra
    # aten::to calls, and the check rightly says so (seen after tests/core/test_names.py's BERT)
    torch._dynamo.reset()
    prof, said = _quiet_profile(model, torch.randint(0, 1000, (1, 16)), warmup=1, iters=3)
    assert prof.meta["capture"] == "dynamo"
    assert [s for s in said if "captured graph" in s] == [] and "dispatch_differences" not in prof.meta
    assert len(prof.meta["own_runs_ms"]) == 3


def test_a_session_times_the_models_own_forward_at_its_eager_steps(resnet18, small_image):
    with torch.no_grad(), fxprof.session(resnet18, schedule=fxprof.schedule(wait=4, warmup=1, active=2)) as s:
        for _ in range(7):
            resnet18(small_image)
            s.step()
    prof = s.profiles[0]
    # the loop's first call is cold (its first forward ever): run, not kept; the 3 after it are
    assert len(prof.meta["own_runs_ms"]) == 3
    assert "3 unprofiled runs at the loop's eager steps" in prof.summary()
    with torch.no_grad(), fxprof.session(resnet18, schedule=fxprof.schedule(wait=0, warmup=1, active=2)) as s:
        for _ in range(4):
            resnet18(small_image)
            s.step()
    assert "own_runs_ms" not in s.profiles[0].meta
    assert any(n.startswith("no fidelity line: a session times the model's own forward") for n in s.profiles[0].meta["notes"])
    # docs/session.md (27 Nov): with wait=1 and repeat=2 both eager steps (0 and 5) ran this very shape, each cold;
    # the note said that no eager step had run it
    with torch.no_grad(), fxprof.session(resnet18, schedule=fxprof.schedule(wait=1, warmup=1, active=1, repeat=2)) as s:
        for _ in range(6):
            resnet18(small_image)
            s.step()
    note = next(n for n in s.profiles[1].meta["notes"] if n.startswith("no fidelity line"))
    assert "the 2 eager step(s) of the schedule (wait, skip_first) that ran a batch of this shape" in note, note
    assert "no eager step" not in note


def test_over_the_gpu_limit_the_line_says_what_to_do(resnet18, small_image):
    prof, _ = _quiet_profile(resnet18, small_image, warmup=0, iters=3)
    prof.meta.pop("contention", None)  # as on a quiet machine: the ratio is stated
    median = sorted(prof.kept_totals())[len(prof.kept_totals()) // 2]
    prof.meta.update(own_runs_ms=[median / 1.5] * 3, device="cuda:0")  # as a GPU profile 1.5x its own run
    line = next(line for line in prof.summary().splitlines() if line.startswith("fidelity:"))
    assert line.startswith("fidelity: profiled run 1.50 x the model's own (")
    assert "over 1.2x on the GPU" in line and "--timer kernel" in line and "--compile" in line
    prof.meta["device"] = "cpu"
    assert "over 1.2x" not in prof.summary()


def test_over_the_gpu_limit_a_kernel_timer_profile_is_not_told_to_use_the_kernel_timer():
    """A real H200 profile (resnet50 bs32 fp16, --timer kernel, 2.63x its own run) was advised to
    'read device time with --timer kernel'; compiled ones were told to profile with --compile."""
    prof = fxprof.load(GOLDEN / "gpu_resnet50_kernel.json")
    if prof.meta.get("timer") != "kernel":
        pytest.skip("the golden GPU profile is not a kernel-timer one")
    prof.meta.pop("contention", None)
    median = sorted(prof.kept_totals())[len(prof.kept_totals()) // 2]
    prof.meta["own_runs_ms"] = [median / 2.63] * 5
    line = next(line for line in prof.summary().splitlines() if line.startswith("fidelity:"))
    assert "over 1.2x on the GPU" in line and "kernel_median_ms" in line and "--timer kernel" not in line, line


def test_a_compiled_gpu_profile_gets_gpu_words():
    """Real H200 profiles (resnet50 bs32 fp16, inductor; 27 Nov): 1.56x its own run, rows 48% of
    it (the GPU waiting for launches is in no row); with CUDA graphs rows 159% (a host row
    overlaps the kernels it replays). They were told to profile with --compile, and that a noisy
    machine made the rows far from 100%."""
    text = fxprof.load(GOLDEN / "gpu_resnet50_compiled.json").summary()
    line = next(line for line in text.splitlines() if line.startswith("fidelity:"))
    assert "over 1.2x on the GPU" in line and "(--compile)" not in line and "reduce-overhead" in line, line
    kernels = next(line for line in text.splitlines() if line.startswith("kernels:"))
    assert "far under 100%: on a GPU" in kernels and "noisy" not in kernels, kernels
    graphs = fxprof.load(GOLDEN / "gpu_resnet50_cudagraphs.json").summary()
    kernels = next(line for line in graphs.splitlines() if line.startswith("kernels:"))
    assert "over 100%: on a GPU the overhead rows are host time" in kernels and "noisy" not in kernels, kernels


class Attention(nn.Module):
    """Calls SDPA with ``attn_mask=None`` eagerly and with an expanded all-True bool mask while
    traced: the pattern of Hugging Face models captured by dynamo (transformers 5.17, torch 2.11),
    which on a GPU sends attention from cuDNN to the math path."""

    def __init__(self, data_mask: bool = False) -> None:
        super().__init__()
        self.qkv = nn.Linear(16, 48)
        self.data_mask = data_mask

    def forward(self, x):
        q, k, v = self.qkv(x).view(2, 8, 3, 2, 8).permute(2, 0, 3, 1, 4)
        if self.data_mask:  # computed from the data: must stay
            mask = (x[:, None, :, :1] > -10).expand(2, 1, 8, 8)
        elif torch.compiler.is_compiling() or torch.fx._symbolic_trace.is_fx_tracing():
            mask = torch.ones(8, 8, dtype=torch.bool, device=x.device)[None, None].expand(2, 1, 8, 8)
        else:
            mask = None
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)


@pytest.mark.parametrize("capture", ["symbolic", "dynamo"])
def test_an_all_true_attention_mask_is_dropped_so_the_graph_dispatches_as_eager(capture):
    model = Attention().eval()
    x = torch.randn(2, 8, 16)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        prof, said = _quiet_profile(model, x, warmup=1, iters=3, capture=capture)
    assert [s for s in said if "captured graph" in s] == []
    assert not any("ones" in name or "expand" in name for name in prof.df.index)  # the mask's nodes are gone


def test_without_the_mask_pass_the_difference_would_be_named(monkeypatch):
    import fxprof.measure.capture.captures as capture

    monkeypatch.setattr(capture, "drop_all_true_masks", lambda gm: 0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _, said = _quiet_profile(Attention().eval(), torch.randn(2, 8, 16), warmup=1, iters=3, capture="symbolic")
    assert any("the captured graph runs" in s and "aten::ones 1x" in s for s in said)


def test_a_mask_computed_from_data_is_kept():
    from fxprof.measure.capture.sdpa import drop_all_true_masks

    gm = torch.fx.symbolic_trace(Attention(data_mask=True))
    assert drop_all_true_masks(gm) == 0
    sdpa = next(n for n in gm.graph.nodes if "scaled_dot_product" in str(n.target))
    assert sdpa.kwargs["attn_mask"] is not None
    model = Attention()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        masked, traced = torch.fx.symbolic_trace(model), torch.fx.symbolic_trace(model)  # traced: the all-True mask
    assert drop_all_true_masks(traced) == 1
    sdpa = next(n for n in traced.graph.nodes if "scaled_dot_product" in str(n.target))
    assert sdpa.kwargs["attn_mask"] is None
    x = torch.randn(2, 8, 16)
    torch.testing.assert_close(traced(x), masked(x))  # a mask that masks nothing: the same attention


def test_a_launch_bound_kernel_profile_says_what_the_kernels_alone_take():
    """A real GPU profile (H100, resnet50 bs32 fp16, --timer kernel; FACTS.md fifth round): 3.86 ms
    of kernels in a 21.7 ms profiled run."""
    from pathlib import Path

    prof = fxprof.load(Path(__file__).parents[1] / "golden" / "gpu_resnet50_kernel.json")
    line = next(line for line in prof.summary().splitlines() if line.startswith("kernels:"))
    assert line.startswith("kernels: 3.86 ms of a 21.7 ms run (18%") and "host-bound" in line


def test_no_kernel_line_without_kernel_times(resnet18, small_image):
    prof, _ = _quiet_profile(resnet18, small_image, warmup=0, iters=2)
    assert not any(line.startswith("kernels:") for line in prof.summary().splitlines())


def test_a_lazily_compiled_submodule_is_not_a_different_program():
    """The eager forward of the comparison was the compiled submodule's first call: its
    compile-time ops (aten::linear, relu, set on fake tensors) were counted as the model's, and the
    note said the captured graph "does not run aten::linear 1x, aten::relu 1x, aten::set 1x"
    (docs/capture.md). The eager forward is warmed first, as the captured program is."""
    torch.manual_seed(0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        prof = fxprof.profile(HoldsCompiled().eval(), torch.randn(2, 8), warmup=1, iters=3, peaks=None, memory=False)
    assert prof.meta["capture"] == "dynamo"
    assert "dispatch_differences" not in prof.meta, prof.meta.get("dispatch_differences")
    assert not [w for w in caught if "captured graph" in str(w.message)]


def test_each_own_run_is_settled_by_an_untimed_call_and_they_follow_the_warm_up():
    """The first own run came right after the aten-op comparison's torch.profiler stopped, and
    the first call after the profiler runs cold: with 3 own runs (iters 10) one slow one moved
    the median, and the row of time in no node with it (BERT's own run read 1.47x the one timed
    outside the profile). Now the comparison runs before the warm-up. And every own run follows
    a profiled run, which leaves the eager forward's code and data cold: HF ViT's own runs read
    1.19-1.22x the ones timed back to back outside the profile in two zoo passes. So each own run
    starts with one untimed call."""
    import fxprof.measure.eager.fidelity as fid
    import fxprof.measure.eager.loop as loop

    order = []
    real_same, real_run, real_call = loop._same_program, fid.OwnRuns.run, fid.OwnRuns.call
    real_warm = loop._warm_up

    def same(meta, own, one_run, *kind):
        order.append("dispatch check")
        return real_same(meta, own, one_run, *kind)

    def warm(*a, **k):
        order.append("warm-up")
        return real_warm(*a, **k)

    def run(self):
        order.append("own run")
        return real_run(self)

    def call(self):
        order.append("untimed call")
        return real_call(self)

    patch = pytest.MonkeyPatch()
    patch.setattr(loop, "_same_program", same)
    patch.setattr(loop, "_warm_up", warm)
    patch.setattr(fid.OwnRuns, "run", run)
    patch.setattr(fid.OwnRuns, "call", call)
    try:
        prof = fxprof.profile(nn.Linear(4, 4), torch.randn(2, 4), warmup=1, iters=4, peaks=None, memory=False, anatomy=False)
    finally:
        patch.undo()
    assert order[0] == "dispatch check" and order.count("warm-up") == 1, order  # its own forwards are untimed calls too
    own = order[order.index("warm-up") + 1:]
    assert own == ["own run", "untimed call"] * len(prof.meta["own_runs_ms"]), order


def test_own_runs_after_the_profiler_left_out_are_said():
    """A real H200 profile (compiled BERT-base): the unprofiled runs took 3.9 ms before
    torch.profiler had run in the process and 7.5 ms after it. Split as the measurement now
    splits them (the later half in unprofiled_after_profiler_ms), the line says so and the ratio
    is against the runs before."""
    prof = fxprof.load(GOLDEN / "gpu_bert_compiled.json")
    compiled = dict(prof.meta["compiled"])
    runs = compiled["unprofiled_ms"]
    assert max(runs[:10]) < 4.1 < 6.6 < min(runs[10:])  # the two halves as measured
    compiled["unprofiled_ms"], compiled["unprofiled_after_profiler_ms"] = runs[:10], runs[10:]
    prof.meta["compiled"] = compiled
    prof.meta.pop("contention", None)
    line = next(line for line in prof.summary().splitlines() if line.startswith("fidelity:"))
    assert "median of 10 unprofiled runs in a plain loop before the profiled ones; those after took 7.57 ms, 1.93 x" in line, line
    assert "profiled run 1.39 x" in line


def test_a_gathered_profile_compares_own_and_profiled_runs_alike():
    """Under torchrun the gathered profile's runs are not judged for lost time, but its own runs
    were taken "less the time they lost": two ranks on one core read 1.77x against the corrected
    own runs. Both sides now stay as measured."""
    meta = {"own_runs_ms": [10.0, 20.0, 20.0, 20.0], "device": "cpu",
            "contention": {"own_lost_ms": [0.0, 10.0, 10.0, 10.0]}}
    alone = fidelity(meta, [20.0], [9.0])
    assert alone.corrected_own == 3 and alone.own_ms == 10.0  # one process: the lost time taken out
    gathered = fidelity({**meta, "ranks": [0, 1]}, [20.0], [9.0])
    assert gathered.corrected_own == 0 and gathered.own_ms == 20.0 and gathered.ratio == 1.0


def test_compiled_rows_over_the_run_on_the_cpu_are_not_given_a_rest():
    """docs/memory.md's compiled run read "account for 100.9% of it (coverage), the profiler's own
    cost the rest": there is no rest over 100%. (The CUDA-graph profile, read as if from a CPU.)"""
    prof = fxprof.load(GOLDEN / "gpu_resnet50_cudagraphs.json")
    prof.meta["device"] = "cpu"
    assert prof.coverage > 1.0
    run = next(line for line in prof.summary().splitlines() if line.startswith("run: "))
    assert "the rest" not in run and "over 100%: each row's median comes from other runs" in run, run


def test_a_ratio_resting_mostly_on_corrected_own_runs_is_not_stated():
    """docs/cli.md's re-run read "fidelity: profiled run 0.87 x the model's own ... 4 of them less the
    time they lost": with most own runs estimated rather than measured, no ratio is printed."""
    meta = {"own_runs_ms": [10.0, 20.0, 20.0, 20.0, 20.0], "device": "cpu",
            "contention": {"own_lost_ms": [0.0, 10.0, 10.0, 10.0, 10.0]}}
    found = fidelity(meta, [10.0], [9.0])
    assert found.corrected_own == 4 and "4 of the 5 unprofiled runs lost time" in found.unreliable
    meta["contention"]["own_lost_ms"] = [0.0, 0.0, 0.0, 10.0, 10.0]  # three quiet ones: the busy two left out
    assert fidelity(meta, [10.0], [9.0]).unreliable == ""
