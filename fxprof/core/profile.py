"""The recorded profile: raw per-node, per-run samples and the tables derived from them."""

from __future__ import annotations

import math
import os
from typing import TYPE_CHECKING, Any, Iterable, Mapping, Sequence

import numpy as np
import pandas as pd

from ..columns import node_columns, table_dtypes
from ..vocab import ANATOMY_COLUMNS
from . import hooks
from .columnar import SampleColumns
from .memory import MemorySummary, memory_summary
from .nodes import NodeInfo
from .recording import Recording
from .roofline import roofline_columns
from .stats import shares

if TYPE_CHECKING:
    from .contention import Contention

__all__ = ["Profile", "sort_table", "COLUMNS", "SAMPLE_COLUMNS", "RUN_COLUMNS", "NODE_COLUMNS", "TABLE_COLUMNS", "LAUNCH_IDLE_SHARE"]

#: columns of the raw samples (one row per node per run) and of the per-run table
SAMPLE_COLUMNS = ("node", "run", "time_ms", "host_ms", "start_ms", "host_start_ms", "kernel_ms")
RUN_COLUMNS = ("run", "total_ms", "host_ms", "start_ms")

#: descriptive columns of the per-node table, taken from NodeInfo
NODE_COLUMNS = node_columns()

#: every column of the per-node table, in order, with its pandas dtype (declared in fxprof/columns.py).
#: Times are milliseconds, shares percent, sizes bytes.
COLUMNS: dict[str, str] = table_dtypes()
TABLE_COLUMNS = tuple(COLUMNS)

#: the ``bound`` rule lives in :mod:`fxprof.core.bound` (stated with its evidence in docs/anatomy.md)
from .bound import LAUNCH_IDLE_SHARE  # noqa: E402


class Profile:
    """The result of :func:`fxprof.profile`: every sample of every node, and tables from them.

    The raw samples are the single source of truth for times; :attr:`df`, :meth:`summary`,
    :meth:`group_by`, the CSV and every statistic are derived from them. The samples are kept
    as numpy columns (see :mod:`fxprof.core.columnar`) and never change, so the per-node table is
    computed once and cached (recomputed only if :attr:`nodes` or ``meta["timer"]`` change). Per-node
    facts measured once in untimed passes (shapes, FLOPs, memory) are kept in
    :attr:`anatomy`.

    Attributes:
        nodes: one :class:`~fxprof.core.nodes.NodeInfo` per graph node, in graph order.
        meta: what was measured and how: ``model``, ``timer``, ``device``, ``warmup``,
            ``iters``, ``threads``, ``inputs``, ``torch``, ``fxprof``, ``created``...
    """

    def __init__(
        self,
        nodes: Sequence[NodeInfo],
        samples: pd.DataFrame | SampleColumns,
        runs: pd.DataFrame,
        meta: dict[str, Any] | None = None,
        anatomy: Mapping[str, Mapping[str, Any]] | None = None,
    ):
        self.nodes: list[NodeInfo] = list(nodes)
        names = [n.name for n in self.nodes]
        if len(set(names)) != len(names):
            raise ValueError("node names must be unique within a profile")
        unknown = set(anatomy or {}) - set(names)
        if unknown:
            raise ValueError(f"samples name nodes the graph does not have: {sorted(unknown)[:5]}")
        if isinstance(samples, SampleColumns):
            if samples.names != tuple(names):
                raise ValueError("the samples' node list is not the profile's")
            self._columns = samples
        else:
            _with_columns(samples.iloc[:0], SAMPLE_COLUMNS, required=("node", "run", "time_ms", "host_ms"))
            self._columns = SampleColumns.from_frame(samples, names)
        self._table_cache: tuple[Any, pd.DataFrame] | None = None
        # torch.distributed ranks (fxprof.core.ranks): each run carries its rank, the rank's own
        # run number and the barrier wait before it; run numbers stay unique across ranks
        ranked = ("rank", "rank_run", "barrier_ms") if "rank" in runs.columns else ()
        self._runs = _with_columns(runs, RUN_COLUMNS + ranked, required=("run", "total_ms"))
        self._anatomy = _anatomy_frame(names, anatomy or {})
        self.meta: dict[str, Any] = dict(meta or {})
        #: False (default): runs in :attr:`outlier_runs` are left out of every derived statistic
        #: (tables, shares, roll-ups, coverage, plots, compare); True keeps them. Samples are
        #: never deleted either way.
        self.keep_outliers: bool = False

    @classmethod
    def from_recording(
        cls,
        nodes: Sequence[NodeInfo],
        recording: Recording,
        meta: dict[str, Any] | None = None,
        anatomy: Mapping[str, Mapping[str, Any]] | None = None,
    ) -> "Profile":
        samples = SampleColumns.from_recording(recording, [n.name for n in nodes])
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
        """Long-form raw samples, one row per call of a node in a run (one per (node, run) unless
        a graph runs several times per model call).

        Columns: ``node`` (fx node name), ``run`` (0-based timed run), ``call`` (0-based call
        of the node within that run: a graph that dynamo runs several times per model call,
        such as one repeated block's, gives its nodes several calls per run), ``time_ms`` (the
        timer's measurement: device time with the CUDA timers), ``host_ms`` (host clock),
        ``start_ms`` and ``host_start_ms`` (when the node started, from the run's start, by
        the timer and by the host clock), ``kernel_ms`` (CUDA kernel time launched inside the
        node, with ``timer="kernel"``; NaN otherwise).

        A new DataFrame on every access, built from the compact columns: ``node`` is
        categorical (its categories are the nodes that have samples, in graph order), ``run``
        int64, the times float64.
        """
        return self._with_rank(self._columns.frame())

    @property
    def _samples(self) -> pd.DataFrame:
        # the long-form frame under its former private name, for code written against it
        return self._with_rank(self._columns.frame())

    def _with_rank(self, frame: pd.DataFrame) -> pd.DataFrame:
        """With torch.distributed ranks: a ``rank`` column, looked up from each sample's run."""
        if "rank" in self._runs.columns:
            ranks = pd.Series(self._runs["rank"].to_numpy(dtype=np.int64), index=self._runs["run"].to_numpy(dtype=np.int64))
            frame["rank"] = ranks.reindex(frame["run"].to_numpy(dtype=np.int64)).to_numpy()
        return frame

    @property
    def ranks(self) -> list[int]:
        """The ``torch.distributed`` ranks whose runs this profile holds (``[]`` for a profile
        made without a process group). See :mod:`fxprof.core.ranks`."""
        if "rank" not in self._runs.columns:
            return []
        return sorted({int(r) for r in self._runs["rank"].dropna()})


    @property
    def columns(self) -> SampleColumns:
        """The samples as read-only numpy columns (:class:`~fxprof.core.columnar.SampleColumns`):
        what :attr:`samples` is made from, without building a DataFrame of every sample."""
        return self._columns

    @property
    def stored_runs(self) -> pd.DataFrame:
        """The per-run table as stored (:attr:`runs` without its derived ``outlier`` column);
        read it, do not change it."""
        return self._runs

    @property
    def runs(self) -> pd.DataFrame:
        """One row per timed run: ``run``, ``total_ms`` (timer), ``host_ms`` (host clock),
        ``start_ms`` (host clock, from the first timed run's start), ``outlier`` (True for a
        run far slower than the rest, see :attr:`outlier_runs`; derived, not stored). Empty in
        isolated mode, which has no whole runs (there a sample's ``run`` is its repeat)."""
        runs = self._runs.copy()
        runs["outlier"] = runs["run"].isin(self.outlier_runs)
        found = self.contention
        if found is not None:  # measured: what each run lost to other processes, and the busy ones
            runs["lost_ms"] = found.lost_ms
            runs["busy"] = found.busy
        return runs

    # ----------------------------------------------------------------- what the profile is (meta)
    # typed reads of the meta keys that code branches on (every key: fxprof/core/metakeys.py)
    @property
    def capture(self) -> str | None:
        """How the graph was made (``meta["capture"]``): ``"symbolic"``, ``"dynamo"``,
        ``"export"``, ``"graphmodule"``, ``"training"``, ``"compiled"``...; None when not said."""
        return self.meta.get("capture")

    @property
    def is_compiled(self) -> bool:
        """A profile of a compiled program's kernels (a ``torch.compile``'d model, or
        ``compile=``): ``meta["capture"]`` is ``"compiled"``. The one definition of it."""
        return self.meta.get("capture") == "compiled"

    @property
    def compiled(self) -> dict[str, Any]:
        """Compiled mode's facts (``meta["compiled"]``: backend, compile_s, graphs, kernels,
        unprofiled_ms, breaks...); ``{}`` when there are none."""
        return self.meta.get("compiled") or {}

    @property
    def is_isolated(self) -> bool:
        """Made in isolated mode (``meta["mode"] == "isolated"``: each node re-run alone, no whole runs)."""
        return self.meta.get("mode") == "isolated"

    @property
    def contention(self) -> "Contention | None":
        """What the timed runs lost to other processes (:mod:`fxprof.core.contention`): per run,
        the busy mask, the load; None when it was not measured."""
        if self.is_isolated:
            return None
        from .contention import contention

        return contention(self.meta, self._runs)

    @property
    def busy_runs(self) -> list[int]:
        """Runs that lost at least 5% of their time to other processes (a busy machine); unless
        :attr:`keep_outliers` is set, they are left out of every derived statistic, as
        :attr:`outlier_runs` are, when enough quiet runs remain (:mod:`fxprof.core.contention`)."""
        found = self.contention
        return found.busy_runs if found is not None else []

    def _left_out(self, keep_outliers: bool | None) -> list[int]:
        """The runs the statistics leave out: outliers, and busy runs where enough quiet ones remain."""
        if (self.keep_outliers if keep_outliers is None else keep_outliers):
            return []
        found = self.contention
        busy = found.left_out_runs if found is not None else []
        return sorted(set(self.outlier_runs) | set(busy))

    @property
    def outlier_runs(self) -> list[int]:
        """Runs whose total time is above ``max(Q3 + 3 IQR, 1.2 x median)`` of all run totals
        (:func:`fxprof.core.stats.outlier_fence`; none with fewer than 5 runs). Unless
        :attr:`keep_outliers` is set, their samples are left out of every derived statistic."""
        if self.is_isolated:
            return []
        from .stats import outlier_mask

        totals = self._runs["total_ms"].to_numpy()
        if "rank" in self._runs.columns:  # each rank's runs against its own (a slow rank is no outlier)
            mask = np.zeros(len(totals), dtype=bool)
            for rows in self._runs.groupby("rank", observed=True).indices.values():
                mask[rows] = outlier_mask(totals[rows])
            return self._runs.loc[mask, "run"].astype(int).tolist()
        return self._runs.loc[outlier_mask(totals), "run"].astype(int).tolist()

    def kept_samples(self, keep_outliers: bool | None = None) -> pd.DataFrame:
        """The samples the statistics use: :attr:`samples` without the outlier (and busy) runs' (unless kept)."""
        outliers = self._left_out(keep_outliers)
        return self._samples[~self._samples["run"].isin(outliers)] if outliers else self._samples

    def kept_totals(self, keep_outliers: bool | None = None) -> list[float]:
        """Run totals (ms) without the outlier (and busy) runs (unless kept)."""
        outliers = self._left_out(keep_outliers)
        return self._runs.loc[~self._runs["run"].isin(outliers), "total_ms"].tolist()

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
    def num_samples(self) -> int:
        """How many samples the profile holds (``len(profile.samples)``, without building that
        DataFrame: a long-form frame of millions of rows costs hundreds of MB)."""
        return len(self._columns)

    @property
    def memory(self) -> "MemorySummary | None":
        """The run's memory peak and what was held then (:mod:`fxprof.core.memory`); None without the memory pass."""
        return memory_summary(self.meta, self.nodes)

    @property
    def coverage(self) -> float:
        """Summed median node time over the median run time (1.0 means every moment is in a
        node), over the runs the statistics keep (outlier runs left out unless
        :attr:`keep_outliers`): the same statistic, medians, as the table's ``median_ms`` and
        the header's run time beside it.

        The rest is the interpreter's own work between nodes (fetching arguments, freeing
        values, bookkeeping). NaN when there are no runs, and in isolated mode (no whole runs).
        """
        if self._runs.empty or self.is_isolated:
            return math.nan
        run_median = float(np.median(self.kept_totals()))
        if len(self.ranks) > 1:  # gathered: each node's median is over its own rank's runs only
            return self._per_run_node_sum() / run_median if run_median > 0 else math.nan
        node_sum = float(self._columns.node_stats(self.kept_runs())["median_ms"].sum())  # per model run
        return node_sum / run_median if run_median > 0 else math.nan

    def _per_run_node_sum(self) -> float:
        """Median over the kept runs of each run's summed node time: with several ranks, and
        graphs that differ between them, summing per-node means would add every rank's nodes
        into one run (a coverage of 166%)."""
        columns = self._columns
        kept = self.kept_runs()
        runs = self._runs["run"].to_numpy(dtype=np.int64) if kept is None else np.asarray(kept, dtype=np.int64)
        if not len(runs):
            return math.nan
        times = np.nan_to_num(np.asarray(columns.time_ms, dtype=np.float64))
        sums = np.bincount(np.asarray(columns.run, dtype=np.int64), weights=times, minlength=int(runs.max()) + 1)
        return float(np.median(sums[runs]))

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
        """The per-node table in graph order; see :meth:`to_dataframe`. A copy of a cached table."""
        return self.to_dataframe()

    def to_dataframe(self, sort: str | None = None, ascending: bool = False, keep_outliers: bool | None = None) -> pd.DataFrame:
        """One row per graph node, derived from the raw samples (without the samples of
        :attr:`outlier_runs` unless ``keep_outliers``, default :attr:`keep_outliers`).

        Index ``node`` (fx node name). Columns (times in ms, shares in percent, sizes in bytes):

        - ``op``, ``target``, ``kind``, ``module_type``, ``scope``, ``range``, ``graph``,
          ``scope_source`` (``recorded``, ``frame``, ``inferred`` or ""), ``phase``
          (``forward``, ``loss``, ``backward``, ``optimizer``), ``forward_node`` (the forward
          node a backward node differentiates), ``origins`` and ``raw_name`` (a compiled
          model's kernels: the eager nodes each computes, and its generated name): see
          :class:`~fxprof.core.nodes.NodeInfo`.
        - ``calls``: samples of this node (one per call, in every run in which it executed).
        - ``calls_per_run``: calls per model run (1.0 unless the node's graph runs several
          times in one model call, as dynamo graphs of a repeated block do).
        - ``mean_ms``, ``median_ms``, ``std_ms`` (sample standard deviation over runs, NaN
          with one run), ``iqr_ms`` (75th minus 25th percentile), ``min_ms``, ``max_ms``:
          the timer's time per model run (a node's calls within one run are summed first, so
          ``pct``, ``coverage``, FLOPs and roll-ups count every call); ``total_ms`` (sum over
          all samples).
        - ``host_mean_ms``: mean host time, from the host clock (equal to ``mean_ms`` on the
          CPU up to clock noise; on the GPU, the launch cost).
        - ``kernel_mean_ms``, ``kernel_median_ms``: CUDA kernel time launched inside the node
          (``timer="kernel"``; NaN otherwise): device busy time, without idle gaps.
        - ``bound`` (``"cuda"``/``"kernel"`` timers; empty otherwise): ``"launch"`` when the GPU
          idled for more than half of the node's stream time waiting for the host to launch
          it, ``"device"`` when work queued ahead hid the launch, ``"sync"`` when the node
          synchronized with the device, empty for nodes that launch no device work. See
          :mod:`fxprof.core.bound`.
        - ``pct``: the node's share of the summed **median** node times (sums to 100): one slow
          sample cannot move it (the share of summed means if every median is 0).
        - ``cum_pct``: running sum of ``pct`` in the table's order.
        - ``flops``: floating-point operations per model run (``FlopCounterMode``; 0 for ops
          without a formula); ``flops_pct``: share of the model's FLOPs; ``gflops_per_s``:
          flops over the median time.
        - ``bytes``: bytes the node's ops touch (the parts of its inputs and a called module's
          parameters they read, its outputs; 0 for views and plumbing): a lower bound (docs/roofline.md).
        - ``intensity`` (FLOPs per byte), ``roof_ms`` (the least time the node could take at
          the machine peaks in ``meta["peaks"]``), ``roof_pct`` (roof over median, percent),
          ``headroom_ms`` (median minus roof), ``limit`` (``compute``, ``memory`` or
          ``overhead``): see :func:`fxprof.core.roofline.roofline_columns`. NaN and "" without
          peaks or without the anatomy pass.
        - ``input_shapes``, ``output_shape``, ``dtype``, ``out_bytes``: what the node received
          and returned; ``mem_delta_bytes``, ``mem_peak_bytes``: CUDA allocator readings
          (``<NA>`` on the CPU).
        - ``skip_reason``: in isolated mode, why a node was not re-run ("" if it was).
        - ``rank_min_ms``, ``rank_max_ms``, ``slowest_rank``: only in a profile with
          ``torch.distributed`` ranks (:func:`fxprof.gather`): the smallest and largest of the
          ranks' median times, and the rank with the largest. The other statistics are over
          every rank's runs (each rank's runs have their own run numbers).

        Args:
            sort: a column to sort by (descending unless ``ascending``); None keeps graph
                order. ``cum_pct`` always follows the returned order.
        """
        # The table depends on the samples and anatomy (both fixed), the nodes, the timer and
        # which runs the statistics keep.
        runs = self.kept_runs(keep_outliers)
        peaks = self.meta.get("peaks")
        key = (tuple(self.nodes), self.meta.get("timer"), runs, dict(peaks) if isinstance(peaks, dict) else peaks)
        if self._table_cache is None or self._table_cache[0] != key:
            self._table_cache = (key, self._build_table(runs))
        return sort_table(self._table_cache[1], sort, ascending)

    def kept_runs(self, keep_outliers: bool | None = None) -> tuple[int, ...] | None:
        """The runs the statistics use, or None for all of them (no outliers or busy runs, or kept)."""
        outliers = self._left_out(keep_outliers)
        if not outliers:
            return None
        left_out = set(outliers)
        return tuple(int(r) for r in self._runs["run"] if int(r) not in left_out)

    def table_of_runs(self, runs: Iterable[int]) -> pd.DataFrame:
        """The per-node table (:meth:`to_dataframe`'s columns, graph order) of ``runs`` alone."""
        return self._build_table(tuple(int(r) for r in runs))

    def _build_table(self, runs: tuple[int, ...] | None) -> pd.DataFrame:
        stats = self._columns.node_stats(runs)
        info = pd.DataFrame(
            {
                "node": [n.name for n in self.nodes],
                **{col: [getattr(n, col) for n in self.nodes] for col in NODE_COLUMNS},
            }
        ).set_index("node")
        table = info.join(stats, how="left").join(self._anatomy, how="left")
        table["calls"] = table["calls"].fillna(0).astype(np.int64)
        table["calls_per_run"] = table["calls_per_run"].fillna(0.0)
        table["pct"] = shares(table)
        table["bound"] = self._bound(table)
        flops = table["flops"].astype("float64")
        flops_sum = float(flops.sum())
        table["flops_pct"] = flops / flops_sum * 100.0 if flops_sum > 0 else flops * 0.0
        median = table["median_ms"].where(table["median_ms"] > 0)
        table["gflops_per_s"] = flops / median / 1e6
        table = table.join(roofline_columns(table, self.meta.get("peaks")))  # see fxprof.core.roofline
        table["cum_pct"] = table["pct"].cumsum()
        if "rank" in self._runs.columns:  # torch.distributed ranks: per-rank spread
            from .rankstats import RANK_TABLE_COLUMNS, rank_spread

            table = table.join(rank_spread(self, runs), how="left")
            return table[[*TABLE_COLUMNS, *RANK_TABLE_COLUMNS]].astype({**COLUMNS, **RANK_TABLE_COLUMNS})
        return table[list(TABLE_COLUMNS)].astype(COLUMNS)

    def _bound(self, table: pd.DataFrame) -> pd.Series:
        from .bound import DEVICE_TIMERS, bound_verdicts

        if self.meta.get("timer") not in DEVICE_TIMERS or self.is_isolated:
            return pd.Series("", index=table.index, dtype=str)
        return bound_verdicts(self._samples, table, no_event=self.meta.get("no_event_nodes", ()))


    def __str__(self) -> str:
        return self.summary()


    def __repr__(self) -> str:
        model = self.meta.get("model", "model")
        med = float(np.median(self.total_ms)) if self.num_runs else math.nan
        return (
            f"<fxprof.Profile {model}: {len(self.nodes)} nodes x {self.num_runs} runs, "
            f"timer {self.meta.get('timer', '?')}, median run {med:.3f} ms>"
        )

    # ------------------------------------------------------------ delegations
    # The README's conveniences. Each is one call into the layer that does the work (tables
    # and roll-ups here in core; text, notebook HTML and traces in views; files in io): those
    # above core are reached through fxprof.core.hooks, which fxprof/__init__.py fills, so no
    # import of core climbs.

    def by_rank(self) -> pd.DataFrame:
        """One row per (node, rank); see :func:`fxprof.core.ranks.by_rank`."""
        from .ranks import by_rank

        return by_rank(self)

    def group_by(self, key: str = "op", depth: int = 1) -> pd.DataFrame:
        """Roll node times up by ``key``; see :func:`fxprof.core.rollup.group_by`. ``"rank"`` gives
        one row per ``torch.distributed`` rank (:func:`fxprof.core.ranks.rank_table`)."""
        if key == "rank":
            from .ranks import rank_table

            return rank_table(self)
        from .rollup import group_by

        return group_by(self.df, key, depth=depth)

    def summary(
        self,
        sort: str | None = "pct",
        top: int | None = None,
        columns: Iterable[str] | None = None,
        group_by: str | None = None,
        depth: int = 1,
        ascending: bool = False,
        width: int | None = None,
        bookkeeping: bool = False,
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
                ``"graph"``, ``"phase"``, ``"comm"``; ``"rank"`` for one row per
                torch.distributed rank) instead of one row per node; ``depth`` applies to
                ``"scope"``.
            width: fit the table to this many characters (long names shortened, then the
                least important columns dropped, with a note); None: no limit.
            bookkeeping: rank the enter/exit nodes of ``record_function`` ranges with the rest.
                By default a sorted table leaves them out and states their count and share on
                a line of its own (their time counts in every share either way).
        """
        return hooks.conveniences().summary(self, sort, top, columns, group_by, depth, ascending, width, bookkeeping)

    def _repr_html_(self) -> str:
        """Jupyter's rich display: the header and the top nodes, shares as bars (see :mod:`fxprof.views.notebook`)."""
        return hooks.conveniences().repr_html(self)

    def to_csv(self, path: str | os.PathLike) -> None:
        """Write the per-node table (:attr:`df`) to ``path`` atomically.

        Read it back with :func:`fxprof.read_csv`. Raises
        :class:`~fxprof.errors.ProfileWriteError` if the path is not writable; the profile
        itself is untouched.
        """
        hooks.conveniences().to_csv(self, path)

    def to_chrome_trace(self, path: str | os.PathLike, runs: str | int | Iterable[int] | None = "representative") -> None:
        """Write every node of the chosen runs as a span on a timeline (Chrome trace JSON).

        Open it in https://ui.perfetto.dev or chrome://tracing. Timestamps are on the clock
        and epoch of torch.profiler's traces, so the two can be merged
        (:func:`fxprof.views.chrome_trace.merge_chrome_traces`). Each span's args hold the node's kind,
        scope, shapes and FLOPs. With the CUDA timers there is a host track and a device
        track. ``runs``: ``"representative"`` (default: the fastest, the median and the
        slowest run by ``total_ms``), ``"all"``, ``"median"``, ``"first:N"``, ``"last:N"``,
        ``"0-4"``, ``"0,5,9"``, or run numbers. Written atomically.
        """
        hooks.conveniences().to_chrome_trace(self, path, runs)

    def to_html(self, path: str | os.PathLike) -> None:
        """Write a self-contained interactive HTML report (module tree, distributions, run totals,
        the sortable node table; needs ``pip install 'fxprof[report]'``); see :mod:`fxprof.views.report`."""
        hooks.conveniences().to_html(self, path)

    def save(self, path: str | os.PathLike) -> None:
        """Save the whole profile (raw samples, nodes, anatomy, metadata), chosen by extension:
        ``.npz`` writes compact binary columns with a JSON header (:mod:`fxprof.io.npzfile`; 40
        bytes a sample, fastest to write and read), ``.json`` versioned JSON (text, its sample
        columns as number arrays, :mod:`fxprof.io.jsonfile`); ``"-"``, a device or a FIFO get
        JSON. Any other file name is a ValueError that names the two formats.

        Lossless: :func:`fxprof.load` gives back an equal profile from either. Written atomically.
        What a load would refuse is refused first (a :class:`~fxprof.errors.ProfileFormatError`
        naming the ``meta`` key or node and its value: ``meta["iters"] = "five"``, a NaN, notes
        that are not a list of strings): nothing is written and the profile is unchanged.
        """
        hooks.conveniences().save(self, path)


def sort_table(table: pd.DataFrame, sort: str | None, ascending: bool = False, what: str = "") -> pd.DataFrame:
    """Sort a table (per node, a roll-up, a comparison) by one of its columns or by its index's
    name (``"node"``, the group key), largest first unless ``ascending``, NaN last; ``cum_pct``
    follows the new order when the table has ``pct``. ``sort=None`` keeps the order."""
    key = table.index.name or "node"
    if sort is not None:
        if sort != key and sort not in table.columns:
            raise ValueError(f"cannot sort {what + ' ' if what else ''}by {sort!r}; its columns are: {', '.join([key, *table.columns])}")
        if sort == key:
            table = table.sort_index(ascending=ascending, kind="stable")
        else:
            table = table.sort_values(sort, ascending=ascending, kind="stable", na_position="last")
    if "pct" in table.columns:
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
    empty: Mapping[str, Any] = {}
    rows = [records.get(n, empty) for n in names]
    frame = pd.DataFrame(
        {col: [row.get(col) for row in rows] for col in ANATOMY_COLUMNS},
        index=pd.Index(names, name="node", dtype=str),
    )
    for col, dtype in ANATOMY_COLUMNS.items():
        if dtype == "str":
            frame[col] = frame[col].fillna("").astype(str)
        else:
            frame[col] = pd.array(frame[col].tolist(), dtype=dtype)
    return frame
