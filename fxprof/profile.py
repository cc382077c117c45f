"""The recorded profile: raw per-node, per-run samples and the tables derived from them."""

from __future__ import annotations

import math
import os
from typing import Any, Iterable, Mapping, Sequence

import numpy as np
import pandas as pd

from .anatomy import ANATOMY_COLUMNS
from .recording import Recording
from .nodes import NodeInfo

__all__ = ["Profile", "sort_table", "COLUMNS", "SAMPLE_COLUMNS", "RUN_COLUMNS", "NODE_COLUMNS", "TABLE_COLUMNS", "LAUNCH_BOUND_RATIO"]

#: columns of the raw samples (one row per node per run) and of the per-run table
SAMPLE_COLUMNS = ("node", "run", "time_ms", "host_ms", "start_ms", "host_start_ms", "kernel_ms")
RUN_COLUMNS = ("run", "total_ms", "host_ms", "start_ms")

#: descriptive columns of the per-node table, taken from NodeInfo
NODE_COLUMNS = ("op", "target", "kind", "module_type", "scope", "range", "graph")

#: every column of the per-node table, in order, with its pandas dtype.
#: Times are milliseconds, shares percent, sizes bytes.
COLUMNS: dict[str, str] = {
    **{c: "str" for c in NODE_COLUMNS},
    "calls": "int64",
    "mean_ms": "float64",
    "median_ms": "float64",
    "std_ms": "float64",
    "iqr_ms": "float64",
    "min_ms": "float64",
    "max_ms": "float64",
    "total_ms": "float64",
    "host_mean_ms": "float64",
    "kernel_mean_ms": "float64",
    "kernel_median_ms": "float64",
    "bound": "str",
    "pct": "float64",
    "cum_pct": "float64",
    "flops": "Int64",
    "flops_pct": "float64",
    "gflops_per_s": "float64",
    "input_shapes": "str",
    "output_shape": "str",
    "dtype": "str",
    "out_bytes": "Int64",
    "mem_delta_bytes": "Int64",
    "mem_peak_bytes": "Int64",
    "skip_reason": "str",
}
TABLE_COLUMNS = tuple(COLUMNS)

#: with the CUDA event timer, a node is launch-bound when its host time is at least this
#: fraction of its device time (see docs/anatomy.md: event time includes the GPU's wait for
#: the launch, so a launch-bound node's device time is its host time plus a little).
LAUNCH_BOUND_RATIO = 0.8


class Profile:
    """The result of :func:`fxprof.profile`: every sample of every node, and tables from them.

    The raw samples are the single source of truth for times; :attr:`df`, :meth:`summary`,
    :meth:`group_by`, the CSV and every statistic are derived from them on demand. Per-node
    facts measured once in untimed passes (shapes, FLOPs, memory) are kept in
    :attr:`anatomy`.

    Attributes:
        nodes: one :class:`~fxprof.nodes.NodeInfo` per graph node, in graph order.
        meta: what was measured and how: ``model``, ``timer``, ``device``, ``warmup``,
            ``iters``, ``threads``, ``inputs``, ``torch``, ``fxprof``, ``created``...
    """

    def __init__(
        self,
        nodes: Sequence[NodeInfo],
        samples: pd.DataFrame,
        runs: pd.DataFrame,
        meta: dict[str, Any] | None = None,
        anatomy: Mapping[str, Mapping[str, Any]] | None = None,
    ):
        self.nodes: list[NodeInfo] = list(nodes)
        names = [n.name for n in self.nodes]
        if len(set(names)) != len(names):
            raise ValueError("node names must be unique within a profile")
        unknown = (set(samples["node"]) | set(anatomy or {})) - set(names)
        if unknown:
            raise ValueError(f"samples name nodes the graph does not have: {sorted(unknown)[:5]}")
        self._samples = _with_columns(samples, SAMPLE_COLUMNS, required=("node", "run", "time_ms", "host_ms"))
        self._runs = _with_columns(runs, RUN_COLUMNS, required=("run", "total_ms"))
        self._anatomy = _anatomy_frame(names, anatomy or {})
        self.meta: dict[str, Any] = dict(meta or {})

    @classmethod
    def from_recording(
        cls,
        nodes: Sequence[NodeInfo],
        recording: Recording,
        meta: dict[str, Any] | None = None,
        anatomy: Mapping[str, Mapping[str, Any]] | None = None,
    ) -> "Profile":
        samples = pd.DataFrame(
            {
                "node": pd.Series(recording.node, dtype=str),
                "run": np.asarray(recording.run, dtype=np.int64),
                "time_ms": np.asarray(recording.time_ms, dtype=np.float64),
                "host_ms": np.asarray(recording.host_ms, dtype=np.float64),
                "start_ms": np.asarray(recording.start_ms, dtype=np.float64),
                "host_start_ms": np.asarray(recording.host_start_ms, dtype=np.float64),
                "kernel_ms": np.asarray(recording.kernel_ms, dtype=np.float64)
                if len(recording.kernel_ms) == len(recording.node)
                else np.full(len(recording.node), np.nan),
            }
        )
        runs = pd.DataFrame(
            {
                "run": np.arange(recording.runs, dtype=np.int64),
                "total_ms": np.asarray(recording.run_total_ms, dtype=np.float64),
                "host_ms": np.asarray(recording.run_host_ms, dtype=np.float64),
                "start_ms": np.asarray(recording.run_start_ms, dtype=np.float64),
            }
        )
        return cls(nodes, samples, runs, meta, anatomy)

    # ----------------------------------------------------------------- raw data
    @property
    def samples(self) -> pd.DataFrame:
        """Long-form raw samples, one row per (node, run).

        Columns: ``node`` (fx node name), ``run`` (0-based timed run), ``time_ms`` (the
        timer's measurement: device time with the CUDA timers), ``host_ms`` (host clock),
        ``start_ms`` and ``host_start_ms`` (when the node started, from the run's start, by
        the timer and by the host clock), ``kernel_ms`` (CUDA kernel time launched inside the
        node, with ``timer="kernel"``; NaN otherwise).
        """
        return self._samples.copy()

    @property
    def runs(self) -> pd.DataFrame:
        """One row per timed run: ``run``, ``total_ms`` (timer), ``host_ms`` (host clock),
        ``start_ms`` (host clock, from the first timed run's start). Empty in isolated mode,
        which has no whole runs (there a sample's ``run`` is its repeat)."""
        return self._runs.copy()

    @property
    def anatomy(self) -> pd.DataFrame:
        """Per-node facts from the untimed passes, index ``node``: ``input_shapes``,
        ``output_shape``, ``dtype``, ``out_bytes``, ``flops``, ``mem_delta_bytes``,
        ``mem_peak_bytes`` (missing values are ``<NA>``: not measured)."""
        return self._anatomy.copy()

    @property
    def total_ms(self) -> list[float]:
        """The whole run's time, one value per timed run, in milliseconds."""
        return self._runs["total_ms"].tolist()

    @property
    def num_runs(self) -> int:
        return len(self._runs)

    @property
    def coverage(self) -> float:
        """Summed mean node time over mean run time (1.0 means every moment is in a node).

        The rest is the interpreter's own work between nodes (fetching arguments, freeing
        values, bookkeeping). NaN when there are no runs, and in isolated mode (no whole runs).
        """
        if self._runs.empty or self.meta.get("mode") == "isolated":
            return math.nan
        run_mean = float(self._runs["total_ms"].mean())
        node_sum = float(self._samples.groupby("node", sort=False)["time_ms"].mean().sum())
        return node_sum / run_mean if run_mean > 0 else math.nan

    @property
    def launch_bound_pct(self) -> float:
        """Share of node time (percent) in launch-bound nodes; NaN unless the timer is "cuda" or "kernel"."""
        table = self.df
        if not (table["bound"] != "").any():
            return math.nan
        return float(table.loc[table["bound"] == "launch", "pct"].sum())

    # ------------------------------------------------------------ derived tables
    @property
    def df(self) -> pd.DataFrame:
        """The per-node table in graph order; see :meth:`to_dataframe`."""
        return self.to_dataframe()

    def to_dataframe(self, sort: str | None = None, ascending: bool = False) -> pd.DataFrame:
        """One row per graph node, derived from the raw samples.

        Index ``node`` (fx node name). Columns (times in ms, shares in percent, sizes in bytes):

        - ``op``, ``target``, ``kind``, ``module_type``, ``scope``, ``range``, ``graph``: see
          :class:`~fxprof.nodes.NodeInfo`.
        - ``calls``: samples of this node (runs in which it executed).
        - ``mean_ms``, ``median_ms``, ``std_ms`` (sample standard deviation, NaN with one
          sample), ``iqr_ms`` (75th minus 25th percentile), ``min_ms``, ``max_ms``,
          ``total_ms`` (sum over samples): the timer's times.
        - ``host_mean_ms``: mean host time, from the host clock (equal to ``mean_ms`` on the
          CPU up to clock noise; on the GPU, the launch cost).
        - ``kernel_mean_ms``, ``kernel_median_ms``: CUDA kernel time launched inside the node
          (``timer="kernel"``; NaN otherwise): device busy time, without idle gaps.
        - ``bound``: ``"launch"`` when the GPU waited for Python, else ``"device"``. With
          ``timer="kernel"``: host time above kernel time. With ``"cuda"``: host time at least
          :data:`LAUNCH_BOUND_RATIO` of the event time (an event interval includes the GPU's
          wait for the launch, so it cannot fall below the host time by much). Empty otherwise.
        - ``pct``: the node's share of the summed mean node times (sums to 100).
        - ``cum_pct``: running sum of ``pct`` in the table's order.
        - ``flops``: floating-point operations of one call (``FlopCounterMode``; 0 for ops
          without a formula); ``flops_pct``: share of the model's FLOPs; ``gflops_per_s``:
          flops over the median time.
        - ``input_shapes``, ``output_shape``, ``dtype``, ``out_bytes``: what the node received
          and returned; ``mem_delta_bytes``, ``mem_peak_bytes``: CUDA allocator readings
          (``<NA>`` on the CPU).
        - ``skip_reason``: in isolated mode, why a node was not re-run ("" if it was).

        Args:
            sort: a column to sort by (descending unless ``ascending``); None keeps graph
                order. ``cum_pct`` always follows the returned order.
        """
        stats = _node_stats(self._samples)
        info = pd.DataFrame(
            {
                "node": [n.name for n in self.nodes],
                **{col: [getattr(n, col) for n in self.nodes] for col in NODE_COLUMNS},
            }
        ).set_index("node")
        table = info.join(stats, how="left").join(self._anatomy, how="left")
        table["calls"] = table["calls"].fillna(0).astype(np.int64)
        mean_sum = float(table["mean_ms"].sum())  # NaN (nodes that never ran) are skipped
        table["pct"] = (table["mean_ms"] / mean_sum * 100.0 if mean_sum > 0 else table["mean_ms"] * 0.0).fillna(0.0)
        table["bound"] = self._bound(table)
        flops = table["flops"].astype("float64")
        flops_sum = float(flops.sum())
        table["flops_pct"] = flops / flops_sum * 100.0 if flops_sum > 0 else flops * 0.0
        median = table["median_ms"].where(table["median_ms"] > 0)
        table["gflops_per_s"] = flops / median / 1e6
        table = sort_table(table, sort, ascending)
        return table[list(TABLE_COLUMNS)].astype(COLUMNS)

    def _bound(self, table: pd.DataFrame) -> pd.Series:
        timer = self.meta.get("timer")
        if timer == "kernel":  # kernel time is busy time: host time above it means the GPU waited
            launch = table["host_mean_ms"] > table["kernel_mean_ms"]
        elif timer == "cuda":
            launch = table["host_mean_ms"] >= LAUNCH_BOUND_RATIO * table["mean_ms"]
        else:
            return pd.Series("", index=table.index, dtype=str)
        measured = table["calls"] > 0
        return pd.Series(np.where(measured, np.where(launch, "launch", "device"), ""), index=table.index, dtype=str)

    def group_by(self, key: str = "op", depth: int = 1) -> pd.DataFrame:
        """Roll node times up by ``key``; see :func:`fxprof.rollup.group_by`."""
        from .rollup import group_by

        return group_by(self.df, key, depth=depth)

    # ----------------------------------------------------------------- rendering
    def summary(
        self,
        sort: str | None = "pct",
        top: int | None = None,
        columns: Iterable[str] | None = None,
        group_by: str | None = None,
        depth: int = 1,
        ascending: bool = False,
        width: int | None = None,
    ) -> str:
        """The hotspot table as text: a header of what was measured, then one row a node.

        Times are printed with the unit that suits their size (``1.57 ms``, ``18.3 us``);
        :attr:`df` and the CSV keep full precision in milliseconds.

        Args:
            sort: column to sort by, descending unless ``ascending`` (``None``: graph order).
            top: show only the first ``top`` rows (a footer counts the rest); None or 0: all.
            columns: table columns to show (default: a readable subset; any column of
                :attr:`df` may be named, e.g. ``["median_ms", "pct", "flops", "output_shape"]``;
                with ``group_by``, columns of the roll-up).
            group_by: show a roll-up (``"op"``, ``"module_type"``, ``"range"``, ``"scope"``,
                ``"graph"``) instead of one row per node; ``depth`` applies to ``"scope"``.
            width: fit the table to this many characters (long names shortened, then the
                least important columns dropped, with a note); None: no limit.
        """
        from .render import render_summary

        return render_summary(self, sort=sort, top=top, columns=columns, group_by=group_by, depth=depth,
                              ascending=ascending, width=width)

    def __str__(self) -> str:
        return self.summary()

    def _repr_html_(self) -> str:
        """Jupyter's rich display: the header and the top nodes, shares as bars (see :mod:`fxprof.html`)."""
        from .html import render_html

        return render_html(self)

    def __repr__(self) -> str:
        model = self.meta.get("model", "model")
        med = float(np.median(self.total_ms)) if self.num_runs else math.nan
        return (
            f"<fxprof.Profile {model}: {len(self.nodes)} nodes x {self.num_runs} runs, "
            f"timer {self.meta.get('timer', '?')}, median run {med:.3f} ms>"
        )

    # ------------------------------------------------------------------- export
    def to_csv(self, path: str | os.PathLike) -> None:
        """Write the per-node table (:attr:`df`) to ``path`` atomically.

        Read it back with :func:`fxprof.read_csv`. Raises
        :class:`~fxprof.errors.ProfileWriteError` if the path is not writable; the profile
        itself is untouched.
        """
        from .io import write_csv

        write_csv(self.df, path)

    def to_chrome_trace(self, path: str | os.PathLike, runs: Any = None) -> None:
        """Write every node of the chosen runs as a span on a timeline (Chrome trace JSON).

        Open it in https://ui.perfetto.dev or chrome://tracing. Timestamps are on the clock
        and epoch of torch.profiler's traces, so the two can be merged
        (:func:`fxprof.export.merge_chrome_traces`). Each span's args hold the node's kind,
        scope, shapes and FLOPs. With the CUDA timers there is a host track and a device
        track. ``runs``: None or ``"all"``, ``"median"``, ``"first:N"``, ``"last:N"``,
        ``"0-4"``, ``"0,5,9"``, or run indices. Written atomically.
        """
        from .export import write_chrome_trace

        write_chrome_trace(self, path, runs=runs)

    def save(self, path: str | os.PathLike) -> None:
        """Save the whole profile (raw samples, nodes, anatomy, metadata) as versioned JSON.

        Lossless: :func:`fxprof.load` gives back an equal profile. Written atomically.
        """
        from .io import save_profile

        save_profile(self, path)


def sort_table(table: pd.DataFrame, sort: str | None, ascending: bool = False) -> pd.DataFrame:
    """Sort a per-node table by a column (or ``"node"``) and recompute ``cum_pct`` in that order."""
    if sort is not None:
        if sort not in table.columns and sort != "node":
            raise ValueError(f"cannot sort by {sort!r}; columns are: {', '.join(TABLE_COLUMNS)}")
        if sort == "node":
            table = table.sort_index(ascending=ascending, kind="stable")
        else:
            table = table.sort_values(sort, ascending=ascending, kind="stable", na_position="last")
    table = table.copy()
    table["cum_pct"] = table["pct"].cumsum()
    return table


def _with_columns(frame: pd.DataFrame, columns: Sequence[str], required: Sequence[str]) -> pd.DataFrame:
    """``frame`` with ``columns`` in order; optional ones it lacks are filled with NaN."""
    missing = [c for c in required if c not in frame.columns]
    if missing:
        raise ValueError(f"missing column(s) {', '.join(missing)}; expected {', '.join(columns)}")
    frame = frame.reset_index(drop=True).copy()
    for col in columns:
        if col not in frame.columns:
            frame[col] = np.nan
    return frame[list(columns)]


def _anatomy_frame(names: list[str], records: Mapping[str, Mapping[str, Any]]) -> pd.DataFrame:
    frame = pd.DataFrame(
        {col: [records.get(n, {}).get(col) for n in names] for col in ANATOMY_COLUMNS},
        index=pd.Index(names, name="node", dtype=str),
    )
    for col, dtype in ANATOMY_COLUMNS.items():
        if dtype == "str":
            frame[col] = frame[col].fillna("").astype(str)
        else:
            frame[col] = pd.array(frame[col].tolist(), dtype=dtype)
    return frame


def _node_stats(samples: pd.DataFrame) -> pd.DataFrame:
    grouped = samples.groupby("node", sort=False)
    times = grouped["time_ms"]
    stats = pd.DataFrame(
        {
            "calls": times.count(),
            "mean_ms": times.mean(),
            "median_ms": times.median(),
            "std_ms": times.std(ddof=1),
            "iqr_ms": times.quantile(0.75) - times.quantile(0.25),
            "min_ms": times.min(),
            "max_ms": times.max(),
            "total_ms": times.sum(),
            "host_mean_ms": grouped["host_ms"].mean(),
            "kernel_mean_ms": grouped["kernel_ms"].mean(),
            "kernel_median_ms": grouped["kernel_ms"].median(),
        }
    )
    stats.index.name = "node"
    return stats
