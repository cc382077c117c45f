"""The result of ``fxprof.generate``: a causal LM's prefill and decode steps, token by token.

:class:`Generation` holds what was measured (the tokens, the prefill profile, the decode
profile with one timed run per decode step, one row per generated token) and what the model's
configuration says a step must move (weights, KV cache), and derives the rest: the share of
attention, MLP, norms and the LM head per phase (:meth:`Generation.shares`), the per-layer split
and its memory floor (:meth:`Generation.layer_table`), and the text of :meth:`Generation.summary`.

numpy and pandas only: no torch (``tokens`` is whatever ``model.generate`` returned; after
:func:`fxprof.load_generation`, a numpy array).
"""

from __future__ import annotations

import json
import math
import os
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

if TYPE_CHECKING:
    from .profile import Profile

__all__ = ["Generation", "PER_TOKEN_COLUMNS", "GROUPS", "group_of", "layer_of", "FORMAT"]

#: the columns of :attr:`Generation.per_token`
PER_TOKEN_COLUMNS = ("token", "position", "phase", "time_ms", "lost_ms", "kv_cache_bytes", "read_bytes", "flops",
                     "floor_ms", "floor_pct")

#: the groups of :meth:`Generation.shares`, in order: the first pattern that matches a node's scope wins
GROUPS = (
    ("lm_head", re.compile(r"(^|\.)(lm_head|output|embed_out)(\.|$)")),
    # attention under any name: the block (self_attn, attention, attn, mixer...) or, on a layer that
    # holds them directly, its projections
    ("attention", re.compile(r"(^|\.)(self_attn|attention|attn|self_attention|mixer|q_proj|k_proj|v_proj|o_proj|"
                             r"query_key_value|qkv_proj|Wqkv|c_attn|out_proj)(\.|$)")),
    # feed-forwards under any name: the block (mlp, feed_forward, experts...) or, on a layer that holds
    # them directly, its matrices (fc1/fc2, c_fc, dense_h_to_4h, w1/w2/w3, gate/up/down projections)
    ("mlp", re.compile(r"(^|\.)(mlp|feed_forward|feedforward|ffn|ff|block_sparse_moe|moe|experts|shared_expert|router|"
                       r"fc1|fc2|fc_in|fc_out|c_fc|dense_h_to_4h|dense_4h_to_h|w1|w2|w3|gate_proj|up_proj|down_proj|"
                       r"gate_up_proj)(\.|$)")),
    ("norm", re.compile(r"norm|(^|\.)ln_")),
    ("embedding", re.compile(r"embed|wte|wpe|rotary|rope")),
)

_LAYER = re.compile(r"(?:^|\.)(?:layers|h|blocks|layer)\.(\d+)(?:\.|$)")

#: the saved file's format name and version
FORMAT = ("fxprof-generation", 1)


def _in_layer(path: str, stack: str | None) -> tuple[int, bool] | None:
    """``(index, the layer itself)`` when ``path`` lies in a decoder layer: under ``stack`` (the
    decoder's own ``ModuleList`` path, ``model.layers``) when it is known, else the first
    ``layers.N`` / ``h.N`` / ``blocks.N`` / ``layer.N`` of the path."""
    if stack:
        if not path.startswith(stack + "."):
            return None
        head, _, rest = path[len(stack) + 1:].partition(".")
        return (int(head), not rest) if head.isdigit() else None
    found = _LAYER.search(path)
    return (int(found.group(1)), found.end() == len(path)) if found else None


def group_of(scope: str, stack: str | None = None) -> str:
    """``attention``, ``mlp``, ``norm``, ``lm_head``, ``embedding`` for a module path that names
    one; else ``residual`` for a decoder layer's own ops between its blocks (residual adds,
    dropouts), ``plumbing`` for the model's ops outside every layer (attention masks, positions,
    the cache's bookkeeping), ``other`` for anything else. ``stack``: as for :func:`layer_of`."""
    scope = str(scope or "")
    for name, pattern in GROUPS:
        if pattern.search(scope):
            return name
    found = _in_layer(scope, stack)
    if found is not None:
        return "residual" if found[1] else "other"
    return "plumbing"


def layer_of(path: str, stack: str | None = None) -> str:
    """``layer 3`` for ``model.layers.3.mlp``; ``outside layers`` otherwise. ``stack`` is the path
    of the decoder's own stack of layers (``meta["layer_stack"]``, found on the model by
    :func:`fxprof.measure.passes.kv_cache.decoder_stack`): layers are numbered by it alone, so
    an expert list or a block list inside a layer never reads as a layer. Without it (files
    written before), the first ``layers.N`` / ``h.N`` / ``blocks.N`` / ``layer.N`` of the path."""
    found = _in_layer(str(path or ""), stack)
    return f"layer {found[0]}" if found else "outside layers"


@dataclass
class Generation:
    """What :func:`fxprof.generate` measured.

    Attributes:
        tokens: exactly what ``model.generate(input_ids, max_new_tokens=N, ...)`` returns (the
            prompt and the new tokens); a numpy array once loaded from a file.
        prefill: the prompt's forward, a :class:`~fxprof.Profile` (one timed run).
        decode: the decode steps, a :class:`~fxprof.Profile` with one timed run per step
            (``None`` with one new token: no decode step).
        per_token: one row per generated token (:data:`PER_TOKEN_COLUMNS`): ``token`` (0 for the
            prefill's), ``position`` (its index in the output sequence), ``phase``, ``time_ms``
            (the step's timed run), ``lost_ms`` (time the run lost to other processes, measured),
            ``kv_cache_bytes`` (after the step), ``read_bytes`` (weights the step reads plus the
            KV cache), ``flops`` (its matrix products and attention), ``floor_ms``
            (``read_bytes`` over the memory bandwidth) and ``floor_pct`` (floor over time).
        layers: per decoder layer (index ``layer``), the bytes of weights a decode step reads
            there (``weight_bytes``) and the KV cache bytes per token it holds (``kv_bytes_per_token``).
        meta: the model, the prompt and new token counts, the configuration's figures, the
            peaks (``bytes_per_s``, ``flops_per_s``, ``peaks_source``), and ``notes``.
    """

    tokens: Any
    prefill: "Profile"
    decode: "Profile | None"
    per_token: pd.DataFrame
    layers: pd.DataFrame
    meta: dict[str, Any] = field(default_factory=dict)

    # ------------------------------------------------------------------ tables
    def phase_profile(self, phase: str) -> "Profile | None":
        if phase not in ("prefill", "decode"):
            raise ValueError(f"phase must be 'prefill' or 'decode', got {phase!r}")
        return self.prefill if phase == "prefill" else self.decode

    def nodes(self, phase: str) -> pd.DataFrame:
        """The phase's per-node table (median over its runs) with ``group`` and ``layer`` columns;
        graph inputs (placeholders) left out."""
        prof = self.phase_profile(phase)
        if prof is None:
            return pd.DataFrame(columns=["scope", "median_ms", "group", "layer"])
        table = prof.df
        table = table[table["op"] != "placeholder"]
        stack = self.meta.get("layer_stack") or None
        return table.assign(group=table["scope"].map(lambda s: group_of(s, stack)),
                            layer=table["scope"].map(lambda s: layer_of(s, stack)))

    def shares(self) -> pd.DataFrame:
        """Per group (attention, mlp, norm, residual, lm_head, embedding, plumbing, other: :func:`group_of`), each phase's summed node
        median in ms and its share of the phase's node time in percent."""
        out = {}
        for phase in ("prefill", "decode"):
            nodes = self.nodes(phase)
            ms = nodes.groupby("group")["median_ms"].sum() if len(nodes) else pd.Series(dtype=float)
            total = float(ms.sum())
            out[f"{phase}_ms"] = ms
            out[f"{phase}_pct"] = ms / total * 100.0 if total > 0 else ms * 0.0
        order = [g for g, _ in GROUPS[1:3]] + ["norm", "residual", "lm_head", "embedding", "plumbing", "other"]
        table = pd.DataFrame(out).reindex(order).fillna(0.0)
        table = table[(table[["prefill_ms", "decode_ms"]] > 0).any(axis=1)]  # a group no node ran in is no row
        table.index.name = "group"
        return table

    def layer_table(self, phase: str = "decode") -> pd.DataFrame:
        """Per layer of ``phase``: summed node medians (``time_ms``), share of node time, and for
        the decode phase the layer's memory floor: weights plus its KV cache at the median decode
        position over the bandwidth (``floor_ms``), and ``floor_pct`` (floor over time)."""
        nodes = self.nodes(phase)
        ms = nodes.groupby("layer")["median_ms"].sum() if len(nodes) else pd.Series(dtype=float)
        total = float(ms.sum())
        table = pd.DataFrame({"time_ms": ms, "pct": ms / total * 100.0 if total > 0 else ms * 0.0})
        bw = self.meta.get("bytes_per_s")
        if phase == "decode" and len(self.layers):
            rows = self.per_token[self.per_token["phase"] == "decode"]
            seq = float(np.median(rows["position"] + 1)) if len(rows) else float(self.meta.get("prompt_len", 0))
            kept = self.layers["kv_tokens_kept"] if "kv_tokens_kept" in self.layers else pd.Series(np.nan, index=self.layers.index)
            tokens = np.where(np.isfinite(kept.to_numpy(dtype=np.float64)), np.minimum(seq, kept.to_numpy(dtype=np.float64)), seq)
            kv = self.layers["kv_bytes_per_token"] * tokens * int(self.meta.get("batch", 1))
            table = table.join(pd.DataFrame({"read_bytes": self.layers["weight_bytes"] + kv}), how="left")
            if bw:
                table["floor_ms"] = table["read_bytes"] / bw * 1e3
                table["floor_pct"] = table["floor_ms"] / table["time_ms"] * 100.0
        table.index.name = "layer"
        return table.sort_index(key=lambda idx: idx.map(_layer_key))

    # ------------------------------------------------------------------ text
    def summary(self, rows: int = 8) -> str:
        """Prefill and decode speed, time per token against position, the share of each part of
        the model per phase, the per-layer split, and the decode step's memory floor."""
        m = self.meta
        pt = self.per_token
        pre = pt[pt["phase"] == "prefill"]
        dec = pt[pt["phase"] == "decode"]
        lines = [f"fxprof generate: {m.get('model', '?')} | prompt {m.get('prompt_len')} tokens x batch {m.get('batch')}, "
                 f"{len(pt)} new token(s) | {m.get('dtype', '')} on {m.get('device', '')} | timer {m.get('timer', '')} | "
                 f"threads {m.get('threads', '')} | torch {m.get('torch', '')}"]
        if m.get("compiled"):  # a torch.compile'd forward: its kernels, and how often it compiled
            c = m["compiled"]
            lines.append(f"compiled: {c.get('backend')}, mode {c.get('mode')}, {c.get('cache')} cache | {c.get('graphs')} graph(s), "
                         f"{c.get('recompiles')} recompile(s), {c.get('kernels')} kernel(s) | first call compiled in {c.get('compile_s')} s (untimed)")
        if len(pre):
            t = float(pre["time_ms"].iloc[0])
            lines.append(f"prefill: {_ms(t)} for {m.get('prompt_len')} prompt token(s) x batch {m.get('batch')} "
                         f"({_rate(m.get('prompt_len', 0) * m.get('batch', 1), t)} tokens/s), first new token after {_ms(t)}")
        if m.get("kv_rule"):
            lines.append(f"kv cache: {_bytes(float(pt['kv_cache_bytes'].iloc[-1]))} after the last step, its layout "
                         f"{m['kv_rule']}")
        if len(dec):
            med = float(dec["time_ms"].median())
            lo, hi = int(dec["position"].min()), int(dec["position"].max())
            lines.append(f"decode: median {_ms(med)} per step ({_rate(m.get('batch', 1), med)} tokens/s at batch "
                         f"{m.get('batch')}) over {len(dec)} step(s), positions {lo}-{hi}; mean {_ms(float(dec['time_ms'].mean()))}")
            if len(dec) >= 3:
                from scipy.stats import theilslopes

                # with its 95% interval: over a few positions the steps' own spread is larger than the
                # KV cache's effect (a GPU run: +1.62 ms per 100 positions from 15 steps 8.25-9.12 ms)
                slope, _, low, high = (float(v) for v in theilslopes(dec["time_ms"].astype(float),
                                                                     dec["position"].astype(float))[:4])
                kv = (f"the KV cache grows {_bytes(m.get('kv_bytes_per_token', 0) * m.get('batch', 1))} a token"
                      + (" while no window is full" if "slide" in str(m.get("kv_rule", "")) else "")
                      + f", {_bytes(float(pt['kv_cache_bytes'].iloc[-1]))} after the last step")
                interval = f"95% interval {low * 100:+.3g} to {high * 100:+.3g} ms"
                if low <= 0.0 <= high:
                    lines.append(f"time per token against position: no trend beyond the steps' spread over positions "
                                 f"{lo}-{hi} (Theil-Sen slope {slope * 100:+.3g} ms per 100 positions, {interval}; {kv}): "
                                 f"more new tokens give a longer stretch")
                elif high < 0.0:
                    # position and time advance together: a machine that speeds up reads the same (an
                    # H200 run: -5.04 ms per 100 positions over 15 steps of 15.3 ms)
                    lines.append(f"time per token against position: {slope * 100:+.3g} ms per 100 positions ({interval}): "
                                 f"falling, so not the KV cache ({kv}), which only adds work: the steps sped up as they "
                                 f"ran (the machine warming up); compare medians, or profile again")
                else:
                    lines.append(f"time per token against position: {slope * 100:+.3g} ms per 100 positions ({interval}; "
                                 f"Theil-Sen: the median of the slopes between every two decode steps, so a few slow steps "
                                 f"do not tilt it; position and time advance together, so a machine slowing down reads the "
                                 f"same; {kv})")
            lines.extend(self.fidelity_lines())
        else:
            lines.append("decode: no decode step (one new token: the prefill made it)")
        lines.append(self.machine_line())
        lines.append("")
        lines.append("time per token (time_ms: the step's timed run; floor: its bytes over the memory bandwidth):")
        pick = _spread(len(pt), rows)
        lines.append(_table(pt.iloc[pick], ["token", "position", "phase", "time_ms", "kv_cache_bytes", "read_bytes",
                                            "flops", "floor_ms", "floor_pct"]))
        lines.append("")
        lines.append("share of node time per phase (node medians grouped by module scope):")
        lines.append(_table(self.shares().reset_index(), ["group", "prefill_ms", "prefill_pct", "decode_ms", "decode_pct"]))
        for phase in ("prefill", "decode"):
            if self.phase_profile(phase) is None:
                continue
            lines.append("")
            lines.append(f"per layer, {phase} (node medians{'; floor at the median decode position' if phase == 'decode' else ''}):")
            cols = ["layer", "time_ms", "pct"] + (["read_bytes", "floor_ms", "floor_pct"] if phase == "decode" and m.get("bytes_per_s") else [])
            lines.append(_table(self.layer_table(phase).reset_index(), cols))
        lines.append("")
        lines.append(self.floor_line())
        for note in m.get("notes", []):
            lines.append(f"note: {note}")
        return "\n".join(lines)

    def machine_line(self) -> str:
        """Whether other processes took the CPU from the prefill or the decode steps
        (:func:`fxprof.core.contention.steps_machine_words`, the rule of every machine line)."""
        from .contention import steps_machine_words, window_figures

        pt = self.per_token
        phases = [(name, pt.loc[pt["phase"] == name, "lost_ms"].astype(float).to_numpy(),
                   pt.loc[pt["phase"] == name, "time_ms"].astype(float).to_numpy()) for name in ("prefill", "decode")]
        load = self.meta.get("load")
        return steps_machine_words(phases, float(load) if isinstance(load, (int, float)) else None,
                                   int(self.meta.get("cores") or 0), window=window_figures(self.meta))

    def busy_steps(self) -> list[int]:
        """The tokens whose step lost time to other processes (the rule of every machine line)."""
        from .contention import busy_mask

        pt = self.per_token
        mask = busy_mask(pt["lost_ms"].astype(float).to_numpy(), pt["time_ms"].astype(float).to_numpy())
        return [int(t) for t in pt["token"][mask]]

    def fidelity_lines(self) -> list[str]:
        """The profiled decode step (and prefill) against the model's own: a plain ``generate``
        after the profiled one, each call timed around the model's forward (``meta["own_ms"]``)."""
        from .contention import busy_mask, quiet_values
        from .fidelity import Fidelity, iqr_share

        own = [float(v) for v in self.meta.get("own_ms") or []]
        pt = self.per_token
        dec = pt[pt["phase"] == "decode"]
        if len(own) != len(pt) or not len(dec):
            return []
        lost = [float(v) for v in self.meta.get("own_lost_ms") or []]
        # the rules of every fidelity line (fxprof.core.fidelity): own steps that lost time to other
        # processes left out (or corrected), and no ratio from too few, too spread or busy steps
        used, corrected = quiet_values(own[1:], lost[1:] if len(lost) == len(own) else None)
        times = dec["time_ms"].astype(float).to_numpy()
        busy = bool(busy_mask(dec["lost_ms"].astype(float).to_numpy(), times).any())
        found = Fidelity(own_ms=float(np.median(used)), profiled_ms=float(np.median(times)), node_ms=math.nan,
                         own_runs=len(used), gpu=str(self.meta.get("device", "")).startswith("cuda"),
                         corrected_own=corrected, busy_profiled=busy, own_spread=iqr_share(used))
        where = (f"median of {len(used)} decode steps of a plain generate after the profiled one, each call timed "
                 f"around the forward")
        if found.unreliable:
            return [f"fidelity: not stated: {found.unreliable}; the median profiled decode step took "
                    f"{_ms(found.profiled_ms)}, the model's own {_ms(found.own_ms)} ({where})"]
        pre = float(pt["time_ms"].iloc[0])
        return [f"fidelity: the profiled decode step is {found.ratio:.2f}x the model's own ({_ms(found.own_ms)}, {where}"
                + (f", {corrected} of them less the time they lost to other processes" if corrected else "")
                + f"); prefill {pre / own[0]:.2f}x ({_ms(own[0])}, one call). The table's times are the profiled "
                  f"steps'; the two calls ran one after the other, not interleaved"]

    def floor_line(self) -> str:
        """The decode step's memory floor and the share of it achieved, in words."""
        m = self.meta
        dec = self.per_token[self.per_token["phase"] == "decode"]
        bw = m.get("bytes_per_s")
        if not bw:
            return "floor: none (no memory bandwidth: peaks=None); pass peaks=(TFLOPS, GBPS) or peaks='auto'"
        if not len(dec):
            return (f"floor: no decode step to hold to the floor; the prefill reads at least "
                    f"{_bytes(float(self.per_token['read_bytes'].iloc[0]))} ({_ms(float(self.per_token['floor_ms'].iloc[0]))} "
                    f"at {bw / 1e9:.3g} GB/s)")
        read = float(dec["read_bytes"].median())
        floor = float(dec["floor_ms"].median())
        med = float(dec["time_ms"].median())
        return (f"floor of a decode step: it must read {_bytes(read)} (weights {_bytes(m.get('weight_bytes_decode', 0))} + "
                f"KV cache {_bytes(read - m.get('weight_bytes_decode', 0))}, median step) = {_ms(floor)} at "
                f"{bw / 1e9:.3g} GB/s ({m.get('peaks_source', '')} memory bandwidth); measured median {_ms(med)}: "
                f"{floor / med * 100:.3g}% of the floor's speed achieved ({med / floor:.3g}x the floor)")

    def __repr__(self) -> str:
        return self.summary()

    # ------------------------------------------------------------------ files
    def save(self, path: str | os.PathLike) -> None:
        """Save into the folder ``path`` (made if missing): ``prefill.json`` and ``decode.json``
        (:meth:`Profile.save`, lossless) and ``generation.json`` (tokens, per-token table,
        layers, meta). :func:`fxprof.load_generation` reads it back."""
        path = os.fspath(path)
        os.makedirs(path, exist_ok=True)
        self.prefill.save(os.path.join(path, "prefill.json"))
        if self.decode is not None:
            self.decode.save(os.path.join(path, "decode.json"))
        tokens = self.tokens.tolist() if hasattr(self.tokens, "tolist") else list(self.tokens)
        doc = {"format": FORMAT[0], "version": FORMAT[1], "tokens": tokens,
               "per_token": _frame_doc(self.per_token), "layers": _frame_doc(self.layers.reset_index()),
               "meta": self.meta, "decode": self.decode is not None}
        tmp = os.path.join(path, "generation.json.tmp")
        with open(tmp, "w", encoding="utf-8") as handle:
            json.dump(doc, handle, indent=1, allow_nan=True)
        os.replace(tmp, os.path.join(path, "generation.json"))


def _frame_doc(frame: pd.DataFrame) -> dict[str, Any]:
    return {"columns": list(frame.columns), "dtypes": [str(t) for t in frame.dtypes],
            "data": {c: frame[c].tolist() for c in frame.columns}}


def frame_from_doc(doc: dict[str, Any]) -> pd.DataFrame:
    """A DataFrame saved by :meth:`Generation.save`, with its dtypes."""
    frame = pd.DataFrame({c: doc["data"][c] for c in doc["columns"]}, columns=doc["columns"])
    return frame.astype(dict(zip(doc["columns"], doc["dtypes"])))


def _layer_key(name: str) -> tuple:
    found = re.match(r"layer (\d+)$", str(name))
    return (0, int(found.group(1))) if found else (1, 0)


def _spread(n: int, rows: int) -> list[int]:
    if n <= rows:
        return list(range(n))
    return sorted({int(round(i)) for i in np.linspace(0, n - 1, rows)})


def _ms(value: float) -> str:
    if not math.isfinite(value):
        return "-"
    return f"{value * 1e3:.3g} us" if value < 1 else f"{value:.3g} ms"


def _rate(tokens: float, ms: float) -> str:
    if not ms > 0:
        return "-"
    rate = tokens / ms * 1e3
    return f"{rate:,.0f}" if rate >= 100 else f"{rate:.3g}"


def _bytes(value: float) -> str:
    value = float(value)
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if abs(value) >= scale:
            return f"{value / scale:.3g} {unit}"
    return f"{value:.0f} B"


def _cell(col: str, value: Any) -> str:
    if isinstance(value, str):
        return value
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "-"
    if col.endswith("_bytes"):
        return _bytes(value)
    if col.endswith("_ms"):
        return _ms(float(value))
    if col == "pct" or col.endswith("_pct"):
        return f"{float(value):.1f}"
    if col == "flops":
        return f"{float(value) / 1e6:.3g} M"
    return str(value)


def _table(frame: pd.DataFrame, cols: list[str]) -> str:
    cols = [c for c in cols if c in frame.columns]
    body = [[_cell(c, v) for c, v in zip(cols, row)] for row in frame[cols].itertuples(index=False)]
    heads = [c.replace("pct", "%") for c in cols]
    widths = [max([len(h)] + [len(r[i]) for r in body]) for i, h in enumerate(heads)]
    fmt = lambda cells: "  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths)))  # noqa: E731
    return "\n".join(["  " + fmt(heads), "  " + fmt(["-" * w for w in widths])] + ["  " + fmt(r) for r in body])
