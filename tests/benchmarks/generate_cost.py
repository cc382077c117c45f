"""fxprof.generate's cost: a profiled decode step against the model's own decode step.

    python tests/benchmarks/generate_cost.py [--hidden 128] [--layers 2] [--prompt-len 16]
        [--new-tokens 16] [--repeats 5] [--threads 1] [--compile] [--processes 1] [--json out.json]

A tiny Llama built from a config (``--hidden``, ``--layers``; no download). Each repeat runs, in
turn, plain greedy ``model.generate`` with every model call timed from a forward pre-hook to a
forward hook (``time.perf_counter_ns``), then :func:`fxprof.generate` on the same prompt (its
per-token table's decode steps: each the timed run of one step). The decode steps of both
(every call but the first) are compared: per repeat the ratio of the medians, and the median of
those ratios. ``decode_ratio`` holds fxprof's timed run of a step (what ``per_token.time_ms``
says) to the plain call; ``call_ratio`` the whole profiled call as the user's loop sees it (the
same hooks around the timed generate's decode calls: the session's signature, capture look-up
and bookkeeping included) to the plain call. The issues' targets are a profiled decode step within 1.10x of the plain one on the
CPU (issue 50), 1.05x for a compiled one (issue 60); ``--processes K`` runs it all in K fresh
processes in turn and gives the median over them (one process's figure moves by up to 0.1 from
the next one's); this script reports the figure, it asserts nothing (timings on a shared machine are not a
test). The prefill's ratio is reported beside it.

``--compile``: the forward compiled in place (``model.forward = torch.compile(model.forward)``,
Hugging Face's recipe) and a static cache, for both the plain generate and fxprof's (whose timed
steps are then the compiled program's, timed by fxprof's marks in the generated code on the CPU:
docs/generate.md, "Compiled decoding").
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))

import fxprof  # noqa: E402


def build(hidden: int, layers: int):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    heads = max(2, hidden // 32)
    model = LlamaForCausalLM(LlamaConfig(hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=layers,
                                         num_attention_heads=heads, num_key_value_heads=max(1, heads // 2),
                                         vocab_size=2000)).eval()
    model.generation_config.eos_token_id = None
    return model


def timed_calls(model, run, into: list[float] | None = None) -> list[float]:
    """Each model call while ``run()`` runs, in ms (forward pre-hook to forward hook), appended to
    ``into`` (a new list by default) as they come."""
    times: list[float] = [] if into is None else into
    start = [0]

    def before(*_):
        start[0] = time.perf_counter_ns()

    def after(*_):
        times.append((time.perf_counter_ns() - start[0]) / 1e6)

    handles = [model.register_forward_pre_hook(before), model.register_forward_hook(after)]
    try:
        run()
    finally:
        for h in handles:
            h.remove()
    return times


def plain_calls(model, ids, n: int, **kwargs) -> list[float]:
    return timed_calls(model, lambda: model.generate(ids, max_new_tokens=n, do_sample=False, **kwargs))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--prompt-len", type=int, default=16)
    parser.add_argument("--new-tokens", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--compile", action="store_true", help="the forward compiled in place, a static cache")
    parser.add_argument("--json", default=None)
    parser.add_argument("--processes", type=int, default=1,
                        help="run the whole measurement in this many fresh processes, one after the other, and give "
                             "the median of theirs: one process's figure moves by up to 0.1 from the next one's")
    args = parser.parse_args(argv)
    if args.processes > 1:
        return _processes(args, argv if argv is not None else sys.argv[1:])
    torch.set_num_threads(args.threads)
    model = build(args.hidden, args.layers)
    extra = {}
    if args.compile:
        model.forward = torch.compile(model.forward)
        extra = {"cache_implementation": "static"}
    ids = torch.randint(0, 2000, (1, args.prompt_len), generator=torch.Generator().manual_seed(0))
    plain_calls(model, ids, args.new_tokens, **extra)  # warm the model (and compile it)
    rows = []
    for r in range(args.repeats):
        plain = plain_calls(model, ids, args.new_tokens, **extra)
        found: list = []
        marks: dict[str, int] = {}
        calls: list[float] = []

        def said(line: str) -> None:  # fxprof.generate says which generate runs next: mark where the timed one is
            for key in ("timed generate", "plain generate: the model's own calls"):
                if line.startswith(key):
                    marks[key] = len(calls)

        timed_calls(model, lambda: found.append(fxprof.generate(model, ids, max_new_tokens=args.new_tokens, peaks=None,
                                                                 progress=said, **extra)), into=calls)
        gen = found[0]
        dec = gen.per_token[gen.per_token["phase"] == "decode"]
        prof = dec["time_ms"].tolist()
        # the timed generate's decode calls: between the progress lines that announce it and the plain one after it
        timed = calls[marks["timed generate"] + 1:marks["plain generate: the model's own calls"]]
        rows.append({"repeat": r, "plain_decode_ms": statistics.median(plain[1:]), "fxprof_decode_ms": statistics.median(prof),
                     "fxprof_call_ms": statistics.median(timed),
                     "plain_prefill_ms": plain[0], "fxprof_prefill_ms": float(gen.per_token["time_ms"].iloc[0]),
                     "lost_ms": float(dec["lost_ms"].sum()), "nodes": int((gen.decode.df["op"] != "placeholder").sum())})
        rows[-1]["decode_ratio"] = rows[-1]["fxprof_decode_ms"] / rows[-1]["plain_decode_ms"]
        rows[-1]["call_ratio"] = rows[-1]["fxprof_call_ms"] / rows[-1]["plain_decode_ms"]
        rows[-1]["prefill_ratio"] = rows[-1]["fxprof_prefill_ms"] / rows[-1]["plain_prefill_ms"]
    cols = list(rows[0])
    print(f"*fxprof.generate against plain generate{' (forward compiled in place, static cache)' if args.compile else ''}: "
          f"Llama hidden {args.hidden}, {args.layers} layers, prompt "
          f"{args.prompt_len}, {args.new_tokens} new tokens, {args.threads} thread(s), torch {torch.__version__}*\n")
    print("| " + " | ".join(cols) + " |")
    print("| " + " | ".join("---" for _ in cols) + " |")
    for row in rows:
        print("| " + " | ".join(f"{row[c]:.4g}" if isinstance(row[c], float) else str(row[c]) for c in cols) + " |")
    target = 1.05 if args.compile else 1.10  # issue 60 for a compiled decode step, issue 50 for an eager one
    summary = {"decode_ratio_median": statistics.median(r["decode_ratio"] for r in rows),
               "prefill_ratio_median": statistics.median(r["prefill_ratio"] for r in rows),
               "call_ratio_median": statistics.median(r["call_ratio"] for r in rows),
               "plain_decode_ms_median": statistics.median(r["plain_decode_ms"] for r in rows),
               "fxprof_decode_ms_median": statistics.median(r["fxprof_decode_ms"] for r in rows),
               "target_decode_ratio": target}
    print(f"\ndecode step: profiled / plain = {summary['decode_ratio_median']:.3g}x (median of {len(rows)} repeats; "
          f"target <= {target:.2f}x); the whole call as the loop sees it (the session's own work per call included): "
          f"{summary['call_ratio_median']:.3g}x; prefill {summary['prefill_ratio_median']:.3g}x; load {os.getloadavg()[0]:.2f}")
    if args.json:
        with open(args.json, "w") as handle:
            json.dump({"rows": rows, "summary": summary, "args": vars(args)}, handle, indent=1)
    return 0


def _processes(args: argparse.Namespace, argv: list[str]) -> int:
    """The measurement in ``args.processes`` fresh processes in turn: each one's medians, then the
    median over them (what a claim about the ratio rests on)."""
    import subprocess
    import tempfile

    own = [a for i, a in enumerate(argv) if not (a.startswith("--processes") or (i and argv[i - 1] == "--processes"))]
    own = [a for i, a in enumerate(own) if not (a.startswith("--json") or (i and own[i - 1] == "--json"))]
    found = []
    with tempfile.TemporaryDirectory() as folder:
        for k in range(args.processes):
            out = os.path.join(folder, f"{k}.json")
            subprocess.run([sys.executable, __file__, *own, "--json", out], check=True, stdout=subprocess.DEVNULL)
            with open(out) as handle:
                summary = json.load(handle)["summary"]
            found.append(summary)
            print(f"process {k}: decode step {summary['decode_ratio_median']:.3g}x, whole call "
                  f"{summary['call_ratio_median']:.3g}x, prefill {summary['prefill_ratio_median']:.3g}x; load "
                  f"{os.getloadavg()[0]:.2f}", flush=True)
    decode = [f["decode_ratio_median"] for f in found]
    call = [f["call_ratio_median"] for f in found]
    print(f"\ndecode step: profiled / plain = {statistics.median(decode):.3g}x (median of {len(found)} processes, "
          f"{min(decode):.3g}-{max(decode):.3g}; target <= {found[0]['target_decode_ratio']:.2f}x); the whole call as the "
          f"loop sees it: {statistics.median(call):.3g}x ({min(call):.3g}-{max(call):.3g})")
    if args.json:
        with open(args.json, "w") as handle:
            json.dump({"processes": found, "decode_ratio_median": statistics.median(decode),
                       "call_ratio_median": statistics.median(call), "args": vars(args)}, handle, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
