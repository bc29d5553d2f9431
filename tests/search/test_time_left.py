"""The bound the clock cut, raised with the time a user's ``--timeout`` has left after the trials
stopped on their own (issue 17, "anytime and honest"): ``Tightened.unfinished`` names the V's a
deadline left short, ``raise_with_time_left`` runs the first pass's proofs again for them, and
``autotune.search`` uses the time up to the limit: half of it first for the answer
(``improve_with_time_left``: the local searches and kicks the clock cut, from the trials' answer),
then for the bound."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

import autotune
import autotune.tuner.search as search_mod
from autotune.tuner.bounds import BoundContext, WorkFloor, tighten, work_floor_ms
from autotune.tuner.bounds._base import BoundOutcome
from autotune.tuner.problem import Problem
from autotune.tuner.solve import BoundAndSeeds, _Only, raise_with_time_left
from tests.search.test_exact_bounds import syn2_problem
from tests.search.test_work_floor import _Slow, _two_v

ROOT = Path(__file__).resolve().parents[2]
TELECHAT = ROOT / "examples" / "telechat2_115b" / "train.yaml"


class _GivesUp(_Slow):
    """A proof that gives no proof (as the stage DP when its tables cannot end before the deadline)."""

    def bound(self, problem: Problem, V: int, ctx: BoundContext) -> BoundOutcome | None:
        self.calls.append(V)
        return None


def test_unfinished_names_the_vs_the_clock_left_short() -> None:
    problem = _two_v()
    # past the deadline: every V got the floor
    assert tighten(problem, (_Slow(),), ctx=BoundContext(deadline=0.0), floor=WorkFloor()).unfinished == {1, 2}
    # past the deadline, V 1 holds a proof: it is skipped, so short too
    assert tighten(problem, (_Slow(),), {1: 70.0, 2: 60.0}, ctx=BoundContext(deadline=0.0)).unfinished == {1, 2}
    # a proof that gave up under a deadline: short; the same without a deadline (a work cap) is not
    assert tighten(problem, (_GivesUp(), _Slow()), ctx=BoundContext(deadline=float("inf"))).unfinished == {1, 2}
    assert tighten(problem, (_GivesUp(), _Slow()), ctx=BoundContext()).unfinished == frozenset()
    # every proof ran to its end before the deadline: nothing short
    assert tighten(problem, (_Slow(),), ctx=BoundContext(deadline=float("inf"))).unfinished == frozenset()


def test_only_runs_the_proof_for_its_vs() -> None:
    problem, slow = _two_v(), _Slow()
    t = tighten(problem, (_Only(slow, frozenset({2})),), {1: 40.0, 2: 40.0})
    assert slow.calls == [2] and t.per_v_ms == {1: 40.0, 2: 100.0}


def test_raise_with_time_left_reruns_the_first_pass_for_the_short_vs() -> None:
    """SYN-2 (V = 1 only, cap 150): the first pass left V 1 with the work floor (76 ms); with time
    left, the path DP proves the published optimum 116 ms; with none left (or the gap target met)
    nothing changes."""
    problem = syn2_problem(150)
    floor = work_floor_ms(problem)
    assert floor == pytest.approx(76.0)
    cut = BoundAndSeeds([], floor, per_v_ms={1: floor}, unfinished=frozenset({1}))
    raised = raise_with_time_left(problem, cut, 116.0, deadline=time.monotonic() + 60)
    assert raised.bound_ms == pytest.approx(116.0, abs=1e-3) and raised.per_v_ms[1] == raised.bound_ms
    assert raise_with_time_left(problem, cut, 116.0, deadline=time.monotonic() - 1).bound_ms == floor
    assert raise_with_time_left(problem, cut, 76.2, deadline=time.monotonic() + 60, target_gap=0.005) is cut


def test_search_uses_the_time_left_after_a_cut_bound_phase(monkeypatch) -> None:
    """TeleChat2 with the bound phase's share cut to nothing (every V gets the work floor with
    whole layers): with
    the time the trials leave, the bound rises from the floor to within a few % of the answer; without
    that step it stays at the floor."""
    real = search_mod.prepare

    def no_time(cfg, subs, user, limit, t0, *args, **kw):
        return real(cfg, subs, user, 1e-6, t0, *args, **kw)

    monkeypatch.setattr(search_mod, "prepare", no_time)
    raised = autotune.search(TELECHAT, timeout=120, trials=20)
    monkeypatch.setattr(search_mod, "bounds_with_time_left", lambda prepared, *a: prepared)
    floored = autotune.search(TELECHAT, timeout=120, trials=20)
    # the work floor with whole layers, the least over V (each at least m·W/P = 5,175.55 ms: 96
    # layers on 8 devices, 12 each on average, but the LM head's device holds fewer)
    assert floored.lower_bound_ms == pytest.approx(5556.11, abs=0.01)
    assert min(floored.lower_bound_by_vpp.values()) == floored.lower_bound_ms
    assert all(b > 5175.55 for b in floored.lower_bound_by_vpp.values())
    assert raised.bound_phase_cut and raised.stopped_by == "timeout"
    assert raised.best.step_time_ms == pytest.approx(floored.best.step_time_ms)  # the same trials
    assert 6300 < raised.lower_bound_ms <= raised.best.step_time_ms
    assert raised.certified_gap < 0.03 < floored.certified_gap
    # the time left also went to a local search and kicks from the trials' answer, which found a
    # faster config (run as one more trial); without that step the answer is the trials' own
    monkeypatch.setattr(search_mod, "answer_with_time_left", lambda *a: False)
    plain = autotune.search(TELECHAT, timeout=120, trials=20)
    assert raised.time_left_faster and not plain.time_left_faster
    assert raised.best.step_time_ms < plain.best.step_time_ms - 1.0 and raised.trials == plain.trials + 1
    last = raised.study.best_trial
    assert last.user_attrs["origin"] == "local-polish" and last.value == pytest.approx(raised.best.step_time_ms)
    assert "With the time left, a local search and kicks from their answer found a faster config" in raised.stop_text()
    assert "found a faster config" not in plain.stop_text()


def test_improve_with_time_left_only_where_it_can_help() -> None:
    """Nothing to do on an enumerated space, without a bound, or with the gap target met; on SYN-2
    (V = 1, the bound phase's seeds empty) the local search V 1 never had goes from a slow
    fitting split (5, 3, 2, 2 layers: 152 ms) to the published optimum, 116 ms."""
    import numpy as np

    from autotune.tuner.fit import fitted
    from autotune.tuner.solve import improve_with_time_left

    problem = syn2_problem(150)
    start = fitted(problem, 1, np.array([[[5, 3, 2, 2]]]), "uneven")[0]
    assert start.step_ms == pytest.approx(152.0) and start.excess_mib <= 0
    far = time.monotonic() + 60
    assert improve_with_time_left(problem, BoundAndSeeds([], 116.0, exact=True), start, deadline=far) is None
    assert improve_with_time_left(problem, BoundAndSeeds([], 116.0), start, deadline=far) is None   # no per-V bound
    met = BoundAndSeeds([], start.step_ms, per_v_ms={1: start.step_ms})
    assert improve_with_time_left(problem, met, start, deadline=far, target_gap=0.005) is None
    open_gap = BoundAndSeeds([], 76.0, per_v_ms={1: 76.0})
    got = improve_with_time_left(problem, open_gap, start, deadline=far)
    assert got is not None and got.step_ms == pytest.approx(116.0) and got.excess_mib <= 0
    assert improve_with_time_left(problem, open_gap, start, deadline=time.monotonic() - 1) is None  # no time


def test_trials_leave_time_to_a_floored_bound(monkeypatch) -> None:
    """With a V left holding only the work floor, the trials get half of what the limit has left
    (so that the time after them can raise that bound); otherwise, and without a limit, the user's
    limit as it is."""
    monkeypatch.setattr(search_mod.time, "monotonic", lambda: 104.0)
    assert search_mod._trial_limit(10.0, 100.0, True) == pytest.approx(4.0 + 0.5 * 6.0)
    assert search_mod._trial_limit(10.0, 100.0, False) == 10.0
    assert search_mod._trial_limit(None, 100.0, True) is None
    assert search_mod._trial_limit(3.0, 100.0, True) == pytest.approx(4.0)  # past the limit: nothing more


def test_holds_floor_only_for_a_v_the_clock_left_with_it() -> None:
    problem = syn2_problem(150)
    floor = work_floor_ms(problem)
    pr = search_mod.Prepared(None, problem, BoundAndSeeds([], floor, per_v_ms={1: floor}, unfinished=frozenset({1})))
    assert search_mod._holds_floor(pr)
    # a proof at or below the floor that ran to its end (not left short by the clock) does not count
    done = search_mod.Prepared(None, problem, BoundAndSeeds([], floor, per_v_ms={1: floor}))
    assert not search_mod._holds_floor(done)
    raised = BoundAndSeeds([], 116.0, per_v_ms={1: 116.0}, unfinished=frozenset({1}))
    raised = search_mod.Prepared(None, problem, raised)
    assert not search_mod._holds_floor(raised)
