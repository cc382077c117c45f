"""The lossless JSON profile: meta, nodes, every sample and run, anatomy. Never pickle.

Version 2 (written since issue 25) keeps the sample and run columns as JSON arrays of numbers,
each sample's node as its position in ``nodes``; they are written straight from the numpy
columns and parsed back into numpy columns by ``orjson``, so a JSON file of 3M samples saves
and loads in about the time the binary ``.npz`` takes, give or take a factor of a few
(docs/performance.md). Version 1 files (nodes by name) still load.

Written atomically (:mod:`fxprof.io.atomic`); read back through the published schema
(:data:`fxprof.io.validate.SCHEMA`; version 1: ``SCHEMA_V1``) and the checks of
:func:`fxprof.io.validate.check_profile`.
"""

from __future__ import annotations

import math
import os
import re
from typing import TYPE_CHECKING, Any

import numpy as np
import orjson
import pandas as pd

from ..core.columnar import SampleColumns
from ..core.profile import RUN_COLUMNS
from ..core.recording import Recording
from ..errors import ProfileFormatError
from .atomic import atomic_write
from .header import decode_anatomy, decode_nodes, encode_header
from .validate import SCHEMA, check_document, check_profile, check_saveable, check_skeleton, column_arrays, parse_json

if TYPE_CHECKING:
    from ..core.profile import Profile

__all__ = ["save_json", "load_json", "FORMAT_NAME", "FORMAT_VERSION", "READ_VERSIONS"]

FORMAT_NAME = "fxprof.profile"
#: the version written
FORMAT_VERSION = 2
#: the versions read
READ_VERSIONS = (1, 2)
#: run columns of a profile gathered over torch.distributed ranks, kept when present
_RANK_COLUMNS = {"rank": np.int64, "rank_run": np.int64, "barrier_ms": np.float64}
_SAMPLE_TIMES = ("time_ms", "host_ms", "start_ms", "host_start_ms")


# ------------------------------------------------------------------------- JSON
def _profile_to_dict(profile: "Profile", meta: dict[str, Any]) -> dict[str, Any]:
    columns: SampleColumns = profile.columns
    runs = profile.stored_runs
    header = encode_header(profile, meta)
    samples: dict[str, np.ndarray] = {"node": columns.node, "run": columns.run}
    samples.update({col: getattr(columns, col) for col in _SAMPLE_TIMES})
    if columns.kernel_ms is not None:
        samples["kernel_ms"] = columns.kernel_ms
    # (an integer column takes no na_value: pandas 2 refuses NaN for int64 even where none is)
    run_columns = {col: runs[col].to_numpy(dtype=np.int64) if col == "run" else runs[col].to_numpy(dtype=np.float64, na_value=np.nan)
                   for col in RUN_COLUMNS}
    # a gathered profile (fxprof.gather): each run's rank, the rank's own run number, its barrier wait
    run_columns.update({col: runs[col].to_numpy(dtype=kind, na_value=np.nan) if kind is np.float64 else runs[col].to_numpy(dtype=kind)
                        for col, kind in _RANK_COLUMNS.items() if col in runs.columns})
    return {
        "format": FORMAT_NAME,
        "version": FORMAT_VERSION,
        "meta": header["meta"],
        "nodes": header["nodes"],
        "samples": {col: np.ascontiguousarray(a) for col, a in samples.items()},
        "runs": {col: np.ascontiguousarray(a) for col, a in run_columns.items()},
        "anatomy": header["anatomy"],
    }


def save_json(profile: "Profile", path: str | os.PathLike) -> None:
    """Save ``profile`` as the JSON document (lossless, versioned, strict JSON: a missing
    value, NaN in memory, is ``null``). The profile first passes the checks a load makes
    (:func:`fxprof.io.validate.check_saveable`): a profile this cannot load back is refused,
    and nothing is written."""
    meta = check_saveable(profile, path)
    text = orjson.dumps(_profile_to_dict(profile, meta), default=str,
                        option=orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS)
    atomic_write(path, lambda handle: handle.write(text), binary=True)


#: a version 2 document as fxprof writes it: its samples and runs columns, one after the other
_GROUP_START = {"samples": b'"samples":{', "runs": b'"runs":{'}
_COLUMN_KEY = re.compile(rb'"([A-Za-z_]+)":\[')
#: the bytes an integer column of plain numbers is made of, and those that start any JSON value
#: but a number (a string, true, false, null, an array, an object)
_INTEGER_BYTES, _NOT_A_NUMBER = b"0123456789,", (b'"', b"t", b"f", b"n", b"[", b"{")


def _parse_by_columns(raw: bytes) -> dict[str, Any] | None:
    """A version 2 document parsed with its long number columns read straight from the file's
    bytes: the document is ``orjson.loads(raw)`` exactly, except that each samples or runs
    column made of plain numbers is a numpy array (int64 for an integer column, float64
    otherwise) instead of a list of Python numbers, which at 3M samples take most of a load's
    time. None where the file is laid out otherwise than fxprof writes it (a version 1 file, a
    hand-edited one, any doubt), or anything in it does not parse: the caller then parses the
    whole document, and words any error as it always has.

    Each column's bytes are cut out of the document and a marker put in their place; the rest
    is parsed by orjson, and the markers must come back exactly where the columns were (as
    ``samples.node`` and so on), so a column is never taken from anywhere else in the file."""
    pieces: list[bytes] = []
    columns: list[tuple[str, str, int, int]] = []  # group, name, and where its bytes start and end
    at = 0
    for group, opening_bytes in _GROUP_START.items():
        found = raw.find(opening_bytes, at)
        if found < 0:
            return None
        pos = found + len(opening_bytes)
        pieces.append(raw[at:pos])
        if raw[pos:pos + 1] == b"}":  # no columns (a profile of no runs keeps its keys, but be lenient)
            at = pos
            continue
        while True:
            key = _COLUMN_KEY.match(raw, pos)
            if key is None:
                return None
            opening = key.end() - 1
            closing = raw.find(b"]", opening)
            if closing < 0:
                return None
            pieces.append(raw[pos:opening] + b'{"fxprof column":%d}' % len(columns))
            columns.append((group, key.group(1).decode(), opening, closing + 1))
            pos = closing + 1
            after = raw[pos:pos + 1]
            if after == b"}":
                break
            if after != b",":
                return None
            pieces.append(b",")
            pos += 1
        at = pos
    pieces.append(raw[at:])
    try:
        data = orjson.loads(b"".join(pieces))
        if not isinstance(data, dict) or data.get("format") != FORMAT_NAME or data.get("version") != 2 \
                or type(data.get("version")) is not int:
            return None
        groups: dict[str, dict[str, Any]] = {}
        for group in _GROUP_START:
            if not isinstance(data.get(group), dict):
                return None
            groups[group] = data[group]
        for k, (group, name, _, _) in enumerate(columns):
            if groups[group].get(name) != {"fxprof column": k}:
                return None
        rules = {group: SCHEMA["properties"][group]["properties"] for group in _GROUP_START}
        for group, name, start, end in columns:
            rule = rules[group].get(name)
            integer = rule is not None and rule["items"]["type"] == "integer"
            groups[group][name] = _number_column(raw, start, end, integer) if rule is not None else None
            if groups[group][name] is None:
                groups[group][name] = orjson.loads(memoryview(raw)[start:end])  # anything else: as orjson parses it
    except (orjson.JSONDecodeError, ValueError, OverflowError, TypeError):
        return None
    return data


def _number_column(raw: bytes, start: int, end: int, integer: bool) -> np.ndarray | None:
    """The JSON array ``raw[start:end]`` of plain numbers as a numpy array (None if it holds
    anything else: null, true, a string, a sign on an integer...). An integer column is read by
    numpy from the text (whole numbers below 10**18 without a leading zero, checked in bulk:
    numbers JSON and int64 read alike); a number column by orjson (where no byte can start
    another kind of value), into float64 as ``np.array`` would make it."""
    if end - start == 2:  # []
        return np.empty(0, dtype=np.int64 if integer else np.float64)
    if not integer:
        if any(raw.find(byte, start + 1, end - 1) >= 0 for byte in _NOT_A_NUMBER):
            return None
        values = orjson.loads(memoryview(raw)[start:end])
        return np.fromiter(values, dtype=np.float64, count=len(values))
    inner = raw[start + 1:end - 1]
    if inner.translate(None, _INTEGER_BYTES):
        return None
    if b",," in inner or inner[:1] == b"," or inner[-1:] == b",":
        return None  # an empty item
    chars = np.frombuffer(inner, dtype=np.uint8)
    starts = np.empty(len(chars), dtype=bool)  # where a number starts: first, or after a comma
    starts[0] = True
    np.equal(chars[:-1], ord(","), out=starts[1:])
    if (starts[:-1] & (chars[:-1] == ord("0")) & (chars[1:] != ord(","))).any():
        return None  # a leading zero (JSON has none; numpy would read 007 as 7)
    values = np.fromstring(inner, dtype=np.int64, sep=",")
    if len(values) != inner.count(b",") + 1 or values.max() >= 10**18:
        return None  # 19 digits or more: numpy clips what int64 cannot hold, where JSON reads it
    return values


def _floats(values: list[Any]) -> list[float]:
    return [math.nan if v is None else float(v) for v in values]


def load_json(path: str | os.PathLike) -> "Profile":
    """Load a profile saved as JSON by :meth:`Profile.save`.

    A JSON file is checked against the published schema (:data:`fxprof.io.validate.SCHEMA`) and
    the built profile by :func:`fxprof.io.validate.check_profile`; anything malformed is a
    :class:`~fxprof.errors.ProfileFormatError` saying what and where.
    """
    from ..core.profile import Profile

    path = os.fspath(path)
    source = repr(path)
    with open(path, "rb") as handle:
        raw = handle.read()
    if not raw.strip():
        raise ProfileFormatError(f"{source} is an empty file, not a saved fxprof profile. Save profiles with Profile.save() "
                                 f"or 'fxprof profile --json PATH'.")
    data = _parse_by_columns(raw)
    try:
        if data is None:
            data = orjson.loads(raw)
    except orjson.JSONDecodeError as fast_error:  # the standard parser words what is wrong
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ProfileFormatError(f"{source} is not a saved fxprof profile (not JSON: {exc})") from exc
        parse_json(text, source)
        raise ProfileFormatError(f"{source} is not a saved fxprof profile (not JSON: {fast_error})") from fast_error
    del raw
    if not isinstance(data, dict):
        kind = {list: "a JSON list", str: "a JSON string", int: "a number", float: "a number",
                bool: "JSON true or false"}.get(type(data), "JSON null")
        raise ProfileFormatError(
            f"{source} holds {kind}, not a saved fxprof profile (the JSON object Profile.save() writes, with "
            f"\"format\": \"{FORMAT_NAME}\")."
        )
    if data.get("format") != FORMAT_NAME:
        raise ProfileFormatError(
            f"{source} is not a saved fxprof profile (no \"format\": \"{FORMAT_NAME}\" field). "
            f"Save profiles with Profile.save(); per-node CSVs are read with fxprof.read_csv()."
        )
    version = data.get("version")
    if type(version) is int and version > max(READ_VERSIONS):
        raise ProfileFormatError(
            f"{source} is a version {version!r} fxprof profile; this fxprof reads versions "
            f"{' and '.join(map(str, READ_VERSIONS))}. Upgrade fxprof (or re-save the profile with this version)."
        )
    if version not in READ_VERSIONS or type(version) is not int:
        raise ProfileFormatError(
            f"{source} says \"version\": {version!r}, which no fxprof ever wrote (the versions are "
            f"{' and '.join(map(str, READ_VERSIONS))}): the file was edited or damaged; save the profile again."
        )
    if version == 2:
        return _load_v2(data, source)
    check_document(data, source)
    try:
        nodes = decode_nodes(data["nodes"])
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
        anatomy = decode_anatomy(data.get("anatomy"), nodes)
        profile = Profile.from_recording(nodes, recording, data.get("meta") or {}, anatomy)
        if "rank" in r:  # torch.distributed ranks (fxprof.gather)
            from ..core.rankmerge import with_ranks

            profile = with_ranks(profile, [int(v) for v in r["rank"]], r.get("barrier_ms"), [int(v) for v in r["rank_run"]])
    except (KeyError, TypeError, ValueError, IndexError, AttributeError, OverflowError) as exc:
        raise ProfileFormatError(f"{source} is a damaged fxprof profile: {type(exc).__name__}: {exc}") from exc
    check_profile(profile, source)
    return profile


def _load_v2(data: dict[str, Any], source: str) -> "Profile":
    """A version 2 document: the columns go from the parsed lists to numpy arrays once each."""
    from ..core.profile import Profile

    check_skeleton(data, source, SCHEMA)
    samples = column_arrays(data, "samples", source)
    runs = column_arrays(data, "runs", source)
    del data["samples"], data["runs"]  # the lists of Python numbers: no longer needed
    try:
        nodes = decode_nodes(data["nodes"])
        columns = SampleColumns([n.name for n in nodes], samples["node"], samples["run"],
                                **{col: samples.get(col) for col in _SAMPLE_TIMES}, kernel_ms=samples.get("kernel_ms"), copy=False)
        count = len(runs["total_ms"])
        frame = pd.DataFrame({col: runs[col] if col in runs else np.full(count, np.nan) for col in RUN_COLUMNS})
        anatomy = decode_anatomy(data.get("anatomy"), nodes)
        profile = Profile(nodes, columns, frame, data.get("meta") or {}, anatomy)
        if "rank" in runs:  # torch.distributed ranks (fxprof.gather)
            from ..core.rankmerge import with_ranks

            barrier = runs.get("barrier_ms")
            profile = with_ranks(profile, runs["rank"].tolist(),
                                 None if barrier is None else [None if np.isnan(v) else float(v) for v in barrier],
                                 runs["rank_run"].tolist())
    except (KeyError, TypeError, ValueError, IndexError, AttributeError, OverflowError) as exc:
        raise ProfileFormatError(f"{source} is a damaged fxprof profile: {type(exc).__name__}: {exc}") from exc
    check_profile(profile, source)
    return profile
