"""The result of ``fxprof.whatif``: each variant against the baseline, whole run and per block.

:class:`WhatIf` holds what was measured (each variant's interleaved call times, the samples a
call computes, the per-variant profiles, and why a variant failed) and derives everything else:
:attr:`WhatIf.table` (one row a variant, best first: the whole run's ``speedup`` with its 95%
interval and ``verdict`` by :func:`fxprof.core.gate.run_verdict`, compare's rules),
:meth:`WhatIf.blocks` (per variant, ``compare(base, variant, by="scope")``) and the lines of the
ranked summary (``channels_last: 1.8x faster [1.6, 2.0], layer4 2.9x, maxpool 0.8x``) with the
roofline's "why" where both profiles have roofs.

numpy and pandas only: no torch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from .compare import ALPHA, MIN_EFFECT

if TYPE_CHECKING:
    from .profile import Profile

__all__ = ["WhatIf", "WHATIF_COLUMNS", "NO_CHANGE"]

#: the columns of :attr:`WhatIf.table`
WHATIF_COLUMNS = ("speedup", "low", "high", "verdict", "p_value", "base_ms", "variant_ms", "samples", "runs",
                  "gained", "lost", "why", "error")

#: how a variant that would run what the baseline runs is reported (its ``error`` starts with it,
#: its ``verdict`` is it): it was not timed, so it has no speed-up
NO_CHANGE = "changes nothing"


@dataclass
class WhatIf:
    """What :func:`fxprof.whatif` measured, and the tables derived from it.

    ``times``: each variant's call times in ms (``"baseline"`` included), from rounds in which
    every variant ran once; ``samples``: the samples one call computes (the batch), by which
    times are divided for ``batch=N``; ``profiles``: a :class:`~fxprof.Profile` per variant
    (and the baseline) for the per-block comparison, when taken; ``errors``: why a variant
    failed; ``order``: the variants as asked."""

    times: dict[str, np.ndarray]
    samples: dict[str, int]
    order: list[str]
    profiles: dict[str, "Profile"] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)
    meta: dict[str, Any] = field(default_factory=dict)
    #: per variant, what each timed call lost to other processes (ms; the order of ``times``),
    #: where it was measured
    lost_ms: dict[str, np.ndarray] = field(default_factory=dict)
    alpha: float = ALPHA
    min_effect: float = MIN_EFFECT
    depth: int = 1

    # ------------------------------------------------------------------ the machine
    def machine_line(self) -> str:
        """Whether other processes took the CPU from the timed calls, per variant, on the rule of
        every machine line (:func:`fxprof.core.contention.steps_machine_words`); "" where nothing
        was measured."""
        from .contention import steps_machine_words, window_figures

        if not self.lost_ms:
            return ""
        phases = [(name, self.lost_ms[name], self.times[name]) for name in self.times if name in self.lost_ms]
        loads = [float(v) for v in (self.meta.get("load") or ()) if isinstance(v, (int, float))]
        line = steps_machine_words(phases, max(loads) if loads else None, int(self.meta.get("cores") or 0), noun="calls",
                                   window=window_figures(self.meta))
        return line.replace("; the times above include what they lost", "; the times and verdicts include what they lost")

    # ------------------------------------------------------------------ tables
    def per_sample_ms(self, name: str) -> np.ndarray:
        """``name``'s call times divided by the samples a call computes."""
        return np.asarray(self.times[name], dtype=np.float64) / max(1, self.samples.get(name, 1))

    @property
    def table(self) -> pd.DataFrame:
        """One row per variant (index ``variant``), best first, failed variants last.

        Columns: ``speedup`` (baseline's median time per sample over the variant's: above 1
        the variant is faster), ``low``/``high`` (its 95% percentile-bootstrap interval over
        the runs), ``verdict`` (faster, slower, same, too few runs: Mann-Whitney U on the
        per-sample run times, ``p < alpha`` and at least ``min_effect``, as compare's),
        ``p_value``, ``base_ms``/``variant_ms`` (median call time of each), ``samples`` (per
        call), ``runs``, ``gained``/``lost`` (the blocks whose time fell or rose most, with
        their speed-up; "" without profiles), ``why`` (the roofline's reading of the node that
        moved most, where both profiles have roofs), ``error`` (why the variant failed; its
        other columns are then empty; a variant that would run what the baseline runs has the
        verdict ``changes nothing`` (:data:`NO_CHANGE`), the reason in ``error`` and no times)."""
        from .gate import run_verdict

        rows: list[dict[str, Any]] = []
        base = self.per_sample_ms("baseline") if "baseline" in self.times else np.empty(0)
        for name in self.order:
            if name in self.errors or name not in self.times:
                error = self.errors.get(name, "not measured")
                rows.append({"variant": name, "error": error, **({"verdict": NO_CHANGE} if self.unchanged(name) else {})})
                continue
            run = run_verdict(base, self.per_sample_ms(name), self.alpha, self.min_effect)
            gained, lost = self._moved(name)
            rows.append({
                "variant": name, "speedup": run.speedup,
                "low": 1.0 / run.high if run.high > 0 else math.nan, "high": 1.0 / run.low if run.low > 0 else math.nan,
                "verdict": run.verdict, "p_value": run.p_value,
                "base_ms": float(np.median(self.times["baseline"])), "variant_ms": float(np.median(self.times[name])),
                "samples": self.samples.get(name, 1), "runs": int(len(self.times[name])),
                "gained": gained, "lost": lost, "why": self.why(name), "error": "",
            })
        table = pd.DataFrame(rows, columns=["variant", *WHATIF_COLUMNS]).set_index("variant")
        for column in ("verdict", "gained", "lost", "why", "error"):
            table[column] = table[column].astype(object).fillna("").astype(str)  # a column all NaN is float64
        key = table["speedup"].fillna(-math.inf)
        return table.loc[key.sort_values(ascending=False, kind="stable").index]

    def unchanged(self, name: str) -> bool:
        """Whether ``name`` was found, before any timing, to run what the baseline runs (its
        row's verdict is :data:`NO_CHANGE`, and it has no times)."""
        return self.errors.get(name, "").startswith(NO_CHANGE)

    def blocks(self, name: str) -> pd.DataFrame | None:
        """``compare(baseline, variant, by="scope", depth)`` for ``name`` (None without both
        profiles): columns as :func:`fxprof.core.blocks.compare_blocks`. For ``batch=N`` the
        variant's times are per sample, scaled to the baseline's batch."""
        if "baseline" not in self.profiles or name not in self.profiles:
            return None
        from .blocks import compare_blocks

        blocks = compare_blocks(self.profiles["baseline"], self.profiles[name], depth=self.depth)
        scale = self.samples.get("baseline", 1) / max(1, self.samples.get(name, 1))
        if scale != 1:
            blocks = blocks.copy()
            blocks["b_ms"] = blocks["b_ms"] * scale
            blocks["delta_ms"] = blocks["b_ms"] - blocks["a_ms"]
            blocks["speedup"] = blocks["a_ms"] / blocks["b_ms"].where(blocks["b_ms"] > 0)
        return blocks

    def _moved(self, name: str, count: int = 2) -> tuple[str, str]:
        """The ``count`` blocks that gained most time (speed-up above 1) and lost most."""
        blocks = self.blocks(name)
        if blocks is None or blocks.empty:
            return "", ""
        real = blocks[~blocks.index.isin(["(graph)"]) & (blocks["a_ms"] > 0) & (blocks["b_ms"] > 0)]
        gained = real[real["delta_ms"] < 0].sort_values("delta_ms").head(count)
        lost = real[real["delta_ms"] > 0].sort_values("delta_ms", ascending=False).head(count)

        def words(part: pd.DataFrame) -> str:
            return ", ".join(f"{scope} {speedup:.2g}x" for scope, speedup in part["speedup"].items())

        return words(gained), words(lost)

    def why(self, name: str) -> str:
        """The roofline's reading of the node whose time changed most between the baseline and
        ``name`` ("maxpool is memory-limited at 1% of its roof: channels_last moved it to
        35%"), when both profiles have the node with its roof; "" otherwise (no profiles, no
        peaks, a compiled program whose rows are kernels)."""
        if "baseline" not in self.profiles or name not in self.profiles:
            return ""
        a, b = self.profiles["baseline"].df, self.profiles[name].df
        if "roof_pct" not in a.columns or "roof_pct" not in b.columns:
            return ""
        both = a.index.intersection(b.index)
        scale = self.samples.get("baseline", 1) / max(1, self.samples.get(name, 1))
        known = [n for n in both if np.isfinite(a.at[n, "roof_pct"]) and np.isfinite(b.at[n, "roof_pct"])
                 and a.at[n, "limit"] in ("memory", "compute")]
        if not known:
            return ""
        delta = {n: abs(float(b.at[n, "median_ms"]) * scale - float(a.at[n, "median_ms"])) for n in known}
        node = max(known, key=delta.__getitem__)
        change = float(a.at[node, "median_ms"]) / max(float(b.at[node, "median_ms"]) * scale, 1e-12)
        return (f"{node} is {a.at[node, 'limit']}-limited at {a.at[node, 'roof_pct']:.0f}% of its roof: "
                f"{name} moved it to {b.at[node, 'roof_pct']:.0f}% ({change:.2g}x)")

    # ------------------------------------------------------------------ text
    def lines(self) -> list[str]:
        """The ranked summary, one line a variant."""
        out = []
        for name, row in self.table.iterrows():
            if row["error"]:
                out.append(f"{name}: {row['error']} (not timed)" if self.unchanged(str(name))
                           else f"{name}: failed: {row['error']}")
                continue
            if row["verdict"] in ("faster", "slower"):
                shown = row["speedup"] if row["verdict"] == "faster" else 1.0 / row["speedup"]
                low, high = (row["low"], row["high"]) if row["verdict"] == "faster" else (1.0 / row["high"], 1.0 / row["low"])
                head = f"{name}: {shown:.2f}x {row['verdict']} [{low:.2f}, {high:.2f}]"
            else:
                head = f"{name}: {row['verdict'] or 'no verdict'} ({row['speedup']:.2f}x [{row['low']:.2f}, {row['high']:.2f}])"
            moved = ", ".join(part for part in (row["gained"], row["lost"]) if part)
            out.append(head + (f", {moved}" if moved else "") + (f"; {row['why']}" if row["why"] else ""))
        return out

    def __repr__(self) -> str:
        return "\n".join(self.lines())
