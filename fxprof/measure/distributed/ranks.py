"""Profiling under ``torch.distributed``: this rank's barriers and waits, and gathering the profiles.

Under an initialized process group (``torchrun``, or ``init_process_group`` by hand: gloo on the
CPU, NCCL on GPUs) :func:`fxprof.profile` on every rank makes a :class:`RankSync`: every rank
must ask for the same runs, a barrier lines the ranks up before each timed run (outside its
marks), and what a rank would decide alone (the end of a warm-up by time, a memory budget) is
decided together. :func:`gather` collects every rank's profile on one rank; the merge and every
per-rank statistic are plain data work in :mod:`fxprof.core.ranks`.
"""

from __future__ import annotations

import contextlib
import os
import platform
import time
from typing import TYPE_CHECKING, Any, Iterator

import numpy as np
import torch

from ...core.rankmerge import merge, profile_parts, with_ranks
from ...core.ranks import ISOLATED_UNDER_RANKS

if TYPE_CHECKING:
    from ...core.profile import Profile

__all__ = ["gather", "RankSync", "rank_sync", "is_initialized", "launched", "process_group_from_env", "this_rank"]


def _dist() -> Any:
    import torch.distributed as dist

    return dist


def is_initialized() -> bool:
    """True when a default ``torch.distributed`` process group exists."""
    dist = _dist()
    return bool(dist.is_available() and dist.is_initialized())


# ----------------------------------------------------------------- while profiling
class RankSync:
    """This rank's part in aligned runs: a barrier before each timed run, and its waits.

    :func:`fxprof.profile` makes one when a process group is initialized and calls
    :meth:`barrier` before each timed run, outside the run's marks.
    """

    def __init__(self, group: Any = None):
        dist = _dist()
        self.group = group
        self.rank = dist.get_rank(group)
        self.world_size = dist.get_world_size(group)
        self.backend = str(dist.get_backend(group))
        #: milliseconds this rank waited in each barrier, in order
        self.waits_ms: list[float] = []

    def check_same(self, **settings: Any) -> None:
        """Raise ValueError on every rank unless every rank passed the same ``settings``
        (every rank must reach the same number of barriers and collectives)."""
        gathered: list[Any] = [None] * self.world_size
        _dist().all_gather_object(gathered, settings, group=self.group)
        differ = {key for s in gathered for key in settings if s.get(key) != settings[key]}
        if differ:
            per_rank = "; ".join(f"rank {r}: " + ", ".join(f"{k}={s.get(k)!r}" for k in sorted(differ)) for r, s in enumerate(gathered))
            raise ValueError(
                f"fxprof.profile was called with different {', '.join(sorted(differ))} on different ranks "
                f"({per_rank}); every rank must run the same number of runs, or the barriers before the "
                f"runs would never line up. Pass the same values on every rank."
            )

    def barrier(self, proceed: bool = True) -> bool:
        """Wait for every rank; record the wait (host clock) in :attr:`waits_ms`. Returns True
        when every rank passed ``proceed=True``: the barrier is an all-reduce (minimum) of that
        flag, so a rank that must stop (its memory budget) stops every rank at the same run."""
        t0 = time.perf_counter_ns()
        agreed = self.agree(proceed, every=True)
        self.waits_ms.append((time.perf_counter_ns() - t0) / 1e6)
        return agreed

    def agree(self, mine: bool, every: bool) -> bool:
        """Whether every rank (``every``) or any rank says yes to ``mine``; every rank must call
        this at the same point. How fxprof keeps the ranks' run counts equal when a rank decides
        on its own (warm-up by time, the memory budget): a rank that stopped alone would leave
        the others waiting forever at the next barrier or collective."""
        dist = _dist()
        on_gpu = self.backend == "nccl" and torch.cuda.is_available()
        flag = torch.tensor([1 if mine else 0], dtype=torch.int32,
                            device=torch.device("cuda", torch.cuda.current_device()) if on_gpu else torch.device("cpu"))
        dist.all_reduce(flag, op=dist.ReduceOp.MIN if every else dist.ReduceOp.MAX, group=self.group)
        return bool(flag.item())

    def meta(self) -> dict[str, Any]:
        """What a rank's profile says about its place in the job."""
        return {
            "rank": self.rank,
            "world_size": self.world_size,
            "backend": self.backend,
            "local_rank": int(os.environ.get("LOCAL_RANK", self.rank)),
            "hostname": platform.node(),
        }

    def attach(self, profile: "Profile") -> "Profile":
        """``profile`` with this rank on its runs and the barrier waits in ``barrier_ms``."""
        runs = profile.num_runs
        waits = (self.waits_ms + [np.nan] * runs)[:runs]
        return with_ranks(profile, [self.rank] * runs, waits)


def rank_sync() -> RankSync | None:
    """A :class:`RankSync` when a ``torch.distributed`` process group is initialized, else None."""
    if not is_initialized():
        return None
    return RankSync()


def gather(profile: "Profile", dst: int = 0, group: Any = None) -> "Profile | None":
    """Collect every rank's profile on rank ``dst``; call it on every rank.

    Returns, on ``dst``, one profile holding every rank's samples and runs (a ``rank`` column in
    both; :attr:`Profile.ranks`), and None on the other ranks. Without an initialized process
    group the process is rank 0 of a world of one and ``profile`` comes back as it is.

    When every rank profiled the same graph (data parallel), nodes are shared and the per-node
    table's statistics are over all ranks. When the ranks' graphs differ (pipeline stages), each
    rank's node names get an ``rN:`` prefix and ``meta["rank_graphs"]`` says so.

    The profiles travel with ``torch.distributed.gather_object`` (pickle, between the job's own
    processes; nothing is pickled to disk). With NCCL, each rank must have called
    ``torch.cuda.set_device`` first, as ``gather_object`` requires.
    """
    if not is_initialized():
        return profile
    if profile.is_isolated:
        raise ValueError(ISOLATED_UNDER_RANKS)
    dist = _dist()
    rank = dist.get_rank(group)
    if not profile.ranks:  # made without fxprof.profile's barriers (a session's cycle, or before the group existed): this rank
        profile = with_ranks(profile, [rank] * profile.num_runs)
        for key, value in RankSync(group).meta().items():  # the job's facts (backend, world size...), as a profile's
            profile.meta.setdefault(key, value)
    parts = profile_parts(profile)
    received: list[Any] | None = [None] * dist.get_world_size(group) if rank == dst else None
    dist.gather_object(parts, received, dst=dst if group is None else dist.get_global_rank(group, dst), group=group)
    if rank != dst:
        return None
    return merge(received)  # type: ignore[arg-type]


# -------------------------------------------------------------------------- the CLI
def launched() -> bool:
    """True when this process was started by ``torchrun`` (or set up like it: WORLD_SIZE and RANK)."""
    return "WORLD_SIZE" in os.environ and "RANK" in os.environ


@contextlib.contextmanager
def process_group_from_env(device: str) -> Iterator[str]:
    """Under ``torchrun``: initialize the default process group from the environment (NCCL for
    a CUDA ``device``, gloo otherwise), yield the device this rank should use
    (``cuda:LOCAL_RANK`` for a plain ``cuda``), and destroy the group on the way out.
    Elsewhere: yield ``device`` unchanged."""
    dist = _dist()
    if not launched() or dist.is_initialized():
        yield device
        return
    if not dist.is_available():
        raise RuntimeError("this torch build has no torch.distributed; run fxprof without torchrun")
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    try:
        parsed = torch.device(device)
    except RuntimeError:  # the command reports a bad --device itself
        parsed = torch.device("cpu")
    backend = "gloo"
    if parsed.type == "cuda" and torch.cuda.is_available():
        if parsed.index is None:
            device = f"cuda:{local_rank}"
        torch.cuda.set_device(torch.device(device))
        backend = "nccl"
    dist.init_process_group(backend=backend)
    try:
        yield device
    finally:
        with contextlib.suppress(Exception):
            dist.destroy_process_group()


def this_rank() -> int:
    """This process's rank (0 without a process group)."""
    return _dist().get_rank() if is_initialized() else 0
