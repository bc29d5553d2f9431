"""stage_costs (prefix-sum path) against a direct per-layer sum; SimResult edge cases."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from autotune.cost import ProfileArrays, compile_schedule, simulate, stage_costs
from autotune.cost.inputs import FULL, NONE, StageCosts, class_counts
from autotune.cost.simulate import SimResult
from autotune.profile.schema import EndPart, LayerKind, ModelProfile, RecomputeOption


def _profile(n: int) -> ModelProfile:
    dense = LayerKind(fwd_ms=1.0, bwd_ms=2.0, act_mib=10, static_mib=5, workspace_mib=0.5,
                      full=RecomputeOption(act_mib=1, extra_ms=1, workspace_mib=10),
                      select=RecomputeOption(act_mib=7, extra_ms=0.1),
                      comm=RecomputeOption(act_mib=8, extra_ms=0.3, workspace_mib=2))
    moe = LayerKind(fwd_ms=3.0, bwd_ms=6.0, act_mib=20, static_mib=40,
                    full=RecomputeOption(act_mib=2, extra_ms=3, workspace_mib=20),
                    select=RecomputeOption(act_mib=15, extra_ms=0.2))
    return ModelProfile(kinds={"dense": dense, "moe": moe},
                        layer_kinds=[("dense", 3), ("moe", n - 5), ("dense", 2)],
                        head=EndPart(fwd_ms=0.5, bwd_ms=1, act_mib=1, static_mib=20),
                        tail=EndPart(fwd_ms=2, bwd_ms=4, act_mib=8, static_mib=30, workspace_mib=16),
                        stage_const_mib=100)


def _reference(pa: ProfileArrays, layers, rec, sel, com):
    """The per-(kind, class) count formulation: Σ counts × per-class values (einsum)."""
    cnt = class_counts(pa, layers, rec, sel, com).astype(float)  # K C B V P
    n_k = cnt.sum(axis=1)
    fwd = np.einsum("k,kbvp->bvp", pa.fwd_k, n_k)
    bwd = np.einsum("kc,kcbvp->bvp", pa.bwd_kc, cnt)
    act = np.einsum("kc,kcbvp->bvp", pa.act_kc, cnt)
    ws = np.max(np.where(cnt > 0, pa.ws_kc[:, :, None, None, None], 0.0), axis=(0, 1))
    static = np.einsum("k,kbvp->bp", pa.static_k, n_k) + pa.stage_const_mib
    return fwd, bwd, act, ws, static


def _random_batch(seed: int, V: int, P: int, B: int = 5, n: int = 24):
    """(profile arrays of :func:`_profile` (n layers), layers, rec, sel, com int [B, V, P]): random
    splits of the n layers and random recompute counts 0-4."""
    rng = np.random.default_rng(seed)
    pa = ProfileArrays.from_profile(_profile(n))
    cuts = np.sort(rng.integers(0, n + 1, (B, V * P - 1)), axis=1)
    layers = np.diff(np.concatenate([np.zeros((B, 1), int), cuts, np.full((B, 1), n)], axis=1),
                     axis=1).reshape(B, V, P)
    rec, sel, com = (rng.integers(0, 5, (B, V, P)) for _ in range(3))
    return pa, layers, rec, sel, com


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10**6), V=st.integers(1, 3), P=st.integers(1, 4))
def test_prefix_path_equals_count_formulation(seed, V, P):
    pa, layers, rec, sel, com = _random_batch(seed, V, P)
    got = stage_costs(pa, layers, rec, sel, com)
    fwd, bwd, act, ws, static = _reference(pa, layers, rec, sel, com)
    # head on (0, 0), tail on (V-1, P-1)
    h, t = pa.head, pa.tail
    fwd[:, 0, 0] += h[0]; fwd[:, -1, -1] += t[0]            # noqa: E702
    bwd[:, 0, 0] += h[1]; bwd[:, -1, -1] += t[1]            # noqa: E702
    act[:, 0, 0] += h[2]; act[:, -1, -1] += t[2]            # noqa: E702
    ws[:, 0, 0] = np.maximum(ws[:, 0, 0], h[4]); ws[:, -1, -1] = np.maximum(ws[:, -1, -1], t[4])  # noqa: E702
    static[:, 0] += h[3]; static[:, -1] += t[3]             # noqa: E702
    for a, b in ((got.fwd_ms, fwd), (got.bwd_ms, bwd), (got.act_mib, act), (got.ws_mib, ws),
                 (got.static_mib, static)):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-9)


def test_hand_values_one_mini_stage():
    # 4 dense layers, recompute 1 (full), select 3, comm 2 -> full x1, both x1 (pos 1), select x1
    # (pos 2), none x1 (pos 3): act = 1 + (7 + 8 - 10) + 7 + 10 = 23 MiB; bwd = (2+1) + (2+0.4)
    # + (2+0.1) + 2 = 9.5 ms ('both' = select + comm: act 7 + 8 - 10, extra 0.1 + 0.3);
    # workspace = max(full 10, both max(0, 2), select 0, none 0.5) = 10 MiB
    prof = ModelProfile(kinds={"dense": _profile(8).kinds["dense"]}, layer_kinds=[("dense", 4)])
    pa = ProfileArrays.from_profile(prof)
    one = lambda x: np.asarray([[[x]]])  # noqa: E731
    c = stage_costs(pa, one(4), one(1), one(3), one(2))
    assert c.act_mib[0, 0, 0] == pytest.approx(23.0)
    assert c.bwd_ms[0, 0, 0] == pytest.approx(9.5)
    assert c.fwd_ms[0, 0, 0] == pytest.approx(4.0)
    assert c.recompute_ms[0, 0, 0] == pytest.approx(1.5)
    assert c.ws_mib[0, 0, 0] == pytest.approx(10.0)
    assert pa.bwd_kc[0, FULL] == 3.0 and pa.act_kc[0, NONE] == 10.0


def test_bubble_fraction_zero_step_is_zero():
    # memory-only profile: every time is 0, so the step is 0 and there is no bubble (no 0/0).
    z = np.zeros((2, 1, 3))
    costs = StageCosts(z, z, z + 5.0, z, np.zeros((2, 3)), z)
    sim = simulate(compile_schedule("1f1b", 3, 1, 4), costs)
    assert np.array_equal(sim.step_ms, [0.0, 0.0])
    with np.errstate(all="raise"):
        assert np.array_equal(sim.bubble_fraction, [0.0, 0.0])
    # a real step keeps the formula 1 - Σ busy / (P·step): busy 6 of 3·4 = 12 -> 0.5
    r = SimResult(np.asarray([4.0, 0.0, np.nan]), np.asarray([[2.0, 2.0, 2.0]] * 3),
                  np.zeros((3, 3)), np.zeros((3, 3)))
    got = r.bubble_fraction
    assert got[0] == pytest.approx(0.5) and got[1] == 0.0 and np.isnan(got[2])


def test_bubble_fraction_rounding_below_zero_is_zero():
    """One stage: the step 0.3 ms and the busy time 0.1 + 0.2 ms summed in another order give
    1 - busy / step = -2.2e-16 (printed "-0.0%"): that is 0. A step 1 % shorter than the work
    (a broken simulation) keeps its -1 %; NaN stays NaN."""
    busy = np.asarray([[0.1 + 0.2], [0.3], [0.3]])
    r = SimResult(np.asarray([0.3, 0.3 * 0.99, np.nan]), busy, np.zeros((3, 1)), np.zeros((3, 1)))
    got = r.bubble_fraction
    assert 1.0 - busy[0, 0] / 0.3 < 0.0 and got[0] == 0.0 and f"{got[0]:.1%}" == "0.0%"
    assert got[1] == pytest.approx(1.0 - 1.0 / 0.99) and np.isnan(got[2])


@pytest.mark.parametrize("B, m", [(1, 8), (3, 8), (1030, 8), (300, 1024)])
def test_batched_chunks_match_scalar(B, m):
    # the batched path works in column chunks (BATCH_CHUNK; 256 for the 16,384 ops of m = 1024,
    # SIM_TABLE_CELLS, so 300 candidates end with a narrower chunk of 44); every candidate equals
    # its scalar run
    rng = np.random.default_rng(B)
    P, V = 4, 2
    f = rng.uniform(0.2, 3.0, (B, V, P))
    costs = StageCosts(f, 2 * f, f, np.zeros_like(f), np.zeros((B, P)), np.zeros_like(f))
    cs = compile_schedule("1f1b", P, V, m)
    batch = simulate(cs, costs, 0.1, method="waves")
    for b in (0, B // 2, B - 1):
        one = StageCosts(*(x[b:b + 1] for x in (costs.fwd_ms, costs.bwd_ms, costs.act_mib, costs.ws_mib,
                                                  costs.static_mib, costs.recompute_ms)))
        assert simulate(cs, one, 0.1, method="scalar").step_ms[0] == pytest.approx(batch.step_ms[b], abs=1e-9)


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10**6), V=st.integers(1, 3), P=st.integers(1, 4), v_shaped=st.booleans(),
       data=st.data())
def test_some_layout_stage_pairs_are_the_full_arrays_entries(seed, V, P, v_shaped, data):
    """``stage_costs(at=(rows, stages))`` (the greedy fit's over-budget stages) gives exactly the
    full arrays' ``[rows, :, stages]``, the head's and tail's stages included or not, with the
    default chunk-major or a V-shaped placement (zero_bubble_v: the tail on stage 0)."""
    pa, layers, rec, sel, com = _random_batch(seed, V, P)
    pos = None
    if v_shaped and V == 2:
        pos = np.stack([np.arange(P), 2 * P - 1 - np.arange(P)])  # chunk 1 runs back up the stages
    pairs = data.draw(st.lists(st.tuples(st.integers(0, layers.shape[0] - 1), st.integers(0, P - 1)), max_size=12))
    rows = np.asarray([r for r, _ in pairs], dtype=int)
    stg = np.asarray([p for _, p in pairs], dtype=int)
    full = stage_costs(pa, layers, rec, sel, com, pos=pos)
    part = stage_costs(pa, layers, rec, sel, com, pos=pos, at=(rows, stg))
    for name in ("fwd_ms", "bwd_ms", "act_mib", "ws_mib", "recompute_ms", "bwd_w_ms"):
        assert np.array_equal(getattr(part, name), getattr(full, name)[rows, :, stg][:, :, None])
    assert np.array_equal(part.static_mib, full.static_mib[rows, stg][:, None])
