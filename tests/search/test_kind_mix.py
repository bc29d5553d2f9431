"""The layer kinds' least sums (autotune.tuner.bounds._relax.KindMix) and what they give the stage
DP: DeepSeek-V3's static memory by hand, least(n) <= the sum of any n of the model's layers
(hypothesis), and the typed stage DP is never below the one with the cheapest layer everywhere
and never above the enumerated optimum (that second half is test_stage_dp's); the integer
program's kind windows and typed recompute classes by value."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from autotune.tuner.bounds import _relax
from autotune.tuner.bounds._relax import KindMix
from autotune.tuner.bounds.stage_dp import stage_dp_bound
from tests.search.test_stage_dp import VPP_CASES, small_vpp_problem

#: DeepSeek-V3's layers as benchmarks/data/deepseek3_671b_profile.yaml has them, cut to 8 layers:
#: 3 dense (939.06 MiB static each) then 5 MoE (4,407.01 MiB).
DSV3 = KindMix(counts=np.array([3, 5]), fwd_ms=np.array([9.7035, 9.7302]), bwd_ms=np.array([19.4071, 19.4604]),
               static_mib=np.array([939.06, 4407.01]))


def test_least_static_by_hand() -> None:
    """n dense first, then MoE: 0, 2 × 939.06, 3 × 939.06, 3 × 939.06 + 4,407.01, all 8."""
    got = DSV3.static(np.array([0, 2, 3, 4, 8]))
    want = [0.0, 1878.12, 2817.18, 2817.18 + 4407.01, 2817.18 + 5 * 4407.01]
    assert got == pytest.approx(want)
    # the relaxed layer's n × cheapest says 8 × 939.06 = 7,512.5 MiB for all 8: 16,340 MiB short
    assert float(DSV3.static(8)) - 8 * 939.06 == pytest.approx(5 * (4407.01 - 939.06))


def test_least_sums_take_the_cheapest_kind_per_quantity() -> None:
    """Each quantity sorts the kinds by itself: kind 1 is the cheaper forward, kind 0 the cheaper
    backward and static."""
    mix = KindMix(np.array([2, 2]), fwd_ms=np.array([3.0, 1.0]), bwd_ms=np.array([1.0, 5.0]),
                  static_mib=np.array([10.0, 20.0]))
    assert mix.fwd(np.array([1, 3])) == pytest.approx([1.0, 1.0 + 1.0 + 3.0])
    two_d = mix.bwd(np.array([[1, 3]]))  # shape kept: [1, 2]
    assert two_d.shape == (1, 2) and two_d[0] == pytest.approx([1.0, 1.0 + 1.0 + 5.0])
    assert mix.static(np.array(4)) == pytest.approx(60.0)


@settings(max_examples=60, deadline=None)
@given(counts=st.lists(st.integers(0, 6), min_size=1, max_size=4),
       seed=st.integers(0, 10_000))
def test_least_is_below_every_subset(counts, seed) -> None:
    """For random kinds and any n of the model's layers drawn at random, the sum of their values
    is >= least(n), with equality for some draw (the greedy one)."""
    rng = np.random.default_rng(seed)
    counts = np.array(counts)
    vals = rng.uniform(-5, 50, counts.size)
    layers = np.repeat(vals, counts)  # the model's layers' values
    N = layers.size
    for n in range(N + 1):
        lo = float(KindMix.least(vals, counts, np.array(n)))
        for _ in range(5):
            pick = rng.choice(N, size=n, replace=False)
            assert layers[pick].sum() >= lo - 1e-9
        assert np.sort(layers)[:n].sum() == pytest.approx(lo)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(**VPP_CASES)
def test_typed_stage_dp_is_not_below_the_cheapest_layer_one(seed, N, P, V, kinds, tight, sched, sdelta) -> None:
    """The stage DP with the kinds' least sums >= the same DP with every layer the cheapest kind
    (the relaxed layer's forward, backward and static put in a one-kind mix)."""
    problem, V = small_vpp_problem(seed, N, P, V, kinds, tight, sched, sdelta)
    typed = stage_dp_bound(problem, V)
    real = _relax.integer_setup

    def cheapest(pb, v):
        su = real(pb, v)
        if su is None:
            return None
        lay = su.layer
        one = KindMix(np.array([pb.N]), np.array([lay.fwd_ms]), np.array([lay.bwd_ms]), np.array([lay.static_mib]))
        return dataclasses.replace(su, mix=one)

    import autotune.tuner.bounds.stage_dp as sdp
    sdp.integer_setup = cheapest
    try:
        plain = stage_dp_bound(problem, V)
    finally:
        sdp.integer_setup = real
    if typed is None or plain is None:
        assert typed is None and plain is None
        return
    assert typed.bound_ms >= plain.bound_ms * (1 - 2e-4)  # both bisect to a relative 1e-4


def test_kind_windows_of_a_dense_first_model_by_hand() -> None:
    """benchmarks/scaling.py's P4 V3 m8 L32 MoE problem: 3 dense layers first, then 29 MoE; every
    mini-stage holds >= 1 layer but (0, 0) and the last. Mini-stage j (layer order) starts at
    position >= j - 1, so the dense layers it can hold are 3, 3, 2, 1, then none."""
    from benchmarks.scaling import build
    from autotune.tuner.bounds._relax import kind_windows

    static, counts, window = kind_windows(build(4, 3, 8, 32, "moe", "tight"), 3)
    assert counts.tolist() == [3, 29] and static[0] < static[1]
    assert window[:, 0].tolist() == [3, 3, 2, 1] + [0] * 8
    assert window[:5, 1].tolist() == [19, 20, 21, 22, 23]  # ends: 32 minus the others' minimum layers


def test_typed_integer_program_raises_the_moe_bound() -> None:
    """Same problem: with each mini-stage's layers split by kind (the model's 3 dense layers in all,
    each mini-stage within its window) the integer program proved 3,102.8 ms where the cheapest
    layer everywhere gave 2,826.9 (and the device DP 2,845.6). With each kind's own recompute
    classes (replay, activation, static change per kind, not the cheapest kind's: the MoE layer's
    full recompute replays 28.19 ms, the dense one's 20.64; its static change is -783.09 MiB, the
    dense one's -278.22) it converges at 3,142.0 ms, and with whole layers of each kind it proves
    3,155.6. The search's answer is 3,241.8 ms, so the certified gap goes from 13.9 % to 4.5 % to
    2.7 %."""
    from benchmarks.scaling import build
    from autotune.tuner.bounds.milp import milp_bound

    b = milp_bound(build(4, 3, 8, 32, "moe", "tight"), 3, upper_ms=3241.8)
    assert 3150.0 <= b.bound_ms <= 3241.8


def test_typed_integer_program_nears_the_enumerated_moe_optimum() -> None:
    """scaling.py's MoE profile cut to 24 layers (3 dense, 21 MoE, the MTP tail), pp 4 × vpp 2,
    m 16, tight budget: exact enumeration (480,700 splits, 18 CPU s, not run here) finds 4,761.72
    ms. The integer program proved 4,546.1 ms with the cheapest kind's recompute on every layer,
    4,655.2 with each kind's own (fractional kind counts) and now converges at 4,727.7 with whole
    layers of each kind: 0.72 % under the optimum."""
    from benchmarks.scaling import build
    from autotune.tuner.bounds.milp import milp_bound

    b = milp_bound(build(4, 2, 16, 24, "moe", "tight"), 2, upper_ms=4761.72)
    assert b.converged
    assert 4720.0 <= b.bound_ms <= 4761.72


@pytest.mark.parametrize("hbm, typed_at_least, old, optimum", [(450.0, 81.7, 75.21, 90.0), (500.0, 75.1, 72.01, 83.0)])
def test_typed_classes_price_each_kinds_replay(hbm, typed_at_least, old, optimum) -> None:
    """Two kinds alike in everything but full recompute's replay (1 ms for the 2 dense layers, 3 ms
    for the 8 MoE ones; same static MiB, so the static windows alone would not tell them apart):
    pp 2 × vpp 2, m 4, full recompute only. The enumerated optimum runs 90.0 ms at 450 MiB and
    83.0 ms at 500. The integer program with the cheapest kind's replay on every layer proved
    75.21 and 72.01 ms; with each kind's own replay it proves 81.75 and 75.15, and it is still a
    bound."""
    from autotune.cost.inputs import ProfileArrays
    from autotune.profile.schema import ModelProfile
    from autotune.tuner.bounds.milp import milp_bound
    from autotune.tuner.exact import exact_optimum
    from autotune.tuner.problem import Problem

    def kind(extra_ms: float) -> dict:
        return {"fwd_ms": 1.0, "bwd_ms": 2.0, "act_mib": 40.0, "static_mib": 50.0,
                "full": {"act_mib": 2.0, "extra_ms": extra_ms}}

    prof = ModelProfile(kinds={"dense": kind(1.0), "moe": kind(3.0)}, layer_kinds=[("dense", 2), ("moe", 8)],
                        p2p_ms=0.0)
    problem = Problem(ProfileArrays.from_profile(prof), P=2, m=4, hbm_mib=hbm, vpp_candidates=[2], kinds=("full",))
    assert exact_optimum(problem).best.step_ms == pytest.approx(optimum)
    b = milp_bound(problem, 2)
    assert b.converged
    assert old + 3.0 < typed_at_least <= b.bound_ms <= optimum


def test_stage_static_holds_the_dense_layers_only_where_they_sit() -> None:
    """scaling.py's P16 V2 m64 L128 MoE tight problem (DeepSeek-V3's 3 dense layers of 939.06 MiB
    static first, 125 MoE layers of 4,407.01 MiB; chunk 0 of stages 1-15 and chunk 1 of every
    stage hold at least one layer): stage 0 with (1, 7) layers can hold one dense layer (its
    chunk 0 has one), 939.06 + 7 × 4,407.01 = 31,788.12 MiB; stage 1 with (4, 4) the three,
    3 × 939.06 + 5 × 4,407.01 = 24,852.22 (stage 0's chunk 0 may be empty: the window allows
    3); stage 5 none, 8 × 4,407.01 = 35,256.08 (the kinds' least sums alone gave
    24,852.22 to every stage). The stage DP, the answer 22,467.4 ms as the incumbent, rises from
    19,823.5 to 21,463.6 ms, still below the answer."""
    from autotune.tuner.bounds._relax import integer_setup
    from autotune.tuner.bounds.stage_dp import layer_static
    from benchmarks.scaling import build

    problem = build(16, 2, 64, 128, "moe", "tight")
    su = integer_setup(problem, 2)
    nv = np.array([[1, 7], [4, 4]])
    dense, moe = 939.0565185546875, 4407.0096435546875
    assert layer_static(problem, su, 0, nv) == pytest.approx([dense + 7 * moe, 3 * dense + 5 * moe])
    assert layer_static(problem, su, 1, nv)[1] == pytest.approx(3 * dense + 5 * moe)
    assert layer_static(problem, su, 5, nv) == pytest.approx([8 * moe, 8 * moe])
    got = stage_dp_bound(problem, 2, upper_ms=22467.4)
    assert got is not None and got.bound_ms == pytest.approx(21463.6, abs=1.0) and got.bound_ms <= 22467.4
