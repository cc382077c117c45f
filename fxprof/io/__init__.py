"""Files: saving and loading profiles and per-node tables. Imports no torch; never pickles.

- :func:`save_profile` / :func:`load_profile`: a whole profile, lossless: JSON
  (:mod:`~fxprof.io.jsonfile`) or binary columns for a ``.npz`` path (:mod:`~fxprof.io.npzfile`),
  told apart on load by content, not by name; both share one header codec
  (:mod:`~fxprof.io.header`) and the checks of :mod:`~fxprof.io.validate`.
- :func:`write_csv` / :func:`read_csv`: the per-node table (:mod:`~fxprof.io.csvfile`).
- :func:`read_any`: whichever of the three a file is.
- :func:`atomic_write`: every file appears whole or not at all (:mod:`~fxprof.io.atomic`).
"""

from __future__ import annotations

import os
import stat
from typing import TYPE_CHECKING

from .atomic import atomic_write
from .csvfile import read_csv, write_csv
from .jsonfile import FORMAT_NAME, FORMAT_VERSION, load_json, save_json
from .npzfile import NPZ_FORMAT_NAME, NPZ_FORMAT_VERSION, load_npz, save_npz

if TYPE_CHECKING:
    import pandas as pd

    from ..core.profile import Profile

__all__ = [
    "save_profile", "profile_format", "load_profile", "read_any", "read_csv", "write_csv", "atomic_write",
    "FORMAT_NAME", "FORMAT_VERSION", "NPZ_FORMAT_NAME", "NPZ_FORMAT_VERSION",
]

_ZIP_MAGIC = b"PK\x03\x04"


def profile_format(path: str | os.PathLike) -> str:
    """``"npz"`` or ``"json"``: the format :func:`save_profile` writes to ``path``.

    A file named ``*.npz`` gets binary columns and ``*.json`` JSON (any case). What is not a
    regular file by name gets JSON, the text format: standard output (``"-"``), a device, a
    FIFO (and a directory, which then fails to be written as any file would). Any other
    name is a ValueError naming the two formats: a profile is never written in a format its
    name does not say.
    """
    name = os.fspath(path)
    lower = name.lower()
    if lower.endswith(".npz"):
        return "npz"
    if lower.endswith(".json") or name == "-":
        return "json"
    try:
        regular = stat.S_ISREG(os.stat(name).st_mode)
    except OSError:
        regular = True  # a new file
    if not regular:
        return "json"
    raise ValueError(
        f"fxprof saves a profile as JSON (a path ending in .json) or as binary columns (.npz, smaller and "
        f"faster); {name!r} ends in neither. Name the file ....json or ....npz"
    )


def save_profile(profile: "Profile", path: str | os.PathLike) -> None:
    """Save ``profile`` in the format its path names (:func:`profile_format`): binary columns
    for ``.npz``, JSON for ``.json``; any other file name is a ValueError."""
    if profile_format(path) == "npz":
        save_npz(profile, path)
    else:
        save_json(profile, path)


def load_profile(path: str | os.PathLike) -> "Profile":
    """Load a profile saved by :meth:`Profile.save`: JSON, or binary columns (told apart by
    content). Anything malformed is a :class:`~fxprof.errors.ProfileFormatError` saying what
    and where."""
    path = os.fspath(path)
    return load_npz(path) if _is_zip(path) else load_json(path)


def read_any(path: str | os.PathLike) -> "Profile | pd.DataFrame":
    """A saved profile (JSON or ``.npz``) as a :class:`Profile`, or a per-node CSV as a DataFrame.

    Told apart by content; a file named ``.json`` or ``.npz`` (or holding a JSON list) is read as
    a profile whatever it holds, so that its error says what is wrong with it as a profile."""
    path = os.fspath(path)
    with open(path, "rb") as handle:
        head = handle.read(256).lstrip()
    if (head.startswith((b"{", b"[", _ZIP_MAGIC)) or path.lower().endswith((".json", ".npz"))):
        return load_profile(path)
    return read_csv(path)


def _is_zip(path: str) -> bool:
    with open(path, "rb") as handle:
        return handle.read(4) == _ZIP_MAGIC
