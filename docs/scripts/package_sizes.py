"""docs/architecture.md: each package's share of fxprof's lines, and the largest modules.

    python docs/scripts/package_sizes.py
"""

from __future__ import annotations

import pathlib
from collections import Counter

ROOT = pathlib.Path(__file__).resolve().parents[2] / "fxprof"


def sizes() -> tuple[dict[pathlib.Path, int], Counter[str]]:
    """Lines per module, and per package (``measure``'s subpackages each their own)."""
    modules = {p: len(p.read_text().splitlines()) for p in ROOT.rglob("*.py")}
    packages: Counter[str] = Counter()
    for path, lines in modules.items():
        parts = path.relative_to(ROOT).parts
        key = "/".join(parts[:2]) if parts[0] == "measure" and len(parts) > 2 else (parts[0] if len(parts) > 1 else "(top)")
        packages[key] += lines
    return modules, packages


def main() -> None:
    sizes_, packages = sizes()
    total = sum(sizes_.values())
    print(f"{total} lines in {len(sizes_)} modules")
    for key, lines in packages.most_common():
        print(f"  {key:24} {lines:6}  {lines / total:6.1%}")
    print("largest modules:")
    for path, lines in sorted(sizes_.items(), key=lambda kv: -kv[1])[:5]:
        print(f"  {path.relative_to(ROOT)}  {lines}")


if __name__ == "__main__":
    main()
