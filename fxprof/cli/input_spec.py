"""``--input`` specs read without torch: ``1x3x224x224``, ``2x128:int64``, ``ids=2x128:int64``.

The syntax is checked with the other options, before torch is imported (the import takes
seconds); :mod:`fxprof.cli.models` turns the checked specs into tensors.
"""

from __future__ import annotations

import math
import re

from ..errors import FxprofError

__all__ = ["DTYPE_NAMES", "InputSpec", "parse_spec", "check_specs", "missing_batch_hint"]

#: the dtype names ``--input`` takes -> torch's name for the dtype
DTYPE_NAMES = {
    "float32": "float32", "float": "float32", "fp32": "float32",
    "float16": "float16", "half": "float16", "fp16": "float16",
    "bfloat16": "bfloat16", "bf16": "bfloat16",
    "float64": "float64", "double": "float64",
    "int64": "int64", "long": "int64", "int32": "int32", "int": "int32",
    "bool": "bool",
}

_INT64_MAX = 2**63 - 1


class InputSpec:
    """One ``--input``: its keyword name (None for a positional input), shape and dtype name."""

    __slots__ = ("name", "shape", "dtype")

    def __init__(self, name: str | None, shape: tuple[int, ...], dtype: str | None):
        self.name = name
        self.shape = shape
        self.dtype = dtype


def _shape(spec: str, text: str) -> tuple[int, ...]:
    try:
        shape = tuple(int(d) for d in text.lower().split("x"))
    except ValueError:
        shape = ()
    if not shape or any(d < 0 for d in shape):  # 0 is an empty batch, which the API takes too
        meant = re.sub(r"\s*[,*×]\s*|\s+", "x", text.strip().strip("()[]"))
        hint = f" (did you mean {meant}?)" if meant != text and re.fullmatch(r"\d+(x\d+)*", meant) else ""
        raise FxprofError(
            f"bad --input {spec!r}: expected dimensions (>= 0) joined by 'x' with an optional ':dtype', "
            f"e.g. 1x3x224x224 or 2x128:int64{hint}"
        )
    if math.prod(shape) > _INT64_MAX or max(shape) > _INT64_MAX:
        raise FxprofError(f"bad --input {spec!r}: {math.prod(shape):.3g} elements; a tensor holds at most 2**63 - 1")
    return shape


def parse_spec(spec: str) -> tuple[tuple[int, ...], str | None]:
    """``1x3x224x224`` -> ((1, 3, 224, 224), None); ``2x128:int64`` -> ((2, 128), "int64")."""
    shape_text, _, dtype_text = spec.partition(":")
    shape = _shape(spec, shape_text)
    dtype = None
    if dtype_text:
        dtype = DTYPE_NAMES.get(dtype_text.lower())
        if dtype is None:
            raise FxprofError(f"bad --input {spec!r}: unknown dtype {dtype_text!r}; use one of {', '.join(sorted(DTYPE_NAMES))}")
    return shape, dtype


def check_specs(specs: list[str]) -> list[InputSpec]:
    """Every ``--input``, checked: positional ``SHAPE[:DTYPE]`` or keyword ``NAME=SHAPE[:DTYPE]``,
    each keyword once."""
    out: list[InputSpec] = []
    seen: set[str] = set()
    for spec in specs:
        name, eq, rest = spec.partition("=")
        if eq:
            name = name.strip()
            if not name.isidentifier():
                raise FxprofError(f"bad --input {spec!r}: a keyword input is NAME=SHAPE[:DTYPE], e.g. ids=2x128:int64")
            if name in seen:
                raise FxprofError(f"bad --input {spec!r}: the keyword input {name!r} is given twice")
            seen.add(name)
        shape, dtype = parse_spec(rest if eq else spec)
        out.append(InputSpec(name if eq else None, shape, dtype))
    return out


#: what torch says when a module for batches of images got one image (batch norm, pooling...)
_WANTS_4D = re.compile(r"expected 4D input \(got 3D input\)|expected 4-dimensional input|Expected 4D")


def missing_batch_hint(specs: list[str], exc: BaseException) -> None:
    """A node that wanted a batch of images got one image (a 3-d ``--input``; a convolution takes
    an unbatched image and the failure comes later, at ``bn1``): say that the batch dimension
    is missing, first among the failed node's advice."""
    from ..errors import node_failure

    failure = node_failure(exc)
    if failure is None or not _WANTS_4D.search(str(exc)):
        return
    for spec in specs:
        if "=" not in spec and len(parse_spec(spec)[0]) == 3:
            failure.advice.insert(0, f"--input {spec} has 3 dimensions and no batch: an image model takes "
                                     f"N x C x H x W, e.g. --input 1x{spec}")
            return
