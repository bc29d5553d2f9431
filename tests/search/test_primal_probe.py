"""benchmarks/primal_probe.py: the annealing probe's neighbours stay within the layer bounds and are
other layouts, it keeps to fitting layouts, never returns a slower one than its start, takes
slower steps only when warm, is reproducible by seed and refuses a start over the budget."""

import dataclasses

import numpy as np
import pytest

from autotune.cost.budget import fits
from autotune.tuner.problem import Candidate, even_layers, improves


def _problem():
    from benchmarks.scaling import build
    return build(4, 2, 8, 16, "dense", "tight")


def _even(problem, full: bool) -> Candidate:
    lay = even_layers(problem.N, problem.P, 2)
    z = np.zeros_like(lay)
    return problem.score([Candidate(2, lay, lay.copy() if full else z, z.copy(), z.copy())])[0]


def test_probe_improves_the_even_full_recompute_split_and_stays_within_budget():
    from benchmarks.primal_probe import probe
    problem = _problem()
    start = _even(problem, full=True)
    assert fits(start.peak_mib, problem.hbm_mib)
    res = probe(problem, start, rounds=40, seed=0, batch=64)
    best = res.best
    # full recompute on every layer replays every forward: dropping some of it is faster and the
    # tight budget (35 % of the way from the full-recompute peak to the no-recompute one) allows it
    assert best.step_ms < start.step_ms
    assert fits(best.peak_mib, problem.hbm_mib)
    assert best.layers.sum() == problem.N
    assert (best.rec <= best.layers).all() and (best.sel <= best.layers).all() and (best.com <= best.layers).all()
    # the reported score is the cost model's own
    again = problem.score([Candidate(2, best.layers, best.rec, best.sel, best.com)])[0]
    assert again.step_ms == best.step_ms
    assert res.rounds == 40 and 0 < res.evaluations <= 40 * 64


def test_probe_is_reproducible_by_seed():
    from benchmarks.primal_probe import probe
    problem = _problem()
    start = _even(problem, full=True)
    a = probe(problem, start, rounds=20, seed=3, batch=32).best
    b = probe(problem, start, rounds=20, seed=3, batch=32).best
    assert a.step_ms == b.step_ms
    assert all((getattr(a, k) == getattr(b, k)).all() for k in ("layers", "rec", "sel", "com"))


def test_probe_refuses_a_start_over_the_budget():
    from benchmarks.primal_probe import probe
    problem = _problem()
    start = _even(problem, full=False)  # no recompute: over the tight budget by construction
    assert not fits(start.peak_mib, problem.hbm_mib)
    with pytest.raises(ValueError, match="fits the HBM budget"):
        probe(problem, start, rounds=1)


def test_neighbours_keep_bounds_layer_sum_and_counts_and_differ_from_the_state():
    from benchmarks.primal_probe import _neighbours
    problem = dataclasses.replace(_problem(), max_abs_offset=1)  # narrower [lo, hi] than the default
    lo, hi = problem.bounds(2)
    assert (hi - lo).max() <= 2
    start = _even(problem, full=True)
    state = np.stack([start.layers, start.rec, start.sel, start.com]).astype(np.int64)  # full everywhere
    X = _neighbours(state, [1, 2, 3], lo, hi, np.random.default_rng(0), 4000)
    assert len(X) > 1000
    assert (X[:, 0] >= lo).all() and (X[:, 0] <= hi).all()
    assert (X[:, 0].sum(axis=(1, 2)) == problem.N).all()
    assert (X[:, 1:] >= 0).all() and (X[:, 1:] <= X[:, :1]).all()
    # select / comm at or below full are written as 0: one form per layout
    assert ((X[:, 2:] == 0) | (X[:, 2:] > X[:, 1:2])).all()
    assert (X != state[None]).any(axis=(1, 2, 3)).all()
    # every kind of move occurs: a layer moved, a count changed with the layers kept
    moved = (X[:, 0] != state[0][None]).any(axis=(1, 2))
    assert moved.any() and (~moved).any()


def test_probe_warm_takes_slower_steps_and_still_returns_no_slower_layout():
    from benchmarks.primal_probe import probe
    problem = _problem()
    start = probe(problem, _even(problem, full=True), rounds=40, seed=0, batch=64).best
    hot = probe(problem, start, rounds=30, seed=1, batch=64, t0_fraction=0.5)
    assert hot.uphill > 0
    assert hot.best is start or improves(hot.best.step_ms, start.step_ms)
    assert fits(hot.best.peak_mib, problem.hbm_mib)
    cold = probe(problem, start, rounds=30, seed=1, batch=64, t0_fraction=0.0)
    assert cold.uphill == 0
    assert cold.best is start or improves(cold.best.step_ms, start.step_ms)


def test_neighbours_at_the_layer_bounds_are_filtered():
    from benchmarks.primal_probe import _neighbours
    problem = dataclasses.replace(_problem(), max_abs_offset=1)
    lo, hi = problem.bounds(2)
    lay = even_layers(problem.N, problem.P, 2)
    at = np.unravel_index(np.flatnonzero(lo.ravel() < lay.ravel())[0], lo.shape)
    lay2 = lay.copy()
    lay2[at] = lo[at]  # one mini-stage at its lower bound ...
    up = np.unravel_index(np.flatnonzero(hi.ravel() > lay2.ravel())[-1], lo.shape)
    lay2[up] += lay.sum() - lay2.sum()  # ... another at its upper bound
    assert lay2[up] == hi[up] and lay2.sum() == problem.N
    z = np.zeros_like(lay2)
    X = _neighbours(np.stack([lay2, z, z, z]).astype(np.int64), [1, 2, 3], lo, hi, np.random.default_rng(0), 4000)
    assert (X[:, 0] >= lo).all() and (X[:, 0] <= hi).all()


def test_neighbours_of_a_layout_in_one_form_are_other_layouts():
    from benchmarks.primal_probe import _neighbours
    problem = _problem()
    lo, hi = problem.bounds(2)
    lay = even_layers(problem.N, problem.P, 2)
    state = np.stack([lay, lay, 0 * lay, 0 * lay]).astype(np.int64)  # full everywhere: a select +1 is no move
    X = _neighbours(state, [1, 2, 3], lo, hi, np.random.default_rng(0), 4000)
    assert len(X) and (X != state[None]).any(axis=(1, 2, 3)).all()


def test_neighbours_add_a_select_or_comm_layer_after_the_full_ones():
    from benchmarks.primal_probe import _neighbours
    problem = _problem()
    lo, hi = problem.bounds(2)
    lay = even_layers(problem.N, problem.P, 2)
    state = np.stack([lay, lay // 2, 0 * lay, 0 * lay]).astype(np.int64)
    X = _neighbours(state, [1, 2, 3], lo, hi, np.random.default_rng(0), 4000)
    assert (X[:, 2] > X[:, 1]).any() and (X[:, 3] > X[:, 1]).any()
