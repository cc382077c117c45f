"""The package's layers (docs/architecture.md): checked by import-linter, and by what they promise.

- imports point down (the import-linter contracts in pyproject.toml, run here as CI runs them);
- nothing inside the package imports its own ``__init__`` (counting lazy imports);
- loading, showing and comparing saved profiles imports no torch.
"""

from __future__ import annotations

import ast
import os
import pathlib
import shutil
import subprocess
import sys
import textwrap

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "fxprof"


def _lint_imports() -> str | None:
    found = shutil.which("lint-imports") or str(pathlib.Path(sys.executable).with_name("lint-imports"))
    return found if os.path.exists(found) else None


@pytest.mark.skipif(_lint_imports() is None, reason="import-linter is not installed (pip install -e '.[test]')")
def test_import_contracts_hold():
    result = subprocess.run([_lint_imports()], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert "broken" not in result.stdout.lower().split("contracts:")[-1] or "0 broken" in result.stdout


def _imports_of_init(path: pathlib.Path) -> list[str]:
    """Lines of ``path`` that import fxprof's ``__init__`` (``import fxprof``, ``from fxprof import
    x``, or a relative import that lands on the package root), lazy ones included."""
    depth = len(path.relative_to(PACKAGE).parts) - 1  # 0 for fxprof/x.py, 1 for fxprof/core/x.py
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import) and any(a.name == "fxprof" for a in node.names):
            found.append(f"{path.name}:{node.lineno}")
        elif isinstance(node, ast.ImportFrom):
            absolute_root = node.level == 0 and node.module == "fxprof"
            relative_root = node.level == depth + 1 and node.module is None
            if absolute_root or relative_root:
                found.append(f"{path.name}:{node.lineno}")
    return found


def test_nothing_in_the_package_imports_its_init():
    offenders = [hit for path in PACKAGE.rglob("*.py") if path.name != "__init__.py" or path.parent != PACKAGE
                 for hit in _imports_of_init(path)]
    assert offenders == []


def test_the_folder_listing_shows_the_layers():
    top = sorted(p.name for p in PACKAGE.iterdir() if not p.name.startswith((".", "__pycache__")))
    assert {"core", "measure", "io", "views", "cli"} <= set(top)
    modules = [name for name in top if name.endswith(".py")]
    assert len(modules) <= 10, modules  # a handful at the top: API, session, vocabulary, the column table, errors, selfcheck, whatif, generate


def test_loading_showing_and_comparing_saved_files_imports_no_torch(tmp_path, resnet18, small_image):
    import fxprof

    resnet_profile = fxprof.profile(resnet18, small_image, warmup=1, iters=3, name="resnet18")
    json_path, npz_path, csv_path = tmp_path / "a.json", tmp_path / "a.npz", tmp_path / "a.csv"
    resnet_profile.save(json_path)
    resnet_profile.save(npz_path)
    resnet_profile.to_csv(csv_path)
    script = textwrap.dedent(f"""
        import contextlib, io, sys
        import fxprof
        from fxprof.cli import main
        a = fxprof.load({str(json_path)!r}); b = fxprof.load({str(npz_path)!r})
        table = fxprof.read_csv({str(csv_path)!r})
        diff = fxprof.compare(a, b)
        print(a.summary(top=3)); a._repr_html_()
        with contextlib.redirect_stdout(io.StringIO()) as out:
            assert main(["show", {str(json_path)!r}, "--top", "3"]) == 0
            assert main(["show", {str(csv_path)!r}, "--top", "3"]) == 0
            assert main(["compare", {str(json_path)!r}, {str(npz_path)!r}, "--top", "3"]) == 0
        assert "median" in out.getvalue()
        assert len(table) == len(a.df) and len(diff) == len(a.df)
        loaded = sorted(m for m in sys.modules if m == "torch" or m.startswith("torch."))
        print("TORCH", loaded)
        """)
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert result.returncode == 0, result.stderr[-3000:]
    assert "TORCH []" in result.stdout, result.stdout[-2000:]


def _module_name(path: pathlib.Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _import_graph() -> dict[str, set[str]]:
    """fxprof's own imports, module level and lazy (inside functions), without those made only
    for type checkers (``if TYPE_CHECKING:``)."""
    modules = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for name, path in modules.items():
        tree = ast.parse(path.read_text())
        typing_only = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
                typing_only.update(id(n) for child in node.body for n in ast.walk(child))
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(tree):
            if not isinstance(node, ast.ImportFrom) or id(node) in typing_only:
                continue
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            candidates = [f"{target}.{a.name}" for a in node.names] + [target]
            for candidate in candidates:
                if candidate in modules and candidate != name:
                    graph[name].add(candidate)
                    break
    return graph


def test_no_import_circle():
    """Issue 49: no circle at all, lazy imports included (Profile's conveniences reach views and
    io through fxprof.core.hooks, which the package fills)."""
    graph = _import_graph()
    state: dict[str, int] = {}
    path: list[str] = []

    def visit(module: str) -> list[str] | None:
        state[module] = 1
        path.append(module)
        for target in sorted(graph[module]):
            if state.get(target) == 1:
                return path[path.index(target):] + [target]
            if target not in state:
                found = visit(target)
                if found:
                    return found
        state[module] = 2
        path.pop()
        return None

    for module in sorted(graph):
        if module not in state:
            circle = visit(module)
            assert circle is None, " -> ".join(circle)


def test_no_package_holds_a_quarter_of_the_code_and_no_module_600_lines():
    """docs/architecture.md's promise, checked on the code as it is (its dated figures come from
    the same count, docs/scripts/package_sizes.py)."""
    import importlib.util
    import pathlib

    path = pathlib.Path(__file__).resolve().parents[2] / "docs" / "scripts" / "package_sizes.py"
    spec = importlib.util.spec_from_file_location("package_sizes", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    modules, packages = module.sizes()
    total = sum(modules.values())
    assert len(modules) > 100 and total > 20_000
    too_long = {str(p.relative_to(module.ROOT)): n for p, n in modules.items() if n > 600}
    assert not too_long, too_long
    assert max(packages.values()) <= total / 4, packages.most_common(3)
