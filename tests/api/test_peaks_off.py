"""``peaks="off"`` from Python is ``peaks=None``, as on the command line and in FXPROF_PEAKS (issue 69,
item 6): it was refused with a message about TFLOPS,GBPS that never named ``None``."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import fxprof
from fxprof.core.roofline import peaks_off
from fxprof.measure.passes.peaks import resolve_peaks


@pytest.mark.parametrize("value", ["off", "OFF", " Off ", "none", None, False])
def test_off_none_and_false_all_mean_no_roofline(value):
    assert peaks_off(value) and resolve_peaks(value) is None


@pytest.mark.parametrize("value", ["auto", "quick", "0.1,20", (0.1, 20), "offish", 0])
def test_other_values_are_not_off(value):
    assert not peaks_off(value)


def test_profile_takes_peaks_off_as_none():
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4)).eval()
    prof = fxprof.profile(model, torch.randn(2, 8), iters=2, warmup=0, peaks="off")
    assert not prof.meta.get("peaks")
    assert "roof_pct" not in prof.df.columns or prof.df["roof_pct"].isna().all()


def test_a_bad_peaks_value_names_none_and_off():
    with pytest.raises(ValueError, match=r"None \(or 'off'\)"):
        resolve_peaks(object())
