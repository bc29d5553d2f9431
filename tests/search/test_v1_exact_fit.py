"""pp_interleave_num 1 local search re-fits recompute exactly (autotune.tuner.fit.search_fit): from
the even split it reaches the enumerated optimum of small problems, where the greedy fit it used
before stops 1.8–3.2 % above it (issue 17; docs/search.md)."""

import pytest

from autotune.cost.budget import fits
from autotune.tuner.exact import exact_optimum
from autotune.tuner.fit import GREEDY, ExactFit, edge_weighted_fit, fitted, search_fit
from autotune.tuner.heuristic import local_search
from autotune.tuner.kicks import kick_search
from autotune.tuner.problem import best_of, even_layers
from autotune.tuner.sampler import NeighbourhoodSampler
from autotune.tuner.solve import improve


def _even(problem, fit):
    return fitted(problem, 1, even_layers(problem.N, problem.P, 1)[None], "even", fit=fit)[0]


@pytest.mark.parametrize("P, L, model, greedy_ms", [
    (3, 12, "dense", 2664.31),   # optimum 2580.50
    (3, 24, "dense", 4850.84),   # optimum 4741.14
    (4, 16, "moe", 2195.37),     # optimum 2155.96
    (6, 16, "moe", 1887.42),     # optimum 1848.20
])
def test_v1_local_search_reaches_the_enumerated_optimum(P, L, model, greedy_ms):
    from benchmarks.scaling import build
    problem = build(P, 1, 8, L, model, "tight")
    opt = exact_optimum(problem).best
    got = best_of(improve(problem, [_even(problem, GREEDY)], {1: 0.0}, None))
    assert fits(got.peak_mib, problem.hbm_mib)
    assert got.step_ms == pytest.approx(opt.step_ms, rel=1e-9)
    # the greedy fit's descent from the same start stops above the optimum (measured, pinned)
    old = local_search(problem, _even(problem, GREEDY), fit=GREEDY)
    assert old.step_ms == pytest.approx(greedy_ms, abs=0.01)
    assert old.step_ms > opt.step_ms * 1.004


def test_search_fit_is_exact_for_every_v():
    assert search_fit(1) == ExactFit()  # one chunk: no edge chunk to weight
    assert search_fit(3) == edge_weighted_fit(3) == ExactFit((1.1, 1.0, 1.1))


def test_v1_kick_search_refits_exactly():
    """From the greedy fit's local optimum of a pp 8 × m 16 × 32-layer MoE problem, the kick search
    (its touched stages re-fitted with search_fit) finds 4,297.38 ms; with the greedy re-fit it
    found 4,386.75 ms, the start itself (measured before the change, pinned)."""
    from benchmarks.scaling import build
    problem = build(8, 1, 16, 32, "moe", "tight")
    start = local_search(problem, _even(problem, GREEDY), max_iters=20, fit=GREEDY)
    assert start.step_ms == pytest.approx(4386.75, abs=0.01)
    got = kick_search(problem, start, seed=0)
    assert fits(got.peak_mib, problem.hbm_mib)
    assert got.step_ms == pytest.approx(4297.38, abs=0.01)


def test_v1_sampler_neighbours_refit_exactly():
    """The study's first neighbourhood (single-layer moves, touched stages re-fitted) of the
    greedy-fitted even split of a pp 8 × m 16 × 32-layer MoE problem: its best neighbour is
    4,883.11 ms with the exact re-fit; with the greedy re-fit it was 4,906.43 ms (pinned)."""
    from benchmarks.scaling import build
    problem = build(8, 1, 16, 32, "moe", "tight")
    inc = _even(problem, GREEDY)
    ranked = NeighbourhoodSampler(problem)._ranked(inc)
    assert ranked and all(fits(c.peak_mib, problem.hbm_mib) for c in ranked)
    assert min(c.step_ms for c in ranked) == pytest.approx(4883.11, abs=0.01)
