"""The header's lines and the report's sections, each an ordered list of per-feature sections.

A profile's header (:func:`fxprof.views.text.render_header`, also the report's header) is the
lines of every :class:`HeaderSection` of :data:`HEADER`, in order; its report
(:func:`fxprof.views.report.render_report`) is the HTML of every :class:`ReportSection` of
:data:`REPORT`, in order, each with its link in the page's navigation. A section decides itself
whether the profile has its feature: it gives no lines (``[]``) or no HTML (``""``) when not,
so the renderers that loop over these lists hold no feature's condition.

A feature's sections live in its own views module (fidelity, ranks, overlap, breaks, memory,
compiled_header, roofs_plot, ...); the short ones that belong to no feature are here. The two
lists are apart because the header and the report order the same features differently (the
header gives memory before the ranks, the report after them).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

from ..core.ranks import rank_inputs
from .breaks import breaks_panel
from .compiled_header import compiled_runs_section, program_lines
from .environment import env_lines
from .fidelity import fidelity_lines
from .headline import eager_run_lines
from .html_parts import figure_html, note_html, section_html, table_html
from .lookfirst import first_panel, look_here_first
from .memory import memory_line
from .memory_plot import memory_panel
from .overlap import overlap_lines, overlap_panel
from .ranks import rank_lines, ranks_panel
from .report_figures import FIRST_COLUMNS, distribution_figure, groups_figure, runs_figure, tree_figure
from .roofs_plot import roofline_lines, roofs_panel
from .tables import format_ms

if TYPE_CHECKING:
    from ..core.profile import Profile

__all__ = ["HeaderSection", "ReportSection", "HEADER", "REPORT"]


@dataclass(frozen=True)
class HeaderSection:
    """A part of the header: ``lines(profile)`` gives its lines, ``[]`` when the profile has not
    its feature."""

    name: str
    lines: Callable[["Profile"], list[str]]


@dataclass(frozen=True)
class ReportSection:
    """A section of the report: ``html(profile)`` gives the whole ``<section id=anchor>``, ``""``
    when the profile has not its feature; ``link`` is its text in the page's navigation."""

    anchor: str
    link: str
    html: Callable[["Profile"], str]


# ------------------------------------------------------------------ the header's short sections
def what_lines(profile: "Profile") -> list[str]:
    """What was measured: the model, the timer and device, warm-up and runs, threads, torch."""
    meta = profile.meta
    parts = [
        f"fxprof: {meta.get('model', 'model')}",
        f"timer {meta.get('timer', '?')} on {meta.get('gpu') or meta.get('device', '?')}",
        f"{meta.get('warmup_runs', meta.get('warmup', '?'))} warm-up + "
        + (f"{meta.get('iters', '?')} repeats per node" if profile.is_isolated else f"{profile.num_runs} timed runs")
        + (f" ({len(profile.ranks)} ranks)" if len(profile.ranks) > 1 else ""),
        f"threads {meta.get('threads', '?')}",
        f"torch {meta.get('torch', '?')}",
    ]
    return [" | ".join(parts)]


def inputs_lines(profile: "Profile") -> list[str]:
    """The inputs; for ranks given different inputs, that they differ (rank 0's alone would pass
    for every rank's; the ranks section lists them)."""
    inputs = profile.meta.get("inputs")
    if inputs and len(profile.ranks) > 1 and rank_inputs(profile.meta):
        return ["inputs: differ between ranks (see below)"]
    return ["inputs: " + ", ".join(inputs)] if inputs else []


def capture_notes(profile: "Profile") -> list[str]:
    """What the capture noted, and a compiled submodule's note."""
    return [f"note: {profile.meta[key]}" for key in ("capture_note", "nested_compile_note") if profile.meta.get(key)]


def notes(profile: "Profile") -> list[str]:
    return [f"note: {note}" for note in profile.meta.get("notes", ())]


def emptied_lines(profile: "Profile") -> list[str]:
    """Rows whose every timed call was in runs left out (busy or outlier runs): said, or their
    ``calls 0`` reads as a node that never ran."""
    from ..core.contention import emptied_words

    return emptied_words(profile) if profile.num_runs and not profile.is_isolated else []


def isolated_lines(profile: "Profile") -> list[str]:
    """The runs section of an isolated profile: how each node was re-run, how many were skipped."""
    if not profile.is_isolated:
        return []
    skipped = int((profile.anatomy["skip_reason"] != "").sum())
    return [f"mode isolated: each node re-run {profile.meta.get('iters', '?')} times back to back on its real "
            f"inputs (steady-state cost, no whole runs); {skipped} node(s) skipped, see skip_reason"]


def no_runs_lines(profile: "Profile") -> list[str]:
    return ["no timed runs recorded"] if not profile.is_isolated and not profile.num_runs else []


def training_step_lines(profile: "Profile") -> list[str]:
    """A training step's split by phase (summed mean node times), and backward over forward."""
    if not (profile.meta.get("backward") and profile.num_runs):
        return []
    phases = profile.group_by("phase")["mean_ms"]
    split = ", ".join(f"{phase} {format_ms(phases[phase])}" for phase in ("forward", "loss", "backward", "optimizer") if phase in phases.index)
    line = f"training step (optimizer {profile.meta['optimizer']}): " if profile.meta.get("optimizer") else "training step: "
    line += f"{split} (summed mean node times)"
    if phases.get("forward", 0) > 0 and "backward" in phases.index:
        line += f"; backward/forward {phases['backward'] / phases['forward']:.2f}"
    return [line]


def incomplete_lines(profile: "Profile") -> list[str]:
    """That the profile was interrupted, and how far it got."""
    meta = profile.meta
    if not meta.get("incomplete"):
        return []
    if profile.is_isolated:
        return ["INCOMPLETE: interrupted before every node was re-run"]
    return [f"INCOMPLETE: {profile.num_runs} of {meta.get('requested_iters', '?')} requested runs completed"]


#: the header, in order: what was measured, then what it rests on, then the runs, then the
#: features that only some profiles have
HEADER: tuple[HeaderSection, ...] = (
    HeaderSection("what", what_lines),
    HeaderSection("inputs", inputs_lines),
    HeaderSection("program", program_lines),  # fxprof.views.compiled_header
    HeaderSection("capture notes", capture_notes),
    HeaderSection("env", env_lines),  # fxprof.views.environment
    HeaderSection("roofline", roofline_lines),  # fxprof.views.roofs_plot
    HeaderSection("notes", notes),
    HeaderSection("memory", memory_line),  # fxprof.views.memory
    HeaderSection("isolated", isolated_lines),
    HeaderSection("compiled runs", compiled_runs_section),  # fxprof.views.compiled_header
    HeaderSection("runs", eager_run_lines),  # fxprof.views.headline
    HeaderSection("no runs", no_runs_lines),
    HeaderSection("emptied rows", emptied_lines),
    HeaderSection("ranks", rank_lines),  # torch.distributed: fxprof.views.ranks
    HeaderSection("overlap", overlap_lines),  # FSDP2: fxprof.views.overlap
    HeaderSection("fidelity", fidelity_lines),  # fxprof.views.fidelity
    HeaderSection("training step", training_step_lines),
    HeaderSection("incomplete", incomplete_lines),
)


# ------------------------------------------------------------------ the report's short sections
def tree_panel(profile: "Profile") -> str:
    return section_html(
        "tree", "Where the time goes: the module tree",
        "Each box is as wide as its median time; a module holds its layers and its functional nodes; the root is the "
        "median run, and its grey box (outside every node) the time no node holds, so the tree adds up to the run. "
        "Click a box to zoom in, the bar on top to zoom out. Colours are op kinds (key below)"
        + ("; the buttons switch to % of roof (red: far below the roof, green: at it)." if look_here_first(profile.df) else "."),
        figure_html(tree_figure(profile), "fx-tree"))


def kinds_panel(profile: "Profile") -> str:
    return section_html("kinds", "Time by op kind", "", figure_html(groups_figure(profile, "op"), "fx-kinds"))


def ranges_panel(profile: "Profile") -> str:
    from ..core.rollup import bookkeeping_note

    if not (profile.df["range"] != "").any():
        return ""
    return section_html("ranges", "Time by record_function range", "Each range's nodes, its enter and exit nodes included.",
                        figure_html(groups_figure(profile, "range"), "fx-ranges"), note_html(bookkeeping_note(profile.df)))


def phases_panel(profile: "Profile") -> str:
    if not ("phase" in profile.df.columns and profile.df["phase"].nunique() > 1):
        return ""
    return section_html("phases", "Time by training phase", "", figure_html(groups_figure(profile, "phase"), "fx-phases"))


def distributions_panel(profile: "Profile") -> str:
    if not profile.num_runs:
        return ""
    return section_html("dist", "Per-run times of the top nodes",
                        "Every timed run is a point; the box spans the middle half of the runs, the line is the median. "
                        "Ranked by share of node time; record_function enter/exit nodes are not ranked.",
                        figure_html(distribution_figure(profile), "fx-dist"))


def runs_panel(profile: "Profile") -> str:
    if not profile.num_runs:
        return ""
    return section_html("runs", "Run totals over time",
                        "A trend is drift (clocks, heat, other work on the machine); crosses are outlier runs.",
                        figure_html(runs_figure(profile), "fx-runs"))


def table_panel(profile: "Profile") -> str:
    table = profile.df
    first = [c for c in FIRST_COLUMNS if c in table.columns and (c not in ("range", "phase") or table[c].nunique() > 1)]
    return section_html("table", "Every node", "Every column of profile.df, in graph order, the times and shares first; times "
                        "with units (the CSV and profile.df keep milliseconds at full precision).",
                        table_html(table[first + [c for c in table.columns if c not in first]], "fx-nodes", "nodes"))


#: the report's sections, in order, after the cards (fxprof.views.headline.report_cards)
REPORT: tuple[ReportSection, ...] = (
    ReportSection("first", "look here first", first_panel),  # the roofline: fxprof.views.lookfirst
    ReportSection("tree", "module tree", tree_panel),
    ReportSection("kinds", "op kinds", kinds_panel),
    ReportSection("ranges", "ranges", ranges_panel),
    ReportSection("phases", "phases", phases_panel),
    ReportSection("ranks", "ranks", ranks_panel),  # torch.distributed: fxprof.views.ranks
    ReportSection("overlap", "FSDP overlap", overlap_panel),  # FSDP2: fxprof.views.overlap
    ReportSection("breaks", "breaks", breaks_panel),  # torch.compile: fxprof.views.breaks
    ReportSection("dist", "distributions", distributions_panel),
    ReportSection("runs", "runs", runs_panel),
    ReportSection("memory", "memory", memory_panel),  # fxprof.views.memory_plot
    ReportSection("roofs", "roofs", roofs_panel),  # the bandwidth curve: fxprof.views.roofs_plot
    ReportSection("table", "table", table_panel),
)
