"""What both framework callbacks share: one :func:`fxprof.session` over the framework's training
steps (:class:`TrainingProfiler`), the schedule they default to, where each profile is saved (JSON
and the HTML report), the few figures they log, and which rank saves under ``torch.distributed``.

The framework adapters (:mod:`.transformers`, :mod:`.lightning`) only say *when* a step begins and
ends and where the framework wants files and figures to go; everything about profiling is here,
through fxprof's public functions (``fxprof.session``, ``fxprof.schedule``, ``Profile.save``,
``Profile.to_html``)."""

from __future__ import annotations

import os
import statistics
import time
import warnings
from typing import Any, Callable

from ..core.profile import Profile
from ..measure.distributed.ranks import is_initialized, this_rank
from ..session import schedule as make_schedule
from ..session import session as open_session

__all__ = ["DEFAULT_SCHEDULE", "TrainingProfiler", "figures", "missing_framework"]

#: the schedule a callback uses when given none: four steps at full speed (the model's own forward,
#: timed as it runs: the fidelity line), two warm-up steps (capture, compile), three timed steps, once
DEFAULT_SCHEDULE = {"wait": 4, "warmup": 2, "active": 3, "repeat": 1}


def missing_framework(module: str, extra: str, what: str) -> ImportError:
    """The one line a callback raises where its framework is not installed."""
    return ImportError(f"{what} needs {module}, which is not installed: pip install 'fxprof[{extra}]' (or pip install {module})")


class TrainingProfiler:
    """One :func:`fxprof.session` over a framework's training steps.

    ``open(model)`` at the start of training, ``step()`` at the end of every optimizer step (the
    framework's step, all its accumulation micro-steps included), ``close()`` at the end (also after
    an error: the cycle under way is kept, marked incomplete). Every profile goes to
    :attr:`profiles`, is saved under :attr:`folder` (where rank 0 writes: JSON, and the HTML report
    where plotly is installed) and is handed to ``on_profile`` (the adapter logs its figures there).

    ``schedule``: a ``fxprof.schedule(...)`` (default :data:`DEFAULT_SCHEDULE`); ``session_options``:
    ``fxprof.session``'s keywords (``backward``, ``capture``, ``timer``, ``memory``, ``name``...).

    Work of the step outside the model (the optimizer's step, the learning-rate scheduler) is timed
    by ``begin_phase(name)`` and ``end_phase(name)`` where the framework has hooks around it: wall
    clock, in the schedule's warm-up and active steps only (two clock reads a phase; nothing in its
    eager steps); :meth:`phase_ms` gives a profile's median per phase over the steps of its runs,
    and :meth:`figures` adds them to :func:`figures` as ``fxprof/<name>_ms``."""

    def __init__(self, schedule: Any = None, *, save: bool = True, html: bool = True, **session_options: Any):
        self.schedule = schedule if schedule is not None else make_schedule(**DEFAULT_SCHEDULE)
        self.session_options = session_options
        self.save = save
        self.html = html
        self.profiles: list[Profile] = []
        self.paths: list[str] = []
        self.folder: str | None = None
        self.on_profile: Callable[[Profile], Any] | None = None
        #: called with each profile before it is saved (an adapter adds what only it knows to its notes)
        self.annotate: Callable[[Profile], Any] | None = None
        self._session: Any = None
        self._phase_start: dict[str, tuple[int, float]] = {}  # name -> (step, perf_counter at begin)
        self._phases: dict[int, dict[str, float]] = {}  # step -> name -> ms (warm-up and active steps only)
        self._profile_phases: dict[int, dict[str, float]] = {}  # id(profile) of self.profiles -> its phase_ms

    @property
    def is_open(self) -> bool:
        return self._session is not None

    @property
    def step_num(self) -> int:
        return self._session.step_num if self._session is not None else -1

    def open(self, model: Any, folder: str | None) -> None:
        if self._session is not None:
            raise RuntimeError("fxprof: the callback's session is already open (training began twice without ending)")
        self.folder = folder
        session = open_session(model, schedule=self.schedule, on_ready=self._ready, **self.session_options)
        session.__enter__()
        self._session = session

    def step(self) -> None:
        """End an optimizer step. Once the schedule's last cycle is over, the session is closed: the
        rest of the training runs the model's own forward with nothing in front of it (a session's
        eager steps time each forward, for the fidelity line, which no later profile would use)."""
        if self._session is not None:
            self._session.step()
            if schedule_over(self.schedule, self._session.step_num):
                self.close()

    def begin_phase(self, name: str) -> None:
        """The framework is about to run ``name`` (its optimizer step, its scheduler) in this step."""
        if self._session is None or _is_none(self.schedule(self._session.step_num)):
            return
        self._phase_start[name] = (self._session.step_num, time.perf_counter())

    def end_phase(self, name: str) -> None:
        """``name`` is over: its wall time is kept for this step (where :meth:`begin_phase` began it)."""
        began = self._phase_start.pop(name, None)
        if began is None or self._session is None or began[0] != self._session.step_num:
            return
        self._phases.setdefault(began[0], {})[name] = (time.perf_counter() - began[1]) * 1e3

    def phase_ms(self, profile: Profile) -> dict[str, float]:
        """The median wall time (ms) of each timed phase over the steps of ``profile``'s runs."""
        if id(profile) in self._profile_phases:
            return dict(self._profile_phases[id(profile)])
        steps = sorted(set(profile.meta.get("run_steps") or []))
        per: dict[str, list[float]] = {}
        for step in steps:
            for name, ms in self._phases.get(step, {}).items():
                per.setdefault(name, []).append(ms)
        return {name: sorted(v)[len(v) // 2] for name, v in per.items()}

    def figures(self, profile: Profile, top: int = 3) -> dict[str, float]:
        """:func:`figures` of ``profile``, with the median of each phase timed around its steps."""
        out = figures(profile, top)
        for name, ms in self.phase_ms(profile).items():
            out[f"fxprof/{name}_ms"] = round(float(ms), 6)
        return out

    def close(self, error: BaseException | None = None) -> None:
        session, self._session = self._session, None
        if session is None:
            return
        steps = session.step_num
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            session.__exit__(type(error) if error is not None else None, error, None)
        if error is not None:
            return  # the loop's own error is what the user needs to see
        for warning in caught:
            if NO_TIMED_STEP in str(warning.message) and not self.profiles and NEVER_CALLED not in str(warning.message):
                # the session's words tell a loop's author to call s.step(); here the framework steps it
                warnings.warn(training_too_short(self.schedule, steps), stacklevel=2)
            else:
                warnings.warn_explicit(warning.message, warning.category, warning.filename, warning.lineno)

    def _ready(self, profile: Profile) -> None:
        self.profiles.append(profile)
        self._profile_phases[id(profile)] = self.phase_ms(profile)
        last = max(profile.meta.get("run_steps") or [profile.meta.get("step", 0)])
        self._phases = {step: v for step, v in self._phases.items() if step > last}  # kept: the next cycles' steps
        if self.annotate is not None:
            self.annotate(profile)
        if self.save and self.folder is not None and (not is_initialized() or this_rank() == 0):
            self.paths.extend(save_profile(profile, self.folder, self.html))
        if self.on_profile is not None:
            self.on_profile(profile)


#: the words of the session's warning when it ends without a timed step (fxprof.measure.session.schedule.nothing_timed)
NO_TIMED_STEP = "ended with no timed step"
#: the words of that warning where the model was never called at all: not a training too short, but a model
#: the framework's step does not call (the adapter names what to instrument instead)
NEVER_CALLED = "the model was never called"


def training_too_short(schedule: Any, steps: int) -> str:
    """The warning of a training that ended before the schedule's first timed step."""
    first = next((step for step in range(steps, steps + 10**5) if str(getattr(schedule(step), "name", schedule(step))).lower()
                  .startswith(("active", "record"))), None)
    where = f"its first timed step is optimizer step {first + 1}" if first is not None else "it has no timed step"
    return (f"fxprof: training ended after {steps} optimizer step(s), before the schedule's first timed step, so no profile "
            f"was made ({where} with {schedule!r}); pass a schedule that fits the training, e.g. "
            f"fxprof.schedule(wait=0, warmup=1, active=2) for 3 steps")


def schedule_over(schedule: Any, step: int) -> bool:
    """Every step from ``step`` on is ``none`` in ``schedule`` (an ``fxprof.schedule`` with ``repeat``
    > 0; a schedule of another kind, or ``repeat=0``, never ends)."""
    fields = ("wait", "warmup", "active", "repeat", "skip_first")
    if not all(isinstance(getattr(schedule, name, None), int) for name in fields) or schedule.repeat <= 0:
        return False
    return step >= schedule.skip_first + schedule.repeat * (schedule.wait + schedule.warmup + schedule.active)


def _is_none(action: Any) -> bool:
    """A schedule's action is ``none`` (fxprof's ``"none"``, torch.profiler's ``ProfilerAction.NONE``)."""
    return str(getattr(action, "name", action)).lower() == "none"


def save_profile(profile: Profile, folder: str, html: bool = True) -> list[str]:
    """``profile`` saved under ``folder`` as ``cycle<N>-step<S>.json`` and, where plotly is
    installed, the HTML report beside it; the paths written."""
    os.makedirs(folder, exist_ok=True)
    stem = os.path.join(folder, f"cycle{profile.meta.get('cycle', 0)}-step{profile.meta.get('step', 0)}")
    profile.save(stem + ".json")
    written = [stem + ".json"]
    if html:
        try:
            import plotly  # noqa: F401
        except ImportError:
            return written
        profile.to_html(stem + ".html")
        written.append(stem + ".html")
    return written


def figures(profile: Profile, top: int = 3) -> dict[str, float]:
    """A few figures of ``profile`` to log through a framework's logger, keyed ``fxprof/...``:
    the median run (ms), the coverage, the time per training phase (forward, backward... in ms,
    where the session timed a training step), and the share (%) of the ``top`` nodes."""
    out: dict[str, float] = {}
    totals = profile.kept_totals()
    if totals:  # the median of the kept runs, as the header's run line and coverage take it
        out["fxprof/run_ms"] = round(float(statistics.median(totals)), 6)
    out["fxprof/coverage"] = round(float(profile.coverage), 4)
    df = profile.df
    if "phase" in df.columns and df["phase"].nunique() > 1:
        for phase, ms in df.groupby("phase")["median_ms"].sum().items():
            out[f"fxprof/{phase}_ms"] = round(float(ms), 6)
    if "pct" in df.columns:
        for name, pct in df["pct"].nlargest(top).items():
            out[f"fxprof/top/{name}_pct"] = round(float(pct), 3)
    return out
