"""fxprof.whatif leaves every random number generator as it found it, and a variant that would
run what the baseline runs is reported as changing nothing, not timed (issue 69, item 5)."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch
from torch import nn

import fxprof
from fxprof.core.whatif import NO_CHANGE
from fxprof.measure.common.state import preserved_rng


def _tiny() -> nn.Module:
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4)).eval()


def _drawing(model: nn.Module, inputs: tuple) -> tuple[nn.Module, tuple]:
    """A variant of the user's that draws from every generator, when prepared and in each call."""
    random.random()
    np.random.rand(3)
    torch.rand(3)

    class Draws(nn.Module):
        def __init__(self, inner: nn.Module) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            random.random()
            np.random.rand(2)
            return self.inner(x)

    return Draws(model), inputs


def _states() -> tuple:
    return random.getstate(), np.random.get_state(), torch.get_rng_state()


def _assert_same(before: tuple, after: tuple) -> None:
    assert after[0] == before[0], "Python's random was left advanced"
    legacy_before, legacy_after = before[1], after[1]
    assert legacy_after[0] == legacy_before[0] and legacy_after[2:] == legacy_before[2:]
    assert np.array_equal(legacy_after[1], legacy_before[1]), "numpy's global generator was left advanced"
    assert torch.equal(after[2], before[2]), "torch's generator was left advanced"


@pytest.mark.parametrize("blocks", [False, True])
def test_a_variant_drawing_from_random_numpy_and_torch_leaves_all_three_where_they_were(blocks):
    random.seed(1)
    np.random.seed(2)
    torch.manual_seed(3)
    model, x = _tiny(), torch.randn(2, 8)  # these draw from torch: made before the states are taken
    before = _states()
    result = fxprof.whatif(model, x, {"draws": _drawing}, iters=2, warmup=1, blocks=blocks,
                           block_iters=2, peaks=None)
    assert "draws" in result.times and not result.errors  # it ran: the generators were drawn from
    _assert_same(before, _states())
    # and the next draws are the ones the caller would have had without whatif
    random.seed(1)
    np.random.seed(2)
    torch.manual_seed(3)
    _tiny(), torch.randn(2, 8)
    expected = (random.random(), np.random.rand(), torch.rand(1))
    _restore(before)
    assert (random.random(), np.random.rand()) == expected[:2] and torch.equal(torch.rand(1), expected[2])


def _restore(states: tuple) -> None:
    random.setstate(states[0])
    np.random.set_state(states[1])
    torch.set_rng_state(states[2])


def test_preserved_rng_puts_back_every_generator_for_every_caller():
    """The shared mechanism (fxprof.profile's eager mode and the capture helpers use it too)."""
    before = _states()
    with preserved_rng():
        random.random()
        np.random.rand(5)
        torch.rand(5)
    _assert_same(before, _states())
    with pytest.raises(RuntimeError), preserved_rng():  # an error inside the block puts them back too
        random.random()
        np.random.rand(5)
        raise RuntimeError("boom")
    _assert_same(before, _states())


def test_profile_of_a_model_drawing_from_random_and_numpy_leaves_them():
    class Noisy(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.linear = nn.Linear(8, 4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.linear(x) * random.random() * float(np.random.rand())

    model, x = Noisy(), torch.randn(2, 8)
    before = _states()
    fxprof.profile(model, x, iters=2, warmup=1, peaks=None)
    _assert_same(before, _states())


def test_threads_equal_to_the_current_count_changes_nothing_and_is_not_timed():
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        result = fxprof.whatif(_tiny(), torch.randn(2, 8), ["threads=1"], iters=2, warmup=0, blocks=False)
    finally:
        torch.set_num_threads(threads)
    assert "threads=1" not in result.times  # nothing timed
    row = result.table.loc["threads=1"]
    assert row["verdict"] == NO_CHANGE and row["error"].startswith(NO_CHANGE) and "1 intra-op thread" in row["error"]
    assert np.isnan(row["speedup"])
    text = repr(result)
    assert "threads=1: changes nothing" in text and "failed" not in text and "same" not in text


def test_a_no_change_variant_reads_changes_nothing_in_the_html(tmp_path):
    from fxprof.views.whatif import render_whatif, write_whatif_html

    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        result = fxprof.whatif(_tiny(), torch.randn(2, 8), ["threads=1", "inference_mode"], iters=2, warmup=0,
                               blocks=False)
    finally:
        torch.set_num_threads(threads)
    assert "inference_mode" in result.times  # a variant that changes something is timed as before
    page = tmp_path / "whatif.html"
    write_whatif_html(result, str(page))
    assert "threads=1: changes nothing" in page.read_text()
    assert "threads=1: changes nothing" in render_whatif(result)


def test_other_variants_known_up_front_to_change_nothing():
    with torch.inference_mode():
        inside = fxprof.whatif(_tiny(), torch.randn(2, 8), ["inference_mode"], iters=2, warmup=0, blocks=False)
    assert inside.table.loc["inference_mode", "verdict"] == NO_CHANGE and "inference_mode" not in inside.times
    conv = nn.Sequential(nn.Conv2d(3, 4, 3)).to(memory_format=torch.channels_last).eval()
    x = torch.randn(1, 3, 8, 8).contiguous(memory_format=torch.channels_last)
    already = fxprof.whatif(conv, x, ["channels_last"], iters=2, warmup=0, blocks=False)
    assert already.table.loc["channels_last", "verdict"] == NO_CHANGE
    assert "already in channels_last" in already.table.loc["channels_last", "error"]
    fresh = fxprof.whatif(conv, torch.randn(1, 3, 8, 8), ["channels_last"], iters=2, warmup=0, blocks=False)
    assert "channels_last" in fresh.times  # the input is not channels-last: the variant changes it


def test_a_compiled_profile_leaves_every_generator_where_it_was():
    """Compiled mode (fxprof.profile(compile=...)) puts them back too, as the eager mode does: its
    warm-up and timed calls of a train-mode dropout draw from torch's generator."""
    class Drops(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.linear = nn.Linear(8, 8)
            self.drop = nn.Dropout(0.5)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.drop(self.linear(x))

    model, x = Drops().train(), torch.randn(4, 8)
    before = _states()
    fxprof.profile(model, x, iters=2, warmup=1, compile=True, peaks=None, anatomy=False, memory=False)
    _assert_same(before, _states())
