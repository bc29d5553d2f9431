"""The stage-by-stage threshold DP bound for pp_interleave_num > 1 (autotune.tuner.bounds.stage_dp):
never above the enumerated optimum (random two-kind problems, both interleaved schedules,
negative static deltas, V = 2 and 3), every one-stay path's decomposed length is <= the simulated
step time, and the pinned 48-layer pp5 vpp2 value it raises the certified bound to."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from autotune.profile.schema import load_profile
from autotune.cost.inputs import ProfileArrays, stage_costs
from autotune.cost.simulate import compile_schedule, simulate
from autotune.tuner.exact import exact_optimum
from autotune.tuner.problem import Problem
from autotune.tuner.bounds._paths import stage_paths
from autotune.tuner.bounds._relax import count_vectors
from autotune.tuner.bounds import stage_dp
from autotune.tuner.bounds.device_dp import device_dp_bound
from autotune.tuner.bounds.stage_dp import stage_dp_bound
from tests.search.test_exact_bounds import _random_problem

ROOT = Path(__file__).resolve().parents[2]

#: TeleChat2's layer profile as the search benchmark tunes it (frozen: benchmarks/data/README.md)
FROZEN_TELECHAT2 = Path(__file__).resolve().parents[2] / "benchmarks" / "data" / "telechat2_115b_profile.yaml"


def test_count_vectors_by_hand() -> None:
    """lo (1, 0), hi (3, 2), Σ <= 3: (1,0) (1,1) (1,2) (2,0) (2,1) (3,0)."""
    got = count_vectors(np.array([1, 0]), np.array([3, 2]), 3)
    assert got == [(1, 0), (1, 1), (1, 2), (2, 0), (2, 1), (3, 0)]


#: Hypothesis strategies of the small V > 1 problems both integer bounds (this DP and
#: autotune.tuner.bounds.milp) are checked on against the enumerated optimum.
VPP_CASES = dict(seed=st.integers(0, 10_000), N=st.integers(4, 8), P=st.integers(2, 3), V=st.integers(2, 3),
                 kinds=st.sampled_from([("full",), ("full", "select", "comm"), ("select",)]),
                 tight=st.floats(0.5, 1.3), sched=st.sampled_from(["1f1b", "1f1b_less_memory"]),
                 sdelta=st.booleans())


def small_vpp_problem(seed, N, P, V, kinds, tight, sched, sdelta) -> tuple[Problem, int]:
    """(problem, V) of one VPP_CASES draw, P then V lowered to 2 where P·V > N."""
    if V * P > N:
        P = 2
    if V * P > N:
        V = 2
    return _random_problem(seed, N, P, V, kinds, tight, schedule=sched, static_delta=sdelta), V


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(**VPP_CASES)
def test_stage_dp_bound_never_exceeds_enumerated_optimum(seed, N, P, V, kinds, tight, sched, sdelta) -> None:
    """Two layer kinds (the min-layer relaxation), p2p in [0, 0.3] ms, head and tail, random
    negative static deltas, both interleaved schedules: the bound is <= the exact optimum of the
    enumerated space, with and without that optimum as the incumbent; and the own-stage replay
    weighted per chunk never lowers it (>= the bound without the weighting, ``_unweighted``, up
    to the bisection's tolerance)."""
    problem, V = small_vpp_problem(seed, N, P, V, kinds, tight, sched, sdelta)
    res = exact_optimum(problem)
    if res.best is None:
        return
    opt = res.best.step_ms
    for ub in (opt, None):
        b, old = stage_dp_bound(problem, V, upper_ms=ub), _unweighted(problem, V, upper_ms=ub)
        assert b is not None and old is not None
        assert b.bound_ms <= opt * (1 + 1e-9)
        assert b.bound_ms >= old.bound_ms * (1 - 2e-4)


@pytest.mark.parametrize("sched", ["1f1b", "1f1b_less_memory"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_every_one_stay_path_is_below_the_step_time(sched: str, seed: int) -> None:
    """Decomposed lengths (own counts exact, other stages through the fitted pattern) evaluated
    with a random layout's real durations never exceed its simulated step time; the longest is
    within 15 % of it."""
    rng = np.random.default_rng(seed)
    problem = _random_problem(seed, 12, 3, 2, ("full",), 10.0, schedule=sched)
    layers = rng.integers(1, 4, size=(2, 3))
    layers[0, 0] += 12 - layers.sum()
    if layers[0, 0] < 0:
        layers = np.array([[2, 2, 2], [2, 2, 2]])
    rec = np.minimum(layers, rng.integers(0, 2, size=(2, 3)))
    step, longest = _step_and_longest_path(problem, sched, layers, rec)
    assert longest <= step * (1 + 1e-9)
    assert longest > 0.5 * step  # not vacuous: the paths cover at least a stage's own ops


def _step_and_longest_path(problem: Problem, sched: str, layers: np.ndarray, rec: np.ndarray) -> tuple[float, float]:
    """(simulated step ms, longest decomposed one-stay path ms) of one layout [V, P]; each path
    checked to be <= the step time."""
    V, P = layers.shape
    z = np.zeros_like(layers)
    costs = stage_costs(problem.pa, layers[None], rec[None], z[None], z[None])
    cs = compile_schedule(sched, P, V, problem.m)
    step = float(simulate(cs, costs, problem.pa.p2p_ms).step_ms[0])
    f, b = costs.fwd_ms[0], costs.bwd_ms[0]
    longest = 0.0
    for p, sp in enumerate(stage_paths(cs, problem.pa.p2p_ms)):
        others = np.ones(P, dtype=bool)
        others[p] = False
        for q in range(sp.K.size):
            length = (sp.cF[q] @ f[:, p] + sp.cB[q] @ b[:, p] + sp.K[q]
                      + sp.a_f[q] * f[:, others].sum() + sp.a_b[q] * b[:, others].sum()
                      + sp.c0_f[q] * f[0, :p].sum() + sp.c0_b[q] * b[0, :p].sum()
                      + sp.r_f[q] * f[V - 1, p + 1:].sum() + sp.r_b[q] * b[V - 1, p + 1:].sum())
            assert length <= step * (1 + 1e-9)
            longest = max(longest, length)
    return step, longest


def test_one_stay_paths_are_tight_on_a_searched_layout() -> None:
    """On the layout the search returns for the 48-layer pp5 vpp2 problem ([[4,5,5,5,4],
    [6,6,5,4,4]], no recompute, 6,238.66 ms) the longest decomposed one-stay path is the step
    time itself (the module docstring's claim)."""
    problem = _telechat_48l()
    lay = np.array([[4, 5, 5, 5, 4], [6, 6, 5, 4, 4]])
    step, longest = _step_and_longest_path(problem, "1f1b", lay, np.zeros_like(lay))
    assert step == pytest.approx(6238.66, abs=0.01)
    assert longest == pytest.approx(step, rel=1e-12)


def _telechat_48l() -> Problem:
    from autotune.tuner.inputs import as_config

    cfg = as_config(ROOT / "examples/telechat2_115b/train.yaml")
    prof = load_profile(FROZEN_TELECHAT2).with_num_layers(48)
    return Problem(ProfileArrays.from_profile(prof), P=5, m=10, hbm_mib=cfg.hbm_mib, vpp_candidates=[2])


def test_48_layer_pp5_vpp2_pinned() -> None:
    """The benchmark's 48-layer pp5 vpp2 problem (TeleChat2 layer profile, m 10, 55,808 MiB):
    the Lagrangian bound alone was 5,802 ms; the stage DP proves 5,976.4 ms. The best layout of an
    exhaustive scan without recompute (every mini-stage 2..9 layers), [[4,4,4,6,5],[6,6,6,4,3]],
    runs 6,217.4 ms and fits: the bound is below it, within 4.1 %."""
    problem = _telechat_48l()
    b = stage_dp_bound(problem, 2, upper_ms=6217.4)
    assert b is not None
    assert b.bound_ms == pytest.approx(5976.43, abs=1.0)
    lay = np.array([[[4, 4, 4, 6, 5], [6, 6, 6, 4, 3]]])
    z = np.zeros_like(lay)
    s = problem.evaluate(2, lay, z, z, z)
    assert float(s.step_ms[0]) == pytest.approx(6217.40, abs=0.05)
    assert float(s.peak_mib.max()) <= problem.hbm_mib
    assert b.bound_ms <= float(s.step_ms[0])
    # the relaxed problem's split is a full layout of the 48 layers
    assert b.split is not None and int(b.split.sum()) == 48


def test_not_applicable_cases() -> None:
    """V = 1 (the path DP covers it) and B/W-split zero_bubble_v return None."""
    problem = _random_problem(3, 8, 2, 2, ("full",), 1.0)
    assert stage_dp_bound(problem, 1) is None
    zb = _random_problem(3, 8, 2, 2, ("full",), 1.0, schedule="zero_bubble_v", m=4)
    assert stage_dp_bound(zb, 2) is None


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(**VPP_CASES)
def test_unreachable_states_dropped_change_no_answer(seed, N, P, V, kinds, tight, sched, sdelta) -> None:
    """The DP drops the states that can no longer reach (N, 0) (too few or too many layers or
    last-chunk layers left for the stages after) and moves only the box of the states it holds:
    every feasibility answer of the bisection is the same as over the whole grid, so the bound,
    the number of evaluations and the split are identical."""
    problem, V = small_vpp_problem(seed, N, P, V, kinds, tight, sched, sdelta)
    fast = stage_dp_bound(problem, V)
    init = stage_dp._ThresholdDP.__init__

    def whole_grid(self, tabs, N_, V_):
        init(self, tabs, N_, V_)
        self.reach = [np.ones_like(r) for r in self.reach]
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(stage_dp._ThresholdDP, "__init__", whole_grid)
        slow = stage_dp_bound(problem, V)
    assert fast is not None and slow is not None
    assert (fast.bound_ms, fast.evaluations) == (slow.bound_ms, slow.evaluations)
    assert (fast.split is None) == (slow.split is None)
    if fast.split is not None:
        assert np.array_equal(fast.split, slow.split)


def test_deadline_stops_the_tables_and_keeps_the_bisection_proven(monkeypatch) -> None:
    """The benchmark's 48-layer pp5 vpp2 problem: a deadline already past stops the stage tables
    (None: the caller keeps its other bound); a clock that passes the deadline once the tables
    are built stops the bisection after its first evaluation, at the bound already proven
    (lower_ms 5,900 ms, below the full answer 5,976.4 ms)."""
    problem = _telechat_48l()
    assert stage_dp_bound(problem, 2, upper_ms=6217.4, deadline=0.0) is None
    assert device_dp_bound(problem, 2, upper_ms=6217.4, deadline=0.0) is None
    # the tables' own clock reads (cannot_finish) see no deadline pass; the bisection's does. The
    # one-stay path counts, memoised per schedule, are counted first (as any earlier proof on this
    # schedule has done): under the patched clock they would give up (their own deadline rule)
    stage_dp.stage_paths(stage_dp.integer_setup(problem, 2).cs, 0.0)
    monkeypatch.setattr(stage_dp, "cannot_finish", lambda *a: False)
    monkeypatch.setattr(stage_dp.time, "monotonic", lambda: 2.0)
    cut = stage_dp_bound(problem, 2, upper_ms=6217.4, lower_ms=5900.0, deadline=1.0)
    assert cut is not None and cut.bound_ms == 5900.0 and cut.evaluations == 1
    full = stage_dp_bound(problem, 2, upper_ms=6217.4, lower_ms=5900.0)
    assert full.bound_ms == pytest.approx(5976.43, abs=1.0)


def _configs(*stages):
    """Stage configurations for :func:`stage_dp.other_replay` from (nv rows, E values) pairs."""
    return [stage_dp.StageConfigs(np.array(nv).reshape(-1, 2), np.array(E, float), np.zeros((len(E), 1)))
            for nv, E in stages]


def test_other_replay_by_hand() -> None:
    """Three stages, N = 4. Least replay by layer count g_q[n]: stage 0 {1: 2, 2: 5}, stage 1
    {0: 0, 1: 1, 2: 4 (the least of (2,0) 4 and (1,1) 6)}, stage 2 {1: 3}. H[p, k] = least
    Σ_{q != p} g_q[n_q] with Σ n_q = k: H[0] = g1 ⊕ g2 = [inf, 3, 4, 7, inf]; H[1] = g0 ⊕ g2 =
    [inf, inf, 5, 8, inf]; H[2] = g0 ⊕ g1 = [inf, 2, 3, 6, 9]."""
    cf = _configs(([(0, 1), (1, 1)], [2.0, 5.0]),
                  ([(0, 0), (1, 0), (2, 0), (1, 1)], [0.0, 1.0, 4.0, 6.0]),
                  ([(1, 0)], [3.0]))
    H = stage_dp.other_replay(cf, 4)
    inf = np.inf
    assert np.array_equal(H, np.array([[inf, 3, 4, 7, inf], [inf, inf, 5, 8, inf], [inf, 2, 3, 6, 9]]))


def _without_other_replay(problem, V, **kw):
    """:func:`stage_dp_bound` with the other stages' replay term off (the bound before it) and,
    like :func:`_unweighted`, the own stage's replay weighted by the fewest backward ops of a chunk."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(stage_dp, "other_replay", lambda configs, N: np.zeros((len(configs), N + 1)))
        mp.setattr(stage_dp, "MAX_WEIGHTINGS", 0)
        return stage_dp_bound(problem, V, **kw)


def _unweighted(problem, V, **kw):
    """:func:`stage_dp_bound` with every path's replay on its own stage charged as E × its fewest
    backward ops of a chunk (the term before the chunk weighting, ``MAX_WEIGHTINGS`` = 0)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(stage_dp, "MAX_WEIGHTINGS", 0)
        return stage_dp_bound(problem, V, **kw)


def test_other_stages_replay_raises_the_bound() -> None:
    """A path that runs one backward of every other mini-stage runs their replay too: each other
    stage must fit its own layers, so the least replay of the layers it holds is added. Random
    problem (seed 7, 8 layers, pp 3 × vpp 2, full recompute, budget 0.7 of the no-recompute
    peak): 57.10 ms without that term, 58.72 with it, the enumerated optimum 61.84 ms. On
    scaling.py's P32 V2 m64 L128 dense tight problem (its answer 20,052.8 ms as the incumbent):
    18,826.4 → 19,152.0 ms (certified gap 6.51 → 4.70 %); 19,156.9 ms since the screen
    (``screen_configs``) takes each other stage's least replay over only its configurations that can
    still hold a layout faster than the incumbent. (Both without the chunk-weighted own replay,
    which came later: tests/search/test_chunk_weighted_replay.py.)"""
    problem, V = small_vpp_problem(7, 8, 3, 2, ("full",), 0.7, "1f1b", False)
    opt = exact_optimum(problem).best.step_ms
    old, new = _without_other_replay(problem, V).bound_ms, _unweighted(problem, V).bound_ms
    assert old == pytest.approx(57.10, abs=0.01)
    assert new == pytest.approx(58.72, abs=0.01)
    assert opt == pytest.approx(61.84, abs=0.01)
    import sys
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from scaling import build
    big = build(32, 2, 64, 128, "dense", "tight")
    assert _without_other_replay(big, 2, upper_ms=20052.8).bound_ms == pytest.approx(18826.4, abs=1.0)
    assert _unweighted(big, 2, upper_ms=20052.8).bound_ms == pytest.approx(19156.9, abs=1.0)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(**VPP_CASES)
def test_other_stages_replay_never_lowers_the_bound(seed, N, P, V, kinds, tight, sched, sdelta) -> None:
    """The term only adds to path lengths (and drops configurations whose other stages cannot
    hold the remaining layers): the bound with it is >= the bound without, up to the bisection's
    relative tolerance (1e-4: the two bisections start from different brackets), and both stay
    <= the enumerated optimum (test_stage_dp_bound_never_exceeds_enumerated_optimum)."""
    problem, V = small_vpp_problem(seed, N, P, V, kinds, tight, sched, sdelta)
    new, old = stage_dp_bound(problem, V), _without_other_replay(problem, V)
    assert new is not None and old is not None
    assert new.bound_ms >= old.bound_ms * (1 - 2e-4)


def _count_priced(monkeypatch) -> list[int]:
    """The number of count vectors of each exact least-replay pricing (``worst_row_extra``
    call) of the stage DP, appended as they run."""
    priced: list[int] = []
    real = stage_dp.worst_row_extra

    def counting(fr, nv, rows, room):
        priced.append(len(nv))
        return real(fr, nv, rows, room)
    monkeypatch.setattr(stage_dp, "worst_row_extra", counting)
    return priced


def test_least_replay_is_memoised_per_count_vector(monkeypatch) -> None:
    """The bound passes run the stage DP twice (the second time against a lower incumbent, on a
    subset of the first's count vectors): the second run prices no vector again and gives the
    same bound as on a fresh problem (the benchmark's 48-layer pp5 vpp2 problem, 5,976.4 ms)."""
    priced = _count_priced(monkeypatch)
    problem = _telechat_48l()
    first = stage_dp_bound(problem, 2, upper_ms=6500.0)
    n_first = sum(priced)
    again = stage_dp_bound(problem, 2, upper_ms=6217.4)
    assert n_first > 0 and sum(priced) == n_first  # nothing priced twice
    fresh = stage_dp_bound(_telechat_48l(), 2, upper_ms=6217.4)
    assert again.bound_ms == fresh.bound_ms == pytest.approx(5976.43, abs=1.0)
    assert first.bound_ms <= again.bound_ms * (1 + 2e-4)


def _unscreened(problem, V, **kw):
    """:func:`stage_dp_bound` without its screen (every count vector under the cap priced)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(stage_dp, "screen_configs", lambda problem, su, paths, fr, all_vecs, cap, deadline=None: all_vecs)
        return stage_dp_bound(problem, V, **kw)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(**VPP_CASES)
def test_screen_drops_only_what_cannot_beat_the_cap(seed, N, P, V, kinds, tight, sched, sdelta) -> None:
    """With the enumerated optimum (and 1.05 times it) as the cap, the screened bound is still <=
    the optimum, and >= the unscreened one up to the bisection's tolerance: the screen drops only
    count vectors whose path, every term at its lower bound, is over the cap, so the other
    stages' least replay can only rise."""
    problem, V = small_vpp_problem(seed, N, P, V, kinds, tight, sched, sdelta)
    res = exact_optimum(problem)
    if res.best is None:
        return
    opt = res.best.step_ms
    for cap in (opt, 1.05 * opt):
        new, old = stage_dp_bound(problem, V, upper_ms=cap), _unscreened(problem, V, upper_ms=cap)
        assert new is not None and old is not None
        assert new.bound_ms <= opt * (1 + 1e-9)
        assert new.bound_ms >= old.bound_ms * (1 - 2e-4)


def test_screen_prices_fewer_vectors_on_scaling_p32_vpp2(monkeypatch) -> None:
    """scaling.py's P32 V2 m64 L128 dense tight problem, its answer 20,052.8 ms as the cap: the
    screen leaves 271 of the 304 count vectors that the stage tables priced exactly before, and
    the bound rises from 19,152.0 to 19,156.9 ms (the other stages' least replay over fewer
    configurations; both without the chunk-weighted own replay, ``MAX_WEIGHTINGS`` = 0)."""
    monkeypatch.setattr(stage_dp, "MAX_WEIGHTINGS", 0)
    import sys
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from scaling import build

    priced = _count_priced(monkeypatch)
    new = stage_dp_bound(build(32, 2, 64, 128, "dense", "tight"), 2, upper_ms=20052.8)
    n_new = sum(priced)
    old = _unscreened(build(32, 2, 64, 128, "dense", "tight"), 2, upper_ms=20052.8)
    assert (n_new, sum(priced) - n_new) == (271, 304)
    assert new.bound_ms == pytest.approx(19156.9, abs=1.0)
    assert old.bound_ms == pytest.approx(19152.0, abs=1.0)
