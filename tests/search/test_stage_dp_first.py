"""The first bound pass under a short ``--timeout`` (issue 17, "anytime and honest"): on a model of
one layer kind the stage DP runs before the Lagrangian, with the anytime pass's share of the
time and without seeding the local search (``BoundOnly``), and the Lagrangian only for a V the
stage DP left without a proof, to its own 30 % share;
on a model of several kinds, and without a short timeout, the registry's order (Lagrangian, then
stage DP) stays. The stage DP's tables give up as soon as their rate shows they cannot end before
the deadline (``cannot_finish``).

What the order gains is measured on scaling.py's large dense rows (docs/search.md); here: which
proof runs when, with which deadline, and that the bound is still a bound."""

from __future__ import annotations

import time

import numpy as np
import pytest

import autotune.tuner.bounds.stage_dp as stage_dp
import autotune.tuner.solve as solve
from autotune.cost.inputs import ProfileArrays
from autotune.profile.schema import ModelProfile
from autotune.tuner.bounds import BoundContext, BoundOnly, Lagrangian, SplitLP, StageDP, Unproven, Until, several_kinds
from autotune.tuner.bounds._base import BoundOutcome
from autotune.tuner.exact import exact_optimum
from autotune.tuner.fit import fitted
from autotune.tuner.outcome import SAFETY_TIMEOUT_S
from autotune.tuner.problem import Problem, even_layers


def _kind(f: float, act: float, static: float) -> dict:
    return {"fwd_ms": f, "bwd_ms": 2 * f, "act_mib": act, "static_mib": static,
            "full": {"act_mib": 0.1 * act, "extra_ms": f, "workspace_mib": act}}


def _problem(b: dict | None) -> Problem:
    """pp 2 × vpp 2 × m 4, 8 layers, full recompute, the budget 0.9 × the even split's fitted peak:
    8 layers of kind a (``b`` None) or 4 of a, then 4 of kind ``b``."""
    kinds = {"a": _kind(1.0, 10.0, 4.0)} | ({"b": b} if b is not None else {})
    runs = [("a", 8)] if b is None else [("a", 4), ("b", 4)]
    prof = ModelProfile(kinds=kinds, layer_kinds=runs, head={"static_mib": 10.0, "fwd_ms": 0.5, "bwd_ms": 1.0},
                        tail={"static_mib": 15.0, "fwd_ms": 1.0, "bwd_ms": 2.0, "act_mib": 5.0}, p2p_ms=0.1)
    pa = ProfileArrays.from_profile(prof)
    loose = Problem(pa, P=2, m=4, vpp_candidates=[2], kinds=("full",))
    peak = fitted(loose, 2, even_layers(8, 2, 2)[None], "x")[0].peak_mib
    return Problem(pa, P=2, m=4, hbm_mib=0.9 * peak, vpp_candidates=[2], kinds=("full",))


ONE = dict(b=None)
SAME = dict(b=_kind(1.0, 10.0, 4.0))  # a second kind with the first one's every value
SEVERAL = dict(b=_kind(1.5, 30.0, 12.0))  # a MoE-like kind: slower, more activation and static


def test_several_kinds_only_when_the_kinds_differ() -> None:
    assert not several_kinds(_problem(**ONE))
    assert not several_kinds(_problem(**SAME))
    assert several_kinds(_problem(**SEVERAL))


def test_cannot_finish_by_hand(monkeypatch) -> None:
    """Started at 100 s, 1 of 3 stages done at 102 s: the other two end at 106 s at that rate."""
    monkeypatch.setattr(stage_dp.time, "monotonic", lambda: 102.0)
    assert stage_dp.cannot_finish(100.0, 1, 3, 105.9)
    assert not stage_dp.cannot_finish(100.0, 1, 3, 106.1)
    assert not stage_dp.cannot_finish(100.0, 1, 3, None)
    assert not stage_dp.cannot_finish(100.0, 0, 3, 102.5)  # no rate yet: only the deadline itself
    assert stage_dp.cannot_finish(100.0, 0, 3, 101.9)
    assert not stage_dp.cannot_finish(100.0, 3, 3, 102.5)  # all done: nothing left to project


def test_the_stage_dp_gives_up_when_its_rate_says_so(monkeypatch) -> None:
    """With ``cannot_finish`` saying so from the first stage, the tables stop (None, no proof);
    otherwise the same call proves a bound."""
    pr = _problem(**ONE)
    far = time.monotonic() + 3600.0
    assert stage_dp.stage_dp_bound(pr, 2, deadline=far) is not None
    monkeypatch.setattr(stage_dp, "cannot_finish", lambda *a: True)
    assert stage_dp.stage_dp_bound(pr, 2, deadline=far) is None


def test_the_stage_dp_sets_nothing_up_past_its_deadline_and_its_screen_gives_up(monkeypatch) -> None:
    """Past the deadline no path is even counted (the set-up took ~1 s a V on pp 64 × m 512, the
    overrun of a late start); with an incumbent, the screen's loop over stages gives up on the rate
    as the tables' loops do (no proof)."""
    pr = _problem(**ONE)
    opt = exact_optimum(pr).best.step_ms
    far = time.monotonic() + 3600.0
    assert stage_dp.stage_dp_bound(pr, 2, upper_ms=opt, deadline=far) is not None

    def counted(*a, **k):
        raise AssertionError("the paths were counted past the deadline")

    with monkeypatch.context() as mp:
        mp.setattr(stage_dp, "stage_paths", counted)
        assert stage_dp.stage_dp_bound(pr, 2, upper_ms=opt, deadline=time.monotonic() - 1.0) is None
    calls, priced = [], []
    real, real_configs = stage_dp.cannot_finish, stage_dp.stage_configs
    monkeypatch.setattr(stage_dp, "cannot_finish", lambda t0, done, total, dl: calls.append(done) or
                        (len(calls) > 1 or real(t0, done, total, dl)))  # the first call (the entry) passes
    monkeypatch.setattr(stage_dp, "stage_configs", lambda *a, **k: priced.append(1) or real_configs(*a, **k))
    assert stage_dp.stage_dp_bound(pr, 2, upper_ms=opt, deadline=far) is None
    assert priced == []  # the screen gave up before pricing its first stage


class _Probe:
    """A proof stand-in: records (name, ctx) and returns ``value`` (None: no proof)."""

    name = "probe"

    def __init__(self, value: float | None) -> None:
        self.value, self.seen = value, []

    def applies(self, problem, V) -> bool:
        return True

    def bound(self, problem, V, ctx):
        self.seen.append(ctx)
        return None if self.value is None else BoundOutcome(self.value, np.ones((2, 2), dtype=int), {})


def test_unproven_until_and_bound_only_by_hand() -> None:
    pr = _problem(**ONE)
    probe = _Probe(5.0)
    assert probe.bound(pr, 2, BoundContext()).split is not None
    kept = BoundOnly(probe).bound(pr, 2, BoundContext())
    assert kept.bound_ms == 5.0 and kept.split is None  # the bound, no seed
    assert BoundOnly(_Probe(None)).bound(pr, 2, BoundContext()) is None
    probe = _Probe(5.0)
    assert Unproven(probe).bound(pr, 2, BoundContext(lower_ms=3.0)).bound_ms == 3.0 and probe.seen == []
    assert Unproven(probe).bound(pr, 2, BoundContext()).bound_ms == 5.0
    for pass_deadline, at, want in ((10.0, 4.0, 4.0), (4.0, 10.0, 4.0), (None, 4.0, 4.0), (7.0, None, 7.0)):
        Until(probe, at).bound(pr, 2, BoundContext(deadline=pass_deadline))
        assert probe.seen[-1].deadline == want


def _first_pass(monkeypatch, pr: Problem, *, timed: bool, seconds: float, stage_value: str = "real"):
    """The (proof, deadline) pairs the first bound pass runs, in order, and the search's bound.
    The split LP is left out (it would prove this small problem's V first: few splits)."""
    monkeypatch.setattr(solve, "_exact", lambda *a, **k: None)
    monkeypatch.setattr(SplitLP, "applies", lambda self, problem, V: False)
    calls: list[tuple[str, float | None]] = []
    step = ["?"]
    for cls in (StageDP, Lagrangian):
        orig = cls.bound

        def rec(self, problem, V, ctx, orig=orig, cls=cls):
            if step[0] == "first bound pass":
                calls.append((cls.__name__, ctx.deadline))
                if cls is StageDP and stage_value == "none":
                    return None  # as tables that gave up on the clock
            return orig(self, problem, V, ctx)

        monkeypatch.setattr(cls, "bound", rec)
    t0 = time.monotonic()
    bs = solve.bound_and_seeds(pr, [], deadline=t0 + seconds, timed=timed,
                               report=lambda name, best, bound: step.__setitem__(0, name))
    return calls, bs, t0


def test_one_kind_short_timeout_runs_the_stage_dp_first(monkeypatch) -> None:
    """One kind, a 30 s bound phase: the stage DP alone, to the anytime share (18 s); it proves,
    so no Lagrangian; the result is still at most the enumerated optimum."""
    pr = _problem(**ONE)
    calls, bs, t0 = _first_pass(monkeypatch, pr, timed=True, seconds=30.0)
    assert [c[0] for c in calls] == ["StageDP"]
    assert calls[0][1] - t0 == pytest.approx(solve.ANYTIME_SHARE * 30.0, abs=0.5)
    opt = exact_optimum(pr).best
    assert opt is not None and bs.bound_ms <= opt.step_ms * (1 + 1e-7)


def test_the_lagrangian_runs_to_its_own_share_where_the_stage_dp_gave_up(monkeypatch) -> None:
    pr = _problem(**ONE)
    calls, bs, t0 = _first_pass(monkeypatch, pr, timed=True, seconds=30.0, stage_value="none")
    assert [c[0] for c in calls] == ["StageDP", "Lagrangian"]
    assert calls[1][1] - t0 == pytest.approx(solve.FIRST_PASS_SHARE * 30.0, abs=0.5)
    assert np.isfinite(bs.bound_ms) and bs.bound_ms > 0


@pytest.mark.parametrize("kinds, timed, seconds", [(SEVERAL, True, 30.0), (ONE, False, SAFETY_TIMEOUT_S / 2),
                                                   (ONE, True, 3 * solve.ANYTIME_HORIZON_S)])
def test_the_registry_order_stays_elsewhere(monkeypatch, kinds, timed, seconds) -> None:
    """Several kinds under a short timeout, the safety net's deadline, a long timeout: the
    Lagrangian first, then the stage DP, both to the first pass's 30 % share."""
    pr = _problem(**kinds)
    calls, _, t0 = _first_pass(monkeypatch, pr, timed=timed, seconds=seconds)
    assert [c[0] for c in calls] == ["Lagrangian", "StageDP"]
    assert all(d - t0 == pytest.approx(solve.FIRST_PASS_SHARE * seconds, abs=0.5) for _, d in calls)


def test_one_stay_counts_give_up_on_the_deadline_and_remember_nothing() -> None:
    """Counting the one-stay paths stops at a deadline it cannot meet (None, nothing memoised), so
    the same schedule is counted in full later."""
    from autotune.cost.simulate import compile_schedule
    from autotune.tuner.bounds import _paths

    cs = compile_schedule("1f1b", 4, 2, 12)
    _paths._ONE_STAY.pop(id(cs), None)
    assert _paths.one_stay_counts(cs, deadline=time.monotonic() - 1.0) is None
    assert _paths.stage_paths(cs, 0.1, deadline=time.monotonic() - 1.0) is None
    assert id(cs) not in _paths._ONE_STAY
    full = _paths.one_stay_counts(cs, deadline=time.monotonic() + 3600.0)
    assert len(full) == 4 and all(len(rows) > 0 for rows in full)
    assert _paths.one_stay_counts(cs) is full  # memoised now
