"""The ``fxprof`` command line: :func:`main` (see :mod:`fxprof.cli.app`)."""

from .app import main

__all__ = ["main"]
