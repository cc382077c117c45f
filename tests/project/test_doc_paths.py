"""No doc cites a file the repository lacks (issue 69, item 6).

docs/*.md and README.md name repository files in three ways, each checked here:

- a Markdown link (``[text](scripts/x.py)``, ``[FINDINGS.md](../tests/benchmarks/marks/FINDINGS.md)``),
  resolved against the doc's own folder;
- a path that starts at the repository's root (``tests/measure/test_fidelity.py``,
  ``docs/scripts/session_example.py``, ``fxprof/core/whatif.py``), wildcards allowed
  (``tests/regressions/test_hostile*.py``), or inside the package (``core/hooks.py``,
  ``measure/common/state.py``, docs/architecture.md's ``m/`` for ``measure/``);
- a bare project file named in capitals (``FACTS.md``, ``FINDINGS.md``): it must be somewhere in
  the repository.

Paths of other trees (``torch/_dynamo/...``), a user's files (``summary.md``, ``out/run.json``) and
placeholders (``fxprof/X.py``, ``DIR/gate.json``) are not the repository's and are left alone.
"""

from __future__ import annotations

import functools
import glob
import os
import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[2]
EXTENSIONS = "py|md|sh|toml|txt|json|ipynb|npz|csv|yml|yaml|cfg|png|svg|html|ini"
#: a path-looking word: name(/name)*.ext, not part of a longer word, a URL or a home/variable path
PATH = re.compile(rf"(?<![\w./~$:-])((?:[A-Za-z0-9_.*-]+/)*[A-Za-z0-9_*-][A-Za-z0-9_.*-]*\.(?:{EXTENSIONS}))(?![\w/-])")
LINK = re.compile(r"\]\(([^)\s#]+)(?:#[^)\s]*)?\)")
#: the package's folders a doc may start a path at (``core/profile.py``, ``m/whatif/variants.py``)
PACKAGE_DIRS = {p.name for p in (ROOT / "fxprof").iterdir() if p.is_dir() and not p.name.startswith("_")}
MEASURE_DIRS = {p.name for p in (ROOT / "fxprof" / "measure").iterdir() if p.is_dir() and not p.name.startswith("_")}


def _docs() -> list[pathlib.Path]:
    return sorted((ROOT / "docs").glob("*.md")) + [ROOT / "README.md"]


def _top_level() -> set[str]:
    return {p.name for p in ROOT.iterdir() if p.name not in (".git", ".venv") and not p.name.startswith(".pytest")}


def _placeholder(path: str) -> bool:
    """``fxprof/X.py``, ``DIR/gate_aa.json``, ``tests/...py``: a name standing for any file."""
    parts = path.split("/")
    stems = [p.rsplit(".", 1)[0] if i == len(parts) - 1 else p for i, p in enumerate(parts)]
    return "..." in path or any(re.fullmatch(r"[A-Z]{1,3}|<.*>|\{.*\}", s) for s in stems)


def _exists(path: pathlib.Path) -> bool:
    return bool(glob.glob(str(path))) if "*" in str(path) else path.exists()


@functools.lru_cache(maxsize=None)
def _names_in_repository() -> frozenset[str]:
    """Every file name in the repository's tree (hidden folders, a virtual environment and
    caches left out)."""
    names = set()
    for folder, subfolders, files in os.walk(ROOT):
        subfolders[:] = [d for d in subfolders if not d.startswith(".") and d not in ("__pycache__", "node_modules")
                         and not (pathlib.Path(folder, d) / "pyvenv.cfg").exists()]
        names.update(files)
    return frozenset(names)


def cited_paths(doc: pathlib.Path) -> list[tuple[str, list[pathlib.Path]]]:
    """Each repository path ``doc`` cites, with the places it may be (found at any one: it exists)."""
    text = doc.read_text(encoding="utf-8")
    top = _top_level()
    out: list[tuple[str, list[pathlib.Path]]] = []
    for target in LINK.findall(text):
        if re.match(r"[a-z][a-z0-9+.-]*:", target) or target.startswith("/"):  # a URL, an absolute path
            continue
        out.append((target, [doc.parent / target]))
    for path in PATH.findall(text):
        if _placeholder(path):
            continue
        first, _, rest = path.partition("/")
        if not rest:  # a bare name: only a project file in capitals (FACTS.md), which is never a user's
            if re.fullmatch(r"[A-Z][A-Z0-9_-]+\.md", path):
                out.append((path, []))  # anywhere: _missing looks it up by name
            continue
        if first in top:
            out.append((path, [ROOT / path]))
        elif first == "m" and rest.split("/")[0].removesuffix(".py") in MEASURE_DIRS | {"eager_mode", "program"}:
            out.append((path, [ROOT / "fxprof" / "measure" / rest]))
        elif first in PACKAGE_DIRS:
            out.append((path, [ROOT / "fxprof" / path]))
        elif first in MEASURE_DIRS:
            out.append((path, [ROOT / "fxprof" / "measure" / path, ROOT / "fxprof" / path]))
    return out


def _missing(doc: pathlib.Path) -> list[str]:
    missing = []
    for path, places in cited_paths(doc):
        found = any(_exists(p) for p in places) if places else path in _names_in_repository()
        if not found:
            missing.append(path)
    return sorted(set(missing))


def test_no_doc_cites_a_file_the_repository_lacks():
    missing = {str(doc.relative_to(ROOT)): found for doc in _docs() if (found := _missing(doc))}
    assert not missing, f"docs cite files the repository lacks (fix the path, or state the fact itself): {missing}"


def test_the_check_finds_what_it_is_meant_to_and_nothing_else(tmp_path):
    docs = tmp_path / "docs"
    docs.mkdir()
    doc = docs / "x.md"
    doc.write_text(
        "As measured (FACTS.md, fifth round); see [the tour](tour.md) and [gone](nothere.md), "
        "`tests/project/test_doc_paths.py`, `tests/project/no_such_test.py`, `fxprof/core/whatif.py`, "
        "`core/no_such.py`, `m/whatif/variants.py`, `tests/regressions/test_hostile*.py`; "
        "not ours: `torch/_dynamo/variables/tensor.py`, `--markdown summary.md`, `fxprof/X.py`, "
        "`DIR/gate_aa.json`, https://example.com/a/b.py, ~/runs/x.json, `tests/...py`.\n")
    (docs / "tour.md").write_text("tour\n")
    assert _missing(doc) == ["FACTS.md", "core/no_such.py", "nothere.md", "tests/project/no_such_test.py"]
