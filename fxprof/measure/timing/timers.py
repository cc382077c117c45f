"""Timers: small strategy objects that turn two marks into a duration in milliseconds.

The interpreter calls, for every run::

    timer.begin_run()
    a = timer.mark(); ...node...; b = timer.mark()      # for every node
    timer.end_run()                                      # the one synchronization point
    timer.elapsed_ms(a, b)                               # read after end_run

and reads a host clock (``timer.host_ns()``) around each node as well. Keeping the reading
of durations after ``end_run`` lets the CUDA timer record events on the stream without ever
stalling the host between nodes.

Built-in timers:

``"cpu"``  :class:`CpuTimer`, a monotonic clock (``time.perf_counter_ns``). Right for CPU
           work; on CUDA work it measures only the launch (CUDA is asynchronous).
``"cuda"`` :class:`CudaEventTimer`, CUDA events recorded on the current stream of every
           device the model's tensors are on, around each node, and one synchronize per
           device per run. Measures stream time.
``"sync"`` :class:`SyncTimer`, ``torch.cuda.synchronize()`` before and after every node plus
           the monotonic clock. Slow (it serializes host and device) but simple; used to
           cross-check ``"cuda"``.
``"kernel"`` the CUDA event timer, plus ``torch.profiler`` (CUPTI) around the timed runs and a
           range per node: the CUDA kernel time launched inside each node (the device's busy
           time, without idle gaps) is recorded beside the event time. GPU only.
``"auto"`` ``"cuda"`` when the model's parameters, buffers or inputs are on CUDA, else ``"cpu"``.

Any object with the same methods can be passed as ``timer=`` (tests use a fake clock).
"""

from __future__ import annotations

import time
from typing import Any, Iterable, Sequence

import numpy as np
import torch

from ...errors import TimerUnavailableError
from ...vocab import TIMER_NAMES
from ..common.tree import tensors_in

__all__ = ["Timer", "CpuTimer", "CudaEventTimer", "KernelTimer", "SyncTimer", "TIMER_NAMES", "resolve_timer", "epoch_ns"]



class Timer:
    """Base class and contract of a timer. Durations are in milliseconds."""

    #: name recorded in the profile's metadata
    name: str = "timer"
    #: True when durations are measured on a device stream rather than by the host
    measures_device: bool = False
    #: True when :meth:`mark` reads the same clock as :meth:`host_ns`: one reading serves both
    shares_host_clock: bool = False
    #: True when one mark may end a node and start the next (a CUDA event on the stream: the
    #: node's work is what the stream ran between the two, and host-only work between nodes
    #: enqueues nothing). The interpreter then takes one mark per node boundary, and none for
    #: nodes that launch nothing (:mod:`fxprof.measure.timing.launches`). Host clocks keep two marks
    #: per node: on the CPU, the interpreter's bookkeeping between nodes must stay out of them.
    boundary_marks: bool = False

    def check(self) -> None:
        """Raise :class:`TimerUnavailableError` if this timer cannot run here."""

    def begin_run(self) -> None:
        """Called before the first mark of a run."""

    def mark(self) -> Any:
        """Take a time mark; only :meth:`elapsed_ms` may interpret it."""
        raise NotImplementedError

    def end_run(self) -> None:
        """Called after the last mark of a run; may block until the marks are readable."""

    def elapsed_ms(self, start: Any, end: Any) -> float:
        """Milliseconds between two marks of the run that just ended."""
        raise NotImplementedError

    def elapsed_ms_many(self, starts: Sequence[Any], ends: Sequence[Any]) -> Sequence[float]:
        """:meth:`elapsed_ms` for many pairs (a timer may do it faster than one by one); a list
        or a float array. ``starts``/``ends`` may be int64 arrays (the CPU clock's marks)."""
        return [self.elapsed_ms(a, b) for a, b in zip(starts, ends)]

    #: The host clock, in nanoseconds, used for host time per node (``time.perf_counter_ns``
    #: itself: no Python frame between a node and its reading)
    host_ns: Any = staticmethod(time.perf_counter_ns)

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class CpuTimer(Timer):
    """A monotonic host clock. Right for CPU work only."""

    name = "cpu"
    shares_host_clock = True
    #: ``time.perf_counter_ns`` itself
    mark: Any = staticmethod(time.perf_counter_ns)

    def elapsed_ms(self, start: int, end: int) -> float:
        return (end - start) / 1e6

    def elapsed_ms_many(self, starts: Sequence[int], ends: Sequence[int]) -> np.ndarray:
        return _ns_to_ms(starts, ends)


def _ns_to_ms(starts: Sequence[int], ends: Sequence[int]) -> np.ndarray:
    return (np.asarray(ends, dtype=np.int64) - np.asarray(starts, dtype=np.int64)) / 1e6


def _require_cuda(timer_name: str) -> None:
    if not torch.cuda.is_available() and timer_name == "kernel":
        raise TimerUnavailableError(
            "timer='kernel' attributes CUDA kernel time to nodes with torch.profiler (CUPTI), "
            "but torch.cuda.is_available() is False: on the CPU there are no kernels to "
            "attribute. Use timer='cpu' (or 'auto') on the CPU."
        )
    if not torch.cuda.is_available():
        built = torch.version.cuda or "none (CPU-only build)"
        raise TimerUnavailableError(
            f"timer={timer_name!r} needs a CUDA GPU, but torch.cuda.is_available() is False "
            f"(torch {torch.__version__}, CUDA build: {built}). Use timer='cpu' for CPU work, "
            f"or timer='auto' to choose from where the model's tensors are."
        )


class CudaEventTimer(Timer):
    """CUDA events recorded on the current stream of every watched device; one synchronize
    per device per run.

    Events are pooled and reused across runs, so recording a mark costs one
    ``cudaEventRecord`` per device and no allocation. The elapsed time between two events is
    stream time: when the host falls behind (launch-bound work) it includes the time the GPU
    waited for the host. With several devices (``devices=``), a mark records one event on
    each, and a node's time is the longest of its devices' stream times.
    """

    name = "cuda"
    measures_device = True
    boundary_marks = True

    def __init__(self, device: torch.device | str | int | None = None, devices: Sequence[Any] | None = None):
        watched = [_cuda_device(d) for d in (devices if devices else [device])]
        self.devices: list[torch.device | None] = sorted(set(watched), key=index_key) if devices else watched
        self.device = self.devices[0]
        self._pool: list[Any] = []
        self._next = 0
        self._stream: torch.cuda.Stream | None = None
        self._streams: list[Any] = []
        if len(self.devices) > 1:  # instance attributes: the one-device path stays as short as it is
            self.mark = self._mark_many  # type: ignore[method-assign]
            self.elapsed_ms = self._elapsed_many  # type: ignore[method-assign]
        self._cycles_per_ms: dict[Any, float] = {}
        self._read: dict[tuple[int, int], float] = {}

    def check(self) -> None:
        _require_cuda(self.name)

    def begin_run(self) -> None:
        self._next = 0
        self._read.clear()
        self._streams = [torch.cuda.current_stream(d) for d in self.devices]
        self._stream = self._streams[0]

    def mark(self) -> torch.cuda.Event:
        if self._next == len(self._pool):
            self._pool.append(torch.cuda.Event(enable_timing=True))
        event = self._pool[self._next]
        self._next += 1
        event.record(self._stream)
        return event

    def _mark_many(self) -> tuple:
        if self._next == len(self._pool):
            self._pool.append(tuple(_event_on(d) for d in self.devices))
        events = self._pool[self._next]
        self._next += 1
        for event, stream in zip(events, self._streams):
            event.record(stream)
        return events

    def end_run(self) -> None:
        for device in self.devices:
            torch.cuda.synchronize(device)

    def elapsed_ms(self, start: torch.cuda.Event, end: torch.cuda.Event) -> float:
        return float(start.elapsed_time(end))

    def elapsed_ms_many(self, starts: Sequence[Any], ends: Sequence[Any]) -> Sequence[float]:
        """With one mark per boundary, most events are the end of one pair and the start of the
        next (or several pairs': nodes that launch nothing): every distinct event is read once,
        against the first start (the earliest mark here), and pairs are differences. So the
        events of a run cost one ``elapsed_time`` each, and node times that share boundaries add
        up to their span exactly."""
        if len(self.devices) > 1 or not len(starts):
            return [self.elapsed_ms(a, b) for a, b in zip(starts, ends)]
        ref = starts[0]
        at = self._read  # this run's readings, {(reference, event): ms}: shared by the recorder's calls
        ref_id = id(ref)

        def offset(event: Any) -> float:
            key = (ref_id, id(event))
            found = at.get(key)
            if found is None:
                found = at[key] = 0.0 if event is ref else float(ref.elapsed_time(event))
            return found

        return [offset(b) - offset(a) for a, b in zip(starts, ends)]

    def _elapsed_many(self, start: tuple, end: tuple) -> float:
        return max(float(a.elapsed_time(b)) for a, b in zip(start, end))

    def hold_device(self, ms: float) -> None:
        """Queue about ``ms`` of spin kernel (``torch.cuda._sleep``) on every watched stream,
        so the host is that far ahead of the device: work queued next runs back to back at
        device speed instead of at the host's launch rate (isolated mode)."""
        for device, stream in zip(self.devices, self._streams or [torch.cuda.current_stream(d) for d in self.devices]):
            cycles = int(max(ms, 0.0) * self._sleep_cycles_per_ms(device))
            if cycles > 0:
                with torch.cuda.device(device), torch.cuda.stream(stream):
                    torch.cuda._sleep(cycles)

    def _sleep_cycles_per_ms(self, device: Any) -> float:
        if device not in self._cycles_per_ms:
            self._cycles_per_ms[device] = sleep_cycles_per_ms(device)
        return self._cycles_per_ms[device]

    def __repr__(self) -> str:
        shown = self.device if len(self.devices) == 1 else ", ".join(map(str, self.devices))
        return f"{type(self).__name__}(device={shown})"


def _event_on(device: Any) -> torch.cuda.Event:
    with torch.cuda.device(device):
        return torch.cuda.Event(enable_timing=True)


def sleep_cycles_per_ms(device: Any = None, cycles: int = 1_000_000, repeats: int = 5) -> float:
    """Spin-kernel cycles per millisecond on ``device``: the median of ``repeats`` timed
    ``torch.cuda._sleep(cycles)`` kernels, after one untimed."""
    with torch.cuda.device(device):
        torch.cuda._sleep(cycles)
        rates = []
        for _ in range(repeats):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            torch.cuda._sleep(cycles)
            end.record()
            end.synchronize()
            rates.append(cycles / max(start.elapsed_time(end), 1e-6))
    return float(np.median(rates))


class KernelTimer(CudaEventTimer):
    """CUDA event marks, and a request to attribute kernel time with ``torch.profiler``.

    The marks work as :class:`CudaEventTimer`'s; :func:`fxprof.profile` sees ``wants_kernel_time``
    and runs the timed passes under ``torch.profiler`` with a range per node.
    """

    name = "kernel"
    wants_kernel_time = True


class SyncTimer(Timer):
    """Synchronize every watched device before every mark, then read the monotonic clock."""

    name = "sync"
    measures_device = True

    def __init__(self, device: torch.device | str | int | None = None, devices: Sequence[Any] | None = None):
        self.devices = sorted({_cuda_device(d) for d in devices}, key=index_key) if devices else [_cuda_device(device)]
        self.device = self.devices[0]

    def check(self) -> None:
        _require_cuda(self.name)

    def mark(self) -> int:
        for device in self.devices:
            torch.cuda.synchronize(device)
        return time.perf_counter_ns()

    def elapsed_ms(self, start: int, end: int) -> float:
        return (end - start) / 1e6

    def elapsed_ms_many(self, starts: Sequence[int], ends: Sequence[int]) -> np.ndarray:
        return _ns_to_ms(starts, ends)

    def __repr__(self) -> str:
        return f"SyncTimer(device={', '.join(map(str, self.devices))})"


def index_key(device: Any) -> tuple[str, int]:
    """Devices by type, then index: ``cuda:2`` before ``cuda:10`` (not string order)."""
    if device is None:
        return ("", -1)
    return (device.type, -1 if device.index is None else device.index)


def _cuda_device(device: torch.device | str | int | None) -> torch.device | None:
    if device is None:
        return None
    device = torch.device("cuda", device) if isinstance(device, int) else torch.device(device)
    if device.type != "cuda":
        raise ValueError(f"a CUDA timer needs a CUDA device, got {device}")
    return device


def tensor_devices(values: Iterable[Any]) -> set[torch.device]:
    """Devices of every tensor found (recursively) in ``values``."""
    return {t.device for t in tensors_in(list(values))}


def resolve_timer(timer: str | Timer, module: torch.nn.Module, inputs: Iterable[Any]) -> Timer:
    """Turn ``timer`` (a name or a :class:`Timer`) into a checked timer for this model.

    ``"auto"`` picks ``"cuda"`` when any parameter, buffer or input is on a CUDA device,
    else ``"cpu"``. A CUDA timer on a machine without a usable GPU raises
    :class:`TimerUnavailableError` before anything runs.
    """
    if isinstance(timer, Timer) or (not isinstance(timer, str) and hasattr(timer, "mark")):
        if hasattr(timer, "check"):
            timer.check()
        return timer
    if not isinstance(timer, str) or timer not in TIMER_NAMES:
        raise ValueError(f"unknown timer {timer!r}; choose one of {', '.join(TIMER_NAMES)} or pass a Timer object")

    devices = tensor_devices(list(module.parameters()) + list(module.buffers()) + list(inputs))
    cuda_devices = sorted((d for d in devices if d.type == "cuda"), key=index_key)

    if timer == "auto":
        timer = "cuda" if cuda_devices else "cpu"
    if timer == "cpu":
        return CpuTimer()
    _require_cuda(timer)
    if not cuda_devices:
        raise TimerUnavailableError(
            f"timer={timer!r} measures work on a CUDA stream, but the model's parameters and "
            f"inputs are all on {', '.join(sorted(map(str, devices))) or 'no device'}. Move the "
            f"model and inputs to CUDA (model.cuda(), x.cuda()), or use timer='cpu'."
        )
    # every CUDA device the model's tensors are on is watched (events and a synchronize on each)
    cuda_devices = sorted({torch.device("cuda", torch.cuda.current_device()) if d.index is None else d for d in cuda_devices}, key=index_key)
    built = {"cuda": CudaEventTimer, "sync": SyncTimer, "kernel": KernelTimer}[timer](devices=cuda_devices)
    built.check()
    return built


def epoch_ns(timer: Any, host_ns: int, tries: int = 5) -> int:
    """The Unix-epoch time (ns, ``time.time_ns()``'s clock, which Kineto uses) of a reading
    ``host_ns`` of ``timer.host_ns()``. The offset between the two clocks is read ``tries``
    times, and the reading pair with the shortest gap is kept."""
    best = None
    for _ in range(max(tries, 1)):
        a = timer.host_ns()
        wall = time.time_ns()
        b = timer.host_ns()
        if best is None or b - a < best[0]:
            best = (b - a, wall - (a + b) // 2)
    return int(host_ns) + best[1]
