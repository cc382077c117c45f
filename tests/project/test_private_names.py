"""No fxprof module imports another module's private names (issue 59): a helper that two modules
share is public in the module that defines it. ruff's import-private-name (PLC2701) cannot say
this: it lets a package import its own privates and flags torch's, which fxprof needs."""

from __future__ import annotations

import ast
import pathlib

PACKAGE = pathlib.Path(__file__).resolve().parents[2] / "fxprof"


def _module_name(path: pathlib.Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _source(node: ast.ImportFrom, module: str, is_package: bool) -> str:
    if not node.level:
        return node.module or ""
    base = module.split(".") if is_package else module.split(".")[:-1]
    if node.level > 1:
        base = base[: -(node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def private_imports() -> list[str]:
    """``path:line: from module import _name`` for every fxprof import of another fxprof module's
    private name (a name with one leading underscore), inside functions too."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        module = _module_name(path)
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.ImportFrom):
                continue
            source = _source(node, module, path.name == "__init__.py")
            if source != "fxprof" and not source.startswith("fxprof."):
                continue
            for alias in node.names:
                if alias.name.startswith("_") and not alias.name.startswith("__"):
                    found.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno}: from {source} import {alias.name}")
    return found


def test_no_module_imports_another_modules_private_names():
    found = private_imports()
    assert not found, "make these shared helpers public where they are defined:\n" + "\n".join(found)


def test_the_check_sees_relative_and_absolute_imports():
    tree = ast.parse("from ..core.stats import _x\nfrom fxprof.io import _y\nfrom . import __version__\n")
    nodes = [n for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
    assert [_source(n, "fxprof.views.text", False) for n in nodes] == ["fxprof.core.stats", "fxprof.io", "fxprof.views"]
    assert _source(nodes[2], "fxprof.views", True) == "fxprof.views"
