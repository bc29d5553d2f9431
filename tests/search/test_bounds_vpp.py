"""The V > 1 lower bound (Lagrangian over dependency-graph paths with critical-path column
generation) against exhaustive enumeration, for both interleaved schedules and p2p > 0; the
critical path's length equals the simulated step time; the exact oracle's work budget."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from autotune.cost.inputs import stage_costs
from autotune.cost.simulate import compile_schedule, simulate
from autotune.tuner.bounds import critical_path, lower_bound
from autotune.tuner.exact import SIM_UNIT_OPS, ExactBudgetExceeded, exact_optimum
from tests.search.test_exact_bounds import _random_problem


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10_000), N=st.integers(4, 7), P=st.integers(2, 3),
       kinds=st.sampled_from([("full",), ("full", "select", "comm"), ("select",)]),
       tight=st.floats(0.6, 1.3), sched=st.sampled_from(["1f1b", "1f1b_less_memory"]))
def test_vpp2_bound_never_exceeds_enumerated_optimum(seed, N, P, kinds, tight, sched) -> None:
    """V = 2, p2p drawn in [0, 0.3] ms, Megatron and less-memory interleaving: the bound (with and
    without the optimum's own critical path in the family) is <= the enumerated optimum."""
    if 2 * P > N:
        P = 2
    assert_bound_below_optimum(_random_problem(seed, N, P, 2, kinds, tight, schedule=sched), iters=200)


def assert_bound_below_optimum(problem, iters: int) -> None:
    """The V > 1 bound, with and without the optimum's own critical path in its path family, is
    <= the enumerated optimum (vacuous when nothing fits)."""
    res = exact_optimum(problem)
    if res.best is None:
        return  # nothing fits: any bound is vacuously valid
    opt = res.best.step_ms
    assert lower_bound(problem, upper_ms=opt, iters=iters).bound_ms <= opt * (1 + 1e-9)
    assert lower_bound(problem, upper_ms=opt, iters=iters, layouts=[res.best]).bound_ms <= opt * (1 + 1e-9)


@pytest.mark.parametrize("sched", ["1f1b", "1f1b_less_memory"])
def test_critical_path_length_is_the_step_time(sched: str) -> None:
    """The longest path's counts reproduce the simulated step time of the same durations."""
    problem = _random_problem(7, 8, 2, 2, ("full",), 1.0, schedule=sched)
    layers = np.array([[[1, 2], [3, 2]]])
    rec = np.array([[[1, 0], [0, 1]]])
    z = np.zeros_like(layers)
    costs = stage_costs(problem.pa, layers, rec, z, z)
    cs = compile_schedule(sched, 2, 2, problem.m)
    step = float(simulate(cs, costs, problem.pa.p2p_ms).step_ms[0])
    length, cf, cb, hops, cw = critical_path(cs, costs.fwd_ms[0], costs.bwd_ms[0], problem.pa.p2p_ms)
    assert not cw.any()  # no W ops outside B/W-split schedules
    assert length == pytest.approx(step, rel=1e-12)
    rebuilt = (cf * costs.fwd_ms[0]).sum() + (cb * costs.bwd_ms[0]).sum() + hops * problem.pa.p2p_ms
    assert rebuilt == pytest.approx(step, rel=1e-9)
    # a path holds at most every op once: 2·m·V·P ops in all
    assert cf.sum() + cb.sum() <= 2 * problem.m * 2 * 2


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 10_000), P=st.integers(2, 4), V=st.integers(1, 3), k=st.integers(1, 3),
       scale=st.sampled_from([1 / 3, 3.0, 7.0, 1e-3, 1e3]), sched=st.sampled_from(["1f1b", "1f1b_less_memory"]))
def test_critical_path_chain_is_scale_invariant(seed, P, V, k, scale, sched) -> None:
    """Durations drawn from k values (so chains tie in exact arithmetic): multiplying every
    duration and the p2p latency by one constant gives the same chain (counts and hops), and the
    chain's rebuilt length is the longest path's within REL_TOL per op (near-ties go to the
    data edge, not to float rounding)."""
    rng = np.random.default_rng(seed)
    vals = rng.uniform(0.5, 3.0, size=k)
    fwd = vals[rng.integers(0, k, size=(V, P))]
    bwd = 2.0 * vals[rng.integers(0, k, size=(V, P))]
    p2p = float(vals[0]) * 0.1
    cs = compile_schedule(sched, P, V, 2 * P)
    a = critical_path(cs, fwd, bwd, p2p)
    b = critical_path(cs, fwd * scale, bwd * scale, p2p * scale)
    assert np.array_equal(a.cf, b.cf) and np.array_equal(a.cb, b.cb) and a.hops == b.hops
    assert b.length == pytest.approx(a.length * scale, rel=1e-12)
    rebuilt = (a.cf * fwd).sum() + (a.cb * bwd).sum() + a.hops * p2p
    assert rebuilt == pytest.approx(a.length, rel=1e-9)


def test_exact_work_budget_falls_back() -> None:
    """8 layers, 2 stages, V 1-4 (all runnable), full/select/comm, tight memory: the enumeration
    stops at its work budget (2,000 units; it needs more) instead of running to the end, and the
    solver path (bound_and_seeds) still answers with a finite bound and feasible seeds. (12 layers
    with a 20,000-unit budget took ~25 CPU s, nearly all in the V 3 and 4 bounds, for the same
    check.)"""
    from autotune.tuner.problem import runnable_vpp
    from autotune.tuner.solve import bound_and_seeds

    problem = _random_problem(3, 8, 2, 1, ("full", "select", "comm"), 0.7)
    problem = dataclasses.replace(problem, vpp_candidates=runnable_vpp(8, 2, problem.m, "1f1b", [1, 2, 3, 4]))
    assert problem.vpp_candidates == (1, 2, 3, 4)
    with pytest.raises(ExactBudgetExceeded) as exc:
        exact_optimum(problem, max_work=2_000)
    assert exc.value.work > 2_000
    import autotune.tuner.solve as solve

    old = solve.EXACT_MAX_WORK
    solve.EXACT_MAX_WORK = 2_000
    try:
        bs = bound_and_seeds(problem, [])
    finally:
        solve.EXACT_MAX_WORK = old
    assert not bs.exact and bs.notes and "exact enumeration skipped" in bs.notes[0]
    assert np.isfinite(bs.bound_ms) and bs.bound_ms > 0
    fits = [c.step_ms for c in bs.seeds if c.excess_mib <= 0]
    assert fits and min(fits) >= bs.bound_ms * (1 - 1e-9)


def test_exact_budget_refuses_a_split_whose_picks_exceed_it_before_simulating() -> None:
    """32 layers on pp 16 × vpp 2 (528 splits, most with one layer a mini-stage): every stage keeps
    several Pareto-minimal recompute picks, so the first split's product over 16 stages is far above
    the budget. The enumeration raises before simulating any layout (work = the splits' lower bound
    and that split's stage tables only); it used to simulate batches until the budget ran out
    (pp 64 × vpp 2 × m 64: 430 CPU s)."""
    from autotune.tuner.problem import count_splits

    problem = _random_problem(2, 32, 16, 2, ("full", "select", "comm"), 0.6)
    problem = dataclasses.replace(problem, vpp_candidates=[2])
    n = count_splits(problem)
    assert n == 528, n
    with pytest.raises(ExactBudgetExceeded, match="layouts for one split") as exc:
        exact_optimum(problem, max_work=1_500_000)
    # one simulated batch (512 layouts, SIM_UNIT_OPS ops a unit) would charge more than all of this
    per_layout = max(1, compile_schedule(problem.schedule, 16, 2, problem.m).num_ops // SIM_UNIT_OPS)
    assert exc.value.work < n + 16 * 64 < 512 * per_layout


def test_exact_projection_gives_up_after_the_first_split() -> None:
    """scaling.py's pp 16 × vpp 2 × m 64 × 32 layers dense tight row (528 splits; 4,096 ops a
    layout, 16 units each): every split keeps 4,608-9,216 picks, each under the budget alone, so
    the per-split check lets them through, and without the projection the enumeration simulated
    14 splits (101,376 layouts, 1,477,212 units, ~9 CPU s) before the budget stopped it. With it,
    after the first split (9,216 layouts, 148,409 units charged) 452 more splits are below the
    incumbent: 452 × 9,216 × 16 = 66.7 M units against 4 × the 1,351,591 left, so it stops there."""
    from benchmarks.scaling import build

    problem = build(16, 2, 64, 32, "dense", "tight")
    with pytest.raises(ExactBudgetExceeded, match="projected: 452 splits left") as exc:
        exact_optimum(problem, max_work=1_500_000)
    assert exc.value.work == 148_409


def test_exact_projection_keeps_every_run_that_its_budget_finishes() -> None:
    """On random problems small enough to finish (pp 2-4, vpp 1-3, 8 micro-batches, full / select
    / comm, budget 0.7 × the even split's peak), the enumeration given exactly the work it needs
    (``max_work`` = the units of the run without a budget, the tightest budget that lets it
    finish) still finishes with the same optimum and work: the projection did not end a run that
    would have finished. (The same held on 360 such problems during the round, and on 300 random
    pp 2-6 problems at budgets of 20,000 and 150,000 units, none ended by the projection alone.)"""
    for seed, (N, P, V) in enumerate(((12, 2, 2), (10, 2, 3), (14, 4, 2), (9, 3, 1), (16, 4, 2), (12, 4, 1))):
        problem = _random_problem(seed, N, P, V, ("full", "select", "comm"), 0.7, m=8)
        free = exact_optimum(problem)
        capped = exact_optimum(problem, max_work=free.work)
        assert free.best is not None and capped.best is not None
        assert capped.best.step_ms == free.best.step_ms and capped.work == free.work


def test_one_pipeline_stage_runs_only_vpp_1() -> None:
    """P = 1: no bubble for interleaving to shorten, so V = 1 alone when it is a candidate (a
    V > 1 only tied it to the last float digit, and the search answered vpp 4); an explicit list
    without 1 is kept; P = 2 keeps its candidates."""
    from autotune.tuner.problem import runnable_vpp

    assert runnable_vpp(32, 1, 1, "1f1b", [1, 2, 3, 4]) == [1]
    assert runnable_vpp(32, 1, 4, "1f1b", [4, 2, 1]) == [1]
    assert runnable_vpp(32, 1, 4, "1f1b", [2, 3]) == [2, 3]
    assert runnable_vpp(32, 2, 4, "1f1b", [1, 2, 3, 4]) == [1, 2, 3, 4]


def test_a_one_stage_config_is_answered_exactly_with_vpp_1(tmp_path) -> None:
    """The shipped GLM4-9B config with pipeline_stage 1 (and 120 GB, as it needs ~101.5 GB even
    with full recompute): one split per V = 1, so the search enumerates it (exact, certified gap
    0) and answers pp_interleave_num 1 (the default space lists 1-4)."""
    import yaml

    from autotune.tuner.search import run_search

    cfg = yaml.safe_load(open("examples/real_configs/05_glm4_9b.yaml", encoding="utf-8"))
    cfg["parallel_config"]["pipeline_stage"] = 1
    cfg["context"]["max_device_memory"] = "120GB"
    path = tmp_path / "glm4_pp1.yaml"
    path.write_text(yaml.safe_dump(cfg), encoding="utf-8")
    out = run_search(path, timeout=60)
    assert out.exact and out.certified_gap == 0.0
    assert out.best is not None and out.best.layout.layers_vp.shape == (1, 1)  # [V][P]: vpp 1
