"""The machinery of :func:`fxprof.session` (the public function, its checks and its docs are
:mod:`fxprof.session`, ``fxprof/session.py``): :class:`Session` instruments the user's model in
place, applies each step's action of the schedule (:mod:`.schedule`), times the active steps'
runs, makes each cycle's :class:`~fxprof.core.profile.Profile` (:mod:`.cycle`) with the warm-up
steps' memory (:mod:`.memory`), and puts the model's ``forward`` back on exit.
"""

from __future__ import annotations

import threading
from typing import Any, Callable

import torch
from torch import nn

from ...core.profile import Profile
from ...core.recording import Recording
from ...errors import add_note
from ..capture.captures import Capture, DynamoCapture, specialised_inputs
from ..common.state import OPEN_SESSIONS, PROFILING, refuse_inside_session
from ..device.cupti import refuse_teardown
from ..distributed.ranks import gather, is_initialized
from ..eager.fidelity import EagerSteps
from ..eager.loop import build_profile, check_devices, describe_run
from ..eager.plan import ProfilePlan
from ..parallel.layouts import refuse
from ..passes.environment import environment
from ..program import COMPILED_BACKWARD, capture_program, wants_compiled
from ..timing.contention import ContentionMeter, RunWatch
from ..timing.recorder import Recorder
from ..timing.timers import Timer, resolve_timer, tensor_devices
from .cycle import (
    Captures,
    Cycle,
    backward_words,
    capture_words,
    numerics_settings,
    plain_words,
    run_environment,
    untimed_cycle,
)
from .forward import signed_like
from .memory import StepMemory, rebind_interpreters
from .schedule import (
    Schedule,
    describe_inputs,
    describe_schedule,
    nothing_timed,
    schedule_action,
    schedule_words,
    signature_of,
    tree_key,
)

__all__ = ["Session"]


class Session:
    """fxprof inside the user's loop; see :mod:`fxprof.session`. Made by :func:`fxprof.session`.

    Attributes:
        model: the user's model, instrumented while the session is open (call it as usual).
        profiles: every Profile handed to ``on_ready`` so far, in order.
        step_num: the current step (0-based; ``step()`` moves it on).
        captures: the graphs captured or compiled so far, recompiles included (``meta["captures"]``).
        defer_builds: set True to build a cycle that another follows at the very next step once
            that run of cycles ends (a compiled model's cycles, without ``on_ready``), not between
            them, where it slows the next cycle's first steps. Its runs, steps, signatures and
            captures are its own; the model's and the machine's facts in its meta (dtype, device,
            threads, mode, load at the end) are read when it is built: a loop that changes them in
            the cycles that follow finds the new ones there (``fxprof.generate`` changes none).
    """

    def __init__(self, model: nn.Module, schedule: Callable[[int], Any] | None = None,
                 on_ready: Callable[[Profile], Any] | None = None, capture: str = "auto", timer: str | Timer = "auto",
                 backward: bool = False, name: str | None = None, gather: bool = True, leaf_modules: Any = (),
                 trace_into: Any = (), memory: bool = True):
        # the keywords were checked by fxprof.session (fxprof/session.py), the one way to make a Session
        plan = schedule if schedule is not None else Schedule()
        #: a torch.compile'd model: the compiled program's kernels are timed (fxprof.measure.compiled.in_session)
        self._compiled = wants_compiled(model, None, capture, model.__dict__.get("forward"))
        if self._compiled and backward:
            raise ValueError(COMPILED_BACKWARD)
        if self._compiled and any(t.is_cuda for t in [*model.parameters(), *model.buffers()]):
            refuse_teardown("a session of a compiled model on a GPU")  # here, not steps later in the loop
        if not self._compiled:  # what a parallel layout cannot be profiled with: said here, not steps later in the loop
            refuse(model, capture, backward=bool(backward), session=True)
        self.model = model
        self.schedule = plan
        self.on_ready = on_ready
        #: the options a session shares with fxprof.profile, as the one plan object every mode takes
        #: (fxprof.measure.eager.plan); checked above for what a session cannot do
        self.plan = ProfilePlan(capture=capture, timer=timer, backward=bool(backward), leaf_modules=leaf_modules,
                                trace_into=trace_into, memory=bool(memory),
                                name=name or type(getattr(model, "_orig_mod", model) if self._compiled else model).__name__)
        self.gather = gather
        self.profiles: list[Profile] = []
        #: build a cycle that another follows at the next step when that run of cycles ends, not
        #: between the two (making a profile is milliseconds of Python, and a step after it runs in
        #: cold caches: a compiled decode step right after fxprof.generate's prefill cycle read
        #: 1 ms against 0.4 ms); only without ``on_ready`` and ``torch.distributed``, and only where
        #: the capture can take its runs apart from the next cycle's (a compiled program's marks)
        self.defer_builds = False
        self._deferred: list[Callable[[], Profile]] = []
        self.step_num = 0
        self._action = "none"
        self._open = False
        self._inside = threading.local()  # re-entry: tracing and dynamo call the model's forward
        self._thread: int | None = None  # the thread that opened the session (its loop's)
        self._captures: dict[Any, Capture] = {}  # (model.training, call pattern) -> its capture (None: backward=True)
        self._trees: dict[int, tuple] = {}  # id(graph capture) -> the module tree it was made from
        self._retired: list[Capture] = []  # captures the model's tree no longer matched
        self._recaptures = 0
        self._signatures: dict[tuple, int] = {}
        self._signature_info: list[dict[str, Any]] = []
        self._described: list[list[str]] = []  # each signature's inputs, described at its first call
        self._signature_keys: list[tuple] = []
        self._warm: set[int] = set()  # signatures that ran through the interpreter once
        self._timer: Timer | None = None
        # one recorder for the whole session, so that interpreters (their compiled plans) are made
        # once; its recording is the cycle's in timed runs and a scratch one in untimed runs
        self._recorder: Recorder | None = None
        self._cycle: Cycle | None = None
        self._cycles = 0
        self._pending: tuple | None = None  # the last timed run, until it has ended
        self._run_step = -1  # the step the last instrumented forward ran in
        self._calls = 0  # model calls while the session was open
        self._said_empty = False  # a cycle that timed nothing was warned about
        self._handed_on = 0  # cycles gathered onto rank 0 from this rank (their profiles are there, not here)
        self._mode: tuple = ()  # the numerics of the last timed run (autocast, matmul precision, grad)
        self._saved_forward: Any = None
        self._input_devices: set = set()
        self._had_forward = False
        self._own = EagerSteps()  # the eager steps' own forward times, per input signature
        self._meter = ContentionMeter()  # what the timed runs lose to other processes
        self._watch = RunWatch(self._meter)  # read at each timed run's first and last mark (recorder.watch)
        self._last_action: str | None = None  # the action of the step of the last forward (a cold eager call follows another)
        self._memory = StepMemory(model, self.plan.memory)  # memory of the warm-up steps (fxprof.measure.session.memory)

    # ------------------------------------------------------------ open / close
    def __enter__(self) -> "Session":
        if self._open:
            raise RuntimeError("this fxprof session is already open")
        refuse_inside_session(self.model, "fxprof.session")
        if not PROFILING.acquire(blocking=False):
            raise RuntimeError("another fxprof profile or session is running in another thread of this process; "
                               "profile one thing at a time (the timings would include each other's work)")
        model = self.model
        self._had_forward = "forward" in model.__dict__
        self._saved_forward = model.__dict__.get("forward")
        self._eager = model.forward  # what the model runs when the session is not timing it
        self._thread = threading.get_ident()  # the loop's thread: the only one whose calls are profiled
        # one function, to tell it from a forward the loop sets, with the model's forward's signature:
        # Hugging Face's generate reads that signature to choose the inputs it passes (a bare (*args,
        # **kwargs) made OPT's compiled forward get a 4-d tensor for its hidden states)
        self._hook = signed_like(self._forward, self._eager)
        model.forward = self._hook  # instance attribute: nn.Module.__call__ (and its hooks) calls it
        try:
            self._enter_step(0)  # a schedule that fails at step 0 leaves nothing behind
        except BaseException:
            self._restore()
            PROFILING.release()
            raise
        self._open = True
        OPEN_SESSIONS[id(model)] = (self.plan.name, model)
        return self

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        try:
            self._memory.abort()
            self._restore()
            self._settle(force=exc is None, abort=exc is not None)
            if self._cycle is not None and self._cycle.runs:
                self._finish(incomplete=True, error=exc)
            self._cycle = None
            self._built()
            if exc is None and not self.profiles and not self._said_empty and not self._handed_on:
                import warnings

                warnings.warn(nothing_timed(self.schedule, self.plan.name, self._calls, self.step_num), stacklevel=2)
        finally:
            for captured in self._all_captures():
                captured.close()
            self._open = False
            OPEN_SESSIONS.pop(id(self.model), None)
            PROFILING.release()

    def _restore(self) -> None:
        model = self.model
        if model.__dict__.get("forward") is not self._hook:
            # the loop set a forward of its own during the session (a wrapper, which calls ours): it stays the
            # user's; ours now runs the model's own forward, eagerly
            import warnings

            warnings.warn(f"fxprof: the loop set {self.plan.name}.forward during the session; fxprof left it as it is (it "
                          f"runs the forward it wrapped, eagerly, once the session is over)", stacklevel=4)
            return
        if self._had_forward:
            model.forward = self._saved_forward
        else:
            model.__dict__.pop("forward", None)

    # ------------------------------------------------------------------- steps
    def step(self) -> None:
        """End the current step: finish the cycle if it was its last active step, then apply
        the next step's action."""
        if not self._open:
            raise RuntimeError("step() called outside the session's with-block")
        self._settle(force=True)
        self._memory.close()
        ending = self._action
        next_action = schedule_action(self.schedule, self.step_num + 1)
        if self._cycle is not None and ending.startswith("active"):
            self._cycle.active_steps += 1
            if ending == "active_last" or not next_action.startswith("active"):
                self._finish(incomplete=False, follows=next_action.startswith("active"))
        self.step_num += 1
        self._enter_step(self.step_num, next_action)

    def _enter_step(self, step: int, action: str | None = None) -> None:
        self._action = action if action is not None else schedule_action(self.schedule, step)
        if self._action.startswith("active") and self._cycle is None:
            self._cycle = Cycle(self._cycles, step)
            self._cycle.window_captures = self._capture_count()
            self._cycle.window = self._meter.start_window()  # with the threads the loop has started by now
            self._watch.track(self._cycle.recording)
            self._cycle.memory = self._memory.take()
        elif self._action == "warmup":
            self._memory.open(step)

    # ------------------------------------------------------------- the forward
    def _forward(self, *args: Any, **kwargs: Any) -> Any:
        if threading.get_ident() != self._thread:  # another thread's call (a server, an evaluator): its own, eagerly
            return self._eager(*args, **kwargs)
        self._calls += 1
        action = self._action
        if not self._open or getattr(self._inside, "on", False):
            return self._eager(*args, **kwargs)
        cold = self._last_action != "none"  # the loop's first forward, or the first after instrumented ones
        self._last_action = action
        if action == "none":  # the model's own forward: timed as it runs (fxprof.measure.eager.fidelity)
            # keyed as the timed runs' signatures are (inputs, mode and numerics), to be set beside them
            return self._own.call(self._eager, args, kwargs, signature_of(args, kwargs, self.model.training) + (numerics_settings(),),
                                  cold=cold, meter=self._meter)
        self._inside.on = True
        try:
            return self._instrumented(action, args, kwargs)
        except Exception as exc:  # the model's own error: the loop may catch it; the cycle says why it timed nothing
            if self._cycle is not None and action.startswith("active"):
                self._cycle.raised.append(type(exc).__name__)
            raise
        finally:
            self._inside.on = False

    def _instrumented(self, action: str, args: tuple, kwargs: dict) -> Any:
        if self.plan.backward and not (torch.is_grad_enabled() and self.model.training):
            # a validation pass (eval, no_grad) inside a training session: not a training step, no backward
            # comes; it runs as the eager model, untimed, and leaves an open run as it is
            if self._cycle is not None:
                self._cycle.eager_calls += 1
            return self._eager(*args, **kwargs)
        numerics = numerics_settings()  # an autocast or no_grad block runs other kernels: a signature of its own
        key = signature_of(args, kwargs, self.model.training) + (numerics,)
        sig = self._signatures.get(key)
        if sig is None:
            sig = self._signatures[key] = len(self._signatures)
            self._signature_keys.append(key)
            modes = ([f"autocast {numerics[0]}"] if numerics[0] != "off" else []) + ([] if numerics[2] else ["grad off"])
            self._described.append(describe_inputs(args, kwargs))  # once: what a run of this signature was given
            self._signature_info.append({"id": sig, "inputs": self._described[sig] + modes,
                                         "training": self.model.training, "first_step": self.step_num,
                                         "autocast": numerics[0], "grad": numerics[2]})
        captured = self._capture_for(args, kwargs)
        cycle = self._cycle
        timed = action.startswith("active") and cycle is not None and sig in self._warm
        pending = self._pending
        # several forwards of one step before its backward (siamese, contrastive, teacher-student): one run
        join = (getattr(captured, "run_open", False) and self._run_step == self.step_num
                and (pending is not None and pending[0] is captured and pending[1] is cycle if timed else pending is None))
        if not join:
            self._settle(force=True)  # a forward whose backward never came is over
        self._run_step = self.step_num
        call_args, call_kwargs = captured.bind(args, kwargs)
        if self._timer is None:
            inputs = call_args + tuple(call_kwargs.values())
            check_devices(list(self.model.parameters()) + list(self.model.buffers()), inputs)
            self._timer = resolve_timer(self.plan.timer, self.model, inputs)
            self._recorder = Recorder(self._timer)
            self._recorder.watch = self._watch
            self._input_devices = tensor_devices(inputs)  # the device of a model without parameters
        recorder = self._recorder
        assert recorder is not None
        if not timed:
            # warm-up, or the first call of a signature: through the interpreter, untimed
            if action.startswith("active") and cycle is not None:
                cycle.untimed_first.append({"step": self.step_num, "signature": sig})
            if not join:
                recorder.recording = Recording()  # thrown away
                if self._memory.recording and not self.plan.backward and not self._compiled:  # every node in a range
                    recorder = self._memory.recorder(self._timer)
                    recorder.recording = Recording()
            out = captured.run(recorder, call_args, call_kwargs, join=True) if join else captured.run(recorder, call_args, call_kwargs)
            self._plain(captured, cycle)
            if recorder is not self._recorder:  # the timed runs find their interpreters ready, as after any warm-up
                rebind_interpreters(captured, self._recorder)
            self._pending = None
            self._warm.add(sig)
            return out
        assert cycle is not None
        if captured not in cycle.captures:
            cycle.captures.append(captured)
        if join:  # what the run lost is read at its first and last mark (recorder.watch)
            out = captured.run(recorder, call_args, call_kwargs, join=True)  # type: ignore[call-arg]
            self._settle()
            return out
        before = cycle.recording.runs
        if before == 0 and isinstance(captured, DynamoCapture):
            captured.start_timing()
        recorder.recording = cycle.recording
        self._mode = numerics
        out = captured.run_timed(recorder, call_args, call_kwargs)
        self._plain(captured, cycle)
        # a training capture's run ends with the loop's backward: it is counted when it has
        self._pending = (captured, cycle, before, self.step_num, sig, self._described[sig])
        self._settle()
        return out

    def _plain(self, captured: Capture, cycle: Cycle | None) -> None:
        """Count a call that ran as the model's own Python, no graph (dynamo skipped the forward):
        it kept no run, and the cycle says why."""
        if getattr(captured, "ran_no_graph", False) and cycle is not None:
            cycle.plain_calls += 1

    def _settle(self, force: bool = False, abort: bool = False) -> None:
        """Count the last timed run once it has ended; with ``force``, end a run still waiting
        for a backward (the step is over); with ``abort``, drop it (the loop failed)."""
        pending = self._pending
        if force or abort:  # an untimed run still waiting for its backward: nothing to keep
            for other in self._all_captures():
                if getattr(other, "run_open", False) and (pending is None or other is not pending[0]):
                    other.abort()  # type: ignore[attr-defined]
        if pending is None:
            return
        captured, cycle, before, step, sig, inputs = pending
        if getattr(captured, "run_open", False):
            if not (force or abort):
                return
            captured.abort() if abort else captured.settle()  # type: ignore[attr-defined]
        self._pending = None
        if cycle.recording.runs > before:
            counts = getattr(getattr(captured, "session", None), "last_counts", None)
            if self.plan.backward and counts is not None:
                cycle.run_graphs.append(tuple(counts))
            cycle.run_steps.append(step)
            cycle.run_modes.append(self._mode)
            cycle.run_signatures.append(sig)
            cycle.last_inputs = inputs

    def _capture_for(self, args: tuple, kwargs: dict) -> Capture:
        """The capture that runs what the eager model would run for this call, made on first
        use. Symbolic tracing bakes ``self.training``, the module tree and the call pattern
        (which optional inputs are None or left out, bool flags) into its graph, so graphs are
        kept per mode and pattern, and made again when the loop changed the module tree
        (replaced, added or removed a module, parameter or buffer); dynamo and AOTAutograd
        follow such changes themselves (their guards recompile)."""
        mode = self.model.training
        if self._compiled or self.plan.backward:  # one program: dynamo guards on modes, shapes and the module tree
            captured = self._captures.get(None)
            if captured is None:
                captured = self._captures[None] = self._program(args, kwargs)
            return captured
        pattern = tuple(sorted((k, repr(v)) for k, v in specialised_inputs(self.model, args, kwargs).items()))
        key = (mode, pattern)
        captured = self._captures.get(key)
        if captured is None:
            captured = next((c for (m, _), c in self._captures.items() if m == mode and c.kind == "dynamo"), None)
        if captured is not None and captured.kind != "dynamo":
            tree = tree_key(self.model)
            if self._trees.get(id(captured)) != tree:
                self._retire(captured, key)
                self._recaptures += 1
                import warnings

                warnings.warn(f"fxprof: the loop changed {self.plan.name}'s modules, parameters or buffers at step {self.step_num} "
                              f"(replaced, added or removed one): the session captured the model again, so its steps run "
                              f"what the eager model runs now", stacklevel=6)
                captured = None
        if captured is None:
            # the graph runs inside the model's own __call__ (forward is ours), so its hooks still run
            captured = self._program(args, kwargs)
            if captured.kind != "dynamo":
                self._trees[id(captured)] = tree_key(self.model)
        self._captures[key] = captured
        return captured

    def _program(self, args: tuple, kwargs: dict) -> Capture:
        """The program this call runs, from the one capture entry (fxprof.measure.program); the
        graph runs inside the model's own __call__ (forward is ours), so its hooks still run."""
        captured = capture_program(self.model, args, kwargs, capture=self.plan.capture, backward=self.plan.backward,
                                   leaf_modules=self.plan.leaf_modules, trace_into=self.plan.trace_into,
                                   compile=None if self._compiled else False, loop=True, forward=self._eager)
        follow = getattr(captured, "follow", None)
        if follow is not None:  # a capture whose runs begin before the forward (FSDP2's root all-gather): which steps are ours
            follow(lambda: self._open and self._action != "none")
        return captured

    def _retire(self, captured: Capture, key: Any) -> None:
        """A capture the model no longer matches: its keys go; it is closed once no cycle holds it."""
        for k in [k for k, c in self._captures.items() if c is captured]:
            del self._captures[k]
        self._trees.pop(id(captured), None)
        self._retired.append(captured)

    def _all_captures(self) -> list[Capture]:
        """Every capture made so far, each once."""
        seen: dict[int, Capture] = {}
        for c in [*self._captures.values(), *self._retired]:
            seen.setdefault(id(c), c)
        return list(seen.values())

    # ------------------------------------------------------------------ cycles
    def _finish(self, incomplete: bool, error: BaseException | None = None, follows: bool = False) -> None:
        cycle, self._cycle = self._cycle, None
        if cycle is None:
            self._built()
            return
        cycle.window_lost = self._meter.window_since(cycle.window)
        self._cycles += 1
        if follows and self.defer_builds and error is None and self.on_ready is None and not is_initialized():
            later = self._profile(cycle, incomplete, error, later=True)
            if later is not None:
                self._deferred.append(later)  # type: ignore[arg-type]
                return
        self._built()
        if not cycle.runs:
            if (cycle.untimed_first or cycle.raised or cycle.plain_calls) and not incomplete:
                import warnings

                self._said_empty = True
                warnings.warn(untimed_cycle(cycle, self.step_num), stacklevel=3)
            return
        profile = self._profile(cycle, incomplete, error)
        if is_initialized() and self.gather and error is None:
            # a collective: every rank reaches it at the same step. A rank that failed does not
            # (the others would wait for it forever): it keeps its own runs instead
            profile = gather(profile)
            if profile is None:  # not rank 0: the gathered profile is there
                self._handed_on += 1
                return
        self.profiles.append(profile)
        if self.on_ready is not None:
            if error is None:
                self.on_ready(profile)
                return
            try:
                self.on_ready(profile)
            except Exception as failed:  # never hide the loop's own error
                add_note(error, f"fxprof: on_ready failed on the incomplete profile ({type(failed).__name__}: {failed}); "
                                f"it is in the session's .profiles")
        if error is not None:
            add_note(error, f"fxprof: {cycle.runs} timed run(s) of cycle {cycle.number} completed before this; the "
                            f"profile (meta['incomplete'] = True) went to on_ready and is in the session's .profiles")

    def _built(self) -> None:
        """The deferred cycles' profiles made, in their order (see :attr:`defer_builds`)."""
        deferred, self._deferred = self._deferred, []
        self.profiles.extend(build() for build in deferred)

    def _profile(self, cycle: Cycle, incomplete: bool, error: BaseException | None, later: bool = False) -> Any:
        """The cycle's profile; with ``later``, the function that makes it (None where the cycle
        cannot be built later: it is then built now). A cycle built later has its runs taken
        apart and what the next cycle changes (the step, the captures and signatures so far) read
        now; its meta, a millisecond of Python over the model's parameters and the machine, is
        made with the profile, not between the cycle and the next one's first step."""
        if later and not (cycle.runs and cycle.captures and cycle.captures[0].can_build_later()):
            return None
        assert self._recorder is not None and self._timer is not None
        first = cycle.captures[0]
        count, signatures = self._capture_count(), len(self._signatures)
        now = (self.step_num, count, signatures, capture_words(self._all_captures(), signatures, count, self._recaptures))
        if later:
            finish = first.build_later(self.plan.name)
            return lambda: finish(self._cycle_meta(cycle, incomplete, error, now))
        meta = self._cycle_meta(cycle, incomplete, error, now)
        own = first.build(meta, self.plan.name)  # a compiled program's kernels, timed by the capture
        if own is not None:
            return own
        self._recorder.recording = cycle.recording
        return build_profile(Captures(cycle.captures), self._recorder, meta, cycle.memory[0])

    def _cycle_meta(self, cycle: Cycle, incomplete: bool, error: BaseException | None, now: tuple) -> dict[str, Any]:
        """The cycle's ``meta``; ``now``: (its last step, the captures and signatures so far, what
        was captured in words), read at the cycle's end."""
        assert self._timer is not None
        step, capture_count, signatures_seen, captured_words = now
        recording = cycle.recording
        held = list(self.model.parameters()) + list(self.model.buffers())
        devices = tensor_devices(held) or self._input_devices
        meta = describe_run(self.model, self.plan.name, self._timer, devices, (), self._warmup_steps(), recording.runs,
                            not any(m[2] for m in cycle.run_modes), cycle.captures[0])
        used = sorted(set(cycle.run_signatures))
        meta.update(
            env=run_environment(environment(devices), cycle),
            inputs=cycle.last_inputs,
            session=True,
            step=step,
            cycle=cycle.number,
            first_step=cycle.first_step,
            schedule=describe_schedule(self.schedule),
            run_steps=list(cycle.run_steps),
            run_signatures=list(cycle.run_signatures),
            signatures=[{**self._signature_info[s], "runs": cycle.run_signatures.count(s)} for s in used],
            signatures_seen=signatures_seen,
            captures=capture_count,
            untimed_first_batches=list(cycle.untimed_first),
        )
        steps = ", ".join(map(str, cycle.run_steps))
        notes = [f"session cycle {cycle.number}: steps {cycle.first_step}-{step} of the user's loop "
                 f"({schedule_words(self.schedule)}); timed runs at step(s) {steps}", captured_words]
        if cycle.untimed_first:
            steps = ", ".join(str(u["step"]) for u in cycle.untimed_first)
            notes.append(f"{len(cycle.untimed_first)} active step(s) ({steps}) had a batch of an input signature never run "
                         f"before: run untimed (captured/warmed up), timed from that signature's next occurrence")
        if cycle.plain_calls:
            notes.append(plain_words(cycle.plain_calls))
        if self.plan.backward:
            notes.append(backward_words(cycle))
        else:
            notes.append("a session times the forward only: backward runs in autograd, eagerly, and is not in this "
                         "table (backward=True times it)")
        if incomplete:
            cause = f"{type(error).__name__} at step {step}" if error is not None else f"the loop ended at step {step}"
            notes.append(f"incomplete cycle: {cause}; {recording.runs} run(s) of {cycle.active_steps + 1 if error is not None else cycle.active_steps} "
                         f"active step(s) kept")
            meta.update(incomplete=True, requested_iters=self._active_steps())
        memory_records, memory_meta = cycle.memory
        meta.update({k: v for k, v in memory_meta.items() if k != "notes"})
        meta["notes"] = notes + memory_meta.get("notes", []) + meta.get("notes", [])
        if self.plan.backward:  # the eager steps time a forward; this cycle's runs hold forward and backward
            meta["notes"] = meta["notes"] + [
                "no fidelity line: a training session's timed runs hold the forward and the backward, and the schedule's "
                "eager steps time the model's forward alone (the backward runs after the forward returns), so their ratio "
                "would compare different work"]
        else:
            meta = self._own.describe(meta, [self._signature_keys[s] for s in used])
        # the cycle's window, where it held only the loop's steps: not a capture or compile (its
        # workers are processes of this run), nor what the with-block did after an incomplete cycle
        window = (cycle.window_lost if not (incomplete or cycle.untimed_first or capture_count != cycle.window_captures)
                  else (float("nan"), float("nan")))
        return self._meter.describe(meta, lost_ms=self._watch.lost_of(recording),
                                    own_lost_ms=self._own.lost_of([self._signature_keys[s] for s in used]),
                                    window_lost_ms=round(window[0], 6), window_ms=round(window[1], 6))

    @property
    def captures(self) -> int:
        """Every graph captured or compiled so far (recompiles included), as ``meta["captures"]`` counts them."""
        return self._capture_count()

    def _capture_count(self) -> int:
        count = 0
        for captured in self._all_captures():
            if isinstance(captured, DynamoCapture):
                count += len(captured.session.labels)  # every graph dynamo compiled (recompiles too)
            elif captured.kind == "compiled":
                count += len(captured.graphs.order)  # type: ignore[attr-defined]  # every graph inductor compiled
            elif captured.kind == "aot":
                count += len(captured.session.pairs)  # type: ignore[attr-defined]  # forward/backward pairs
            else:
                count += 1
        return count

    def _warmup_steps(self) -> int:
        return int(getattr(self.schedule, "warmup", 0))

    def _active_steps(self) -> int:
        return int(getattr(self.schedule, "active", 0))

    def __repr__(self) -> str:
        return (f"<fxprof.Session of {self.plan.name}: step {self.step_num} ({self._action}), {len(self.profiles)} profile(s), "
                f"{'open' if self._open else 'closed'}>")

