"""Kicks out of a local optimum, each followed by the local search: an iterated local search
(pure numpy, no Optuna).

:func:`~autotune.tuner.heuristic.local_search` stops where no single move and no pair of the
best single moves is faster. On memory-tight interleaved problems the better layouts are often
many moves away: they keep each device's layers and *shear* them between its chunks, fewer in
chunk 0 and more in the last chunk on the first devices and the reverse on the last ones
(the first devices keep more chunk-0 micro-batches alive, so there a layer costs less memory in
the last chunk). Measured on ``benchmarks/scaling.py`` (P V m L): P16 V2 m64 L128 dense tight,
the 1-opt answer 34,524.5 ms (chunk 0 / chunk 1 = 4 / 4 layers on every device) against 33,731.6
(3 / 5 on devices 0-8, 4 / 4, then 5 / 3 on the last); P16 V2 m64 L128 MoE tight 23,027.8 against
22,467.4 ms.

A round scores every shear of the incumbent (:func:`shear_splits`) and :data:`KICK_RANDOM` random
kicks (2-5 single-layer moves from a seeded generator, so the same problem gets the same kicks),
touched stages re-fitted; the local search runs from the best of them, and the incumbent moves to
its end point when that is faster. The search stops after :data:`KICK_PATIENCE` rounds without a
faster layout (or the patience the caller gives: :func:`kick_patience`), :data:`KICK_ROUNDS`
rounds, at the target step time or at the deadline; an
interleaved answer then gets the recompute polish (:func:`~autotune.tuner.heuristic.
polish_recompute`).
"""

from __future__ import annotations

import time

import numpy as np

from autotune.tuner.fit import RecomputeFit, fit_cache, search_fit
from autotune.tuner.heuristic import local_search, polish_recompute
from autotune.tuner.moves import GivenSplits, lazy_scan
from autotune.tuner.problem import Candidate, Problem, better, rank_order

#: Most rounds of one kick search (a work cap, not a clock: deterministic); a longer patience
#: gets up to twice its rounds.
KICK_ROUNDS = 8
#: Rounds in a row without a faster layout before the kick search stops (its default).
KICK_PATIENCE = 1
#: :func:`kick_patience`, the patience a caller can give a search whose certified gap is far from
#: its target: KICK_PATIENCE_OPS / ops rounds for a schedule of ops = 2·V·P·m (forwards and
#: backwards of every micro-batch on every mini-stage), between KICK_PATIENCE and
#: KICK_MAX_PATIENCE (a work cap by the problem's size, not a clock: deterministic). A round on a
#: short schedule is cheap (~0.1 CPU s on pp 4 × vpp 4 × m 8) and the better layouts can sit
#: several failed rounds away: YiZhao-12B 8k's vpp 4 layout 13,371.6 ms stays put with patience
#: 1-8 and reaches 13,020.2 ms with 16 (3.5 CPU s). It was 4,096 (patience 1 from pp 16 × vpp 2 ×
#: m 64 on): scaling.py's P16 V2 m64 L128 MoE loose row stayed at 19,076.4 ms (certified gap
#: 4.09 %) with patience 1-4 and reaches 18,760.8 (2.37 %) with 8 (1.8 CPU s); its answer had
#: come from a lucky integer-program seed before (18,776.2, 2.45 %). At 32,768 a search with a wide
#: gap gets 8 rounds on 4,096 ops and 1 from pp 32 × vpp 2 × m 256 on.
KICK_PATIENCE_OPS = 32768
KICK_MAX_PATIENCE = 16
#: Random kicks scored per round, besides the shears.
KICK_RANDOM = 32
#: Moves per local search from a kick (:func:`~autotune.tuner.heuristic.local_search`'s
#: ``max_iters``).
KICK_ITERS = 40


def shear_splits(problem: Problem, cand: Candidate) -> np.ndarray:
    """int [B, V, P]: the shears of ``cand``'s split, each device's layer total kept. For every
    q in 1..P-1 and both directions: on devices p < q one layer moves from chunk 0 to the last
    chunk (or back), on devices p >= P - q one moves the other way, or both at once; shears that
    break a mini-stage's layer bounds are left out. Empty for V = 1."""
    V, P = cand.V, problem.P
    if V < 2:
        return np.zeros((0, V, P), dtype=np.int64)
    lo, hi = problem.bounds(V)
    out = []
    for q in range(1, P):
        early = np.zeros((V, P), dtype=np.int64)
        early[0, :q], early[V - 1, :q] = -1, 1
        late = np.zeros((V, P), dtype=np.int64)
        late[0, P - q:], late[V - 1, P - q:] = 1, -1
        for d in (early, late, early + late):
            for s in (d, -d):
                lay = cand.layers + s
                if (lay >= lo).all() and (lay <= hi).all():
                    out.append(lay)
    return np.unique(np.asarray(out, dtype=np.int64).reshape(-1, V, P), axis=0)


def random_kicks(problem: Problem, cand: Candidate, n: int, rng: np.random.Generator) -> np.ndarray:
    """int [<= n, V, P]: ``n`` random kicks of ``cand``'s split, each 2-5 single-layer moves
    between uniformly drawn mini-stages (a move that would break a layer bound is skipped; kicks
    that move nothing are dropped)."""
    V, P = cand.V, problem.P
    lo, hi = problem.bounds(V)
    out = []
    for _ in range(n):
        lay = cand.layers.copy()
        for _ in range(int(rng.integers(2, 6))):
            a = (int(rng.integers(V)), int(rng.integers(P)))
            b = (int(rng.integers(V)), int(rng.integers(P)))
            if a != b and lay[a] > lo[a] and lay[b] < hi[b]:
                lay[a] -= 1
                lay[b] += 1
        if not np.array_equal(lay, cand.layers):
            out.append(lay)
    return np.asarray(out, dtype=np.int64).reshape(-1, V, P)


def kick_patience(problem: Problem, V: int) -> int:
    """A longer patience for :func:`kick_search` on a layout of ``V`` (:data:`KICK_PATIENCE_OPS`):
    :data:`KICK_PATIENCE` on long schedules, up to :data:`KICK_MAX_PATIENCE` on short ones."""
    ops = 2 * V * problem.P * problem.m
    return int(min(KICK_MAX_PATIENCE, max(KICK_PATIENCE, KICK_PATIENCE_OPS // ops)))


def kick_search(problem: Problem, start: Candidate, *, target_ms: float | None = None,
                deadline: float | None = None, seed: int = 0, patience: int | None = None) -> Candidate:
    """The iterated local search of the module docstring from ``start`` (scored, fitting the
    budget). Returns the fastest fitting layout found (``start`` itself when none is faster; its
    origin ends in ``+kick``). Touched stages are re-fitted exactly
    (:func:`~autotune.tuner.fit.search_fit`: edge chunks weighted when interleaved).

    Args:
        problem: the tuning problem. start: the incumbent.
        target_ms: stop once a layout at or below this step time (ms) is found (the certified-gap
            target: bound × (1 + gap)).
        deadline: time.monotonic() limit, checked before every round and local search.
        seed: the kicks' generator seed (same seed, same kicks).
        patience: rounds in a row without a faster layout before it stops (default
            :data:`KICK_PATIENCE`); it runs at most max(KICK_ROUNDS, 2 × patience) rounds.
    """
    fit: RecomputeFit = search_fit(start.V)
    memo = fit_cache(problem)
    rng = np.random.default_rng(seed)
    best, idle = start, 0
    patience = KICK_PATIENCE if patience is None else max(1, int(patience))

    def done() -> bool:
        return ((target_ms is not None and best.step_ms <= target_ms)
                or (deadline is not None and time.monotonic() > deadline))

    for _ in range(max(KICK_ROUNDS, 2 * patience)):
        if idle >= patience or done():
            break
        splits = np.concatenate([shear_splits(problem, best), random_kicks(problem, best, KICK_RANDOM, rng)])
        sc = (lazy_scan(problem, best, GivenSplits(np.unique(splits, axis=0)), 1, fit=fit, memo=memo)
              if len(splits) else None)
        if sc is None:
            break
        i = int(rank_order(sc.step_ms, sc.excess_mib(problem))[0])
        c = local_search(problem, sc.candidate(problem, i, f"{start.origin}+kick"), max_iters=KICK_ITERS,
                         deadline=deadline, fit=fit)
        if better(c, best):
            c.origin = f"{start.origin}+kick"
            best, idle = c, 0
        else:
            idle += 1
    if best is not start and best.V > 1 and not done():
        pol = polish_recompute(problem, best)
        if better(pol, best):
            pol.origin = f"{start.origin}+kick"
            best = pol
    return best
