"""The Lagrangian bound's layer-split DP step (autotune/tuner/bounds/lagrangian.py: split_step)
against the definition, computed by hand in Python: new[j] = min over i with lo <= j - i <= hi of
dp[i] - C[i] + C[j], the first i attaining it (0 where none is finite)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from autotune.tuner.bounds.lagrangian import split_step


def _by_definition(dp, C, lo, hi):
    N = dp.size - 1
    out, arg = np.full(N + 1, np.inf), np.zeros(N + 1, dtype=np.int64)
    for j in range(N + 1):
        best, at = np.inf, None
        for i in range(N + 1):
            if lo <= j - i <= hi and (at is None or dp[i] - C[i] < best):
                best, at = dp[i] - C[i], i
        if at is not None and np.isfinite(best):
            out[j], arg[j] = best + C[j], at
    return out, arg


def test_split_step_by_hand() -> None:
    # 3 layers, costs 1, 2, 3 on this mini-stage: C = [0, 1, 3, 6]; before it dp = [0, 5, inf, inf]
    dp, C = np.array([0.0, 5.0, np.inf, np.inf]), np.array([0.0, 1.0, 3.0, 6.0])
    out, arg = split_step(dp, C, 1, 3)                # at least one layer here
    assert out.tolist() == [np.inf, 1.0, 3.0, 6.0] and arg.tolist() == [0, 0, 0, 0]
    out, arg = split_step(dp, C, 0, 1)                # at most one layer: the table path
    assert out.tolist() == [0.0, 1.0, 7.0, np.inf] and arg.tolist() == [0, 0, 1, 0]
    # a tie (dp[1] - C[1] = dp[0] - C[0] = 0): the first i wins in both paths
    dp2 = np.array([0.0, 1.0, np.inf, np.inf])
    assert split_step(dp2, C, 1, 3)[1].tolist() == [0, 0, 0, 0]
    assert split_step(dp2, C, 1, 2)[1].tolist() == [0, 0, 0, 1]


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 9), st.data())
def test_split_step_is_the_definition(N, data) -> None:
    """Both paths (running minimum for hi >= N, the table otherwise): small integer values make
    ties common, +inf entries are states not reached yet."""
    vals = st.one_of(st.integers(-4, 4).map(float), st.just(np.inf))
    dp = np.array(data.draw(st.lists(vals, min_size=N + 1, max_size=N + 1)))
    C = np.concatenate([[0.0], np.cumsum(data.draw(st.lists(st.integers(0, 3).map(float),
                                                              min_size=N, max_size=N)))])
    lo = data.draw(st.integers(0, N + 1))
    hi = data.draw(st.integers(lo, N + 2))
    out, arg = split_step(dp, C, lo, hi)
    ref, rarg = _by_definition(dp, C, lo, hi)
    assert np.array_equal(out, ref)
    assert np.array_equal(arg[np.isfinite(ref)], rarg[np.isfinite(ref)])
