"""Lazy neighbourhood scans (issue 17): ``moves.LazyScan`` prices every neighbour's memory and
simulates step times in increasing step floor only until the first k neighbours in rank order are
known. The local search's descents, its pair-move escape, the kick search and the sampler's
single-move scan use it; each must take exactly the steps the full ``moves.scan`` gave.

``LAZY_BLOCK`` (neighbours simulated at a time) is set to 1 here, so that the stopping rule, not
the block size, decides what is simulated on these small neighbourhoods."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import autotune.tuner.heuristic as heuristic
import autotune.tuner.kicks as kicks
import autotune.tuner.moves as moves
import autotune.tuner.sampler as sampler
from autotune.cost.inputs import ProfileArrays
from autotune.profile.schema import ModelProfile
from autotune.tuner.fit import fitted
from autotune.tuner.moves import GivenSplits, LazyScan, SingleLayerMoves, scan, single_moves
from autotune.tuner.problem import Problem, even_layers, rank_order
from tests.search.test_exact_bounds import _random_problem
from tests.search.test_step_floor import long_schedule_base, random_base


@pytest.fixture(autouse=True)
def _one_at_a_time(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(moves, "LAZY_BLOCK", 1)


class _Full(LazyScan):
    """The reference: a LazyScan that simulates every neighbour whatever it is asked."""

    def settle(self, k: int) -> "LazyScan":
        self._simulate(len(self.step_ms) - self.done)
        return self

    def settle_below(self, step_ms: float) -> "LazyScan":
        return self.settle(1)


def _uniform_problem(P: int, V: int, N: int, m: int, hbm: float) -> Problem:
    """One layer kind with integer times and no head / tail time: many single moves tie exactly."""
    prof = ModelProfile(kinds={"L": {"fwd_ms": 1, "bwd_ms": 2, "act_mib": 4, "static_mib": 1,
                                     "full": {"act_mib": 1, "extra_ms": 1},
                                     "select": {"act_mib": 3, "extra_ms": 0.5}}},
                        layer_kinds=[("L", N)], head={"static_mib": 1}, tail={"static_mib": 1})
    return Problem(ProfileArrays.from_profile(prof), P=P, m=m, hbm_mib=hbm, vpp_candidates=[V])


def _skewed(N: int, P: int, V: int) -> np.ndarray:
    """The even split with one layer moved from the last mini-stage to the first, int [V, P]."""
    lay = even_layers(N, P, V)
    lay[0, 0] += 1
    lay[-1, -1] -= 1
    return lay


def _check_prefix(pr: Problem, base, nbhd, ks) -> None:
    full = scan(pr, base, nbhd)
    lz = LazyScan(pr, base, nbhd)
    if full is None:
        assert lz.empty
        return
    n = len(full.step_ms)
    for k in ks:
        lazy = lz.settle(min(k, n)).scan()
        want = rank_order(full.step_ms, full.excess_mib(pr))[:k]
        got = rank_order(lazy.step_ms, lazy.excess_mib(pr))[:k]
        assert got.tolist() == want.tolist()
        assert lazy.step_ms[got].tolist() == full.step_ms[want].tolist()
        assert (lazy.peak_mib == full.peak_mib).all()  # every neighbour's memory, simulated or not
        run = np.isfinite(lazy.step_ms)
        assert (lazy.step_ms[run] == full.step_ms[run]).all()
        if lz.done < n:  # a neighbour left out is at least the least floor left out
            assert (full.step_ms[~run] >= lz.floor_sorted[lz.done]).all()


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(seed=st.integers(0, 10_000), N=st.integers(4, 10), P=st.integers(2, 3), V=st.integers(1, 2),
       tight=st.floats(0.8, 1.3), sched=st.sampled_from(["1f1b", "zero_bubble_v", "gpipe"]),
       skew=st.booleans())
def test_settled_prefix_is_the_full_scans(seed, N, P, V, tight, sched, skew) -> None:
    """Random problems and schedules, bases over and under the budget: after settle(k) the first k
    neighbours in rank order are the full scan's (same rows, order and step times), every
    simulated value and every peak is the full scan's; likewise for given splits."""
    assume(P * V <= N and (sched != "zero_bubble_v" or V == 2))
    pr, base = random_base(seed, N, P, V, tight, sched, skew)
    _check_prefix(pr, base, SingleLayerMoves(), (1, 2, 3, 5, 8))
    splits = single_moves(pr, base)
    if len(splits):
        _check_prefix(pr, base, GivenSplits(splits[::-1].copy()), (1, 4))


@pytest.mark.parametrize("P,V,N,m", [(4, 2, 16, 8), (3, 1, 9, 6), (2, 2, 8, 4)])
def test_exact_ties_keep_the_full_scans_order(P, V, N, m) -> None:
    """Identical integer-time layers, from a split with one layer moved to the first mini-stage:
    many neighbours tie exactly, and the first k in rank order (ties by position) are still the
    full scan's, under a loose and a tight budget."""
    for hbm in (1e6, 60.0 * N / P):
        pr = _uniform_problem(P, V, N, m, hbm)
        base = fitted(pr, V, _skewed(N, P, V)[None], "skew")[0]
        _check_prefix(pr, base, SingleLayerMoves(), (1, 2, 3, 6, 10))


def test_settle_below_simulates_every_neighbour_faster_than_it() -> None:
    """Every neighbour whose full-scan step is below the threshold is simulated, with its value."""
    pr, base = long_schedule_base()
    full = scan(pr, base, SingleLayerMoves())
    lz = LazyScan(pr, base, SingleLayerMoves()).settle_below(base.step_ms)
    fast = full.step_ms < base.step_ms
    assert fast.any()
    assert (lz.step_ms[fast] == full.step_ms[fast]).all()


def test_the_best_neighbour_needs_few_simulations_on_a_long_schedule() -> None:
    """pp 4 × vpp 2, 32 micro-batches, from the even split with one layer moved from the last
    mini-stage to the first: moving it back is the best move, its floor is about its step, and
    most other moves' floors are above it, so settle(1) simulates under a quarter of them."""
    pr, base = long_schedule_base()
    lz = LazyScan(pr, base, SingleLayerMoves()).settle(1)
    full = scan(pr, base, SingleLayerMoves())
    assert lz.scan().best(pr).step_ms == full.best(pr).step_ms < base.step_ms
    assert lz.done < len(lz.step_ms) // 4


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(seed=st.integers(0, 10_000), N=st.integers(6, 12), P=st.integers(2, 3), V=st.integers(1, 2),
       tight=st.floats(0.9, 1.3))
def test_searches_take_the_same_steps_as_with_full_scans(seed, N, P, V, tight) -> None:
    """The local search (descents, pair escape, kick descents), the kick search and the sampler's
    ranked neighbours give the same layouts and step times with lazy scans as with scans that
    simulate every neighbour."""
    assume(P * V <= N)
    lay = _skewed(N, P, V)
    assume(lay[-1, -1] >= 1)

    def run(lazy_cls):
        mp = pytest.MonkeyPatch()
        mp.setattr(heuristic, "LazyScan", lazy_cls)
        mp.setattr(sampler, "LazyScan", lazy_cls)
        mp.setattr(moves, "LazyScan", lazy_cls)
        try:
            pr = _random_problem(seed, N, P, V, ("full", "select", "comm"), tight, m=2 * P)
            start = fitted(pr, V, lay[None], "skew")[0]
            ls = heuristic.local_search(pr, start, pair_top=4)
            out = [(ls.layers.tolist(), ls.rec.tolist(), ls.sel.tolist(), ls.com.tolist(), ls.step_ms)]
            if start.excess_mib <= 0:
                ks = kicks.kick_search(pr, start, seed=1)
                out.append((ks.layers.tolist(), ks.rec.tolist(), ks.step_ms))
                ranked = sampler.NeighbourhoodSampler(pr)._ranked(start)
                out.append([(c.layers.tolist(), c.rec.tolist(), c.sel.tolist(), c.com.tolist(), c.step_ms)
                            for c in ranked])
            return out
        finally:
            mp.undo()

    assert run(LazyScan) == run(_Full)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(seed=st.integers(0, 10_000), N=st.integers(6, 12), P=st.integers(2, 3), V=st.integers(1, 2),
       tight=st.floats(0.9, 1.3), top=st.integers(1, 6))
def test_a_descent_stops_with_the_full_scans_first_top(seed, N, P, V, tight, top) -> None:
    """``heuristic._descend`` ends at the same layout as with full scans, and the scan it returns at
    the local optimum ranks its first ``top`` neighbours (what the pair escape pairs) as the full
    scan does, with the same step times."""
    assume(P * V <= N)
    pr = _random_problem(seed, N, P, V, ("full", "select", "comm"), tight, m=2 * P)
    lay = _skewed(N, P, V)
    assume(lay[-1, -1] >= 1)
    start = fitted(pr, V, lay[None], "skew")[0]
    end, _, stall = heuristic._descend(pr, start, {}, 50, None, heuristic.GREEDY, top)
    assume(stall is not None)
    full = scan(pr, end, SingleLayerMoves())
    want = rank_order(full.step_ms, full.excess_mib(pr))[:top]
    got = rank_order(stall.step_ms, stall.excess_mib(pr))[:top]
    assert got.tolist() == want.tolist()
    assert stall.step_ms[got].tolist() == full.step_ms[want].tolist()
