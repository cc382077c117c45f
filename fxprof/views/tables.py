"""Text tables that read well: times with units that suit their size, and tables that fit.

Renderers format, they never time. Everything here works on values already derived from the
raw samples; the data (``Profile.df``, the CSV) keeps full precision in milliseconds, and only
what is printed is rounded.

- :func:`format_ms`: a time in ms as ``1.57 ms``, ``18.3 us``, ``2.35 s`` (3 significant
  figures), so that 1 us never prints as ``0.0010``.
- :func:`terminal_width`: the width to fit, from ``COLUMNS`` or the terminal; ``None`` when
  output goes to a file or a pipe (nothing is hidden there).
- :func:`render_fitted`: a table rendered with tabulate; when wider than the width, long names
  are shortened in the middle and then the least important columns are dropped, and the
  caller gets the list of what was hidden to say so.
"""

from __future__ import annotations

import math
import os
import re
import shutil
import sys
from typing import Any, Callable, Iterable, Sequence

import pandas as pd
from tabulate import tabulate

from ..columns import number_format

__all__ = ["model_label", "ranked", "format_ms", "format_count", "terminal_width", "render_fitted", "display_name", "TIME_UNITS", "change_label",
           "shorten_all"]

def model_label(item: Any) -> str:
    """The name a figure's title gives a profile (its model's), or ``profile`` for a table."""
    meta = getattr(item, "meta", None)
    return str(meta.get("model", "model")) if isinstance(meta, dict) else "profile"


#: (unit, milliseconds per unit), largest first
TIME_UNITS = (("s", 1000.0), ("ms", 1.0), ("us", 1e-3), ("ns", 1e-6))
#: text cells are shortened to this many characters first when a table is too wide
_SHORT = 24
_SHORTEST = 12
_ELLIPSIS = "…"


def _isna(value: Any) -> bool:
    try:
        return bool(pd.isna(value))
    except (TypeError, ValueError):
        return False


def format_ms(value_ms: Any, digits: int = 3, sign: bool = False) -> str:
    """A time given in milliseconds, with the unit that suits its size, to ``digits``
    significant figures: ``1.5655`` -> ``1.57 ms``, ``0.0183`` -> ``18.3 us``, ``0.001`` ->
    ``1.00 us``, ``2345.0`` -> ``2.35 s``; ``0`` -> ``0``; NaN -> ``""``. With ``sign``, a
    positive value gets a ``+`` (for differences)."""
    if value_ms is None or _isna(value_ms):
        return ""
    value = float(value_ms)
    if math.isinf(value):
        return ("+" if sign and value > 0 else "") + ("inf" if value > 0 else "-inf")
    if value == 0:
        return "0"
    # round to the significant figures first, so that 999.96 us becomes 1.00 ms, not 1000 us
    exponent = math.floor(math.log10(abs(value)))
    value = round(value, digits - 1 - exponent)
    unit, scale = next(((u, s) for u, s in TIME_UNITS if abs(value) >= s), TIME_UNITS[-1])
    scaled = value / scale
    decimals = max(0, digits - 1 - math.floor(math.log10(abs(scaled)))) if scaled else 0
    text = f"{scaled:.{decimals}f} {unit}"
    return f"+{text}" if sign and value > 0 else text


def change_label(ratio: Any, verdict: str = "") -> str:
    """A node's change (``ratio`` = b/a of the median times) in words a reader gets right:
    ``6.4x faster`` for a ratio of 0.156 judged faster, ``1.3x slower`` for 1.3 judged slower,
    else ``0.98x the time`` (no verdict, or ``same``: within noise); ``""`` without a ratio,
    ``b only``/``new`` cases included. A ratio of 0 judged faster is ``all of its time saved``."""
    if ratio is None or _isna(ratio):
        return ""
    r = float(ratio)
    if verdict == "faster" and r < 1.0:
        return f"{1.0 / r:.2g}x faster" if r > 0 else "all of its time saved"
    if verdict == "slower" and r > 1.0:
        return f"{r:.2g}x slower" if not math.isinf(r) else "slower"
    note = {"same": " (same)", "too few runs": " (too few runs to tell)", "noisy": " (noisy)"}.get(verdict, "")
    return f"{r:.2f}x the time" + note


def format_count(value: Any) -> str:
    """An integer with thousands separators; ``""`` when missing."""
    if value is None or _isna(value):
        return ""
    return f"{int(value):,}"


def _format_float(spec: str) -> Callable[[Any], str]:
    return lambda v: "" if v is None or _isna(v) else format(float(v), spec)


#: headers that say what a column holds better than its name: ``delta_pct`` is the change of a
#: node's share of the run in percentage points (a node 3.4x faster reads +3.0), not a change in %
HEADERS = {"delta_pct": "delta_pts"}


def display_name(column: str) -> str:
    """The header of a column in a rendered table: times carry their unit in every cell, so
    ``median_ms`` is shown as ``median``; other names are kept (but :data:`HEADERS`)."""
    if column in HEADERS:
        return HEADERS[column]
    if "mem_" in column and column.endswith("_bytes"):
        return column[: -len("_bytes")]  # memory cells carry their unit: mem_peak
    return column[: -len("_ms")] if column.endswith("_ms") else column


#: how the columns of other tables (comparisons, roll-ups' extras) are printed; the per-node
#: table's columns are printed by their unit (fxprof/columns.py: ``Column.format``)
FORMATTERS: dict[str, Callable[[Any], str]] = {
    "a_pct": _format_float(".1f"),
    "b_pct": _format_float(".1f"),
    "delta_pct": _format_float("+.1f"),
    "ratio": _format_float(".3f"),
    "p_value": _format_float(".2g"),
    "vs_median": _format_float(".2f"),
    "bwd_fwd_ratio": _format_float(".2f"),
    "delta_ms": lambda v: format_ms(v, sign=True),
    "error_ms": lambda v: format_ms(v, sign=True),
}

#: a comparison's columns of a per-node column: each side's value and the change (signed)
_SIDES = ("a_", "b_", "delta_")


def _by_format(fmt: str, dtype: Any, sign: bool = False) -> Callable[[Any], str]:
    if fmt == "ms":
        return (lambda v: format_ms(v, sign=True)) if sign else format_ms
    if fmt == "bytes":
        from .memory import format_bytes

        return (lambda v: format_bytes(v, sign=True)) if sign else format_bytes
    if fmt == "count":  # a whole number; the same column held as floats elsewhere prints as a float
        return format_count if pd.api.types.is_integer_dtype(dtype) else _format_float(".4g")
    return _format_float(fmt)


def formatter_for(column: str, dtype: Any) -> Callable[[Any], str] | None:
    """The formatter of a column, or None for text columns."""
    if column in FORMATTERS:
        return FORMATTERS[column]
    fmt = number_format(column)
    if fmt is not None:
        return _by_format(fmt, dtype)
    side = next((s for s in _SIDES if column.startswith(s)), None)
    if side is not None and number_format(column[len(side):]) == "bytes":  # a_mem_peak_bytes, delta_mem_peak_bytes
        return _by_format("bytes", dtype, sign=side == "delta_")
    if column.endswith("_ms"):
        return format_ms
    if pd.api.types.is_integer_dtype(dtype):
        return format_count
    if pd.api.types.is_float_dtype(dtype):
        return _format_float(".4g")
    return None


def format_frame(frame: pd.DataFrame) -> tuple[pd.DataFrame, list[str]]:
    """Every cell of ``frame`` as text; also the columns that hold numbers (right-aligned)."""
    out = pd.DataFrame(index=frame.index)
    numeric = []
    for col in frame.columns:
        fmt = formatter_for(col, frame[col].dtype)
        if fmt is None:
            out[col] = ["" if _isna(v) else str(v) for v in frame[col]]
        else:
            out[col] = [fmt(v) for v in frame[col]]
            numeric.append(col)
    return out, numeric


def terminal_width(stream: Any = None) -> int | None:
    """The width a table should fit: ``COLUMNS`` when set, else the terminal's width when
    ``stream`` (default stdout) is a terminal, else None (a file or a pipe: no limit)."""
    env = os.environ.get("COLUMNS", "").strip()
    if env.isdigit() and int(env) > 0:
        return int(env)
    stream = stream if stream is not None else sys.stdout
    try:
        if stream.isatty():
            return shutil.get_terminal_size().columns
    except (AttributeError, ValueError, OSError):
        pass
    return None


def shorten(text: str, limit: int) -> str:
    """``text`` cut in the middle to ``limit`` characters (module paths differ at both ends)."""
    if len(text) <= limit:
        return text
    head = (limit - 1) // 2
    tail = limit - 1 - head
    return text[:head] + _ELLIPSIS + text[len(text) - tail:]


_SEPARATORS = "._:/"


def _common_prefix(a: str, b: str) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def _shorten_around(text: str, limit: int, at: int) -> str:
    """``text`` cut to ``limit`` characters keeping the word around position ``at`` (where it
    differs from a name that would otherwise look the same), with as much of both ends as fits:
    ``encoder_layer_0_intermediate_dense`` -> ``encod…layer_0…iate_dense``."""
    at = min(max(at, 0), len(text) - 1)
    start = at
    while start > 0 and text[start - 1] not in _SEPARATORS and at - start < 8:
        start -= 1  # the start of the word that differs
    if start > 1 and text[start - 1] in _SEPARATORS:  # and the word before it, when short (layer_0)
        before = start - 1
        while before > 0 and text[before - 1] not in _SEPARATORS and start - before < 7:
            before -= 1
        if before == 0 or text[before - 1] in _SEPARATORS:
            start = before
    end = at + 1
    while end < len(text) and text[end] not in _SEPARATORS and end - at < 8:
        end += 1
    if end - start > max(limit - 4, 1):  # the words do not fit: the difference and what precedes it
        start, end = max(at - max(limit - 4, 1) + 1, 0), at + 1
    window = text[start:end]
    rest = len(text) - end
    budget = limit - len(window) - (start > 0) - (rest > 0)
    if budget < 0:
        return (_ELLIPSIS + text[max(at - limit + 3, 0):at + 1] + _ELLIPSIS)[-limit:] if limit > 2 else text[at]
    if rest <= budget - min(start, budget // 3):  # the end fits whole after the word
        head = limit - len(window) - rest - 1
        return (text[:head] + _ELLIPSIS if start > head else text[:start]) + window + text[end:]
    head = min(start, budget // 3)
    tail = limit - len(window) - 1 - head - (start > head)
    return text[:head] + (_ELLIPSIS if start > head else "") + window + _ELLIPSIS + (text[len(text) - tail:] if tail > 0 else "")


_INDEX = re.compile(r"(?<=[._:/])\d+(?=[._:/]|$)")


def _shorten_keeping_index(text: str, limit: int) -> str:
    """:func:`shorten`, except that a module index the middle cut would drop (the ``0`` of
    ``encoder.layer.0.attention.self.query``) is kept: it is what tells repeated blocks apart."""
    short = shorten(text, limit)
    if short == text or limit < 8:
        return short
    head = (limit - 1) // 2
    tail_from = len(text) - (limit - 1 - head)
    cut = [m for m in _INDEX.finditer(text) if m.start() >= head and m.end() <= tail_from]
    return _shorten_around(text, limit, cut[0].start()) if cut else short


def shorten_all(values: Sequence[str], limit: int) -> list[str]:
    """Every value cut in the middle to ``limit`` characters (:func:`shorten`), except that two
    different values never come out the same: where the middle cut would make them look alike
    (``encoder_lay…ediate_dense`` for layers 0 and 1), each keeps the part where it differs
    from the others (``encod…layer_0…iate_dense``, ``encod…layer_1…iate_dense``)."""
    out = [_shorten_keeping_index(v, limit) for v in values]
    seen: dict[str, set[str]] = {}
    for value, short in zip(values, out):
        seen.setdefault(short, set()).add(value)
    fixed: dict[str, str] = {}
    for group in seen.values():
        if len(group) < 2:
            continue
        for value in group:
            at = max(_common_prefix(value, other) for other in group if other != value)
            fixed[value] = _shorten_around(value, limit, at)
    out = [fixed.get(value, short) for value, short in zip(values, out)]
    # names that differ in more than one place (stages_0_blocks_1_... and stages_1_blocks_0_...):
    # keeping one difference makes others alike; keep every word where they differ, adding words
    # until no two names look the same
    keep: dict[str, set[int]] = {}
    for _ in range(8):
        groups: dict[str, set[str]] = {}
        for value, short in zip(values, out):
            groups.setdefault(short, set()).add(value)
        groups = {k: g for k, g in groups.items() if len(g) > 1}
        if not groups:
            break
        for group in groups.values():
            for value in group:
                keep.setdefault(value, set()).update(_differing_words(value, group))
                fixed[value] = _shorten_keeping_words(value, keep[value], limit)
        out = [fixed.get(value, short) for value, short in zip(values, out)]
    # too narrow for the words that differ (12 characters): number the look-alikes, in name order
    groups = {}
    for value, short in zip(values, out):
        groups.setdefault(short, set()).add(value)
    alike = sorted(v for group in groups.values() if len(group) > 1 for v in group)
    shown = dict(zip(values, out))
    for k, value in enumerate(alike, 1):  # one count over all of them: a cut never makes two alike
        mark = f"#{k}"
        fixed[value] = shown[value][:max(limit - len(mark), 0)] + mark
    return [fixed.get(value, short) for value, short in zip(values, out)]


_WORDS = re.compile(r"([._:/])")


def _differing_words(value: str, group: Iterable[str]) -> set[int]:
    """Few places of words that together tell ``value`` from every other name of ``group``:
    chosen greedily, the word that tells it from the most names first (an index before other
    words, a later word before an earlier one: ``block2_block2_1`` needs only its ``1``)."""
    words = _WORDS.split(value)[0::2]
    apart: list[set[int]] = []  # per other name, the places where it differs
    for other in group:
        if other == value:
            continue
        theirs = _WORDS.split(other)[0::2]
        places = {i for i, (a, b) in enumerate(zip(words, theirs)) if a != b}
        if len(words) != len(theirs):
            places.add(min(len(words), len(theirs), len(words) - 1))
        apart.append(places)
    chosen: set[int] = set()
    while True:
        left = [places for places in apart if places and not places & chosen]
        if not left:
            return chosen
        counts: dict[int, int] = {}
        for places in left:
            for i in places:
                counts[i] = counts.get(i, 0) + 1
        chosen.add(max(counts, key=lambda i: (counts[i], words[i].isdigit(), i)))


def _shorten_keeping_words(value: str, differ: set[int], limit: int) -> str:
    """``value`` cut to ``limit`` characters keeping the words at ``differ`` (with the short word
    naming an index: ``blocks_1``) and as much of its end as fits:
    ``stages_0_blocks_1_norm_permute_layer_norm`` -> ``stages_0_blocks_1…norm``."""
    parts = _WORDS.split(value)  # words at even places, separators between
    words = parts[0::2]
    text = value
    for labelled in (True, False):
        keep = set(differ)
        if labelled:  # the word naming a differing index: blocks_1, layer_0
            keep |= {i - 1 for i in differ if i and words[i].isdigit() and not words[i - 1].isdigit()}
        text = _join_kept(parts, keep)
        tail = len(words)
        while tail > 0 and tail - 1 not in keep:  # as many whole words of the end as fit
            longer = _join_kept(parts, keep | set(range(tail - 1, len(words))))
            if len(longer) > limit:
                break
            text, tail = longer, tail - 1
        if len(text) <= limit:
            return text
    return shorten(text, limit)


def _join_kept(parts: Sequence[str], keep: set[int]) -> str:
    """The words of ``parts`` at ``keep`` with their separators, ``…`` where words are left out."""
    pieces: list[str] = []
    last = -2
    for i in sorted(keep):
        if pieces and i != last + 1:
            pieces.append(_ELLIPSIS)
        elif pieces:
            pieces.append(parts[2 * i - 1])
        elif i > 0:
            pieces.append(_ELLIPSIS)
        pieces.append(parts[2 * i])
        last = i
    if last < len(parts) // 2:
        pieces.append(_ELLIPSIS)
    return "".join(pieces)


def _render(cells: pd.DataFrame, numeric: Sequence[str], index_name: str) -> str:
    rows = cells.reset_index()
    headers = [index_name] + [display_name(c) for c in cells.columns]
    align = ["left"] + ["right" if c in numeric else "left" for c in cells.columns]
    return tabulate(rows.values.tolist(), headers=headers, tablefmt="simple", colalign=align, disable_numparse=True)


def _width(text: str) -> int:
    return max((len(line) for line in text.splitlines()), default=0)


def render_fitted(
    frame: pd.DataFrame,
    width: int | None = None,
    keep: Iterable[str] = (),
    index_name: str | None = None,
    drop_first: Sequence[str] = (),
) -> tuple[str, list[str], bool]:
    """Render ``frame`` (index first) as a text table no wider than ``width``.

    When the table is too wide, text cells (names, scopes, shapes) are shortened in the middle,
    first to 24 characters and then to 12, and columns are dropped: those in ``drop_first`` in
    that order, then the others from the right; never the index nor a column in ``keep``. Returns the text, the columns dropped, and whether any
    cell was shortened.
    """
    cells, numeric = format_frame(frame)
    index_name = index_name or frame.index.name or ""
    cells.index = [("" if _isna(v) else str(v)) for v in cells.index]
    text = _render(cells, numeric, index_name)
    if width is None or _width(text) <= width:
        return text, [], False
    keep = set(keep)
    dropped: list[str] = []
    shortened = False
    text_columns = [c for c in cells.columns if c not in numeric]
    full_index, full = list(cells.index), {c: list(cells[c]) for c in text_columns}
    for limit in (_SHORT, _SHORTEST):  # each time from the full text, so that names stay distinct
        before = cells.copy()
        cells.index = shorten_all(full_index, limit)
        for col in text_columns:
            if col in cells.columns:
                cells[col] = shorten_all(full[col], limit)
        shortened = shortened or not (before.equals(cells) and list(before.index) == list(cells.index))
        text = _render(cells, numeric, index_name)
        if _width(text) <= width:
            return text, dropped, shortened
        if limit == _SHORT:  # then drop columns, rightmost first, before cutting names shorter
            order = [c for c in drop_first if c in cells.columns]
            order += [c for c in reversed(list(cells.columns)) if c not in order]
            for col in order:
                if col in keep:
                    continue
                cells = cells.drop(columns=[col])
                dropped.insert(0, col)
                text = _render(cells, numeric, index_name)
                if _width(text) <= width:
                    return text, dropped, shortened
    return text, dropped, shortened


def hidden_note(dropped: Sequence[str], shortened: bool, width: int | None) -> str:
    """One line saying what a fitted table left out, or ""."""
    if dropped:
        text = f"hidden to fit {width} columns: {', '.join(display_name(c) for c in dropped)}"
        text += "; long names shortened" if shortened else ""
    elif shortened:
        text = f"long names shortened to fit {width} columns"
    else:
        return ""
    return text + " (widen the terminal, set COLUMNS, or choose columns)"


def ranked(table: pd.DataFrame, sort: str | None, ascending: bool = False, bookkeeping: bool = False) -> tuple[pd.DataFrame, str]:
    """A per-node table sorted for showing, and the line that says what was set aside.

    A sorted table is a ranking: unless ``bookkeeping``, the enter/exit nodes of
    ``record_function`` ranges (:func:`fxprof.core.rollup.is_bookkeeping`) leave it, and the
    returned line states their count and summed share (their time still counts in every
    share). ``cum_pct`` then runs over the ranked nodes. In graph order (``sort=None``) or by
    name (``sort="node"``) every node stays: neither is a ranking."""
    from ..core.names import is_weight_input, weight_inputs_note
    from ..core.profile import sort_table
    from ..core.rollup import bookkeeping_note, is_bookkeeping

    if sort is None or sort == (table.index.name or "node") or bookkeeping or "kind" not in table.columns:
        return sort_table(table, sort, ascending), ""
    mask = is_bookkeeping(table) | is_weight_input(table)
    if not mask.any():
        return sort_table(table, sort, ascending), ""
    notes = "\n".join(n for n in (bookkeeping_note(table), weight_inputs_note(table)) if n)
    return sort_table(table[~mask], sort, ascending), notes
