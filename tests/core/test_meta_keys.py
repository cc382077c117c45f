"""Every key a profile's ``meta`` carries is declared once, in :mod:`fxprof.core.metakeys`.

The test walks fxprof's source with :mod:`ast` and collects every string-literal key used on a
mapping that is a profile's meta: a variable named ``meta`` (or ``*_meta``), an attribute
``.meta``; read (``meta["k"]``, ``meta.get("k")``, ``"k" in meta``), written (``meta["k"] = ``,
``meta.setdefault("k")``, ``meta.pop("k")``, ``meta.update(k=...)``, ``meta.update({"k": ...})``)
or built (a dict literal assigned to ``meta`` or spreading ``**meta``); inside a function, a name
bound to a copy of a meta (``out = dict(meta)``, ``{k: v for k, v in meta.items()}``, a copy of
``metas[i]``) counts too. It fails on a key used but not declared, and on a declared key used
nowhere. What it cannot see (keys written through a
computed mapping, e.g. ``meta.update(captured.notes)`` or ``meta.update(ranks.meta())``) is
declared with ``computed=True`` and is counted as used when its writer names it in a dict literal
or keyword (``notes["fsdp"] = ...``, ``{"rank": ...}``) anywhere in fxprof.
"""

from __future__ import annotations

import ast
import pathlib
from collections import defaultdict

import pytest

from fxprof.core.metakeys import META_KEYS

ROOT = pathlib.Path(__file__).resolve().parents[2] / "fxprof"

#: mappings named ``meta`` that are not a profile's: (file, receiver as written) -> what they are
OTHER_MAPPINGS = {
    ("views/ab.py", "meta"): "fxprof ab's verdict facts (rounds, alpha...)",
    ("cli/ab.py", "meta"): "fxprof ab's verdict facts",
    ("cli/ab.py", "result.meta"): "fxprof ab's verdict facts",
    ("core/generation.py", "self.meta"): "a Generation's facts (fxprof.generate)",
    ("core/generation.py", "m"): "a Generation's facts",
    ("views/generation.py", "result.meta"): "a Generation's facts",
    ("generate.py", "meta"): "the Generation's facts that fxprof.generate builds",
    ("core/whatif.py", "self.meta"): "a WhatIf's facts (fxprof.whatif)",
    ("views/whatif.py", "meta"): "a WhatIf's facts",
    ("views/whatif.py", "result.meta"): "a WhatIf's facts",
    ("measure/compiled/compiling.py", "meta"): "a torch compile trace record's metadata",
    ("views/chrome_trace.py", "other"): "a Chrome trace's otherData: meta's plain values, and trace_runs",
}
#: receivers whose ``.meta`` is a torch.fx node's or graph module's, not a profile's
FX_RECEIVERS = {"node", "n", "gm", "free", "fresh", "new", "out", "placeholder", "user"}


def _text(node: ast.AST) -> str:
    return ast.unparse(node)


def _is_meta(node: ast.AST, rel: str, aliases: frozenset[str] = frozenset()) -> bool:
    if isinstance(node, ast.Name):
        named = node.id == "meta" or node.id.endswith("_meta") or node.id in aliases
    elif isinstance(node, ast.Attribute):
        named = node.attr == "meta" and not (isinstance(node.value, ast.Name) and node.value.id in FX_RECEIVERS)
    else:
        return False
    return named and (rel, _text(node)) not in OTHER_MAPPINGS


def _str(node: ast.AST | None) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def _dict_keys(node: ast.Dict) -> list[str]:
    return [k for k in (_str(key) for key in node.keys if key is not None) if k is not None]


def _aliases(scope: ast.AST, rel: str) -> frozenset[str]:
    """Names a function binds to a copy of a profile's meta (``out = dict(meta)``)."""
    names = set()
    for node in ast.walk(scope):
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            value = node.value
            if isinstance(value, ast.Call) and _text(value.func) == "dict" and len(value.args) == 1:
                value = value.args[0]
            if isinstance(value, ast.DictComp) and isinstance(value.generators[0].iter, ast.Call):
                value = value.generators[0].iter.func  # {k: v for k, v in meta.items() ...}
                value = value.value if isinstance(value, ast.Attribute) else value
            if isinstance(value, ast.Subscript):  # metas[0]
                value = value.value
                if isinstance(value, ast.Name) and value.id == "metas":
                    names.add(node.targets[0].id)
                continue
            if _is_meta(value, rel):
                names.add(node.targets[0].id)
    return frozenset(names)


def meta_key_uses() -> dict[str, set[str]]:
    """key -> the files (relative to fxprof/) that use it on a profile's meta."""
    uses: dict[str, set[str]] = defaultdict(set)
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if rel == "core/metakeys.py":
            continue
        tree = ast.parse(path.read_text(), str(path))
        # each function with the names it binds to a copy of a profile's meta (duplicates are harmless)
        scopes = [(tree, frozenset())] + [(f, _aliases(f, rel)) for f in ast.walk(tree)
                                          if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))]
        for scope, aliases in scopes:
            for key in _keys_used(scope, rel, aliases):
                uses[key].add(rel)
    return uses


def _keys_used(scope: ast.AST, rel: str, aliases: frozenset[str]) -> list[str]:
    keys: list[str] = []
    for node in ast.walk(scope):
        found: list[str] = []
        if isinstance(node, ast.Subscript) and _is_meta(node.value, rel, aliases):
            found = [k for k in [_str(node.slice)] if k]
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and _is_meta(node.func.value, rel, aliases):
            if node.func.attr in ("get", "setdefault", "pop") and node.args:
                found = [k for k in [_str(node.args[0])] if k]
            elif node.func.attr == "update":
                found = [kw.arg for kw in node.keywords if kw.arg]
                found += [k for arg in node.args if isinstance(arg, ast.Dict) for k in _dict_keys(arg)]
        elif isinstance(node, ast.Compare) and len(node.ops) == 1 and isinstance(node.ops[0], (ast.In, ast.NotIn)):
            if _is_meta(node.comparators[0], rel, aliases):
                found = [k for k in [_str(node.left)] if k]
        elif isinstance(node, (ast.Assign, ast.AnnAssign)) and isinstance(node.value, ast.Dict):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(_is_meta(t, rel, aliases) for t in targets):
                found = _dict_keys(node.value)
        if isinstance(node, ast.Call) and _text(node.func).split(".")[-1] in ("Profile", "from_recording"):
            # Profile(..., meta={...}): other records (WhatIf, Generation) take a meta= too
            found = found + [k for kw in node.keywords if kw.arg == "meta" and isinstance(kw.value, ast.Dict)
                             for k in _dict_keys(kw.value)]
        if isinstance(node, ast.Dict) and any(k is None and _is_meta(v, rel, aliases) for k, v in zip(node.keys, node.values)):
            found = found + _dict_keys(node)  # {**meta, "k": ...}: a profile's meta with more keys
        keys += found
    return keys



def _named_anywhere() -> set[str]:
    """Every string that fxprof's source uses as a dict key or a keyword argument."""
    names: set[str] = set()
    for path in ROOT.rglob("*.py"):
        if path.relative_to(ROOT).as_posix() == "core/metakeys.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Dict):
                names.update(_dict_keys(node))
            elif isinstance(node, ast.Subscript) and _str(node.slice):
                names.add(_str(node.slice))  # type: ignore[arg-type]
            elif isinstance(node, ast.keyword) and node.arg:
                names.add(node.arg)
            elif isinstance(node, ast.ClassDef) and node.name == "CaptureNotes":  # typed notes: a field is a key
                names.update(t.target.id for t in node.body if isinstance(t, ast.AnnAssign) and isinstance(t.target, ast.Name))
    return names


def test_capture_notes_are_declared_meta_keys():
    """A capture's notes are typed fields (``CaptureNotes``), written as meta keys of the same name."""
    import dataclasses

    from fxprof.measure.capture.base import CaptureNotes

    declared = {k.name: k for k in META_KEYS}
    fields = [f.name for f in dataclasses.fields(CaptureNotes)]
    assert fields and all(name in declared and declared[name].computed for name in fields), fields
    notes = CaptureNotes(nested_compile=["b"], nested_compile_note="b profiled uncompiled")
    assert notes.meta() == {"nested_compile": ["b"], "nested_compile_note": "b profiled uncompiled"}
    with pytest.raises(TypeError, match="no capture note is declared as 'ddp'"):
        notes.add("ddp", object())


def test_every_key_used_is_declared():
    declared = {k.name for k in META_KEYS}
    undeclared = {k: sorted(files) for k, files in meta_key_uses().items() if k not in declared}
    assert not undeclared, f"meta keys used but not declared in fxprof/core/metakeys.py: {undeclared}"


def test_every_declared_key_is_used():
    uses = meta_key_uses()
    named = _named_anywhere()
    unused = [k.name for k in META_KEYS if k.name not in uses and not (k.computed and k.name in named)]
    assert not unused, f"declared in fxprof/core/metakeys.py but used nowhere: {unused}"


def test_declared_once_and_described():
    names = [k.name for k in META_KEYS]
    assert len(names) == len(set(names))
    for key in META_KEYS:
        assert key.type and key.writer and key.meaning, key.name


def test_the_file_schema_checks_the_declared_keys():
    from fxprof.core.metakeys import schema_keys
    from fxprof.io.validate import SCHEMA, SCHEMA_V1

    declared = [name for name, _ in schema_keys()]
    for schema in (SCHEMA, SCHEMA_V1):
        assert list(schema["properties"]["meta"]["properties"]) == declared


def _profile(meta):
    import pandas as pd

    from fxprof.core.nodes import NodeInfo
    from fxprof.core.profile import Profile

    samples = pd.DataFrame({"node": ["a"], "run": [0], "time_ms": [1.0], "host_ms": [1.0]})
    return Profile([NodeInfo(name="a", op="call_function", target="f", module_type="", scope="", range="")], samples,
                   pd.DataFrame({"run": [0], "total_ms": [1.0]}), meta)


def test_what_code_branches_on_is_read_from_the_declared_keys():
    eager = _profile({"capture": "symbolic"})
    assert (eager.capture, eager.is_compiled, eager.compiled, eager.is_isolated) == ("symbolic", False, {}, False)
    compiled = _profile({"capture": "compiled", "compiled": {"compile_s": 1.5}, "mode": "timed"})
    assert (compiled.capture, compiled.is_compiled, compiled.compiled, compiled.is_isolated) == (
        "compiled", True, {"compile_s": 1.5}, False)
    # compiled facts alone do not make a compiled profile: the capture says it (one definition)
    assert not _profile({"compiled": {"compile_s": 1.5}}).is_compiled
    assert _profile({"mode": "isolated"}).is_isolated
    assert _profile({}).capture is None
    for name in ("capture", "compiled", "mode"):
        assert name in {k.name for k in META_KEYS}
