"""The model zoo of issue 31: real models nobody on the project wrote, built offline and small.

Each :class:`ZooModel` builds ``(model, args, kwargs)`` on the CPU in eval mode: torchvision and
timm with no weights, Hugging Face transformers from config classes with small sizes (nothing
is downloaded). ``patterns`` (optional) gives every call pattern the eager model accepts
(optional arguments omitted, ``None``, given, in another order) for invariant (j).

Used by ``tests/benchmarks/zoo.py`` (the whole zoo, writes docs/zoo.md) and
``tests/project/test_zoo.py`` (the CI subset, :data:`CI_SUBSET`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import torch

Call = tuple[tuple, dict]


@dataclass(frozen=True)
class ZooModel:
    name: str
    family: str  # torchvision, timm, transformers, ddp
    build: Callable[[], tuple[torch.nn.Module, tuple, dict]]
    note: str = ""
    #: call patterns for (j): each (args, kwargs); empty: the one call build() gives
    patterns: Callable[[], list[Call]] | None = field(default=None, compare=False)


def _seed() -> torch.Generator:
    torch.manual_seed(0)
    return torch.Generator().manual_seed(0)


def _image(size: int, batch: int = 1) -> torch.Tensor:
    return torch.randn(batch, 3, size, size, generator=_seed())


# ------------------------------------------------------------------ torchvision
def _tv(name: str, size: int = 64, **kwargs: Any) -> Callable[[], tuple]:
    def build() -> tuple:
        import torchvision

        _seed()
        model = torchvision.models.get_model(name, weights=None, **kwargs).eval()
        return model, (_image(size),), {}

    return build


def _fasterrcnn() -> tuple:
    import torchvision

    _seed()
    model = torchvision.models.get_model("fasterrcnn_mobilenet_v3_large_320_fpn", weights=None,
                                         weights_backbone=None, min_size=128, max_size=128).eval()
    return model, ([torch.rand(3, 128, 128, generator=_seed())],), {}


def _deeplab() -> tuple:
    import torchvision

    _seed()
    model = torchvision.models.get_model("deeplabv3_mobilenet_v3_large", weights=None, weights_backbone=None,
                                         aux_loss=False).eval()
    return model, (_image(64),), {}


def _r3d() -> tuple:
    import torchvision

    _seed()
    model = torchvision.models.get_model("r3d_18", weights=None).eval()
    return model, (torch.randn(1, 3, 4, 32, 32, generator=_seed()),), {}


# ------------------------------------------------------------------ timm
def _timm(name: str, size: int = 64, **kwargs: Any) -> Callable[[], tuple]:
    def build() -> tuple:
        import timm

        _seed()
        model = timm.create_model(name, pretrained=False, **kwargs).eval()
        return model, (_image(size),), {}

    return build


# ------------------------------------------------------------------ transformers
SEQ = 32


def _ids(vocab: int, seq: int = SEQ) -> torch.Tensor:
    return torch.randint(0, vocab, (1, seq), generator=_seed())


def _text_patterns(build: Callable[[], tuple], extra: tuple[str, ...] = ()) -> Callable[[], list[Call]]:
    """input_ids alone, attention_mask None / given (and ``extra`` optionals None), keywords in
    another order."""

    def patterns() -> list[Call]:
        _, args, kwargs = build()
        ids = args[0] if args else kwargs["input_ids"]
        mask = torch.ones_like(ids)
        mask[:, -4:] = 0
        rest = {k: v for k, v in kwargs.items() if k != "input_ids"}
        calls = [((ids,), dict(rest)),
                 ((ids,), {**rest, "attention_mask": None}),
                 ((ids,), {**rest, "attention_mask": mask}),
                 ((), {"attention_mask": mask, **rest, "input_ids": ids})]
        for name in extra:
            calls.append(((ids,), {**rest, name: None}))
        return calls

    return patterns


def _bert() -> tuple:
    import transformers as T

    _seed()
    cfg = T.BertConfig(vocab_size=30522, hidden_size=256, num_hidden_layers=2, num_attention_heads=4,
                       intermediate_size=1024, max_position_embeddings=128)
    return T.BertModel(cfg).eval(), (_ids(cfg.vocab_size),), {}


def _distilbert() -> tuple:
    import transformers as T

    _seed()
    cfg = T.DistilBertConfig(vocab_size=30522, dim=256, n_layers=2, n_heads=4, hidden_dim=1024, max_position_embeddings=128)
    return T.DistilBertModel(cfg).eval(), (_ids(cfg.vocab_size),), {}


def _roberta() -> tuple:
    import transformers as T

    _seed()
    cfg = T.RobertaConfig(vocab_size=5000, hidden_size=256, num_hidden_layers=2, num_attention_heads=4,
                          intermediate_size=1024, max_position_embeddings=130)
    return T.RobertaModel(cfg).eval(), (_ids(cfg.vocab_size),), {}


def _gpt2() -> tuple:
    import transformers as T

    _seed()
    cfg = T.GPT2Config(vocab_size=50257, n_embd=256, n_layer=2, n_head=4, n_positions=128)
    return T.GPT2Model(cfg).eval(), (_ids(cfg.vocab_size),), {"use_cache": False}


def _t5() -> tuple:
    import transformers as T

    _seed()
    cfg = T.T5Config(vocab_size=5000, d_model=128, d_ff=256, d_kv=32, num_layers=2, num_heads=4)
    ids = _ids(cfg.vocab_size)
    return T.T5Model(cfg).eval(), (ids,), {"decoder_input_ids": ids[:, :8], "use_cache": False}


def _clip_vision() -> tuple:
    import transformers as T

    _seed()
    cfg = T.CLIPVisionConfig(hidden_size=128, intermediate_size=256, num_hidden_layers=2, num_attention_heads=4,
                             image_size=64, patch_size=16)
    return T.CLIPVisionModel(cfg).eval(), (_image(64),), {}


def _hf_vit() -> tuple:
    import transformers as T

    _seed()
    cfg = T.ViTConfig(hidden_size=128, num_hidden_layers=2, num_attention_heads=4, intermediate_size=256,
                      image_size=64, patch_size=16)
    return T.ViTModel(cfg).eval(), (_image(64),), {}


def _whisper_encoder() -> tuple:
    import transformers as T

    _seed()
    cfg = T.WhisperConfig(d_model=128, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
                          decoder_attention_heads=4, encoder_ffn_dim=256, decoder_ffn_dim=256, num_mel_bins=80,
                          max_source_positions=50, vocab_size=1000, pad_token_id=0, bos_token_id=1,
                          eos_token_id=2, decoder_start_token_id=1)
    encoder = T.WhisperModel(cfg).get_encoder().eval()
    return encoder, (torch.randn(1, 80, 100, generator=_seed()),), {}


def _llama_gqa() -> tuple:
    import transformers as T

    _seed()
    cfg = T.LlamaConfig(vocab_size=2000, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128)
    return T.LlamaModel(cfg).eval(), (_ids(cfg.vocab_size),), {"use_cache": False}


def _qwen2() -> tuple:
    import transformers as T

    _seed()
    cfg = T.Qwen2Config(vocab_size=2000, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128)
    return T.Qwen2Model(cfg).eval(), (_ids(cfg.vocab_size),), {"use_cache": False}


def _opt() -> tuple:
    import transformers as T

    _seed()
    cfg = T.OPTConfig(vocab_size=2000, hidden_size=128, ffn_dim=256, num_hidden_layers=2, num_attention_heads=4,
                      max_position_embeddings=128, word_embed_proj_dim=128)
    return T.OPTModel(cfg).eval(), (_ids(cfg.vocab_size),), {"use_cache": False}


def _bart() -> tuple:
    import transformers as T

    _seed()
    cfg = T.BartConfig(vocab_size=2000, d_model=128, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
                       decoder_attention_heads=4, encoder_ffn_dim=256, decoder_ffn_dim=256, max_position_embeddings=128)
    ids = _ids(cfg.vocab_size)
    return T.BartModel(cfg).eval(), (ids,), {"decoder_input_ids": ids[:, :8], "use_cache": False}


def _gpt_neox() -> tuple:
    import transformers as T

    _seed()
    cfg = T.GPTNeoXConfig(vocab_size=2000, hidden_size=128, intermediate_size=256, num_hidden_layers=3,
                          num_attention_heads=4, max_position_embeddings=128)
    return T.GPTNeoXModel(cfg).eval(), (_ids(cfg.vocab_size),), {"use_cache": False}


def _mixtral() -> tuple:
    import transformers as T

    _seed()
    cfg = T.MixtralConfig(vocab_size=2000, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                          num_attention_heads=4, num_key_value_heads=2, num_local_experts=4, num_experts_per_tok=2,
                          max_position_embeddings=128)
    return T.MixtralModel(cfg).eval(), (_ids(cfg.vocab_size),), {"use_cache": False}


def _qwen2_moe() -> tuple:
    import transformers as T

    _seed()
    cfg = T.Qwen2MoeConfig(vocab_size=2000, hidden_size=128, intermediate_size=256, moe_intermediate_size=64,
                           shared_expert_intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                           num_key_value_heads=2, num_experts=4, num_experts_per_tok=2, max_position_embeddings=128)
    return T.Qwen2MoeModel(cfg).eval(), (_ids(cfg.vocab_size),), {"use_cache": False}


def _albert() -> tuple:
    import transformers as T

    _seed()
    cfg = T.AlbertConfig(vocab_size=2000, embedding_size=64, hidden_size=128, num_hidden_layers=3, num_attention_heads=4,
                         intermediate_size=256, max_position_embeddings=128)
    return T.AlbertModel(cfg, add_pooling_layer=False).eval(), (_ids(cfg.vocab_size),), {}


def _deit() -> tuple:
    import transformers as T

    _seed()
    cfg = T.DeiTConfig(hidden_size=128, num_hidden_layers=3, num_attention_heads=4, intermediate_size=256,
                       image_size=64, patch_size=16)
    return T.DeiTModel(cfg, add_pooling_layer=False).eval(), (_image(64),), {}


def _ddp_resnet18() -> tuple:
    raise RuntimeError("runs only under torchrun: see tests/benchmarks/zoo_ddp.py")


ZOO: dict[str, ZooModel] = {m.name: m for m in [
    # torchvision (weights=None)
    ZooModel("resnet18", "torchvision", _tv("resnet18")),
    ZooModel("resnet50", "torchvision", _tv("resnet50")),
    ZooModel("mobilenet_v3_small", "torchvision", _tv("mobilenet_v3_small")),
    ZooModel("efficientnet_b0", "torchvision", _tv("efficientnet_b0")),
    ZooModel("regnet_y_400mf", "torchvision", _tv("regnet_y_400mf")),
    ZooModel("shufflenet_v2_x1_0", "torchvision", _tv("shufflenet_v2_x1_0")),
    ZooModel("squeezenet1_0", "torchvision", _tv("squeezenet1_0")),
    ZooModel("mnasnet0_5", "torchvision", _tv("mnasnet0_5")),
    ZooModel("vit_b_16", "torchvision", _tv("vit_b_16", 64, image_size=64), "image 64x64"),
    ZooModel("swin_t", "torchvision", _tv("swin_t", 64)),
    ZooModel("convnext_tiny", "torchvision", _tv("convnext_tiny")),
    ZooModel("fasterrcnn_mobilenet_v3_large_320_fpn", "torchvision", _fasterrcnn, "one 3x128x128 image"),
    ZooModel("deeplabv3_mobilenet_v3_large", "torchvision", _deeplab),
    ZooModel("r3d_18", "torchvision", _r3d, "clip 1x3x4x32x32"),
    # timm (pretrained=False)
    ZooModel("timm_vit_tiny_patch16_224", "timm", _timm("vit_tiny_patch16_224", 64, img_size=64), "image 64x64"),
    ZooModel("timm_convnext_atto", "timm", _timm("convnext_atto")),
    ZooModel("timm_efficientnet_b0", "timm", _timm("efficientnet_b0")),
    ZooModel("timm_mobilevit_xxs", "timm", _timm("mobilevit_xxs")),
    ZooModel("timm_mixer_s16_224", "timm", _timm("mixer_s16_224", 64, img_size=64), "image 64x64"),
    ZooModel("timm_swin_tiny", "timm", _timm("swin_tiny_patch4_window7_224", 112, img_size=112, window_size=7),
             "image 112x112"),
    # Hugging Face transformers from config classes (2 layers, small hidden sizes)
    ZooModel("hf_bert", "transformers", _bert, "2 x 256, seq 32", _text_patterns(_bert, ("token_type_ids",))),
    ZooModel("hf_distilbert", "transformers", _distilbert, "2 x 256, seq 32", _text_patterns(_distilbert)),
    ZooModel("hf_roberta", "transformers", _roberta, "2 x 256, seq 32", _text_patterns(_roberta)),
    ZooModel("hf_gpt2", "transformers", _gpt2, "2 x 256, seq 32", _text_patterns(_gpt2)),
    ZooModel("hf_t5", "transformers", _t5, "2 x 128, seq 32 / 8", _text_patterns(_t5)),
    ZooModel("hf_clip_vision", "transformers", _clip_vision, "2 x 128, image 64x64"),
    ZooModel("hf_vit", "transformers", _hf_vit, "2 x 128, image 64x64"),
    ZooModel("hf_whisper_encoder", "transformers", _whisper_encoder, "2 x 128, 80 mels x 100 frames"),
    ZooModel("hf_llama_gqa", "transformers", _llama_gqa, "2 x 128, 4 heads / 2 kv heads", _text_patterns(_llama_gqa)),
    ZooModel("hf_qwen2", "transformers", _qwen2, "2 x 128, 4 heads / 2 kv heads", _text_patterns(_qwen2)),
    ZooModel("hf_opt", "transformers", _opt, "2 x 128, seq 32", _text_patterns(_opt)),
    # transformers with repeated layers whose kernels inductor shares between layers (issue 46)
    ZooModel("hf_bart", "transformers", _bart, "encoder-decoder, 2 + 2 x 128, seq 32 / 8", _text_patterns(_bart)),
    ZooModel("hf_gpt_neox", "transformers", _gpt_neox, "decoder, 3 x 128, seq 32", _text_patterns(_gpt_neox)),
    ZooModel("hf_mixtral", "transformers", _mixtral, "mixture of experts, 2 x 128, 4 experts top-2, seq 32",
             _text_patterns(_mixtral)),
    ZooModel("hf_qwen2_moe", "transformers", _qwen2_moe, "mixture of experts with a shared expert, 2 x 128, 4 experts top-2, seq 32",
             _text_patterns(_qwen2_moe)),
    ZooModel("hf_albert", "transformers", _albert, "one layer's weights shared by 3 layers, 128, seq 32", _text_patterns(_albert)),
    ZooModel("hf_deit", "transformers", _deit, "vision transformer, 3 x 128, image 64x64"),
    # DDP: driven by zoo.py under torchrun (gloo, 2 ranks), not built in-process
    ZooModel("ddp_resnet18", "ddp", _ddp_resnet18, "torchrun gloo, 2 ranks, 1x3x64x64"),
]}

#: the CI subset (tests/project/test_zoo.py): torchvision, timm and transformers, small and quick to compile
CI_SUBSET = ("resnet18", "mobilenet_v3_small", "efficientnet_b0", "timm_convnext_atto", "timm_vit_tiny_patch16_224",
             "hf_bert", "hf_gpt2", "hf_llama_gqa")
#: those of CI_SUBSET also profiled compiled in CI (inductor's compile is the cost)
CI_COMPILED = ("resnet18", "timm_convnext_atto", "hf_bert")


def call_patterns(spec: ZooModel) -> list[Call]:
    if spec.patterns is not None:
        return spec.patterns()
    _, args, kwargs = spec.build()
    return [(args, kwargs)]
