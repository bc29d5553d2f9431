"""The kick search (autotune.tuner.kicks): the shears of a split by hand, random kicks that keep
the layer count and bounds and repeat with their seed, and a kick search that leaves the local
search's optimum for a faster layout that fits."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from autotune.tuner.kicks import kick_search, random_kicks, shear_splits
from autotune.tuner.problem import Candidate, even_layers
from tests.search.test_exact_bounds import _random_problem


def _cand(layers) -> Candidate:
    lay = np.asarray(layers, dtype=np.int64)
    z = np.zeros_like(lay)
    return Candidate(lay.shape[0], lay, z, z.copy(), z.copy())


def test_shears_by_hand() -> None:
    """P 3, V 2, 2 layers a mini-stage: q = 1 moves a layer between the chunks of device 0, of
    device 2, or of both the opposite ways (each in both directions); q = 2 of devices 0-1 or
    1-2, or of both (the same as q = 1's "both"): 10 distinct splits, each device keeping 4."""
    problem = _random_problem(1, 12, 3, 2, ("full",), 10.0)
    got = {tuple(map(tuple, s)) for s in shear_splits(problem, _cand([[2, 2, 2], [2, 2, 2]]))}
    d = {  # chunk-0 row of each shear (the last chunk's is 4 minus it)
        (1, 2, 2), (3, 2, 2), (2, 2, 3), (2, 2, 1), (1, 2, 3), (3, 2, 1),  # q = 1
        (1, 1, 2), (3, 3, 2), (2, 3, 3), (2, 1, 1)}  # q = 2
    assert got == {(c0, tuple(4 - x for x in c0)) for c0 in d}
    assert shear_splits(problem, _cand([[2, 2, 2]])).shape == (0, 1, 3)  # V = 1: none


def test_shears_respect_the_layer_bounds() -> None:
    """Device 0's mini-stages at their lower bound never lose a layer; every shear keeps each
    device's layers."""
    problem = _random_problem(1, 12, 3, 2, ("full",), 10.0)
    lo, hi = problem.bounds(2)
    base = _cand(np.where(np.arange(3)[None, :] == 0, lo, 2 * np.ones((2, 3), dtype=np.int64)))
    for s in shear_splits(problem, base):
        assert (s >= lo).all() and (s <= hi).all()
        assert (s.sum(axis=0) == base.layers.sum(axis=0)).all()


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 10_000), n=st.integers(1, 40))
def test_random_kicks_keep_layers_and_repeat(seed, n) -> None:
    """Every kick keeps the total layers and the bounds, differs from the base, at most n come
    back (a kick whose moves cancel, e.g. a -> b then b -> a, is dropped), and the same seed gives
    the same kicks."""
    problem = _random_problem(2, 16, 4, 2, ("full",), 10.0)
    base = _cand(even_layers(16, 4, 2))
    lo, hi = problem.bounds(2)
    a = random_kicks(problem, base, n, np.random.default_rng(seed))
    b = random_kicks(problem, base, n, np.random.default_rng(seed))
    assert np.array_equal(a, b) and len(a) <= n
    assert (a.sum(axis=(1, 2)) == 16).all()
    assert ((a >= lo) & (a <= hi)).all()
    assert not (a == base.layers).all(axis=(1, 2)).any()


def test_random_kicks_seed_0() -> None:
    """Seed 0, 32 kicks on the 16-layer pp4 vpp2 even split: 31 come back (one moved nothing);
    seed 293 with one kick: its moves cancel, so none (found by hypothesis)."""
    problem = _random_problem(2, 16, 4, 2, ("full",), 10.0)
    base = _cand(even_layers(16, 4, 2))
    assert len(random_kicks(problem, base, 32, np.random.default_rng(0))) == 31
    assert random_kicks(problem, base, 1, np.random.default_rng(293)).shape == (0, 2, 4)


def test_kick_search_leaves_the_local_optimum() -> None:
    """benchmarks/scaling.py's P16 V2 m64 L64 dense tight: the local search from the even split
    (edge-weighted exact fit) stops at 18,798.1 ms; the kick search reaches 18,574.5 ms (a shear:
    chunk 0 / chunk 1 = 1 / 3 layers on devices 0-7, 2 / 2, then 3 / 1 on the last), fitting the
    budget, and the same again on a second run (seeded kicks, no clock)."""
    from benchmarks.scaling import build
    from autotune.tuner.fit import edge_weighted_fit, fitted
    from autotune.tuner.heuristic import local_search

    problem = build(16, 2, 64, 64, "dense", "tight")
    fit = edge_weighted_fit(2)
    start = fitted(problem, 2, even_layers(64, 16, 2)[None], "even", fit=fit)[0]
    ls = local_search(problem, start, max_iters=60, fit=fit)
    assert ls.step_ms == pytest.approx(18798.08, abs=0.01)
    k = kick_search(problem, ls)
    assert k.step_ms == pytest.approx(18574.53, abs=0.01)
    assert k.peak_mib <= problem.hbm_mib and k.origin.endswith("+kick")
    assert k.layers.tolist() == [[1] * 8 + [2] * 7 + [3], [3] * 8 + [2] * 7 + [1]]
    again = kick_search(problem, ls)
    assert np.array_equal(again.layers, k.layers) and again.step_ms == k.step_ms
    # a target at the start's own step time stops it at once
    assert kick_search(problem, ls, target_ms=ls.step_ms) is ls


def test_kick_patience_by_schedule_size() -> None:
    """KICK_PATIENCE_OPS (32,768) / (2·V·P·m) rounds, between KICK_PATIENCE and KICK_MAX_PATIENCE:
    pp 4 × vpp 4 × m 8 (256 ops) 16; pp 4 × vpp 2 × m 64 (1,024) 16; pp 16 × vpp 2 × m 64 (4,096)
    8; pp 8 × vpp 4 × m 128 (8,192) 4; pp 16 × vpp 3 × m 64 (6,144) 5; pp 32 × vpp 2 × m 256
    (32,768) 1; pp 32 × vpp 4 × m 256 (65,536) 1; pp 2 × vpp 1 × m 4 (16) 16."""
    from autotune.tuner.kicks import kick_patience
    from autotune.tuner.problem import Problem

    pa = _random_problem(1, 16, 4, 2, ("full",), 10.0).pa
    for P, V, m, want in ((4, 4, 8, 16), (4, 2, 64, 16), (16, 2, 64, 8), (8, 4, 128, 4), (16, 3, 64, 5),
                          (32, 2, 256, 1), (32, 4, 256, 1), (2, 1, 4, 16)):
        assert kick_patience(Problem(pa, P=P, m=m, vpp_candidates=(V,)), V) == want


def test_kicks_start_from_every_v_that_can_win(monkeypatch) -> None:
    """solve.kick with a certified gap over KICK_WIDE_GAP (2 %): the incumbent's V first, then each
    other V whose bound is below the incumbent and whose fastest layout is within KICK_WITHIN (3 %)
    of it, the fastest first, each with kick_patience (here 16: pp 4 × m 8); a V whose bound is at
    or above the incumbent, or that is too far behind, is skipped; a faster kick answer becomes
    the incumbent the next V is compared with, and the kicks stop once the gap target is met.
    Within 2 %: the incumbent alone, with the default patience."""
    import autotune.tuner.solve as solve

    problem = _random_problem(1, 16, 4, 2, ("full",), 10.0)

    def cand(V: int, step: float) -> Candidate:
        c = _cand(even_layers(16, 4, V))
        c.step_ms, c.peak_mib, c.excess_mib = step, 0.0, -1.0
        return c

    started: list[tuple[int, float]] = []
    patiences: list[int | None] = []
    answers: dict[float, float] = {}

    def fake_kick(problem, start, *, target_ms=None, deadline=None, patience=None):
        started.append((start.V, start.step_ms))
        patiences.append(patience)
        if start.step_ms in answers:
            return cand(start.V, answers[start.step_ms])
        return start

    monkeypatch.setattr(solve, "kick_search", fake_kick)
    inc, v2, v3, v4 = cand(1, 100.0), cand(2, 102.0), cand(3, 101.0), cand(4, 104.0)
    per_v = {1: 90.0, 2: 95.0, 3: 100.0, 4: 95.0}
    # V 3's bound (100) is not below the incumbent, V 4 is 4 % behind: only V 1, then V 2
    assert solve.kick(problem, [v2, inc, v3, v4], per_v, target_gap=0.005) == []
    assert started == [(1, 100.0), (2, 102.0)]
    # V 2's kick finds 99: returned; with it as the incumbent V 4 (104) is over 3 % behind
    started.clear()
    answers[102.0] = 99.0
    out = solve.kick(problem, [v2, inc, v3, v4], {**per_v, 3: 95.0}, target_gap=0.005)
    assert started == [(1, 100.0), (3, 101.0), (2, 102.0)] and [c.step_ms for c in out] == [99.0]
    # the incumbent's own kick meets the gap target (bound 90 × 1.005): nothing else runs
    started.clear()
    answers[100.0] = 90.4
    out = solve.kick(problem, [v2, inc, v3, v4], per_v, target_gap=0.005)
    assert started == [(1, 100.0)] and [c.step_ms for c in out] == [90.4]
    assert set(patiences) == {16}
    # a gap of 1.5 % (bound 98.5): the incumbent alone, default patience
    started.clear()
    patiences.clear()
    answers.clear()
    assert solve.kick(problem, [v2, inc, v3, v4], {1: 98.5, 2: 98.5, 3: 98.5, 4: 98.5}, target_gap=0.005) == []
    assert started == [(1, 100.0)] and patiences == [None]
