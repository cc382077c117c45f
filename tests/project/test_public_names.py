"""``fxprof.__all__`` is the one list of public names (issue 59): each is importable, imported
from where ``_LAZY`` says at run time and under ``if TYPE_CHECKING:`` for type checkers, and
every ``fxprof.NAME`` the README and docs/ mention is one of them or a subpackage."""

from __future__ import annotations

import ast
import importlib
import pathlib
import re

import fxprof

ROOT = pathlib.Path(__file__).resolve().parents[2]
INIT = ROOT / "fxprof" / "__init__.py"


def _type_checking_imports() -> dict[str, tuple[str, str]]:
    """name -> (module under fxprof, attribute) for the imports under ``if TYPE_CHECKING:``."""
    tree = ast.parse(INIT.read_text(encoding="utf-8"))
    blocks = [n for n in tree.body if isinstance(n, ast.If) and isinstance(n.test, ast.Name) and n.test.id == "TYPE_CHECKING"]
    assert len(blocks) == 1
    out: dict[str, tuple[str, str]] = {}
    for node in ast.walk(blocks[0]):
        if isinstance(node, ast.ImportFrom):
            assert node.level == 1 and node.module, ast.unparse(node)
            for alias in node.names:
                name = alias.asname or alias.name
                assert name not in out, f"{name} imported twice"
                out[name] = (node.module, alias.name)
    return out


def test_all_is_the_lazy_table_and_has_no_repeats():
    assert len(fxprof.__all__) == len(set(fxprof.__all__))
    assert set(fxprof.__all__) == {"__version__"} | set(fxprof._LAZY)


def test_type_checkers_see_every_public_name_from_where_it_is_imported():
    assert _type_checking_imports() == fxprof._LAZY


def test_every_public_name_imports_and_is_the_defining_modules_object():
    for name in fxprof.__all__:
        value = getattr(fxprof, name)
        if name == "__version__":
            assert isinstance(value, str)
            continue
        module, attr = fxprof._LAZY[name]
        assert value is getattr(importlib.import_module(f"fxprof.{module}"), attr), name
    namespace: dict[str, object] = {}
    exec("from fxprof import *", namespace)
    assert set(namespace) - {"__builtins__"} == set(fxprof.__all__)
    assert set(fxprof.__all__) <= set(dir(fxprof))


def test_the_docs_name_only_public_names_and_subpackages():
    docs = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    named = {m for path in docs for m in re.findall(r"\bfxprof\.([A-Za-z_]\w*)", path.read_text(encoding="utf-8"))}
    submodules = {p.stem for p in (ROOT / "fxprof").glob("*.py")} | {p.name for p in (ROOT / "fxprof").iterdir() if (p / "__init__.py").exists()}
    assert {"profile", "load", "whatif", "overlap"} <= named
    dunders = {name for name in named if name.startswith("__") and hasattr(fxprof, name)}  # fxprof.__all__
    unknown = sorted(named - set(fxprof.__all__) - submodules - dunders)
    assert not unknown, f"the docs name fxprof.{unknown}, which fxprof does not export"
