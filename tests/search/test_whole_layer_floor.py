"""The work floor with whole layers (``bounds.work_floor.whole_layer_floor_ms``): what a V holds
when the clock gives it no proof. By hand on two stages, never above the enumerated optimum on
random problems of every schedule shape, and where it runs in the search (``floor_ms``)."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from autotune.cost.inputs import ProfileArrays
from autotune.profile.schema import ModelProfile
from autotune.tuner.bounds import BoundContext, work_floor_ms
from autotune.tuner.bounds.work_floor import WorkFloor, floor_ms, whole_layer_floor_ms
from autotune.tuner.exact import exact_optimum
from autotune.tuner.problem import Problem
from tests.search.test_exact_bounds import scheduled_problem


def _two_stages(p2p: float = 0.0, head_fwd: float = 0.0) -> Problem:
    """3 layers (forward 1 ms, backward 2 ms) on pp 2, m 2, an LM head of 2 + 4 ms on the last
    stage, no memory limit."""
    prof = ModelProfile(kinds={"L": {"fwd_ms": 1.0, "bwd_ms": 2.0, "act_mib": 1.0, "static_mib": 1.0}},
                        layer_kinds=[("L", 3)], head={"fwd_ms": head_fwd, "bwd_ms": 0.0},
                        tail={"fwd_ms": 2.0, "bwd_ms": 4.0}, p2p_ms=p2p)
    return Problem(ProfileArrays.from_profile(prof), P=2, m=2, vpp_candidates=[1], kinds=())


def test_two_stages_by_hand() -> None:
    """The work floor is m · (3 · 3 + 6) / 2 = 15 ms. With whole layers: stage 0 runs 6 ms a layer
    (two micro-batches), stage 1 the head's 12 ms plus 6 a layer; 3 layers fit first at 18 ms (stage
    0 three layers, or stage 1 one and stage 0 three: 12 + 6 = 18). The chains: stage 1's first
    forward waits for stage 0's, which may hold no layer (0 ms) but the embedding's forward (0.5 ms
    here) and p2p; its last backward is followed by stage 0's (0 ms) and p2p. So 18 ms, 18 + 0.5 +
    2 · 0.25 = 19 ms with them. The fastest layout runs 21 ms."""
    plain = _two_stages()
    assert work_floor_ms(plain) == pytest.approx(15.0)
    assert whole_layer_floor_ms(plain, 1) == pytest.approx(18.0)
    chained = _two_stages(p2p=0.25, head_fwd=0.5)
    assert whole_layer_floor_ms(chained, 1) == pytest.approx(19.0)
    assert exact_optimum(plain).best.step_ms == pytest.approx(21.0)
    assert exact_optimum(chained).best.step_ms >= 19.0


def test_floor_is_the_work_floor_with_whole_layers_and_what_workfloor_proves() -> None:
    """``floor_ms`` (what a V without a proof holds) is the whole-layer floor, and WorkFloor proves
    it; at least the work floor."""
    problem = _two_stages()
    assert floor_ms(problem, 1) == whole_layer_floor_ms(problem, 1) >= work_floor_ms(problem)
    assert WorkFloor().bound(problem, 1, BoundContext()).bound_ms == pytest.approx(18.0)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10_000), N=st.integers(4, 9), P=st.integers(2, 3),
       sched=st.sampled_from([("1f1b", 1, 1), ("1f1b", 2, 1), ("1f1b", 3, 1), ("gpipe", 1, 1),
                              ("seqpipe", 1, 2), ("zero_bubble_v", 2, 1), ("1f1b_less_memory", 2, 1)]),
       tight=st.sampled_from([0.8, 1.0, 1.3, 1e6]), static_delta=st.booleans())
def test_never_above_the_enumerated_optimum(seed, N, P, sched, tight, static_delta) -> None:
    """Any schedule (split backward and V-shaped ones too), V, seq_split_num, two layer kinds: the
    floor is at most the fastest fitting layout's step (with no memory limit, tight 1e6: the
    fastest layout of all, which the floor, blind to memory, is closest to), and at least the
    work floor."""
    drawn = scheduled_problem(seed, N, P, sched, tight, static_delta, whole_layer_floor_ms)
    if drawn is None:
        return  # the schedule cannot run these sizes
    problem, _, value = drawn
    assert value >= work_floor_ms(problem) * (1 - 1e-12)
    best = exact_optimum(problem).best
    if best is not None:
        assert value <= best.step_ms * (1 + 1e-9)


def test_deep_pipeline_by_hand() -> None:
    """256 layers (3 ms a micro-batch) on pp 64 × vpp 2 × m 512, embedding 0.5 + 1 ms on device 0,
    LM head 1.5 + 3 ms on device 63; one layer at least in every mini-stage but the first and the
    last. The work floor: 512 · (256 · 3 + 6) / 64 = 6,192 ms. Whole layers, 1,536 ms a layer on a
    device, plus per device the fixed ms: device 0 the embedding's 768; device d = 1 .. 62 its
    chains, 3 (d − 1) + 1.5 (micro-batch 0's forwards at positions 0 .. d − 1, one layer each but
    position 0's embedding, and the last micro-batch's backwards back down); device 63 the same
    187.5 + the LM head's 2,304. At 7,099.5 (device 63 at 3 layers) the devices hold 4 · 62 + 4 +
    3 = 255 < 256; at 7,681.5 device 1 takes a fifth: 256. So 7,681.5 ms, 24 % above the work
    floor."""
    prof = ModelProfile(kinds={"L": {"fwd_ms": 1.0, "bwd_ms": 2.0, "act_mib": 1.0, "static_mib": 1.0}},
                        layer_kinds=[("L", 256)], head={"fwd_ms": 0.5, "bwd_ms": 1.0},
                        tail={"fwd_ms": 1.5, "bwd_ms": 3.0})
    problem = Problem(ProfileArrays.from_profile(prof), P=64, m=512, vpp_candidates=[2], kinds=())
    assert work_floor_ms(problem) == pytest.approx(6192.0)
    assert whole_layer_floor_ms(problem, 2) == pytest.approx(7681.5, rel=1e-9)


def test_least_op_ms_of_a_split_backward_per_kind() -> None:
    """Kind a: backward 2 ms of which W 10 % (B 1.8, W 0.2); kind b: backward 4 ms of which W
    87.5 % (B 0.5, W 3.5). The least B is b's 0.5 ms, not the least backward less the least W
    (2 − 0.2 = 1.8, above b's B: a chain of b layers would be overpriced); the least W 0.2; the
    forward 1 ms. Without the split: F 1, the whole backward 2, W 0."""
    from autotune.tuner.bounds.work_floor import least_op_ms

    mem = {"act_mib": 1.0, "static_mib": 1.0}
    prof = ModelProfile(kinds={"a": {"fwd_ms": 1.0, "bwd_ms": 2.0, "bwd_w_frac": 0.1, **mem},
                               "b": {"fwd_ms": 1.5, "bwd_ms": 4.0, "bwd_w_frac": 0.875, **mem}},
                        layer_kinds=[("a", 2), ("b", 4)])
    problem = Problem(ProfileArrays.from_profile(prof), P=2, m=2, vpp_candidates=[2], kinds=(),
                      schedule="zero_bubble_v")
    assert least_op_ms(problem, True) == pytest.approx([1.0, 0.5, 0.2])
    assert least_op_ms(problem, False) == pytest.approx([1.0, 2.0, 0.0])
