"""The roofs themselves: the cache-aware bandwidth roof (issues 31 c, 40.3), the op floor and the
``overhead`` rule (40.2), where the peaks come from (32.4) and a cache that cannot be written
(36.7). The GPU cases run on the CPU against a real H100 profile (tests/golden/resnet50-cuda.json,
a copy of ../shared/gpu/resnet50-cuda.json: resnet50, batch 32, float16)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
import torch
from conftest import requires_cuda

import fxprof
from fxprof.core.roofline import FLOOR_MULTIPLE, Peaks, node_bandwidth, roofline_columns
from fxprof.measure.passes.peaks import cache_levels, machine_peaks, peaks_source_line

H100 = Path(__file__).parents[1] / "golden" / "resnet50-cuda.json"
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def own_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return tmp_path / "cache" / "fxprof" / "peaks.json"


def _h100(tmp_path, **peaks_changes) -> fxprof.Profile:
    data = json.loads(H100.read_text())
    data["meta"]["peaks"].update(peaks_changes)
    path = tmp_path / "h100.json"
    path.write_text(json.dumps(data))
    return fxprof.load(str(path))


# ------------------------------------------------------------------ the op floor (40.2)
def test_batch_norms_several_floors_long_are_memory_limited_not_overhead(tmp_path):
    """resnet50 bs32 fp16 on an H100: batch norms with a roof of 1-8.5 us take 34-64 us against
    a 9.31 us floor. They are 3-25% of their memory roof, a real target: not 'overhead'."""
    df = fxprof.load(str(H100)).df
    floor_ms = 9.31e-3
    bn = df[df["kind"] == "batch_norm"]
    slow = bn[bn["median_ms"] >= FLOOR_MULTIPLE * floor_ms]
    assert len(slow) >= 42 and (slow["limit"] == "memory").all(), slow[["median_ms", "roof_ms", "limit"]]
    assert (slow["roof_pct"] < 50).all()
    # nodes near the floor keep their verdict: the 7-8 us adds of layer4, the views
    assert (df.loc[["add_13", "add_14", "add_15", "flatten"], "limit"] == "overhead").all()


def test_overhead_rule_on_nodes_of_known_cost():
    peaks = Peaks(flops_per_s=1e12, bytes_per_s=1e11, overhead_s=10e-6)
    table = pd.DataFrame(
        {"flops": [0, 0, 0, 0], "bytes": [800_000, 800_000, 12, 0], "median_ms": [0.050, 0.015, 0.500, 0.200]},
        index=["slow_bn", "quick_bn", "tiny_on_busy_machine", "view"])
    limit = roofline_columns(table, peaks)["limit"]
    # 8 us of traffic, below the 10 us floor: 50 us (5 floors) is the kernel's, 15 us the floor's
    assert limit["slow_bn"] == "memory" and limit["quick_bn"] == "overhead"
    # 12 bytes: no work; whatever noise made of its median, the op's fixed cost is all there is
    assert limit["tiny_on_busy_machine"] == "overhead" and limit["view"] == "overhead"


def test_the_floor_is_the_cheapest_op_the_timer_sees(own_cache):
    peaks = machine_peaks("cpu", torch.float32, threads=1, sizes="quick")
    assert "preallocated output, each call timed on its own" in peaks.details["op_floor"]
    assert 0 < peaks.overhead_s < 1e-4


# ----------------------------------------------------- the cache-aware roof (31 c, 40.3)
def test_a_node_whose_reads_fit_a_cache_is_held_to_that_level():
    peaks = Peaks(flops_per_s=1e12, bytes_per_s=40e9, caches=({"level": "L2", "bytes": 1 << 20, "bytes_per_s": 160e9},
                                                               {"level": "L3", "bytes": 32 << 20, "bytes_per_s": 80e9}))
    table = pd.DataFrame({"flops": [0, 0, 0, 0], "bytes": [1 << 19, 16 << 20, 56 << 20, 1 << 20],
                          "out_bytes": [1 << 18, 8 << 20, 28 << 20, 1 << 19], "median_ms": [1.0, 1.0, 1.0, 1.0]},
                         index=["in_l2", "in_l3", "dram", "reads_half_writes_half"])
    rate = pd.Series(node_bandwidth(table, peaks), index=table.index)
    assert rate["in_l2"] == 160e9 and rate["in_l3"] == 80e9 and rate["dram"] == 40e9
    # what it reads (512 KiB) fits L2; what it writes is new. 28 MiB is more than 3/4 of the L3
    assert rate["reads_half_writes_half"] == 160e9
    roof = roofline_columns(table, peaks)["roof_ms"]
    assert roof["in_l3"] == pytest.approx((16 << 20) / 80e9 * 1e3)
    # a faster small level never makes a bigger level's nodes slower, nor the other way round
    slow_l2 = Peaks(1e12, 40e9, caches=({"level": "L2", "bytes": 1 << 20, "bytes_per_s": 30e9},))
    assert node_bandwidth(table, slow_l2)[0] == 40e9


def test_relus_whose_input_sits_in_the_h100_l2_stay_under_their_roof(tmp_path):
    """The ReLUs of layer2 read a 25.7 MB input the batch norm just wrote: it sits in the H100's
    50 MB L2, so they ran at 108-111% of HBM's roof. Held to the L2's bandwidth they stay under
    it. The L2 rate here is an assumption (twice HBM's; not measured on this machine:
    tests/benchmarks/gpu_run.sh measures it); any rate above 1.12 times HBM's does."""
    before = fxprof.load(str(H100)).df
    assert before["roof_pct"].max() > 108
    peaks = json.loads(H100.read_text())["meta"]["peaks"]
    after = _h100(tmp_path, caches=[{"level": "L2", "bytes": 50 * 2**20, "bytes_per_s": 2 * peaks["bytes_per_s"]}]).df
    relus = after[after["kind"] == "relu"]
    assert (relus["roof_pct"] <= 100).all(), relus.sort_values("roof_pct").tail()
    timed = after[after["median_ms"] > 0.020]
    assert (timed["roof_pct"] <= 150).all()
    # the layer1 ReLUs read 51.4 MB: nearly all the L2, still held to HBM (they ran at 95% of it)
    assert after.loc["layer1_0_relu_2", "roof_ms"] == pytest.approx(before.loc["layer1_0_relu_2", "roof_ms"])


def test_cpu_cache_levels_are_measured_and_kept(own_cache, quiet):
    peaks = machine_peaks("cpu", torch.float32, threads=1, sizes="quick")
    assert peaks.caches, "a curve from 16 KiB to 64 MiB crosses at least one cache level"
    assert all(lv["bytes_per_s"] > peaks.bytes_per_s for lv in peaks.caches)  # a level is faster than memory
    named = {name for name, _size in cache_levels("cpu")}
    # named after a cache sysfs reports, or after the one before it (L2+, L2+2), or L?1 before any
    assert all(re.sub(r"\+\d*$", "", lv["level"]) in named or lv["level"].startswith("L?") for lv in peaks.caches)
    kept = json.loads(own_cache.read_text())["peaks"]
    assert all(entry["caches"] for entry in kept.values())
    assert "caches L" in peaks.describe()


def test_a_cache_of_the_old_kind_is_measured_again(own_cache, quiet):
    """Version 1 entries were measured on one buffer size with levels from sysfs: roofs that
    plain ops beat (issue 48). They are not read: the peaks are measured again."""
    first = machine_peaks("cpu", torch.float32, threads=1, sizes="quick")
    data = json.loads(own_cache.read_text())
    data["version"] = 1
    for entry in data["peaks"].values():
        entry["bytes_per_s"] = 1.0  # a roof no op would stay under
    own_cache.write_text(json.dumps(data))
    again = machine_peaks("cpu", torch.float32, threads=1, sizes="quick")
    assert again.origin == "now" and again.bytes_per_s > 1e9 and again.measured_at >= first.measured_at
    assert json.loads(own_cache.read_text())["version"] == 2


# ------------------------------------------------------ where the peaks come from (32.4)
def test_peaks_say_whether_they_were_measured_now_or_read_from_the_cache(own_cache, quiet):
    fresh = machine_peaks("cpu", torch.float32, threads=1, sizes="quick")
    assert fresh.origin == "now" and fresh.measured_at
    line = peaks_source_line(fresh)
    assert line.startswith("measured now (") and f"cached in {own_cache}" in line
    cached = machine_peaks("cpu", torch.float32, threads=1, sizes="quick")
    assert cached.origin == "cache"
    day, clock = fresh.measured_at[:10], fresh.measured_at[11:16]
    assert peaks_source_line(cached).startswith(f"from the cache, measured {day} {clock} UTC on this machine "
                                                f"(fxprof peaks --refresh to measure again)")
    assert "origin" not in json.loads(own_cache.read_text())["peaks"][next(iter(json.loads(own_cache.read_text())["peaks"]))]
    # the profile header says it too
    prof = fxprof.profile(torch.nn.ReLU(), torch.randn(4, 8), warmup=0, iters=2, peaks=cached)
    header = next(line for line in str(prof).splitlines() if line.startswith("roofline: peaks"))
    assert f"from the cache, measured {day} {clock} UTC" in header


def _cli(*args: str, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "fxprof", *args], capture_output=True, text=True, env=env, timeout=300)


def test_cli_peaks_says_measured_now_then_from_the_cache(tmp_path):
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "c"), "PYTHONPATH": str(REPO), "FXPROF_PEAKS_BUSY": "off"}
    first = _cli("peaks", "--quick", "--threads", "1", env=env)
    assert first.returncode == 0, first.stderr
    assert "measured now (" in first.stdout and "cached in " + str(tmp_path / "c" / "fxprof" / "peaks.json") in first.stdout
    second = _cli("peaks", "--quick", "--threads", "1", env=env)
    assert "from the cache, measured " in second.stdout and "fxprof peaks --refresh to measure again" in second.stdout
    assert "measured now" not in second.stdout


def test_cli_peaks_with_an_unwritable_cache_claims_no_cache_file(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    env = {**os.environ, "XDG_CACHE_HOME": str(blocker), "PYTHONPATH": str(REPO), "FXPROF_PEAKS_BUSY": "off"}
    done = _cli("peaks", "--quick", "--threads", "1", env=env)
    assert done.returncode == 0, done.stderr
    assert "cannot cache the machine peaks" in done.stderr
    assert "cached in" not in done.stdout and "not cached" in done.stdout


def test_measured_peaks_with_cache_levels_survive_save_and_load(own_cache, tmp_path):
    torch.manual_seed(0)
    peaks = machine_peaks("cpu", torch.float32, threads=torch.get_num_threads(), sizes="quick")
    prof = fxprof.profile(torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU()), torch.randn(8, 64),
                          warmup=0, iters=2, peaks=peaks)
    path = tmp_path / "p.json"
    prof.save(str(path))
    back = fxprof.load(str(path))
    assert back.meta["peaks"]["caches"] == prof.meta["peaks"]["caches"]
    assert back.meta["peaks"]["origin"] == "now" and back.meta["peaks"]["measured_at"] == peaks.measured_at
    cols = ["roof_ms", "roof_pct", "limit"]
    pd.testing.assert_frame_equal(back.df[cols], prof.df[cols])


@requires_cuda
def test_gpu_peaks_measure_the_l2_and_a_floor_the_timer_sees(own_cache):
    peaks = machine_peaks("cuda", torch.float16, sizes="quick")
    l2 = torch.cuda.get_device_properties(torch.cuda.current_device()).L2_cache_size
    assert peaks.bytes_per_s > 1e11  # HBM, faster than PCIe
    # a level is where the curve drops: the L2 the device reports (within 4x), faster than HBM.
    # Whether one shows depends on the chip: timed from an idle device (launch latency in every
    # call) an H200's curve was flat up to 1 MB and no L2 level was found
    for level in peaks.caches:
        assert level["level"] == "L2" and l2 / 4 <= level["bytes"] <= 4 * l2 and level["bytes_per_s"] > peaks.bytes_per_s
    assert not peaks.load.get("busy")  # kernels timed on the device: a busy host does not make them busy
    # events around one call from an idle device, as the cuda timer times a node of a host-bound
    # model: the host's launch latency (9.3 us on an H100 host, 19-35 us on an H200 host)
    assert 0 < peaks.overhead_s < 100e-6


@requires_cuda
def test_gpu_plain_add_and_copy_read_at_most_105_pct_of_their_roof(own_cache):
    """Issue 48.5: HBM's and the L2's roofs are upper bounds too: plain adds and copies from the
    L2 to far beyond it, profiled with the cuda timer, read at most 105% of their roof."""
    from fxprof.selfcheck import PLAIN_SIZES_CUDA, PlainOps

    peaks = machine_peaks("cuda", torch.float32, sizes="quick")
    tensors = [torch.full((n,), v, device="cuda") for n in PLAIN_SIZES_CUDA for v in (1.0, 2.0, 0.0)]
    df = fxprof.profile(PlainOps(), *tensors, warmup=3, iters=10, peaks=peaks).df
    ops = df[df["bytes"].fillna(0) > 0]
    assert len(ops) == 16 and (ops["roof_pct"] <= 105).all(), ops[["bytes", "median_ms", "roof_ms", "roof_pct"]]
    largest = ops[ops["bytes"] >= 2 * PLAIN_SIZES_CUDA[-1] * 4]  # 640 MB and more: HBM's roof, and near it
    assert (largest["roof_pct"] > 40).all(), largest[["bytes", "median_ms", "roof_ms", "roof_pct"]]


def test_the_picture_draws_each_cache_level_roof(tmp_path):
    pytest.importorskip("matplotlib")
    import matplotlib

    matplotlib.use("Agg")
    plain = fxprof.plot_roofline(fxprof.load(str(H100)))
    rate = json.loads(H100.read_text())["meta"]["peaks"]["bytes_per_s"]
    aware = fxprof.plot_roofline(_h100(tmp_path, caches=[{"level": "L2", "bytes": 50 * 2**20, "bytes_per_s": 2 * rate}]))
    dashed = [line for line in aware.lines if line.get_linestyle() == "--"]
    assert len(aware.lines) == len(plain.lines) + 1 and len(dashed) == 1
    assert any(t.get_text().startswith("L2 ") for t in aware.texts)


def test_empty_tensors_inside_a_model_are_said_without_blaming_the_input():
    """A detection model with no boxes left has empty tensors inside, not a degenerate input."""
    from fxprof.core.roofline import roofline_notes

    table = pd.DataFrame({"op": ["call_function", "call_function"], "output_shape": ["[0, 4]", "[2, 8]"],
                          "roof_pct": [0.0, 50.0]}, index=["boxes", "head"])
    inside = roofline_notes(table, None, ["Tensor(shape=[1, 3, 32, 32], dtype=float32, device=cpu)"])
    assert len(inside) == 1 and "1 node(s) ran on empty tensors (a zero-size dimension: boxes [0, 4])" in inside[0]
    assert "degenerate" not in inside[0]
    empty_batch = roofline_notes(table, None, ["Tensor(shape=[0, 3, 32, 32], dtype=float32, device=cpu)"])
    assert "the input is degenerate" in empty_batch[0]


# ------------------------------------- roofs that no plain op beats (issue 48)
@pytest.fixture
def quiet(monkeypatch):
    """Whatever the load, these measurements count as quiet (cached): the tests of the cache."""
    monkeypatch.setenv("FXPROF_PEAKS_BUSY", "off")


def test_roofs_from_a_curve_are_its_upper_envelope_with_a_level_per_drop():
    from fxprof.core.roofline import CACHE_FIT, roofs_from_curve
    from fxprof.measure.passes.peaks import roof_for

    mib = 2**20
    # (bytes read, rate): an L2 to 2 MiB, a cache to 64 MiB, memory beyond;
    # the 128 KiB point is slower than larger ones (an op's fixed cost), 8 MiB a little noisy
    curve = [(mib // 8, 90e9), (mib // 2, 200e9), (mib, 210e9), (2 * mib, 190e9), (4 * mib, 65e9), (8 * mib, 52e9),
             (16 * mib, 57e9), (64 * mib, 55e9), (128 * mib, 32e9), (512 * mib, 30e9)]
    memory, levels = roofs_from_curve(curve, [("L2", 2 * mib), ("L3", 480 * mib)])
    assert [lv["level"] for lv in levels] == ["L2", "L3"]  # held up to 128 MiB read: 171 MiB, within 4x of 480 MiB
    # a level sysfs does not report (a virtual machine's L3 said 32 MiB) follows the one before
    assert [lv["level"] for lv in roofs_from_curve(curve, [("L2", 2 * mib), ("L3", 32 * mib)])[1]] == ["L2", "L2+"]
    assert [lv["bytes_per_s"] for lv in levels] == [210e9, 65e9] and memory == 32e9
    assert levels[0]["bytes"] * CACHE_FIT == pytest.approx(4 * mib, rel=1e-6)  # up to the next level's first size
    # the rule that matters: no point of the curve is above the roof its size is held to
    for size, rate in curve:
        assert rate <= roof_for(size, memory, levels)[0], size
    # between two sizes, the roof of the smaller one (above what the op reaches, never below)
    assert roof_for(3 * mib, memory, levels) == (210e9, "L2") and roof_for(100 * mib, memory, levels) == (65e9, "L3")
    assert roof_for(200 * mib, memory, levels) == (32e9, "memory")
    # named when a reported cache is near; a flat curve is all memory
    assert roofs_from_curve([(mib, 50e9), (64 * mib, 45e9)]) == (50e9, [])
    with pytest.raises(ValueError, match="no point"):
        roofs_from_curve([])


def test_a_plain_op_above_its_roof_raises_that_roof_and_says_so():
    from fxprof.measure.passes.peaks import raise_roofs

    levels = [{"level": "L2", "bytes": 4 << 20, "bytes_per_s": 100e9}]
    check = [{"op": "add", "elements": 1, "bytes": 1 << 20, "moved": 3, "bytes_per_s": 120e9},  # 120% of L2's
             {"op": "copy", "elements": 1, "bytes": 64 << 20, "moved": 2, "bytes_per_s": 31e9},  # 103% of memory's
             {"op": "x + y", "elements": 1, "bytes": 256 << 20, "moved": 3, "bytes_per_s": 40e9}]  # 133% of memory's
    memory, levels, rows = raise_roofs(30e9, levels, check)
    assert levels[0]["bytes_per_s"] == 120e9 and memory == 40e9
    by_op = {r["op"]: r for r in rows}
    assert by_op["add"]["raised"] and by_op["add"]["level"] == "L2" and by_op["add"]["pct"] == pytest.approx(120)
    assert not by_op["copy"]["raised"] and by_op["x + y"]["raised"]


def test_plain_add_and_copy_of_any_size_read_at_most_105_pct_of_their_roof(own_cache):
    """Issue 48: `x + y` on 8M elements read 161-193% of its roof, copy reached 82 GB/s against a
    37.8 GB/s roof. The roof must be an upper bound: profiled plain adds (into a new tensor and
    into a given one), copies and in-place ReLUs at sizes between those the peaks measure, from
    the caches to main memory, read at most 105% of it. Against the median (roof_pct): noise only slows the
    profiled runs, and the peaks are the fastest of many interleaved calls; on one thread, so
    that another process taking a core cannot make a thread wait for its partner."""
    from fxprof.selfcheck import PLAIN_SIZES, PlainOps

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        peaks = machine_peaks("cpu", torch.float32, threads=1, sizes="quick")
        tensors = [torch.full((n,), v) for n in PLAIN_SIZES for v in (1.0, 2.0, 0.0)]
        prof = fxprof.profile(PlainOps(), *tensors, warmup=2, iters=9, peaks=peaks)
    finally:
        torch.set_num_threads(before)
    df = prof.df
    ops = df[df["bytes"].fillna(0) > 0]
    assert len(ops) == 4 * len(PLAIN_SIZES)
    assert sorted(set(ops["bytes"])) == sorted({k * n * 4 for n in PLAIN_SIZES for k in (2, 3)})  # read + written
    assert (ops["roof_pct"] <= 105).all(), ops[["bytes", "median_ms", "min_ms", "roof_ms", "roof_pct"]]
    # and the roofs mean something: an op whose roof is above 50 us (not the op's fixed cost)
    # reaches a twentieth of it or more at its best run. Not a tenth: the roof at a size is the
    # best kernel's there, and in place reads and writes one buffer, so it runs 3-4x a copy's
    # rate at the same bytes read; the copy reading 20 MiB writes 20 more beyond a 32 MiB L3
    # held to the rate of in place at 16 MiB (7x here, 10.1x on a CI runner's shared memory)
    big = ops[ops["roof_ms"] > 0.05]
    assert len(big) >= 3 and (big["roof_ms"] / big["min_ms"] > 0.05).all(), big[["bytes", "min_ms", "roof_ms"]]
    # the largest reads 40 MiB: a roof from the curve's far end, not an L2's
    largest = ops[ops["bytes"] == 3 * PLAIN_SIZES[-1] * 4]
    assert (largest["roof_ms"] > 3 * PLAIN_SIZES[-1] * 4 / max(lv["bytes_per_s"] for lv in peaks.caches) * 1e3).all()


def test_peaks_show_their_curve_levels_and_check(own_cache, quiet):
    peaks = machine_peaks("cpu", torch.float32, threads=1, sizes="quick")
    curve = peaks.details["curve"]
    assert {p["kernel"] for p in curve} == {"add", "copy", "in place"} and len({p["elements"] for p in curve}) == 12
    stability = peaks.details["curve_stability"]
    assert 3 <= stability["rounds"] <= 8
    # it stopped because a round raised nothing and the roofs repeat within 5%, or after its most rounds
    assert stability["rounds"] == 8 or (stability["last_rise"] <= 0.01 and stability["roof_spread"] <= 0.05 and stability["stable"])
    from fxprof.core.roofline import roofs_from_curve

    # the roofs are the curve's, raised where a plain op beat them; never below a curve point
    from fxprof.measure.passes.peaks import roof_points

    memory, levels = roofs_from_curve(roof_points(curve))
    assert peaks.bytes_per_s >= memory and len(peaks.caches) == len(levels)
    from fxprof.measure.passes.peaks import roof_for

    for point in curve:
        assert point["bytes_per_s"] <= roof_for(point["bytes"], peaks.bytes_per_s, peaks.caches)[0] * 1.0000001
    assert all(row["pct"] <= 105 or row["raised"] for row in peaks.details["check"])
    kept = json.loads(own_cache.read_text())
    assert kept["version"] == 2 and next(iter(kept["peaks"].values()))["details"]["curve"]


def test_cli_peaks_prints_the_bandwidth_curve(tmp_path):
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "c"), "PYTHONPATH": str(REPO)}
    done = _cli("peaks", "--quick", "--threads", "1", env=env)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "bandwidth curve (GB/s of bytes read + written, by the bytes an op reads; fastest of " in out
    rows = [line.split() for line in out.splitlines() if line.strip().endswith("%") and ("KiB" in line or "MiB" in line)]
    assert len(rows) >= 10 and rows[0][1] == "KiB"
    assert "levels (where the curve drops): " in out and "; memory " in out
    assert "check: 16 plain ops (add, copy, in place, x + y at 4 sizes between the curve's) reach at most " in out


# ------------------------------------------- peaks from a busy machine (issue 48.4)
def test_peaks_measured_on_a_busy_machine_are_not_cached_and_say_so(own_cache, monkeypatch):
    monkeypatch.setenv("FXPROF_PEAKS_BUSY", "0")  # any other process's CPU time makes it busy
    monkeypatch.setattr("fxprof.measure.passes.load.Load._stat", staticmethod(lambda: None))  # no /proc/stat: the fallback
    monkeypatch.setattr("fxprof.measure.passes.load.OWN_CPU_BUSY", 2.0)  # less than twice its time: busy
    busy = machine_peaks("cpu", torch.float32, threads=1, sizes="quick")
    assert busy.load["busy"] and 0 < busy.load["own_cpu"] and busy.load["threads"] == 1
    assert not own_cache.exists()
    line = peaks_source_line(busy)
    assert "not cached: the machine was busy (this one " in line and "fxprof peaks --refresh on a quiet machine" in line
    began = time.perf_counter()
    again = machine_peaks("cpu", torch.float32, threads=1, sizes="quick")  # this process measured them: no second time
    assert time.perf_counter() - began < 0.05 and again.measured_at == busy.measured_at
    assert again.origin == "process" and peaks_source_line(again).startswith("measured earlier in this process, ")
    assert "not cached: the machine was busy" in peaks_source_line(again)
    assert not own_cache.exists()
    # a profile on a quiet machine with these peaks says so on its roofline line
    monkeypatch.setattr("fxprof.measure.passes.peaks.os.getloadavg", lambda: (0.2, 0.2, 0.2))
    prof = fxprof.profile(torch.nn.ReLU(), torch.randn(4, 8), warmup=0, iters=2, peaks="quick")
    header = next(line for line in str(prof).splitlines() if line.startswith("roofline: peaks"))
    assert "measured on a busy machine (this one " in header
    assert "while this profile ran on a quiet one (load average 0.20 on" in header and "the roofs may be too low" in header
    monkeypatch.setattr("fxprof.measure.passes.peaks.os.getloadavg", lambda: (9.0, 9.0, 9.0))
    loaded = fxprof.profile(torch.nn.ReLU(), torch.randn(4, 8), warmup=0, iters=2, peaks="quick")
    assert "while this profile ran on a quiet one" not in str(loaded) and "measured on a busy machine" in str(loaded)


def test_a_quiet_measurement_is_cached_with_its_load(own_cache, monkeypatch):
    monkeypatch.setenv("FXPROF_PEAKS_BUSY", "1")  # other processes may use all the CPUs: quiet
    peaks = machine_peaks("cpu", torch.float32, threads=1, sizes="quick")
    load = next(iter(json.loads(own_cache.read_text())["peaks"].values()))["load"]
    assert load == peaks.load and load["busy"] is False and load["cpus"] == os.cpu_count()
    if os.path.exists("/proc/stat"):
        assert 0.0 <= load["others_cpu"] <= 1.0
    assert "busy" not in peaks.describe()
    # FXPROF_PEAKS_BUSY=off caches busy peaks, and they still say they were measured busy
    monkeypatch.setenv("FXPROF_PEAKS_BUSY", "off")
    monkeypatch.setattr("fxprof.measure.passes.load.Load._stat", staticmethod(lambda: None))
    monkeypatch.setattr("fxprof.measure.passes.load.OWN_CPU_BUSY", 2.0)
    busy = machine_peaks("cpu", torch.float64, threads=1, sizes="quick")
    kept = [e for k, e in json.loads(own_cache.read_text())["peaks"].items() if "float64" in k]
    assert busy.load["busy"] and kept and kept[0]["load"]["busy"]
    assert "measured on a busy machine" in machine_peaks("cpu", torch.float64, threads=1, sizes="quick").describe()
    monkeypatch.setenv("FXPROF_PEAKS_BUSY", "lots")
    with pytest.raises(ValueError, match="FXPROF_PEAKS_BUSY='lots'"):
        machine_peaks("cpu", torch.float32, threads=1, sizes="quick", refresh=True)


def test_the_report_draws_the_bandwidth_curve_and_its_roofs(own_cache, quiet):
    pytest.importorskip("plotly")
    from fxprof.views.report import render_report
    from fxprof.views.roofs_plot import bandwidth_figure

    peaks = machine_peaks("cpu", torch.float32, threads=1, sizes="quick")
    fig = bandwidth_figure(peaks.to_dict())
    add, copy, inplace, roof = fig.data
    assert (add.name, copy.name, inplace.name, roof.name) == ("add", "copy", "in place", "roof") and fig.layout.xaxis.type == "log"
    # the red step line is above every measured point of its size
    roof_at = dict(zip(roof.x, roof.y))
    assert all(y <= roof_at[x] * 1.0000001 for trace in (add, copy, inplace) for x, y in zip(trace.x, trace.y))
    prof = fxprof.profile(torch.nn.ReLU(), torch.randn(4, 8), warmup=0, iters=2, peaks=peaks)
    page = render_report(prof)
    assert 'id="roofs"' in page and "The bandwidth roofs" in page and "Levels where the curve drops: " in page
    given = fxprof.profile(torch.nn.ReLU(), torch.randn(4, 8), warmup=0, iters=2, peaks=(0.1, 10))
    assert 'id="roofs"' not in render_report(given) and bandwidth_figure(given.meta["peaks"]) is None


def test_peaks_with_more_threads_than_usable_cores_are_not_cached(own_cache, monkeypatch):
    """2 threads measured under `taskset -c 1` gave half the GEMM rate, cached as the 2-thread
    roof; convolutions of a later, unpinned 2-thread profile then read 191% of it. Threads that
    take turns on fewer cores make a busy measurement whatever the other processes do."""
    monkeypatch.setenv("FXPROF_PEAKS_BUSY", "1")  # other processes may use every CPU: only the cores decide
    monkeypatch.setattr("fxprof.measure.passes.load.os.sched_getaffinity", lambda pid: {0})
    cramped = machine_peaks("cpu", torch.float32, threads=2, sizes="quick")
    assert cramped.load["busy"] and cramped.load["usable_cores"] == 1
    assert not own_cache.exists()
    assert "2 threads on 1 usable core(s)" in peaks_source_line(cramped)
    alone = machine_peaks("cpu", torch.float32, threads=1, sizes="quick")  # one thread on one core: fine
    assert not alone.load["busy"] and own_cache.exists()
