"""``fxprof.generate``: a causal LM's generation profiled node by node, token by token.

``model.generate`` runs twice inside one :func:`fxprof.session`: the first call warms up
(dynamo captures the prefill graph and the decode graph(s), recompiles included, and every input
signature runs once), the second is timed with the session stepped once per model call by a
forward hook: its first call (the prompt's forward, *prefill*) is one cycle, its decode calls
the next, one timed run per decode step. Greedy decoding is deterministic, so both calls give the
same tokens (checked), which are exactly what ``model.generate`` gives without fxprof. The KV
cache, the bytes a step must read and its FLOPs come from the model's configuration
(:func:`_shapes`). The analysis is :class:`fxprof.core.generation.Generation`.

Compiled decoding: a model whose forward is compiled in place (``model.forward =
torch.compile(model.forward)``, Hugging Face's recipe, best with ``cache_implementation="static"``)
is profiled as the session profiles any compiled program
(:mod:`fxprof.measure.compiled.in_session`): fxprof compiles that forward again with its options
and times the compiled program's kernels per step, charged to the nodes and layers they compute;
the header says how many graphs and recompiles there were, and whether any compiled in a timed
step. ``torch.compile(model)`` is refused: its ``generate`` runs the eager module.

The profiled steps are held against the model's own: a plain ``generate`` after the profiled one,
each model call timed from a forward pre-hook to a forward hook (``meta["own_ms"]``; the summary's
``fidelity`` line). A forward compiled in place also runs a plain ``generate`` before the session
(the user's program compiles there) and one in the session's eager steps, between the warm-up and
the timed call: the decode profile holds its kernels against those own steps and measures the
profiler's cost per event from them (:mod:`fxprof.measure.compiled.in_session`).
"""

from __future__ import annotations

import time
from typing import Any, Callable

import numpy as np
import pandas as pd
import torch
from torch import nn

from .core.generation import PER_TOKEN_COLUMNS, Generation, layer_of
from .core.roofline import Peaks, parse_peaks, peaks_off
from .errors import FxprofError
from .measure.compiled.compiling import compiled_forward, is_compiled
from .measure.compiled.mode import room_to_compile
from .measure.compiled.progress import compile_progress
from .measure.passes.decoder import decoder_stack
from .measure.passes.kv_cache import KVLayout, kv_layout
from .measure.timing.contention import ContentionMeter
from .session import session
from .vocab import MARKS_TIMER

__all__ = ["generate"]


#: how a compiled profile's kernels were timed, by its ``meta["timer"]`` (else torch.profiler)
_KERNELS_TIMED_BY = {MARKS_TIMER: "fxprof's marks in the generated code"}

#: ``torch.compile(model).generate(...)`` runs no compiled code: ``generate`` is the original module's method
#: (the OptimizedModule hands it back) and calls the original module, whose forward is eager
COMPILED_MODULE = ("the model is torch.compile'd (an OptimizedModule), but its generate() never runs the compiled "
                   "program: generate is the original module's method and calls the original module, eagerly. Compile "
                   "the forward the way Hugging Face does, model.forward = torch.compile(model.forward) (with "
                   "cache_implementation='static' for one decode graph for all positions), and pass the model; or pass "
                   "model._orig_mod to profile the eager generation it runs")


#: the model's own compiled forward ran its generate, fxprof's copy of that program did not
_RECOMPILE_FAILED = ("fxprof compiles the model's forward again (its own copy, with kernel ranges and provenance on) and "
                     "that copy failed in the warm-up generate ({error}), where {model}'s own compiled forward had just "
                     "generated. Nothing was timed and the model is as it was. Profile the eager forward (fxprof "
                     "generate without --compile; fxprof.generate on the model without its compiled forward), or the "
                     "compiled one per eager node with fxprof.session(model, capture='dynamo')")


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0][:160]}" if text else type(exc).__name__


def generate(model: nn.Module, input_ids: torch.Tensor, max_new_tokens: int = 16, *, peaks: Any = "auto",
             capture: str = "auto", timer: str = "auto", progress: Callable[[str], None] | None = None,
             **generate_kwargs: Any) -> Generation:
    """Profile ``model.generate(input_ids, max_new_tokens=..., **generate_kwargs)``, greedy.

    Args:
        model: a Hugging Face causal LM (``generate`` and a ``config``), or any model whose
            ``generate`` calls its forward once per token and whose config names its layers,
            heads and hidden size as Hugging Face's do.
        input_ids: the prompt, ``batch x prompt_len`` integer token ids.
        max_new_tokens: new tokens to generate (>= 1).
        peaks: the memory bandwidth of the floor: ``"auto"`` (:func:`fxprof.machine_peaks` on the
            model's device and dtype, measured once and cached), ``(TFLOPS, GBPS)``, ``"TFLOPS,GBPS"``,
            a :class:`~fxprof.Peaks`, or ``None`` (or ``"off"``, the CLI's spelling: no floor).
        capture, timer: as for :func:`fxprof.session`.
        progress: called with a line saying what runs now.
        generate_kwargs: passed to every ``generate`` call (``attention_mask``, ``min_new_tokens``...); a
            ``streamer`` to the timed call only, so it receives the text once.
            ``do_sample`` must stay False and ``num_beams`` 1: the timed call must produce what the
            warm-up call produced.

    Returns:
        A :class:`~fxprof.core.generation.Generation`: ``tokens``, ``prefill``, ``decode``,
        ``per_token``, ``layers``, ``summary()``, ``save(path)``.
    """
    if not isinstance(model, nn.Module) or not callable(getattr(model, "generate", None)):
        raise TypeError(f"fxprof.generate takes a causal LM with a generate() method (a Hugging Face "
                        f"...ForCausalLM), got {type(model).__name__}")
    if getattr(model, "config", None) is None:
        raise TypeError(f"{type(model).__name__} has no config: fxprof.generate reads the layers, heads and hidden "
                        f"size from a Hugging Face style config")
    if not isinstance(input_ids, torch.Tensor) or input_ids.dim() != 2 or input_ids.dtype.is_floating_point:
        raise ValueError(f"input_ids must be a batch x prompt_len tensor of integer token ids, got "
                         f"{type(input_ids).__name__}{tuple(getattr(input_ids, 'shape', ()))}")
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be an integer >= 1, got {max_new_tokens!r}")
    if generate_kwargs.get("do_sample") or int(generate_kwargs.get("num_beams", 1) or 1) != 1:
        raise ValueError("fxprof.generate profiles greedy decoding only (do_sample=False, num_beams=1): the timed "
                         "generate call must give the tokens its warm-up call gave")
    config = getattr(model, "config", None)
    if getattr(config, "is_encoder_decoder", False):
        raise TypeError(f"{type(model).__name__} is an encoder-decoder: fxprof.generate profiles causal (decoder-only) "
                        f"LMs, whose generate runs one forward per token over one stack of layers; profile its "
                        f"encoder and decoder with fxprof.profile or fxprof.session instead")
    if is_compiled(model):
        raise ValueError(COMPILED_MODULE)
    if model.training:
        raise ValueError(f"{type(model).__name__} is in training mode (dropout on: its tokens would depend on the random "
                         f"numbers drawn, and the timed call would draw other ones than the warm-up call); call "
                         f"model.eval() first, as generation does")
    generate_kwargs["do_sample"] = False
    # a streamer is fed by the timed call alone, as one plain generate feeds it (the warm-up and the
    # model's own calls generate the same tokens: fed to it too, its text came out three times)
    streamer = generate_kwargs.pop("streamer", None)
    bandwidth = _peaks(peaks, model)
    say = progress or (lambda line: None)
    calls = [0]

    def count(*_: Any) -> None:
        calls[0] += 1

    # a forward compiled in place: the model's own compiled steps are the yardstick of the profiler's
    # cost per event (fxprof.measure.compiled.in_session), timed by the session in a plain generate
    # between the warm-up and the timed one (step 1, "none"); a plain generate before the session
    # compiles the user's own program first, so that no compile lands in those steps
    own_steps = 1 if compiled_forward(model) is not None else 0

    def plan(step: int) -> str:
        # step 0: the warm-up generate (every call untimed); then own_steps plain generates (the
        # model's own forward, timed by the session as its eager steps); then the timed prefill (a
        # cycle of its own) and one timed decode step each (the second cycle); C calls per generate
        if step == 0:
            return "warmup"
        step -= own_steps
        if step < 1:
            return "none"
        if step == 1:
            return "active_last"
        if step < calls[0]:
            return "active"
        return "active_last" if step == calls[0] else "none"

    # a compile can take minutes on a CPU: a line when each graph starts and ends, and while it lasts
    with compile_progress(progress):
        if own_steps:
            say("plain generate: the model's own compiled program (compiles it; untimed)")
            with torch.no_grad():
                model.generate(input_ids, max_new_tokens=max_new_tokens, **generate_kwargs)

        # dynamo counts every compiled version of the forward's code against its recompile limit (8), and
        # Hugging Face models share one decorator's code: the third fxprof.generate of a process (3 graphs
        # each) would run as plain Python. The limit is raised by the versions already held, while this runs.
        with room_to_compile(model), session(model, schedule=plan, capture=capture, timer=timer, memory=False,
                                             name=type(model).__name__) as s:
            s.defer_builds = True  # the prefill's cycle is built after the decode steps, not between them
            say("warm-up generate: capturing the prefill and decode graphs")
            handle = model.register_forward_hook(count)
            try:
                first = model.generate(input_ids, max_new_tokens=max_new_tokens, **generate_kwargs)
            except Exception as exc:
                if not own_steps or isinstance(exc, FxprofError):  # fxprof's own refusals say what they mean
                    raise
                raise RuntimeError(_RECOMPILE_FAILED.format(model=type(model).__name__, error=_first_line(exc))) from exc
            finally:
                handle.remove()
            s.step()
            warm_graphs = s.captures
            for _ in range(own_steps):
                say("plain generate: the model's own compiled steps, the profiler's yardstick")
                model.generate(input_ids, max_new_tokens=max_new_tokens, **generate_kwargs)
                s.step()
            say(f"timed generate: {calls[0]} model call(s), one timed step each")
            handle = model.register_forward_hook(lambda *_: s.step())
            try:
                tokens = model.generate(input_ids, max_new_tokens=max_new_tokens, streamer=streamer, **generate_kwargs)
            finally:
                handle.remove()
    if not torch.equal(first, tokens):
        raise RuntimeError("the timed generate call gave other tokens than the warm-up call (a nondeterministic model "
                           "or kernel): fxprof.generate needs greedy decoding that repeats itself")
    profiles = list(s.profiles)
    if len(profiles) != (2 if calls[0] > 1 else 1):
        raise RuntimeError(f"expected a prefill and a decode profile from {calls[0]} model call(s), got {len(profiles)}: "
                           f"does {type(model).__name__}.generate call the model once per token?")
    say("plain generate: the model's own calls, unprofiled")
    own, own_lost, cache = _own_calls(model, input_ids, max_new_tokens, generate_kwargs, tokens)
    prefill, decode = profiles[0], (profiles[1] if len(profiles) > 1 else None)
    shapes = _shapes(model, input_ids, kv_layout(model, cache))
    notes = _notes(prefill, decode, shapes, s.captures - warm_graphs, generate_kwargs.get("cache_implementation") == "static")
    for prof in (prefill, decode):
        if prof is not None:
            prof.meta["notes"] = [f"fxprof.generate: {notes[0]}"] + list(prof.meta.get("notes", []))
    per_token = _per_token(prefill, decode, shapes, bandwidth)
    meta = {"model": type(model).__name__, "prompt_len": shapes["prompt_len"], "batch": shapes["batch"],
            "new_tokens": len(per_token), "max_new_tokens": max_new_tokens, "device": str(input_ids.device),
            "dtype": str(shapes["dtype"]).replace("torch.", ""), "timer": prefill.meta.get("timer", ""),
            "threads": torch.get_num_threads(), "torch": torch.__version__,
            "kv_bytes_per_token": shapes["kv_per_token"], "kv_rule": shapes["kv"].rule, "layer_stack": shapes["stack"],
            "weight_bytes": shapes["weight_bytes"],
            "weight_bytes_decode": shapes["weight_bytes_decode"], "config": shapes["config"],
            "bytes_per_s": bandwidth[0] if bandwidth else None, "flops_per_s": bandwidth[1] if bandwidth else None,
            "peaks_source": bandwidth[2] if bandwidth else "", "notes": notes, "own_ms": own, "own_lost_ms": own_lost,
            **_machine(prefill, decode)}
    if prefill.is_compiled:  # the compiled program's kernels, not an eager graph
        c = prefill.meta.get("compiled", {})
        last = (decode or prefill).meta.get("compiled", {})
        meta["timer"] = "compiled kernels (" + (_KERNELS_TIMED_BY.get(str(prefill.meta.get("timer"))) or "torch.profiler") + ")"
        meta["compiled"] = {"backend": c.get("backend"), "mode": c.get("mode"), "dynamic": c.get("dynamic"),
                            "fullgraph": c.get("fullgraph"), "graphs": last.get("graphs"), "recompiles": last.get("recompiles"),
                            "kernels": last.get("kernels"), "compile_s": c.get("compile_s"),
                            "cache": str(generate_kwargs.get("cache_implementation") or "dynamic")}
    layers = pd.DataFrame({"weight_bytes": pd.Series(shapes["layer_weights"], dtype="float64")})
    kv = shapes["kv"]
    names = sorted(layers.index, key=lambda n: int(n.split()[-1]) if n.split()[-1].isdigit() else -1)
    if len(names) == len(kv.per_token):  # per decoder layer: what a token adds, and the most it keeps
        layers["kv_bytes_per_token"] = pd.Series(dict(zip(names, kv.per_token)), dtype="float64")
        layers["kv_tokens_kept"] = pd.Series(dict(zip(names, [float("nan") if k is None else float(k) for k in kv.keep])),
                                             dtype="float64")
    else:
        layers["kv_bytes_per_token"] = float(shapes["kv_per_token_layer"])
    layers.index.name = "layer"
    return Generation(tokens=tokens, prefill=prefill, decode=decode, per_token=per_token, layers=layers, meta=meta)


def _machine(prefill: Any, decode: Any) -> dict[str, Any]:
    """The highest load average the steps' meters read, the usable cores, and what the process
    lost to other processes over the prefill's and the decode steps' windows (their sums; None
    where a window was not measured)."""
    found = [p.meta.get("contention") or {} for p in (prefill, decode) if p is not None]
    loads = [float(v) for f in found for v in (f.get("load") or ()) if isinstance(v, (int, float))]
    windows = [(f.get("window_lost_ms"), f.get("window_ms")) for f in found]
    measured = all(isinstance(v, (int, float)) for w in windows for v in w)
    return {"load": max(loads) if loads else None, "cores": max((int(f.get("cores") or 0) for f in found), default=0),
            "window_lost_ms": round(sum(w[0] for w in windows), 6) if measured else None,
            "window_ms": round(sum(w[1] for w in windows), 6) if measured else None}


def _own_calls(model: nn.Module, input_ids: torch.Tensor, max_new_tokens: int, generate_kwargs: dict[str, Any],
               tokens: torch.Tensor) -> tuple[list[float], list[float], Any]:
    """Each model call of a plain ``model.generate`` (no fxprof around it) after the profiled one,
    in ms, forward pre-hook to forward hook (the device synchronized at both on a GPU): the
    model's own prefill and decode steps that the profiled ones are held against; and what each
    lost to other processes (ms); and the cache it left (the KV layout's truth:
    :mod:`fxprof.measure.passes.kv_cache`). Empty lists when the plain call gives other tokens.

    One untimed plain generate runs first, as the profiled steps had their warm-up: the profiled
    calls ran fxprof's captured graph, so this is the model's first eager generate of the process,
    and its first call at each position builds what later calls reuse (oneDNN primitives on a CPU,
    cuDNN attention plans on a GPU). Timed cold, a tiny Llama's own decode step read 1.7x its
    warm one on a CPU and a 160M Llama's 5.7x on an H200 (42 ms against 7.4 ms profiled)."""
    cuda = input_ids.is_cuda
    times: list[float] = []
    lost: list[float] = []
    meter = ContentionMeter()
    start: list[Any] = [0, None]

    def before(*_: Any) -> None:
        if cuda:
            torch.cuda.synchronize()
        start[1] = meter.mark()
        start[0] = time.perf_counter_ns()

    def after(*_: Any) -> None:
        if cuda:
            torch.cuda.synchronize()
        times.append((time.perf_counter_ns() - start[0]) / 1e6)
        lost.append(meter.lost_since(start[1]))

    with torch.no_grad():
        model.generate(input_ids, max_new_tokens=max_new_tokens, **generate_kwargs)
        handles = [model.register_forward_pre_hook(before), model.register_forward_hook(after)]
        try:
            out = model.generate(input_ids, max_new_tokens=max_new_tokens,
                                 **{**generate_kwargs, "return_dict_in_generate": True})
        finally:
            for handle in handles:
                handle.remove()
    sequences = getattr(out, "sequences", out)
    # a ModelOutput is a dict: read by key ("past_key_values" is the older name; its property warns)
    cache = (out.get("cache") or out.get("past_key_values")) if isinstance(out, dict) else None
    return (times, lost, cache) if torch.equal(sequences, tokens) else ([], [], cache)


# ---------------------------------------------------------------------- what a step moves
def _shapes(model: nn.Module, input_ids: torch.Tensor, kv: KVLayout) -> dict[str, Any]:
    """The configuration's figures: KV cache bytes per token (2 x layers x kv_heads x head_dim x
    dtype bytes), the weights a step reads (the input embedding table is not read whole, only
    its rows, unless the LM head shares it; a mixture of experts reads top_k of its experts per
    token), per layer, and the matrix parameters for the FLOPs."""
    config = model.config
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    layers = int(text.num_hidden_layers)
    heads = int(text.num_attention_heads)
    kv_heads, head_dim = kv.kv_heads, kv.head_dim
    param = next(model.parameters())
    dtype = param.dtype
    item = torch.empty((), dtype=dtype).element_size()
    kv_layer = kv.per_token[0] if kv.per_token else 0.0
    experts = int(getattr(text, "num_local_experts", None) or getattr(text, "num_experts", None) or 0)
    top_k = int(getattr(text, "num_experts_per_tok", None) or 0)
    embed_in = model.get_input_embeddings() if hasattr(model, "get_input_embeddings") else None
    embed_out = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    in_weight = getattr(embed_in, "weight", None)
    tied = in_weight is not None and embed_out is not None and getattr(embed_out, "weight", None) is in_weight
    total = expert = 0.0
    matrix = expert_matrix = 0.0
    per_layer: dict[str, float] = {}
    per_layer_expert: dict[str, float] = {}
    stack = decoder_stack(model)
    for name, p in model.named_parameters():
        size = float(p.numel() * p.element_size())
        is_expert = experts > 0 and ".experts." in f".{name}."
        if p is in_weight and not tied:
            continue  # a step reads the rows of its tokens only
        total += size
        layer = layer_of(name, stack)
        if layer != "outside layers":
            per_layer[layer] = per_layer.get(layer, 0.0) + size
            if is_expert:
                per_layer_expert[layer] = per_layer_expert.get(layer, 0.0) + size
        if is_expert:
            expert += size
        if p.dim() >= 2:
            matrix += p.numel()
            if is_expert:
                expert_matrix += p.numel()
    batch, prompt_len = int(input_ids.shape[0]), int(input_ids.shape[1])
    share = (lambda tokens: min(1.0, top_k * tokens / experts)) if experts and top_k else (lambda tokens: 1.0)
    decode_share = share(batch)
    return {"batch": batch, "prompt_len": prompt_len, "dtype": dtype, "layers": layers, "stack": stack,
            "kv_per_token": kv.per_token_total, "kv_per_token_layer": kv_layer, "kv": kv,
            "weight_bytes": total, "expert_bytes": expert, "share": share,
            "weight_bytes_decode": total - expert * (1 - decode_share),
            "layer_weights": {k: v - per_layer_expert.get(k, 0.0) * (1 - decode_share) for k, v in per_layer.items()},
            "matrix_params": matrix, "expert_matrix_params": expert_matrix, "attn_width": heads * head_dim,
            "config": {"layers": layers, "heads": heads, "kv_heads": kv_heads, "head_dim": head_dim,
                       "experts": experts, "experts_per_token": top_k, "tied_embeddings": bool(tied),
                       "dtype_bytes": item}}


def _step_figures(shapes: dict[str, Any], new: int, cached: int) -> tuple[float, float, float]:
    """A step that feeds ``new`` tokens a sequence after ``cached`` ones: the KV cache bytes
    after it, the bytes it reads (weights + that KV cache), its FLOPs (2 per matrix parameter a
    token uses, and 4 x layers x heads x head_dim per (query, key) pair of causal attention)."""
    batch = shapes["batch"]
    share = shapes["share"](batch * new)
    seq = cached + new
    kv = shapes["kv"].bytes_at(seq, batch)
    weights = shapes["weight_bytes"] - shapes["expert_bytes"] * (1 - share)
    used = shapes["matrix_params"] - shapes["expert_matrix_params"] * (1 - shapes["share"](1))
    pairs = new * cached + new * (new + 1) / 2  # causal: query j sees cached + j keys
    flops = batch * (2.0 * used * new + 4.0 * shapes["layers"] * shapes["attn_width"] * pairs)
    return kv, weights + kv, flops


def _per_token(prefill: Any, decode: Any, shapes: dict[str, Any], bandwidth: tuple | None) -> pd.DataFrame:
    rows = []
    P = shapes["prompt_len"]
    steps = [("prefill", prefill.runs.iloc[0], P, 0)]
    if decode is not None:
        steps += [("decode", run, 1, P + i) for i, (_, run) in enumerate(decode.runs.iterrows())]
    for token, (phase, run, new, cached) in enumerate(steps):
        kv, read, flops = _step_figures(shapes, new, cached)
        time_ms = float(run["total_ms"])
        floor = read / bandwidth[0] * 1e3 if bandwidth else float("nan")
        rows.append({"token": token, "position": P + token, "phase": phase, "time_ms": time_ms,
                     "lost_ms": float(run.get("lost_ms", 0.0) or 0.0), "kv_cache_bytes": kv, "read_bytes": read,
                     "flops": flops, "floor_ms": floor, "floor_pct": floor / time_ms * 100.0 if time_ms > 0 else np.nan})
    return pd.DataFrame(rows, columns=list(PER_TOKEN_COLUMNS)).astype(
        {"token": "int64", "position": "int64", "phase": "str", **{c: "float64" for c in PER_TOKEN_COLUMNS[3:]}})


def _notes(prefill: Any, decode: Any, shapes: dict[str, Any], timed_compiles: int = 0, static: bool = False) -> list[str]:
    graphs = int((decode or prefill).meta.get("captures", 0) or 0)
    kind = prefill.meta.get("capture", "")
    if kind == "compiled":
        c = (decode or prefill).meta.get("compiled", {})
        recompiles = int(c.get("recompiles", 0) or 0)
        text = (f"compiled: the model's forward is torch.compile'd (inductor, mode {c.get('mode', 'default')}); fxprof compiled "
                f"it again with the same options (kernel ranges and provenance on) and timed the compiled program's kernels "
                f"({_KERNELS_TIMED_BY.get(str(prefill.meta.get('timer'))) or 'torch.profiler'}), charged to the nodes and layers they compute; {graphs} graph(s) over the warm-up and "
                f"timed generate calls, {recompiles} of them recompile(s) of the forward for new shapes (a decode graph after "
                f"the prefill graph; with the default dynamic cache the first decode step gets a static graph before a "
                f"dynamic one, cache_implementation='static' keeps one decode graph for all positions)")
    else:
        text = (f"{kind} compiled {graphs} graph(s) over the warm-up and timed generate calls"
                + (f" ({graphs - 2} recompile(s) beyond one prefill and one decode graph: new shapes, e.g. a static first "
                   f"decode graph, then a dynamic one)" if kind == "dynamo" and graphs > 2 else ""))
    text += ("; every compile happened in the warm-up call, none in a timed step" if timed_compiles <= 0 else
             f"; {timed_compiles} graph(s) were compiled during the timed generate call (guards failed on a shape the "
             f"warm-up call had run): a step that compiled is in the table with its compile time")
    if decode is not None:
        used = sorted({str(g) for g in decode.df.loc[decode.df["calls"] > 0, "graph"] if str(g)})
        text += (f"; the timed decode steps ran {'one graph for every position' if len(used) <= 1 else f'{len(used)} graphs'}"
                 f"{' (' + ', '.join(used) + ')' if used else ''}")
    if static:
        text += ("; static cache (cache_implementation='static'): the cache is allocated for its whole length at the "
                 "start; kv_cache_bytes counts the positions filled, what a step must read at least (attention over the "
                 "static cache may read the whole allocation)")
    notes = [text, "per-token bytes and FLOPs come from the model's configuration: weights a step reads (the input "
                   "embedding table counts only if the LM head shares it) plus the KV cache (2 x layers x kv_heads x "
                   "head_dim x dtype bytes per token); attention FLOPs causal"]
    if shapes["config"]["experts"]:
        c = shapes["config"]
        notes.append(f"mixture of experts: a step reads the weights of top {c['experts_per_token']} of {c['experts']} "
                     f"experts per token and layer (at most all of them), an estimate: which experts the router picks "
                     f"is not read")
    return notes


def _peaks(peaks: Any, model: nn.Module) -> tuple[float, float, str] | None:
    """(bytes per second, FLOPs per second, source) of the floor, or None."""
    if peaks_off(peaks):
        return None
    if isinstance(peaks, str) and peaks.strip().lower() in ("auto", "quick"):
        from .measure.passes.peaks import machine_peaks

        param = next(model.parameters())
        found = machine_peaks(param.device, param.dtype, sizes="quick" if peaks.strip().lower() == "quick" else "full")
        return float(found.bytes_per_s), float(found.flops_per_s), "measured"
    if isinstance(peaks, str):
        peaks = parse_peaks(peaks)
    if isinstance(peaks, (tuple, list)) and len(peaks) == 2:
        peaks = parse_peaks(f"{peaks[0]},{peaks[1]}")
    if not isinstance(peaks, Peaks):
        raise ValueError(f"peaks must be 'auto', (TFLOPS, GBPS), 'TFLOPS,GBPS', a fxprof.Peaks or None, got {peaks!r}")
    return float(peaks.bytes_per_s), float(peaks.flops_per_s), peaks.source
