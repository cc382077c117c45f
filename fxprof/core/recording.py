"""The recording: every sample of every node of every run, as growing numpy columns.

The interpreter hands the recorder one raw ``(name, m0, m1, h0, h1)`` tuple per executed node
(timer marks and host clock readings); nothing is converted while the run is going. After the
run's one synchronization point (``timer.end_run()``) the marks become milliseconds in bulk and
land in growing numpy columns, with each node's name turned into an integer id (one dict
lookup per mark). No per-sample Python object outlives its run: a sample costs 40 bytes
(``int32`` node id and run, four ``float64`` times), plus 8 for ``kernel_ms`` when measured.
"""

from __future__ import annotations

from typing import Any, Iterable, Sequence

import numpy as np
from numpy.typing import ArrayLike

from ..vocab import TIME_COLUMNS

__all__ = ["Recording"]

_RUN_COLUMNS = ("run_total_ms", "run_host_ms", "run_start_ms")


class Recording:
    """Raw samples, one per executed node per run, and one row per run for the whole run.

    Storage is columnar: :attr:`node_id` (``int32`` index into :attr:`names`), :attr:`run`
    (``int32``), and ``float64`` columns :attr:`time_ms` (the timer: device time with the CUDA
    timers), :attr:`host_ms` (host clock), :attr:`start_ms` and :attr:`host_start_ms` (the
    sample's place on its run's timeline, by timer and host clock, from the run's first mark),
    :attr:`kernel_ms` (CUDA kernel time with ``timer="kernel"``, else NaN). Per run:
    :attr:`run_total_ms`, :attr:`run_host_ms` and :attr:`run_start_ms` (host clock, from the
    first recorded run's start). Every column property is a read-only numpy view.

    ``Recording(node=[...], run=[...], time_ms=[...], ...)`` builds one from plain columns
    (a missing per-sample column is NaN).
    """

    def __init__(
        self,
        node: Sequence[str] = (),
        run: Sequence[int] = (),
        time_ms: Sequence[float] = (),
        host_ms: Sequence[float] = (),
        start_ms: Sequence[float] = (),
        host_start_ms: Sequence[float] = (),
        run_total_ms: Sequence[float] = (),
        run_host_ms: Sequence[float] = (),
        run_start_ms: Sequence[float] = (),
        kernel_ms: Sequence[float] = (),
        origin_ns: int | None = None,
    ):
        #: node id -> node name; ids are given in order of first appearance
        self.names: list[str] = []
        self._ids: dict[str, int] = {}
        self._size = 0
        self._node = np.empty(0, dtype=np.int32)
        self._run = np.empty(0, dtype=np.int32)
        self._times = {col: np.empty(0, dtype=np.float64) for col in TIME_COLUMNS}
        self._kernel: np.ndarray | None = None
        self._runs: dict[str, list[float]] = {col: [] for col in _RUN_COLUMNS}  # one float per run: lists are small
        #: host clock reading (ns) at the start of the first recorded run
        self.origin_ns = origin_ns
        # samples a recorder holds back to write many runs at once (:meth:`defer`)
        self._pending_count = 0
        self._pending: Any = None
        count = len(node)
        if count:
            given = {"time_ms": time_ms, "host_ms": host_ms, "start_ms": start_ms, "host_start_ms": host_start_ms}
            self.reserve(count)  # exactly: a profile built from this holds these buffers
            self.add(self.intern(node), _column(run, count, np.int32, 0),
                     **{col: _column(given[col], count, np.float64, np.nan) for col in TIME_COLUMNS})
            if len(kernel_ms):
                self.kernel_ms = kernel_ms
        for col, values in zip(_RUN_COLUMNS, (run_total_ms, run_host_ms, run_start_ms)):
            self._runs[col] = [float(v) for v in values]
        longest = max(len(v) for v in self._runs.values())
        for values in self._runs.values():
            values.extend([np.nan] * (longest - len(values)))

    # ------------------------------------------------------------------ writing
    def intern(self, names: Iterable[str]) -> np.ndarray:
        """The ids of ``names`` (new names get the next ids), as an ``int32`` array."""
        ids = self._ids
        names = names if isinstance(names, (list, tuple)) else list(names)
        try:
            found = list(map(ids.__getitem__, names))
        except KeyError:
            found = []
            for name in names:
                index = ids.get(name)
                if index is None:
                    index = ids[name] = len(self.names)
                    self.names.append(name)
                found.append(index)
        return np.asarray(found, dtype=np.int32)

    def rename(self, names: dict[str, str]) -> None:
        """Give nodes new names (``{old: new}``; others keep theirs): their samples keep their ids."""
        self._settled()  # held-back samples are written under the names they were recorded with
        self.names = [names.get(n, n) for n in self.names]
        if len(set(self.names)) != len(self.names):
            raise ValueError("renaming would give two nodes one name")
        self._ids = {n: i for i, n in enumerate(self.names)}

    def defer(self, count: int, write: Any) -> None:
        """``count`` more samples exist but are not in the columns yet: ``write()`` puts every
        held-back sample there (through :meth:`add_clock_marks`), and is called before anything
        reads the columns or appends after them. A recorder uses it to convert many runs' marks
        in one go instead of a few numpy calls a run. ``len()`` counts them already."""
        self._pending_count += count
        self._pending = write

    def _settled(self) -> None:
        if self._pending_count:
            write, self._pending, self._pending_count = self._pending, None, 0
            write()

    def add(self, node_id: np.ndarray, run: Any, time_ms: Any, host_ms: Any, start_ms: Any, host_start_ms: Any) -> None:
        """Append samples (equal-length columns; ``run`` may be one int for all)."""
        self._settled()
        count = len(node_id)
        if not count:
            return
        end = self._size + count
        if end > len(self._node):
            self._grow(end)
        self._node[self._size:end] = node_id
        self._run[self._size:end] = run
        for col, values in zip(TIME_COLUMNS, (time_ms, host_ms, start_ms, host_start_ms)):
            self._times[col][self._size:end] = values
        if self._kernel is not None:
            self._kernel[self._size:end] = np.nan
        self._size = end

    def add_clock_marks(self, node_id: np.ndarray, run: Any, marks: np.ndarray, start_ns: Any, host_start_ns: Any) -> None:
        """Append samples from one clock's raw readings (the CPU timer, whose marks are the
        host clock): ``marks`` is an ``(n, 2)`` int64 array of each node's start and end in
        nanoseconds, ``start_ns``/``host_start_ns`` the run's first readings (or, with ``run``,
        one per sample, for several runs at once; the same object for both when one reading
        began the run). Written straight into the columns (no temporary per column): the same
        values as :meth:`add` would get from ``(end - start) / 1e6``."""
        self._settled()
        count = len(node_id)
        if not count:
            return
        begin, end = self._size, self._size + count
        if end > len(self._node):
            self._grow(end)
        self._node[begin:end] = node_id
        self._run[begin:end] = run
        first = marks[:, 0]
        times = self._times
        time_ms = times["time_ms"][begin:end]
        np.subtract(marks[:, 1], first, out=time_ms, casting="unsafe")
        np.divide(time_ms, 1e6, out=time_ms)
        times["host_ms"][begin:end] = time_ms
        start_ms = times["start_ms"][begin:end]
        np.subtract(first, start_ns, out=start_ms, casting="unsafe")
        np.divide(start_ms, 1e6, out=start_ms)
        if host_start_ns is start_ns:  # one reading began the run
            times["host_start_ms"][begin:end] = start_ms
        else:
            host_start_ms = times["host_start_ms"][begin:end]
            np.subtract(first, host_start_ns, out=host_start_ms, casting="unsafe")
            np.divide(host_start_ms, 1e6, out=host_start_ms)
        if self._kernel is not None:
            self._kernel[begin:end] = np.nan
        self._size = end

    def add_run(self, total_ms: float, host_ms: float, start_ms: float) -> None:
        runs = self._runs
        runs["run_total_ms"].append(float(total_ms))
        runs["run_host_ms"].append(float(host_ms))
        runs["run_start_ms"].append(float(start_ms))

    def reserve(self, samples: int) -> None:
        """Make room for ``samples`` samples in all, when their number is known ahead (the timed
        runs, after the first): no growth room is left over, so a profile that takes these
        columns without copying them holds 40 bytes a sample."""
        if samples > len(self._node):
            self._grow(samples, exact=True)

    def _grow(self, needed: int, exact: bool = False) -> None:
        capacity = needed if exact else max(needed, len(self._node) * 3 // 2, 1024)

        def grown(array: np.ndarray) -> np.ndarray:
            bigger = np.empty(capacity, dtype=array.dtype)
            bigger[: self._size] = array[: self._size]
            return bigger

        self._node, self._run = grown(self._node), grown(self._run)
        self._times = {col: grown(a) for col, a in self._times.items()}
        if self._kernel is not None:
            self._kernel = grown(self._kernel)

    # ------------------------------------------------------------------ reading
    def __len__(self) -> int:
        return self._size + self._pending_count

    @property
    def runs(self) -> int:
        """Whole runs recorded (0 in isolated mode, which records repeats of single nodes)."""
        return len(self._runs["run_total_ms"])

    def _view(self, array: np.ndarray) -> np.ndarray:
        # callers settle first: writing held-back samples may replace the arrays (growth)
        view = array[: self._size]
        view.flags.writeable = False
        return view

    @property
    def node_id(self) -> np.ndarray:
        self._settled()
        return self._view(self._node)

    @property
    def node(self) -> list[str]:
        """The node name of every sample, as a list (materialised: prefer :attr:`node_id`)."""
        self._settled()
        names = self.names
        return [names[i] for i in self._node[: self._size].tolist()]

    def recorded_names(self) -> set[str]:
        """Names of the nodes that have at least one sample."""
        self._settled()
        seen = np.bincount(self._node[: self._size], minlength=len(self.names)) > 0
        return {name for name, s in zip(self.names, seen.tolist()) if s}

    @property
    def run(self) -> np.ndarray:
        self._settled()
        return self._view(self._run)

    @property
    def time_ms(self) -> np.ndarray:
        self._settled()
        return self._view(self._times["time_ms"])

    @property
    def host_ms(self) -> np.ndarray:
        self._settled()
        return self._view(self._times["host_ms"])

    @property
    def start_ms(self) -> np.ndarray:
        self._settled()
        return self._view(self._times["start_ms"])

    @property
    def host_start_ms(self) -> np.ndarray:
        self._settled()
        return self._view(self._times["host_start_ms"])

    @property
    def has_kernel_ms(self) -> bool:
        return self._kernel is not None

    @property
    def kernel_ms(self) -> np.ndarray:
        """CUDA kernel time per sample (``timer="kernel"``); all NaN when not measured."""
        self._settled()
        if self._kernel is None:
            return np.full(self._size, np.nan)
        self._settled()
        return self._view(self._kernel)

    @kernel_ms.setter
    def kernel_ms(self, values: ArrayLike) -> None:
        self._settled()
        array = np.asarray(values, dtype=np.float64)
        if len(array) != self._size:
            raise ValueError(f"kernel_ms has {len(array)} values for {self._size} samples")
        self._kernel = np.empty(len(self._node), dtype=np.float64)
        self._kernel[: self._size] = array

    @property
    def run_total_ms(self) -> np.ndarray:
        return np.asarray(self._runs["run_total_ms"], dtype=np.float64)

    @property
    def run_host_ms(self) -> np.ndarray:
        return np.asarray(self._runs["run_host_ms"], dtype=np.float64)

    @property
    def run_start_ms(self) -> np.ndarray:
        return np.asarray(self._runs["run_start_ms"], dtype=np.float64)

    @property
    def nbytes(self) -> int:
        """Bytes held by the sample columns (their capacity, not only the filled part)."""
        self._settled()
        arrays: list[np.ndarray] = [self._node, self._run, *self._times.values()]
        if self._kernel is not None:
            arrays.append(self._kernel)
        return sum(a.nbytes for a in arrays)

    def __repr__(self) -> str:
        return f"<Recording: {len(self)} samples of {len(self.names)} nodes, {self.runs} runs>"


def _column(values: Sequence[Any], count: int, dtype: Any, fill: Any) -> np.ndarray:
    if len(values) == 0:
        return np.full(count, fill, dtype=dtype)
    array = np.asarray(values, dtype=dtype)
    if len(array) != count:
        raise ValueError(f"a column has {len(array)} values for {count} samples")
    return array
