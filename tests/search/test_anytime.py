"""The anytime bound pass under a user's ``--timeout`` (issue 17, "anytime and honest"): when the
bound phase is short (or the clock cut the first pass) the path LP runs right after the first
pass, so that a short search still proves a useful bound; without a timeout nothing changes
(unless the safety net cuts the first pass).

What the pass gains is measured on scaling.py's large rows and real configs (docs/search.md);
here: when it runs, that its first LP solve runs even past the deadline (an anytime proof), that
its value is still a bound, and that the later path-LP pass is not run twice."""

from __future__ import annotations

import time

import numpy as np

import autotune.tuner.solve as solve
from autotune.tuner.bounds import ANYTIME, REGISTRY
from autotune.tuner.bounds.path_lp import PathLP, path_lp_bound
from autotune.tuner.exact import exact_optimum
from autotune.tuner.outcome import SAFETY_TIMEOUT_S
from autotune.tuner.problem import Candidate, even_layers
from tests.search.test_exact_bounds import _random_problem

PAST = 0.0  # a time.monotonic() value already past


def _problem():
    """A random pp 3 × vpp 2, 12-layer problem with full / select / comm recompute and a tight
    budget (the even split with full recompute fits)."""
    return _random_problem(7, 12, 3, 2, ("full", "select", "comm"), 0.9)


def _small():
    """A random pp 2 × vpp 2, 8-layer problem with full recompute (the pipeline runs in ~1 s)."""
    return _random_problem(5, 8, 2, 2, ("full",), 1.0)


def _steps(problem, monkeypatch, **kw) -> tuple[list[str], solve.BoundAndSeeds]:
    """The solver steps ``bound_and_seeds`` reports, in order, and its result (the pipeline, not
    the enumeration)."""
    monkeypatch.setattr(solve, "_exact", lambda *a, **k: None)
    names: list[str] = []
    bs = solve.bound_and_seeds(problem, [], report=lambda step, best, bound: names.append(step), **kw)
    return names, bs


def test_the_pass_is_the_path_lp_and_the_registry_holds_it_once():
    assert ANYTIME.proofs == (PathLP(),)
    assert sum(p.proofs == ANYTIME.proofs for p in REGISTRY) == 1  # the later pass it stands in for


def test_first_solve_runs_past_the_deadline_and_is_a_bound():
    """Past its deadline the path LP still solves its first LP (the anytime proof: the known
    layout's longest path against the memory rows) and stops there; its value is positive, at most
    the value without a deadline and at most the enumerated optimum."""
    pr = _problem()
    L = even_layers(12, 3, 2)
    z = np.zeros_like(L)
    start = pr.score([Candidate(2, L, L.copy(), z, z)])[0]  # its longest path starts the family
    cut = path_lp_bound(pr, 2, layouts=(start,), deadline=PAST)
    assert cut is not None and cut.rounds == 1 and cut.paths == 1 and not cut.converged
    free = path_lp_bound(pr, 2, layouts=(start,))
    assert free.rounds > 1
    assert 0 < cut.bound_ms <= free.bound_ms * (1 + 1e-9)
    opt = exact_optimum(pr).best
    assert opt is not None and cut.bound_ms <= opt.step_ms * (1 + 1e-7)


def test_runs_with_a_short_user_timeout_only(monkeypatch):
    """With the user's timeout (``timed``) and a bound phase of at most ANYTIME_HORIZON_S the pass
    runs after the first pass, and the later path-LP pass, which it ran to its end, is skipped.
    The safety net's deadline (not ``timed``) or a long user timeout runs the pipeline as before."""
    pr = _small()

    def passes(names: list[str]) -> list[str]:  # the later bound passes run (none is gap-skipped: no target)
        return [s for s in names if s.startswith("bound pass ")]

    before, _ = _steps(pr, monkeypatch, deadline=time.monotonic() + SAFETY_TIMEOUT_S / 2)  # the safety net
    assert ANYTIME.name not in before and passes(before)[-1] == "bound pass path-lp"
    far, _ = _steps(pr, monkeypatch, deadline=time.monotonic() + 3 * solve.ANYTIME_HORIZON_S, timed=True)
    assert ANYTIME.name not in far and passes(far) == passes(before)
    timed, bs = _steps(pr, monkeypatch, deadline=time.monotonic() + 30.0, timed=True)
    assert timed[:3] == ["exact enumeration or even splits", "first bound pass", ANYTIME.name]
    assert passes(timed) == passes(before)[:-1]  # all but the path LP's
    opt = exact_optimum(pr).best
    assert opt is not None and bs.bound_ms <= opt.step_ms * (1 + 1e-7)


def test_runs_when_the_clock_cut_the_first_pass(monkeypatch):
    """A deadline already past cuts the first pass (its share is 0 s): the anytime pass then runs
    even without ``timed`` (the safety net cut a huge problem), and every V keeps a finite bound."""
    pr = _small()
    names, bs = _steps(pr, monkeypatch, deadline=time.monotonic())
    assert names[:3] == ["exact enumeration or even splits", "first bound pass", ANYTIME.name]
    assert np.isfinite(bs.bound_ms) and bs.bound_ms > 0


def test_the_later_pass_skips_only_the_vs_the_anytime_pass_covered():
    """``_Noted`` records the V's a proof ran for; ``_Except`` keeps the proof for the others."""
    pr = _problem()
    ran: set[int] = set()
    noted = solve._Noted(PathLP(), ran)
    assert noted.name == PathLP().name and noted.applies(pr, 2) and ran == set()
    assert noted.bound(pr, 2, solve.BoundContext()) is not None and ran == {2}
    rest = solve._Except(PathLP(), frozenset(ran))
    assert not rest.applies(pr, 2) and rest.applies(pr, 3) == PathLP().applies(pr, 3)
    assert not solve._Except(PathLP(), frozenset()).applies(pr, 1)  # V = 1: the path LP never applies
