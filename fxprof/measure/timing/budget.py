"""How many samples fit in memory, so that a huge ``iters`` stops cleanly in time.

fxprof keeps every sample. Each costs about :data:`BYTES_PER_SAMPLE` bytes at the peak: the
recording's columns (with their growth room), the profile's copy of them and the tables built
from them; ``iters=10**9`` on resnet18 would
need terabytes. :class:`SampleBudget` allows the samples to take at most :data:`SHARE` of
the memory that was available when the timed runs began: it warns as soon as one run shows
that ``iters`` runs would not fit, and stops the timed runs cleanly when the next one would
cross the line. The profile then holds the runs that fit, marked incomplete.
"""

from __future__ import annotations

import os
import warnings
from typing import Any

__all__ = ["BYTES_PER_SAMPLE", "SHARE", "SampleBudget", "available_bytes"]

#: peak bytes a sample: ``python tests/benchmarks/memory.py --iters 5000 --nodes 50`` measured
#: 156 on 2026-11-21 (columnar recording, profile, per-node table and the samples DataFrame,
#: through tracemalloc; 275 before the columnar recording); 200 leaves room for what
#: tracemalloc does not see
BYTES_PER_SAMPLE = 200
#: share of the available memory the samples may take
SHARE = 0.5


def available_bytes() -> int | None:
    """Memory available to new allocations now (Linux ``MemAvailable``), or None if unknown."""
    try:
        with open("/proc/meminfo") as handle:
            for line in handle:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


class SampleBudget:
    """Counts samples against the memory budget; ``allows_another_run`` after each run."""

    def __init__(self, iters: int):
        self.iters = iters
        available = available_bytes()
        self.limit = None if available is None else int(available * SHARE / BYTES_PER_SAMPLE)
        self.warned = False
        self.stopped_at: int | None = None
        #: True when another torch.distributed rank's budget stopped the runs (see RankSync.agree)
        self.by_other_rank = False

    def allows_another_run(self, samples: int, runs: int) -> bool:
        """False when one more run (of the size seen so far) would go over the budget."""
        if self.limit is None or runs == 0 or runs >= self.iters:  # after the last run nothing is stopped
            return True
        per_run = max(samples / runs, 1.0)
        if not self.warned and per_run * self.iters > self.limit:
            self.warned = True
            fit = int(self.limit // per_run)
            warnings.warn(
                f"fxprof: iters={self.iters} would keep about {per_run * self.iters * BYTES_PER_SAMPLE / 1e9:.1f} GB of "
                f"samples, more than {SHARE:.0%} of the available memory; the timed runs stop after about {fit} runs "
                f"and the profile says so. Lower iters to measure fewer runs.",
                stacklevel=4,
            )
        if samples + per_run > self.limit:
            self.stopped_at = runs
            return False
        return True

    def stopped_by_other_rank(self, runs: int) -> None:
        """Another torch.distributed rank's budget stopped the runs after ``runs`` of them."""
        if self.stopped_at is None:
            self.stopped_at, self.by_other_rank = runs, True

    def samples_that_fit(self, per_run: int) -> int:
        """Samples of ``iters`` runs of ``per_run`` samples, or of as many runs as the budget
        allows (what the recording may reserve room for)."""
        runs = self.iters if self.limit is None else min(self.iters, int(self.limit // max(per_run, 1)))
        return max(runs, 1) * per_run

    def describe(self, meta: dict[str, Any]) -> dict[str, Any]:
        """``meta`` marked incomplete when the runs stopped early, with a note saying why."""
        if self.stopped_at is None:
            return meta
        whose = "another rank's samples (torch.distributed)" if self.by_other_rank else "more samples"
        note = (
            f"stopped after {self.stopped_at} of {self.iters} runs: {whose} would have taken over "
            f"{SHARE:.0%} of the available memory"
        )
        previous = meta.get("capture_note")
        return {**meta, "iters": self.stopped_at, "requested_iters": self.iters, "incomplete": True,
                "capture_note": f"{previous}; {note}" if previous else note}
