"""The recorded profile: raw per-node, per-run samples and the tables derived from them."""

from __future__ import annotations

import math
from typing import Any, Iterable, Sequence

import numpy as np
import pandas as pd

from .interpreter import Recording
from .nodes import NodeInfo

__all__ = ["Profile", "NODE_COLUMNS", "STAT_COLUMNS", "TABLE_COLUMNS"]

#: descriptive columns of the per-node table (text)
NODE_COLUMNS = ("op", "target", "module_type", "scope", "range")
#: numeric columns of the per-node table, all times in milliseconds, shares in percent
STAT_COLUMNS = (
    "calls",
    "mean_ms",
    "median_ms",
    "std_ms",
    "iqr_ms",
    "min_ms",
    "max_ms",
    "total_ms",
    "host_mean_ms",
    "pct",
    "cum_pct",
)
TABLE_COLUMNS = NODE_COLUMNS + STAT_COLUMNS


class Profile:
    """The result of :func:`fxprof.profile`: every sample of every node, and tables from them.

    The raw samples are the single source of truth; :attr:`df`, :meth:`summary`, the CSV and
    every statistic are derived from them on demand.

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
    ):
        self.nodes: list[NodeInfo] = list(nodes)
        names = [n.name for n in self.nodes]
        if len(set(names)) != len(names):
            raise ValueError("node names must be unique within a profile")
        unknown = set(samples["node"]) - set(names)
        if unknown:
            raise ValueError(f"samples name nodes the graph does not have: {sorted(unknown)[:5]}")
        self._samples = samples.reset_index(drop=True)[["node", "run", "time_ms", "host_ms"]]
        self._runs = runs.reset_index(drop=True)[["run", "total_ms", "host_ms"]]
        self.meta: dict[str, Any] = dict(meta or {})

    @classmethod
    def from_recording(cls, nodes: Sequence[NodeInfo], recording: Recording, meta: dict[str, Any] | None = None) -> "Profile":
        samples = pd.DataFrame(
            {
                "node": pd.Series(recording.node, dtype=str),
                "run": np.asarray(recording.run, dtype=np.int64),
                "time_ms": np.asarray(recording.time_ms, dtype=np.float64),
                "host_ms": np.asarray(recording.host_ms, dtype=np.float64),
            }
        )
        runs = pd.DataFrame(
            {
                "run": np.arange(recording.runs, dtype=np.int64),
                "total_ms": np.asarray(recording.run_total_ms, dtype=np.float64),
                "host_ms": np.asarray(recording.run_host_ms, dtype=np.float64),
            }
        )
        return cls(nodes, samples, runs, meta)

    # ----------------------------------------------------------------- raw data
    @property
    def samples(self) -> pd.DataFrame:
        """Long-form raw samples, one row per (node, run).

        Columns: ``node`` (fx node name), ``run`` (0-based timed run), ``time_ms`` (the
        timer's measurement: device time with the CUDA timers), ``host_ms`` (host clock).
        """
        return self._samples.copy()

    @property
    def runs(self) -> pd.DataFrame:
        """One row per timed run: ``run``, ``total_ms`` (timer), ``host_ms`` (host clock)."""
        return self._runs.copy()

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
        values, bookkeeping). NaN when there are no runs.
        """
        if self._runs.empty:
            return math.nan
        run_mean = float(self._runs["total_ms"].mean())
        node_sum = float(self._samples.groupby("node", sort=False)["time_ms"].mean().sum())
        return node_sum / run_mean if run_mean > 0 else math.nan

    # ------------------------------------------------------------ derived tables
    @property
    def df(self) -> pd.DataFrame:
        """The per-node table in graph order; see :meth:`to_dataframe`."""
        return self.to_dataframe()

    def to_dataframe(self, sort: str | None = None, ascending: bool = False) -> pd.DataFrame:
        """One row per graph node, derived from the raw samples.

        Index ``node`` (fx node name). Columns:

        - ``op``, ``target``, ``module_type``, ``scope``, ``range``: see
          :class:`~fxprof.nodes.NodeInfo`.
        - ``calls``: samples of this node (runs in which it executed).
        - ``mean_ms``, ``median_ms``, ``std_ms`` (sample standard deviation, NaN with one
          sample), ``iqr_ms`` (75th minus 25th percentile), ``min_ms``, ``max_ms``,
          ``total_ms`` (sum over samples): the timer's times in milliseconds.
        - ``host_mean_ms``: mean host time, from the host clock (equal to ``mean_ms`` on the
          CPU up to clock noise; on the GPU, the launch cost).
        - ``pct``: the node's share of the summed mean node times, in percent (sums to 100).
        - ``cum_pct``: running sum of ``pct`` in the table's order.

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
        table = info.join(stats, how="left")
        table["calls"] = table["calls"].fillna(0).astype(np.int64)
        mean_sum = float(table["mean_ms"].sum())  # NaN (nodes that never ran) are skipped
        table["pct"] = (table["mean_ms"] / mean_sum * 100.0 if mean_sum > 0 else table["mean_ms"] * 0.0).fillna(0.0)
        if sort is not None:
            if sort not in table.columns and sort != "node":
                raise ValueError(f"cannot sort by {sort!r}; columns are: {', '.join(TABLE_COLUMNS)}")
            table = table.sort_index(ascending=ascending, kind="stable") if sort == "node" else table.sort_values(sort, ascending=ascending, kind="stable")
        table["cum_pct"] = table["pct"].cumsum()
        return table[list(TABLE_COLUMNS)]

    # ----------------------------------------------------------------- rendering
    def summary(self, sort: str | None = "pct", top: int | None = None, columns: Iterable[str] | None = None) -> str:
        """The hotspot table as text: a header of what was measured, then one row a node.

        Args:
            sort: column to sort by, descending (``None``: graph order).
            top: show only the first ``top`` rows (a footer counts the rest).
            columns: table columns to show (default: a readable subset).
        """
        from .render import render_summary

        return render_summary(self, sort=sort, top=top, columns=columns)

    def __str__(self) -> str:
        return self.summary()

    def __repr__(self) -> str:
        model = self.meta.get("model", "model")
        med = float(np.median(self.total_ms)) if self.num_runs else math.nan
        return (
            f"<fxprof.Profile {model}: {len(self.nodes)} nodes x {self.num_runs} runs, "
            f"timer {self.meta.get('timer', '?')}, median run {med:.3f} ms>"
        )

    # ------------------------------------------------------------------- export
    def to_csv(self, path: str) -> None:
        """Write the per-node table (:attr:`df`) to ``path`` atomically.

        Read it back with :func:`fxprof.read_csv`. Raises
        :class:`~fxprof.errors.ProfileWriteError` if the path is not writable; the profile
        itself is untouched.
        """
        from .io import write_csv

        write_csv(self.df, path)

    def save(self, path: str) -> None:
        """Save the whole profile (raw samples, nodes, metadata) as versioned JSON.

        Lossless: :func:`fxprof.load` gives back an equal profile. Written atomically.
        """
        from .io import save_profile

        save_profile(self, path)


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
        }
    )
    stats.index.name = "node"
    return stats
