"""fxprof.generate: a causal LM's prefill and decode steps profiled node by node, token by token.

Tiny Hugging Face models built from configs (no download, weights from torch.manual_seed): the
tokens equal plain greedy generate's, one per-token row per new token, the KV cache bytes grow
linearly and end at the real cache's size, the per-layer split and the memory floor."""

from __future__ import annotations

import logging

import numpy as np
import pandas as pd
import pytest
import torch

import fxprof

T = pytest.importorskip("transformers")
torch._logging.set_logs(dynamo=logging.ERROR)

PEAKS = (0.1, 10.0)  # given peaks: no measurement in the tests


def _ids(vocab: int, length: int = 8, batch: int = 1) -> torch.Tensor:
    return torch.randint(0, vocab, (batch, length), generator=torch.Generator().manual_seed(0))


def _ready(model):
    torch.manual_seed(0)
    model = model.eval()
    model.generation_config.eos_token_id = None  # never stop early: N new tokens, N model calls
    return model


def llama():
    torch.manual_seed(0)
    return _ready(T.LlamaForCausalLM(T.LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                                   num_attention_heads=4, num_key_value_heads=2, vocab_size=500)))


def mistral():
    torch.manual_seed(0)
    return _ready(T.MistralForCausalLM(T.MistralConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                                       num_attention_heads=4, num_key_value_heads=2, vocab_size=500,
                                                       sliding_window=None)))


def mixtral():
    torch.manual_seed(0)
    return _ready(T.MixtralForCausalLM(T.MixtralConfig(hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                                                       num_attention_heads=4, num_key_value_heads=2, vocab_size=500,
                                                       num_local_experts=4, num_experts_per_tok=2)))


def gpt2():
    torch.manual_seed(0)
    return _ready(T.GPT2LMHeadModel(T.GPT2Config(vocab_size=500, n_embd=64, n_layer=2, n_head=4, n_positions=64)))


def _cache_bytes(model, ids, n):
    """The real KV cache's bytes after plain generate (it holds prompt + n - 1 tokens)."""
    out = model.generate(ids, max_new_tokens=n, do_sample=False, return_dict_in_generate=True)
    cache = out.past_key_values
    return sum(layer.keys.nbytes + layer.values.nbytes for layer in cache.layers)


def _check(model, n=4, prompt=8, batch=1):
    ids = _ids(model.config.vocab_size, prompt, batch)
    plain = model.generate(ids, max_new_tokens=n, do_sample=False)
    rng = torch.get_rng_state()
    gen = fxprof.generate(model, ids, max_new_tokens=n, peaks=PEAKS)
    assert torch.equal(torch.get_rng_state(), rng)  # profiling draws no random numbers
    assert torch.equal(gen.tokens, plain)  # exactly what generate gives without fxprof
    pt = gen.per_token
    assert len(pt) == n
    assert list(pt["phase"]) == ["prefill"] + ["decode"] * (n - 1)
    assert list(pt["position"]) == list(range(prompt, prompt + n))
    assert (pt["time_ms"] > 0).all()
    # KV bytes: the same growth every token, and the real cache's size after the last step
    growth = np.diff(pt["kv_cache_bytes"].to_numpy())
    assert np.allclose(growth, gen.meta["kv_bytes_per_token"] * batch) and growth[0] > 0
    assert pt["kv_cache_bytes"].iloc[-1] == _cache_bytes(model, ids, n)
    assert (pt["read_bytes"] > pt["kv_cache_bytes"]).all()
    assert pt["flops"].iloc[0] > pt["flops"].iloc[1] > 0  # the prefill computes prompt_len tokens
    assert np.allclose(pt["floor_ms"], pt["read_bytes"] / (PEAKS[1] * 1e9) * 1e3)
    # two profiles: one prefill run, one timed run per decode step, nodes charged to layers
    assert gen.prefill.num_runs == 1 and gen.decode.num_runs == n - 1
    assert np.allclose(gen.decode.runs["total_ms"], pt["time_ms"].iloc[1:])
    for phase in ("prefill", "decode"):
        layers = gen.layer_table(phase)
        assert {"layer 0", "layer 1"} <= set(layers.index)
        assert layers.loc["layer 0", "time_ms"] > 0
    shares = gen.shares()
    for group in ("attention", "mlp", "norm", "lm_head"):
        assert shares.loc[group, "decode_ms"] > 0, group
    assert abs(shares["decode_pct"].sum() - 100) < 1e-6
    text = gen.summary()
    assert "floor of a decode step" in text and "GB/s" in text and "tokens/s" in text
    assert "floor_ms" in gen.layer_table("decode").columns
    _check_fidelity(gen)
    return gen


def _check_fidelity(gen):
    """The profiled steps against the model's own: one unprofiled call per token (with what it lost
    to other processes), and a fidelity line (a ratio, or why none: a busy machine)."""
    own, lost = gen.meta["own_ms"], gen.meta["own_lost_ms"]
    assert len(own) == len(lost) == len(gen.per_token) and all(v > 0 for v in own) and all(v >= 0 for v in lost)
    line = next(x for x in gen.summary().splitlines() if x.startswith("fidelity:"))
    assert "x the model's own" in line or line.startswith("fidelity: not stated: "), line


def test_the_fidelity_line_holds_the_rules_of_every_fidelity_line(tmp_path):
    """The ratio of the profiled decode step to the model's own is stated only from enough quiet,
    steady own steps, and not when the profiled steps lost time (as every fidelity line)."""
    import copy

    model = llama()
    gen = fxprof.generate(model, _ids(model.config.vocab_size, 8, 1), max_new_tokens=6, peaks=None)
    dec = gen.per_token["time_ms"].iloc[1:].median()

    def line(own, lost=None, busy=0.0):
        g = copy.copy(gen)
        g.meta = {**gen.meta, "own_ms": own, "own_lost_ms": lost or [0.0] * len(own)}
        g.per_token = gen.per_token.assign(lost_ms=[0.0] + [busy] * 5)
        return next(x for x in g.summary().splitlines() if x.startswith("fidelity:"))

    steady = [2 * dec] + [dec / 2] * 5
    assert "the profiled decode step is 2.00x the model's own" in line(steady)
    assert "median of 5 decode steps of a plain generate" in line(steady)
    assert "prefill" in line(steady) and "not stated" not in line(steady)
    spread = [2 * dec] + [dec / 4, dec / 2, dec, 2 * dec, 4 * dec]
    assert line(spread).startswith("fidelity: not stated: the unprofiled runs spread"), line(spread)
    # four own steps lost most of their time: only one quiet, so all five are used less what they lost
    busy_own = line([2 * dec] + [dec] * 5, lost=[0.0, 0.0] + [dec / 2] * 4)
    assert busy_own.startswith("fidelity: not stated: 4 of the 5 unprofiled runs lost time"), busy_own
    # two of five lost time: left out, the three quiet ones give the ratio
    some = line([2 * dec] + [dec / 2] * 3 + [5 * dec] * 2, lost=[0.0] * 4 + [4 * dec] * 2)
    assert "2.00x the model's own" in some and "median of 3 decode steps" in some, some
    assert line(steady, busy=dec).startswith("fidelity: not stated: the profiled runs lost time"), line(steady, busy=dec)
    gen.save(tmp_path / "g")
    assert fxprof.load_generation(tmp_path / "g").meta["own_lost_ms"] == gen.meta["own_lost_ms"]


def test_llama_tokens_per_token_table_kv_growth_floor_and_files(tmp_path):
    model = llama()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    gen = _check(model, n=4)
    assert all(torch.equal(v, model.state_dict()[k]) for k, v in before.items())
    assert "forward" not in model.__dict__  # the session put the forward back
    assert "one graph for every position" in gen.meta["notes"][0]
    assert gen.meta["notes"][0] in " ".join(gen.decode.meta["notes"])  # the decode header says how it compiled
    gen.save(tmp_path / "gen")
    back = fxprof.load_generation(tmp_path / "gen")
    pd.testing.assert_frame_equal(back.per_token, gen.per_token)
    pd.testing.assert_frame_equal(back.layers, gen.layers)
    assert back.tokens.tolist() == gen.tokens.tolist()
    pd.testing.assert_frame_equal(back.decode.df, gen.decode.df)
    assert back.summary() == gen.summary()
    from fxprof.views.generation import write_generation_html

    write_generation_html(back, str(tmp_path / "gen.html"))  # a loaded result makes the page too
    page = (tmp_path / "gen.html").read_text()
    assert page.count("<circle") == len(gen.per_token)  # one point per token
    assert "Per layer: prefill" in page and "Per layer: decode" in page and "stroke-dasharray" in page


def test_bad_arguments_say_what_to_do():
    model = llama()
    ids = _ids(500)
    with pytest.raises(ValueError, match="greedy"):
        fxprof.generate(model, ids, max_new_tokens=2, do_sample=True, peaks=PEAKS)
    with pytest.raises(ValueError, match="integer token ids"):
        fxprof.generate(model, ids.float(), max_new_tokens=2, peaks=PEAKS)
    with pytest.raises(ValueError, match="max_new_tokens"):
        fxprof.generate(model, ids, max_new_tokens=0, peaks=PEAKS)
    with pytest.raises(TypeError, match="generate"):
        fxprof.generate(torch.nn.Linear(2, 2), ids, peaks=PEAKS)
    with pytest.raises(ValueError, match=r"model.eval\(\)"):
        fxprof.generate(model.train(), ids, max_new_tokens=2, peaks=PEAKS)
    model.eval()
    with pytest.raises(fxprof.ProfileFormatError, match="generation.json"):
        fxprof.load_generation("/nonexistent-folder")


@pytest.mark.slow
def test_mistral():
    _check(mistral(), n=5, prompt=6)


@pytest.mark.slow
def test_gpt2_other_config_names_tied_head_and_layer_paths():
    gen = _check(gpt2(), n=3)  # n_layer/n_head through the config's attribute map, transformer.h.N, ln_1
    assert gen.meta["config"]["tied_embeddings"]  # the LM head reads the whole embedding table: counted


@pytest.mark.slow
def test_mixture_of_experts_reads_top_k_experts():
    gen = _check(mixtral(), n=4)
    assert gen.meta["config"]["experts"] == 4
    assert gen.meta["weight_bytes_decode"] < gen.meta["weight_bytes"]  # top 2 of 4 experts per token
    assert any("mixture of experts" in n for n in gen.meta["notes"])


@pytest.mark.slow
def test_batch_of_two_and_one_new_token():
    _check(llama(), n=3, prompt=5, batch=2)
    model = llama()
    ids = _ids(500)
    gen = fxprof.generate(model, ids, max_new_tokens=1, peaks=None)
    assert gen.decode is None and len(gen.per_token) == 1
    assert torch.equal(gen.tokens, model.generate(ids, max_new_tokens=1, do_sample=False))
    assert "no decode step" in gen.summary() and "peaks=None" in gen.summary()


def test_cli_checks_its_options_before_loading_anything(capsys):
    from fxprof.cli.app import main

    assert main(["generate", "model.py:factory", "--new-tokens", "0"]) == 2
    assert "--new-tokens 0: must be >= 1" in capsys.readouterr().err
    assert main(["generate", "resnet18"]) == 2
    assert "file.py:factory" in capsys.readouterr().err
    assert main(["generate", "m.py:f", "--peaks", "fast"]) == 2
    assert "bad --peaks" in capsys.readouterr().err


@pytest.mark.slow
def test_cli_refuses_a_bad_compile_mode_before_loading(capsys):
    from fxprof.cli.app import main

    assert main(["generate", "m.py:f", "--compile", "fastest"]) == 2
    assert "--compile" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exited:  # argparse's own choices
        main(["generate", "m.py:f", "--cache", "paged"])
    assert exited.value.code == 2


@pytest.mark.slow
def test_cli_compile_profiles_the_compiled_forward_with_a_static_cache(tmp_path, capsys):
    """Issue 50, item 2: ``fxprof generate --compile`` is Hugging Face's compiled decoding
    (``model.forward = torch.compile(model.forward)``, a static cache): the header says so and the
    rows are the compiled program's kernels."""
    import pathlib

    from fxprof.cli.app import main

    torch._dynamo.reset()  # earlier tests' compiles of the same forward code count against dynamo's limit
    script = pathlib.Path(__file__).resolve().parents[2] / "docs" / "scripts" / "generate_models.py"
    out = tmp_path / "gen"
    code = main(["--quiet", "generate", f"{script}:tiny_llama", "--prompt-len", "6", "--new-tokens", "3",
                 "--peaks", "0.1,10", "--compile", "--json", str(out)])
    said = capsys.readouterr()
    assert code == 0, said.err
    assert "compiled:" in said.out and "static" in said.out
    back = fxprof.load_generation(out)
    assert back.decode.meta["capture"] == "compiled" and back.meta["compiled"]["cache"] == "static"


def test_cli_prints_the_summary_and_saves(tmp_path, capsys):
    import pathlib

    from fxprof.cli.app import main

    script = pathlib.Path(__file__).resolve().parents[2] / "docs" / "scripts" / "generate_models.py"
    out = tmp_path / "gen"
    code = main(["--quiet", "generate", f"{script}:tiny_llama", "--prompt-len", "6", "--new-tokens", "3",
                 "--peaks", "0.1,10", "--json", str(out), "--html", str(tmp_path / "gen.html")])
    said = capsys.readouterr()
    assert code == 0, said.err
    text = said.out
    assert "prefill:" in text and "decode: median" in text and "floor of a decode step" in text
    page = (tmp_path / "gen.html").read_text()
    assert "<svg" in page and "<polyline" in page and "Per layer: decode" in page and "layer 1" in page
    back = fxprof.load_generation(out)
    assert len(back.per_token) == 3 and back.tokens.shape == (1, 9)


@pytest.mark.slow
def test_cost_benchmark_runs_and_reports_both_ratios(tmp_path):
    import json
    import pathlib
    import subprocess
    import sys

    script = pathlib.Path(__file__).resolve().parents[1] / "benchmarks" / "generate_cost.py"
    out = tmp_path / "cost.json"
    done = subprocess.run([sys.executable, str(script), "--hidden", "64", "--prompt-len", "4", "--new-tokens", "3",
                           "--repeats", "1", "--json", str(out)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "profiled / plain" in done.stdout
    summary = json.loads(out.read_text())["summary"]
    assert summary["decode_ratio_median"] > 0 and summary["call_ratio_median"] > 0
    # compiled decoding, and torch.profiler's own cost of a compiled step (the floor of that ratio)
    done = subprocess.run([sys.executable, str(script), "--hidden", "64", "--prompt-len", "4", "--new-tokens", "3",
                           "--repeats", "1", "--compile", "--json", str(out)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "forward compiled in place, static cache" in done.stdout
    assert json.loads(out.read_text())["summary"]["call_ratio_median"] > 0
    floor = script.parent / "profiler_floor.py"
    done = subprocess.run([sys.executable, str(floor), "--hidden", "64", "--new-tokens", "4", "--rounds", "1"],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "under torch.profiler" in done.stdout


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_both_phases_with_the_cuda_timer():
    model = llama().cuda()
    gen = _check(model, n=4)
    assert gen.prefill.meta["timer"] != "cpu" and gen.decode.meta["timer"] == gen.prefill.meta["timer"]


def test_a_compiled_module_is_refused_because_its_generate_runs_eagerly():
    """torch.compile(model).generate(...) runs no compiled code: generate is the original module's
    method (the OptimizedModule hands it back) and calls the original module. Refused, with Hugging
    Face's way to compile decoding instead, before anything runs."""
    model = llama()
    calls = []
    handle = model.register_forward_hook(lambda *a: calls.append(1))
    try:
        with pytest.raises(ValueError, match=r"never runs the compiled program.*model.forward = torch.compile\(model.forward\)"):
            fxprof.generate(torch.compile(model), _ids(500), max_new_tokens=2, peaks=None)
    finally:
        handle.remove()
    assert calls == []


def _compiled_check(n, **kwargs):
    """A forward compiled in place (Hugging Face's recipe): the tokens the user's compiled model
    gives, and profiles of the compiled program's kernels, not of an eager graph of fxprof's.
    Dynamo's caches are cleared first: the models earlier tests compiled share the forward's code
    (Llama, Mistral, Mixtral: one decorator's), and the user's own compile below would exceed
    dynamo's recompile limit (8) and run eagerly, after which dynamo compiled no graph of it for fxprof either."""
    torch._dynamo.reset()
    model = llama()
    model.forward = torch.compile(model.forward)
    users = model.forward
    ids = _ids(500)
    plain = model.generate(ids, max_new_tokens=n, do_sample=False, **kwargs)
    gen = fxprof.generate(model, ids, max_new_tokens=n, peaks=PEAKS, **kwargs)
    assert torch.equal(gen.tokens, plain)
    assert model.forward is users  # the user's compiled forward is back in place
    assert gen.prefill.meta["capture"] == "compiled" and gen.decode.meta["capture"] == "compiled"
    assert list(gen.per_token["phase"]) == ["prefill"] + ["decode"] * (n - 1)
    assert len(gen.decode.runs) == n - 1 and (gen.per_token["time_ms"] > 0).all()
    for prof in (gen.prefill, gen.decode):
        df = prof.df
        # rows are inductor's kernels (a generated kernel's range or an extern op), charged to the layers
        assert df["origins"].astype(str).str.len().gt(0).any()
        assert df.loc[df["calls"] > 0, "scope"].astype(str).str.startswith("model.layers.0").any()
        assert df.loc[df["calls"] > 0, "scope"].astype(str).str.startswith("model.layers.1").any()
    for phase in ("prefill", "decode"):
        table = gen.layer_table(phase)
        assert table.loc["layer 0", "time_ms"] > 0 and table.loc["layer 1", "time_ms"] > 0
    assert gen.meta["compiled"]["backend"] == "inductor"
    assert "every compile happened in the warm-up call, none in a timed step" in gen.meta["notes"][0]
    text = gen.summary()
    assert "timer compiled kernels (fxprof's marks in the generated code)" in text and "compiled: inductor, mode default" in text
    assert gen.decode.meta["timer"] == "marks" and "no torch.profiler" in gen.decode.meta["compiled"]["kernel_source"]
    _check_fidelity(gen)  # the user's compiled forward, warmed by a plain call first
    # the decode profile's yardstick: the user's own compiled decode steps, timed at the session's
    # eager steps (a plain generate between the warm-up and the timed one), one per decode step
    own = gen.decode.meta["compiled"]["unprofiled_ms"]
    if kwargs.get("cache_implementation") == "static":  # one decode signature for every position
        assert len(own) == n - 1 and all(v > 0 for v in own)
        assert "profiler_cost" not in gen.decode.meta["compiled"]  # the marks: no profiler, no cost of its to take out
    return gen, model


def test_compiled_decoding_static_cache_profiles_the_compiled_kernels_per_layer(tmp_path):
    """Hugging Face's static-cache recipe: one prefill and one decode graph (one recompile of the
    forward), the same decode graph for every position, kernels charged to layers. It used to be
    refused (fxprof's session would have timed an eager graph of its own)."""
    gen, _ = _compiled_check(4, cache_implementation="static")
    assert gen.meta["compiled"]["graphs"] == 2 and gen.meta["compiled"]["recompiles"] == 1
    assert gen.meta["compiled"]["cache"] == "static"
    assert "one graph for every position" in gen.meta["notes"][0] and "static cache" in gen.meta["notes"][0]
    assert "2 graph(s), 1 recompile(s)" in gen.summary()
    gen.save(tmp_path / "gen")
    back = fxprof.load_generation(tmp_path / "gen")
    assert back.summary() == gen.summary() and back.meta["compiled"] == gen.meta["compiled"]


@pytest.mark.slow
def test_compiled_decoding_dynamic_cache_says_it_recompiled():
    """The default dynamic cache: dynamo gives the first decode step a static graph, then a
    dynamic one for the later positions (3 graphs, 2 recompiles), all in the warm-up call."""
    gen, model = _compiled_check(5)
    assert gen.meta["compiled"]["graphs"] == 3 and gen.meta["compiled"]["recompiles"] == 2
    assert "the timed decode steps ran 2 graphs" in gen.meta["notes"][0]
    # profiled again: fxprof's compile of this forward is reused (dynamo still holds it), nothing compiles
    again = fxprof.generate(model, _ids(500), max_new_tokens=5, peaks=None)
    assert torch.equal(again.tokens, gen.tokens) and again.prefill.meta["compiled"].get("reused") is True
    assert again.meta["compiled"]["compile_s"] == 0 and again.meta["compiled"]["graphs"] == 3
    assert any("reused the compile" in n for n in again.prefill.meta["notes"])


def test_the_kernel_timer_is_refused_before_anything_runs():
    """A GPU run (H200): timer='kernel' in fxprof.generate came back with an empty kernel column
    in both phases (a session's timed runs are the caller's steps, no torch.profiler around
    them). It is refused, with what to use instead, before the model runs."""
    model = llama()
    calls = []
    handle = model.register_forward_hook(lambda *a: calls.append(1))
    try:
        with pytest.raises(ValueError, match=r"timer='kernel' is not available in a session.*timer='cuda'"):
            fxprof.generate(model, _ids(500), max_new_tokens=2, peaks=None, timer="kernel")
        with pytest.raises(ValueError, match="fxprof.profile"):
            fxprof.session(model, timer="kernel")
    finally:
        handle.remove()
    assert calls == []


@pytest.mark.slow
def test_many_generations_in_one_process_stay_compiled():
    """Llama, Mistral and Mixtral share one decorator's forward code, and dynamo counts every
    compiled version of it against its recompile limit (8): the sixth call here used to run as
    plain Python, with no graph to profile ("captured no graph")."""
    torch._dynamo.reset()
    calls = [(llama, 4, 8, 1), (mistral, 5, 6, 1), (mixtral, 4, 8, 1), (llama, 3, 5, 2), (llama, 1, 8, 1), (llama, 3, 6, 1)]
    for make, n, prompt, batch in calls:
        model = make()
        if make is llama and prompt == 6:  # a model of another size: new shapes for every graph
            torch.manual_seed(0)
            model = _ready(T.LlamaForCausalLM(T.LlamaConfig(hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                                                            num_attention_heads=4, num_key_value_heads=2, vocab_size=500)))
        gen = fxprof.generate(model, _ids(500, prompt, batch), max_new_tokens=n, peaks=None)
        assert len(gen.per_token) == n and gen.layer_table("prefill").loc["layer 0", "time_ms"] > 0

@pytest.mark.slow
def test_attention_mask_with_left_padding_passes_through():
    """A growing attention mask makes every decode step a signature of its own: each was seen in
    the warm-up call, so every timed step is timed, and one dynamic graph serves them all."""
    model = llama()
    ids = _ids(500, 6, 2)
    mask = torch.ones_like(ids)
    mask[0, :2] = 0
    plain = model.generate(ids, attention_mask=mask, max_new_tokens=4, do_sample=False)
    gen = fxprof.generate(model, ids, max_new_tokens=4, peaks=None, attention_mask=mask)
    assert torch.equal(gen.tokens, plain)
    assert gen.decode.num_runs == 3 and gen.decode.meta["untimed_first_batches"] == []
    assert len(gen.decode.meta["signatures"]) == 3 and "one graph for every position" in gen.meta["notes"][0]


@pytest.mark.slow
def test_generation_that_stops_at_eos_has_a_row_per_token_made():
    model = llama()
    ids = _ids(500)
    first = model.generate(ids, max_new_tokens=6, do_sample=False)
    model.generation_config.eos_token_id = int(first[0, ids.shape[1] + 2])  # the third new token ends it
    plain = model.generate(ids, max_new_tokens=6, do_sample=False)
    gen = fxprof.generate(model, ids, max_new_tokens=6, peaks=None)
    assert torch.equal(gen.tokens, plain) and plain.shape[1] < first.shape[1]
    assert len(gen.per_token) == plain.shape[1] - ids.shape[1] and gen.decode.num_runs == len(gen.per_token) - 1


def test_the_model_own_steps_are_timed_warm_not_in_the_first_eager_generate():
    """The fidelity line's yardstick is a plain generate after the profiled one. The profiled calls
    ran fxprof's captured graph, so that plain generate is the model's first eager one, and a first
    eager call at each position builds what later calls reuse (oneDNN primitives, cuDNN attention
    plans: an H200's 160M Llama read 42 ms a step cold against 7.4 ms profiled, and its line said
    0.17x). Here a first eager call at each position "builds" (sleeps 50 ms), and the test counts
    the model's calls: no build may fall in the own steps, the last calls fxprof.generate makes. (It
    read the own steps' times against the sleep before, which a busy machine's 90 ms pause failed.)"""
    import time

    model = llama()
    seen: set = set()
    calls = [0]
    built_in: list[int] = []  # the model call each build fell in

    def count(*_):
        calls[0] += 1

    def first_call_builds(layer, args, kwargs):
        if torch.compiler.is_compiling():  # traced into fxprof's captured graph: the builds are eager-only
            return
        key = (tuple(args[0].shape), int(kwargs["position_ids"].flatten()[0]))
        if key not in seen:
            seen.add(key)
            built_in.append(calls[0])
            time.sleep(0.05)

    # in the first layer, which the profiled calls run as fxprof's graph and a plain generate eagerly
    handles = [model.register_forward_pre_hook(count),
               model.model.layers[0].register_forward_pre_hook(first_call_builds, with_kwargs=True)]
    own_from: list[int] = []
    try:
        gen = fxprof.generate(model, _ids(500), max_new_tokens=6, peaks=PEAKS,
                              progress=lambda line: own_from.append(calls[0]) if "the model's own calls" in line else None)
    finally:
        for handle in handles:
            handle.remove()
    own = gen.meta["own_ms"]
    assert len(own) == 6 and seen and own_from  # the eager path ran, and built
    # fxprof's own calls: an untimed plain generate (6 calls), then the timed one, the process's last 6 calls
    assert calls[0] == own_from[-1] + 12, (calls[0], own_from)
    timed = range(calls[0] - 5, calls[0] + 1)
    assert not [c for c in built_in if c in timed], (built_in, list(timed))  # not one own step paid a build
