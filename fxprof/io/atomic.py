"""Atomic writes: every file fxprof writes appears whole or not at all.

A file is written to a temporary file beside the target, flushed and fsynced, then renamed over
it. A failed write leaves any earlier file intact and never a truncated one.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import stat
import sys
import tempfile
from typing import Any, Callable

from ..errors import ProfileWriteError

__all__ = ["atomic_write", "append_text", "folder_problem"]


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


def folder_problem(path: str | os.PathLike) -> str | None:
    """Why no file can be made at ``path`` for want of its folder, in words (what the path
    names, what to do), or None where its folder is one: a part of the path that is a file, not
    a folder (``afile/x.json``), or a folder that does not exist."""
    directory = os.path.dirname(os.path.realpath(os.fspath(path)))
    if os.path.isdir(directory):
        return None
    above = directory
    while above and not os.path.lexists(above):
        parent = os.path.dirname(above)
        if parent == above:
            break
        above = parent
    if os.path.lexists(above) and not os.path.isdir(above):
        return (f"{above!r} is a file, not a folder, so nothing can be written under it; give a path in a folder "
                f"(or move that file away and make the folder)")
    return f"the folder {directory!r} does not exist; make it first (mkdir -p {shlex.quote(directory)}) or give a path in an existing folder"


def _write_error(path: str, exc: OSError) -> ProfileWriteError:
    """The error of a failed write, for a caller in Python: what was being saved is still in its
    hands (the command line, whose process ends, words its own: ``path`` and ``reason`` are kept)."""
    reason = exc.strerror or str(exc)
    if isinstance(exc, (FileNotFoundError, NotADirectoryError)):
        reason = folder_problem(path) or reason  # "Not a directory" names no part of the path
    error = ProfileWriteError(
        f"cannot write {path!r}: {reason}. Nothing was lost: the profile is still "
        f"in memory; call the method again with a writable path."
    )
    error.path = path  # type: ignore[attr-defined]
    error.reason = reason  # type: ignore[attr-defined]
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


def append_text(path: str | os.PathLike, text: str) -> bool:
    """Add ``text`` at the end of the file at ``path`` (a CI step summary that earlier steps
    wrote to), after a blank line; a file that does not exist or is empty is written whole
    (:func:`atomic_write`). Returns whether it appended."""
    path = os.fspath(path)
    if path == "-" or not os.path.isfile(path) or os.path.getsize(path) == 0:
        atomic_write(path, lambda handle: handle.write(text))
        return False
    try:
        with open(path, "a", encoding="utf-8") as handle:
            handle.write("\n" + text)
    except OSError as exc:
        raise _write_error(path, exc) from exc
    return True
