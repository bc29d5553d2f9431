"""The wrap-pair DP bound (autotune.tuner.bounds.wrap_dp): its two-stage paths are paths of the
dependency graph (never longer than a layout's simulated step time; on pp 2 the pair is the whole
graph, so the longest one is the step time), the bound is never above the enumerated optimum
(random two-kind problems with head and tail times, both interleaved schedules, negative static
deltas, p2p > 0, seq_split_num 1), and it is pinned on the dense loose P16 V2 m64 L128 problem of
``benchmarks/scaling.py`` whose unbalanced layouts have a wrap ping-pong critical path."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from autotune.cost.simulate import compile_schedule
from autotune.tuner.bounds.device_dp import device_dp_bound
from autotune.tuner.bounds.wrap_dp import WrapDP, pair_lengths, two_stage_paths, wrap_dp_bound
from autotune.tuner.bounds._base import BoundContext
from autotune.tuner.exact import exact_optimum
from tests.search.test_exact_bounds import _random_problem
from tests.search.test_stage_dp import VPP_CASES, small_vpp_problem


def _durations(problem, V, layers):
    """Forward / backward ms [V, P] per micro-batch of a layout without recompute."""
    z = np.zeros_like(layers)
    c = problem.costs(V, layers[None], z[None], z[None], z[None])
    return c.fwd_ms[0], c.bwd_ms[0]


def _pair_value(problem, V, layers):
    """Σ over the stages off the pair (P-1, 0) of F + B, plus the longest kept two-stage path on
    the pair (ms): a lower bound on the layout's step time by the module's argument."""
    cs = compile_schedule(problem.schedule, problem.P, V, problem.m, problem.seq_split_num)
    f, b = _durations(problem, V, layers)
    tp = two_stage_paths(cs, problem.P - 1, 0)
    G = pair_lengths(tp, f[:, -1][None], b[:, -1][None], f[:, 0][None], b[:, 0][None], problem.pa.p2p_ms)
    off = float(f[:, 1:-1].sum() + b[:, 1:-1].sum())
    return off + float(G[0, 0])


@pytest.mark.parametrize("sched", ["1f1b", "1f1b_less_memory"])
@pytest.mark.parametrize("P, V, N", [(2, 2, 8), (3, 2, 9), (4, 2, 12), (3, 3, 12), (4, 3, 14)])
def test_two_stage_paths_are_below_the_step_time(sched: str, P: int, V: int, N: int) -> None:
    """For random layouts (no recompute: the bound's G drops replay) the pair value is <= the
    simulated step time; on pp 2 both stages are the pair, every path is a walk of it, and the
    value equals the step time."""
    rng = np.random.default_rng(P * 100 + V * 10 + N)
    problem = _random_problem(int(rng.integers(0, 1000)), N, P, V, ("full",), 10.0, schedule=sched)
    lo, _ = problem.bounds(V)
    for _ in range(12):
        layers = lo.copy()
        for _ in range(N - int(lo.sum())):
            layers[rng.integers(0, V), rng.integers(0, P)] += 1
        z = np.zeros_like(layers)
        step = float(problem.evaluate(V, layers[None], z[None], z[None], z[None]).step_ms[0])
        val = _pair_value(problem, V, layers)
        assert val <= step * (1 + 1e-9)
        if P == 2:
            assert val == pytest.approx(step, rel=1e-9)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(**VPP_CASES)
@example(seed=20, N=4, P=2, V=2, kinds=("full",), tight=1.0, sched="1f1b", sdelta=False)
def test_wrap_dp_never_exceeds_enumerated_optimum(seed, N, P, V, kinds, tight, sched, sdelta) -> None:
    """With the optimum and a looser incumbent as ``upper_ms`` the bound is <= the exact optimum
    of the enumerated space (two layer kinds, head and tail times, p2p in [0, 0.3] ms, random
    negative static deltas)."""
    problem, V = small_vpp_problem(seed, N, P, V, kinds, tight, sched, sdelta)
    best = exact_optimum(problem).best
    if best is None:
        return
    opt = best.step_ms
    for ub in (opt, opt * 1.5):
        b = wrap_dp_bound(problem, V, upper_ms=ub)
        assert b is not None
        assert b.bound_ms <= opt * (1 + 1e-9)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10_000), P=st.integers(3, 4), V=st.integers(2, 3), extra=st.integers(0, 3),
       tight=st.floats(0.7, 1.3), sched=st.sampled_from(["1f1b", "1f1b_less_memory"]))
def test_wrap_dp_more_stages(seed, P, V, extra, tight, sched) -> None:
    """pp 3-4 (stages off the pair, so the no-skip rule decides which chains are kept), full
    recompute only (small enumerations): the bound is <= the enumerated optimum."""
    N = P * V + extra
    problem = _random_problem(seed, N, P, V, ("full",), tight, schedule=sched)
    best = exact_optimum(problem).best
    if best is None:
        return
    for ub in (best.step_ms, best.step_ms * 1.5):
        assert wrap_dp_bound(problem, V, upper_ms=ub).bound_ms <= best.step_ms * (1 + 1e-9)


def test_lower_ms_stops_early_and_stays_a_bound() -> None:
    """With a proven ``lower_ms`` at or above what it can reach the threshold search stops early;
    the value is still <= the optimum (and the LowerBound wrapper passes it through)."""
    problem = _random_problem(5, 10, 3, 2, ("full",), 1.0)
    best = exact_optimum(problem).best
    full = wrap_dp_bound(problem, 2, upper_ms=best.step_ms)
    early = wrap_dp_bound(problem, 2, upper_ms=best.step_ms, lower_ms=best.step_ms)
    assert early.evals <= full.evals
    assert early.bound_ms <= best.step_ms * (1 + 1e-9)
    out = WrapDP().bound(problem, 2, BoundContext(upper_ms=best.step_ms))
    assert out.bound_ms == pytest.approx(full.bound_ms)
    assert WrapDP().bound(problem, 2, BoundContext()) is None  # no incumbent: no proof



def test_a_deadline_is_kept() -> None:
    """Past its deadline the wrap-pair DP starts nothing (it ran 3.5-4 s past a 1 s deadline on a
    pp 32 × vpp 4 × m 256 config, its tables built without one); with its tables built and a
    deadline it cannot reach, the threshold search keeps what its open intervals prove: still a
    bound, never above the untimed value."""
    import time

    from autotune.tuner.bounds import wrap_dp as Wm

    problem = _random_problem(5, 10, 3, 2, ("full",), 1.0)
    best = exact_optimum(problem).best
    full = wrap_dp_bound(problem, 2, upper_ms=best.step_ms)
    assert wrap_dp_bound(_random_problem(6, 10, 3, 2, ("full",), 1.0), 2, upper_ms=best.step_ms,
                         deadline=time.monotonic() - 1.0) is None
    late = {"now": False}  # the set-up (tables, pair DP) in time, the threshold search past the deadline
    real, real_search = Wm.time.monotonic, Wm._threshold_search

    def search(*args, **kwargs):
        late["now"] = True
        return real_search(*args, **kwargs)

    Wm.time.monotonic = lambda: 10.0 if late["now"] else 0.0
    Wm._threshold_search = search
    try:
        cut = wrap_dp_bound(problem, 2, upper_ms=best.step_ms, deadline=5.0)
    finally:
        Wm.time.monotonic, Wm._threshold_search = real, real_search
    assert cut is not None and cut.evals <= 2 and cut.bound_ms <= full.bound_ms + 1e-9
    assert cut.bound_ms <= best.step_ms * (1 + 1e-9)

def _dense_loose():
    from pathlib import Path

    from autotune.cost.inputs import ProfileArrays
    from autotune.profile.schema import load_profile
    from autotune.tuner.problem import Problem, even_layers

    root = Path(__file__).resolve().parents[2]
    prof = load_profile(root / "benchmarks/data/telechat2_115b_profile.yaml").with_num_layers(128)
    pa = ProfileArrays.from_profile(prof)
    probe = Problem(pa, P=16, m=64, vpp_candidates=[2])
    even = even_layers(128, 16, 2)[None]
    z = np.zeros_like(even)
    none = probe.evaluate(2, even, z, z, z, memory_only=True).peak_mib.max()
    return Problem(pa, P=16, m=64, hbm_mib=float(1.05 * none), vpp_candidates=[2])


def test_dense_loose_p16_v2() -> None:
    """``scaling.py --only "P16 V2 m64 L128 dense loose"`` (loose: no recompute). Every stage
    holding 2 + 6 layers (one 7 on stage 3, 5 on stage 15) simulates to 40,494.88 ms and its
    critical path ping-pongs between stages 15 and 0 with the other stages run once: the pair
    value is exactly that. With the search's answer (32,037.29 ms) as incumbent the device DP
    proves 31,017.96 ms and this bound 31,126.23 ms (both end stages are forced near balance)."""
    problem = _dense_loose()
    layers = np.array([[2] * 16, [6, 6, 6, 7] + [6] * 11 + [5]])
    z = np.zeros_like(layers)
    step = float(problem.evaluate(2, layers[None], z[None], z[None], z[None]).step_ms[0])
    assert step == pytest.approx(40494.88, abs=0.01)
    assert _pair_value(problem, 2, layers) == pytest.approx(step, rel=1e-9)
    upper = 32037.29
    assert device_dp_bound(problem, 2, upper_ms=upper, joint_work=0).bound_ms == pytest.approx(31017.96, abs=0.01)
    assert wrap_dp_bound(problem, 2, upper_ms=upper).bound_ms == pytest.approx(31126.23, abs=0.01)


@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.integers(2, 4), st.integers(2, 3), st.integers(2, 6), st.integers(0, 10_000))
def test_pair_lengths_table_equals_one_pair_at_a_time(P, V, m, seed):
    """The [Ma, Mb] table (its walks reuse a few preallocated tables) equals the same DP run on each
    configuration pair alone (1 × 1 tables; to 1e-12: einsum sums a batch in another order, a last
    bit), and past its deadline it returns None."""
    if m < P:
        m = P
    m -= m % P
    cs = compile_schedule("1f1b", P, V, m, 1)
    tp = two_stage_paths(cs, P - 1, 0)
    rng = np.random.default_rng(seed)
    Fa, Ba = rng.uniform(0.5, 3, (5, V)), rng.uniform(1, 6, (5, V))
    Fb, Bb = rng.uniform(0.5, 3, (4, V)), rng.uniform(1, 6, (4, V))
    G = pair_lengths(tp, Fa, Ba, Fb, Bb, 0.3)
    for i in range(5):
        for j in range(4):
            g = pair_lengths(tp, Fa[i:i + 1], Ba[i:i + 1], Fb[j:j + 1], Bb[j:j + 1], 0.3)
            assert g[0, 0] == pytest.approx(G[i, j], rel=1e-12)
    assert pair_lengths(tp, Fa, Ba, Fb, Bb, 0.3, deadline=0.0) is None
