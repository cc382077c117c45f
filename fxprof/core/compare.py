"""Comparing two profiles node by node (two runs, two machines, before and after a change).

Beyond the bare ratio, :func:`compare` says per node whether the change is beyond noise (a
Mann-Whitney U test on the two sets of samples, corrected for testing many nodes, plus a minimum
effect), gives a confidence interval for the whole run's ratio, and warns when the two profiles
were not measured under the same conditions. The statistics are in :mod:`fxprof.core.stats`; the
reasoning is in docs/methodology.md.
"""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING, Any, Union

import numpy as np
import pandas as pd

from .contention import BUSY_SHARE, loaded_words
from .memory import MEMORY_CHANGE_COLUMNS, memory_changes
from .roofline import peaks_differ

if TYPE_CHECKING:
    from .profile import Profile

__all__ = ["compare", "compare_blocks", "comparability", "ComparabilityWarning", "COMPARE_COLUMNS", "COMPARED_META",
           "IGNORED_META", "ALPHA", "MIN_EFFECT", "TOO_FEW"]

COMPARE_COLUMNS = ("status", "op", "kind", "scope", "phase", "a_ms", "b_ms", "delta_ms", "ratio", "p_value", "verdict",
                   "a_pct", "b_pct", "delta_pct", "noise", *MEMORY_CHANGE_COLUMNS)

#: a node's change is significant when its Benjamini-Hochberg adjusted p-value is below this
ALPHA = 0.05
#: ... and it counts as "faster"/"slower" only when its median moved by at least this fraction
#: (ratio >= 1 + MIN_EFFECT, or <= 1 / (1 + MIN_EFFECT)); see docs/methodology.md for the A/A
#: measurements behind the choice
MIN_EFFECT = 0.10

#: the verdict of a node whose sample sizes cannot give p < alpha however far apart they are
#: (3 runs a side: the smallest two-sided p-value is 0.1)
TOO_FEW = "too few runs"

#: ``profile.meta`` keys compared first (a difference is a comparability warning). Every other
#: key either profile has is compared too (environment and numeric settings, nested dicts key by
#: key), except :data:`IGNORED_META`.
COMPARED_META = ("model", "device", "gpu", "timer", "dtype", "threads", "inputs", "torch", "capture", "mode",
                 "no_grad", "training", "machine", "python", "fxprof")
#: bookkeeping, not measuring conditions: never compared
IGNORED_META = ("created", "iters", "requested_iters", "incomplete", "warmup", "capture_reason", "capture_note",
                "epoch_ns", "warmup_ms", "warmup_runs", "profiler_warmup_runs", "notes",
                # a gathered profile's bookkeeping (when, and each rank's own meta)
                "gathered", "per_rank", "ranks",
                # a session's cycle bookkeeping (which steps of the user's loop; the inputs are compared)
                "step", "cycle", "first_step", "run_steps", "run_signatures", "untimed_first_batches",
                "signatures_seen", "captures",
                # the roofline's machine peaks: compared as roofs (peaks_differ), not key by key
                "peaks",
                # measured results, not conditions: the model's own runs, fxprof's loop time, the
                # memory summary, the aten-op comparison, a compiled program's figures
                "own_runs_ms", "timed_wall_ms", "memory", "memory_steps", "dispatch_differences", "compiled", "no_event_nodes",
                # what the runs lost to other processes: said as a busy machine (busy_sides), not key by key
                "contention", "own_wall_ms")


class ComparabilityWarning(UserWarning):
    """The two profiles given to :func:`compare` were not measured under the same conditions."""


ProfileOrTable = Union["Profile", pd.DataFrame]


def _table(item: ProfileOrTable, keep_outliers: bool | None) -> pd.DataFrame:
    if isinstance(item, pd.DataFrame):
        table = item
    else:
        table = item.to_dataframe(keep_outliers=keep_outliers)
    missing = [c for c in ("op", "kind", "scope", "median_ms", "pct") if c not in table.columns]
    if missing:
        raise ValueError(f"cannot compare a table without the column(s) {', '.join(missing)}; pass a Profile or Profile.df")
    return table


def compare(
    a: ProfileOrTable,
    b: ProfileOrTable,
    *,
    alpha: float = ALPHA,
    min_effect: float = MIN_EFFECT,
    keep_outliers: bool | None = None,
    warn: bool = True,
    by: str = "node",
    depth: int = 1,
) -> pd.DataFrame:
    """Per-node comparison of ``a`` and ``b`` (profiles, or per-node tables from ``read_csv``).

    ``by="scope"`` lines them up per module path instead (cut to ``depth`` parts), for two
    profiles whose rows do not match one to one, such as the eager graph and the compiled
    program's kernels: see :func:`fxprof.core.blocks.compare_blocks` for its columns.

    Nodes are matched by name. Returns a DataFrame indexed by ``node``, sorted by the absolute
    change in time (largest first), with columns:

    - ``status``: ``"both"``, ``"only_a"`` or ``"only_b"`` (nodes on one side are kept);
    - ``op``, ``kind``, ``scope``, ``phase``: from whichever side has the node;
    - ``a_ms``, ``b_ms``: median node time on each side (NaN where absent);
    - ``delta_ms``: ``b_ms - a_ms`` (a missing side counts as 0);
    - ``ratio``: ``b_ms / a_ms`` (NaN unless both sides have the node and ``a_ms > 0``);
    - ``p_value``: two-sided Mann-Whitney U test of the node's samples in ``a`` against those
      in ``b``, adjusted for the number of nodes tested (Benjamini-Hochberg). NaN where it
      cannot be computed: a node on one side only, fewer than 2 samples on a side, or a per-node
      table (a CSV holds no samples; compare saved ``.json`` profiles);
    - ``verdict``: ``"slower"`` or ``"faster"`` when ``p_value < alpha`` **and** the median moved
      by at least ``min_effect`` (``ratio >= 1 + min_effect``, or ``<= 1 / (1 + min_effect)``),
      else ``"same"``; ``"too few runs"`` when the two sides have so few samples that no
      outcome could give ``p_value < alpha`` (3 runs a side: the smallest possible p is 0.1), so
      "same" would claim what the test cannot tell; ``"noisy"`` for a node that would be faster
      or slower, or whose median moved by ``min_effect`` or more without a significant test,
      but whose samples cannot carry a verdict: either side in two modes (3 ms or 7 ms at
      random), or an interquartile range wider than the change (:mod:`fxprof.core.noise`);
      ``""`` where there is no p-value. A node with 0 ms in ``a`` and more in ``b`` (no finite
      ratio) counts as slower;
    - ``a_pct``, ``b_pct``, ``delta_pct``: each side's share of its own node time, and the
      change in share in percentage points;
    - ``noise``: why a ``"noisy"`` node's verdict was held back ("" elsewhere).

    Outlier runs are left out of both sides (as in the profiles' tables) unless
    ``keep_outliers`` (default: each profile's :attr:`~fxprof.Profile.keep_outliers`).

    ``DataFrame.attrs`` of the result holds ``run_ratio`` (``ratio``: median run time of ``b``
    over ``a``; ``low``, ``high``: its 95% percentile-bootstrap interval over the runs of each
    side; ``a_runs``, ``b_runs``; ``a_median_ms``, ``b_median_ms``: each side's median run; None
    for tables): the comparison's headline, shown first. The interval covers the noise between runs
    within each profile, not a drift of the machine between the two profiles: on a busy machine
    two profiles of the same model can land outside each other's interval (docs/methodology.md),
    so no verdict is given for the whole run;
    ``warnings`` (see :func:`comparability`; comparing an eager profile with a compiled one, the
    single line that says to compare them ``by="scope"`` instead), ``test``, ``alpha`` and ``min_effect``. Unless
    ``warn=False``, each comparability problem is also raised as a :class:`ComparabilityWarning`.
    """
    from .stats import node_p_values, ratio_interval, smallest_p_value

    if by == "scope":
        from .blocks import compare_blocks

        return compare_blocks(a, b, depth=depth, keep_outliers=keep_outliers)
    if by != "node":
        raise ValueError(f"compare by 'node' (default) or 'scope', got {by!r}")
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be between 0 and 1, got {alpha!r}")
    if not min_effect >= 0:
        raise ValueError(f"min_effect must be >= 0 (a fraction: 0.1 is 10%), got {min_effect!r}")
    ta, tb = _table(a, keep_outliers), _table(b, keep_outliers)
    index = pd.Index(list(ta.index) + [n for n in tb.index if n not in ta.index], name="node", dtype=str)
    ia, ib = ta.reindex(index), tb.reindex(index)
    in_a = pd.Series(index.isin(ta.index), index=index)
    in_b = pd.Series(index.isin(tb.index), index=index)
    out = pd.DataFrame(index=index)
    out["status"] = pd.Series(np.where(in_a & in_b, "both", np.where(in_a, "only_a", "only_b")), index=index, dtype=str)
    for col in ("op", "kind", "scope"):
        out[col] = ia[col].where(in_a, ib[col]).fillna("").astype(str)
    phase_a = ia["phase"] if "phase" in ia.columns else pd.Series("forward", index=index)
    phase_b = ib["phase"] if "phase" in ib.columns else pd.Series("forward", index=index)
    out["phase"] = phase_a.where(in_a, phase_b).fillna("forward").astype(str)
    out["a_ms"] = ia["median_ms"].astype("float64")
    out["b_ms"] = ib["median_ms"].astype("float64")
    out["delta_ms"] = out["b_ms"].fillna(0.0) - out["a_ms"].fillna(0.0)
    out["ratio"] = (out["b_ms"] / out["a_ms"].where(out["a_ms"] > 0)).where(in_a & in_b)

    out["p_value"] = np.nan
    too_few = pd.Series(False, index=index)
    with_samples = not isinstance(a, pd.DataFrame) and not isinstance(b, pd.DataFrame)
    if with_samples:
        both_mask = (in_a & in_b).to_numpy()
        both = list(index[both_mask])
        (sa, fa), (sb, fb) = _samples_by_node(a, keep_outliers), _samples_by_node(b, keep_outliers)
        empty = np.empty(0)
        pairs = [(sa.get(n, empty), sb.get(n, empty)) for n in both]
        _, adjusted = node_p_values(pairs)
        out.loc[both_mask, "p_value"] = adjusted
        # sizes whose most extreme outcome still gives p >= alpha: no verdict is possible at all
        # (one test per distinct pair of finite counts: nodes mostly share theirs)
        if both:
            counts = np.array([(fa.get(n, 0), fb.get(n, 0)) for n in both], dtype=np.int64).reshape(-1, 2)
            sizes, where = np.unique(counts, axis=0, return_inverse=True)
            cannot = np.array([smallest_p_value(int(x), int(y)) >= alpha for x, y in sizes], dtype=bool)
            too_few.loc[both_mask] = cannot[where.reshape(-1)]
    # a node that took no time in a and some in b has no finite ratio, but it did get slower
    effect = out["ratio"].mask(in_a & in_b & (out["a_ms"] == 0) & (out["b_ms"] > 0), np.inf)
    out["verdict"] = verdict_series(out["p_value"], effect, alpha, min_effect, too_few)
    out["noise"] = ""
    if with_samples:  # a verdict the samples cannot carry (two modes, spread wider than the change) is held back
        from .noise import NOISY, noise_reason

        # and a "same" whose median moved by the minimum effect or more: the test could not tell,
        # and when its samples are in two modes or spread wider than the change that is noise, not
        # "unchanged" (a busy machine: a node at 250 us in a and 13.1 ms in b, p 0.43, read "same")
        moved = ((effect >= 1.0 + min_effect) | (effect <= 1.0 / (1.0 + min_effect))).to_numpy(dtype=bool)
        verdict = out["verdict"].to_numpy()
        judged = index[both_mask & (np.isin(verdict, ("faster", "slower")) | ((verdict == "same") & moved))]
        for n in judged:
            reason = noise_reason(_finite_values(sa.get(n, empty)), _finite_values(sb.get(n, empty)))
            if reason:
                out.at[n, "verdict"], out.at[n, "noise"] = NOISY, reason
    out["a_pct"] = ia["pct"].astype("float64")
    out["b_pct"] = ib["pct"].astype("float64")
    out["delta_pct"] = out["b_pct"].fillna(0.0) - out["a_pct"].fillna(0.0)
    out = out.join(memory_changes(ia, ib))  # fxprof.core.memory: the nodes' peaks, side by side
    order = out["delta_ms"].abs().sort_values(ascending=False, kind="stable").index
    out = out.loc[order, list(COMPARE_COLUMNS)]

    run_ratio = None
    if with_samples:
        ta_runs, tb_runs = a.kept_totals(keep_outliers), b.kept_totals(keep_outliers)
        ratio, low, high = ratio_interval(ta_runs, tb_runs)
        run_ratio = {
            "ratio": ratio, "low": low, "high": high, "confidence": 0.95,
            "a_runs": len(ta_runs), "b_runs": len(tb_runs),
            "a_median_ms": float(np.median(ta_runs)) if len(ta_runs) else float("nan"),
            "b_median_ms": float(np.median(tb_runs)) if len(tb_runs) else float("nan"),
        }
    from .blocks import use_blocks_instead

    # nodes matched by name that do another kind of work in b (a swapped layer, or another model)
    matched = index[in_a & in_b]
    other = ia.loc[matched, "kind"].astype(str) != ib.loc[matched, "kind"].astype(str)
    out.attrs["other_op"] = {n: (str(ia.at[n, "kind"]), str(ib.at[n, "kind"])) for n in matched[other.to_numpy()]}
    kinds = use_blocks_instead(a, b, int((out["status"] == "both").sum()), len(out))
    problems = [kinds] if kinds else comparability(a, b, out)
    tested = int(out["p_value"].notna().sum())
    out.attrs.update({
        "run_ratio": run_ratio,
        "warnings": problems,
        "test": (f"Mann-Whitney U (two-sided) per node, Benjamini-Hochberg over {tested} nodes; verdict needs "
                 f"p < {alpha:g} and a change of at least {min_effect:.0%}") if with_samples
                else "no samples (a per-node table was given): no p-values or verdicts; compare saved .json profiles",
        "alpha": alpha,
        "min_effect": min_effect,
    })
    if warn and kinds:
        warnings.warn("fxprof.compare: " + kinds, ComparabilityWarning, stacklevel=2)
    elif warn and problems:
        warnings.warn("fxprof.compare: the two profiles differ in: " + "; ".join(problems), ComparabilityWarning, stacklevel=2)
    return out


def compare_blocks(diff: pd.DataFrame, depth: int = 2) -> pd.DataFrame:
    """A comparison (:func:`compare`) rolled up by module scope cut to ``depth`` parts
    (2: resnet's blocks, ``layer1.0``; see :func:`fxprof.core.rollup.scope_at_depth`).

    Index ``block``; columns ``nodes``, ``a_ms`` and ``b_ms`` (summed median node times of each
    side, NaN-free: a node one side lacks adds 0 there), ``delta_ms``, ``ratio`` (b/a; NaN
    when a is 0), and the counts of the nodes' verdicts ``faster``, ``slower``, ``same``.
    Largest absolute change first. No test is made for a block: its nodes' verdicts are.
    """
    from .rollup import PLUMBING, scope_at_depth

    labels = diff["scope"].map(lambda s: scope_at_depth(s, depth))
    labels = labels.mask(diff["op"].isin(["placeholder", "get_attr", "output"]), PLUMBING).rename("block")
    grouped = diff.groupby(labels, sort=False)
    out = pd.DataFrame({
        "nodes": grouped.size(),
        "a_ms": grouped["a_ms"].sum(min_count=0),
        "b_ms": grouped["b_ms"].sum(min_count=0),
    })
    out["delta_ms"] = out["b_ms"] - out["a_ms"]
    out["ratio"] = out["b_ms"] / out["a_ms"].where(out["a_ms"] > 0)
    verdicts = diff["verdict"] if "verdict" in diff.columns else pd.Series("", index=diff.index)
    for verdict in ("faster", "slower", "same"):
        out[verdict] = (verdicts == verdict).groupby(labels, sort=False).sum().astype("int64")
    order = out["delta_ms"].abs().sort_values(ascending=False, kind="stable").index
    out = out.loc[order]
    out.index.name = "block"
    return out


def _samples_by_node(profile: "Profile", keep_outliers: bool | None) -> tuple[dict[str, np.ndarray], dict[str, int]]:
    """Each node's values in the runs the statistics use: the same values its ``median_ms`` is
    of (one a run, calls within a run summed; :meth:`SampleColumns.per_run`), so the test and
    the ratio speak of the same thing; and how many of each node's values are finite. Grouped
    by one stable sort, no DataFrame."""
    columns = profile.columns
    node, times, _, _, _ = columns.per_run(profile.kept_runs(keep_outliers))
    groups = len(columns.names)
    counts = np.bincount(node, minlength=groups)
    if not counts.any():  # no samples (an empty or isolated-mode profile)
        return {}, {}
    times = np.asarray(times, dtype=np.float64)
    finite = np.bincount(node, weights=np.isfinite(times), minlength=groups).astype(np.int64)
    # a stable sort is one permutation whatever the codes' dtype: 16-bit codes sort by radix
    codes = node.astype(np.uint16) if groups <= 1 << 16 else node
    parts = np.split(times[np.argsort(codes, kind="stable")], np.cumsum(counts)[:-1])
    names = [str(name) for name in columns.names]
    present = np.flatnonzero(counts).tolist()
    return {names[code]: parts[code] for code in present}, {names[code]: int(finite[code]) for code in present}


def _finite_values(values: np.ndarray) -> np.ndarray:
    values = np.asarray(values, dtype=np.float64)
    return values[np.isfinite(values)]


def verdict_series(p_value: pd.Series, ratio: pd.Series, alpha: float, min_effect: float,
              too_few: pd.Series | None = None) -> pd.Series:
    significant = p_value < alpha
    slower = significant & (ratio >= 1.0 + min_effect)
    faster = significant & (ratio <= 1.0 / (1.0 + min_effect))
    verdict = np.where(slower, "slower", np.where(faster, "faster", "same"))
    if too_few is not None:
        verdict = np.where(too_few.to_numpy(dtype=bool), TOO_FEW, verdict)
    return pd.Series(np.where(p_value.isna(), "", verdict), index=p_value.index, dtype=str)


def comparability(a: ProfileOrTable, b: ProfileOrTable, diff: pd.DataFrame | None = None) -> list[str]:
    """Why ``a`` and ``b`` may not be comparable, one sentence each (empty when nothing differs).

    Checks the graph (share of nodes present in only one of the two) and every key of
    :data:`COMPARED_META` plus any other ``profile.meta`` key either side has (environment and
    numeric settings such as TF32 flags; nested dicts are compared key by key), except
    :data:`IGNORED_META`; only what changes the numbers is said, in words
    (:mod:`fxprof.core.conditions`: a differing model name, the loop's wall time or a key an
    older fxprof did not record are not). Per-node tables have no metadata: that is said instead.
    """
    problems: list[str] = []
    if diff is None:
        diff = compare(a, b, warn=False)
    unmatched = int((diff["status"] != "both").sum())
    if unmatched:
        problems.append(
            f"graph: {unmatched} of {len(diff)} nodes ({unmatched / len(diff):.1%}) are in only one profile "
            f"({int((diff['status'] == 'only_a').sum())} only in a, {int((diff['status'] == 'only_b').sum())} only in b): "
            f"their time counts as removed or added, not as changed"
        )
    other = diff.attrs.get("other_op") or {}
    if other:
        both = int((diff["status"] == "both").sum())
        shown = ", ".join(f"{n}: {ka} in a, {kb} in b" for n, (ka, kb) in list(other.items())[:3])
        more = f" and {len(other) - 3} more" if len(other) > 3 else ""
        names = [item.meta.get("model") if not isinstance(item, pd.DataFrame) else None for item in (a, b)]
        models = f"a is {names[0]!r}, b is {names[1]!r}, and " if None not in names and names[0] != names[1] else ""
        problems.append(
            f"model: {models}{len(other)} of {both} nodes matched by name do another kind of work in b ({shown}{more}): "
            f"these may be two different models; those nodes' times are not the same work's, and no gate judges them"
        )
    tables = [side for side, item in (("a", a), ("b", b)) if isinstance(item, pd.DataFrame)]
    if tables:
        problems.append(f"{' and '.join(tables)}: a per-node table has no metadata, so device, timer, threads, "
                        f"inputs and versions cannot be checked")
        return problems
    from .conditions import describe_difference

    ma, mb = _flat(a.meta), _flat(b.meta)
    extra = sorted((set(ma) | set(mb)) - set(COMPARED_META))
    for key in [*COMPARED_META, *extra]:
        if key.split(".")[0] in IGNORED_META or (key not in ma and key not in mb):
            continue
        va, vb = ma.get(key, _MISSING), mb.get(key, _MISSING)
        if va != vb:
            sentence = describe_difference(key, va, vb, _MISSING)
            if sentence:
                problems.append(sentence)
    problems.extend(busy_sides(a, b))
    if a.meta.get("peaks") and b.meta.get("peaks"):  # both have roofs: their roof_pct and headroom differ with them
        roofs = peaks_differ(a.meta["peaks"], b.meta["peaks"])
        if roofs:
            problems.append(f"peaks: {roofs}")  # the sentence says roof_pct and headroom_ms are against different roofs
    return problems


def busy_sides(a: "Profile", b: "Profile") -> list[str]:
    """A sentence for each side whose timed runs lost time to other processes
    (:mod:`fxprof.core.contention`): whether the comparison leaves them out or its times include
    the lost time; or, where no run lost time, whose machine was loaded (the process lost a share
    of its timed window, or the load average was high: its times may be high)."""
    out = []
    for side, prof in (("a", a), ("b", b)):
        found = prof.contention
        if found is not None and not found.busy.any() and found.loaded:
            out.append(f"{side} was profiled on a loaded machine ({loaded_words(found)}): no timed run lost "
                       f"{BUSY_SHARE:.0%} of its time, but processes beside the runs slow them without taking their CPU, "
                       f"so its times may be high")
        if found is None or not found.busy.any():
            continue
        kept = "left out of the comparison" if found.left_out and not prof.keep_outliers else \
            "kept, so its times include time lost to other processes"
        out.append(f"{side} was profiled on a busy machine: {int(found.busy.sum())} of {len(found.runs)} timed runs lost "
                   f"{BUSY_SHARE:.0%} or more of their time to other processes ({kept})")
    return out


class _Missing:
    def __repr__(self) -> str:
        return "(not recorded)"


_MISSING = _Missing()


def _flat(meta: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested dicts as dotted keys; lists as tuples, so values compare by content."""
    out: dict[str, Any] = {}
    for key, value in meta.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(_flat(value, name + "."))
        else:
            out[name] = tuple(value) if isinstance(value, list) else value
    return out
