"""A profile's samples stored compactly, and per-node statistics computed from them in bulk.

:class:`SampleColumns` keeps one entry per (node, run) sample as numpy columns: the node as an
integer code into the profile's node list, the run as ``int32``, times as ``float64`` (40 bytes
a sample; 48 with CUDA kernel times). :meth:`SampleColumns.node_stats` computes every per-node
statistic of :attr:`fxprof.Profile.df` with a handful of vectorised numpy passes instead of a
pandas group-by per statistic. Quantiles interpolate linearly between order statistics, and a
median of an even count is the mean of the two middle values, as pandas computes them; sums
and means are plain (not compensated) sums, equal to pandas' to about 1e-15 relative.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np
import pandas as pd

__all__ = ["SampleColumns", "STAT_COLUMNS"]

#: the per-node statistics :meth:`SampleColumns.node_stats` returns, in order
STAT_COLUMNS = ("calls", "calls_per_run", "mean_ms", "median_ms", "std_ms", "iqr_ms", "min_ms", "max_ms", "total_ms",
                "host_mean_ms", "kernel_mean_ms", "kernel_median_ms")
_TIMES = ("time_ms", "host_ms", "start_ms", "host_start_ms")


def _frozen(values: Any, dtype: Any, copy: bool = True) -> np.ndarray:
    # a copy unless the caller hands its arrays over: nothing outside can change them
    array = np.array(values, dtype=dtype) if copy else np.asarray(values, dtype=dtype)
    array.flags.writeable = False
    return array


class SampleColumns:
    """Immutable columnar samples: ``node`` codes index into ``names`` (the profile's nodes).

    ``kernel_ms`` is None when kernel time was not measured (it reads as NaN). The columns
    are copied unless ``copy=False`` (the caller hands over arrays that nothing will change).
    """

    __slots__ = ("names", "node", "run", "time_ms", "host_ms", "start_ms", "host_start_ms", "kernel_ms", "_stats")
    names: tuple[str, ...]
    node: np.ndarray
    run: np.ndarray
    time_ms: np.ndarray  # these four set by name in __init__ (_TIMES)
    host_ms: np.ndarray
    start_ms: np.ndarray
    host_start_ms: np.ndarray
    kernel_ms: np.ndarray | None

    def __init__(self, names: Sequence[str], node: Any, run: Any, time_ms: Any, host_ms: Any,
                 start_ms: Any = None, host_start_ms: Any = None, kernel_ms: Any = None, copy: bool = True):
        self.names = tuple(names)
        self.node = _frozen(node, np.int32, copy)
        count = len(self.node)
        if count and (self.node.min() < 0 or self.node.max() >= len(self.names)):
            raise ValueError("a sample's node code is outside the node list")
        self.run = _frozen(run, np.int32, copy)
        given = {"time_ms": time_ms, "host_ms": host_ms, "start_ms": start_ms, "host_start_ms": host_start_ms}
        for col in _TIMES:
            values = given[col]
            setattr(self, col, _frozen(np.full(count, np.nan) if values is None else values, np.float64, copy))
        self.kernel_ms = None
        if kernel_ms is not None:
            kernel = _frozen(kernel_ms, np.float64, copy)
            if not np.isnan(kernel).all():
                self.kernel_ms = kernel
        for col in ("run", *_TIMES, *(("kernel_ms",) if self.kernel_ms is not None else ())):
            if len(getattr(self, col)) != count:
                raise ValueError(f"column {col} has {len(getattr(self, col))} values for {count} samples")
        self._stats: tuple[Any, pd.DataFrame] | None = None

    # ------------------------------------------------------------ construction
    @classmethod
    def from_frame(cls, frame: pd.DataFrame, names: Sequence[str]) -> "SampleColumns":
        """From a long-form DataFrame with a ``node`` column of names (and the sample columns)."""
        codes = pd.Index(list(names), dtype=object).get_indexer(frame["node"].astype(object))
        if (codes < 0).any():
            unknown = sorted(set(frame["node"][codes < 0].astype(str)))
            raise ValueError(f"samples name nodes the graph does not have: {unknown[:5]}")
        column = lambda c: frame[c].to_numpy(dtype=np.float64, na_value=np.nan) if c in frame.columns else None  # noqa: E731
        return cls(names, codes, frame["run"].to_numpy(dtype=np.int64), column("time_ms"), column("host_ms"),
                   column("start_ms"), column("host_start_ms"), column("kernel_ms"))

    @classmethod
    def from_recording(cls, recording: Any, names: Sequence[str]) -> "SampleColumns":
        """From a :class:`~fxprof.core.recording.Recording`, re-coding its node ids to ``names``.

        The columns are the recording's own, not copies (read-only views): a recording only
        ever appends, so what it held when the profile was built never changes, and building a
        profile of 10M samples needs no second 400 MB. Node ids are re-coded (a new array) only
        when the recording numbered the nodes in another order than ``names``."""
        position = {name: i for i, name in enumerate(names)}
        unknown = [n for n in recording.names if n not in position]
        if unknown and np.isin(recording.node_id, [recording.names.index(n) for n in unknown]).any():
            raise ValueError(f"samples name nodes the graph does not have: {sorted(unknown)[:5]}")
        recode = np.asarray([position.get(n, -1) for n in recording.names], dtype=np.int32)
        if not len(recode):
            node = np.empty(0, np.int32)
        elif np.array_equal(recode, np.arange(len(recode), dtype=np.int32)):
            node = recording.node_id  # the usual case: ids given in graph order
        else:
            node = recode[recording.node_id]
        kernel = recording.kernel_ms if recording.has_kernel_ms else None
        return cls(names, node, recording.run, recording.time_ms, recording.host_ms, recording.start_ms,
                   recording.host_start_ms, kernel, copy=False)

    # ----------------------------------------------------------------- reading
    def __len__(self) -> int:
        return len(self.node)

    @property
    def nbytes(self) -> int:
        arrays = [self.node, self.run, *(getattr(self, c) for c in _TIMES)]
        return sum(a.nbytes for a in arrays) + (self.kernel_ms.nbytes if self.kernel_ms is not None else 0)

    def kernel(self) -> np.ndarray:
        return self.kernel_ms if self.kernel_ms is not None else np.full(len(self), np.nan)

    def counts(self) -> np.ndarray:
        """Samples per node code."""
        return np.bincount(self.node, minlength=len(self.names))

    def frame(self) -> pd.DataFrame:
        """The long-form samples (a new DataFrame): ``node`` is categorical, its categories the
        nodes that have samples, in graph order."""
        present = np.flatnonzero(self.counts())
        recode = np.full(len(self.names), -1, dtype=np.int32)
        recode[present] = np.arange(len(present), dtype=np.int32)
        names = np.asarray(self.names, dtype=object)[present] if len(present) else np.empty(0, dtype=object)
        node = pd.Categorical.from_codes(recode[self.node], categories=pd.Index(names, dtype=object))
        return pd.DataFrame(
            {
                "node": node,
                "run": self.run.astype(np.int64),
                "call": self._call_index(),
                **{col: np.array(getattr(self, col)) for col in _TIMES},
                "kernel_ms": np.array(self.kernel()),
            }
        )

    def _call_index(self) -> np.ndarray:
        """Derived, never stored: the k-th sample of a node within its run is its k-th call."""
        if _one_call_per_run(self.node, self.run):
            return np.zeros(len(self), dtype=np.int64)
        frame = pd.DataFrame({"node": self.node, "run": self.run})
        return frame.groupby(["node", "run"], sort=False, observed=True).cumcount().to_numpy(dtype=np.int64)

    # -------------------------------------------------------------- statistics
    def node_stats(self, runs: Sequence[int] | None = None) -> pd.DataFrame:
        """Per-node statistics (columns :data:`STAT_COLUMNS`, index ``node``) of the nodes that
        have samples, in graph order, over the samples of ``runs`` (None: every run).

        Statistics are of a node's time per model run: a node called several times in one run
        (a graph dynamo runs once per repeated block) has its calls summed first; ``calls``
        counts every call and ``calls_per_run`` is calls over the runs the node ran in.
        Computed once per ``runs``; the samples never change."""
        key = None if runs is None else tuple(int(r) for r in runs)
        if self._stats is None or self._stats[0] != key:
            self._stats = (key, self.compute_stats(key))
        return self._stats[1]

    def per_run(self, runs: Sequence[int] | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | None, np.ndarray]:
        """The values every per-node statistic is of: one per node per run of ``runs`` (None:
        all), a node's calls within a run summed. Returns node codes, ``time_ms``,
        ``host_ms``, ``kernel_ms`` (None when not measured) and the measured calls per node."""
        node, run, time_ms, host_ms = self.node, self.run, self.time_ms, self.host_ms
        kernel_ms = self.kernel_ms
        if runs is not None:  # outlier runs left out
            keep = np.isin(run, np.asarray(runs, dtype=np.int64))
            node, run, time_ms, host_ms = node[keep], run[keep], time_ms[keep], host_ms[keep]
            kernel_ms = kernel_ms[keep] if kernel_ms is not None else None
        calls = np.bincount(node[~np.isnan(time_ms)], minlength=len(self.names)).astype(np.int64)  # measured calls
        if not _one_call_per_run(node, run):  # several calls of a node in one run: sum them per run
            width = int(run.max()) + 1
            pair = node.astype(np.int64) * width + run
            unique, inverse = np.unique(pair, return_inverse=True)
            node = (unique // width).astype(np.int32)
            time_ms = _summed(inverse, time_ms, len(unique))
            host_ms = _summed(inverse, host_ms, len(unique))
            kernel_ms = _summed(inverse, kernel_ms, len(unique)) if kernel_ms is not None else None
        return node, time_ms, host_ms, kernel_ms, calls

    def compute_stats(self, runs: tuple[int, ...] | None) -> pd.DataFrame:
        groups = len(self.names)
        node, time_ms, host_ms, kernel_ms, calls = self.per_run(runs)
        present = np.flatnonzero(calls)
        time = _GroupedValues(node, time_ms, groups)
        host = _GroupedValues(node, host_ms, groups)
        if kernel_ms is not None:
            kernel = _GroupedValues(node, kernel_ms, groups)
            kernel_mean, kernel_median = kernel.mean, kernel.median()
        else:
            kernel_mean = kernel_median = np.full(groups, np.nan)
        q25, q75 = time.quantile(0.25), time.quantile(0.75)
        ran_in = np.bincount(node, minlength=groups)
        with np.errstate(invalid="ignore", divide="ignore"):
            per_run = np.where(ran_in > 0, calls / np.maximum(ran_in, 1), np.nan)
        columns: Mapping[str, np.ndarray] = {
            "calls": calls,
            "calls_per_run": per_run,
            "mean_ms": time.mean,
            "median_ms": time.median(),
            "std_ms": time.std(),
            "iqr_ms": q75 - q25,
            "min_ms": time.quantile(0.0),
            "max_ms": time.quantile(1.0),
            "total_ms": time.sum,
            "host_mean_ms": host.mean,
            "kernel_mean_ms": kernel_mean,
            "kernel_median_ms": kernel_median,
        }
        index = pd.Index([self.names[i] for i in present], name="node", dtype=str)
        return pd.DataFrame({c: columns[c][present] for c in STAT_COLUMNS}, index=index)


def _run_width(node: np.ndarray) -> int | None:
    """The samples of one run when they lie in the usual layout (run after run, each the same
    sequence of distinct nodes), else None. ``node``: the samples' node codes, not empty."""
    n = len(node)
    again = np.flatnonzero(node[1:] == node[0])
    width = int(again[0]) + 1 if len(again) else n
    if n % width or len(np.unique(node[:width])) != width:
        return None
    block = node.reshape(-1, width)
    if not (block == block[0]).all():
        return None
    return width


def _one_call_per_run(node: np.ndarray, run: np.ndarray) -> bool:
    """True when no node has two samples in one run, checked cheaply for the usual layout (run
    after run, each the same sequence of distinct nodes); False also when unsure (the caller
    then pairs samples by node and run)."""
    if len(node) == 0:
        return True
    width = _run_width(node)
    if width is None:
        return False
    runs = run.reshape(-1, width)
    return bool((runs == runs[:, :1]).all() and len(np.unique(runs[:, 0])) == len(runs))


def _summed(inverse: np.ndarray, values: np.ndarray, size: int) -> np.ndarray:
    """Sums of ``values`` per pair; NaN where every value of the pair is NaN (pandas' min_count=1)."""
    valid = ~np.isnan(values)
    total = np.bincount(inverse, weights=np.where(valid, values, 0.0), minlength=size)
    seen = np.bincount(inverse, weights=valid.astype(np.float64), minlength=size)
    return np.where(seen > 0, total, np.nan)


class _GroupedValues:
    """One float column grouped by integer codes: counts, sums and order statistics.

    NaN values are left out of every statistic (as pandas does). Order statistics come from the
    values sorted within each group: when every run holds the same nodes in the same order
    (timed mode), the samples form a (runs x nodes) matrix and each node's column is sorted
    along one axis; otherwise one ``lexsort`` by (code, value).
    """

    def __init__(self, codes: np.ndarray, values: np.ndarray, groups: int):
        self.groups = groups
        valid = ~np.isnan(values)
        complete = bool(valid.all())  # the usual case: no NaN, so no masking pass
        self.count = np.bincount(codes if complete else codes[valid], minlength=groups).astype(np.int64)
        self.sum = np.bincount(codes, weights=values if complete else np.where(valid, values, 0.0), minlength=groups)
        self._complete = complete
        with np.errstate(invalid="ignore", divide="ignore"):
            self.mean = np.where(self.count > 0, self.sum / np.maximum(self.count, 1), np.nan)
        self._codes, self._values, self._valid = codes, values, valid
        self._sorted: tuple[np.ndarray, np.ndarray] | None = None
        #: with the matrix layout, the node code of each row of the sorted (nodes x runs) matrix
        self._rows: np.ndarray | None = None

    def std(self) -> np.ndarray:
        """Sample standard deviation (ddof=1); NaN with fewer than two values."""
        ordered, _ = self._order()
        if self._rows is not None and self._complete and len(ordered):  # the (nodes x runs) matrix: row by row
            runs = len(ordered) // len(self._rows)
            out = np.full(self.groups, np.nan)
            if runs > 1:
                out[self._rows] = ordered.reshape(len(self._rows), runs).std(axis=1, ddof=1)
            return out
        deviation = self._values - self.mean[self._codes]
        if not self._complete:
            deviation = np.where(self._valid, deviation, 0.0)
        squares = np.bincount(self._codes, weights=deviation * deviation, minlength=self.groups)
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(self.count > 1, np.sqrt(squares / np.maximum(self.count - 1, 1)), np.nan)

    def _order(self) -> tuple[np.ndarray, np.ndarray]:
        """(values sorted within groups, NaN last in each group; start of each group)."""
        if self._sorted is None:
            matrix = _matrix_sorted(self._codes, self._values, self.groups)
            if matrix is not None:
                flat, starts, self._rows = matrix
                self._sorted = (flat, starts)
            else:
                self._sorted = _flat_sorted(self._codes, self._values, self.groups)
        return self._sorted

    def _at(self, position: np.ndarray) -> np.ndarray:
        ordered, starts = self._order()
        index = np.clip(starts + position, 0, max(len(ordered) - 1, 0))
        return ordered[index] if len(ordered) else np.full(self.groups, np.nan)

    def quantile(self, q: float) -> np.ndarray:
        """Linear interpolation between order statistics (pandas' and numpy's default)."""
        last = self.count - 1
        exact = last * q
        low = np.floor(exact).astype(np.int64)
        high = np.minimum(low + 1, np.maximum(last, 0))
        frac = exact - low
        a, b = self._at(low), self._at(high)
        out = a + (b - a) * frac
        return np.where(self.count > 0, np.where(frac == 0, a, out), np.nan)

    def median(self) -> np.ndarray:
        half = self.count // 2
        odd = self.count % 2 == 1
        upper = self._at(half)
        lower = self._at(np.maximum(half - 1, 0))
        return np.where(self.count > 0, np.where(odd, upper, (lower + upper) / 2.0), np.nan)


def _matrix_sorted(codes: np.ndarray, values: np.ndarray, groups: int) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """The fast path: samples laid out run after run with the same node sequence each time.
    Returns the sorted (nodes x runs) matrix flattened, each group's start, and each row's code."""
    if len(codes) == 0:
        return None
    width = _run_width(codes)
    if width is None:
        return None
    columns = np.sort(values.reshape(-1, width).T, axis=1)  # (nodes, runs), NaN last
    # row i of ``columns`` is the node with code codes[i]; groups without samples start at 0
    # (every statistic of an empty group is masked)
    starts = np.zeros(groups, dtype=np.int64)
    starts[codes[:width]] = np.arange(width, dtype=np.int64) * columns.shape[1]
    return columns.reshape(-1), starts, codes[:width]


def _flat_sorted(codes: np.ndarray, values: np.ndarray, groups: int) -> tuple[np.ndarray, np.ndarray]:
    order = np.lexsort((values, codes))  # by code, then value; NaN sorts last
    ordered = values[order]
    starts = np.searchsorted(codes[order], np.arange(groups), side="left").astype(np.int64)
    return ordered, starts
