"""The binary profile file: every sample as numpy columns in a zip, with a JSON header. Never pickle.

``Profile.save("p.npz")`` writes this format (``.json`` writes the JSON of
:mod:`fxprof.io.jsonfile`); :func:`fxprof.load`, ``fxprof show`` and ``fxprof compare`` read both,
telling them apart by content. The file is an uncompressed zip (numpy's ``.npz`` layout, so
``numpy.load(path)`` opens it too) holding:

- ``header.json``: ``{"format": "fxprof.profile.npz", "version": 1, "meta": {...},
  "nodes": [...], "anatomy": {...}, "samples": n, "runs": r}``; ``meta``, ``nodes`` and
  ``anatomy`` are exactly the JSON format's fields.
- ``samples/node.npy`` (``int32``, an index into ``nodes``), ``samples/run.npy`` (``int32``),
  ``samples/time_ms.npy``, ``samples/host_ms.npy``, ``samples/start_ms.npy``,
  ``samples/host_start_ms.npy`` and, when kernel time was measured, ``samples/kernel_ms.npy``
  (``float64``): one entry per sample.
- ``runs/run.npy`` (``int64``), ``runs/total_ms.npy``, ``runs/host_ms.npy``,
  ``runs/start_ms.npy`` (``float64``): one entry per timed run.

Arrays are read with ``allow_pickle=False``: a file can hold numbers and JSON, nothing that
runs on load. A sample costs 40 bytes on disk (48 with kernel time), and saving or loading is a
copy of the columns. Files are written atomically, as every fxprof file is.
"""

from __future__ import annotations

import json
import os
import zipfile
from typing import TYPE_CHECKING, Any, Literal, overload

import numpy as np
import pandas as pd

from ..core.columnar import SampleColumns
from ..core.profile import RUN_COLUMNS
from ..errors import ProfileFormatError
from .atomic import atomic_write
from .header import decode_anatomy, decode_nodes, encode_header
from .validate import check_profile, check_saveable

if TYPE_CHECKING:
    from ..core.profile import Profile

__all__ = ["save_npz", "load_npz", "NPZ_FORMAT_NAME", "NPZ_FORMAT_VERSION"]

NPZ_FORMAT_NAME = "fxprof.profile.npz"
NPZ_FORMAT_VERSION = 1

_HEADER = "header.json"
#: sample columns: name -> numpy dtype kind allowed on load ("i" integer, "f" float)
_SAMPLE_ARRAYS = {"node": "i", "run": "i", "time_ms": "f", "host_ms": "f", "start_ms": "f", "host_start_ms": "f", "kernel_ms": "f"}
_OPTIONAL = {"kernel_ms"}
#: run columns of a profile gathered over torch.distributed ranks, kept when present
_RANK_ARRAYS = {"rank": np.int64, "rank_run": np.int64, "barrier_ms": np.float64}


def save_npz(profile: "Profile", path: str | os.PathLike) -> None:
    """Write ``profile`` as binary columns plus a JSON header, atomically, once it passes the
    checks a load makes (:func:`fxprof.io.validate.check_saveable`; else nothing is written)."""
    meta = check_saveable(profile, path)
    columns: SampleColumns = profile.columns
    runs = profile.runs
    header = {"format": NPZ_FORMAT_NAME, "version": NPZ_FORMAT_VERSION, **encode_header(profile, meta),
              "samples": len(columns), "runs": len(runs)}
    arrays: dict[str, np.ndarray] = {f"samples/{col}": getattr(columns, col) for col in _SAMPLE_ARRAYS if col not in _OPTIONAL}
    if columns.kernel_ms is not None:
        arrays["samples/kernel_ms"] = columns.kernel_ms
    arrays.update({f"runs/{col}": runs[col].to_numpy() for col in RUN_COLUMNS})
    # a gathered profile (fxprof.gather): each run's rank, the rank's own run number, its barrier wait
    arrays.update({f"runs/{col}": runs[col].to_numpy(dtype=kind) for col, kind in _RANK_ARRAYS.items() if col in runs.columns})
    text = json.dumps(header, allow_nan=False, default=str).encode("utf-8")

    def write(handle: Any) -> None:
        with zipfile.ZipFile(handle, "w", compression=zipfile.ZIP_STORED, allowZip64=True) as archive:
            archive.writestr(_HEADER, text)
            for name, array in arrays.items():
                with archive.open(name + ".npy", "w", force_zip64=True) as member:
                    np.lib.format.write_array(member, np.ascontiguousarray(array), allow_pickle=False)

    atomic_write(path, write, binary=True)


def load_npz(path: str | os.PathLike) -> "Profile":
    """Read a profile written by :func:`save_npz`.

    Raises :class:`~fxprof.errors.ProfileFormatError` for a zip that is not such a profile, a
    newer version, or damaged columns (wrong type, wrong length, node index out of range).
    """
    path = os.fspath(path)
    header, arrays = _read(path)
    profile = _build(path, header, arrays)
    check_profile(profile, repr(path))  # what every profile must satisfy, as for JSON
    return profile


#: a file may unpack to at most this many times its size on disk, plus _SLACK bytes. fxprof
#: writes its members uncompressed (ratio 1); re-compressing one gives under 2x (the time
#: columns hardly compress); a zip bomb is 100x to 1000x.
_MAX_RATIO = 20
_SLACK = 16 * 2**20


def _read(path: str) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """The header and the known arrays of the file. Nothing large is read before it is known to
    fit: the members' declared sizes against the file's size, the header against the schema,
    and each column's declared shape and dtype (its ``.npy`` header) against the header's counts
    and against the member's size. Unknown members are never read."""
    from .validate import check_npz_header, parse_json

    source = repr(path)
    try:
        with zipfile.ZipFile(path) as archive:
            infos = {info.filename: info for info in archive.infolist()}
            if _HEADER not in infos:
                raise ProfileFormatError(
                    f"{path!r} is a zip but not a saved fxprof profile (no {_HEADER}). "
                    f"Save profiles with Profile.save('name.npz') or Profile.save('name.json')."
                )
            on_disk = os.path.getsize(path)
            declared = sum(info.file_size for info in infos.values())
            if declared > _SLACK + _MAX_RATIO * on_disk:
                raise ProfileFormatError(
                    f"{path!r} is not a profile fxprof reads: its {len(infos)} member(s) unpack to {declared:,} bytes from "
                    f"{on_disk:,} on disk (more than {_MAX_RATIO}x; a zip bomb?). fxprof writes .npz members "
                    f"uncompressed; re-save the profile with Profile.save('name.npz')."
                )
            header = parse_json(archive.read(_HEADER).decode("utf-8"), source)
            if not isinstance(header, dict) or header.get("format") != NPZ_FORMAT_NAME:
                raise ProfileFormatError(f"{path!r} is not a saved fxprof profile (its {_HEADER} has no \"format\": \"{NPZ_FORMAT_NAME}\")")
            version = header.get("version")
            if version != NPZ_FORMAT_VERSION:
                raise ProfileFormatError(
                    f"{path!r} is a version {version!r} fxprof binary profile; this fxprof reads version "
                    f"{NPZ_FORMAT_VERSION}. Upgrade fxprof (or re-save the profile with this version)."
                )
            check_npz_header(header, source)
            known = {**{f"samples/{col}": (kind, header["samples"]) for col, kind in _SAMPLE_ARRAYS.items()},
                     **{f"runs/{col}": ("i" if col in ("run", "rank", "rank_run") else "f", header["runs"])
                        for col in (*RUN_COLUMNS, *_RANK_ARRAYS)}}
            arrays = {}
            for name, (kind, length) in known.items():
                info = infos.get(name + ".npy")
                if info is None:
                    continue
                _check_member(archive, info, name, kind, length)
                with archive.open(info) as member:
                    arrays[name] = np.lib.format.read_array(member, allow_pickle=False)
    except ProfileFormatError:
        raise
    except (zipfile.BadZipFile, json.JSONDecodeError, UnicodeDecodeError, ValueError, OSError, EOFError, OverflowError) as exc:
        if isinstance(exc, (FileNotFoundError, IsADirectoryError, PermissionError)):
            raise
        raise ProfileFormatError(f"{path!r} is a damaged fxprof profile: {type(exc).__name__}: {exc}") from exc
    return header, arrays


def _check_member(archive: zipfile.ZipFile, info: zipfile.ZipInfo, name: str, kind: str, length: int) -> None:
    """A column's ``.npy`` header (read alone: a few hundred bytes) against what the profile's
    header says it holds, and its data against the member's declared size; raises ValueError."""
    fmt = np.lib.format
    with archive.open(info) as member:
        version = fmt.read_magic(member)
        if version == (1, 0):
            shape, fortran, dtype = fmt.read_array_header_1_0(member)
        elif version == (2, 0):
            shape, fortran, dtype = fmt.read_array_header_2_0(member)
        else:
            raise ValueError(f"the column {name} is an .npy of version {version}; fxprof reads versions 1.0 and 2.0")
        offset = member.tell()
    words = "integer" if kind == "i" else "float"
    if dtype.hasobject or len(shape) != 1 or dtype.kind not in (kind, "u" if kind == "i" else kind) or dtype.itemsize > 8:
        raise ValueError(f"the column {name} holds {dtype} of shape {shape}, not a 1-d {words} column")
    if shape[0] != length:
        raise ValueError(f"the column {name} has {shape[0]} values, the header says {length}")
    if offset + length * dtype.itemsize != info.file_size:
        raise ValueError(f"the column {name} declares {length} values of {dtype.itemsize} bytes, but its member holds "
                         f"{info.file_size - offset} bytes of data")


def _build(path: str, header: dict[str, Any], arrays: dict[str, np.ndarray]) -> "Profile":
    """The Profile from a read header and arrays, after checking that they fit together."""
    from ..core.profile import Profile

    try:
        nodes = decode_nodes(header["nodes"])
        samples = {col: _array(arrays, f"samples/{col}", kind, header["samples"], optional=col in _OPTIONAL)
                   for col, kind in _SAMPLE_ARRAYS.items()}
        runs = {col: _array(arrays, f"runs/{col}", "i" if col == "run" else "f", header["runs"]) for col in RUN_COLUMNS}
        columns = SampleColumns([n.name for n in nodes], samples["node"], samples["run"], samples["time_ms"], samples["host_ms"],
                                samples["start_ms"], samples["host_start_ms"], samples["kernel_ms"], copy=False)
        anatomy = decode_anatomy(header.get("anatomy"), nodes)
        profile = Profile(nodes, columns, pd.DataFrame(runs), header.get("meta") or {}, anatomy)
        if "runs/rank" in arrays:  # torch.distributed ranks (fxprof.gather)
            from ..core.rankmerge import with_ranks

            ranked = {col: _array(arrays, f"runs/{col}", "f" if col == "barrier_ms" else "i", header["runs"])
                      for col in _RANK_ARRAYS}
            profile = with_ranks(profile, ranked["rank"].tolist(), [None if np.isnan(v) else float(v) for v in ranked["barrier_ms"]],
                                 ranked["rank_run"].tolist())
        return profile
    except ProfileFormatError:
        raise
    except (KeyError, TypeError, ValueError, IndexError, AttributeError, OverflowError) as exc:
        raise ProfileFormatError(f"{path!r} is a damaged fxprof profile: {type(exc).__name__}: {exc}") from exc


@overload
def _array(arrays: dict[str, np.ndarray], name: str, kind: str, length: int, optional: Literal[False] = False) -> np.ndarray: ...


@overload
def _array(arrays: dict[str, np.ndarray], name: str, kind: str, length: int, optional: bool) -> np.ndarray | None: ...


def _array(arrays: dict[str, np.ndarray], name: str, kind: str, length: int, optional: bool = False) -> np.ndarray | None:
    array = arrays.get(name)
    if array is None:
        if optional:
            return None
        raise ValueError(f"the column {name} is missing")
    if array.ndim != 1 or array.dtype.kind not in (kind, "u" if kind == "i" else kind):
        raise ValueError(f"the column {name} holds {array.dtype} of shape {array.shape}, not a 1-d {'integer' if kind == 'i' else 'float'} column")
    if len(array) != length:
        raise ValueError(f"the column {name} has {len(array)} values, the header says {length}")
    return array
