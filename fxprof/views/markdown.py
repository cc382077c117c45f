"""A comparison as GitHub-flavoured Markdown, for a CI job's step summary
(``fxprof compare A B --markdown "$GITHUB_STEP_SUMMARY"``): the verdict first, then the table
of the nodes that moved most. Tables through pandas' ``to_markdown`` (tabulate)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

if TYPE_CHECKING:
    from ..core.gate import RunVerdict

__all__ = ["render_compare_markdown", "MARKDOWN_COLUMNS"]

#: the table's columns (those the comparison has)
MARKDOWN_COLUMNS = ("status", "kind", "scope", "a_ms", "b_ms", "delta_ms", "ratio", "p_value", "verdict")

_ICON = {"slower": ":red_circle:", "faster": ":green_circle:", "same": ":white_circle:"}


def render_compare_markdown(diff: pd.DataFrame, label_a: str, label_b: str, run: "RunVerdict | None" = None,
                            gate_line: str | None = None, top: int = 20) -> str:
    """``diff`` (:func:`fxprof.compare`, per node) as Markdown: a heading with the whole run's
    verdict (``run``, :func:`fxprof.core.gate.run_verdict`) and the gate's sentence, the
    verdict counts, comparability warnings, then the ``top`` rows (0: all) in compare's order."""
    lines = []
    if run is not None and run.verdict:
        icon = _ICON.get(run.verdict, ":grey_question:")
        lines.append(f"## {icon} fxprof: b is **{run.verdict}** than a" if run.verdict in ("slower", "faster")
                     else f"## {icon} fxprof: {run.verdict}")
        lines.append("")
        lines.append(f"Median run b/a **{run.ratio:.3f}** (95% interval {run.low:.3f} to {run.high:.3f}; "
                     f"p = {run.p_value:.2g}; {run.a_runs} and {run.b_runs} runs).")
    else:
        lines.append("## fxprof compare")
    if gate_line:
        lines += ["", f"**Gate:** {gate_line}"]
    lines += ["", f"- a: `{label_a}`", f"- b: `{label_b}`"]
    if "verdict" in diff.columns and (diff["verdict"] != "").any():
        counts = diff["verdict"].value_counts()
        lines.append(f"- nodes: {int(counts.get('slower', 0))} slower, {int(counts.get('faster', 0))} faster, "
                     f"{int(counts.get('same', 0))} same"
                     + (f", {int(counts.get('too few runs', 0))} too few runs to tell" if counts.get("too few runs", 0) else ""))
    if diff.attrs.get("test"):
        lines.append(f"- test: {diff.attrs['test']}")
    for warning in diff.attrs.get("warnings", []):
        lines.append(f"- :warning: {_escape(warning)}")  # each a sentence of its own, as the text view prints it
    shown = diff if top == 0 else diff.head(top)
    table = shown[[c for c in MARKDOWN_COLUMNS if c in shown.columns]].copy()
    for column in ("a_ms", "b_ms", "delta_ms"):
        if column in table.columns:
            table[column] = table[column].map(lambda v: "" if pd.isna(v) else f"{v:.4g}")
    if "ratio" in table.columns:
        table["ratio"] = table["ratio"].map(lambda v: "" if pd.isna(v) else f"{v:.3f}")
    if "p_value" in table.columns:
        table["p_value"] = table["p_value"].map(lambda v: "" if pd.isna(v) else f"{v:.2g}")
    table.index = [f"`{_escape(str(name))}`" for name in table.index]
    table.index.name = "node"
    table = table.map(_cell) if hasattr(table, "map") else table.applymap(_cell)
    lines += ["", table.to_markdown(), ""]
    if len(diff) > len(shown):
        lines.append(f"{len(diff) - len(shown)} more nodes (smaller changes) not shown.")
    return "\n".join(lines) + "\n"


def _escape(text: str) -> str:
    """A table cell's pipes and newlines would break the row."""
    return text.replace("|", "\\|").replace("\n", " ")


def _cell(value: Any) -> Any:
    if isinstance(value, str):
        return _escape(value)
    if isinstance(value, float) and np.isnan(value):
        return ""
    return value
