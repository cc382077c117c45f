"""Hugging Face transformers on tiny configs built offline (2 layers, hidden 32): capture="auto"
falls back to dynamo with the reason in plain words and where tracing stopped; capture="export"
works, or says what to do (use_cache=False for models that return a cache)."""

from __future__ import annotations

import logging
import warnings

import pytest
import torch

import fxprof

#: the least share of a run the nodes must hold (a structural floor, not a coverage figure)
COVERS = 0.1

T = pytest.importorskip("transformers")
torch._logging.set_logs(dynamo=logging.ERROR)

IDS = torch.randint(0, 100, (1, 8), generator=torch.Generator().manual_seed(0))
PIXELS = torch.randn(1, 3, 32, 32, generator=torch.Generator().manual_seed(0))


def bert():
    return T.BertModel(T.BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                    intermediate_size=64, max_position_embeddings=32)), (IDS,), {}


def gpt2():
    return T.GPT2Model(T.GPT2Config(vocab_size=100, n_embd=32, n_layer=2, n_head=2, n_positions=32,
                                    bos_token_id=0, eos_token_id=0)), (IDS,), {}


def llama():
    return T.LlamaModel(T.LlamaConfig(vocab_size=100, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                      num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=32)), (IDS,), {}


def t5():
    return T.T5Model(T.T5Config(vocab_size=100, d_model=32, d_ff=64, d_kv=16, num_layers=2, num_heads=2)), \
        (IDS,), {"decoder_input_ids": IDS}


def vit():
    return T.ViTModel(T.ViTConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
                                  image_size=32, patch_size=8)), (PIXELS,), {}


def clip():
    config = T.CLIPConfig(
        text_config=dict(vocab_size=100, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=2, max_position_embeddings=16),
        vision_config=dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
                           image_size=32, patch_size=8),
        projection_dim=16,
    )
    return T.CLIPModel(config), (), {"input_ids": IDS, "pixel_values": PIXELS}


MODELS = {"bert": bert, "gpt2": gpt2, "llama": llama, "t5": t5, "vit": vit, "clip": clip}
# the default run keeps one of each case; the rest are marked slow
FAST = {("bert", "auto"), ("gpt2", "export")}


def _build(name):
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model, args, kwargs = MODELS[name]()
    return model.eval(), args, kwargs


def _cases(capture):
    return [pytest.param(name, marks=() if (name, capture) in FAST else pytest.mark.slow) for name in MODELS]


def _check_scopes(model, prof):
    for scope in set(prof.df["scope"]):
        model.get_submodule(scope)


def _covered(prof) -> float:
    """The median over runs of the nodes' summed time over the run's time less what it lost to
    other processes (``runs.lost_ms``, measured)."""
    nodes = prof.samples.groupby("run", observed=True)["time_ms"].sum()
    runs = prof.runs.set_index("run")
    lost = runs["lost_ms"].fillna(0.0) if "lost_ms" in runs.columns else 0.0
    return float((nodes / (runs["total_ms"] - lost).clip(lower=1e-9)).median())


@pytest.mark.parametrize("name", _cases("auto"))
def test_auto_profiles_and_says_why_and_where(name):
    model, args, kwargs = _build(name)
    with torch.no_grad():
        expected = model(*args, **kwargs)
    prof = fxprof.profile(model, *args, warmup=1, iters=2, **kwargs)
    assert prof.meta["capture"] == "dynamo"
    reason = prof.meta["capture_reason"]
    # the plain-words cause and the file and line of the model's code where tracing stopped
    assert reason.startswith("symbolic tracing failed at transformers/"), reason
    assert ".py:" in reason and "Error:" not in reason, reason  # plain words, not torch.fx's text
    # the nodes hold a real part of the run (a capture that timed nothing reads ~0); not a figure: with
    # 2 runs late in CI's long process GPT-2 read 0.21 once (about 0.5 alone); docs/zoo.md has the figures
    # of each run's own time: under load 5.5 on 2 cores, BERT's two runs lost most of theirs to other
    # processes and read 0.097 of the whole run
    assert _covered(prof) > COVERS
    _check_scopes(model, prof)
    assert prof.df["kind"].isin(["linear", "addmm"]).sum() >= 8  # the two layers' projections (GPT-2: Conv1D is addmm)
    del expected


@pytest.mark.parametrize("name", _cases("export"))
def test_export_profiles_or_says_use_cache_false(name):
    model, args, kwargs = _build(name)
    try:
        prof = fxprof.profile(model, *args, warmup=1, iters=2, capture="export", **kwargs)
    except fxprof.TraceError as exc:
        message = str(exc)
        assert "Cache" in message and "use_cache=False" in message, message
        prof = fxprof.profile(model, *args, warmup=1, iters=2, capture="export", use_cache=False, **kwargs)
    assert prof.meta["capture"] == "export"
    assert prof.coverage > COVERS
    _check_scopes(model, prof)
