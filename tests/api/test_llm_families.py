"""Every LLM family right (issue 58): the KV cache's layout from the model's real cache (every
config spelling of the KV heads, sliding windows, mixed window and global layers), every node of
a decode step in a group whatever its modules are called, encoder-decoders refused in one line,
and a streamer fed as one plain generate feeds it. Tiny models from configs; nothing downloaded."""

from __future__ import annotations

import warnings

import pytest
import torch

import fxprof
from fxprof.measure.passes.kv_cache import kv_layout

T = pytest.importorskip("transformers")


def _ready(model):
    model = model.eval()
    model.generation_config.eos_token_id = None
    return model


def _build(name: str):
    torch.manual_seed(0)
    small = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, vocab_size=300)
    if name == "llama-gqa":
        return _ready(T.LlamaForCausalLM(T.LlamaConfig(**small, num_key_value_heads=2)))
    if name == "mistral-sliding":
        return _ready(T.MistralForCausalLM(T.MistralConfig(**small, num_key_value_heads=2, sliding_window=5)))
    if name == "gemma2-mixed":
        return _ready(T.Gemma2ForCausalLM(T.Gemma2Config(**{**small, "num_hidden_layers": 4}, num_key_value_heads=2,
                                                         head_dim=16, sliding_window=5)))
    if name == "falcon-multi-query":  # no num_key_value_heads: multi_query means one KV head
        return _ready(T.FalconForCausalLM(T.FalconConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                                                         vocab_size=300, multi_query=True, new_decoder_architecture=False)))
    if name == "gpt-bigcode-multi-query":
        return _ready(T.GPTBigCodeForCausalLM(T.GPTBigCodeConfig(n_embd=64, n_layer=2, n_head=4, vocab_size=300,
                                                                 multi_query=True)))
    if name == "opt-fc1-fc2":  # the feed-forward is fc1/fc2 directly on the decoder layer
        return _ready(T.OPTForCausalLM(T.OPTConfig(hidden_size=64, ffn_dim=128, num_hidden_layers=2,
                                                   num_attention_heads=4, vocab_size=300, word_embed_proj_dim=64)))
    raise KeyError(name)


FAMILIES = ["llama-gqa", "mistral-sliding", "gemma2-mixed", "falcon-multi-query", "gpt-bigcode-multi-query", "opt-fc1-fc2"]


def _real_cache(model, ids, n):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = model.generate(ids, max_new_tokens=n, do_sample=False, return_dict_in_generate=True)
    cache = out["cache"] if "cache" in out.keys() else out["past_key_values"]
    real = sum(l.keys.numel() * l.keys.element_size() + l.values.numel() * l.values.element_size() for l in cache.layers)
    return cache, real, out.sequences.shape[1] - 1  # the last new token is never fed back


@pytest.mark.parametrize("name", FAMILIES)
def test_the_kv_layout_holds_the_real_caches_bytes(name):
    """From the config alone and from the cache a plain generate leaves: both give the real
    cache's bytes (a multi-query config without num_key_value_heads read 4x the real cache;
    sliding windows were counted as always growing)."""
    model = _build(name)
    ids = torch.randint(3, 300, (2, 8), generator=torch.Generator().manual_seed(0))
    cache, real, seq = _real_cache(model, ids, 6)
    from_config, from_cache = kv_layout(model), kv_layout(model, cache)
    assert from_config.bytes_at(seq, 2) == real, (from_config.rule, real)
    assert from_cache.bytes_at(seq, 2) == real, (from_cache.rule, real)
    if "sliding" in name or "mixed" in name:
        assert "slide" in from_config.rule and "slide" in from_cache.rule
        assert from_config.bytes_at(seq + 10, 2) < from_config.bytes_at(seq, 2) * (seq + 10) / seq  # it stops growing


@pytest.mark.parametrize("name", ["falcon-multi-query", "gemma2-mixed", "opt-fc1-fc2"])
def test_generate_states_the_kv_rule_and_puts_every_decode_node_in_a_group(name):
    model = _build(name)
    ids = torch.randint(3, 300, (1, 8), generator=torch.Generator().manual_seed(0))
    _, real, _ = _real_cache(model, ids, 5)
    gen = fxprof.generate(model, ids, max_new_tokens=5, peaks=None)
    assert gen.per_token["kv_cache_bytes"].iloc[-1] == real
    text = gen.summary()
    assert "kv cache: " in text and gen.meta["kv_rule"] in text
    shares = gen.shares()
    assert shares["decode_pct"].get("other", 0.0) < 10.0, shares
    assert shares.loc["mlp", "decode_pct"] > 0 and shares.loc["attention", "decode_pct"] > 0, shares
    # layers numbered by the decoder's own stack: every layer once, nothing else called a layer
    assert gen.meta["layer_stack"] == STACKS[name]
    layers = {f"layer {i}" for i in range(model.config.num_hidden_layers)}
    assert set(gen.layer_table("decode").index) == layers | {"outside layers"}
    assert set(gen.layers.index) == layers


STACKS = {"falcon-multi-query": "transformer.h", "gemma2-mixed": "model.layers", "opt-fc1-fc2": "model.decoder.layers"}


def test_layers_are_numbered_by_the_decoders_own_stack_not_the_first_index_of_a_path():
    """A stack under a name no rule knows (``trunk.stages``), each layer holding an expert list as
    long as the stack: the stack is the list the config counts that holds the most weights, and a
    path's expert index never reads as a layer."""
    from types import SimpleNamespace

    from torch import nn

    from fxprof.core.generation import group_of, layer_of
    from fxprof.measure.passes.decoder import decoder_stack

    class Layer(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.experts = nn.ModuleList(nn.Linear(8, 8) for _ in range(3))
            self.mix = nn.Linear(8, 8)

    class Model(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.config = SimpleNamespace(num_hidden_layers=3)
            self.trunk = nn.Module()
            self.trunk.stages = nn.ModuleList(Layer() for _ in range(3))
            self.head = nn.Linear(8, 8)

    stack = decoder_stack(Model())
    assert stack == "trunk.stages"
    assert layer_of("trunk.stages.2.experts.1", stack) == "layer 2"
    assert layer_of("trunk.stages.1", stack) == "layer 1" and group_of("trunk.stages.1", stack) == "residual"
    assert layer_of("trunk.stages.2.experts.1") == "outside layers"  # the old rule: no name it knows
    assert layer_of("head", stack) == "outside layers" and group_of("trunk", stack) == "plumbing"
    assert decoder_stack(nn.Linear(2, 2)) is None


def test_an_encoder_decoder_is_refused_in_one_line():
    torch.manual_seed(0)
    model = _ready(T.T5ForConditionalGeneration(T.T5Config(d_model=32, d_ff=64, num_layers=2, num_heads=2, d_kv=16,
                                                           vocab_size=100, decoder_start_token_id=0)))
    with pytest.raises(TypeError, match="is an encoder-decoder: fxprof.generate profiles causal") as info:
        fxprof.generate(model, torch.randint(3, 100, (1, 6)), max_new_tokens=3, peaks=None)
    assert "\n" not in str(info.value)


class _Counting:
    """A streamer that counts what it is fed."""

    def __init__(self) -> None:
        self.puts = 0
        self.ends = 0

    def put(self, value) -> None:
        self.puts += 1

    def end(self) -> None:
        self.ends += 1


def test_a_streamer_is_fed_as_one_plain_generate_feeds_it():
    model = _build("llama-gqa")
    ids = torch.randint(3, 300, (1, 8), generator=torch.Generator().manual_seed(0))
    plain, profiled = _Counting(), _Counting()
    model.generate(ids, max_new_tokens=4, do_sample=False, streamer=plain)
    fxprof.generate(model, ids, max_new_tokens=4, peaks=None, streamer=profiled)
    assert (profiled.puts, profiled.ends) == (plain.puts, plain.ends) == (plain.puts, 1)


@pytest.mark.slow
def test_generate_of_a_compiled_opt_gives_plain_greedy_tokens_and_leaves_the_model_as_it_was():
    """Issue 58: ``fxprof generate --compile`` on OPT stopped with "too many values to unpack
    (expected 3)" in the warm-up: the session's forward showed a bare ``(*args, **kwargs)``, and
    Hugging Face's generate, which reads the forward's signature to choose its inputs, passed
    OPT's compiled forward others. The session's forward now shows the model's signature."""
    import inspect

    model = _build("opt-fc1-fc2")
    ids = torch.randint(3, 300, (1, 8), generator=torch.Generator().manual_seed(0))
    plain = model.generate(ids, max_new_tokens=3, do_sample=False)
    model.forward = torch.compile(model.forward)
    forward = model.forward
    seen = []
    with fxprof.session(model, schedule=fxprof.schedule(warmup=1, active=1)) as s:
        seen.append(inspect.signature(model.forward))
        s.step()
    assert seen[0] == inspect.signature(forward) and model.forward is forward
    gen = fxprof.generate(model, ids, max_new_tokens=3, peaks=None, cache_implementation="static")
    assert torch.equal(gen.tokens, plain)
    assert model.forward is forward
    assert torch.equal(model.generate(ids, max_new_tokens=3, do_sample=False, cache_implementation="static"), plain)


@pytest.mark.slow
def test_where_fxprofs_copy_of_a_compiled_forward_fails_one_line_says_so(monkeypatch):
    from fxprof.measure.compiled.in_session import LoopCompiledCapture

    model = _build("llama-gqa")
    ids = torch.randint(3, 300, (1, 8), generator=torch.Generator().manual_seed(0))
    model.forward = torch.compile(model.forward)
    forward = model.forward

    def broken(self, args, kwargs):
        raise ValueError("too many values to unpack (expected 3)")

    monkeypatch.setattr(LoopCompiledCapture, "_call", broken)
    with pytest.raises(RuntimeError, match="fxprof compiles the model's forward again") as info:
        fxprof.generate(model, ids, max_new_tokens=3, peaks=None, cache_implementation="static")
    text = str(info.value)
    assert "ValueError: too many values to unpack" in text and "LlamaForCausalLM's own compiled forward" in text
    assert "without --compile" in text and "\n" not in text
    assert model.forward is forward
