"""Where :class:`~fxprof.core.profile.Profile`'s conveniences find the code that does their work.

``summary``, ``save``, ``to_csv``, ``to_html``, ``to_chrome_trace`` and the notebook display
are methods on the object users get, but the views and writers that do the work live in layers
above ``core`` (``fxprof.views``, ``fxprof.io``). ``core`` imports nothing above it: the package
itself (``fxprof/__init__.py``, above every layer) hands this module a loader of
:mod:`fxprof.views.conveniences` when ``fxprof`` is imported, which happens before any
``fxprof.*`` module can be. The loader imports on first use, so ``import fxprof`` stays cheap.
"""

from __future__ import annotations

from typing import Any, Callable

_loader: Callable[[], Any] | None = None


def provide(loader: Callable[[], Any]) -> None:
    """Set the function that returns the module of conveniences (called by ``fxprof/__init__``)."""
    global _loader
    _loader = loader


def conveniences() -> Any:
    """The module that renders, writes and displays a profile (:mod:`fxprof.views.conveniences`)."""
    if _loader is None:  # only when fxprof/__init__.py did not run: never through a normal import
        raise RuntimeError("fxprof's views and writers were not provided to fxprof.core: import fxprof first")
    return _loader()
