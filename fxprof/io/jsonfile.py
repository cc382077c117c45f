"""The lossless JSON profile: meta, nodes, every sample and run, anatomy. Never pickle.

Written atomically (:mod:`fxprof.io.atomic`); read back through the published schema
(:data:`fxprof.io.validate.SCHEMA`) and the checks of :func:`fxprof.io.validate.check_profile`.
"""

from __future__ import annotations

import json
import math
import os
from typing import TYPE_CHECKING, Any

import pandas as pd

from ..core.profile import RUN_COLUMNS, SAMPLE_COLUMNS
from ..core.recording import Recording
from ..errors import ProfileFormatError
from .atomic import atomic_write
from .header import decode_anatomy, decode_nodes, encode_header
from .validate import check_document, check_profile, parse_json

if TYPE_CHECKING:
    from ..core.profile import Profile

__all__ = ["save_json", "load_json", "FORMAT_NAME", "FORMAT_VERSION"]

FORMAT_NAME = "fxprof.profile"
FORMAT_VERSION = 1


# ------------------------------------------------------------------------- JSON
def _profile_to_dict(profile: "Profile") -> dict[str, Any]:
    samples = profile.samples
    runs = profile.runs
    header = encode_header(profile)
    return {
        "format": FORMAT_NAME,
        "version": FORMAT_VERSION,
        "meta": header["meta"],
        "nodes": header["nodes"],
        "samples": {col: _json_values(samples[col]) for col in SAMPLE_COLUMNS},
        # a gathered profile (fxprof.gather): each run's rank, the rank's own run number, its barrier wait
        "runs": {col: _json_values(runs[col]) for col in (*RUN_COLUMNS, *(c for c in ("rank", "rank_run", "barrier_ms") if c in runs.columns))},
        "anatomy": header["anatomy"],
    }


def _json_values(column: pd.Series) -> list[Any]:
    """A column as JSON values: NaN (not measured) becomes null, so the file is strict JSON."""
    return [None if isinstance(v, float) and math.isnan(v) else v for v in column.tolist()]


def _floats(values: list[Any]) -> list[float]:
    return [math.nan if v is None else float(v) for v in values]


def save_json(profile: "Profile", path: str | os.PathLike) -> None:
    """Save ``profile`` as the JSON document (lossless, versioned, strict JSON)."""
    data = _profile_to_dict(profile)
    atomic_write(path, lambda handle: json.dump(data, handle, allow_nan=False, default=str))


def load_json(path: str | os.PathLike) -> "Profile":
    """Load a profile saved as JSON by :meth:`Profile.save`.

    A JSON file is checked against the published schema (:data:`fxprof.io.validate.SCHEMA`) and
    the built profile by :func:`fxprof.io.validate.check_profile`; anything malformed is a
    :class:`~fxprof.errors.ProfileFormatError` saying what and where.
    """
    from ..core.profile import Profile

    path = os.fspath(path)
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
            from ..core.ranks import with_ranks

            profile = with_ranks(profile, [int(v) for v in r["rank"]], r.get("barrier_ms"), [int(v) for v in r["rank_run"]])
    except (KeyError, TypeError, ValueError, IndexError, AttributeError, OverflowError) as exc:
        raise ProfileFormatError(f"{source} is a damaged fxprof profile: {type(exc).__name__}: {exc}") from exc
    check_profile(profile, source)
    return profile
