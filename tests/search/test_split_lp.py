"""The split-by-split LP bound (autotune/tuner/bounds/split_lp.py): a bound on every enumerated
space, exact where it closes, its best layout a real fitting one, and the pp 32 × vpp 2 row of
scaling.py it was built for."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import autotune.tuner.bounds.split_lp as SL
from autotune.tuner.bounds import REGISTRY, SplitLP
from autotune.tuner.exact import exact_optimum
from autotune.tuner.problem import Problem, compositions, count_splits_v
from tests.search.test_exact_bounds import _random_problem

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("P,V,N", [(2, 2, 8), (3, 2, 9), (2, 3, 9), (3, 3, 12)])
def test_count_splits_matches_the_enumeration(P: int, V: int, N: int) -> None:
    p = _random_problem(seed=P * 10 + V, N=N, P=P, V=V, kinds=("full",), tight=1.0)
    assert count_splits_v(p, V) == len(SL._splits(p, V)) > 1


class _Bounds:
    """A stand-in problem: only what count_splits_v reads (N, bounds(V), fit_cache)."""

    def __init__(self, N: int, lo: np.ndarray, hi: np.ndarray) -> None:
        self.N, self.lo, self.hi, self.fit_cache = N, lo, hi, {}

    def bounds(self, V: int) -> tuple[np.ndarray, np.ndarray]:
        return self.lo, self.hi


@given(N=st.integers(0, 14), lo=st.lists(st.integers(0, 4), min_size=1, max_size=5),
       width=st.lists(st.integers(-1, 9), min_size=5, max_size=5))
def test_count_splits_equals_the_compositions(N: int, lo: list[int], width: list[int]) -> None:
    """Any per-mini-stage bounds (an empty range, a bound over N): the window-sum DP counts exactly
    the compositions; big counts stay exact Python integers (256 mini-stages of 0..256 layers:
    C(511, 255))."""
    lo_a = np.asarray(lo)
    hi_a = lo_a + np.asarray(width[:len(lo)])
    assert count_splits_v(_Bounds(N, lo_a, hi_a), 1) == len(compositions(N, lo_a, hi_a))
    assert count_splits_v(_Bounds(256, np.zeros(256, int), np.full(256, 256)), 1) == math.comb(511, 255)


CASES = [dict(seed=s, N=n, P=P, V=V, kinds=k, tight=t, static_delta=sd, end_ws=ws)
         for s, (n, P, V, k, t, sd, ws) in enumerate([
             (8, 2, 2, ("full", "select", "comm"), 0.9, False, 0.0),
             (9, 3, 2, ("full", "select"), 0.85, True, 0.0),
             (9, 2, 3, ("full", "select", "comm"), 0.95, False, 1.0),
             (10, 3, 2, ("full", "comm"), 0.8, True, 2.0),
             (8, 2, 2, ("select", "comm"), 1.0, False, 0.0),
             (12, 3, 3, ("full", "select", "comm"), 0.9, False, 0.0),
         ])]


@pytest.mark.parametrize("case", CASES, ids=[f"seed{c['seed']}-P{c['P']}V{c['V']}" for c in CASES])
def test_bound_never_above_and_exact_when_run_to_the_end(case: dict, monkeypatch) -> None:
    """Against the enumerated optimum: the bound is never above it; run without the 0.5 % stop
    (stop_gap 0, the search's ``--gap 0``) and without the LP cap, the bound is the optimum and
    the best layout reaches it."""
    p = _random_problem(**case)
    V = case["V"]
    opt = exact_optimum(p).best
    r = SL.split_lp_bound(p, V)
    assert r is not None and r.splits == count_splits_v(p, V)
    if opt is None:
        assert r.best is None
        return
    assert r.bound_ms <= opt.step_ms * (1 + 1e-9)
    assert r.best is not None and r.best.excess_mib <= 0 and r.best.step_ms >= opt.step_ms * (1 - 1e-9)
    assert r.best.step_ms <= r.bound_ms * (1 + SL.STOP_GAP) + 1e-9
    monkeypatch.setattr(SL, "MAX_LPS", 10**6)
    r0 = SL.split_lp_bound(p, V, stop_gap=0.0)
    assert r0.bound_ms <= opt.step_ms * (1 + 1e-9)
    assert r0.bound_ms >= r.bound_ms * (1 - 1e-12)
    assert r0.exact and r0.best.step_ms == pytest.approx(opt.step_ms, rel=1e-9)


def test_applies_only_to_few_splits_and_whole_backward_schedules() -> None:
    p = _random_problem(seed=3, N=8, P=2, V=2, kinds=("full",), tight=1.0)
    assert SplitLP().applies(p, 2) and not SplitLP().applies(p, 1)
    zbv = _random_problem(seed=4, N=6, P=2, V=2, kinds=("full",), tight=1.0, schedule="zero_bubble_v", m=4)
    assert not SplitLP().applies(zbv, 2)
    big = _random_problem(seed=5, N=64, P=4, V=2, kinds=("full",), tight=1.0)
    assert count_splits_v(big, 2) > SL.MAX_SPLITS and not SplitLP().applies(big, 2)
    assert "split LP" in [b.name for b in REGISTRY[0].proofs]


def _scaling_problem(*spec) -> Problem:
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import scaling  # noqa: PLC0415
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    return scaling.build(*spec)


def test_pp32_vpp2_one_layer_a_mini_stage_is_solved() -> None:
    """scaling.py's P32 V2 m32 L64 dense tight (2,080 splits): run to the end, the bound proves
    6,923.8 ms optimal; the search's layout before this bound was 6,971.2 ms (its exact fit of the
    same split as the optimum's gives 6,990.6) and its bound 6,649.3 (4.84 %)."""
    p = _scaling_problem(32, 2, 32, 64, "dense", "tight")
    r = SL.split_lp_bound(p, 2, stop_gap=0.0)
    assert r.splits == 2080 and r.exact
    assert r.bound_ms == pytest.approx(6923.8, abs=0.05)
    sc = p.evaluate(2, r.best.layers[None], r.best.rec[None], r.best.sel[None], r.best.com[None])
    assert sc.step_ms[0] == pytest.approx(r.best.step_ms) and (sc.peak_mib <= p.hbm_mib).all()
    assert r.best.layers.sum() == 64 and (r.best.layers[:, 1:-1] >= 1).all()


def test_bound_and_seeds_takes_the_split_lp_layout() -> None:
    """The bound's best layout reaches the search as a seed (``BoundOutcome.layouts``)."""
    from autotune.tuner.solve import bound_and_seeds  # noqa: PLC0415

    p = _scaling_problem(32, 2, 32, 64, "dense", "tight")
    bs = bound_and_seeds(p, [])
    mine = [c for c in bs.seeds if c.origin.startswith("split-lp-v2")]
    assert mine and min(c.step_ms for c in mine) <= 6923.8 * 1.005
    assert bs.bound_ms >= 6923.8 / 1.005 - 1e-6


@pytest.mark.parametrize("case", CASES[:3], ids=["c0", "c1", "c2"])
def test_recompute_only_adds_its_replay_to_backwards(case: dict) -> None:
    """What the bound rests on: for every configuration of every stage, the forward ms are the
    no-recompute ones and the backward ms are those plus ``recompute_ms`` (the replay the LP
    prices)."""
    p = _random_problem(**case)
    V = case["V"]
    splits = SL._splits(p, V)[:40]
    cfg = SL._configs(p, V, splits)
    z = np.zeros_like(splits)
    base = p.costs(V, splits, z, z, z)
    checked = 0
    for s in range(len(splits)):
        for q, u in enumerate(cfg.key_id[s]):
            for k, cmb in enumerate(cfg.combos[u]):
                t = np.zeros((3, V, p.P), dtype=np.int64)
                t[:, :, q] = cmb.T
                co = p.costs(V, splits[s][None], t[0][None], t[1][None], t[2][None])
                assert np.allclose(co.fwd_ms[0], base.fwd_ms[s])
                assert np.allclose(co.bwd_ms[0, :, q], base.bwd_ms[s, :, q] + cfg.replay[u][k])
                checked += 1
    assert checked > 0


def test_one_stage_with_many_layers_a_chunk_does_not_apply() -> None:
    """pipeline_stage 1 × vpp 2 with 28 layers has 29 splits but up to ~10^6 recompute
    configurations a stage column (GLM2-6B's corpus config ran 7 minutes and 4.7 GB before this
    cap): not this bound's."""
    p = _random_problem(seed=6, N=28, P=1, V=2, kinds=("full", "select", "comm"), tight=1.0)
    assert count_splits_v(p, 2) <= SL.MAX_SPLITS
    assert not SplitLP().applies(p, 2) and SL.split_lp_bound(p, 2) is None


def test_the_search_gap_reaches_the_bound() -> None:
    """``--gap`` is the pass's stop: with target gap 0 (``autotune search --gap 0``) the search's
    first bound pass proves P32 V2 m32 L64 dense optimal; with the default 0.5 % it stops at
    6,903.2 ms."""
    from autotune.tuner.bounds import BoundContext, tighten  # noqa: PLC0415

    p = _scaling_problem(32, 2, 32, 64, "dense", "tight")
    exact = tighten(p, (SplitLP(),), ctx=BoundContext(target_gap=0.0))
    assert exact.bound_ms == pytest.approx(6923.8, abs=0.05)
    assert exact.layouts[0].step_ms == pytest.approx(6923.8, abs=0.05)
    early = tighten(p, (SplitLP(),), ctx=BoundContext(target_gap=0.005))
    assert early.bound_ms == pytest.approx(6903.2, abs=0.05)


def test_pricing_gives_up_on_a_deadline_it_cannot_meet(monkeypatch) -> None:
    """Past the deadline the split LP prices no stage (None: no proof, the pass's floor or next
    proof takes over); the same call with time proves its bound (GPT-2 52B's pp 16 × vpp 4 priced
    for 9–20 s past a 3 s first pass before)."""
    import time

    p = _random_problem(**CASES[0])
    assert SL.split_lp_bound(p, 2, deadline=time.monotonic() + 3600.0) is not None
    priced = []
    real = SL.stage_configurations
    monkeypatch.setattr(SL, "stage_configurations", lambda *a, **k: priced.append(1) or real(*a, **k))
    assert SL.split_lp_bound(p, 2, deadline=time.monotonic() - 1.0) is None and priced == []
