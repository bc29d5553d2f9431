"""The shipped examples: their profiles are what `autotune profile` derives, and they evaluate."""

from __future__ import annotations

import pytest

import autotune
from autotune.profile.analytic import analytic_profile
from autotune.profile.schema import load_profile
from tests.conftest import EXAMPLES

CASES = ["telechat2_115b", "llama3_1_70b"]


@pytest.mark.parametrize("name", CASES)
def test_shipped_profile_is_the_derived_one(name):
    """Regenerate with:
    autotune profile examples/NAME/train.yaml --device ascend-910b --out examples/NAME/profile.yaml --force"""
    shipped = load_profile(EXAMPLES / name / "profile.yaml")
    derived = analytic_profile(autotune.load_config(EXAMPLES / name / "train.yaml"), "ascend-910b")
    assert shipped.model_dump(exclude={"name"}) == derived.model_dump(exclude={"name"})


@pytest.mark.parametrize("name", CASES)
def test_user_config_fits_and_profile_file_gives_same_numbers(name):
    cfg = EXAMPLES / name / "train.yaml"
    analytic = autotune.evaluate(cfg)
    from_file = autotune.evaluate(cfg, EXAMPLES / name / "profile.yaml")
    assert analytic.fits is True
    assert from_file.step_time_ms == analytic.step_time_ms
    assert [s.peak_mib for s in from_file.stages] == [s.peak_mib for s in analytic.stages]
