"""``fxprof.load_generation``: a :class:`~fxprof.core.generation.Generation` read back from the
folder :meth:`Generation.save` wrote (``generation.json`` with ``prefill.json`` and
``decode.json`` beside it). No torch: the tokens come back as a numpy array."""

from __future__ import annotations

import json
import os

import numpy as np

from ..core.generation import FORMAT, Generation, frame_from_doc
from ..errors import ProfileFormatError
from . import load_profile

__all__ = ["load_generation"]


def load_generation(path: str | os.PathLike) -> Generation:
    """The generation saved in the folder ``path`` by :meth:`Generation.save`."""
    path = os.fspath(path)
    doc_path = os.path.join(path, "generation.json")
    if not os.path.isfile(doc_path):
        raise ProfileFormatError(f"{path!r} holds no generation.json: give the folder Generation.save(path) wrote")
    with open(doc_path, encoding="utf-8") as handle:
        doc = json.load(handle)
    if doc.get("format") != FORMAT[0] or doc.get("version") != FORMAT[1]:
        raise ProfileFormatError(f"{doc_path}: not an fxprof generation (format {doc.get('format')!r} version "
                                 f"{doc.get('version')!r}; expected {FORMAT[0]!r} version {FORMAT[1]})")
    layers = frame_from_doc(doc["layers"]).set_index("layer")
    decode = load_profile(os.path.join(path, "decode.json")) if doc.get("decode") else None
    return Generation(tokens=np.asarray(doc["tokens"], dtype=np.int64), prefill=load_profile(os.path.join(path, "prefill.json")),
                      decode=decode, per_token=frame_from_doc(doc["per_token"]), layers=layers, meta=doc["meta"])
