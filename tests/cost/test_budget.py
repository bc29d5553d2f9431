"""The shared HBM feasibility test (:mod:`autotune.cost.budget`): a peak equal to the budget up to
the rounding of float sums fits at every unit of memory; a byte over does not."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from autotune.cost.budget import excess_mib, fits, hbm_cap

BYTE_MIB = 1 / 2**20


def test_a_peak_rounded_just_above_the_budget_fits_and_a_byte_over_does_not() -> None:
    budget = 65_536.0  # 64 GiB
    assert fits(budget, budget)
    assert fits(math.nextafter(budget, math.inf), budget)  # one ulp above: rounding, not memory
    assert fits(budget * (1 + 4e-16), budget)
    assert not fits(budget + BYTE_MIB, budget)  # 1e-12 of 64 GiB is 0.07 bytes
    assert hbm_cap(budget) == pytest.approx(budget + 6.5536e-8, rel=1e-15)
    assert hbm_cap(budget) - budget < BYTE_MIB


def test_excess_is_zero_inside_the_tolerance_and_signed_outside() -> None:
    budget = 1000.0
    assert excess_mib(math.nextafter(budget, math.inf), budget) == 0.0
    assert excess_mib(990.0, budget) == -10.0
    assert excess_mib(1000.5, budget) == 0.5
    out = excess_mib(np.array([990.0, 1000.0, 1000.5]), budget)
    assert out.tolist() == [-10.0, 0.0, 0.5]


def test_no_budget_fits_everything() -> None:
    assert hbm_cap(math.inf) == math.inf
    assert fits(1e12, math.inf)
    assert excess_mib(5.0, math.inf) == -math.inf


@given(terms=st.lists(st.floats(0.01, 5000.0), min_size=1, max_size=200),
       scale=st.sampled_from([1 / 3, 0.5, 3.0, 7.0, 1e-3, 1e3]))
def test_a_budget_equal_to_a_sum_fits_that_sum_at_every_memory_scale(terms, scale) -> None:
    """The budget is a layout's peak computed one way (summed left to right), the search computes
    the same peak another way (numpy's pairwise sum, scaled terms): the layout fits at every scale."""
    budget = math.fsum(terms) * scale
    assert fits(float(np.sum(np.asarray(terms) * scale)), budget)
    assert fits(sum(t * scale for t in terms), budget)
    assert excess_mib(float(np.sum(np.asarray(terms) * scale)), budget) <= 0.0
