"""The batched least-replay prices of the integer bounds (autotune.tuner.bounds._relax, issue 17):
``min_extra_ms`` (chunks of equal weight merged, values memoised) and ``min_extra_rows`` (many
configurations at once) equal a brute-force enumeration of every per-layer recompute class; for
configurations of many layers ``min_extra_lp`` (the linear relaxation) stays below it and within one
layer's replay of it."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from autotune.tuner.bounds import _relax
from autotune.tuner.bounds._relax import (RelaxedLayer, RowFrontiers, count_vectors, min_extra_lp, min_extra_ms,
                                          min_extra_rows, relaxed_layer)
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


def _two_class_layer() -> RelaxedLayer:
    """No recompute (10 MiB kept, no replay) or full recompute (2 MiB kept, 5 ms replay)."""
    return RelaxedLayer(1.0, 2.0, 0.0, np.array([10.0, 2.0]), np.array([0.0, 5.0]), np.zeros(2), np.zeros(2))


def test_linear_relaxation_hand_computed() -> None:
    """3 layers of weight 1 keep 30 MiB with no recompute; a budget of 20 MiB must save 10 MiB at
    8 MiB per fully recomputed layer: 1.25 layers x 5 ms = 6.25 ms (the integer optimum: 2 layers,
    10 ms). Weights 1 and 2, one layer each, 20 MiB: the weight-2 layer saves 16 MiB for 5 ms, so
    10/16 of it: 3.125 ms (integer: 5 ms). Everything fits: 0; less than all-full (6 MiB): +inf."""
    lay = _two_class_layer()
    got = min_extra_lp(lay, np.array([1.0]), np.array([[3], [3], [3], [3]]), np.array([20.0, 30.0, 6.0, 5.9]))
    np.testing.assert_allclose(got[:3], [6.25, 0.0, 15.0], rtol=1e-9)
    assert np.isinf(got[3])
    two = min_extra_lp(lay, np.array([1.0, 2.0]), np.array([[1, 1]]), np.array([20.0]))
    np.testing.assert_allclose(two, [3.125], rtol=1e-9)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10_000), V=st.integers(1, 3), frac=st.floats(0.0, 1.0))
def test_linear_relaxation_is_below_the_exact_value_and_within_one_layer(seed, V, frac) -> None:
    """For every configuration of <= 5 layers: exact − (largest − least replay of one layer) <=
    min_extra_lp <= exact (one layer at most is split between two classes) <= the replay of
    lp_dual_bounds' integer choice, +inf together."""
    problem, _ = small_vpp_problem(seed, 8, 2, 2, ("full", "select", "comm"), 1.0, "1f1b", True)
    layer = relaxed_layer(problem)
    rng = np.random.default_rng(seed)
    w = rng.integers(0, 4, size=V).astype(float)
    nv = np.array(count_vectors(np.zeros(V, dtype=np.int64), np.full(V, 3), 5))
    hi = float(5 * 3 * layer.act_mib.max())
    budget = hi * (1.2 * frac - 0.2) + rng.uniform(-0.1, 0.1, size=nv.shape[0]) * hi
    u = np.unique(w)
    gc = nv @ (w[:, None] == u[None, :]).astype(np.int64)
    got = min_extra_lp(layer, u, gc, budget)
    mem = u[:, None] * layer.act_mib[None, :] + layer.sdelta_mib[None, :]
    lp, ub = _relax.lp_dual_bounds(mem, np.broadcast_to(layer.extra_ms, mem.shape), gc, budget)
    one_layer = float(layer.extra_ms.max() - layer.extra_ms.min())
    for i, cnt in enumerate(nv):
        want = brute(layer, tuple(int(x) for x in cnt), w, float(budget[i]))
        assert np.isinf(want) == np.isinf(got[i]) == np.isinf(ub[i])
        assert lp[i] == got[i]
        if np.isfinite(want):
            assert want - one_layer - 1e-9 <= got[i] <= want + 1e-9 * max(1.0, want)
            # the integer choice beside the relaxation fits and is no better than the optimum
            assert want - 1e-9 * max(1.0, want) <= ub[i]


def test_rows_use_the_linear_relaxation_from_lp_min_layers(monkeypatch) -> None:
    """min_extra_rows prices configurations of >= LP_MIN_LAYERS layers with min_extra_lp and the
    others exactly (min_extra_ms)."""
    problem, _ = small_vpp_problem(3, 8, 2, 2, ("full", "select", "comm"), 1.0, "1f1b", True)
    layer = relaxed_layer(problem)
    monkeypatch.setattr(_relax, "LP_MIN_LAYERS", 4)
    nv = np.array(count_vectors(np.zeros(2, dtype=np.int64), np.full(2, 4), 6))
    rows = np.array([[2.0, 1.0]])
    budget = np.full((nv.shape[0], 1), 4.5 * layer.act_mib.max())
    got = min_extra_rows(RowFrontiers(layer), nv, rows, budget)[:, 0]
    fr = RowFrontiers(layer)
    big = nv.sum(axis=1) >= 4
    assert big.any() and (~big).any()
    for i, cnt in enumerate(nv):
        if big[i]:
            want = min_extra_lp(layer, np.array([1.0, 2.0]), cnt[None, ::-1], budget[i, :1])[0]
        else:
            want = min_extra_ms(fr, tuple(int(x) for x in cnt), rows[0], float(budget[i, 0]))
        assert got[i] == want or abs(got[i] - want) <= 1e-9 * max(1.0, abs(want))


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10_000), V=st.integers(2, 4), frac=st.floats(0.0, 1.0))
def test_worst_row_extra_equals_the_row_maximum(seed, V, frac) -> None:
    """worst_row_extra (the exact fronts only where lp + Δ reaches the row maximum) gives
    max(0, max over rows of min_extra_rows) for every configuration: five live-count vectors with
    random weights and budgets from none fitting to all fitting, some on the least-memory edge."""
    problem, _ = small_vpp_problem(seed, 8, 2, 2, ("full", "select", "comm"), 1.0, "1f1b", True)
    layer = relaxed_layer(problem)
    rng = np.random.default_rng(seed)
    rows = rng.integers(0, 5, size=(5, V)).astype(float) / rng.integers(1, 3)
    nv = np.array(count_vectors(np.zeros(V, dtype=np.int64), np.full(V, 4), 7))
    hi = float(7 * rows.max() * layer.act_mib.max() + 1.0)
    budget = rng.uniform(-0.1, 1.0, size=(nv.shape[0], rows.shape[0])) * hi * (0.2 + frac)
    least = np.stack([nv @ (w[:, None] * layer.act_mib[None, :] + layer.sdelta_mib[None, :]).min(axis=1)
                      for w in rows], axis=1)  # the least-memory choice: exactly on the edge
    budget[::7] = least[::7]
    want = np.maximum(0.0, min_extra_rows(RowFrontiers(layer), nv, rows, budget).max(axis=1, initial=0.0))
    got = _relax.worst_row_extra(RowFrontiers(layer), nv, rows, budget)
    assert np.array_equal(np.isinf(got), np.isinf(want))
    fin = np.isfinite(want)
    assert np.allclose(got[fin], want[fin], rtol=1e-12, atol=1e-9)


def test_worst_row_extra_prices_exactly_only_the_rows_that_can_hold_the_maximum(monkeypatch) -> None:
    """Four layers of the two-class layer (kept 10 / 2 MiB, replay 0 / 5 ms: Δ = 5 ms) in chunk 0
    against two rows of weight 1: a 100 MiB budget keeps everything (lp 0) and an 8 MiB one needs
    full recompute on all four (20 ms, on the least-memory edge). 0 + Δ < 20, so only the second
    row's exact fronts are built, and the value is 20 ms."""
    asked = []
    real = _relax.min_extra_rows

    def spy(fr, nv_, rows_, budget_):
        asked.append(budget_.tolist())
        return real(fr, nv_, rows_, budget_)
    monkeypatch.setattr(_relax, "min_extra_rows", spy)
    got = _relax.worst_row_extra(RowFrontiers(_two_class_layer()), np.array([[4, 0]]),
                                 np.array([[1.0, 1.0], [1.0, 1.0]]), np.array([[100.0, 8.0]]))
    assert got.tolist() == [20.0]
    assert asked == [[[8.0]]]


def test_row_maximum_by_hand() -> None:
    """Two configurations, three rows, exact values X between lp and ub. Configuration 0: the
    largest lp is 5, so row 2 (ub 3) is never priced; row 0 (largest ub, 9) is priced first and
    its 8 ms leaves row 1 (ub 6) out. Configuration 1: row 1 (ub 4) gives 3 ms, at or above the
    other rows' ub. One round, two pairs priced; all at once (rounds=0) the same answer."""
    lp = np.array([[1.0, 5.0, 2.0], [0.0, 0.0, 0.0]])
    ub = np.array([[9.0, 6.0, 3.0], [0.0, 4.0, 1.0]])
    X = np.array([[8.0, 5.5, 2.5], [0.0, 3.0, 0.5]])
    near = np.zeros_like(lp, dtype=bool)
    asked = []

    def price(i, r):
        asked.extend(zip(i.tolist(), r.tolist()))
        return X[i, r]
    got = _relax.row_maximum(lp, ub, near, np.ones(2, dtype=bool), price)
    assert got.tolist() == [8.0, 3.0]
    assert sorted(asked) == [(0, 0), (1, 1)]
    asked.clear()
    assert _relax.row_maximum(lp, ub, near, np.ones(2, dtype=bool), price, rounds=0).tolist() == [8.0, 3.0]
    assert sorted(asked) == [(0, 0), (0, 1), (1, 0), (1, 1), (1, 2)]
    # a row over the budget for sure (lp +inf) makes the configuration +inf without pricing it
    asked.clear()
    lp[1, 2] = np.inf
    got = _relax.row_maximum(lp, ub, near, np.ones(2, dtype=bool), price)
    assert got[0] == 8.0 and np.isposinf(got[1]) and all(i == 0 for i, _ in asked)


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10_000), V=st.integers(2, 3))
def test_memoised_key_prices_equal_fresh_ones(seed, V) -> None:
    """_min_extra_keys memoises each (weights, layers per group, budget, binary-searched group)
    value in the fronts' ``values``: a second batch that shares half its keys with the first
    gives, bit for bit, what a fresh RowFrontiers gives it, and only its new keys are priced."""
    problem, _ = small_vpp_problem(seed, 8, 2, 2, ("full", "select", "comm"), 1.0, "1f1b", True)
    layer = relaxed_layer(problem)
    rng = np.random.default_rng(seed)
    u = np.array([1.0, 2.5])
    gc = np.stack([rng.integers(0, 3, size=12), rng.integers(3, 6, size=12)], axis=1)  # group 1 largest
    b = rng.uniform(0.2, 1.0, size=12) * float((gc @ (u[:, None] * layer.act_mib[None, :]).max(axis=1)).max())
    fr = RowFrontiers(layer)
    first = _relax._min_extra_keys(fr, u, gc[:8], b[:8])
    n_memo = len(fr.values)
    second = _relax._min_extra_keys(fr, u, gc[4:], b[4:])
    seen = {(tuple(g), x) for g, x in zip(gc[:8], b[:8])}
    assert len(fr.values) - n_memo == len({(tuple(g), x) for g, x in zip(gc[8:], b[8:])} - seen)
    np.testing.assert_array_equal(second, _relax._min_extra_keys(RowFrontiers(layer), u, gc[4:], b[4:]))
    np.testing.assert_array_equal(first[4:], second[:4])


def test_device_dp_typed_fronts_share_the_problems_fronts() -> None:
    """The device DP's typed fronts use the problem's shared RowFrontiers (row_frontiers), the
    stage DP's: the first type is the relaxed layer itself, and a layer with other values gets
    its own shared fronts."""
    from autotune.tuner.bounds._kinds import LayerTypes, TypedFronts
    from autotune.tuner.bounds._relax import row_frontiers

    problem, _ = small_vpp_problem(3, 8, 2, 2, ("full", "select", "comm"), 1.0, "1f1b", True)
    tf = TypedFronts(LayerTypes(problem, 2), problem)
    assert tf.fr[0] is row_frontiers(problem)
    other = relaxed_layer(problem)
    other = RelaxedLayer(other.fwd_ms, other.bwd_ms, other.static_mib, other.act_mib * 2, other.extra_ms,
                         other.sdelta_mib, other.ws_mib)
    assert row_frontiers(problem, other) is not row_frontiers(problem)
    assert row_frontiers(problem, other) is row_frontiers(problem, other)
    assert TypedFronts(LayerTypes(problem, 2)).fr[0] is not row_frontiers(problem)  # no problem: its own


def _price_one_prefix_at_a_time(fr, u, gc, b, last):
    """Reference for _price_keys: each prefix front priced alone, its keys' last fronts padded
    with +inf to the widest of them (the code before the all-pairs version)."""
    K, G = gc.shape
    val = np.full(K, np.inf)
    rest = [g for g in range(G) if g != last]
    pk, pinv = (np.unique(gc[:, rest], axis=0, return_inverse=True) if rest
                else (np.zeros((1, 0), dtype=np.int64), np.zeros(K, dtype=np.int64)))
    pinv = np.asarray(pinv).reshape(-1)
    for j, pre in enumerate(pk):
        ks = np.flatnonzero(pinv == j)
        nz = [(int(n), float(u[g])) for n, g in zip(pre, rest) if n]
        acc = fr.prefix(tuple(n for n, _ in nz), tuple(x for _, x in nz))
        dist = np.unique(gc[ks, last])
        fronts = [fr.get(int(n), float(u[last])) for n in dist]
        width = max(f.shape[0] for f in fronts)
        fm, fx = np.full((dist.size, width), np.inf), np.zeros((dist.size, width))
        for i, f in enumerate(fronts):
            fm[i, :f.shape[0]], fx[i, :f.shape[0]] = f[:, 0], f[:, 1]
        wi = np.searchsorted(dist, gc[ks, last])
        room = b[ks][:, None] - acc[None, :, 0] + 1e-9
        i = (fm[wi][:, None, :] <= room[:, :, None]).sum(axis=2) - 1
        ext = np.take_along_axis(fx[wi], np.maximum(i, 0), axis=1)
        val[ks] = np.where(i >= 0, acc[None, :, 1] + ext, np.inf).min(axis=1)
    return val


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10_000), G=st.integers(1, 3), K=st.integers(1, 40))
def test_all_pairs_pricing_equals_one_prefix_at_a_time(seed, G, K) -> None:
    """_price_keys prices every (key, prefix-front point) pair in one pass: bit for bit the values
    of pricing each prefix front alone, budgets below the least memory, in between, and +inf (no
    budget) included, with the default blocks and with blocks of a few pairs."""
    problem, _ = small_vpp_problem(seed, 8, 2, 2, ("full", "select", "comm"), 1.0, "1f1b", True)
    layer = relaxed_layer(problem)
    rng = np.random.default_rng(seed)
    u = np.sort(rng.choice([0.5, 1.0, 1.5, 2.0, 3.0], size=G, replace=False))
    gc = rng.integers(0, 6, size=(K, G))
    b = rng.uniform(-0.2, 1.0, size=K) * float(6 * G * layer.act_mib.max() * u.max())
    b[rng.random(K) < 0.15] = np.inf
    last = int(np.argmax(gc.sum(axis=0)))
    want = _price_one_prefix_at_a_time(RowFrontiers(layer), u, gc, b, last)
    np.testing.assert_array_equal(_relax._price_keys(RowFrontiers(layer), u, gc, b, last), want)
    with pytest.MonkeyPatch.context() as mp:  # keys in blocks of a few pairs each
        mp.setattr(_relax, "BATCH_CELLS", 5)
        np.testing.assert_array_equal(_relax._price_keys(RowFrontiers(layer), u, gc, b, last), want)

