"""The wall-clock deadline inside the search's scans (issue 17: ``--timeout`` respected): the exact
recompute fit, the scans and the study's sampler stop where the clock says, and a search cut
there says that it timed out (never that it reached a local optimum). Without a deadline, or with
one far away, every result is the same as before."""

from __future__ import annotations

import time

import numpy as np
import pytest

import autotune.tuner.runner as runner
from autotune.tuner.fit import (GREEDY, DEADLINE_BLOCK, NEAR_DEADLINE_S, ExactFit, PastDeadline, clock_block,
                                fit_exact, with_deadline)
from autotune.tuner.heuristic import finish_one_opt, improving_moves, local_search
from autotune.tuner.moves import LazyScan, OneOptMoves, SingleLayerMoves, scan
from autotune.tuner.problem import Candidate, even_layers
from autotune.tuner.runner import run_study
from autotune.tuner.sampler import NeighbourhoodSampler
from tests.search.test_exact_bounds import _random_problem

PAST = 0.0  # a time.monotonic() value already past


def _problem_and_start():
    """A random pp 3 × vpp 2, 12-layer problem and its even split with full recompute (fits)."""
    pr = _random_problem(7, 12, 3, 2, ("full", "select", "comm"), 0.9)
    L = even_layers(12, 3, 2)
    z = np.zeros_like(L)
    start = pr.score([Candidate(2, L, L.copy(), z, z)])[0]
    assert start.peak_mib <= pr.hbm_mib
    return pr, start


def test_clock_block():
    """All rows at once without a deadline or far from it; DEADLINE_BLOCK within
    NEAR_DEADLINE_S of it."""
    assert clock_block(5000, None) == 5000
    assert clock_block(5000, time.monotonic() + 10 * NEAR_DEADLINE_S) == 5000
    assert clock_block(5000, time.monotonic() + 0.5 * NEAR_DEADLINE_S) == DEADLINE_BLOCK
    assert clock_block(0, None) == 1


def test_exact_fit_stops_at_its_deadline_and_is_the_same_fit_otherwise():
    pr, start = _problem_and_start()
    layers = start.layers[None]
    with pytest.raises(PastDeadline):
        fit_exact(pr, layers, deadline=PAST)
    with pytest.raises(PastDeadline):
        ExactFit(deadline=PAST).fit(pr, layers)
    free = fit_exact(pr, layers)
    far = ExactFit(deadline=time.monotonic() + 3600).fit(pr, layers)
    for a, b in zip(free, far):
        assert np.array_equal(a, b)
    assert with_deadline(GREEDY, PAST) is GREEDY  # the greedy fit has no clock
    assert with_deadline(ExactFit(), PAST).memo_tag == ExactFit().memo_tag  # the same cache entries


def test_scans_raise_past_their_deadline():
    pr, start = _problem_and_start()
    with pytest.raises(PastDeadline):
        scan(pr, start, OneOptMoves(), deadline=PAST)
    with pytest.raises(PastDeadline):
        LazyScan(pr, start, SingleLayerMoves(), deadline=PAST)
    full = scan(pr, start, OneOptMoves())
    far = scan(pr, start, OneOptMoves(), deadline=time.monotonic() + 3600)
    assert np.array_equal(full.step_ms, far.step_ms)


def test_descents_return_their_start_past_the_deadline():
    """The 1-opt finish and the local search keep the best layout so far when the clock cuts a
    scan (here: their start, the deadline having passed); without a deadline both improve it."""
    pr, start = _problem_and_start()
    lay, _ = improving_moves(pr, start)
    assert len(lay.layers)  # the start is not 1-opt
    with pytest.raises(PastDeadline):
        improving_moves(pr, start, deadline=PAST)
    assert finish_one_opt(pr, start, deadline=PAST) is start
    assert finish_one_opt(pr, start).step_ms < start.step_ms
    assert local_search(pr, start, deadline=PAST, fit=ExactFit()) is start
    assert local_search(pr, start, fit=ExactFit()).step_ms < start.step_ms


def test_sampler_past_its_deadline_makes_no_proposal():
    pr, start = _problem_and_start()
    out = run_study(pr, seeds=[start], n_trials=3, seed=0)
    late = NeighbourhoodSampler(pr, deadline=PAST)
    assert late.propose(out.study) is None and late.timed_out
    free = NeighbourhoodSampler(pr)
    free.propose(out.study)
    assert not free.timed_out


def test_study_cut_by_the_sampler_clock_says_timed_out(monkeypatch):
    """The sampler's scan meets the clock: the study stops, says ``timed_out`` / "timeout" (not
    "neighbourhood", which would claim a local optimum) and keeps the seeds' best."""
    pr, start = _problem_and_start()
    monkeypatch.setattr(runner, "NeighbourhoodSampler",
                        lambda problem, deadline=None: NeighbourhoodSampler(problem, deadline=PAST))
    out = run_study(pr, seeds=[start], n_trials=50, timeout=3600, seed=0)
    assert out.timed_out and out.stopped_by == "timeout"
    assert out.best is not None and out.best.step_ms == pytest.approx(start.step_ms)
    assert out.trials < 50
