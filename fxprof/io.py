"""Saving and loading: the per-node CSV and the lossless JSON profile. Never pickle.

Every file is written atomically: to a temporary file beside the target, flushed and
fsynced, then renamed over it. A failed write leaves any earlier file intact and never a
truncated one.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import stat
import sys
import tempfile
from typing import TYPE_CHECKING, Any, Callable

import pandas as pd

from .errors import ProfileFormatError, ProfileWriteError
from .validate import check_document, check_profile, parse_json, parse_table
from .recording import Recording
from .nodes import NodeInfo
from .anatomy import ANATOMY_COLUMNS
from .profile import COLUMNS, NODE_COLUMNS, RUN_COLUMNS, SAMPLE_COLUMNS, TABLE_COLUMNS

if TYPE_CHECKING:
    from .profile import Profile

__all__ = ["atomic_write", "write_csv", "read_csv", "save_profile", "load_profile", "read_any", "FORMAT_NAME", "FORMAT_VERSION"]

FORMAT_NAME = "fxprof.profile"
FORMAT_VERSION = 1


def atomic_write(path: str | os.PathLike, write: Callable[[Any], None], binary: bool = False) -> None:
    """Call ``write(file)`` on a temporary file (text, or bytes if ``binary``), then move it to
    ``path`` in one step.

    Only regular files are replaced that way. A symbolic link keeps being a link: its target
    is replaced. A device (``/dev/null``), FIFO or socket is written through, never replaced.
    ``"-"`` writes to standard output.
    """
    path = os.fspath(path)
    if path == "-":
        _write_through(path, write, stream=sys.stdout.buffer if binary else sys.stdout)
        return
    target = os.path.realpath(path)  # write through a symlink; never replace the link
    try:
        kind = os.stat(target).st_mode
    except OSError:
        kind = None
    if kind is not None and not stat.S_ISREG(kind) and not stat.S_ISDIR(kind):
        _write_through(path, write, binary=binary)
        return
    directory = os.path.dirname(target)
    tmp = None
    try:
        if os.path.isdir(path):
            raise IsADirectoryError(f"Is a directory: {path!r}")
        fd, tmp = tempfile.mkstemp(prefix=".fxprof-", suffix=".tmp", dir=directory)
        os.chmod(tmp, _file_mode(target))  # mkstemp makes 0600; give what open() would give
        with (os.fdopen(fd, "wb") if binary else os.fdopen(fd, "w", encoding="utf-8", newline="")) as handle:
            write(handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, target)
        tmp = None
    except OSError as exc:
        raise _write_error(path, exc) from exc
    finally:
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)


def _write_error(path: str, exc: OSError) -> ProfileWriteError:
    error = ProfileWriteError(
        f"cannot write {path!r}: {exc.strerror or exc}. Nothing was lost: the profile is still "
        f"in memory; call the method again with a writable path."
    )
    error.reason = exc.strerror or str(exc)  # type: ignore[attr-defined]
    return error


def _write_through(path: str, write: Callable[[Any], None], stream: Any = None, binary: bool = False) -> None:
    """Write into what is at ``path`` (a device, FIFO, socket) or into ``stream``, in place."""
    try:
        if stream is not None:
            write(stream)
            stream.flush()
            return
        with (open(path, "wb") if binary else open(path, "w", encoding="utf-8", newline="")) as handle:
            write(handle)
    except OSError as exc:
        raise _write_error(path, exc) from exc


def _file_mode(path: str) -> int:
    """The existing file's mode, else what a plain ``open(path, "w")`` would create."""
    try:
        return stat.S_IMODE(os.stat(path).st_mode)
    except OSError:
        umask = os.umask(0)
        os.umask(umask)
        return 0o666 & ~umask


# -------------------------------------------------------------------------- CSV
def write_csv(table: pd.DataFrame, path: str | os.PathLike) -> None:
    """Write a per-node table; floats are written with full precision (exact round trip)."""
    atomic_write(path, lambda handle: table.to_csv(handle, index=True, index_label="node"))


def read_csv(path: str | os.PathLike) -> pd.DataFrame:
    """Read a per-node table written by :meth:`Profile.to_csv`.

    Returns the same index (``node``), columns and dtypes the profile's :attr:`~Profile.df`
    has. Raises :class:`~fxprof.errors.ProfileFormatError` for a file that is not such a table,
    or whose values no profile can hold (negative or infinite times, fractional counts, a
    node listed twice); see :func:`fxprof.validate.parse_table`.
    """
    path = os.fspath(path)
    try:  # every cell as text: numbers are parsed and checked one by one (exact round trip)
        table = pd.read_csv(path, dtype=str, keep_default_na=False)
    except FileNotFoundError:
        raise
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError, ValueError, OverflowError) as exc:
        raise ProfileFormatError(f"{path!r} is not a CSV table fxprof can read: {exc}") from exc
    for col, default in (("phase", "forward"), ("forward_node", "")):  # tables from before training steps
        if col not in table.columns:
            table[col] = default
    if "scope_source" not in table.columns:  # tables from before inferred scopes: the source was not recorded
        table["scope_source"] = ""
    if "calls_per_run" not in table.columns and "calls" in table.columns:
        # tables from before per-run statistics: every graph ran once a run, so a node that ran
        # was called once a run (0.0 for one that never ran, as Profile.df has it)
        table["calls_per_run"] = ["0.0" if cell.strip() in ("0", "+0", "-0") else "1.0" for cell in table["calls"]]
    expected = ["node", *TABLE_COLUMNS]
    missing = [c for c in expected if c not in table.columns]
    if missing:
        listed = ", ".join(missing[:6]) + (f" and {len(missing) - 6} more" if len(missing) > 6 else "")
        raise ProfileFormatError(
            f"{path!r} is not an fxprof per-node CSV: it lacks the column(s) {listed}. "
            f"Such tables are written by Profile.to_csv() or 'fxprof profile --csv'."
        )
    from .distributed import RANK_TABLE_COLUMNS  # a gathered profile's per-rank columns, when there

    ranked = {c: kind for c, kind in RANK_TABLE_COLUMNS.items() if c in table.columns}
    return parse_table(table, {**COLUMNS, **ranked}, repr(path))[[*TABLE_COLUMNS, *ranked]]


# ------------------------------------------------------------------------- JSON
def _profile_to_dict(profile: "Profile") -> dict[str, Any]:
    samples = profile.samples
    runs = profile.runs
    return {
        "format": FORMAT_NAME,
        "version": FORMAT_VERSION,
        "meta": profile.meta,
        "nodes": [
            {"name": n.name, **{col: getattr(n, col) for col in NODE_COLUMNS}} for n in profile.nodes
        ],
        "samples": {col: _json_values(samples[col]) for col in SAMPLE_COLUMNS},
        # a gathered profile (fxprof.gather): each run's rank, the rank's own run number, its barrier wait
        "runs": {col: _json_values(runs[col]) for col in (*RUN_COLUMNS, *(c for c in ("rank", "rank_run", "barrier_ms") if c in runs.columns))},
        "anatomy": {
            col: [None if pd.isna(v) else (v if isinstance(v, str) else int(v)) for v in profile.anatomy[col]]
            for col in ANATOMY_COLUMNS
        },
    }


def _json_values(column: pd.Series) -> list[Any]:
    """A column as JSON values: NaN (not measured) becomes null, so the file is strict JSON."""
    return [None if isinstance(v, float) and math.isnan(v) else v for v in column.tolist()]


def _floats(values: list[Any]) -> list[float]:
    return [math.nan if v is None else float(v) for v in values]


def save_profile(profile: "Profile", path: str | os.PathLike) -> None:
    """Save ``profile``: binary columns for a ``.npz`` path (see :mod:`fxprof.store`), else JSON."""
    if os.fspath(path).lower().endswith(".npz"):
        from .store import save_npz

        return save_npz(profile, path)
    data = _profile_to_dict(profile)
    atomic_write(path, lambda handle: json.dump(data, handle, allow_nan=False, default=str))


def load_profile(path: str | os.PathLike) -> "Profile":
    """Load a profile saved by :meth:`Profile.save`: JSON, or binary columns (told apart by
    content).

    A JSON file is checked against the published schema (:data:`fxprof.validate.SCHEMA`) and
    the built profile by :func:`fxprof.validate.check_profile`; anything malformed is a
    :class:`~fxprof.errors.ProfileFormatError` saying what and where.
    """
    from .profile import Profile

    path = os.fspath(path)
    if _is_zip(path):
        from .store import load_npz

        return load_npz(path)
    source = repr(path)
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
    except UnicodeDecodeError as exc:
        raise ProfileFormatError(f"{source} is not a saved fxprof profile (not JSON: {exc})") from exc
    data = parse_json(text, source)
    if not isinstance(data, dict) or data.get("format") != FORMAT_NAME:
        raise ProfileFormatError(
            f"{source} is not a saved fxprof profile (no \"format\": \"{FORMAT_NAME}\" field). "
            f"Save profiles with Profile.save(); per-node CSVs are read with fxprof.read_csv()."
        )
    version = data.get("version")
    if version != FORMAT_VERSION:
        raise ProfileFormatError(
            f"{source} is a version {version!r} fxprof profile; this fxprof reads version "
            f"{FORMAT_VERSION}. Upgrade fxprof (or re-save the profile with this version)."
        )
    check_document(data, source)
    try:
        # profiles saved before training steps existed have no phase: they are forward passes
        nodes = [NodeInfo(**{"name": n["name"], **{c: n.get(c, "forward" if c == "phase" else "") for c in NODE_COLUMNS}}) for n in data["nodes"]]
        s, r = data["samples"], data["runs"]
        recording = Recording(
            node=[str(v) for v in s["node"]],
            run=[int(v) for v in s["run"]],
            time_ms=_floats(s["time_ms"]),
            host_ms=_floats(s["host_ms"]),
            start_ms=_floats(s.get("start_ms", [None] * len(s["node"]))),
            host_start_ms=_floats(s.get("host_start_ms", [None] * len(s["node"]))),
            run_total_ms=_floats(r["total_ms"]),
            run_host_ms=_floats(r.get("host_ms", [None] * len(r["total_ms"]))),
            run_start_ms=_floats(r.get("start_ms", [None] * len(r["total_ms"]))),
            kernel_ms=_floats(s.get("kernel_ms", [])),
        )
        anatomy_columns = data.get("anatomy") or {}
        anatomy = {
            n.name: {col: values[i] for col, values in anatomy_columns.items() if col in ANATOMY_COLUMNS}
            for i, n in enumerate(nodes)
        }
        profile = Profile.from_recording(nodes, recording, data.get("meta") or {}, anatomy)
        if "rank" in r:  # torch.distributed ranks (fxprof.gather)
            from .distributed import with_ranks

            profile = with_ranks(profile, [int(v) for v in r["rank"]], r.get("barrier_ms"), [int(v) for v in r["rank_run"]])
    except (KeyError, TypeError, ValueError, IndexError, AttributeError, OverflowError) as exc:
        raise ProfileFormatError(f"{source} is a damaged fxprof profile: {type(exc).__name__}: {exc}") from exc
    check_profile(profile, source)
    return profile


def read_any(path: str | os.PathLike) -> "Profile | pd.DataFrame":
    """A saved profile (JSON or ``.npz``) as a :class:`Profile`, or a per-node CSV as a DataFrame."""
    path = os.fspath(path)
    with open(path, "rb") as handle:
        head = handle.read(256).lstrip()
    if head.startswith(b"{") or head.startswith(_ZIP_MAGIC):
        return load_profile(path)
    return read_csv(path)


_ZIP_MAGIC = b"PK\x03\x04"


def _is_zip(path: str) -> bool:
    with open(path, "rb") as handle:
        return handle.read(4) == _ZIP_MAGIC
