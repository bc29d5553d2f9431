"""Neighbours that cannot be faster are not simulated (issue 17: the study's scans on pp 64 ×
vpp 2 × m 512). The step time is a max-plus recurrence over the op durations, so a layout whose
every op duration is >= another's is never faster (``moves.never_faster``); ``scan(beat=True)``
skips those and must find exactly the neighbours better than the base that the full scan finds."""

from __future__ import annotations

from contextlib import contextmanager

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from autotune.tuner.fit import stage_options
from autotune.tuner import moves
from autotune.tuner.moves import OneOptMoves, RecomputeTrades, StageTrades, _simulate_pruned, never_faster, scan
from autotune.tuner.problem import REL_TOL, Candidate, better, even_layers
from tests.search.test_exact_bounds import _random_problem
from tests.search.test_one_opt import _two_stage


def test_more_recompute_is_never_faster_by_hand() -> None:
    """Two stages, 2 layers each, m 4: full recompute on one more layer of stage 1 adds 1 ms of
    replay to its backward (never faster, and the simulation agrees: slower); moving a layer from
    stage 1 to stage 0 shortens stage 1 (may be faster: simulated)."""
    pr = _two_stage()
    z = np.zeros((1, 2), dtype=np.int64)
    base = pr.score([Candidate(1, np.array([[2, 2]]), z.copy(), z.copy(), z.copy())])[0]
    more = Candidate(1, np.array([[2, 2]]), np.array([[0, 1]]), z.copy(), z.copy())
    moved = Candidate(1, np.array([[3, 1]]), z.copy(), z.copy(), z.copy())
    costs = pr.costs(1, *(np.stack([getattr(c, a) for c in (more, moved)]) for a in ("layers", "rec", "sel", "com")))
    assert never_faster(pr, 1, costs, base).tolist() == [True, False]
    pr.score([more, moved])
    assert more.step_ms > base.step_ms
    assert (costs.bwd_ms[0, 0, 1] - pr.costs(1, *(getattr(base, a)[None] for a in ("layers", "rec", "sel", "com")))
            .bwd_ms[0, 0, 1]) == 1.0


@contextmanager
def _one_row_blocks():
    """Recompute-trade scans simulate one row at a time, so every slow row prunes the rest
    (:func:`~autotune.tuner.moves._simulate_pruned`; with the default blocks a small problem's
    rows are all simulated in the first)."""
    old = moves.PRUNE_BLOCK
    moves.PRUNE_BLOCK = 1
    try:
        yield
    finally:
        moves.PRUNE_BLOCK = old


def _improving(problem, base, sc) -> list[tuple]:
    out = []
    for i in range(len(sc.step_ms)):
        c = sc.candidate(problem, i)
        if better(c, base):
            out.append((tuple(c.layers.ravel()), tuple(c.rec.ravel()), tuple(c.sel.ravel()),
                        tuple(c.com.ravel()), c.step_ms))
    return out


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(seed=st.integers(0, 10_000), N=st.integers(4, 10), P=st.integers(2, 3), V=st.integers(1, 2),
       tight=st.floats(0.7, 1.3), sched=st.sampled_from(["1f1b", "zero_bubble_v", "gpipe"]))
def test_screened_scans_find_the_same_improving_neighbours(seed, N, P, V, tight, sched) -> None:
    """Random problems and schedules (split backward included), from a fitting start: the 1-opt
    and recompute-trade scans with ``beat=True`` give the same better neighbours, with the same
    step times, as without; no screened neighbour is faster than the base by more than
    :data:`~autotune.tuner.problem.REL_TOL` (the screen's margin, what ``better`` asks for): one
    that ties it can simulate one ulp below it (seed 7765, N 9, P 3, V 2, zero_bubble_v: 122.822895430
    ms for both)."""
    assume(P * V <= N and (sched != "zero_bubble_v" or V == 2))
    pr = _random_problem(seed, N, P, V, ("full", "select", "comm"), tight, schedule=sched, m=2 * P)
    L = even_layers(N, P, V)
    base = pr.score([Candidate(V, L, L.copy(), np.zeros_like(L), np.zeros_like(L))])[0]
    assume(base.peak_mib <= pr.hbm_mib)
    nbhds = [OneOptMoves(fitting_only=True)]
    opts = stage_options(pr, base, 50)
    nbhds += [RecomputeTrades(((s, opts[s]),)) for s in range(P) if opts[s] is not None]
    live = [s for s in range(P) if opts[s] is not None]
    nbhds += [RecomputeTrades(((s, opts[s][:6]), (t, opts[t][:6]))) for s, t in zip(live, live[1:])]
    for nb in nbhds:
        with _one_row_blocks():
            full, fast = scan(pr, base, nb), scan(pr, base, nb, beat=True)
        if full is None:
            assert fast is None
            continue
        assert _improving(pr, base, full) == _improving(pr, base, fast)
        skipped = ~np.isfinite(fast.step_ms)
        assert (full.step_ms[skipped] >= base.step_ms * (1.0 - REL_TOL)).all()


def test_pruned_simulation_leaves_out_rows_above_a_slow_one_by_hand() -> None:
    """Two stages, layers [2, 2], m 4; three recompute choices for stage 1: none, full on one
    layer, full on both (each adds 1 ms of replay per layer to stage 1's backward, nothing else).
    Simulated one at a time in increasing floor with every row counted slow (``thr`` 0 ms), the
    first (none) is simulated and the two others, whose stage-1 durations are >= it, are not; with
    ``thr`` +inf nothing is slow and all three are simulated, each to its own step time."""
    pr = _two_stage()
    lay = np.array([[[2, 2]]] * 3)
    rec = np.array([[[0, 0]], [[0, 1]], [[0, 2]]])
    z = np.zeros_like(lay)
    costs = pr.costs(1, lay, rec, z, z)
    full = pr.score_costs(1, costs)
    assert list(full.step_ms) == sorted(full.step_ms) and full.step_ms[0] < full.step_ms[2]
    floor = np.array([1.0, 2.0, 3.0])
    with _one_row_blocks():
        for thr, simulated in ((0.0, [0]), (np.inf, [0, 1, 2])):
            step, peak = np.full(3, np.inf), np.full((3, 2), np.inf)
            _simulate_pruned(pr, 1, costs, np.arange(3), floor, thr, [(slice(0, 3), (1,))], step, peak)
            assert np.flatnonzero(np.isfinite(step)).tolist() == simulated
            assert step[simulated].tolist() == full.step_ms[simulated].tolist()
            assert (peak[simulated] == full.peak_mib[simulated]).all()


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(seed=st.integers(0, 10_000), N=st.integers(4, 10), P=st.integers(2, 3), V=st.integers(1, 2),
       tight=st.floats(0.7, 1.3), sched=st.sampled_from(["1f1b", "zero_bubble_v"]))
def test_stage_trades_are_the_stages_trades_in_one_batch(seed, N, P, V, tight, sched) -> None:
    """:class:`StageTrades` holds each stage's :class:`RecomputeTrades` rows in turn (the same
    layouts, step times and peaks unscreened), and screened with ``beat`` each stage's rows give
    the same better neighbours as that stage's own screened scan, in one batch or in a batch per
    stage (the pruning's groups then cut at the batches' edges)."""
    assume(P * V <= N and (sched != "zero_bubble_v" or V == 2))
    pr = _random_problem(seed, N, P, V, ("full", "select", "comm"), tight, schedule=sched, m=2 * P)
    L = even_layers(N, P, V)
    base = pr.score([Candidate(V, L, L.copy(), np.zeros_like(L), np.zeros_like(L))])[0]
    assume(base.peak_mib <= pr.hbm_mib)
    opts = stage_options(pr, base, 50)
    trades = tuple((s, opts[s]) for s in range(P) if opts[s] is not None)
    assume(trades)
    nb = StageTrades(trades)
    for beat, per_batch in ((False, moves.TRADE_BATCH), (True, moves.TRADE_BATCH), (True, 1)):
        with _one_row_blocks(), pytest.MonkeyPatch.context() as mp:
            mp.setattr(moves, "TRADE_BATCH", per_batch)  # 1: a batch per stage
            whole = scan(pr, base, nb, beat=beat)
        for sl, t in zip(nb.segments(), trades):
            one = scan(pr, base, RecomputeTrades((t,)), beat=beat)
            part = whole.part(sl)
            if beat:
                assert _improving(pr, base, part) == _improving(pr, base, one)
            else:
                assert all((a == b).all() for a, b in zip(part.layouts, one.layouts))
                assert part.step_ms.tolist() == one.step_ms.tolist()
                assert (part.peak_mib == one.peak_mib).all()


def test_stage_trades_batches_give_each_batch_its_own_groups() -> None:
    """With a batch per stage (``TRADE_BATCH`` 1) the pruned simulation of each batch gets that
    batch's stage and rows only, counted from the batch's first row."""
    pr = _random_problem(11, 8, 2, 2, ("full", "select", "comm"), 1.0, m=4)
    L = even_layers(8, 2, 2)
    base = pr.score([Candidate(2, L, L.copy(), np.zeros_like(L), np.zeros_like(L))])[0]
    opts = stage_options(pr, base, 50)
    trades = tuple((s, opts[s]) for s in range(2) if opts[s] is not None)
    assert len(trades) == 2 and base.peak_mib <= pr.hbm_mib
    seen = []

    def record(problem, V, costs, rows, floor, thr, groups, step, peak, deadline=None):
        seen.append([(g.start, g.stop, st) for g, st in groups])
        _simulate_pruned(problem, V, costs, rows, floor, thr, groups, step, peak, deadline=deadline)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(moves, "TRADE_BATCH", 1)
        mp.setattr(moves, "_simulate_pruned", record)
        scan(pr, base, StageTrades(trades), beat=True)
    assert seen == [[(0, len(c), (s,))] for s, c in trades]
