"""Scale: the columnar recording, vectorised statistics, the cached table and the .npz file."""

from __future__ import annotations

import io
import json
import pathlib
import subprocess
import sys
import zipfile

import numpy as np
import pandas as pd
import pytest
import torch
from conftest import FakeCostModel, FakeTimer, Work

import fxprof
from fxprof.core.columnar import SampleColumns
from fxprof.core.nodes import NodeInfo
from fxprof.core.profile import SAMPLE_COLUMNS
from fxprof.core.recording import Recording
from fxprof.measure.timing.recorder import Recorder

GOLDEN = pathlib.Path(__file__).parents[1] / "golden"


def _fake_profile(clock, iters=4):
    return fxprof.profile(FakeCostModel(clock), torch.ones(2, 3), warmup=0, iters=iters, timer=FakeTimer(clock), leaf_modules=[Work])


@pytest.fixture(scope="module")
def real_prof(resnet18):
    return fxprof.profile(resnet18, torch.randn(1, 3, 32, 32), warmup=1, iters=3)


# ------------------------------------------------------------------ recording
def test_recorder_lands_marks_in_numpy_columns_with_integer_node_ids(clock, fake_timer):
    recorder = Recorder(fake_timer)
    for run in range(3000):  # enough runs to grow the columns several times
        with recorder.run():
            for name, cost in (("a", 1.0), ("b", 2.0), ("a", 0.5)):  # "a" twice in a run
                m0 = fake_timer.mark()
                clock.advance(cost)
                recorder.append((name, m0, fake_timer.mark(), m0, fake_timer.mark()))
    rec = recorder.recording
    assert len(rec) == 9000 and rec.runs == 3000 and not recorder._marks
    assert rec.names == ["a", "b"]
    assert rec.node_id.dtype == np.int32 and rec.run.dtype == np.int32 and rec.time_ms.dtype == np.float64
    assert rec.node_id[:6].tolist() == [0, 1, 0, 0, 1, 0]
    assert rec.run[-3:].tolist() == [2999] * 3
    assert rec.time_ms[:3].tolist() == [1.0, 2.0, 0.5] and rec.start_ms[:3].tolist() == [0.0, 1.0, 3.0]
    assert rec.run_total_ms[0] == 3.5 and rec.node[:3] == ["a", "b", "a"]
    assert rec.recorded_names() == {"a", "b"}
    assert rec.nbytes <= 1.5 * 40 * len(rec) + 40 * 1024  # 40 bytes a sample, growth included
    with pytest.raises(ValueError):
        rec.time_ms[0] = 3.0  # views are read-only: samples never change after their run


def _chain(length: int) -> torch.fx.GraphModule:
    graph = torch.fx.Graph()
    value = graph.placeholder("x")
    for i in range(length - 2):
        value = graph.call_function(torch.relu if i % 2 else torch.add, (value,) if i % 2 else (value, 1.0))
    graph.output(value)
    return torch.fx.GraphModule(torch.nn.Module(), graph)


@pytest.mark.parametrize("timer", ["cpu", "fake"])
def test_compiled_plan_writes_marks_into_reused_buffers_and_samples_match_the_generic_loop(clock, timer):
    """The plan's marks land in preallocated buffers (reused run after run) and become the same
    samples, in the same order, as the generic loop's tuples."""
    from fxprof.measure.capture.interpreter import ProfilingInterpreter
    from fxprof.measure.timing.timers import CpuTimer

    gm = _chain(12)
    make_timer = (lambda: CpuTimer()) if timer == "cpu" else (lambda: FakeTimer(clock))
    lean = ProfilingInterpreter(gm, make_timer())

    class Generic(ProfilingInterpreter):
        def run_node(self, n):  # any override takes fx.Interpreter's loop and the tuple path
            return super().run_node(n)

    generic = Generic(gm, make_timer())
    assert lean.lean and not generic.lean
    x = torch.zeros(1, 8)
    for _ in range(3):
        torch.testing.assert_close(lean.run(x), gm(x))
        generic.run(x)
    a, b = lean.recording, generic.recording
    assert len(a) == len(b) == 36 and a.runs == b.runs == 3
    assert a.node == b.node and a.run.tolist() == b.run.tolist()
    assert (a.time_ms >= 0).all() and (np.diff(a.start_ms[:12]) >= 0).all()  # in the order the nodes ran
    if timer == "cpu":
        assert (a.host_ms == a.time_ms).all() and (a.host_start_ms == a.start_ms).all()
    else:  # a clock that never moves: every sample is exactly zero, in both paths
        assert a.time_ms.tolist() == b.time_ms.tolist() == [0.0] * 36
    pool = lean.recorder._free[lean._slots]
    marks, host = pool[0]
    assert isinstance(marks, list) and len(marks) == 2 * 12
    assert (host is None) == (timer == "cpu")  # the CPU clock: one reading is mark and host time
    # buffers are handed out and returned: the CPU clock's runs are written up to 64 at a
    # time, so at most that many buffers exist however many runs there are
    from fxprof.measure.timing.recorder import _BATCH_RUNS

    assert len(pool) == (3 if timer == "cpu" else 1)
    for _ in range(3 * _BATCH_RUNS):
        lean.run(x)
    assert len(lean.recording) == 36 + 3 * _BATCH_RUNS * 12 and lean.recording.runs == 3 + 3 * _BATCH_RUNS
    assert len(pool) <= _BATCH_RUNS and all(len(m) == 24 for m, _ in pool)
    assert lean.recording.run[-12:].tolist() == [2 + 3 * _BATCH_RUNS] * 12  # the last run, whole


def test_plan_and_tuple_marks_of_one_run_keep_the_order_the_nodes_ran(clock, fake_timer):
    """Two graphs in one run, one through its compiled plan and one through the tuple path:
    the samples are in execution order."""
    from fxprof.measure.capture.interpreter import ProfilingInterpreter

    recorder = Recorder(fake_timer)
    first = ProfilingInterpreter(_chain(4), recorder=recorder, prefix="g0:")

    class Generic(ProfilingInterpreter):
        def run_node(self, n):
            clock.advance(1.0)
            return super().run_node(n)

    second = Generic(_chain(3), recorder=recorder, prefix="g1:")
    x = torch.zeros(2)
    with recorder.run():
        y = first.run(x)
        z = second.run(y)
        first.run(z)
    rec = recorder.recording
    names = rec.node
    assert names[:4] == ["g0:x", "g0:add", "g0:relu", "g0:output"] and names[4:7] == ["g1:x", "g1:add", "g1:output"]
    assert names[7:] == names[:4] and rec.runs == 1
    assert (np.diff(rec.start_ms) >= 0).all()


def test_recording_from_plain_columns_fills_what_is_missing_with_nan():
    rec = Recording(node=["a", "b"], run=[0, 0], time_ms=[1.0, 2.0], run_total_ms=[3.0])
    assert np.isnan(rec.host_ms).all() and rec.runs == 1 and not rec.has_kernel_ms
    rec.kernel_ms = [0.5, 0.25]
    assert rec.kernel_ms.tolist() == [0.5, 0.25]
    with pytest.raises(ValueError, match="2 samples"):
        rec.kernel_ms = [1.0]


# ----------------------------------------------------------------- statistics
@pytest.mark.parametrize("layout", ["runs", "uneven", "with_nan", "one_run"])
def test_vectorised_statistics_equal_pandas_groupby(layout):
    rng = np.random.default_rng(0)
    names = [f"n{i}" for i in range(12)]  # n10, n11 never run
    if layout in ("runs", "with_nan"):
        codes = np.tile(rng.permutation(10), 9)
    elif layout == "one_run":
        codes = rng.permutation(10)
    else:
        codes = rng.integers(0, 10, size=200)
    values = rng.lognormal(size=len(codes)).round(4)
    if layout == "with_nan":
        values[rng.integers(0, len(codes), 6)] = np.nan
    # one call of a node per run (several calls in one run are summed per run: test_scopes.py)
    runs = np.arange(len(codes)) if layout == "uneven" else np.arange(len(codes)) // 10
    columns = SampleColumns(names, codes, runs, values, values * 2, kernel_ms=values / 2)
    stats = columns.node_stats()
    frame = pd.DataFrame({"node": [names[c] for c in codes], "t": values, "k": values / 2})
    g = frame.groupby("node", sort=False)["t"]
    k = frame.groupby("node", sort=False)["k"]
    expected = pd.DataFrame({
        "calls": g.count(), "mean_ms": g.mean(), "median_ms": g.median(), "std_ms": g.std(),
        "iqr_ms": g.quantile(0.75) - g.quantile(0.25), "min_ms": g.min(), "max_ms": g.max(), "total_ms": g.sum(),
        "kernel_mean_ms": k.mean(), "kernel_median_ms": k.median(),
    }).reindex(stats.index)
    assert list(stats.index) == [n for n in names if n in set(frame["node"])]  # graph order, ran only
    for col in ("calls", "median_ms", "iqr_ms", "min_ms", "max_ms", "kernel_median_ms"):  # order statistics: exact
        np.testing.assert_array_equal(stats[col].to_numpy(float), expected[col].to_numpy(float), err_msg=col)
    for col in ("mean_ms", "std_ms", "total_ms", "kernel_mean_ms"):  # sums: to rounding
        np.testing.assert_allclose(stats[col].to_numpy(float), expected[col].to_numpy(float), rtol=1e-12, err_msg=col)


def test_table_is_computed_once_and_follows_changes_to_nodes_and_timer(clock, monkeypatch):
    prof = _fake_profile(clock)
    calls = []
    build = fxprof.Profile._build_table
    monkeypatch.setattr(fxprof.Profile, "_build_table", lambda self, runs: calls.append(1) or build(self, runs))
    first = prof.df
    first.loc["stem", "median_ms"] = 99.0  # a returned table is the caller's own
    assert prof.df.loc["stem", "median_ms"] == 1.0
    prof.summary(), prof.group_by("op"), prof.to_dataframe(sort="pct"), fxprof.compare(prof, prof)
    assert len(calls) == 1
    prof.meta["timer"] = "cuda"  # the launch/device verdict depends on the timer
    assert (prof.df["bound"] != "").any() and len(calls) == 2


def test_samples_frame_keeps_columns_and_names_nodes_categorically(clock):
    prof = _fake_profile(clock)
    samples = prof.samples
    assert list(samples.columns) == ["node", "run", "call", *SAMPLE_COLUMNS[2:]]  # call: derived, never stored
    assert isinstance(samples["node"].dtype, pd.CategoricalDtype)
    assert list(samples["node"].cat.categories) == [n.name for n in prof.nodes]
    assert samples["run"].dtype == np.int64 and samples["time_ms"].dtype == np.float64
    assert (samples.loc[samples["node"] == "head", "time_ms"].tolist()) == [3.0, 2.0, 4.0, 3.0]
    # a DataFrame given by hand works as before, and unknown names are refused
    node = NodeInfo("a", "call_function", "f", "", "", "")
    frame = pd.DataFrame({"node": ["a", "a"], "run": [0, 1], "time_ms": [1.0, 3.0], "host_ms": [1.0, 3.0]})
    runs = pd.DataFrame({"run": [0, 1], "total_ms": [1.0, 3.0]})
    assert fxprof.Profile([node], frame, runs).df.loc["a", "median_ms"] == 2.0
    with pytest.raises(ValueError, match="does not have: \\['b'\\]"):
        fxprof.Profile([node], frame.assign(node=["a", "b"]), runs)


# ----------------------------------------------------------------- .npz file
def test_num_samples_counts_the_samples_without_the_long_frame(real_prof, monkeypatch):
    expected = len(real_prof.samples)
    monkeypatch.setattr(SampleColumns, "frame", lambda self: pytest.fail("num_samples built the long-form frame"))
    assert real_prof.num_samples == expected == 71 * 3


def test_npz_save_load_is_lossless_and_compact(real_prof, tmp_path):
    path = tmp_path / "p.npz"
    real_prof.save(path)
    back = fxprof.load(path)
    pd.testing.assert_frame_equal(back.samples, real_prof.samples, check_exact=True)
    pd.testing.assert_frame_equal(back.runs, real_prof.runs, check_exact=True)
    pd.testing.assert_frame_equal(back.df, real_prof.df, check_exact=True)
    pd.testing.assert_frame_equal(back.anatomy, real_prof.anatomy, check_exact=True)
    assert back.nodes == real_prof.nodes
    assert back.meta == json.loads(json.dumps(real_prof.meta))
    assert back.summary() == real_prof.summary()
    # 40 bytes a sample, besides the JSON header and each member's fixed zip and .npy headers
    with zipfile.ZipFile(path) as archive:
        infos = archive.infolist()
        header_bytes = archive.getinfo("header.json").file_size
    assert path.stat().st_size - header_bytes <= 40 * len(real_prof.samples) + 300 * len(infos)
    # plain numpy opens it without pickle: numbers and one JSON header, nothing else
    with np.load(path, allow_pickle=False) as data:
        assert data["samples/time_ms"].dtype == np.float64 and len(data["samples/node"]) == len(real_prof.samples)
        header = json.loads(data["header.json"])  # numpy hands non-.npy members back as bytes
    assert header["format"] == "fxprof.profile.npz" and header["version"] == 1


def _rewrite(path, out, change):
    """Copy the zip at ``path`` to ``out``, passing each member's bytes through ``change(name, data)``."""
    with zipfile.ZipFile(path) as src, zipfile.ZipFile(out, "w") as dst:
        for name in src.namelist():
            data = change(name, src.read(name))
            if data is not None:
                dst.writestr(name, data)


def _npy(array) -> bytes:
    buffer = io.BytesIO()
    np.lib.format.write_array(buffer, array, allow_pickle=True)
    return buffer.getvalue()


class _Boom:
    def __reduce__(self):
        return (pytest.fail, ("a pickle in a profile file was executed",))


@pytest.mark.parametrize("case, message", [
    ("pickle", "damaged fxprof profile: ValueError: the column samples/time_ms holds object"),
    ("version", "version 99 fxprof binary profile; this fxprof reads version 1"),
    ("short", "the column samples/time_ms has 3 values, the header says"),
    ("node_range", "node code is outside the node list"),
    ("missing", "the column samples/host_ms is missing"),
    ("no_header", "is a zip but not a saved fxprof profile"),
    ("truncated", "damaged fxprof profile"),
    # well-formed columns, impossible values: the same checks as a JSON profile gets
    ("negative", r"samples\.time_ms\[0\]"),
    ("infinite", r"samples\.host_ms\[0\]: inf is not finite"),
    ("run_range", "has run index 9, but the profile has 4 runs"),
])
def test_damaged_npz_is_a_clear_error_and_nothing_is_executed(clock, tmp_path, case, message):
    good = tmp_path / "good.npz"
    _fake_profile(clock).save(good)
    bad = tmp_path / "bad.npz"
    if case == "truncated":
        bad.write_bytes(good.read_bytes()[: good.stat().st_size // 2])
    else:
        def change(name, data):
            if case == "pickle" and name == "samples/time_ms.npy":
                return _npy(np.array([_Boom()] * 32, dtype=object))
            if case == "version" and name == "header.json":
                return json.dumps({**json.loads(data), "version": 99})
            if case == "short" and name == "samples/time_ms.npy":
                return _npy(np.ones(3))
            if case == "node_range" and name == "samples/node.npy":
                return _npy(np.full(32, 50, dtype=np.int32))
            if case == "missing" and name == "samples/host_ms.npy":
                return None
            if case == "no_header" and name == "header.json":
                return None
            if case in ("negative", "infinite", "run_range"):
                column = {"negative": "samples/time_ms.npy", "infinite": "samples/host_ms.npy", "run_range": "samples/run.npy"}[case]
                if name == column:
                    values = np.lib.format.read_array(io.BytesIO(data)).copy()
                    values[0] = {"negative": -1.0, "infinite": np.inf, "run_range": 9}[case]
                    return _npy(values)
            return data
        _rewrite(good, bad, change)
    with pytest.raises(fxprof.ProfileFormatError, match=message):
        fxprof.load(bad)


@pytest.mark.parametrize("change, message", [
    (lambda h: h["anatomy"]["flops"].__setitem__(0, -5), r"header\.anatomy\.flops\[0\]: -5 is less than the minimum of 0"),
    (lambda h: h["nodes"][1].__setitem__("op", 7), r"header\.nodes\[1\]\.op: 7 is not of type 'string'"),
    (lambda h: h["nodes"][1].__setitem__("name", ""), r"header\.nodes\[1\]\.name: '' should be non-empty"),
    (lambda h: h["anatomy"]["output_shape"].__setitem__(0, {"a": 1}), r"header\.anatomy\.output_shape\[0\]"),
    (lambda h: h["anatomy"]["out_bytes"].__setitem__(0, 2**64), r"header\.anatomy\.out_bytes\[0\]: 18446744073709551616 is greater"),
    (lambda h: h["anatomy"]["out_bytes"].__setitem__(0, 2**70), r"/bad\.npz' holds an integer with 22 digits"),
    (lambda h: h["anatomy"]["flops"].pop(), r"header\.anatomy\.flops has 7 values for 8 nodes"),
    (lambda h: h["nodes"][2].__setitem__("name", h["nodes"][1]["name"]), "appears more than once in nodes"),
    (lambda h: h.__setitem__("samples", -1), r"header\.samples: -1 is less than the minimum of 0"),
])
def test_npz_header_gets_the_schema_json_gets(clock, tmp_path, change, message):
    """Issue 26 #11: a binary profile's header loaded whatever it held (negative FLOPs, a
    non-string op, an empty name, a dict shape; a huge integer was a bare OverflowError)."""
    good = tmp_path / "good.npz"
    _fake_profile(clock).save(good)

    def edit(name, data):
        if name != "header.json":
            return data
        header = json.loads(data)
        change(header)
        return json.dumps(header)

    _rewrite(good, tmp_path / "bad.npz", edit)
    with pytest.raises(fxprof.ProfileFormatError, match=message):
        fxprof.load(tmp_path / "bad.npz")


def _bomb(good, out, megabytes):
    """``good`` with samples/time_ms replaced by ``megabytes`` of deflated zeros, as the header declares."""
    n = megabytes * 2**20 // 8
    with zipfile.ZipFile(good) as src, zipfile.ZipFile(out, "w", compression=zipfile.ZIP_DEFLATED) as dst:
        header = json.loads(src.read("header.json"))
        header["samples"] = n
        dst.writestr("header.json", json.dumps(header))
        with dst.open("samples/time_ms.npy", "w", force_zip64=True) as member:
            np.lib.format.write_array_header_1_0(member, {"descr": "<f8", "fortran_order": False, "shape": (n,)})
            chunk = bytes(2**20)
            for _ in range(megabytes):
                member.write(chunk)


def test_npz_zip_bomb_is_refused_before_anything_large_is_read(clock, tmp_path):
    """Issue 26 #12: members were read before their sizes were checked (1.9 MB made 2.5 GB)."""
    import tracemalloc

    good = tmp_path / "good.npz"
    _fake_profile(clock).save(good)
    _bomb(good, tmp_path / "bomb.npz", 300)
    assert (tmp_path / "bomb.npz").stat().st_size < 2 * 2**20
    tracemalloc.start()
    try:
        with pytest.raises(fxprof.ProfileFormatError, match=r"unpack to 314,5\d\d,\d\d\d bytes from .* a zip bomb"):
            fxprof.load(tmp_path / "bomb.npz")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 20 * 2**20, peak


def test_npz_column_declaring_more_than_its_member_holds_is_refused(clock, tmp_path):
    """Issue 26 #12: a member declaring 10^11 items was a bare MemoryError."""
    good = tmp_path / "good.npz"
    _fake_profile(clock).save(good)
    n = 10**11

    def edit(name, data):
        if name == "header.json":
            return json.dumps({**json.loads(data), "samples": n})
        if name == "samples/node.npy":
            buffer = io.BytesIO()
            np.lib.format.write_array_header_1_0(buffer, {"descr": "<i4", "fortran_order": False, "shape": (n,)})
            return buffer.getvalue() + bytes(64)
        return data

    _rewrite(good, tmp_path / "bad.npz", edit)
    with pytest.raises(fxprof.ProfileFormatError, match="samples/node declares 100000000000 values of 4 bytes, but its member holds 64"):
        fxprof.load(tmp_path / "bad.npz")


def test_old_json_profiles_still_load(tmp_path):
    # written by fxprof before the columnar recording (tests/golden/fake_profile_v1.json)
    old = fxprof.load(GOLDEN / "fake_profile_v1.json")
    assert old.df.loc["head", "median_ms"] == 3.0 and old.df.loc["stem", "pct"] == 25.0
    assert old.samples.groupby("node", observed=True).size().eq(4).all() and old.num_runs == 4
    old.save(tmp_path / "p.npz")
    pd.testing.assert_frame_equal(fxprof.load(tmp_path / "p.npz").df, old.df, check_exact=True)


def test_cli_show_and_compare_read_npz(clock, tmp_path):
    prof = _fake_profile(clock)
    prof.save(tmp_path / "a.npz")
    prof.save(tmp_path / "b.json")
    show = subprocess.run([sys.executable, "-m", "fxprof", "show", str(tmp_path / "a.npz"), "--top", "3"],
                          capture_output=True, text=True, timeout=300)
    assert show.returncode == 0, show.stderr
    assert "head" in show.stdout and "FakeCostModel" in show.stdout
    both = subprocess.run([sys.executable, "-m", "fxprof", "compare", str(tmp_path / "a.npz"), str(tmp_path / "b.json")],
                          capture_output=True, text=True, timeout=300)
    assert both.returncode == 0, both.stderr
    assert "head" in both.stdout


def test_scale_benchmark_smoke(tmp_path, monkeypatch, capsys):
    monkeypatch.syspath_prepend(str(pathlib.Path(__file__).parents[1] / "benchmarks"))
    import scale

    out = tmp_path / "scale.json"
    result = scale.main(["--shapes", "40x6", "--json", str(out)])
    assert "## scale: targets" in capsys.readouterr().out
    (row,) = json.loads(out.read_text())["scale"]
    assert row["samples"] == 240 and row["file_bytes_per_sample"] > 40
    assert row == json.loads(json.dumps(result["scale"][0], default=str))
