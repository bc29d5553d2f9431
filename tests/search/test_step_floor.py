"""A floor under the simulated step time screens the neighbours that cannot beat a base (issue 17:
the sampler's recompute trades and 1-opt scans, the 1-opt finish). ``moves.step_floor`` is a lower
bound on a layout's step time (its busiest stage's work; a base layout's critical path priced with
its durations); ``scan(beat=True)`` and ``heuristic.improving_moves`` do not simulate a neighbour
whose floor is at the base's step time, and must find the same better neighbours as without."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from autotune.cost.inputs import ProfileArrays
from autotune.profile.schema import ModelProfile
from autotune.tuner.fit import fitted
from autotune.cost.simulate import compile_schedule
from autotune.tuner.bounds._paths import one_stay_counts
from autotune.tuner.moves import SingleLayerMoves, base_path, floor_paths, scan, single_moves, step_floor
from autotune.tuner.problem import REL_TOL, Candidate, Problem, better, even_layers
from tests.search.test_exact_bounds import _random_problem


def _costs(pr: Problem, V: int, cands: list[Candidate]):
    return pr.costs(V, *(np.stack([getattr(c, a) for c in cands]) for a in ("layers", "rec", "sel", "com")))


def _toy_even_skew() -> tuple[Problem, Candidate, Candidate]:
    """pp 2, m 4, four 1 ms / 2 ms layers (no recompute, no memory limit): the problem and its
    scored layouts [2, 2] and [1, 3] (:func:`test_step_floor_by_hand`)."""
    prof = ModelProfile(kinds={"L": {"fwd_ms": 1, "bwd_ms": 2, "act_mib": 1, "static_mib": 1}},
                        layer_kinds=[("L", 4)], head={"static_mib": 1}, tail={"static_mib": 1})
    pr = Problem(ProfileArrays.from_profile(prof), P=2, m=4, hbm_mib=1e6)
    z = np.zeros((1, 2), dtype=np.int64)
    return (pr, pr.score([Candidate(1, np.array([[2, 2]]), z, z, z)])[0],
            pr.score([Candidate(1, np.array([[1, 3]]), z, z, z)])[0])


def random_base(seed: int, N: int, P: int, V: int, tight: float, sched: str,
                skew: bool) -> tuple[Problem, Candidate]:
    """A random problem (:func:`_random_problem`, m = 2P) and its even split's fitted layout, with
    one layer moved from the last mini-stage to the first when ``skew``."""
    pr = _random_problem(seed, N, P, V, ("full", "select", "comm"), tight, schedule=sched, m=2 * P)
    lay = even_layers(N, P, V)
    if skew and lay[-1, -1] > 1:
        lay[0, 0] += 1
        lay[-1, -1] -= 1
    return pr, fitted(pr, V, lay[None], "base")[0]


def test_step_floor_by_hand() -> None:
    """pp 2, m 4, 1F1B, one layer kind (forward 1 ms, backward 2 ms), no head / tail time, p2p 0.
    The even split [2, 2] simulates to 30 ms; its critical path holds 2 forwards and 2 backwards
    on stage 0 and 3 of each on stage 1 (2·(2 + 4) + 3·(2 + 4) = 30). Layers [1, 3] simulate to
    39 ms: stage 1's work is 4 × 3 × (1 + 2) = 36 ms (the busiest stage's floor); the even split's
    path priced with [1, 3]'s durations is 2·1 + 3·3 + 2·2 + 3·6 = 33 ms, so the floor is 36; its
    own path (one forward and one backward on stage 0, 4 + 4 on stage 1) is 1 + 2 + 4·3 + 4·6 = 39."""
    pr, even, skew = _toy_even_skew()
    assert even.step_ms == 30.0 and skew.step_ms == 39.0
    path = base_path(pr, even)
    assert path.cf.tolist() == [[2.0, 3.0]] and path.cb.tolist() == [[2.0, 3.0]]
    costs = _costs(pr, 1, [skew])
    assert step_floor(pr, 1, costs, path)[0] == 36.0 * (1 - 1e-10)
    assert step_floor(pr, 1, costs, base_path(pr, skew))[0] == 39.0 * (1 - 1e-10)


def _even_split_moves(seed: int, N: int, P: int, V: int, sched: str) -> tuple[Problem, Candidate, np.ndarray]:
    """A random problem on ``sched`` (seqpipe with seq_split_num 2), its even split fitted, and
    that layout's single moves (hypothesis drops draws where the schedule or the moves do not fit)."""
    assume(P * V <= N and (sched != "zero_bubble_v" or V == 2) and (sched != "seqpipe" or V == 1))
    split = 2 if sched == "seqpipe" else 1
    pr = _random_problem(seed, N, P, V, ("full", "select", "comm"), 1.0, schedule=sched, split=split, m=2 * P)
    base = fitted(pr, V, even_layers(N, P, V)[None], "even")[0]
    splits = single_moves(pr, base)
    assume(len(splits))
    return pr, base, splits


def long_schedule_base() -> tuple[Problem, Candidate]:
    """pp 4 × vpp 2, 32 micro-batches, 16 layers of two kinds, the even split with one layer moved
    from the last mini-stage to the first, fitted (it fits the budget)."""
    pr = _random_problem(7, 16, 4, 2, ("full", "select", "comm"), 1.3, m=32)
    lay = even_layers(16, 4, 2)
    lay[0, 0] += 1
    lay[1, 3] -= 1
    return pr, fitted(pr, 2, lay[None], "skewed")[0]


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(seed=st.integers(0, 10_000), N=st.integers(4, 10), P=st.integers(2, 3), V=st.integers(1, 2),
       sched=st.sampled_from(["1f1b", "zero_bubble_v", "gpipe", "seqpipe"]))
def test_step_floor_is_below_every_simulated_step(seed, N, P, V, sched) -> None:
    """Random problems, schedules (split backward included; seqpipe with seq_split_num 2), p2p > 0:
    every single move of the even split simulates to at least its floor, whichever layout's path
    prices it."""
    pr, base, splits = _even_split_moves(seed, N, P, V, sched)
    z = np.zeros_like(splits)
    costs = pr.costs(V, splits, z, z, z)
    step = pr.score_costs(V, costs).step_ms
    for ref in (base, Candidate(V, splits[0], z[0], z[0], z[0])):
        assert (step_floor(pr, V, costs, base_path(pr, ref)) <= step).all()


def _better(problem: Problem, base: Candidate, sc) -> list[tuple]:
    """(index, step ms) of the neighbours of a scan that are better than ``base``."""
    return [(i, float(sc.step_ms[i])) for i in range(len(sc.step_ms)) if better(sc.candidate(problem, i), base)]


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(seed=st.integers(0, 10_000), N=st.integers(4, 10), P=st.integers(2, 3), V=st.integers(1, 2),
       tight=st.floats(0.8, 1.3), sched=st.sampled_from(["1f1b", "zero_bubble_v", "gpipe"]),
       skew=st.booleans())
def test_screened_single_moves_find_the_same_better_neighbours(seed, N, P, V, tight, sched, skew) -> None:
    """Random problems and schedules, from the even split's fitted layout or one with a layer moved
    from the last mini-stage to the first: the single-move scan with ``beat=True`` gives the same
    better neighbours, with the same step times, as without; every neighbour it does not simulate
    simulates to a step the base's at least (within the tie tolerance)."""
    assume(P * V <= N and (sched != "zero_bubble_v" or V == 2))
    pr, base = random_base(seed, N, P, V, tight, sched, skew)
    assume(base.excess_mib <= 0)
    full, fast = scan(pr, base, SingleLayerMoves()), scan(pr, base, SingleLayerMoves(), beat=True)
    if full is None:
        assert fast is None
        return
    assert _better(pr, base, full) == _better(pr, base, fast)
    skipped = ~np.isfinite(fast.step_ms)
    assert (full.step_ms[skipped] >= base.step_ms * (1 - REL_TOL)).all()


def test_the_floor_skips_most_single_moves_on_a_long_schedule() -> None:
    """pp 4 × vpp 2, 32 micro-batches, 16 layers of two kinds, from the even split with one layer
    moved from the last mini-stage to the first (fitted): moving it back is better; most moves load
    a stage past the base's step time (none of them only adds time, so :func:`never_faster` keeps
    them all) and are not simulated."""
    pr, base = long_schedule_base()
    assert base.excess_mib <= 0
    full, fast = scan(pr, base, SingleLayerMoves()), scan(pr, base, SingleLayerMoves(), beat=True)
    skipped = ~np.isfinite(fast.step_ms)
    assert skipped.sum() > len(skipped) // 2
    assert _better(pr, base, full) == _better(pr, base, fast) != []


def test_floor_paths_by_hand() -> None:
    """The problem of :func:`test_step_floor_by_hand`. Besides the even split's critical path (2 + 2
    ops on stage 0, 3 + 3 on stage 1), ``floor_paths`` holds each stage's longest one-stay path
    under its durations (each 30 ms there): stage 0 runs 3 forwards and 2 backwards of its own,
    stage 1 all 4 + 4 of its own and one forward and one backward of stage 0. Priced with [1, 3]'s
    durations, stage 1's path is 1 + 2 + 4·3 + 4·6 = 39 ms, [1, 3]'s simulated step time, where
    the critical path and the busiest stage gave 36."""
    pr, even, skew = _toy_even_skew()
    fp = floor_paths(pr, even)
    assert fp.length.tolist() == [30.0, 30.0, 30.0]
    assert fp.cf.tolist() == [[[2.0, 3.0]], [[3.0, 2.0]], [[1.0, 4.0]]]
    assert fp.cb.tolist() == [[[2.0, 3.0]], [[3.0, 2.0]], [[1.0, 4.0]]]
    costs = _costs(pr, 1, [skew])
    assert step_floor(pr, 1, costs, fp)[0] == 39.0 * (1 - 1e-10) == skew.step_ms * (1 - 1e-10)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(seed=st.integers(0, 10_000), N=st.integers(4, 10), P=st.integers(2, 3), V=st.integers(1, 2),
       sched=st.sampled_from(["1f1b", "zero_bubble_v", "gpipe", "seqpipe"]))
def test_floor_paths_floor_is_below_every_step_and_above_the_single_paths(seed, N, P, V, sched) -> None:
    """Random problems and schedules (split backward: only the critical path), p2p > 0: every
    single move of the even split (fitted, and with no recompute) simulates to at least the floor
    of the stacked paths, which is at least the floor of the critical path alone."""
    pr, base, splits = _even_split_moves(seed, N, P, V, sched)
    z = np.zeros_like(splits)
    for rec in (z, np.minimum(splits, 1)):
        costs = pr.costs(V, splits, rec, z, z)
        step = pr.score_costs(V, costs).step_ms
        many = step_floor(pr, V, costs, floor_paths(pr, base))
        assert (many <= step).all()
        assert (many >= step_floor(pr, V, costs, base_path(pr, base)) * (1 - 1e-12)).all()


def test_one_stay_counts_are_memoised_read_only() -> None:
    """The one-stay counts of a compiled schedule are computed once and cannot be changed."""
    cs = compile_schedule("1f1b", 3, 2, 6)
    a = one_stay_counts(cs)
    assert one_stay_counts(cs) is a
    cf = a[0][0][0]
    with pytest.raises(ValueError):
        cf[0, 0] = 1.0
