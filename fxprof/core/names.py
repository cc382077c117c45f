"""Row names a reader can use: dynamo's lifted weights and inputs, named as the model names them.

Dynamo turns every parameter and buffer a graph reads into a graph input and names it after
the Python path it took (``L['self']._modules['layer3']._modules['1']._modules['bn1']
._buffers['running_var']`` becomes ``l_self_modules_layer3_modules_1_modules_bn1_buffers_running_var_``);
the model's own inputs become ``l_x_``, ``l_args_0_``. This module reads those spellings back
(no torch): :func:`lifted_weight` says whether a placeholder is a parameter or a buffer and
which; :func:`input_name` gives the input's own name. A lifted weight is named by its module
path (``layer3.1.bn1.running_var``, as ``named_buffers()`` spells it), and the views keep these
rows (kind ``parameter`` or ``buffer``) out of their hotspot rankings: they hand a weight to
the graph and cost tens of nanoseconds, and a DDP resnet18 has over a hundred of them.
"""

from __future__ import annotations

import re

import pandas as pd

__all__ = ["WEIGHT_KINDS", "lifted_weight", "input_name", "weight_name", "is_weight_input", "weight_inputs_note"]

#: the ``kind`` of a graph input that is one of the model's parameters or buffers
WEIGHT_KINDS = ("parameter", "buffer")

# L_self_modules_layer3_modules_1_modules_bn1_buffers_running_var_ (the last _parameters_ or
# _buffers_ wins: a module may be called "buffers", an attribute name rarely holds the word)
_LIFTED = re.compile(r"^[LGlg]_(?P<path>.*)_(?P<what>parameters|buffers)_(?P<attr>.+)_$")
_INPUT = re.compile(r"^[LGlg]_(?P<name>.+)_$")


def lifted_weight(target: str) -> tuple[str, str, str] | None:
    """``(kind, module path, attribute)`` of a dynamo graph input that is a lifted parameter or
    buffer, from its target (``L_self_modules_fc_parameters_bias_`` -> ``("parameter", "fc",
    "bias")``); the path is relative to the frame dynamo compiled (``self``); None for any
    other input."""
    match = _LIFTED.match(str(target).split(":")[-1])
    if not match:
        return None
    parts = match.group("path").split("_modules_")
    # the frame's local ("self", "s", "mod"...) leads the path; what follows are submodules
    return ("parameter" if match.group("what") == "parameters" else "buffer", ".".join(parts[1:]), match.group("attr"))


def weight_name(target: str, scope: str) -> str | None:
    """The module path of a lifted weight (``layer3.1.bn1.running_var``), or None when
    ``target`` is not one. ``scope`` (the row's module, resolved to the root model) is used
    when it ends with the frame-relative path, so a graph compiled inside a submodule's
    ``forward`` still gets the path from the root."""
    found = lifted_weight(target)
    if found is None:
        return None
    _, path, attr = found
    flat = re.sub(r"[._]", "", path)  # dynamo's spelling loses where underscores and dots were (b._orig_mod)
    if scope and (not path or re.sub(r"[._]", "", scope).endswith(flat)):
        path = scope
    return ".".join(p for p in (path, attr) if p)


def input_name(name: str) -> str:
    """A dynamo input's own name: ``l_x_`` -> ``x``, ``l_args_0_`` -> ``args_0``; a module
    attribute dynamo lifted as an input (a float such as a dropout's ``p`` or an attention
    ``scaling``, once it recompiled with dynamic values): its path from the compiled frame,
    ``l_self_modules_embeddings_modules_dropout_p`` -> ``embeddings.dropout_p`` (where the module
    name ends and the attribute begins is lost in dynamo's spelling); other names unchanged."""
    if "_modules_" in name and re.match(r"^[LGlg]_", name):
        parts = name.rstrip("_").split("_modules_")[1:]
        if parts and all(parts):
            return ".".join(parts)
    match = _INPUT.match(name)
    return match.group("name") if match else name


def is_weight_input(table: pd.DataFrame) -> pd.Series:
    """Per row: True for a parameter or buffer handed to a dynamo graph as an input."""
    if "kind" not in table.columns or "op" not in table.columns:
        return pd.Series(False, index=table.index)
    return (table["op"] == "placeholder") & table["kind"].isin(WEIGHT_KINDS)


def weight_inputs_note(table: pd.DataFrame) -> str:
    """One line saying what the lifted weights cost and that they are not ranked, or ""."""
    mask = is_weight_input(table)
    if not mask.any():
        return ""
    pct = float(table.loc[mask, "pct"].sum()) if "pct" in table.columns else float("nan")
    return (f"weights as graph inputs: {int(mask.sum())} parameter/buffer input node(s) of the dynamo graph(s), "
            f"{pct:.1f}% of node time, counted in every share, not ranked as hotspots")
