"""Every causal-LM family of the installed transformers against fxprof's KV cache layout.

    python tests/benchmarks/llm_families.py [--json out.json] [--max-params 20e6]
    python tests/benchmarks/llm_families.py --compile llama,gpt2,... [--timeout 600]

For each entry of ``MODEL_FOR_CAUSAL_LM_MAPPING_NAMES``: the family's config class with its
size fields shrunk (hidden 64, 2 layers, 4 heads, 2 KV heads, vocabulary 300, a sliding window
of 5 where the family has one), built on the meta device first (a config that stays large is
skipped, with its size), then for real; a plain greedy ``generate`` of 4 new tokens with
``return_dict_in_generate=True``; the real cache's bytes (every layer's keys and values) held
against :func:`fxprof.measure.passes.kv_cache.kv_layout` from the config alone and from that
cache. Families that cannot build from a small config are listed with the reason. It asserts
nothing; tests/api/test_llm_families.py holds the representative families in CI.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import sys
import warnings

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))

from fxprof.measure.passes.kv_cache import kv_layout  # noqa: E402

SMALL = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, intermediate_size=128,
             vocab_size=300, head_dim=16, n_embd=64, n_layer=2, n_head=4, num_layers=2, d_model=64, ffn_dim=128,
             max_position_embeddings=128, n_positions=128, sliding_window=5)


def small_config(name: str):
    """The family's default config with its size fields shrunk (:data:`SMALL`), 2 layers' types."""
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    config = CONFIG_MAPPING[name]()
    for key, value in SMALL.items():
        if hasattr(config, key):
            try:
                setattr(config, key, value)
            except Exception:  # noqa: BLE001 - a field the family computes
                pass
    types = getattr(config, "layer_types", None)
    if isinstance(types, list) and types:
        config.layer_types = [types[i % len(types)] for i in range(2)]
    return config


def family(name: str, class_name: str, max_params: float) -> tuple[str, str]:
    import transformers as T

    try:
        config = small_config(name)
        cls = getattr(T, class_name)
        with torch.device("meta"):
            probe = cls(config)
        size = sum(p.numel() for p in probe.parameters())
        del probe
        if size > max_params:
            return "skip", f"{size / 1e6:.0f}M parameters from a small config"
        torch.manual_seed(0)
        model = cls(config).eval()
        model.generation_config.eos_token_id = None
        ids = torch.randint(3, 200, (1, 8), generator=torch.Generator().manual_seed(0))
        out = model.generate(ids, max_new_tokens=4, do_sample=False, return_dict_in_generate=True)
    except Exception as exc:  # noqa: BLE001 - a family that cannot build is a row with its reason
        return "skip", f"{type(exc).__name__}: {str(exc).strip().splitlines()[0][:120] if str(exc).strip() else ''}"
    keys = out.keys()
    cache = out["cache"] if "cache" in keys else out["past_key_values"] if "past_key_values" in keys else None
    layers = getattr(cache, "layers", None)
    if not layers:
        return "no cache", f"generate left {type(cache).__name__}: nothing to hold the layout against"
    try:
        real = sum(l.keys.numel() * l.keys.element_size() + l.values.numel() * l.values.element_size() for l in layers)
    except AttributeError as exc:
        return "no cache", f"cache layers without keys/values ({exc})"
    seq = out.sequences.shape[1] - 1
    from_config, from_cache = kv_layout(model).bytes_at(seq), kv_layout(model, cache).bytes_at(seq)
    verdict = "right" if from_cache == real else "WRONG"
    return verdict, (f"real {real:.0f} B; from the cache {from_cache:.0f}, from the config {from_config:.0f}"
                     f"{'' if from_config == real else ' (config rule off)'}; {kv_layout(model, cache).rule}")


def build(name: str) -> tuple:
    """The family's small model (as :func:`family` builds it) and a prompt, for ``--compile``."""
    import transformers as T
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    config = small_config(name)
    torch.manual_seed(0)
    model = getattr(T, MODEL_FOR_CAUSAL_LM_MAPPING_NAMES[name])(config).eval()
    model.generation_config.eos_token_id = None
    return model, torch.randint(3, 200, (1, 8), generator=torch.Generator().manual_seed(0))


def compiled_family(name: str) -> tuple[str, str]:
    """``fxprof.generate`` of the family with its forward compiled in place (static cache), after
    the model's own compiled generate: ``("ok", ...)`` with the tokens equal to plain greedy
    generate's, ``"no compile"`` where the model's own compile fails (not fxprof's to profile),
    ``"FAILED"`` otherwise."""
    import time

    import fxprof

    try:
        model, ids = build(name)
        plain = model.generate(ids, max_new_tokens=4, do_sample=False)
    except Exception as exc:  # noqa: BLE001
        return "skip", f"{type(exc).__name__}: {str(exc).strip().splitlines()[0][:120] if str(exc).strip() else ''}"
    model.forward = torch.compile(model.forward)
    t0 = time.perf_counter()
    try:
        own = model.generate(ids, max_new_tokens=4, do_sample=False, cache_implementation="static")
    except Exception as exc:  # noqa: BLE001
        return "no compile", f"the model's own compiled generate fails: {type(exc).__name__}: {str(exc).splitlines()[0][:100]}"
    own_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    try:
        gen = fxprof.generate(model, ids, max_new_tokens=4, peaks=None, cache_implementation="static")
    except Exception as exc:  # noqa: BLE001
        return "FAILED", f"{type(exc).__name__}: {str(exc).splitlines()[0][:160]}"
    same = torch.equal(gen.tokens, plain) and torch.equal(own, plain)
    return ("ok" if same else "WRONG"), (f"tokens {'equal' if same else 'DIFFER from'} plain greedy generate's; own compile "
                                         f"{own_s:.0f} s, fxprof.generate {time.perf_counter() - t0:.0f} s; "
                                         f"{gen.meta.get('compiled', {}).get('graphs')} graph(s)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", default=None)
    parser.add_argument("--max-params", type=float, default=20e6)
    parser.add_argument("--compile", default=None, metavar="FAMILIES",
                        help="comma-separated families: fxprof.generate with the forward compiled in place, each in "
                             "a process of its own (--timeout seconds), instead of the KV layout check")
    parser.add_argument("--timeout", type=float, default=600)
    parser.add_argument("--one", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    warnings.simplefilter("ignore")
    if args.one:
        print(json.dumps(compiled_family(args.one)), flush=True)
        return 0
    if args.compile:
        import subprocess

        rows = {}
        for name in args.compile.split(","):
            try:
                run = subprocess.run([sys.executable, __file__, "--one", name], capture_output=True, text=True,
                                     timeout=args.timeout)
                last = (run.stdout.strip().splitlines() or [""])[-1]
                rows[name] = json.loads(last) if last.startswith("[") else ["FAILED", (run.stderr.strip().splitlines() or ["?"])[-1][:160]]
            except subprocess.TimeoutExpired:
                rows[name] = ["timeout", f"over {args.timeout:.0f} s"]
            print(f"{name:20s} {rows[name][0]:10s} {rows[name][1]}", flush=True)
        if args.json:
            with open(args.json, "w") as fh:
                json.dump({"compile": rows}, fh, indent=1)
        return 0
    import transformers
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    rows = {}
    for name, class_name in sorted(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.items()):
        rows[name] = family(name, class_name, args.max_params)
        print(f"{name:28s} {rows[name][0]:9s} {rows[name][1]}", flush=True)
    counts = collections.Counter(v[0] for v in rows.values())
    print(f"transformers {transformers.__version__}, torch {torch.__version__}: " + ", ".join(f"{k} {v}" for k, v in counts.items()))
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"transformers": transformers.__version__, "rows": rows}, fh, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
