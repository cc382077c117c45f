"""Plots of profiles with matplotlib, an optional dependency: ``pip install 'fxprof[plot]'``.

Each function takes a :class:`~fxprof.Profile` (or a per-node DataFrame from one, e.g.
``profile.df`` or :func:`fxprof.read_csv`), draws on ``ax`` (a new figure when None) and
returns the matplotlib Axes. They only draw: every number comes from the DataFrame API
(``to_dataframe``, ``group_by``, ``samples``, :func:`fxprof.compare`). Times are milliseconds
(medians), shares percent of the summed median node time; outlier runs are left out as in the
profile's tables (``profile.keep_outliers``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Union

import numpy as np
import pandas as pd

from ..core.compare import compare
from ..core.profile import Profile
from ..core.rollup import group_by, is_bookkeeping
from .tables import change_label, model_label
from .text import ranked

if TYPE_CHECKING:
    from matplotlib.axes import Axes

__all__ = ["plot_top", "plot_groups", "plot_distribution", "plot_compare", "plot_roofline", "MISSING_MATPLOTLIB"]

MISSING_MATPLOTLIB = "fxprof's plots need matplotlib: pip install 'fxprof[plot]'"

ProfileOrTable = Union[Profile, pd.DataFrame]
_COLORS = ("#4c72b0", "#dd8452")


def _pyplot() -> Any:
    try:
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise ImportError(MISSING_MATPLOTLIB) from exc
    return plt


def _axes(ax: "Axes | None", rows: int) -> "Axes":
    plt = _pyplot()
    if ax is None:
        _, ax = plt.subplots(figsize=(8, 1.2 + 0.32 * max(rows, 1)), layout="constrained")
    return ax


def _per_node(item: ProfileOrTable) -> pd.DataFrame:
    """The per-node table as given (a Profile's in graph order)."""
    if isinstance(item, Profile):
        return item.df
    if isinstance(item, pd.DataFrame) and {"pct", "kind", "mean_ms"} <= set(item.columns):
        return item
    raise TypeError(f"expected a Profile or its per-node DataFrame (profile.df), got {type(item).__name__}")


def plot_top(profile: ProfileOrTable, n: int = 15, ax: "Axes | None" = None) -> "Axes":
    """Horizontal bars of the ``n`` nodes with the largest share (``pct``), largest on top.

    Each bar is labelled with the node's median time in ms (``pct`` is its share of the summed
    median node times). ``record_function`` enter/exit nodes are not ranked; their share is
    stated under the title.
    """
    full = _per_node(profile)
    table = ranked(full, "pct")[0].head(n)
    ax = _axes(ax, len(table))
    bars = ax.barh(list(table.index), table["pct"], color=_COLORS[0])
    ax.bar_label(bars, labels=[f"{ms:.3f} ms" for ms in table["median_ms"]], padding=3, fontsize="small")
    ax.invert_yaxis()
    ax.set_xlabel("share of node time (%)")
    ax.set_ylabel("node")
    ax.set_title(f"{model_label(profile)}: top {len(table)} nodes by share of node time" + _aside_title(full))
    ax.margins(x=0.15)
    return ax


def _aside_title(table: pd.DataFrame) -> str:
    """A second title line with the share of the ranges' enter/exit nodes left out of a ranking."""
    mask = is_bookkeeping(table)
    if not mask.any():
        return ""
    return f"\n(not ranked: {int(mask.sum())} record_function enter/exit nodes, {table.loc[mask, 'pct'].sum():.1f}% of node time)"


def plot_groups(profile: ProfileOrTable, key: str = "op", depth: int = 1, n: int = 15, ax: "Axes | None" = None) -> "Axes":
    """Node time rolled up by ``key`` (``op``, ``module_type``, ``range``, ``scope``, ``graph``).

    One bar per group from :meth:`Profile.group_by` (the ``n`` largest), its length the group's
    share, labelled with its summed median time in ms. ``depth`` cuts ``scope`` paths
    (2: resnet's blocks, ``layer1.0``).
    """
    groups = group_by(_per_node(profile), key, depth=depth)
    shown = groups.head(n)
    ax = _axes(ax, len(shown))
    bars = ax.barh([str(g) for g in shown.index], shown["pct"], color=_COLORS[0])
    ax.bar_label(bars, labels=[f"{ms:.3f} ms" for ms in shown["median_ms"]], padding=3, fontsize="small")
    ax.invert_yaxis()
    ax.set_xlabel("share of node time (%)")
    label = key + (f" (depth {depth})" if key == "scope" else "")
    ax.set_ylabel(label)
    more = f", top {len(shown)} of {len(groups)}" if len(shown) < len(groups) else ""
    ax.set_title(f"{model_label(profile)}: node time by {label}{more}")
    ax.margins(x=0.15)
    return ax


def plot_distribution(profile: Profile, n: int = 10, ax: "Axes | None" = None) -> "Axes":
    """Box plots of the per-run times of the ``n`` nodes with the largest share.

    One box per node from :attr:`Profile.samples` (one sample per timed run): the box spans the
    IQR, the line is the median, points beyond the whiskers are slow samples (the samples of
    outlier runs are left out unless ``profile.keep_outliers``). Needs a Profile:
    a per-node table has no per-run samples.
    """
    if not isinstance(profile, Profile):
        raise TypeError(f"plot_distribution needs a Profile (its per-run samples), got {type(profile).__name__}")
    full = profile.df
    top = list(ranked(full, "pct")[0].head(n).index)
    samples = profile.kept_samples()
    times = [samples.loc[samples["node"] == node, "time_ms"].to_numpy() for node in top]
    ax = _axes(ax, len(top))
    import matplotlib  # present: _axes checked

    # matplotlib 3.10 replaced vert=False with orientation="horizontal"
    horizontal = {"orientation": "horizontal"} if matplotlib.__version_info__ >= (3, 10) else {"vert": False}
    if times:
        ax.boxplot(times, patch_artist=True, boxprops={"facecolor": "#c6d4ea"}, medianprops={"color": "black"}, **horizontal)
    ax.set_yticks(np.arange(1, len(top) + 1), top)
    ax.invert_yaxis()
    ax.set_xlabel("time per run (ms)")
    ax.set_ylabel("node")
    runs = samples["run"].nunique()
    ax.set_title(f"{model_label(profile)}: per-run times of the top {len(top)} nodes ({runs} runs)" + _aside_title(full))
    return ax


def plot_compare(
    a: ProfileOrTable,
    b: ProfileOrTable,
    n: int = 15,
    ax: "Axes | None" = None,
    label_a: str = "a",
    label_b: str = "b",
) -> "Axes":
    """Median time per node in ``a`` and ``b``, for the ``n`` largest changes (:func:`fxprof.compare`).

    Two bars per node; ``b``'s bar is labelled with the change where the ratio ``b/a`` is
    defined (not for a node only one side has, whose other bar is missing, nor for one that took
    0 ms in ``a``), in words (:func:`~fxprof.views.tables.change_label`): ``6.4x faster`` or
    ``1.3x slower`` when the verdict says so (beyond noise, see :func:`fxprof.compare`), else
    ``0.98x the time``.
    """
    diff = compare(a, b).head(n)
    ax = _axes(ax, len(diff) * 3 // 2)
    y = np.arange(len(diff))
    ax.barh(y - 0.2, diff["a_ms"].fillna(0.0), height=0.4, label=label_a, color=_COLORS[0])
    bars_b = ax.barh(y + 0.2, diff["b_ms"].fillna(0.0), height=0.4, label=label_b, color=_COLORS[1])
    verdicts = diff["verdict"] if "verdict" in diff.columns else pd.Series("", index=diff.index)
    ax.bar_label(bars_b, labels=[change_label(r, v) for r, v in zip(diff["ratio"], verdicts)], padding=3, fontsize="small")
    side = {"only_a": f" (only in {label_a})", "only_b": f" (only in {label_b})", "both": ""}
    ax.set_yticks(y, [node + side[status] for node, status in diff["status"].items()])
    ax.invert_yaxis()
    ax.set_xlabel("median time (ms)")
    ax.set_ylabel("node")
    ax.set_title(f"{label_a} vs {label_b}: the {len(diff)} largest changes per node")
    ax.legend(loc="lower right")
    ax.margins(x=0.15)
    return ax


_LIMIT_COLORS = {"compute": "#4c72b0", "memory": "#dd8452", "overhead": "#8c8c8c"}


def plot_roofline(profile: Profile, label: int = 8, ax: "Axes | None" = None, without_flops: int = 8) -> "Axes":
    """The roofline: each node's arithmetic intensity (FLOPs per byte, x) against its achieved
    rate (FLOPs over its median time, y), log-log, under the two roofs of the profile's machine
    peaks (``meta["peaks"]``): the bandwidth slope and the compute ceiling, meeting at the ridge;
    dashed, the slope of each cache level the peaks measured (cache-aware roofs).

    One dot per node that does FLOPs, sized by its median time and coloured by its ``limit``;
    the ``label`` nodes with the most ``headroom_ms`` (time above their roof) are named with
    their ``roof_pct``. Nodes without FLOPs (pooling, batch norm, ReLU, adds: no formula in
    ``FlopCounterMode``) have no place on those axes; when ``ax`` is None a second panel shows
    the ``without_flops`` of them with the most headroom: the bandwidth each achieved (bytes over
    median) against the bandwidth roof. Returns the roofline's Axes (``ax.figure`` holds both).
    Raises ValueError for a profile without peaks or byte counts.
    """
    from ..core.roofline import Peaks

    if not isinstance(profile, Profile):
        raise TypeError(f"plot_roofline takes a Profile (its machine peaks are in its meta), got {type(profile).__name__}")
    if not profile.meta.get("peaks"):
        raise ValueError("this profile has no machine peaks (meta['peaks']): profile with peaks='auto' (the default) "
                         "or peaks=(TFLOPS, GBPS), with anatomy=True")
    peaks = Peaks.from_dict(profile.meta["peaks"])
    table = profile.df
    if table["bytes"].isna().all():
        raise ValueError("this profile has no byte counts: profile with anatomy=True")
    ran = table["median_ms"] > 0
    placed = table[(table["flops"].astype("float64") > 0) & (table["bytes"].astype("float64") > 0) & ran]
    others = table[~table.index.isin(placed.index) & ran & (table["bytes"].astype("float64") > 0)]
    side = None
    if ax is None:
        plt = _pyplot()
        if without_flops and len(others):
            fig, (ax, side) = plt.subplots(1, 2, figsize=(12, 6), width_ratios=(3, 1.3), layout="constrained")
        else:
            fig, ax = plt.subplots(figsize=(9, 6), layout="constrained")
    x = placed["intensity"].to_numpy(dtype=float)
    y = (placed["flops"].astype("float64") / (placed["median_ms"] / 1e3)).to_numpy(dtype=float)
    lo = min([peaks.ridge / 100, *(x / 2)])
    hi = max([peaks.ridge * 100, *(x * 2)])
    xs = np.geomspace(lo, hi, 200)
    ax.plot(xs, np.minimum(xs * peaks.bytes_per_s, peaks.flops_per_s), color="black", linewidth=1.5)
    ax.annotate(f"{peaks.bytes_per_s / 1e9:.3g} GB/s", (lo * 1.5, lo * 1.5 * peaks.bytes_per_s), fontsize="small", va="bottom")
    ax.annotate(f"{peaks.flops_per_s / 1e9:.4g} GFLOP/s ({peaks.dtype or 'peak'})", (hi / 1.5, peaks.flops_per_s),
                fontsize="small", ha="right", va="bottom")
    ax.axvline(peaks.ridge, color="gray", linestyle=":", linewidth=0.8)
    for level in peaks.caches:  # the cache-aware roofs: dashed, each a node whose reads fit it is held to
        rate = max(level["bytes_per_s"], peaks.bytes_per_s)
        ax.plot(xs, np.minimum(xs * rate, peaks.flops_per_s), color="gray", linestyle="--", linewidth=0.8)
        ax.annotate(f"{level['level']} {rate / 1e9:.3g} GB/s", (lo * 1.5, lo * 1.5 * rate), fontsize="x-small", va="bottom", color="gray")
    times = placed["median_ms"].to_numpy(dtype=float)
    sizes = 20 + 400 * times / times.max() if len(times) and times.max() > 0 else 20
    ax.scatter(x, y, s=sizes, c=[_LIMIT_COLORS.get(v, "#8c8c8c") for v in placed["limit"]], alpha=0.7,
               edgecolors="white", linewidths=0.5)
    for limit, color in _LIMIT_COLORS.items():
        if (placed["limit"] == limit).any():
            ax.scatter([], [], c=color, label=limit, s=40)
    top = placed.sort_values("headroom_ms", ascending=False).head(label)
    for i, (node, row) in enumerate(top.iterrows()):
        ax.annotate(f"{node} ({row['roof_pct']:.0f}%)", (row["intensity"], row["flops"] / (row["median_ms"] / 1e3)),
                    fontsize="x-small", xytext=(5, 4 if i % 2 == 0 else -10), textcoords="offset points")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOPs per byte read and written)")
    ax.set_ylabel("achieved FLOP/s (FLOPs over median time)")
    ax.set_title(f"{model_label(profile)}: {len(placed)} nodes with FLOPs (dot area: median time; label: roof_pct)")
    if len(others):
        ax.text(0.01, 0.99, f"{len(others)} nodes without FLOPs ({others['pct'].sum():.1f}% of node time)"
                + (": right" if side is not None else " not shown"), transform=ax.transAxes, fontsize="x-small", va="top")
    if len(placed):
        ax.legend(title="limit", fontsize="small", loc="lower right")
    if side is not None:
        worst = others.sort_values("headroom_ms", ascending=False).head(without_flops)
        rate = worst["bytes"].astype("float64") / (worst["median_ms"] / 1e3) / 1e9
        bars = side.barh(list(worst.index), rate, color=[_LIMIT_COLORS.get(v, "#8c8c8c") for v in worst["limit"]])
        side.bar_label(bars, labels=[f"{p:.0f}%" if p >= 1 else f"{p:.2g}%" for p in worst["roof_pct"]], padding=3, fontsize="x-small")
        side.axvline(peaks.bytes_per_s / 1e9, color="black", linewidth=1.5)
        side.invert_yaxis()
        side.set_xscale("log")
        side.set_xlabel("achieved GB/s (bytes over median time)")
        side.set_title(f"no FLOPs: most headroom\n(line: {peaks.bytes_per_s / 1e9:.3g} GB/s roof; label: roof_pct)", fontsize="small")
        side.tick_params(axis="y", labelsize="x-small")
        side.margins(x=0.3)
    return ax
