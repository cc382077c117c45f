"""torchvision's model names, read from its source without importing it (issue 47 #13).

``fxprof profile resnt18`` used to wait 34 s for torch and torchvision before saying the name
is unknown. torchvision registers each builder with ``@register_model()`` (or
``@register_model(name=...)``) in ``torchvision/models``; reading those decorators from the
files (``ast``, a few tenths of a second) gives the same names as
``torchvision.models.list_models()`` before anything is imported. Where torchvision cannot be
found or its files do not read that way, there is no early answer (``None``) and the model's
loader decides after the import, as before.
"""

from __future__ import annotations

import ast
import difflib
import importlib.util
import os

__all__ = ["torchvision_model_names", "unknown_model_words", "check_model_name"]


def _registered(tree: ast.AST) -> list[str]:
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.FunctionDef):
            continue
        for deco in node.decorator_list:
            call = deco if isinstance(deco, ast.Call) else None
            target = call.func if call is not None else deco
            if (isinstance(target, ast.Name) and target.id == "register_model") or (
                    isinstance(target, ast.Attribute) and target.attr == "register_model"):
                named = [k.value.value for k in (call.keywords if call is not None else [])
                         if k.arg == "name" and isinstance(k.value, ast.Constant) and isinstance(k.value.value, str)]
                found.append(named[0] if named else node.name)
    return found


def torchvision_model_names() -> set[str] | None:
    """Every model name torchvision registers, or None when they cannot be read without importing it."""
    try:
        spec = importlib.util.find_spec("torchvision")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    folder = os.path.join(list(spec.submodule_search_locations)[0], "models")
    names: set[str] = set()
    for root, _dirs, files in os.walk(folder):
        for file in files:
            if not file.endswith(".py"):
                continue
            try:
                with open(os.path.join(root, file), encoding="utf-8") as handle:
                    text = handle.read()
                if "register_model" in text:
                    names.update(_registered(ast.parse(text)))
            except (OSError, SyntaxError, UnicodeDecodeError, ValueError):
                return None
    return names or None  # none found: a layout this reader does not know


def unknown_model_words(name: str) -> str | None:
    """What to say about a model name torchvision does not have (with the closest names), or
    None when the name is one of them or the names cannot be read early."""
    names = torchvision_model_names()
    if names is None or name in names:
        return None
    close = difflib.get_close_matches(name.lower(), sorted(names), n=4, cutoff=0.6)
    hint = f" Did you mean: {', '.join(close)}?" if close else ""
    return (f"unknown model {name!r}: not a torchvision model name, nor 'module:factory'.{hint} "
            f"`python -c 'import torchvision; print(torchvision.models.list_models())'` lists them.")


def check_model_name(spec: str) -> None:
    """Refuse MODEL at once when it is a name (no ``:``) that torchvision does not have."""
    if ":" in spec:
        return
    unknown = unknown_model_words(spec)
    if unknown:
        from ..errors import FxprofError  # light: errors.py imports no torch

        raise FxprofError(unknown)
