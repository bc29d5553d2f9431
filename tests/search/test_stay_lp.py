"""The stay LP (issue 17, a bound for every V in a fraction of a second): its value by hand, never
above the enumerated optimum, never below the work floor, and its use by the search when the clock
leaves a V short (``solve.stay_floors``, the time-left phase, ``search._holds_floor``)."""

from __future__ import annotations

import time
from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from autotune.cost.inputs import ProfileArrays
from autotune.profile.schema import ModelProfile
from autotune.tuner import search, solve
from autotune.tuner.bounds import BoundContext, StayLP, stay_lp_ms, work_floor_ms
from autotune.tuner.exact import exact_optimum
from autotune.tuner.problem import Problem
from tests.search.test_exact_bounds import _syn2_inline, scheduled_problem

#: HiGHS's proven value is its optimum less this relative margin (bounds._base.DUAL_SAFETY).
SAFETY = 1e-6


def _four_layers(P: int, m: int, hbm_mib: float = float("inf")) -> Problem:
    """4 layers of forward 1 ms, backward 2 ms, 10 MiB of activation per micro-batch (1 MiB with
    full recompute, which replays 1 ms), no static memory, head or tail."""
    prof = ModelProfile(kinds={"L": {"fwd_ms": 1.0, "bwd_ms": 2.0, "act_mib": 10.0, "static_mib": 0.0,
                                     "full": {"act_mib": 1.0, "extra_ms": 1.0}}},
                        layer_kinds=[("L", 4)])
    return Problem(ProfileArrays.from_profile(prof), P=P, m=m, hbm_mib=hbm_mib, kinds=("full",))


def test_one_stage_pays_the_fractional_recompute_the_budget_forces() -> None:
    """P 1, m 3: the step is the 3 micro-batches' 4 × 3 ms (36 ms) plus the replay. 1F1B on one
    stage keeps one micro-batch: 40 MiB against a 30 MiB budget, so 10 MiB must go; a fully
    recomputed layer frees 9 MiB for 1 ms a micro-batch, so the LP recomputes 10/9 of a layer:
    36 + 3 · 10/9 = 39.33 ms. Layers are whole in a layout: 2 recomputed, 42 ms, the optimum."""
    problem = _four_layers(P=1, m=3, hbm_mib=30.0)
    assert stay_lp_ms(problem, 1) == pytest.approx(36 + 3 * 10 / 9, rel=2 * SAFETY)
    assert exact_optimum(problem).best.step_ms == pytest.approx(42.0)


def test_two_stages_meet_at_the_1f1b_optimum() -> None:
    """P 2, m 4, no budget; x0 + x1 = 4 layers on the stages. Two of the stays (module docstring):
    stage 1 from its first op to its last, after stage 0's forward of micro-batch 0 and before its
    backward of micro-batch 3: x0 + 4 · 3 · x1 + 2 · x0 = 3·x0 + 12·x1 ms; stage 0 from its first
    backward (B0, after F0 on both stages and B0 on stage 1: x0 + x1 + 2·x1) to its last forward
    (B0 F2 B1 F3: 6·x0), then F3 and B3 on stage 1 and B3 on stage 0 (3·x1 + 2·x0): 9·x0 + 6·x1 ms.
    The first falls and the second rises with x0; they meet at x0 = 2: 30 ms, the 1F1B optimum
    (m + P − 1) · 3 · 2 ms."""
    problem = _four_layers(P=2, m=4)
    assert stay_lp_ms(problem, 1) == pytest.approx(30.0, rel=2 * SAFETY)
    assert exact_optimum(problem).best.step_ms == pytest.approx(30.0)


def test_syn2_lies_between_the_work_floor_and_the_optimum() -> None:
    """SYN-2 (12 layers on 4 stages, m 8) at caps 150 and 100: 105.23 and 109.37 ms, above the work
    floor's 76 and below the published optima 116 and 118."""
    for cap, value, best in ((150, 105.2274, 116.0), (100, 109.3652, 118.0)):
        problem = _syn2_inline(cap)
        got = stay_lp_ms(problem, 1)
        assert got == pytest.approx(value, abs=1e-3)
        assert exact_optimum(problem).best.step_ms == pytest.approx(best)
        assert work_floor_ms(problem) < got < best


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10_000), N=st.integers(4, 9), P=st.integers(2, 3),
       sched=st.sampled_from([("1f1b", 1, 1), ("1f1b", 2, 1), ("gpipe", 1, 1), ("seqpipe", 1, 2),
                              ("zero_bubble_v", 2, 1)]),
       tight=st.floats(0.6, 1.5), static_delta=st.booleans())
def test_never_above_the_enumerated_optimum(seed, N, P, sched, tight, static_delta) -> None:
    """Any schedule (split backward and V-shaped ones too), V, seq_split_num, two layer kinds,
    static deltas: the stay LP is at most the best fitting layout's step, and at least the work
    floor (its stays include each device's whole program)."""
    drawn = scheduled_problem(seed, N, P, sched, tight, static_delta, stay_lp_ms)
    if drawn is None:
        return  # the schedule cannot run these sizes
    problem, _, value = drawn
    best = exact_optimum(problem).best
    if best is not None:
        assert value is not None and value <= best.step_ms * (1 + 1e-9)
    if value is not None:
        assert value >= work_floor_ms(problem) * (1 - 2 * SAFETY)


def test_as_a_lower_bound_it_keeps_a_better_value() -> None:
    """``StayLP.bound`` proves the LP value, or the V's bound so far when that is higher."""
    problem = _syn2_inline(150)
    assert StayLP().bound(problem, 1, BoundContext()).bound_ms == pytest.approx(105.2274, abs=1e-3)
    assert StayLP().bound(problem, 1, BoundContext(lower_ms=110.0)).bound_ms == 110.0


def test_stay_floors_raise_the_short_vs_while_the_clock_lets_them() -> None:
    """Only the V's left short run it; none past the deadline; the floor a V now holds is the
    larger of the work floor and the LP."""
    prof = ModelProfile(kinds={"L": {"fwd_ms": 1.0, "bwd_ms": 2.0, "act_mib": 10.0, "static_mib": 1.0,
                                     "full": {"act_mib": 1.0, "extra_ms": 1.0}}},
                        layer_kinds=[("L", 8)])
    problem = Problem(ProfileArrays.from_profile(prof), P=2, m=4, hbm_mib=60.0, vpp_candidates=[1, 2],
                      kinds=("full",))
    floor = work_floor_ms(problem)
    per_v = {1: 200.0, 2: floor}
    raised, floors = solve.stay_floors(problem, frozenset({2}), per_v, deadline=None)
    assert raised[1] == 200.0 and set(floors) == {2}
    assert raised[2] == pytest.approx(stay_lp_ms(problem, 2)) and raised[2] > floor
    assert floors[2] == raised[2]
    assert solve.stay_floors(problem, frozenset({1, 2}), per_v, deadline=time.monotonic() - 1) == (per_v, {})


def test_stay_floors_take_the_least_bound_first(monkeypatch) -> None:
    """The V with the least bound sets the certified gap, so it runs first (in ascending V, a
    ``--timeout 3`` on the TeleChat2 example raised vpp 3 and left vpp 4 at the work floor); once
    that V cannot run before the deadline, none after it runs."""
    problem = _syn2_inline(150)
    calls: list[int] = []

    def fake(problem, V, deadline=None):
        calls.append(V)
        return 100.0 + V

    monkeypatch.setattr(solve, "stay_lp_ms", fake)
    per_v = {1: 90.0, 2: 80.0, 3: 95.0, 4: 70.0}
    raised, floors = solve.stay_floors(problem, frozenset({1, 2, 3, 4}), per_v, deadline=None)
    assert calls == [4, 2, 1, 3]
    assert raised == {1: 101.0, 2: 102.0, 3: 103.0, 4: 104.0} and set(floors) == {1, 2, 3, 4}
    calls.clear()
    monkeypatch.setattr(solve, "STAY_LP_S_PER_CELL", 1e6)  # no LP can end before a deadline 1 h away
    assert solve.stay_floors(problem, frozenset({1, 4}), per_v, deadline=time.monotonic() + 3600) == (per_v, {})
    assert calls == []


def test_stay_floors_estimate_from_the_rate_a_run_showed(monkeypatch) -> None:
    """Before any LP of the call has run, a V's cost is (P · V)² × STAY_LP_S_PER_CELL; after one,
    the rate that run showed (s per (P · V)², × STAY_LP_RATE_MARGIN) replaces it, whichever way
    it moves: a faster host than the constant's runs the next V, a slower one stops before it.
    A fake clock: each fake LP advances it by (P · V)² × ``per_cell``."""
    problem = _syn2_inline(150)
    cells = {V: float(problem.P * V) ** 2 for V in (1, 2, 3, 4)}
    clock = {"now": 0.0}
    monkeypatch.setattr(solve.time, "monotonic", lambda: clock["now"])
    calls: list[int] = []

    def run(per_cell: float, deadline: float) -> list[int]:
        def fake(problem, V, deadline=None):
            calls.append(V)
            clock["now"] += cells[V] * per_cell
            return 100.0 + V
        monkeypatch.setattr(solve, "stay_lp_ms", fake)
        clock["now"], calls[:] = 0.0, []
        solve.stay_floors(problem, frozenset({1, 2}), {1: 80.0, 2: 90.0}, deadline=deadline)
        return list(calls)

    prior = solve.STAY_LP_S_PER_CELL
    # V 2's prior estimate alone passes the deadline; V 1 ran at a tenth of the prior: V 2 runs
    d = cells[1] * prior + 0.5 * cells[2] * prior
    assert cells[1] * prior + cells[2] * prior > d
    assert run(0.1 * prior, d) == [1, 2]
    # V 1 ran at three times the prior: V 2 (prior estimate within the deadline) does not
    d = 3 * cells[1] * prior + 1.1 * cells[2] * prior
    assert run(3 * prior, d) == [1]
    # the margin: at exactly the rate shown, V 2 is left out unless the margin fits too
    d = cells[1] * prior + cells[2] * prior * (solve.STAY_LP_RATE_MARGIN - 0.01)
    assert run(prior, d) == [1]


def test_a_v_holding_the_stay_lp_still_holds_only_a_floor() -> None:
    """``search._holds_floor``: a V the clock left short whose bound is its stay-LP floor counts as
    floored (the trials then leave time to raise it); once a proof raised it, or when the V
    finished, it does not."""
    problem = _syn2_inline(150)
    floor = work_floor_ms(problem)

    def prepared(per_v, unfinished, floor_ms):
        bs = solve.BoundAndSeeds([], min(per_v.values()), per_v_ms=per_v, unfinished=frozenset(unfinished),
                                 floor_ms=floor_ms)
        return SimpleNamespace(problem=problem, bs=bs)

    assert search._holds_floor(prepared({1: 105.0}, {1}, {1: 105.0}))
    assert search._holds_floor(prepared({1: floor}, {1}, {}))
    assert not search._holds_floor(prepared({1: 110.0}, {1}, {1: 105.0}))
    assert not search._holds_floor(prepared({1: 105.0}, set(), {1: 105.0}))


def test_the_time_left_runs_it_for_the_short_vs_without_one() -> None:
    """``raise_with_time_left``: a V left short with only the work floor gets the stay LP first
    (then the first pass's proofs); its floor is recorded."""
    problem = _syn2_inline(150)
    floor = work_floor_ms(problem)
    bs = solve.BoundAndSeeds([], floor, per_v_ms={1: floor}, unfinished=frozenset({1}))
    out = solve.raise_with_time_left(problem, bs, 116.0, deadline=time.monotonic() + 30)
    assert out.floor_ms == {1: pytest.approx(stay_lp_ms(problem, 1))}
    assert out.bound_ms >= out.floor_ms[1] - 1e-9
    assert np.isfinite(out.bound_ms) and out.bound_ms <= 116.0 + 1e-9
