"""Local searches that improve the solver seeds (pure numpy, no Optuna).

- :func:`local_search`: steepest descent over single-layer moves
  (:class:`~autotune.tuner.moves.SingleLayerMoves`, touched stages re-fitted by a
  :class:`~autotune.tuner.fit.RecomputeFit`) until no move lowers the step time; then a pair-move
  escape (:class:`~autotune.tuner.moves.PairMoves`, or a descent from the best pair moves) and the
  descent goes on.
- :func:`polish_recompute`: coordinate descent on the recompute with the split fixed
  (:class:`~autotune.tuner.moves.RecomputeTrades`), by simulation.
- :func:`finish_one_opt`: steepest descent over the 1-opt neighbourhood
  (:class:`~autotune.tuner.moves.OneOptMoves`, with compound steps: :func:`compound_moves`) to the
  end: no single layer move and no ±1 on one recompute count gives a faster layout that fits
  (:func:`improving_moves` is the check).
"""

from __future__ import annotations

import time

import numpy as np

from autotune.cost.budget import fits
from autotune.cost.simulate import compile_schedule
from autotune.tuner.fit import (GREEDY, PastDeadline, RecomputeFit, check_deadline, clock_block, fit_cache,
                                stage_options)
from autotune.tuner.moves import (GivenSplits, LayoutBatch, LazyScan, PairMoves, RecomputeTrades, Scan,
                                   SingleLayerMoves, floor_paths, lazy_scan, never_faster, one_opt_moves, scan,
                                   step_floor)
from autotune.tuner.params import representable
from autotune.tuner.problem import (REL_TOL, Candidate, Problem, best_of, better, improves, rank_order,
                                    tie_key)

#: When no single-layer move improves, :func:`local_search` scores the pair moves (two single
#: moves at once) among this many best single moves: a work cap of at most
#: PAIR_TOP·(PAIR_TOP + 1)/2 pairs per stall (< 2 turns the escape off).
#: PAIR_TOP·(PAIR_TOP + 1)/2 pairs per stall (< 2 turns the escape off).
PAIR_TOP = 60
#: ... and at most about this many ops simulated per stall (pairs × schedule ops): 1,830 pairs of
#: the 384-op TeleChat2 vpp3 schedule fit; a 256-micro-batch schedule gets ~20 single moves paired.
PAIR_OPS = 1_500_000
#: When no pair move improves either, a single-move descent runs from each of this many best pair
#: moves (kicks); the best end point is taken if it improves.
PAIR_KICKS = 2


def _descend(problem: Problem, best: Candidate, memo: dict, scans: int, deadline: float | None,
             fit: RecomputeFit, top: int = 1) -> tuple[Candidate, int, Scan | None]:
    """Steepest single-move descent from ``best`` (scored) for at most ``scans`` neighbourhood
    scans. Returns (end point, scans used, the last scan when it stopped at a local optimum, else
    None): that scan's first ``top`` neighbours in rank order (what the pair-move escape pairs) are
    those of the full scan, the others may hold step +inf.

    Each scan is a :class:`~autotune.tuner.moves.LazyScan`: a step needs only the best neighbour,
    so neighbours are simulated in increasing step floor until it is known (the same step as
    simulating them all), and the first ``top`` only at a local optimum. On scaling.py's P32 V4
    m256 L256 dense the descents' full scans simulated ~14,000 neighbours, 35 of them improving.

    ``deadline`` is checked before each scan and inside it (per stage fitted, per batch
    simulated): a scan it cuts ends the descent at ``best``."""
    used = 0
    while used < scans:
        if deadline is not None and time.monotonic() > deadline:
            return best, used, None
        try:
            lz = LazyScan(problem, best, SingleLayerMoves(), fit=fit, memo=memo, deadline=deadline)
            if lz.empty:
                return best, used, None
            c = lz.settle(1).scan().best(problem)
            used += 1
            if not better(c, best):
                return best, used, lz.settle(max(1, top)).scan()
        except PastDeadline:
            return best, used, None
        best = c
    return best, used, None


def _pair_top(problem: Problem, V: int, pair_top: int | None) -> int:
    """Single moves paired at a stall: ``pair_top``, or :data:`PAIR_TOP` capped so that the pairs
    simulate at most :data:`PAIR_OPS` ops (256 micro-batches: ~20 pairs)."""
    if pair_top is not None:
        return pair_top
    ops = compile_schedule(problem.schedule, problem.P, V, problem.m, problem.seq_split_num).num_ops
    return min(PAIR_TOP, int(np.sqrt(2.0 * PAIR_OPS / max(ops, 1))))


def local_search(problem: Problem, start: Candidate, *, max_iters: int = 200,
                 deadline: float | None = None, pair_top: int | None = None,
                 kicks: int | None = None, fit: RecomputeFit = GREEDY) -> Candidate:
    """Steepest descent from ``start`` over single-layer moves with re-fitted recompute, with a
    deterministic pair-move escape from local optima.

    A move's touched stages get their recompute re-fitted from zero; other stages keep theirs
    (each distinct touched column is fitted once per problem and remembered). When no single move
    improves: the pair moves (two single moves at once) among the ``pair_top`` best single moves
    are scored and the best is taken if it improves; else a single-move descent runs from each of
    the ``kicks`` best pair moves and the best end point is taken if it improves (a way out of a
    local optimum whose better neighbours are three or more moves away). The descent then goes on
    from the new point.

    Args:
        problem: the tuning problem. start: the starting candidate (scored here if it is not).
        max_iters: most neighbourhood scans (single, pair and kick-descent scans together; a
            plain descent makes one scan per move plus the last one).
        deadline: time.monotonic() limit, checked before every scan and inside it (a scan it
            cuts ends the search at the best layout so far).
        pair_top: single moves paired at a stall (default :data:`PAIR_TOP`; < 2 = no escape).
        kicks: descents from non-improving pair moves (default :data:`PAIR_KICKS`).
        fit: how touched stages get their recompute (default the greedy fit).

    Returns the best candidate found (``start`` itself when nothing improves; step_ms in ms).
    """
    top = _pair_top(problem, start.V, pair_top)
    n_kicks = PAIR_KICKS if kicks is None else kicks
    best = start
    if not np.isfinite(best.step_ms):
        problem.score([best])
    memo = fit_cache(problem)  # fitted touched columns, shared by every scan on this problem
    used = 0

    def late() -> bool:
        return used >= max_iters or (deadline is not None and time.monotonic() > deadline)

    while True:
        end, n, stall = _descend(problem, best, memo, max_iters - used, deadline, fit, top)
        used += n
        if end is not best:
            end.origin = f"{start.origin}+local"
            best = end
        if stall is None or top < 2 or late():
            break
        order = rank_order(stall.step_ms, stall.excess_mib(problem))
        try:
            pairs = lazy_scan(problem, best, PairMoves(singles=stall.layouts.layers, order=order, top=top),
                              max(1, n_kicks), fit=fit, memo=memo, deadline=deadline)
        except PastDeadline:
            break
        if pairs is None:
            break
        c = pairs.best(problem)
        used += 1
        if not better(c, best):
            ends = []
            for k in rank_order(pairs.step_ms, pairs.excess_mib(problem))[:n_kicks]:
                if late():
                    break
                try:
                    kick = scan(problem, best, GivenSplits(pairs.layouts.layers[k:k + 1]), fit=fit, memo=memo,
                                deadline=deadline)
                except PastDeadline:
                    break
                e, n, _ = _descend(problem, kick.best(problem), memo, max_iters - used, deadline, fit, top)
                used += n
                ends.append(e)
            if not ends:
                break
            c = best_of(ends)
            if not better(c, best):
                break
        c.origin = f"{start.origin}+local"
        best = c
    return best


#: :func:`polish_recompute` simulates at most this many fitting recompute combinations per stage
#: (the least-replay ones; a work cap) ...
POLISH_TOP = 3000
#: ... and, for pairs of stages changed together, this many per stage (PAIR² per pair).
POLISH_PAIR_TOP = 20
#: Simulated ops (simulations × the schedule's ops) one :func:`polish_recompute` may spend over
#: its rounds; ``top`` and ``pair_top`` shrink for long schedules (Llama's 256 micro-batches have
#: 32 × more ops than TeleChat2's 8, whose vpp4 polish needs ~5e7 and is not cut).
POLISH_OPS = 6e7


def polish_recompute(problem: Problem, cand: Candidate, *, rounds: int = 3,
                     top: int = POLISH_TOP, pair_top: int = POLISH_PAIR_TOP) -> Candidate:
    """Coordinate descent on ``cand``'s recompute with its split fixed, by simulation.

    The moves (:class:`~autotune.tuner.moves.RecomputeTrades`): one stage's recompute replaced by
    any fitting combination of its chunks' undominated options
    (:func:`~autotune.tuner.fit.stage_options`, the ``top`` least-replay ones), the other stages
    as they are; when no such move is faster, two stages' recompute replaced together (the
    ``pair_top`` least-replay combinations of each, each pair of stages in turn). Each stage's (or
    pair's) moves are simulated at once and the fastest fitting one taken when it is faster. At
    most ``rounds`` passes (a single-stage sweep, then the pair sweep when it gained nothing);
    stops at a pass without gain.
    Returns a scored Candidate (``cand`` itself when nothing improves; every answer fits)."""
    V, P = cand.V, problem.P
    ops = compile_schedule(problem.schedule, P, V, problem.m, problem.seq_split_num).num_ops
    sims = rounds * (P * top + P * (P - 1) // 2 * pair_top ** 2)
    if sims * ops > POLISH_OPS:  # work cap: fewer combinations per stage on long schedules
        f = POLISH_OPS / (sims * ops)
        top, pair_top = max(1, int(top * f)), int(pair_top * f ** 0.5)
    best = cand
    if not np.isfinite(best.step_ms):
        problem.score([best])
    opts = stage_options(problem, cand, top)

    def apply(trades: tuple[tuple[int, np.ndarray], ...]) -> bool:
        """Take the fastest fitting trade when it is faster than ``best``."""
        nonlocal best
        sc = scan(problem, best, RecomputeTrades(trades), beat=True)
        i, step = sc.fastest_fitting(problem)
        if not improves(step, best.step_ms):
            return False
        best = sc.candidate(problem, i, origin=f"{cand.origin}+polish")
        best.layers = cand.layers.copy()
        return True

    live = [p for p in range(P) if opts[p] is not None]
    for _ in range(rounds):
        gained = False
        for p in live:
            gained |= apply(((p, opts[p]),))
        if not gained and pair_top > 0:
            for k, p in enumerate(live):
                for q in live[k + 1:]:
                    gained |= apply(((p, opts[p][:pair_top]), (q, opts[q][:pair_top])))
        if not gained:
            break
    return best


#: :func:`finish_one_opt` stops after this many improving moves (a safety cap; each move lowers the
#: step time, so the descent ends on its own; TeleChat2 and the pp 16 problems take < 30).
ONE_OPT_MAX_MOVES = 500


def improving_moves(problem: Problem, cand: Candidate, *, deadline: float | None = None
                    ) -> tuple[LayoutBatch, np.ndarray]:
    """The moves of the 1-opt neighbourhood (:func:`~autotune.tuner.moves.one_opt_moves`) that fit
    the budget (:func:`~autotune.tuner.problem.fits`) and are faster than ``cand`` (scored;
    :func:`~autotune.tuner.problem.improves`): (their layouts, their step ms [K]). The memory of
    every move is computed first (no simulation); only the fitting ones that may be faster
    (:func:`~autotune.tuner.moves.never_faster`, and a :func:`~autotune.tuner.moves.step_floor`
    under ``cand``'s step time) are simulated. ``deadline`` (time.monotonic()): checked between
    blocks of simulations (:func:`~autotune.tuner.fit.clock_block`); past it
    :class:`~autotune.tuner.fit.PastDeadline` is raised."""
    moves = one_opt_moves(problem, cand)
    V = cand.V
    path = floor_paths(problem, cand)
    keep_l, keep_t = [], []
    for lo in range(0, len(moves.layers), 20_000):
        b = LayoutBatch(*(a[lo:lo + 20_000] for a in moves))
        costs = problem.costs(V, *b)
        ok = fits(problem.memory_peaks(V, costs, near=cand).max(axis=1), problem.hbm_mib)
        if not ok.any():
            continue
        ok &= ~never_faster(problem, V, costs, cand)  # never faster than cand: not simulated
        ok &= step_floor(problem, V, costs, path) < cand.step_ms * (1.0 - REL_TOL)  # nor these
        if not ok.any():
            continue
        sub = LayoutBatch(*(a[ok] for a in b))
        rows = np.flatnonzero(ok)
        step, peak = np.empty(rows.size), np.empty((rows.size, problem.P))
        blk = clock_block(rows.size, deadline)
        for i in range(0, rows.size, blk):
            check_deadline(deadline)
            s = problem.score_costs(V, costs.take(rows[i:i + blk]))  # priced above (the same arrays)
            step[i:i + blk], peak[i:i + blk] = s.step_ms, s.peak_mib
        good = fits(peak.max(axis=1), problem.hbm_mib) & improves(step, cand.step_ms)
        keep_l.append(LayoutBatch(*(a[good] for a in sub)))
        keep_t.append(step[good])
    if not keep_l:
        z = np.zeros((0, V, problem.P), dtype=np.int64)
        return LayoutBatch(z, z, z, z), np.zeros(0)
    return LayoutBatch.concat(keep_l), np.concatenate(keep_t)


def finish_one_opt(problem: Problem, cand: Candidate, *, deadline: float | None = None,
                   max_moves: int = ONE_OPT_MAX_MOVES) -> Candidate:
    """Steepest descent from ``cand`` over the 1-opt neighbourhood (:func:`improving_moves`): the
    fastest improving move that fits and that a trial can write (:func:`~autotune.tuner.params.
    representable`) is taken until there is none, so the answer is 1-opt (issue 17). Each round
    also simulates the best improving moves on distinct devices applied together
    (:func:`compound_moves`) and takes the fastest fitting of those when it beats the single move
    (pp 32 × vpp 4 × m 256 MoE in ``benchmarks/scaling.py``: 23 rounds of one move, 21 CPU s, to
    111,110 -> 106,895 ms; with them 9 s to 101,760 ms). A start that
    does not fit is returned as it is (the descent keeps the budget). ``deadline``
    (time.monotonic()) or ``max_moves`` may stop it early (then the answer is only better).
    Returns a scored Candidate (``cand`` itself when no move improves).

    A layout the descent found 1-opt is remembered in the problem's ``fit_cache`` (key
    ("1opt",) + its :meth:`~autotune.tuner.problem.Candidate.key`), and a later call from it
    returns at once: the search finishes its best layout after the local search and again after
    the kick search and the study, often the same layout (pp 32 × vpp 4 × m 256 dense: a second
    1-opt scan of ~17,000 moves, ~1 CPU s, after a kick search that found nothing). Whether a
    layout is 1-opt depends on the problem and the layout only, so the answer is the same."""
    best = cand
    if not np.isfinite(best.step_ms):
        problem.score([best])
    if not fits(best.peak_mib, problem.hbm_mib) or ("1opt",) + best.key() in problem.fit_cache:
        return best
    origin = best.origin if best.origin.endswith("+1opt") else f"{best.origin}+1opt"
    for _ in range(max_moves):
        if deadline is not None and time.monotonic() > deadline:
            break
        try:
            lay, step = improving_moves(problem, best, deadline=deadline)
        except PastDeadline:
            break  # the clock: best so far, not proven 1-opt
        cands: list[Candidate] = []  # the best improving moves a trial can write, best first
        for i in np.argsort(tie_key(step), kind="stable"):
            c = Candidate(best.V, lay.layers[i].copy(), lay.rec[i].copy(), lay.sel[i].copy(),
                          lay.com[i].copy(), origin=origin)
            if representable(problem, c):
                cands.append(c)
                if len(cands) >= COMPOUND_POOL:
                    break
        if not cands:
            problem.fit_cache[("1opt",) + best.key()] = True
            break
        nxt = problem.score([cands[0]])[0]
        combos = [c for c in compound_moves(best, cands) if representable(problem, c)]
        if combos:
            nxt = best_of([nxt] + [c for c in problem.score(combos) if fits(c.peak_mib, problem.hbm_mib)])
        best = nxt
    return best


#: :func:`compound_moves` combines at most this many improving moves (prefixes of 2, 4, 8, 16) ...
COMPOUND_MAX = 16
#: ... drawn from this many of the best ones (a work cap on building the candidates).
COMPOUND_POOL = 64


def compound_moves(base: Candidate, moves: list[Candidate]) -> list[Candidate]:
    """Improving 1-opt moves of ``base`` applied together: ``moves`` (best first) are taken
    greedily while each touches devices (pipeline stages) no move taken before touches, and the
    layouts holding the first 2, 4, 8 and :data:`COMPOUND_MAX` of them (and all, when fewer) are
    returned, unscored. A device's peak HBM depends only on its own mini-stages, so each device
    of such a layout peaks as in the move that touched it (every move fits); the step time is not
    additive, so the caller simulates them and keeps the fastest. On the deep MoE problems
    the 1-opt descent otherwise takes one move a round (pp 32 × vpp 4 × m 256: 23 rounds of
    ~0.5 CPU s each). [] when fewer than two moves combine."""
    def touched(c: Candidate) -> np.ndarray:  # bool [P]: the devices whose mini-stages c changes
        return ((c.layers != base.layers) | (c.rec != base.rec) | (c.sel != base.sel)
                | (c.com != base.com)).any(axis=0)

    taken: list[tuple[Candidate, np.ndarray]] = []
    used = np.zeros(base.layers.shape[1], dtype=bool)
    for c in moves:
        t = touched(c)
        if not (t & used).any():
            taken.append((c, t))
            used |= t
        if len(taken) >= COMPOUND_MAX:
            break
    out = []
    c = Candidate(base.V, base.layers.copy(), base.rec.copy(), base.sel.copy(), base.com.copy(),
                  origin=taken[0][0].origin if taken else "")
    for k, (m, t) in enumerate(taken, start=1):  # the prefixes of 2, 4, 8, ... and all of them
        for a, b in ((c.layers, m.layers), (c.rec, m.rec), (c.sel, m.sel), (c.com, m.com)):
            a[:, t] = b[:, t]
        if k >= 2 and (k in (2, 4, 8, COMPOUND_MAX) or k == len(taken)):
            out.append(Candidate(c.V, c.layers.copy(), c.rec.copy(), c.sel.copy(), c.com.copy(), origin=c.origin))
    return out
