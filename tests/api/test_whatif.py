"""fxprof.whatif: variants timed interleaved against the baseline, per block, and the CLI command."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

import fxprof
from fxprof.cli import main
from fxprof.measure.whatif.variants import parse_variant


@pytest.fixture(autouse=True)
def _one_thread():
    """One torch thread: on a shared 2-core machine a second intra-op thread that is descheduled
    stalls every op it takes part in, and the run times scatter by 10x."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


class SlowBlock(nn.Module):
    """Deliberately slow: twenty 256x256 matmuls on a 64-row input."""

    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.randn(256, 256) / 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for _ in range(20):
            x = torch.tanh(x @ self.w)
        return x


class WithSlowBlock(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Linear(256, 256)
        self.slow = SlowBlock()
        self.head = nn.Linear(256, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.slow(self.stem(x)))


def drop_slow(model: nn.Module, inputs: tuple) -> tuple[nn.Module, tuple]:
    model.slow = nn.Identity()
    return model, inputs


class SmallCNN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
                                      nn.Conv2d(16, 32, 3, padding=1), nn.ReLU())
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(32, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.flatten(self.pool(self.features(x)), 1))


def _state(model: nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.clone() for k, v in model.state_dict().items()}


def test_a_variant_that_removes_the_slow_block_is_faster_and_names_it():
    torch.manual_seed(0)
    model = WithSlowBlock().eval()
    before = _state(model)
    result = fxprof.whatif(model, torch.randn(64, 256), {"no_slow": drop_slow}, iters=8, warmup=1, peaks=None)
    row = result.table.loc["no_slow"]
    assert row["verdict"] == "faster" and row["speedup"] > 2
    assert row["low"] <= row["speedup"] <= row["high"]
    assert row["runs"] == 8 and len(result.times["baseline"]) == 8
    assert row["gained"].startswith("slow ")  # the block that gained most is the slow one
    blocks = result.blocks("no_slow")
    assert blocks.loc["slow", "b_ms"] < blocks.loc["slow", "a_ms"] / 5  # an nn.Identity left
    line = result.lines()[0]
    assert line.startswith("no_slow: ") and "x faster [" in line and "slow " in line
    # the user's model is untouched: the slow block is still there, parameters equal
    assert isinstance(model.slow, SlowBlock)
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())


def test_builtin_variants_on_a_small_cnn():
    torch.manual_seed(0)
    model = SmallCNN().eval()
    before = _state(model)
    variants = ["channels_last", "inference_mode", "bf16", "batch=4", "threads=2"]
    result = fxprof.whatif(model, torch.randn(2, 3, 32, 32), variants, iters=6, warmup=1, blocks=False)
    table = result.table
    assert sorted(table.index) == sorted(variants)
    assert (table["error"] == "").all(), table["error"]
    assert table["verdict"].isin(["faster", "slower", "same"]).all()
    assert (table["speedup"] > 0).all() and (table["low"] <= table["high"]).all()
    assert list(table["speedup"]) == sorted(table["speedup"], reverse=True)  # best first
    assert table.loc["batch=4", "samples"] == 4 and table.loc["channels_last", "samples"] == 2
    # batch=4 is compared per sample: its speed-up is per-sample time, not per call
    per_call = np.median(result.times["baseline"]) / np.median(result.times["batch=4"])
    assert table.loc["batch=4", "speedup"] == pytest.approx(per_call * 4 / 2, rel=1e-9)
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert torch.get_num_threads() == result.meta["threads"]  # threads=N puts the count back


def test_a_failing_variant_is_a_row_with_its_reason():
    def breaks_at_call(model, inputs):
        return model, (inputs[0][:, :3],)  # the wrong width: the first Linear refuses it

    def breaks_at_once(model, inputs):
        raise RuntimeError("no such remedy")

    result = fxprof.whatif(WithSlowBlock().eval(), torch.randn(4, 256),
                           [("bad_input", breaks_at_call), ("bad_fn", breaks_at_once), "inference_mode"],
                           iters=4, warmup=1, blocks=False)
    table = result.table
    assert "mat1 and mat2 shapes cannot be multiplied" in table.loc["bad_input", "error"]
    assert table.loc["bad_fn", "error"] == "RuntimeError: no such remedy"
    assert table.loc["inference_mode", "error"] == "" and table.loc["inference_mode", "runs"] == 4
    assert list(table.index[-2:]) == ["bad_input", "bad_fn"]  # failed rows last
    assert any(line.startswith("bad_fn: failed: RuntimeError") for line in result.lines())


def test_bad_variant_names_fail_before_anything_runs():
    with pytest.raises(ValueError, match="did you mean 'channels_last'"):
        parse_variant("channel_last")
    with pytest.raises(ValueError, match="compile mode"):
        parse_variant("compile:fast")
    assert parse_variant("threads=2").value == 2 and parse_variant("compile:max-autotune").value == "max-autotune"
    with pytest.raises(ValueError, match="twice"):
        fxprof.whatif(SmallCNN(), torch.randn(1, 3, 8, 8), ["bf16", "bf16"])


@pytest.mark.slow
def test_compile_variant_profiles_the_compiled_program_per_block():
    torch.manual_seed(0)
    result = fxprof.whatif(SmallCNN().eval(), torch.randn(2, 3, 32, 32), ["compile"], iters=5, warmup=2, peaks=None)
    row = result.table.loc["compile"]
    assert row["error"] == "" and row["speedup"] > 0
    assert result.profiles["compile"].meta.get("compiled")  # the kernels' profile (compiled mode)
    assert result.blocks("compile") is not None


MODEL_FILE = '''
import torch
from torch import nn

def make():
    return nn.Sequential(nn.Conv2d(3, 8, 3), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(), nn.LazyLinear(4))
'''


def test_cli_prints_the_ranked_table_and_writes_the_page(tmp_path, capsys):
    source = tmp_path / "tiny.py"
    source.write_text(MODEL_FILE.replace("nn.LazyLinear(4)", "nn.Linear(8 * 7 * 7, 4)"))
    page, table = tmp_path / "whatif.html", tmp_path / "whatif.csv"
    code = main(["whatif", f"{source}:make", "--variants", "channels_last,inference_mode", "--input", "2x3x16x16",
                 "--iters", "5", "--warmup", "1", "--peaks", "off", "--html", str(page), "--csv", str(table), "--quiet"])
    out = capsys.readouterr().out
    assert code == 0
    assert "fxprof whatif: " in out and "5 interleaved rounds" in out
    lines = [line for line in out.splitlines() if line.startswith(("channels_last: ", "inference_mode: "))]
    assert len(lines) == 2 and all("[" in line for line in lines)
    text = page.read_text()
    assert "Per block: speed-up over the baseline" in text and "channels_last" in text
    assert "speedup" in table.read_text().splitlines()[0]


def test_cli_refuses_a_bad_variant_before_running(capsys):
    assert main(["whatif", "resnet18", "--variants", "channels_last,turbo"]) == 2
    assert "bad --variants 'turbo'" in capsys.readouterr().err
