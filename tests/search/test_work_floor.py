"""The work floor (m · W / P, the busiest device's share of the work) and its use by ``tighten``:
past a pass's deadline a V without a proof gets the floor instead of a first proof that would run
on past the user's ``--timeout`` (issue 17, "``--timeout S`` is respected")."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from autotune.cost.inputs import ProfileArrays
from autotune.profile.schema import ModelProfile
from autotune.tuner.bounds import BoundContext, WorkFloor, tighten, work_floor_ms
from autotune.tuner.bounds._base import BoundOutcome
from autotune.tuner.exact import exact_optimum
from autotune.tuner.problem import Problem
from tests.search.test_exact_bounds import _random_problem, _syn2_inline


def test_work_floor_by_hand() -> None:
    """SYN-2: 12 layers of f 1 + b 2 ms, tail 2/3 + 4/3 ms, no head time: W = 38 ms per
    micro-batch, m 8 on 4 stages: 76 ms, below the published optimum 116 ms (cap 150)."""
    assert work_floor_ms(_syn2_inline(150)) == pytest.approx(76.0)
    assert exact_optimum(_syn2_inline(150)).best.step_ms == pytest.approx(116.0)


def test_work_floor_counts_the_head_and_not_the_replay() -> None:
    """Head 1 + 2 ms, 4 layers of 1 + 2 ms whose full recompute replays 1 ms (not counted: the
    budget may need no recompute): W = 3 + 4·3 = 15 ms, m 4 on 2 stages: 30 ms."""
    prof = ModelProfile(kinds={"L": {"fwd_ms": 1.0, "bwd_ms": 2.0, "act_mib": 1.0, "static_mib": 1.0,
                                     "full": {"act_mib": 0.5, "extra_ms": 1.0}}},
                        layer_kinds=[("L", 4)], head={"fwd_ms": 1.0, "bwd_ms": 2.0})
    problem = Problem(ProfileArrays.from_profile(prof), P=2, m=4, kinds=("full",))
    assert work_floor_ms(problem) == pytest.approx(30.0)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10_000), N=st.integers(4, 9), P=st.integers(2, 3),
       sched=st.sampled_from([("1f1b", 1, 1), ("1f1b", 2, 1), ("gpipe", 1, 1), ("seqpipe", 1, 2)]),
       tight=st.floats(0.6, 1.5))
def test_work_floor_never_exceeds_the_enumerated_optimum(seed, N, P, sched, tight) -> None:
    """Any schedule, V and seq_split_num: the floor is at most the best fitting layout's step."""
    schedule, V, split = sched
    if P * V > N:
        V = 1
    try:
        problem = _random_problem(seed, N, P, V, ("full", "select", "comm"), tight, schedule=schedule, split=split)
    except ValueError:
        return  # the schedule cannot run these sizes
    best = exact_optimum(problem).best
    if best is not None:
        assert work_floor_ms(problem) <= best.step_ms * (1 + 1e-12)


class _Slow:
    """A proof that records its calls and proves 100 ms."""

    name = "slow"

    def __init__(self) -> None:
        self.calls: list[int] = []

    def applies(self, problem: Problem, V: int) -> bool:
        return True

    def bound(self, problem: Problem, V: int, ctx: BoundContext) -> BoundOutcome:
        self.calls.append(V)
        return BoundOutcome(100.0)


def _two_v() -> Problem:
    prof = ModelProfile(kinds={"L": {"fwd_ms": 1.0, "bwd_ms": 2.0, "act_mib": 1.0, "static_mib": 1.0}},
                        layer_kinds=[("L", 8)])
    return Problem(ProfileArrays.from_profile(prof), P=2, m=4, vpp_candidates=[1, 2], kinds=("full",))


def test_past_the_deadline_a_v_without_a_proof_gets_the_floor() -> None:
    """Deadline already past: with a floor no proof runs and every V holds m·W/P = 4·24/2 = 48 ms;
    without one (the old rule) each V's first proof runs anyway; before the deadline the proofs
    run and the floor is never used."""
    problem, slow = _two_v(), _Slow()
    late = BoundContext(deadline=0.0)
    t = tighten(problem, (slow,), ctx=late, floor=WorkFloor())
    assert slow.calls == [] and dict(t.per_v_ms) == {1: pytest.approx(48.0), 2: pytest.approx(48.0)}
    assert tighten(problem, (slow,), ctx=late).per_v_ms == {1: 100.0, 2: 100.0} and slow.calls == [1, 2]
    slow.calls.clear()
    t = tighten(problem, (slow,), ctx=BoundContext(deadline=float(np.inf)), floor=WorkFloor())
    assert t.per_v_ms == {1: 100.0, 2: 100.0} and slow.calls == [1, 2]
    # a V that already holds a proof keeps it past the deadline; only the V without one gets the floor
    t = tighten(problem, (slow,), {1: 70.0}, ctx=late, floor=WorkFloor())
    assert dict(t.per_v_ms) == {1: 70.0, 2: pytest.approx(48.0)}


class _Cut:
    """A proof the clock cut (``BoundOutcome.cut``) that proves ``value`` ms."""

    name = "cut"

    def __init__(self, value: float) -> None:
        self.value = value

    def applies(self, problem: Problem, V: int) -> bool:
        return True

    def bound(self, problem: Problem, V: int, ctx: BoundContext) -> BoundOutcome:
        return BoundOutcome(self.value, cut=True)


def test_a_cut_proof_leaves_the_v_short_and_at_least_at_the_floor() -> None:
    """A proof that says the clock cut it leaves its V short (the time left may run it again); with
    a floor the V then holds at least the floor (48 ms here: 4 layers of 3 ms on each device, m 4),
    a cut proof above it keeps its own value; without a floor the cut value stands."""
    problem = _two_v()
    ctx = BoundContext(deadline=float(np.inf))
    t = tighten(problem, (_Cut(10.0),), ctx=ctx, floor=WorkFloor())
    assert t.unfinished == {1, 2} and dict(t.per_v_ms) == {1: pytest.approx(48.0), 2: pytest.approx(48.0)}
    t = tighten(problem, (_Cut(70.0),), ctx=ctx, floor=WorkFloor())
    assert t.unfinished == {1, 2} and dict(t.per_v_ms) == {1: 70.0, 2: 70.0}
    t = tighten(problem, (_Cut(10.0),), ctx=ctx)
    assert t.unfinished == {1, 2} and dict(t.per_v_ms) == {1: 10.0, 2: 10.0}


def test_the_floor_runs_once_for_a_v_it_was_given_to() -> None:
    """Past the deadline each V gets the floor once (the floor at the end of ``tighten`` is only
    for the V's a cut proof left short: at pp 64 × m 512 a second round cost ~0.1 s)."""
    calls: list[int] = []

    class Counting(WorkFloor):
        def bound(self, problem: Problem, V: int, ctx: BoundContext) -> BoundOutcome:
            calls.append(V)
            return super().bound(problem, V, ctx)

    problem = _two_v()
    t = tighten(problem, (_Slow(),), ctx=BoundContext(deadline=0.0), floor=Counting())
    assert sorted(calls) == [1, 2] and t.unfinished == {1, 2}
    calls.clear()
    tighten(problem, (_Cut(10.0),), ctx=BoundContext(deadline=float(np.inf)), floor=Counting())
    assert sorted(calls) == [1, 2]
