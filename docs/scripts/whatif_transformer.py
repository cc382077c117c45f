"""The transformer example of docs/whatif.md: a small nn.TransformerEncoder, its variants measured.

Run: PYTHONPATH=. python docs/scripts/whatif_transformer.py  (prints the summary and the table)."""

import torch
from torch import nn

import fxprof


def small_transformer() -> nn.Module:
    layer = nn.TransformerEncoderLayer(d_model=128, nhead=4, dim_feedforward=512, batch_first=True)
    return nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False).eval()


def half_sequence(model: nn.Module, inputs: tuple) -> tuple[nn.Module, tuple]:
    """A variant of your own: the same model in half the sequence length (what if we truncated?)."""
    return model, (inputs[0][:, : inputs[0].shape[1] // 2].contiguous(),)


if __name__ == "__main__":
    torch.manual_seed(0)
    torch.set_num_threads(1)
    x = torch.randn(4, 64, 128)
    result = fxprof.whatif(small_transformer(), x, ["inference_mode", "bf16", "batch=16", ("half_sequence", half_sequence)],
                           iters=15, warmup=2, peaks="quick")
    print(result)
    print()
    print(result.table[["speedup", "low", "high", "verdict", "p_value", "base_ms", "variant_ms", "samples"]].round(3).to_string())
    print()
    print(result.blocks("bf16").round(3).to_string())
