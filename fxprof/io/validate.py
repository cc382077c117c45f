"""What a saved profile may hold: the checks every loader runs, and every save before it writes.

:data:`SCHEMA` is the JSON Schema (draft 2020-12) of a saved profile (:mod:`fxprof.io.schema`,
imported here where it has always been read); it is published in ``docs/format.md``. Loaders
call, in order:

1. :func:`parse_json` (JSON text only): strict JSON, no ``NaN``/``Infinity``, no
   runaway nesting or integers, every failure a :class:`~fxprof.errors.ProfileFormatError`;
2. :func:`check_document` (JSON only): the parsed document against :data:`SCHEMA`;
3. :func:`check_profile` (any format, after the loader built a :class:`~fxprof.Profile`): the
   numbers every profile must satisfy (finite, non-negative times; run indices that exist;
   ``meta`` as the schema says, its numbers finite and plausible, its nesting bounded; every
   node's role one of :data:`fxprof.vocab.ROLES`), so a binary or other loader checks exactly
   what JSON does;

:meth:`Profile.save` runs step 3 before it writes (:func:`check_saveable`): what a save writes,
a load reads. Per-node CSV tables go through :func:`parse_table` and :func:`check_roles`.

The structure is validated by ``jsonschema``. The long sample and run columns are checked
against the same schema's item rules with numpy instead, because ``jsonschema`` takes about
17 us per array item (7 s for the 426,000 numbers of 1000 runs of resnet18).
"""

from __future__ import annotations

import json
import math
import os
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping, Sequence

import numpy as np
import pandas as pd

from ..columns import BY_NAME, signed_columns
from ..core.metakeys import BY_NAME as META_BY_NAME
from ..errors import ProfileFormatError
from ..vocab import FSDP, FSDP_STEPS, ROLES
from .schema import INT64_MAX, NPZ_HEADER_SCHEMA, SCHEMA, SCHEMA_V1

if TYPE_CHECKING:
    from ..core.profile import Profile

__all__ = ["SCHEMA", "SCHEMA_V1", "NPZ_HEADER_SCHEMA", "parse_json", "check_skeleton", "column_arrays", "check_document",
           "check_npz_header", "check_profile", "check_saveable", "check_roles", "parse_table", "MAX_META_DEPTH"]

_COLUMN_GROUPS = ("samples", "runs")
_MAX_INT_DIGITS = 20  # int64 has 19 digits
#: the longest time a profile may hold, in ms (about 31 years): a larger one is damage, and sums
#: and formats of such values overflow (1e308 ms: show and report stopped with an OverflowError)
MAX_MS = 1e12
#: the largest other number a per-node table may hold (a count of FLOPs or bytes is far below it)
MAX_NUMBER = 1e30
#: the deepest a ``meta`` value may nest (fxprof's own nest four levels at most); a deeper one is
#: damage, and the JSON writer stops at 255 levels: a profile that loaded could not be saved again
MAX_META_DEPTH = 32


def _damaged(source: str, what: str) -> ProfileFormatError:
    return ProfileFormatError(f"{source} is a damaged fxprof profile: {what}")


def _show(value: Any) -> str:
    if isinstance(value, np.generic):
        value = value.item()
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


# ----------------------------------------------------------------------- parsing
def parse_json(text: str, source: str) -> Any:
    """Strict JSON: ``NaN``/``Infinity`` and integers longer than int64 are refused, and
    nesting too deep for the parser is a :class:`ProfileFormatError`, not a ``RecursionError``."""

    def constant(name: str) -> Any:
        raise ProfileFormatError(f"{source} holds {name}, which is not JSON and no profile holds (times are finite)")

    def integer(digits: str) -> int:
        if len(digits.lstrip("-")) > _MAX_INT_DIGITS:
            raise ProfileFormatError(
                f"{source} holds an integer with {len(digits.lstrip('-'))} digits; no value in a profile has more than 19"
            )
        return int(digits)

    try:
        return json.loads(text, parse_constant=constant, parse_int=integer)
    except RecursionError:
        raise ProfileFormatError(f"{source} is not a saved fxprof profile: its JSON is nested too deeply to read") from None
    except json.JSONDecodeError as exc:
        raise ProfileFormatError(f"{source} is not a saved fxprof profile (not JSON: {exc})") from exc
    except ValueError as exc:  # e.g. a float literal Python cannot convert
        if isinstance(exc, ProfileFormatError):
            raise
        raise ProfileFormatError(f"{source} is not a saved fxprof profile (bad number: {exc})") from exc


# ---------------------------------------------------------------------- document
def check_skeleton(data: Any, source: str, schema: Mapping[str, Any]) -> None:
    """Everything of a parsed JSON document but the items of its long columns, against
    ``schema`` (:data:`SCHEMA` or :data:`SCHEMA_V1`)."""
    _check_in_bulk(data, source, schema, (*_COLUMN_GROUPS, "anatomy"))


def _check_in_bulk(data: Mapping[str, Any], source: str, schema: Mapping[str, Any], columns: Sequence[str],
                   prefix: Sequence[str] = ()) -> None:
    """``data`` against ``schema`` with jsonschema, but its long parts checked in bulk by the
    same rules: the ``columns`` groups' lists (items by :func:`_check_items` for anatomy,
    by the callers for samples and runs), and the node records one per kind."""
    import jsonschema

    skeleton = dict(data)
    for group in columns:
        if isinstance(data.get(group), dict):
            skeleton[group] = {k: ([] if isinstance(v, (list, np.ndarray)) else v) for k, v in data[group].items()}
    # node records are checked one per kind: the node rules test only each field's type (and
    # that a name is not empty), so records alike in those validate alike; 10,000 records
    # through jsonschema one by one take seconds
    records = data.get("nodes")
    firsts: dict[Any, int] = {}
    if isinstance(records, list):
        for i, record in enumerate(records):
            firsts.setdefault(_record_kind(record), i)
        skeleton["nodes"] = [records[i] for i in firsts.values()]
    validator = jsonschema.Draft202012Validator(schema)
    error = jsonschema.exceptions.best_match(validator.iter_errors(skeleton))
    if error is not None:
        parts = list(error.absolute_path)
        if len(parts) > 1 and parts[0] == "nodes":
            parts[1] = list(firsts.values())[parts[1]]  # the first record of that kind in the file
        where = _path([*prefix, *parts])
        what = f"{where}: {error.message}" if where else error.message
        if len(parts) > 1 and parts[0] == "meta":  # what the key holds, and what to do
            what += f"{_meta_words(parts[1])}. {_meta_fixes(parts[1])[1]}"
        raise _damaged(source, what)
    nodes = [n["name"] for n in data["nodes"]]
    _check_unique(nodes, source)
    rules = SCHEMA["properties"]["anatomy"]["properties"]
    where = ".".join([*prefix, "anatomy"])
    for name, values in (data.get("anatomy") or {}).items():
        if name in rules and isinstance(values, list):
            if len(values) != len(nodes):
                raise _damaged(source, f"{where}.{name} has {len(values)} values for {len(nodes)} nodes")
            try:
                _check_items(values, rules[name]["items"], f"{where}.{name}", source)
            except ProfileFormatError:  # found in bulk; worded as jsonschema words it for this column
                error = jsonschema.exceptions.best_match(
                    jsonschema.Draft202012Validator({"$schema": SCHEMA["$schema"], **rules[name]}).iter_errors(values))
                if error is None:
                    raise
                raise _damaged(source, f"{_path([*prefix, 'anatomy', name, *error.absolute_path])}: {error.message}") from None


def _record_kind(record: Any) -> Any:
    """What the node rules can tell apart in a record: each field's type, and empty strings."""
    if not isinstance(record, dict):
        return type(record)
    values = record.values()
    # "".__eq__ is True for an empty string, False for another, NotImplemented for a non-string
    return tuple(record), tuple(map(type, values)), tuple(map(_EMPTY, values))


_EMPTY = "".__eq__


def column_arrays(data: Mapping[str, Any], group: str, source: str) -> dict[str, np.ndarray]:
    """The ``samples`` or ``runs`` columns of a version 2 document as numpy arrays (int64 for
    integer columns, float64 with NaN for null otherwise), checked against :data:`SCHEMA`'s
    item rules; equal lengths. Each parsed list in ``data`` is replaced by None once its array
    is made, so the document's Python numbers and the arrays never all exist at once. Fast where the values are plain numbers: one numpy conversion
    a column, and the item-by-item check of version 1 only for a column that holds nulls or
    something else, or (integer columns, or a float column holding exact 0 or 1) that may hide
    a boolean. A column the loader already read as an array (int64 or float64 from bytes that
    hold plain numbers and nothing else: :func:`fxprof.io.jsonfile._parse_by_columns`) needs
    only the range check of its rule."""
    rules = SCHEMA["properties"][group]["properties"]
    out: dict[str, np.ndarray] = {}
    columns = data[group]
    for name in list(columns):
        values = columns[name]
        if name not in rules:
            continue
        rule = rules[name]["items"]
        integer = rule["type"] == "integer"
        where = f"{group}.{name}"
        if isinstance(values, np.ndarray):  # read from the file's bytes, plain numbers only (fxprof.io.jsonfile)
            if integer:
                _check_range(values, rule, where, source)
            out[name] = values
            columns[name] = values = None
            continue
        try:
            array = np.array(values)
        except (ValueError, OverflowError, TypeError):
            array = np.array(values, dtype=object)
        plain = array.ndim == 1 and (array.dtype.kind == "i" if integer else array.dtype.kind in "if")
        if not plain or integer or ((array == 0) | (array == 1)).any():  # a boolean may hide (True == 1)
            if not plain or set(map(type, values)) - ({int} if integer else {int, float}):
                words = "an index into nodes (an integer)" if where == "samples.node" else None
                _check_items(values, rule, where, source, words)  # the exact message; or nulls where allowed
        if integer:
            array = array.astype(np.int64) if plain else np.array(values, dtype=np.int64)
            _check_range(array, rule, where, source)
        else:
            array = array.astype(np.float64, copy=False) if plain else np.array(values, dtype=np.float64)
        out[name] = array
        columns[name] = values = None  # the parsed list goes as soon as its array exists (peak memory)
    lengths = {k: len(v) for k, v in out.items()}
    if len(set(lengths.values())) > 1:
        listed = ", ".join(f"{k} {n}" for k, n in lengths.items())
        raise _damaged(source, f"the {group} columns must all have the same length, but they have {listed}")
    if group == "samples" and len(out.get("node", ())):
        count = len(data["nodes"])
        stray = np.flatnonzero(out["node"] >= count)
        if len(stray):
            i = int(stray[0])
            raise _damaged(source, f"samples.node[{i}]: {out['node'][i]} is not an index into nodes (it has {count})")
    return out


def check_document(data: Any, source: str) -> None:
    """Check a parsed version 1 JSON document against :data:`SCHEMA_V1` (``format`` and
    ``version`` are assumed checked by the caller, which words those errors itself)."""
    check_skeleton(data, source, SCHEMA_V1)
    for group in _COLUMN_GROUPS:
        columns = data[group]
        rules = SCHEMA_V1["properties"][group]["properties"]
        lengths = {k: len(v) for k, v in columns.items() if k in rules}
        if len(set(lengths.values())) > 1:
            listed = ", ".join(f"{k} {n}" for k, n in lengths.items())
            raise _damaged(source, f"the {group} columns must all have the same length, but they have {listed}")
        for name, values in columns.items():
            if name in rules:
                _check_items(values, rules[name]["items"], f"{group}.{name}", source)
    known = {n["name"] for n in data["nodes"]}
    stray = next((i for i, name in enumerate(data["samples"]["node"]) if name not in known), None)
    if stray is not None:
        raise _damaged(source, f"samples.node[{stray}]: {_show(data['samples']['node'][stray])} is not one of the names in nodes")


def check_npz_header(header: Any, source: str) -> None:
    """Check a binary profile's parsed ``header.json`` against :data:`NPZ_HEADER_SCHEMA`:
    the same rules as the JSON format's ``meta``, ``nodes`` and ``anatomy`` (names unique and
    not empty, strings where strings belong, sizes and FLOPs whole numbers >= 0 within int64),
    and one anatomy value per node. ``format`` and ``version`` are checked by the caller."""
    _check_in_bulk(header, source, NPZ_HEADER_SCHEMA, ("anatomy",), prefix=("header",))


def _path(parts: Any) -> str:
    text = ""
    for part in parts:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


_JSON_TYPES = {
    "number": (int, float),
    "integer": (int,),
    "string": (str,),
    "null": (type(None),),
    "boolean": (bool,),
}
_TYPE_WORDS = {"number": "a number", "integer": "an integer", "string": "a string", "null": "null"}


def _check_items(values: list[Any], rule: Mapping[str, Any], where: str, source: str, words: str | None = None) -> None:
    """The item rule of a column schema (type, minimum, maximum), checked in bulk; ``words``
    says what a value must be, if not the type's name."""
    kinds = rule["type"] if isinstance(rule["type"], list) else [rule["type"]]
    allowed = tuple(t for k in kinds for t in _JSON_TYPES[k])
    found = set(map(type, values))
    if bool in found or not all(issubclass(t, allowed) for t in found):
        i = next(i for i, v in enumerate(values) if isinstance(v, bool) or not isinstance(v, allowed))
        words = words or " or ".join(_TYPE_WORDS[k] for k in kinds)
        raise _damaged(source, f"{where}[{i}]: {_show(values[i])} is not {words}")
    if "integer" in kinds and values:
        numbers = np.asarray([v for v in values if v is not None], dtype=object)
        _check_range(numbers, rule, where, source, index=[i for i, v in enumerate(values) if v is not None])


def _check_range(numbers: np.ndarray, rule: Mapping[str, Any], where: str, source: str, index: Any = None) -> None:
    what = _range_problem(numbers, rule, where, index)
    if what is not None:
        raise _damaged(source, what)


def _range_problem(numbers: np.ndarray, rule: Mapping[str, Any], where: str, index: Any = None) -> str | None:
    """The first of ``numbers`` outside the rule's minimum and maximum, in words; None if none is."""
    if not len(numbers):
        return None
    bad = np.zeros(len(numbers), dtype=bool)
    if "minimum" in rule:
        bad |= numbers < rule["minimum"]
    if "maximum" in rule:
        bad |= numbers > rule["maximum"]
    if not bad.any():
        return None
    i = int(np.flatnonzero(bad)[0])
    at = index[i] if index is not None else i
    value = numbers[i]
    limit = f"below the minimum of {rule['minimum']}" if "minimum" in rule and value < rule["minimum"] else f"above the maximum of {rule.get('maximum')}"
    return f"{where}[{at}]: {_show(value)} is {limit}"


def _plausible_problem(numbers: np.ndarray, where: str, limit: float) -> str | None:
    """The first number whose size is beyond any measurement (``limit``: :data:`MAX_MS` for
    times), in words; None if none is."""
    huge = np.abs(numbers) > limit
    if not huge.any():
        return None
    i = int(np.flatnonzero(huge)[0])
    unit = " ms" if limit == MAX_MS else ""
    return f"{where}[{i}]: {_show(numbers[i])}{unit} is beyond any measurement (at most {limit:g}{unit})"


def _within(values: np.ndarray, rule: Mapping[str, Any], limit: float) -> bool:
    """True when no value of ``values`` can fail :func:`check_profile`'s checks: none is NaN or
    infinite (either makes the minimum or maximum fail the comparisons below), and all are
    within the rule's range and ``limit``. False says only that the checks must look."""
    low, high = values.min(), values.max()
    return bool(low >= rule.get("minimum", -limit) and low >= -limit and high <= rule.get("maximum", limit) and high <= limit)


def _check_unique(names: list[str], source: str) -> None:
    seen: set[str] = set()
    for name in names:
        if name in seen:
            raise _damaged(source, f"node name {name!r} appears more than once in nodes; node names are unique")
        seen.add(name)


# ----------------------------------------------------------------------- profile
class _Problem(Exception):
    """What is wrong with a profile's data (``what``: where and what) and, where it helps, what
    to do about it in memory (``fix``, before a save) and in a file (``file_fix``, on load);
    :func:`check_profile` words it as a damaged file, :func:`check_saveable` as a save refused."""

    def __init__(self, what: str, fix: str = "", file_fix: str = "") -> None:
        super().__init__(what)
        self.what, self.fix, self.file_fix = what, fix, file_fix


def check_profile(profile: "Profile", source: str) -> None:
    """What every profile must satisfy, however it was stored; call after building it.

    Checks ``meta`` against :data:`SCHEMA` (and its numbers finite and plausible, its nesting
    at most :data:`MAX_META_DEPTH` deep), every node's role one of :data:`fxprof.vocab.ROLES`,
    that times are finite and not negative (null or NaN only where the schema allows), and that
    every sample's run index is a run the profile has. :meth:`Profile.save` runs the same checks
    before writing (:func:`check_saveable`).
    """
    try:
        _check_meta_values(profile.meta)
        _check_profile(profile, profile.meta)
    except _Problem as problem:
        raise _damaged(source, problem.what + (f". {problem.file_fix}" if problem.file_fix else "")) from None


def check_saveable(profile: "Profile", path: str | os.PathLike) -> dict[str, Any]:
    """The checks :func:`check_profile` runs on load, run before ``profile`` is written to
    ``path``: what a save writes, a load reads. Returns ``meta`` as the file will hold it (JSON
    values: tuples as lists, numpy numbers as numbers, other objects as text), which both
    formats write. Raises :class:`~fxprof.errors.ProfileFormatError` naming the value and what
    to do; nothing is written and the profile is not changed."""
    import orjson

    try:
        _check_meta_values(profile.meta)  # before JSON, which writes NaN as null without a word
        try:
            meta = orjson.loads(orjson.dumps(profile.meta, default=str,
                                             option=orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS))
        except (orjson.JSONEncodeError, TypeError) as exc:
            raise _Problem(f"meta cannot be written as JSON ({exc})", "correct or delete that value of profile.meta") from None
        _check_profile(profile, meta)
    except _Problem as problem:
        fix = problem.fix or "correct it"
        raise ProfileFormatError(
            f"cannot save the profile to {os.fspath(path)!r}: {problem.what}. Nothing was written and the profile in "
            f"memory is unchanged: {fix}, then save again"
        ) from None
    return meta


def _meta_fixes(key: Any) -> tuple[str, str]:
    """What to do about a bad ``meta[key]``: in memory, and in a file."""
    return (f"correct or delete profile.meta[{key!r}]",
            f"The file was edited or damaged: correct or delete \"meta\": {{{json.dumps(key)}: ...}} in it")


def _meta_words(key: Any) -> str:
    """`` ('iters' holds int: timed runs ...)``: what a declared meta key holds, for a message."""
    known = META_BY_NAME.get(key) if isinstance(key, str) else None
    return f" ({key!r} holds {known.type}: {known.meaning})" if known is not None else ""


def _number_limit(key: Any) -> float:
    """The largest plausible value of a number under the dict key ``key``: a time in ms at most
    :data:`MAX_MS`, in seconds the same in seconds, anything else :data:`MAX_NUMBER`."""
    name = key if isinstance(key, str) else ""
    if name.endswith("_ms"):
        return MAX_MS
    if name.endswith("_s") and not name.endswith("_per_s"):
        return MAX_MS / 1e3
    return MAX_NUMBER


def _check_meta_values(meta: Any) -> None:
    """Every number in ``meta`` (at any depth) finite, plausible (:func:`_number_limit`) and,
    if whole, within int64; no value nested deeper than :data:`MAX_META_DEPTH`. Walks without
    recursion, so a hostile depth is a :class:`_Problem`, not a ``RecursionError``."""
    if not isinstance(meta, Mapping):
        return  # the schema words it
    stack: list[tuple[Any, tuple[Any, ...], int, Any]] = [(v, (k,), 1, k) for k, v in meta.items()]
    while stack:
        value, where, depth, key = stack.pop()
        if isinstance(value, np.generic):
            value = value.item()
        if isinstance(value, bool) or value is None or isinstance(value, str):
            continue
        if isinstance(value, float):
            if not math.isfinite(value):
                raise _Problem(f"{_path(['meta', *where])} is {value!r}, not a finite number{_meta_words(where[0])}; "
                               f"a profile's numbers are finite (JSON has no NaN or infinity)", *_meta_fixes(where[0]))
            limit = _number_limit(key)
            if abs(value) > limit:
                unit = {MAX_MS: " ms", MAX_MS / 1e3: " s"}.get(limit, "")
                raise _Problem(f"{_path(['meta', *where])} is {_show(value)}{unit}, beyond any measurement (at most {limit:g}{unit})"
                               f"{_meta_words(where[0])}", *_meta_fixes(where[0]))
        elif isinstance(value, int):
            if not -INT64_MAX - 1 <= value <= INT64_MAX:
                raise _Problem(f"{_path(['meta', *where])} is {_show(value)}, a whole number beyond int64{_meta_words(where[0])}",
                               *_meta_fixes(where[0]))
        elif isinstance(value, (Mapping, list, tuple, np.ndarray)):
            if depth >= MAX_META_DEPTH:
                raise _Problem(f"meta.{where[0]} nests more than {MAX_META_DEPTH} levels deep (no value fxprof writes "
                               f"nests more than a few)", *_meta_fixes(where[0]))
            if isinstance(value, Mapping):
                stack.extend((v, (*where, k), depth + 1, k) for k, v in value.items())
            else:
                stack.extend((v, (*where, i), depth + 1, key) for i, v in enumerate(value))


def check_roles(names: Iterable[Any], roles: Iterable[Any], kinds: Iterable[Any],
                fail: Callable[[str, str, str], Exception], lines: Iterable[int] | None = None) -> None:
    """Every row's role one of :data:`fxprof.vocab.ROLES`, and a row of FSDP's steps (role
    ``fsdp``) of one of their kinds (:data:`fxprof.vocab.FSDP_STEPS`: ``fxprof.overlap`` reads
    its kind as the step: ``fsdp`` on a Linear's row is not a step of FSDP's). ``fail(what, fix,
    file_fix)`` makes the error raised for the first row that is not; ``what`` names the node
    (and its line of a CSV file, given ``lines``) and the value."""
    listed = ", ".join(ROLES)
    for name, role, kind, line in zip(names, roles, kinds, lines if lines is not None else iter(lambda: None, 0)):
        where = f"node {name!r}" + (f" (line {line})" if line is not None else "")
        file_fix = ("The file was edited or damaged: correct that role, or delete it (the \"role\" field of that node, the "
                    "role column of a CSV) and fxprof derives it from the node's target as for files from before roles")
        if not isinstance(role, str) or role not in ROLES:
            raise fail(f"{where} has the role {_show(role)}, which is not one of fxprof's roles ({listed})",
                       f"give node {name!r} one of those roles", file_fix)
        if role == FSDP and kind not in FSDP_STEPS:
            raise fail(f"{where} has the role 'fsdp' but the kind {_show(kind)}: a row of FSDP's steps has one of "
                       f"the kinds {', '.join(FSDP_STEPS)}, which fxprof.overlap reads as the step",
                       f"give node {name!r} the role its work has (a module's work is 'model')", file_fix)


def _check_profile(profile: "Profile", meta: Any) -> None:
    """The checks of :func:`check_profile` on ``profile`` with ``meta`` (its own, or as a save
    writes it); raises :class:`_Problem`."""
    import jsonschema

    meta_schema = {"$schema": SCHEMA["$schema"], **SCHEMA["properties"]["meta"]}
    error = jsonschema.exceptions.best_match(jsonschema.Draft202012Validator(meta_schema).iter_errors(meta))
    if error is not None:
        parts = list(error.absolute_path)
        key = parts[0] if parts else None
        fixes = _meta_fixes(key) if key is not None else ("give profile.meta a dict", "")
        raise _Problem(f"{_path(['meta', *parts])}: {error.message}{_meta_words(key)}", *fixes)
    check_roles((n.name for n in profile.nodes), (n.role for n in profile.nodes), (n.kind for n in profile.nodes),
                _Problem)
    columns = profile.columns  # the samples as arrays: no DataFrame of 10M rows just to check them

    def sample_column(name: str) -> Any:
        return getattr(columns, name, None) if name in columns.__slots__ and name != "names" else None

    def run_column(name: str) -> Any:
        return profile.stored_runs[name].to_numpy(dtype=np.float64, na_value=np.nan) if name in profile.stored_runs.columns else None

    for group, column in (("samples", sample_column), ("runs", run_column)):
        for name, rule in SCHEMA["properties"][group]["properties"].items():
            kinds = rule["items"]["type"]
            raw = column(name) if "number" in kinds else None
            if raw is None:
                continue
            values = np.asarray(raw, dtype=np.float64)
            limit = MAX_MS if name.endswith("_ms") else MAX_NUMBER
            if len(values) and _within(values, rule["items"], limit):  # the usual case: two passes, no error
                continue
            nan = np.isnan(values)
            if nan.any() and "null" not in kinds:
                raise _Problem(f"{group}.{name}[{int(np.flatnonzero(nan)[0])}]: a value is missing (null)")
            infinite = np.isinf(values)
            if infinite.any():
                raise _Problem(f"{group}.{name}[{int(np.flatnonzero(infinite)[0])}]: {values[infinite][0]} is not finite")
            what = (_range_problem(np.where(nan, rule["items"].get("minimum", 0), values), rule["items"], f"{group}.{name}")
                    or _plausible_problem(np.where(nan, 0.0, values), f"{group}.{name}", limit))
            if what is not None:
                raise _Problem(what)
    runs = profile.num_runs
    sample_runs = columns.run
    if runs and len(sample_runs) and sample_runs.max() >= runs:
        i = int(np.flatnonzero(sample_runs >= runs)[0])
        raise _Problem(f"samples.run[{i}] has run index {sample_runs[i]}, but the profile has {runs} runs (0 to {runs - 1})")
    if runs and not np.array_equal(profile.stored_runs["run"].to_numpy(), np.arange(runs)):
        raise _Problem("runs.run must be 0, 1, 2... in order (one entry per run)")
    known = {n.name for n in profile.nodes}
    present = np.flatnonzero(np.bincount(columns.node, minlength=len(columns.names)))  # codes with samples
    unknown = sorted({str(columns.names[code]) for code in present} - known)
    if unknown:
        raise _Problem(f"samples name node(s) {', '.join(map(repr, unknown[:3]))} that are not in nodes")


# -------------------------------------------------------------------------- CSV
_NA = ("", "nan", "NaN", "<NA>")
#: per-node table columns that may be negative (every other number never is): a node that ran
#: above its roof (data in a cache the bandwidth roof does not see) has a negative headroom
_SIGNED = signed_columns()


def parse_table(raw: pd.DataFrame, columns: Mapping[str, str], source: str) -> pd.DataFrame:
    """Turn a per-node table read as text (every cell a string) into typed columns.

    Numbers must be finite and not negative (the ``signed`` columns of fxprof/columns.py may be), integer
    columns whole numbers within int64, and every node must appear once. Returns the table
    indexed by ``node`` with ``columns``' dtypes.
    """
    empty = np.flatnonzero((raw["node"].str.strip() == "").to_numpy())
    if len(empty):
        raise ProfileFormatError(f"{source}: the node name on line {int(empty[0]) + 2} is empty; every row of a per-node "
                                 f"table names its node (as a saved profile's nodes do)")
    duplicated = raw["node"][raw["node"].duplicated()]
    if len(duplicated):
        name = duplicated.iloc[0]
        rows = [i + 2 for i in np.flatnonzero((raw["node"] == name).to_numpy())[:2]]
        raise ProfileFormatError(f"{source}: node {name!r} appears more than once (lines {rows[0]} and {rows[1]}); a per-node table has one row a node")
    out = {"node": raw["node"].astype(str)}
    for col, dtype in columns.items():
        cells = raw[col].tolist()
        if dtype == "str":
            out[col] = raw[col].astype(str)
            continue
        integer = dtype.lower() == "int64"
        values = []
        for line, cell in enumerate(cells, start=2):
            if cell in _NA:
                if dtype == "int64":
                    raise ProfileFormatError(f"{source}: column {col} is empty on line {line}; it needs a whole number")
                values.append(pd.NA if integer else math.nan)
                continue
            value = _cell_number(cell, integer, col, line, source)
            if value < 0 and col not in _SIGNED:
                raise ProfileFormatError(f"{source}: column {col} holds {cell!r} on line {line}; it is never negative")
            values.append(value)
        out[col] = (pd.array(values, dtype=dtype) if dtype != "int64" else np.asarray(values, dtype=np.int64)) if integer else np.asarray(values, dtype=np.float64)
    return pd.DataFrame(out).set_index("node")


def _cell_number(cell: str, integer: bool, col: str, line: int, source: str) -> float | int:
    text = cell.strip()
    if integer:
        digits = text.lstrip("+-")
        if not digits.isdigit() or len(digits) > _MAX_INT_DIGITS or not -INT64_MAX - 1 <= int(text) <= INT64_MAX:
            raise ProfileFormatError(f"{source}: column {col} holds {_show(cell)} on line {line}; it needs a whole number within int64")
        return int(text)
    try:
        value = float(text)
    except ValueError:
        raise ProfileFormatError(f"{source} has a non-numeric value in a numeric column: {col} holds {_show(cell)} on line {line}") from None
    if not math.isfinite(value):
        raise ProfileFormatError(f"{source}: column {col} holds {cell!r} on line {line}; numbers in a profile are finite")
    column = BY_NAME.get(col)
    limit = MAX_MS if column is not None and column.unit == "ms" else MAX_NUMBER
    if abs(value) > limit:
        raise ProfileFormatError(f"{source}: column {col} holds {_show(cell)} on line {line}, beyond any measurement "
                                 f"(at most {limit:g}{' ms' if limit == MAX_MS else ''})")
    return value


if __name__ == "__main__":  # pragma: no cover - prints the schema published in docs/format.md
    print(json.dumps(SCHEMA, indent=2))
