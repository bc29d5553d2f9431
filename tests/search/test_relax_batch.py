"""The batched least-replay prices of the integer bounds (autotune.tuner.bounds._relax, issue 17):
``min_extra_ms`` (chunks of equal weight merged, values memoised) and ``min_extra_rows`` (many
configurations at once) equal a brute-force enumeration of every per-layer recompute class."""

from __future__ import annotations

import itertools

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from autotune.tuner.bounds._relax import RowFrontiers, count_vectors, min_extra_ms, min_extra_rows, relaxed_layer
from tests.search.test_stage_dp import small_vpp_problem


def brute(layer, counts: tuple[int, ...], w: np.ndarray, budget: float) -> float:
    """min Σ replay over every class of every layer with Σ_v (w_v·act + static delta) <= budget."""
    C = layer.act_mib.size
    best = np.inf
    for cls in itertools.product(range(C), repeat=sum(counts)):
        chunk = np.repeat(np.arange(len(counts)), counts)
        mem = float(sum(w[v] * layer.act_mib[c] + layer.sdelta_mib[c] for v, c in zip(chunk, cls)))
        if mem <= budget + 1e-9:
            best = min(best, float(sum(layer.extra_ms[c] for c in cls)))
    return best


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10_000), V=st.integers(1, 3), frac=st.floats(0.0, 1.0))
def test_batched_least_replay_equals_enumeration(seed, V, frac) -> None:
    """Every configuration of <= 4 layers in V chunks, two live-count vectors (one with equal
    weights on two chunks, so the merge is used), budgets from none fitting to all fitting."""
    problem, _ = small_vpp_problem(seed, 8, 2, 2, ("full", "select", "comm"), 1.0, "1f1b", True)
    layer = relaxed_layer(problem)
    rng = np.random.default_rng(seed)
    rows = np.stack([np.full(V, 2.0), rng.integers(0, 4, size=V).astype(float)])
    nv = np.array(count_vectors(np.zeros(V, dtype=np.int64), np.full(V, 3), 4))
    hi = float(4 * 3 * layer.act_mib.max())  # 4 layers at weight 3 keeping everything
    budget = np.full((nv.shape[0], 2), hi * (1.2 * frac - 0.2))
    budget[::2, 1] = rng.uniform(-0.2 * hi, hi, size=budget[::2, 1].shape)
    got = min_extra_rows(RowFrontiers(layer), nv, rows, budget)
    fr = RowFrontiers(layer)
    for i, cnt in enumerate(nv):
        for r, w in enumerate(rows):
            want = brute(layer, tuple(int(x) for x in cnt), w, float(budget[i, r]))
            one = min_extra_ms(fr, tuple(int(x) for x in cnt), w, float(budget[i, r]))
            assert np.isinf(want) == np.isinf(got[i, r]) == np.isinf(one)
            if np.isfinite(want):
                assert abs(got[i, r] - want) <= 1e-9 * max(1.0, abs(want))
                assert abs(one - want) <= 1e-9 * max(1.0, abs(want))
