"""Scale: memory and speed of the recording, the Profile, its files, traces and compare.

    python tests/benchmarks/scale.py [--shapes 10000x1000,1000x10000] [--json scale.json]

For each NODESxRUNS shape, samples are made synthetically but go through the real path: a
Recorder with a synthetic timer gets one ``append((name, m0, m1, h0, h1))`` per node per run
between ``begin_run``/``end_run`` (exactly what the interpreter does), then
``Profile.from_recording`` builds the profile. Node times are drawn per node (a log-normal
cost with 5% noise), so per-node statistics have real work to do. Measured, each once, in
this order (seconds, unless the unit says otherwise):

- ``record_s``: the whole recording, including making the synthetic marks; ``end_run_us_per_sample``:
  the conversion of marks into columns at the end of each run, per sample (CPU time).
- ``build_and_df_s``: ``Profile.from_recording`` plus the first ``profile.df`` (target < 2 s);
  ``df_again_ms``: the next access (cached); ``summary_s``, ``group_by_s``.
- ``bytes_per_sample``: memory held by the profile: the buffers its sample columns live in (the
  recording's own, which a profile takes without copying) plus what ``tracemalloc`` sees
  allocated while a second profile is built from the same recording and its table computed
  (target <= 64); and the recording's own bytes per sample (capacity included; the runs
  reserve room for all of them after the first, as ``fxprof.profile`` does).
- ``save_s``/``load_s``: ``save``/``fxprof.load`` of a ``.npz`` file (target < 2 s each), with
  the file's bytes per sample.
- ``trace_s``: the default trace (fastest, median and slowest run; target < 2 s).
- ``compare_s``: ``fxprof.compare`` of the profile with its reloaded copy (target < 2 s).

With ``--json-format`` (on by default for shapes of at most 1M samples) the JSON file is saved
and loaded too, and with ``--all-trace`` (same default) a trace of every run is written, so the
text formats can be compared with the figures measured before the columnar recording.

Every timed measure is also given in CPU seconds of this process (``*_cpu_s``): on a shared
machine the wall time includes time other processes held the CPU.
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import tempfile
import time
import tracemalloc
from typing import Any, Sequence

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))

import fxprof  # noqa: E402
from fxprof.core.nodes import NodeInfo  # noqa: E402
from fxprof.core.profile import Profile  # noqa: E402
from fxprof.measure.timing.recorder import Recorder  # noqa: E402
from fxprof.measure.timing.timers import Timer  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import print_table, write_json  # noqa: E402

TARGETS = {"build_and_df_s": 2.0, "bytes_per_sample": 64.0, "save_s": 2.0, "load_s": 2.0, "trace_s": 2.0, "compare_s": 2.0,
           "json_save_s": 2.0, "json_load_s": 2.0}
_KINDS = ("conv2d", "batch_norm", "relu", "add", "linear", "softmax", "layer_norm", "matmul")


class SyntheticTimer(Timer):
    """Marks are integers (ns) the benchmark sets; converted in bulk as the CPU timer does."""

    name = "cpu"

    def __init__(self) -> None:
        self.now = 0

    def mark(self) -> int:
        return self.now

    def host_ns(self) -> int:
        return self.now

    def elapsed_ms(self, start: int, end: int) -> float:
        return (end - start) / 1e6

    def elapsed_ms_many(self, starts: Sequence[int], ends: Sequence[int]) -> Any:
        return (np.asarray(ends, dtype=np.int64) - np.asarray(starts, dtype=np.int64)) / 1e6


def synthetic_nodes(count: int) -> list[NodeInfo]:
    nodes = []
    for i in range(count):
        kind = _KINDS[i % len(_KINDS)]
        scope = f"layers.{i // 200}.block.{(i // 20) % 10}"
        nodes.append(NodeInfo(f"{kind}_{i}", "call_function", f"torch.{kind}", "", scope, "", kind))
    return nodes


def record(nodes: list[NodeInfo], runs: int, seed: int = 0) -> tuple[Recorder, float, float]:
    """Every run through the real Recorder; returns it, the seconds taken, and the CPU seconds
    spent in ``end_run`` (the conversion of marks to columns)."""
    rng = np.random.default_rng(seed)
    names = [n.name for n in nodes]
    cost_ns = (rng.lognormal(mean=9.0, sigma=1.0, size=len(nodes)) + 1000).astype(np.int64)  # ~8 us median
    timer = SyntheticTimer()
    recorder = Recorder(timer)
    append = recorder.append
    t0 = time.perf_counter()
    in_end_run = 0.0
    for _ in range(runs):
        recorder.begin_run()
        durations = (cost_ns * rng.normal(1.0, 0.05, size=len(nodes))).astype(np.int64).clip(1)
        gaps = np.full(len(nodes), 2_000, dtype=np.int64)  # the interpreter's own work between nodes
        m0 = timer.now + np.cumsum(gaps + np.concatenate(([0], durations[:-1])))
        m1 = m0 + durations
        h0, h1 = m0 + 100, m1 - 100
        for mark in zip(names, m0.tolist(), m1.tolist(), h0.tolist(), h1.tolist()):
            append(mark)
        timer.now = int(m1[-1]) + 2_000
        e0 = time.process_time()
        recorder.end_run()
        in_end_run += time.process_time() - e0
        if recorder.recording.runs == 1:  # as fxprof.profile does: room for every run, no growth room
            recorder.recording.reserve(len(recorder.recording) * runs)
        timer.now += 50_000  # between runs
    return recorder, time.perf_counter() - t0, in_end_run


#: CPU seconds per measure (the process's own time: on a shared machine wall time also counts
#: the time other processes held the CPU; on a quiet machine the two agree)
CPU: dict[str, float] = {}


def _buffer_bytes(columns: Any) -> int:
    """Bytes of the distinct buffers the sample columns are views of (or are)."""
    arrays = [columns.node, columns.run, columns.time_ms, columns.host_ms, columns.start_ms, columns.host_start_ms]
    if columns.kernel_ms is not None:
        arrays.append(columns.kernel_ms)
    bases = {id(a.base if a.base is not None else a): (a.base if a.base is not None else a) for a in arrays}
    return sum(b.nbytes for b in bases.values())


def _timed(fn: Any, label: str = "") -> tuple[Any, float]:
    c0, t0 = time.process_time(), time.perf_counter()
    out = fn()
    if label:
        CPU[label] = time.process_time() - c0
    return out, time.perf_counter() - t0


def measure(node_count: int, runs: int, directory: str, text_formats: bool, all_trace: bool) -> dict[str, Any]:
    CPU.clear()
    nodes = synthetic_nodes(node_count)
    meta = {"model": f"synthetic {node_count}x{runs}", "timer": "cpu", "iters": runs}
    c0 = time.process_time()
    recorder, record_s, end_run_s = record(nodes, runs)
    record_cpu_s = time.process_time() - c0
    rec = recorder.recording
    samples = len(rec)
    row: dict[str, Any] = {"shape": f"{node_count}x{runs}", "samples": samples, "record_s": record_s, "record_cpu_s": record_cpu_s,
                           "end_run_us_per_sample": end_run_s / samples * 1e6, "recording_bytes_per_sample": rec.nbytes / samples}
    gc.collect()

    def build() -> Profile:
        prof = Profile.from_recording(nodes, rec, meta)  # noqa: F821 (built before the del below)
        prof.df
        return prof

    prof, row["build_and_df_s"] = _timed(build, "build_and_df_s")
    _, seconds = _timed(lambda: prof.df)
    row["df_again_ms"] = seconds * 1e3
    _, row["summary_s"] = _timed(lambda: prof.summary(top=20))
    _, row["group_by_s"] = _timed(lambda: prof.group_by("scope", depth=2))

    # memory: a second profile from the same recording, traced while it is built, plus the
    # buffers its columns live in (the recording's own: a profile takes them without a copy)
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    second = build()
    gc.collect()
    held = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    row["bytes_per_sample"] = (held + _buffer_bytes(second.columns)) / samples
    del second
    del recorder, rec
    gc.collect()

    path = os.path.join(directory, "p.npz")
    _, row["save_s"] = _timed(lambda: prof.save(path), "save_s")
    row["file_bytes_per_sample"] = os.path.getsize(path) / samples
    loaded, row["load_s"] = _timed(lambda: fxprof.load(path), "load_s")
    assert np.array_equal(loaded.columns.time_ms, prof.columns.time_ms) and loaded.meta == prof.meta
    os.unlink(path)

    trace = os.path.join(directory, "t.json")
    _, row["trace_s"] = _timed(lambda: prof.to_chrome_trace(trace), "trace_s")
    row["trace_mb"] = os.path.getsize(trace) / 1e6
    os.unlink(trace)
    diff, row["compare_s"] = _timed(lambda: fxprof.compare(prof, loaded), "compare_s")
    assert (diff["ratio"].dropna() == 1.0).all()

    row.update({f"{k[:-2]}_cpu_s": v for k, v in CPU.items()})
    if text_formats:
        path = os.path.join(directory, "p.json")
        _, row["json_save_s"] = _timed(lambda: prof.save(path), "json_save_s")
        row["json_bytes_per_sample"] = os.path.getsize(path) / samples
        _, row["json_load_s"] = _timed(lambda: fxprof.load(path), "json_load_s")
        row.update({f"{k[:-2]}_cpu_s": CPU[k] for k in ("json_save_s", "json_load_s")})
        os.unlink(path)
    if all_trace:
        _, row["all_runs_trace_s"] = _timed(lambda: prof.to_chrome_trace(trace, runs="all"))
        row["all_runs_trace_mb"] = os.path.getsize(trace) / 1e6
        os.unlink(trace)
    return row


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shapes", default="10000x1000,1000x10000,10000x100", help="NODESxRUNS, comma-separated")
    parser.add_argument("--json", help="write the figures to this file")
    parser.add_argument("--json-format", choices=["auto", "yes", "no"], default="auto", help="also save/load JSON (auto: up to 1M samples)")
    parser.add_argument("--all-trace", choices=["auto", "yes", "no"], default="auto", help="also trace every run (auto: up to 1M samples)")
    args = parser.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory(prefix="fxprof-scale-") as directory:
        for shape in args.shapes.split(","):
            node_count, runs = (int(v) for v in shape.lower().split("x"))
            small = node_count * runs <= 1_000_000
            rows.append(measure(node_count, runs, directory,
                                text_formats=args.json_format == "yes" or (args.json_format == "auto" and small),
                                all_trace=args.all_trace == "yes" or (args.all_trace == "auto" and small)))
            gc.collect()
    print_table("scale: profile, files, trace, compare (seconds unless stated)", [
        {k: r.get(k, float("nan")) for k in ("shape", "samples", "record_s", "record_cpu_s", "end_run_us_per_sample", "build_and_df_s", "df_again_ms",
                                             "summary_s", "group_by_s", "bytes_per_sample", "recording_bytes_per_sample")} for r in rows])
    print_table("scale: files and traces", [
        {k: r.get(k, float("nan")) for k in ("shape", "save_s", "load_s", "file_bytes_per_sample", "trace_s", "trace_mb", "compare_s",
                                             "json_save_s", "json_load_s", "json_bytes_per_sample", "all_runs_trace_s", "all_runs_trace_mb")} for r in rows])
    verdicts = []
    for r in rows:
        for key, target in TARGETS.items():
            if key not in r:  # the JSON file is saved only with --json-format
                continue
            cpu = r.get(f"{key[:-2]}_cpu_s", float("nan"))
            verdicts.append({"shape": r["shape"], "measure": key, "value": r[key], "cpu_s": cpu, "target": target,
                             "met": "yes" if r[key] <= target else "NO"})
    print_table("scale: targets", verdicts)
    result = {"scale": rows, "targets": verdicts, "env": {"python": sys.version.split()[0], "numpy": np.__version__,
                                                         "pandas": __import__("pandas").__version__, "cpus": os.cpu_count()}}
    write_json(args.json, result)
    return result


if __name__ == "__main__":
    main()
