"""The device DP's per-path least weighted replay (``_WeightedFronts.least``) against a brute-force
enumeration of every layer's recompute class: never above it, for either sign of the path weight
a_v = cb_v − 1. With a_v < 0 the minimum wants the *most* replay, which a class off the
(memory, replay) front can give: here full recompute replays less than select + comm together
(0.1·f against 0.9·f) and keeps less memory, so select + comm is dominated yet slower."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from autotune.cost.inputs import ProfileArrays
from autotune.profile.schema import ModelProfile
from autotune.tuner.bounds import _kinds
from autotune.tuner.bounds._kinds import LayerTypes, TypedFronts
from autotune.tuner.bounds.device_dp import _WeightedFronts
from autotune.tuner.problem import Problem
from tests.search.test_exact_bounds import _random_problem


def _problem(full_x: float, sel_x: float, comm_x: float) -> Problem:
    kd = {"a": {"fwd_ms": 1.0, "bwd_ms": 2.0, "act_mib": 10.0, "static_mib": 5.0,
                "full": {"act_mib": 1.0, "extra_ms": full_x, "workspace_mib": 0.0},
                "select": {"act_mib": 7.0, "extra_ms": sel_x}, "comm": {"act_mib": 8.0, "extra_ms": comm_x}}}
    pa = ProfileArrays.from_profile(ModelProfile(kinds=kd, layer_kinds=[("a", 8)], head={"static_mib": 1.0},
                                                 tail={"static_mib": 1.0}, p2p_ms=0.0))
    return Problem(pa, P=2, m=4, vpp_candidates=[2])


def _brute(lay, counts, w, a, budget) -> float:
    """min Σ_v a_v·Σ replay over every class of every layer with Σ_v Σ (w_v·act + δ) <= budget."""
    C = len(lay.extra_ms)
    best = np.inf
    for combo in itertools.product(*[list(itertools.combinations_with_replacement(range(C), n)) for n in counts]):
        mem = sum(w[v] * lay.act_mib[list(c)].sum() + lay.sdelta_mib[list(c)].sum() for v, c in enumerate(combo))
        if mem <= budget + 1e-9:
            best = min(best, sum(a[v] * lay.extra_ms[list(c)].sum() for v, c in enumerate(combo)))
    return best


@settings(max_examples=40, deadline=None)
@given(full_x=st.sampled_from([0.1, 0.5, 1.0]), n0=st.integers(0, 2), n1=st.integers(1, 2),
       w0=st.sampled_from([1.0, 2.0, 3.0]), w1=st.sampled_from([1.0, 2.0]), a0=st.sampled_from([-1.0, 0.0, 1.0, 2.0]),
       a1=st.sampled_from([-1.0, 1.0]), frac=st.floats(0.0, 1.0))
def test_least_is_a_lower_bound(full_x, n0, n1, w0, w1, a0, a1, frac):
    problem = _problem(full_x, 0.4, 0.5)
    types = LayerTypes(problem, 2)
    lay = types.layers[0]
    counts, w, a = (n0, n1), (w0, w1), (a0, a1)
    lo = sum(w[v] * counts[v] * (lay.act_mib.min()) for v in range(2))
    hi = sum(w[v] * counts[v] * (lay.act_mib.max()) for v in range(2))
    budget = lo + frac * (hi - lo)
    got = _WeightedFronts(TypedFronts(types)).least(((n0,), (n1,)), w, a, budget)
    want = _brute(lay, counts, w, a, budget)
    assert got <= want + 1e-9


def test_negative_weight_takes_the_slowest_class():
    """One layer, a = −1, room for every class: the least is −(select + comm replay) = −0.9 ms, not
    −0.1 ms (full recompute, the least-memory point of the front)."""
    problem = _problem(0.1, 0.4, 0.5)
    types = LayerTypes(problem, 2)
    lay = types.layers[0]
    assert _brute(lay, (0, 1), (1.0, 1.0), (1.0, -1.0), 100.0) == pytest.approx(-0.9)
    got = _WeightedFronts(TypedFronts(types)).least(((0,), (1,)), (1.0, 1.0), (1.0, -1.0), 100.0)
    assert got <= -0.9 + 1e-9


def _two_type_fronts(seed: int) -> tuple[LayerTypes, TypedFronts | None]:
    """A random two-type model (full / select / comm, static deltas; pp 2 × vpp 2, 8 layers) and
    its TypedFronts; None when the draw gave one type."""
    problem = _random_problem(seed, 8, 2, 2, ("full", "select", "comm"), 1.0, static_delta=True)
    types = LayerTypes(problem, 2)
    return types, (TypedFronts(types) if types.T >= 2 else None)


def _memory_span(types: LayerTypes, tn: np.ndarray, w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """MiB [M] of the least-memory and of the most-memory class choice of every configuration
    (type counts int [M, V, T]) against live-count vector ``w`` [V]."""
    act = np.stack([lay.act_mib for lay in types.layers])
    sd = np.stack([lay.sdelta_mib for lay in types.layers])
    mem = w[:, None, None] * act[None] + sd[None]  # [V, T, C]
    return np.einsum("mvt,vt->m", tn, mem.min(axis=2)), np.einsum("mvt,vt->m", tn, mem.max(axis=2))


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 10_000), frac=st.floats(0.0, 1.0))
def test_worst_rows_equals_the_row_maximum_of_the_exact_values(seed, frac):
    """TypedFronts.worst_rows (the exact fronts only for the rows whose integer choice beside the
    linear relaxation reaches the largest relaxation) gives max(0, max over rows of min_extra)
    for every configuration of a two-type model: random type counts per chunk, four live-count
    vectors, budgets from none fitting to all fitting, some exactly on the least-memory edge."""
    types, tf = _two_type_fronts(seed)
    if tf is None:
        return
    rng = np.random.default_rng(seed)
    tn = rng.integers(0, 3, size=(30, 2, types.T))
    rows = rng.integers(0, 4, size=(4, 2)).astype(float)
    spans = [_memory_span(types, tn, w) for w in rows]
    least = np.stack([lo for lo, _ in spans], axis=1)  # [M, R] the least-memory choice
    most = np.stack([hi for _, hi in spans], axis=1)
    room = least + (most - least) * rng.uniform(-0.2, 1.1, size=least.shape) * (0.3 + frac)
    room[::5] = least[::5]
    got = tf.worst_rows(tn, rows, room)
    for i in range(tn.shape[0]):
        cnt = tuple(tuple(int(x) for x in c) for c in tn[i])
        want = max([0.0] + [tf.min_extra(cnt, w, float(r)) for w, r in zip(rows, room[i])])
        assert np.isinf(want) == np.isinf(got[i])
        if np.isfinite(want):
            assert got[i] == pytest.approx(want, rel=1e-12, abs=1e-9)


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), same=st.booleans())
def test_min_extra_batch_is_min_extra_bit_for_bit(seed, same):
    """TypedFronts.min_extra_batch (configurations that merge to the same groups share one prefix
    front and one vectorised binary search) returns exactly min_extra's float for each of 60
    random configurations of a two-type model against one live-count vector (two equal weights
    when ``same``, so chunks merge), budgets from below the least-memory choice (+inf) and
    negative (no layers: 0 or +inf) to room for everything, some exactly on the least-memory
    edge; repeated configurations included."""
    types, tf = _two_type_fronts(seed)
    if tf is None:
        return
    rng = np.random.default_rng(seed)
    tn = rng.integers(0, 3, size=(60, 2, types.T))
    tn[::7] = tn[1]  # the same groups, other budgets
    tn[5] = 0
    w = np.array([2.0, 2.0]) if same else rng.integers(0, 4, size=2).astype(float)
    least, most = _memory_span(types, tn, w)
    budget = least + (most - least) * rng.uniform(-0.3, 1.2, size=least.shape)
    budget[::4] = least[::4]  # on the least-memory edge (min_extra's 1e-9 MiB tolerance)
    budget[5] = -1.0 if seed % 2 else 0.0
    got = tf.min_extra_batch(tn, w, budget)
    want = [tf.min_extra(tuple(tuple(int(x) for x in c) for c in tn[i]), w, float(budget[i])) for i in range(60)]
    assert got.tolist() == want
    with pytest.MonkeyPatch.context() as mp:  # every (configuration, prefix point) pair in blocks of a few
        mp.setattr(_kinds, "BATCH_CELLS", 5)
        assert tf.min_extra_batch(tn, w, budget).tolist() == want


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 10_000), w0=st.sampled_from([0.0, 1.0, 2.0]), w1=st.sampled_from([1.0, 2.0]),
       frac=st.floats(-0.1, 1.1))
def test_min_extra_is_the_brute_force_least_replay(seed, w0, w1, frac):
    """TypedFronts.min_extra (groups of one type and weight merged, the most layers matched last)
    against every recompute class of every layer of a two-type model: the least Σ replay (ms)
    with Σ_v Σ_t (w_v·act + δ) <= budget (MiB), +inf when nothing fits. Equal weights (w0 = w1)
    make the chunks' groups of one type merge."""
    problem = _random_problem(seed, 8, 2, 2, ("full", "select", "comm"), 1.0, static_delta=True)
    types = LayerTypes(problem, 2)
    if types.T < 2:
        return
    rng = np.random.default_rng(seed)
    counts = rng.integers(0, 3, size=(2, types.T))
    while counts.sum() > 4:   # the brute force's size: at most 4 layers
        v, t = np.argwhere(counts > 0)[rng.integers((counts > 0).sum())]
        counts[v, t] -= 1
    tn = tuple(tuple(int(x) for x in c) for c in counts)
    w = np.array([w0, w1])
    groups = [(types.layers[t], w[v], n) for v in range(2) for t, n in enumerate(tn[v]) if n]
    lo = sum(n * (x * lay.act_mib + lay.sdelta_mib).min() for lay, x, n in groups)
    hi = sum(n * (x * lay.act_mib + lay.sdelta_mib).max() for lay, x, n in groups)
    budget = float(lo + frac * (hi - lo))
    want = np.inf
    options = [list(itertools.combinations_with_replacement(range(len(lay.extra_ms)), n)) for lay, _, n in groups]
    for combo in itertools.product(*options):
        mem = sum((x * lay.act_mib[list(c)] + lay.sdelta_mib[list(c)]).sum() for (lay, x, _), c in zip(groups, combo))
        if mem <= budget + 1e-9:
            want = min(want, sum(lay.extra_ms[list(c)].sum() for (lay, _, _), c in zip(groups, combo)))
    got = TypedFronts(types).min_extra(tn, w, budget)
    assert np.isinf(got) == np.isinf(want)
    if np.isfinite(want):
        assert got == pytest.approx(want, rel=1e-9, abs=1e-9)
