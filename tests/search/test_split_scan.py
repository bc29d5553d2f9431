"""The split scan (autotune/tuner/bounds/split_scan.py): for pp_interleave_num 1 it is the exact
optimum of the cost model over every split when it runs to its end (the enumeration's value), a
bound at every stop, and the search uses it: on a pp 2 problem it proves the V = 1 optimum that the
path DP's relaxation leaves below the answer."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import autotune.tuner.bounds.split_scan as SS
from autotune.cost.budget import fits
from autotune.tuner.bounds import REGISTRY, SplitScan, path_dp_bound
from autotune.tuner.exact import exact_optimum
from autotune.tuner.problem import compositions
from autotune.tuner.solve import can_win
from tests.search.test_exact_bounds import _random_problem

KINDS = [("full", "select", "comm"), ("full", "select"), ("select", "comm"), ("full",)]


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10_000), N=st.integers(4, 14), P=st.integers(2, 4), k=st.integers(0, 3),
       tight=st.floats(0.6, 1.05), sd=st.booleans(), ws=st.sampled_from([0.0, 1.5]),
       schedule=st.sampled_from(["1f1b", "gpipe"]))
def test_the_scan_is_the_enumerated_optimum(seed, N, P, k, tight, sd, ws, schedule) -> None:
    """Run to its end, the scan's bound is the enumerated optimum of V = 1 less its 1e-10 margin
    (+inf when nothing fits) and its layout is that optimum, fitting; with the optimum as the
    incumbent the bound is the same."""
    if N < P:
        return
    p = _random_problem(seed, N, P, 1, KINDS[k], tight, schedule, static_delta=sd, end_ws=ws)
    opt = exact_optimum(p).best
    r = SS.split_scan_bound(p)
    assert r.complete
    if opt is None:
        assert r.best is None and r.bound_ms == np.inf
        return
    assert r.best is not None and fits(r.best.peak_mib, p.hbm_mib)
    assert r.best.step_ms == pytest.approx(opt.step_ms, rel=1e-12)
    assert r.bound_ms == pytest.approx(opt.step_ms * (1 - SS.SAFETY), rel=1e-13)
    assert r.bound_ms <= opt.step_ms
    again = SS.split_scan_bound(p, upper_ms=opt.step_ms)
    assert again.bound_ms <= opt.step_ms and again.bound_ms >= opt.step_ms * (1 - 2 * SS.SAFETY)
    assert not can_win(again.bound_ms, opt.step_ms)   # V = 1 solved: not searched again


@pytest.mark.parametrize("seed", range(6))
def test_a_stopped_scan_is_still_a_bound(seed, monkeypatch) -> None:
    """Stopped after one batch of one split (the visit cap), the bound is the next split's step
    time without recompute, at most the optimum, and at least the first split's value."""
    p = _random_problem(seed, 12, 3, 1, ("full", "select", "comm"), 0.8)
    opt = exact_optimum(p).best
    monkeypatch.setattr(SS, "MAX_VISITED", 1)
    monkeypatch.setattr(SS, "BATCH", 1)
    r = SS.split_scan_bound(p)
    assert r.solved <= 1
    if opt is not None:
        assert r.bound_ms <= opt.step_ms
    full = SS.split_scan_bound(p, upper_ms=None)
    assert r.bound_ms <= full.bound_ms + 1e-9


def test_splits_the_exact_fit_cannot_solve_count_without_recompute(monkeypatch) -> None:
    """Where every stage's fit falls back to the greedy (its mini-stages over the exact fit's option
    cap), no split is solved exactly: the bound is the least no-recompute step time of those
    splits, at most the optimum."""
    import autotune.tuner.fit as F
    p = _random_problem(3, 12, 3, 1, ("full", "select", "comm"), 0.8)
    opt = exact_optimum(p).best
    monkeypatch.setattr(F, "EXACT_FIT_MAX_OPTS", 1)
    p2 = _random_problem(3, 12, 3, 1, ("full", "select", "comm"), 0.8)  # a fresh fit memo
    r = SS.split_scan_bound(p2)
    lo, hi = p2.bounds(1)
    splits = compositions(p2.N, lo.reshape(-1), hi.reshape(-1)).reshape(-1, 1, 3)
    least0 = p2.evaluate(1, splits, *(np.zeros_like(splits),) * 3).step_ms.min()
    assert r.best is not None and r.best.step_ms > least0  # the greedy's layouts are still layouts
    assert r.bound_ms == pytest.approx(least0 * (1 - SS.SAFETY), rel=1e-12)
    assert opt is None or r.bound_ms <= opt.step_ms


def test_the_first_pass_runs_it_after_the_path_dp() -> None:
    names = [q.name for q in REGISTRY[0].proofs]
    assert names.index("path DP") < names.index("split scan")


def test_it_closes_a_pp2_gap_the_path_dp_leaves() -> None:
    """A pp 2 × m 16 × 24-layer MoE problem on a tight budget (scaling.py's builder): the path
    DP's relaxation (recompute classes free) stops 4.8 % under the V = 1 optimum (8,979.2 against
    9,436.2 ms); the scan proves the optimum, solving 25 of the 25 splits below it."""
    from benchmarks.scaling import build
    p = build(2, 1, 16, 24, "moe", "tight")
    opt = exact_optimum(p).best
    dp = path_dp_bound(p).bound_ms
    r = SS.split_scan_bound(p)
    assert SplitScan().applies(p, 1) and not SplitScan().applies(p, 2)
    assert r.best.step_ms == pytest.approx(opt.step_ms, rel=1e-12)
    assert dp == pytest.approx(8979.18, abs=0.01) and opt.step_ms == pytest.approx(9436.18, abs=0.01)
    assert r.bound_ms > opt.step_ms * (1 - 1e-9) and r.complete
