"""Last-stage pair DP lower bound for pp_interleave_num > 1 (pure numpy, no Optuna; issue 17).

Why. The stage DP (:mod:`autotune.tuner.bounds.stage_dp`) prices the paths that stay on one stage,
exactly over integer splits, and on the dense rows of ``benchmarks/scaling.py`` that family is
spent: its relaxed optima fit at layouts whose every one-stay path is short but whose step is
long. On those layouts the longest paths with two stays have one of them on the last stage
(``benchmarks/stay_families.py --pairs``): a long walk along the last stage's program, the
backward chain of one micro-batch down to another stage p, and the end of p's program (its
cooldown), or the same in the other order.

Paths. For a stage p < L = P − 1 and (first, second) = (L, p) or (p, L): enter an op x of the first
stage through x's dependency chain, walk the first stage's program from x to an op y, follow y's
data dependents to the first op x' of the second stage they reach, walk the second stage's
program from x' to y' and leave through the ops that depend on y'. x ranges over the first op
and the first forward / backward of each chunk, y over every op, y' over the last op and the last
forward / backward of each chunk (:func:`pair_shapes`). Every edge is a dependency edge of the
event simulation (cost-model reference §6.1), so every layout's step time is >= such a path's
length.

Length, bounded below with the stage DP's relaxations (the cheapest layer kinds' least sums,
recompute classes free per layer, each stage's least replay that fits its memory rows):
- on p and on L, the exact op counts (the chains' ops there included) at the configuration's
  forward / backward ms, and replay at least max(E × the stay's fewest backward ops of a chunk,
  max over chunks v of the stay's chunk-v backward ops × the least chunk-v replay that fits);
- on the other stages, per region (the stages before p; those between p and L) and chunk, the
  least count over the region's stages times the region's layers of that chunk at the relaxed
  layer's ms: the chunk-0 layers before p are the stage DP's C0, the others before p are s − C0
  (s: layers placed before p), the last-chunk layers between p and L are the DP's R less L's, the
  others N − s − n_p − n_L less those; the head's ms at its exact count; and each region's least
  backward count times the least replay of its stages (min-plus convolutions over the stages'
  least replay per layer count: before p a function of s, between p and L of N − s − n_p − n_L).
Rows of one (direction, x, y') with the same region coefficients keep the largest value over y.

DP. The stage DP's threshold DP (state (s, last-chunk layers still to place), value "fewest
chunk-0 layers placed"), with the last stage's configuration c_L fixed: a pair row of stage p is
then one more path of p whose threshold on C0 depends on s as well as R (its coefficients on s and
R may have any sign; the one on C0 is >= 0, so fewer C0 is never worse and the DP stays exact for
the relaxed problem). T is feasible when the DP of some c_L reaches (N, 0); bisection between the
V's bound so far and the incumbent gives the bound (the last infeasible T, a proof at any stop).
A c_L whose every row constant and own path length is >= another's with the same DP move is
dropped. Work: per threshold and c_L, the rows × configurations × reached states of each stage
(:data:`WORK` caps the sum; deterministic).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from autotune.cost.dominance import pareto_mask
from autotune.cost.simulate import CompiledSchedule
from autotune.tuner.bounds._base import BoundContext, BoundOutcome
from autotune.tuner.bounds._paths import data_children, dependency_chain, stage_paths
from autotune.tuner.bounds._relax import IntegerSetup, count_vectors, integer_setup, row_frontiers
from autotune.tuner.bounds.stage_dp import (StageLengths, _least_replay, _rooms, _screen, _stage_configs,
                                            other_replay, stage_lengths)
from autotune.tuner.problem import Problem

#: Work cap: Σ over thresholds, last-stage configurations and stages of pair rows × configurations
#: × reached states (array elements, ~5 ns each); past it the bisection stops (its last infeasible
#: threshold is the bound).
WORK = 3e8
#: Shape cap: pair paths (rows before merging) over all stages, at most; a larger schedule is not
#: priced (None): pp 64 × vpp 2 × m 512 (6.5 M) took 15 CPU s and 320 MiB, pp 16 × vpp 2 × m 512
#: (1.5 M) 3.5 s, both for no rise; pp 16 × vpp 2 × m 256 (0.77 M) takes ~1 s.
MAX_SHAPES = 1_000_000
#: Work cap of the rows' constants: Σ over stages of pair paths × configurations × last-stage
#: configurations (array elements, ~5 ns each); a larger problem is not priced (None).
ROWS_WORK = 2e8
#: Array elements of one block of the DP step's row thresholds (rows × configurations × reached
#: states; a few temporaries of this size live at once).
STEP_ELEMENTS = 4_000_000
#: Array elements per block when a row's constant is maximised over its paths.
ROWS_CHUNK = 2_000_000
#: The bound runs only where the V's certified gap is over this (below the search's default gap
#: target there is nothing to gain).
MIN_GAP = 0.005


@dataclass(frozen=True)
class PairShapes:
    """Pair paths of a stage p and the pivot stage A (the first or the last; module docstring), one
    row per path: op counts on p and on A on_p, on_A float [J, 2 (F, B), V] (divided by
    ``seq_split_num``, the chains' ops there included), cross-stage hops [J], the off-pair chains'
    counts of the head's mini-stage (0, 0) and of the tail's (V − 1, P − 1), head, tail [J, 2 (F, B)]
    (0 where that stage is p or A), per region the least count counts [J, 4, 2 (F, B)] — chunk 0 of
    the stages before p (A0), their other chunks (A1, capped at A0), the last chunk of the stages
    after p (BL), their other chunks (B0) — and the least backward count before p (kb) and after
    p (km). The regions leave A out: before p are the stages [0, p) for A = P − 1 and [1, p) for
    A = 0, after p the stages (p, P − 1) and (p, P − 1] respectively."""

    on_p: np.ndarray
    on_A: np.ndarray
    hops: np.ndarray
    head: np.ndarray
    tail: np.ndarray
    counts: np.ndarray
    kb: np.ndarray
    km: np.ndarray


def _own(cs: CompiledSchedule, order: list[int]) -> np.ndarray:
    """float [len + 1, 2, V]: op counts of the first t ops of a stage's program."""
    c = np.zeros((len(order) + 1, 2, cs.V))
    for t, o in enumerate(order):
        c[t + 1] = c[t]
        c[t + 1, 0 if cs.fwd[o] else 1, cs.chunk[o]] += 1
    return c


def _anchors(cs: CompiledSchedule, order: list[int], first: bool) -> list[int]:
    """Positions in a stage's program: the first (last) op and the first (last) forward and
    backward of each chunk."""
    at = {0 if first else len(order) - 1}
    for v in range(cs.V):
        for want in (True, False):
            seq = [t for t, o in enumerate(order) if bool(cs.fwd[o]) == want and cs.chunk[o] == v]
            if seq:
                at.add(seq[0] if first else seq[-1])
    return sorted(at)


def _regions(off: np.ndarray, before: range, after: range) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Off-pair counts off float [J, 2, V, P] -> (per-region least counts [J, 4 (A0, A1, BL, B0),
    2 (F, B)], least backward count over the stages ``before`` [J] and ``after`` [J]); a region
    without stages counts 0. A1 is capped at A0 so that the C0 coefficient A0 − A1 stays >= 0."""
    J, _, V, _ = off.shape
    out = np.zeros((J, 4, 2))
    kb = np.zeros(J)
    km = np.zeros(J)
    if len(before):
        sl = slice(before.start, before.stop)
        low = off[:, :, :, sl].min(axis=3)  # [J, 2, V]
        out[:, 0] = low[:, :, 0]
        out[:, 1] = np.minimum(low[:, :, 1:].min(axis=2), out[:, 0]) if V > 1 else low[:, :, 0]
        kb = off[:, 1, :, sl].min(axis=(1, 2))
    if len(after):
        sl = slice(after.start, after.stop)
        low = off[:, :, :, sl].min(axis=3)
        out[:, 2] = low[:, :, V - 1]
        out[:, 3] = low[:, :, :V - 1].min(axis=2)
        km = off[:, 1, :, sl].min(axis=(1, 2))
    return out, kb, km


def regions(P: int, p: int, pivot: int) -> tuple[range, range]:
    """The stages before and after p that a pair row of (p, pivot) prices by region (pivot left
    out: module docstring)."""
    L = P - 1
    return (range(1 if pivot == 0 else 0, p), range(p + 1, P if pivot == 0 else L))


def pair_shapes(cs: CompiledSchedule, p: int, pivot: int | None = None) -> PairShapes:
    """The pair paths of stage p and the pivot stage (the last by default, or the first; module
    docstring), both directions.

    Raises:
        ValueError: a pivot other than 0 / P − 1, or p equal to it or out of range."""
    P, V = cs.P, cs.V
    L = P - 1
    A = L if pivot is None else pivot
    if A not in (0, L) or not 0 <= p < P or p == A:
        raise ValueError(f"stage {p}, pivot {pivot}: give a pivot 0 or P - 1 = {L} and another stage p < P")
    before, after = regions(P, p, A)
    child = data_children(cs)
    fwd, chunk, stage = cs.fwd, cs.chunk, cs.stage
    on_p, on_A, hops, head, tail, cnt, kbs, kms = [], [], [], [], [], [], [], []
    for a, b in ((A, p), (p, A)):
        oa, ob = [int(x) for x in cs.order[a]], [int(x) for x in cs.order[b]]
        pos_b = {o: t for t, o in enumerate(ob)}
        own_a, own_b = _own(cs, oa), _own(cs, ob)
        ys, xs_b, mids, mh = [], [], [], []
        # y -> the first op of b along its dependents: the chain follows y's unit through the
        # pipeline positions, so its ops and the position it reaches depend on y's (direction,
        # chunk) only; walked once per class, then y's own unit's op there
        walks: dict[tuple[bool, int], tuple[tuple[bool, int] | None, np.ndarray, int]] = {}
        unit_op = {(int(cs.mb[o]), bool(fwd[o]), int(chunk[o])): o for o in ob}
        for ty, y in enumerate(oa):
            cls = (bool(fwd[y]), int(chunk[y]))
            if cls not in walks:
                C = np.zeros((2, V, P))
                h, z = 0, y
                while z in child:
                    z = child[z]
                    h += int(cs.cross[z])
                    if stage[z] == b:
                        break
                    C[0 if fwd[z] else 1, chunk[z], stage[z]] += 1
                walks[cls] = (((bool(fwd[z]), int(chunk[z])) if z != y and stage[z] == b else None), C, h)
            to, C, h = walks[cls]
            if to is None:
                continue
            z = unit_op.get((int(cs.mb[y]),) + to)
            if z is None:
                continue
            ys.append(ty)
            xs_b.append(pos_b[z])
            mids.append(C)
            mh.append(h)
        if not ys:
            continue
        ys_a, xs_a = np.array(ys), np.array(xs_b)
        mids_a, mh_a = np.array(mids), np.array(mh, dtype=np.float64)
        for tx in _anchors(cs, oa, True):
            Ce, he = dependency_chain(cs, child, oa[tx], True)
            for tyy in _anchors(cs, ob, False):
                sel = np.flatnonzero((ys_a >= tx) & (xs_a <= tyy))
                if sel.size == 0:
                    continue
                Cx, hx = dependency_chain(cs, child, ob[tyy], False)
                off = Ce[None] + mids_a[sel] + Cx[None]  # [J, 2, V, P], the chains' ops on a and b too
                first = own_a[ys_a[sel] + 1] - own_a[tx] + off[:, :, :, a]
                second = own_b[tyy + 1] - own_b[xs_a[sel]] + off[:, :, :, b]
                reg, kb, km = _regions(off, before, after)
                on_p.append(first if a == p else second)
                on_A.append(second if a == p else first)
                hops.append(he + hx + mh_a[sel])
                head.append(off[:, :, 0, 0] if 0 not in (p, A) else np.zeros((sel.size, 2)))
                tail.append(off[:, :, V - 1, L] if L not in (p, A) else np.zeros((sel.size, 2)))
                cnt.append(reg)
                kbs.append(kb)
                kms.append(km)
    if not on_p:
        z = np.zeros((0, 2, V))
        return PairShapes(z, z, np.zeros(0), np.zeros((0, 2)), np.zeros((0, 2)), np.zeros((0, 4, 2)), np.zeros(0),
                          np.zeros(0))
    k = cs.k
    return PairShapes(np.concatenate(on_p) / k, np.concatenate(on_A) / k, np.concatenate(hops),
                      np.concatenate(head) / k, np.concatenate(tail) / k, np.concatenate(cnt) / k,
                      np.concatenate(kbs) / k, np.concatenate(kms) / k)


def _chunk_replay(problem: Problem, su: IntegerSetup, p: int, nv: np.ndarray) -> np.ndarray:
    """float [M, V] ms: for configurations nv int [M, V] of stage p, the least replay of chunk v
    alone over the recompute choices that fit every memory row (0 where none is priced finite: the
    configurations kept all fit)."""
    V = nv.shape[1]
    fr = row_frontiers(problem)
    rows, room = _rooms(problem, su, p, nv)
    out = np.zeros((nv.shape[0], V))
    for v in range(V):
        w = np.zeros(V)
        w[v] = 1.0
        e = _least_replay(problem, p, fr, nv, rows, room, w)
        out[:, v] = np.where(np.isfinite(e), e, 0.0)
    return out


def _stay_ms(su: IntegerSetup, p: int, sl: StageLengths, Ev: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """float [M, J] ms of stays on stage p with op counts [J, 2, V], for its configurations ``sl``
    (least replay E) and least chunk replay Ev [M, V]: forward and backward ms (the layer kinds'
    least sums and the head / tail) and the replay bound of the module docstring."""
    fv = su.mix.fwd(sl.nv) + su.end_fwd_ms[:, p]  # [M, V]
    bv = su.mix.bwd(sl.nv) + su.end_bwd_ms[:, p]
    cB = counts[:, 1]  # [J, V]
    rep = np.maximum(sl.E[:, None] * cB.min(axis=1)[None, :], (Ev[:, None, :] * cB[None, :, :]).max(axis=2))
    return fv @ counts[:, 0].T + bv @ cB.T + rep


def _min_plus(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """(a ⊕ b)[k] = min_i a[i] + b[k − i] over float [N + 1] arrays (+inf: no way)."""
    n = a.size
    out = np.full(n, np.inf)
    for i in np.flatnonzero(np.isfinite(a)):
        np.minimum(out[i:], a[i] + b[:n - i], out=out[i:])
    return out


@dataclass
class _Rows:
    """Stage p's pair rows for every last-stage configuration: const float [G, M, M_L] ms and per
    row the coefficients on s (cS), C0 (c0 >= 0), R (cR), the least replay before p (kb) and
    between p and L (km)."""

    const: np.ndarray
    cS: np.ndarray
    c0: np.ndarray
    cR: np.ndarray
    kb: np.ndarray
    km: np.ndarray


def _unique_rows(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(distinct rows of a C-contiguous float [J, d] array, int [J]: each row's index among them),
    by the rows' bytes (a 1-D sort; ``np.unique(axis=0)`` sorts column by column, ~50 × slower
    on 100,000 rows). Rows must not hold -0.0 (add 0.0 first)."""
    v = a.view(np.dtype((np.void, a.dtype.itemsize * a.shape[1]))).ravel()
    _, first, inv = np.unique(v, return_index=True, return_inverse=True)
    return a[first], inv.reshape(-1)


def _pair_rows(problem: Problem, su: IntegerSetup, p: int, A: int, sh: PairShapes, sl: StageLengths,
               sA: StageLengths, Ev: np.ndarray, EvA: np.ndarray) -> _Rows:
    """Stage p's :class:`_Rows` for the pivot stage A (module docstring): rows with the same region
    coefficients merged, keeping the largest constant over their paths. The regions' layer counts
    in terms of the DP's state (s layers placed before p, C0 of them in chunk 0, R last-chunk
    layers after p) and the pivot's configuration (n_A layers, n0_A in chunk 0, nl_A in the last):
    pivot P − 1: C0, s − C0, R − nl_A, N − s − n_p − n_A − (R − nl_A); pivot 0: C0 − n0_A,
    s − n_A − (C0 − n0_A), R, N − s − n_p − R."""
    lay = su.layer
    N, V, L = problem.N, sA.nv.shape[1], problem.P - 1
    ms = np.array([lay.fwd_ms, lay.bwd_ms])
    coef = sh.counts @ ms  # [J, 4] ms per layer: A0, A1, BL, B0
    pa = problem.pa
    fixed = (sh.hops * su.p2p_ms + sh.head @ np.array([pa.head.fwd_ms, pa.head.bwd_ms])
             + sh.tail @ np.array([pa.tail.fwd_ms, pa.tail.bwd_ms]))  # [J]
    Sp = _stay_ms(su, p, sl, Ev, sh.on_p)  # [M, J]
    SA = _stay_ms(su, A, sA, EvA, sh.on_A)  # [M_A, J]
    key = np.ascontiguousarray(np.concatenate([coef, sh.kb[:, None], sh.km[:, None]], axis=1).round(9) + 0.0)
    keys, inv = _unique_rows(key)
    n_p = sl.nv.sum(axis=1)
    nA, n0A, nlA = sA.nv.sum(axis=1), sA.nv[:, 0], sA.nv[:, V - 1]
    G = keys.shape[0]
    const = np.full((G, n_p.size, nA.size), -np.inf)
    step = max(1, int(ROWS_CHUNK // max(1, n_p.size * nA.size)))
    for t in range(G):
        j_all = np.flatnonzero(inv == t)
        for at in range(0, j_all.size, step):
            j = j_all[at:at + step]
            np.maximum(const[t], (Sp[:, None, j] + SA[None, :, j] + fixed[None, None, j]).max(axis=2), out=const[t])
    A0, A1, BL, B0, kb, km = (keys[:, i][:, None, None] for i in range(6))
    if A == L:
        const += B0 * (N - n_p[None, :, None] - nA[None, None, :]) - (BL - B0) * nlA[None, None, :]
    else:
        const += -(A0 - A1) * n0A[None, None, :] - A1 * nA[None, None, :] + B0 * (N - n_p[None, :, None])
    return _Rows(const, (A1 - B0)[:, 0, 0], (A0 - A1)[:, 0, 0], (BL - B0)[:, 0, 0], kb[:, 0, 0], km[:, 0, 0])


@dataclass
class PairDPBound:
    """Result of :func:`pair_dp_bound`: the bound (ms), thresholds tried, last-stage
    configurations kept and work spent (array elements)."""

    bound_ms: float
    evaluations: int
    last_configs: int
    work: float


def _one_stay_thresholds(T: float, sl: StageLengths, N: int) -> np.ndarray:
    """float [M, N + 1]: per configuration and R (last-chunk layers after the stage) the largest
    C0 that keeps every one-stay path <= T (the stage DP's rule)."""
    coef, grp = np.unique(np.round(np.stack([sl.alpha0, sl.alphaR], axis=1), 9), axis=0, return_inverse=True)
    grp = grp.reshape(-1)
    R = np.arange(N + 1, dtype=np.float64)
    out = np.full((sl.nv.shape[0], N + 1), np.inf)
    for g in range(coef.shape[0]):
        slack = T - sl.lengths[:, grp == g].max(axis=1)[:, None] - coef[g, 1] * R[None, :]
        np.minimum(out, _limit(slack, coef[g, 0]), out=out)
    return out + 1e-9


def _limit(slack: np.ndarray, a0: float | np.ndarray) -> np.ndarray:
    """slack / a0 where a0 > 0; else +inf where slack >= 0 (to 1e-9), -inf elsewhere."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(a0 > 0, slack / np.where(a0 > 0, a0, 1.0), np.where(slack >= -1e-9, np.inf, -np.inf))


def pair_dp_bound(problem: Problem, V: int, *, upper_ms: float, lower_ms: float | None = None,
                  rel_tol: float = 1e-4, work: float = WORK, max_configs: int = 200_000,
                  deadline: float | None = None, pivots: tuple[int, ...] | None = None) -> PairDPBound | None:
    """Lower bound (ms) on the step time of every memory-feasible layout with pp_interleave_num V
    that is faster than ``upper_ms`` (a feasible step time; the result is at most the larger of it
    and ``lower_ms``): the module docstring's DP with the last stage as the pivot (``pivots``: the pivots in turn, each
    bisection starting from the value before it; the first stage, 0, is measured but not run by
    default: docs/search.md). ``lower_ms``: a bound already proven (the first bisection starts
    there).

    Returns :class:`PairDPBound`, or None where the bound does not apply (V != 2, B/W-split
    schedules, P < 3, more count vectors than ``max_configs``, more pair paths than
    :data:`MAX_SHAPES` or more pair-path work than :data:`ROWS_WORK`). Past ``work`` array
    elements or ``deadline`` (time.monotonic()) a bisection stops and its last infeasible
    threshold is returned (a proof).

    Raises:
        ValueError: a pivot other than the first or the last stage."""
    su = integer_setup(problem, V)
    if su is None or V != 2 or problem.P < 3 or not np.isfinite(upper_ms):
        return None
    lay = su.layer
    P, N, m = problem.P, problem.N, problem.m
    L = P - 1
    if pivots is not None and not set(pivots) <= {0, L}:
        raise ValueError(f"pivots {pivots}: give the first (0) or the last stage ({L})")
    cs = su.cs
    cap = float(upper_ms)
    paths = stage_paths(cs, su.p2p_ms)
    lo, hi = problem.bounds(V)
    fb0 = lay.fwd_ms + lay.bwd_ms
    n_cap = min(N, int(cap / (m * fb0)) + 1) if fb0 > 0 else N
    all_vecs = [count_vectors(lo[:, p], np.minimum(hi[:, p], n_cap), min(n_cap, N)) for p in range(P)]
    if sum(len(v) for v in all_vecs) > max_configs:
        return None
    ops = max(len(o) for o in cs.order)  # pair paths: 2 directions × entries × exits × y, per stage
    if 2 * L * ops * len(_anchors(cs, [int(x) for x in cs.order[0]], True)) ** 2 > MAX_SHAPES:
        return None
    fr = row_frontiers(problem)
    screened = _screen(problem, su, paths, fr, all_vecs, cap)
    if screened is None:
        return PairDPBound(cap, 0, 0, 0.0)
    configs = [_stage_configs(problem, su, p, paths[p], fr, vecs, cap) for p, vecs in enumerate(screened)]
    if any(c is None for c in configs):
        return PairDPBound(cap, 0, 0, 0.0)
    H = other_replay(configs, N)
    sls = [stage_lengths(problem, su, p, paths[p], fr, cf, H[p], cap) for p, cf in enumerate(configs)]
    if any(s is None for s in sls):
        return PairDPBound(cap, 0, 0, 0.0)
    Ev = [_chunk_replay(problem, su, p, sl.nv) for p, sl in enumerate(sls)]
    g = np.full((P, N + 1), np.inf)  # least replay per layer count of each stage
    for q, sl in enumerate(sls):
        np.minimum.at(g[q], sl.nv.sum(axis=1), sl.E)
    lo_T = max(float(lower_ms) if lower_ms is not None and np.isfinite(lower_ms) else 0.0, 0.0)
    evals, spent, tried = 0, 0.0, 0
    for A in ((L,) if pivots is None else pivots):
        free = [p for p in range(P) if p != A]
        shapes = {p: pair_shapes(cs, p, A) for p in free}
        if sum(sh.hops.size * sls[p].nv.shape[0] for p, sh in shapes.items()) * sls[A].nv.shape[0] > ROWS_WORK:
            return None if not evals else PairDPBound(lo_T, evals, tried, spent)
        rows = {p: _pair_rows(problem, su, p, A, shapes[p], sls[p], sls[A], Ev[p], Ev[A]) for p in free}
        tabs = {p: tuple(_replay_sum(g, regions(P, p, A)[k], N) for k in range(2)) for p in free}
        keep = _undominated_pivot(sls[A], rows, V)
        dp = _PairThresholdDP(sls, rows, tabs, A, keep, N, V)
        tried += keep.size
        hi_T = cap
        while hi_T - lo_T > rel_tol * hi_T:
            if spent + dp.work > work or (deadline is not None and time.monotonic() > deadline):
                break
            T = 0.5 * (lo_T + hi_T)
            evals += 1
            ok = dp.feasible(T, work - spent, deadline)
            if ok is None:
                break  # the work cap cut this threshold short: not proven either way
            if ok:
                hi_T = T
            else:
                lo_T = T
        spent += dp.work
    return PairDPBound(lo_T, evals, tried, spent)


def _replay_sum(g: np.ndarray, stages: range, N: int) -> np.ndarray:
    """float [N + 1] ms: the least Σ of the stages' least replay per micro-batch over the ways to
    place k layers on ``stages`` (g [P, N + 1]: each stage's least replay per layer count; +inf
    made 0: a count no placement reaches never occurs in a layout that fits)."""
    acc = np.full(N + 1, np.inf)
    acc[0] = 0.0
    for q in stages:
        acc = _min_plus(acc, g[q])
    return np.where(np.isfinite(acc), acc, 0.0)


def _undominated_pivot(sA: StageLengths, rows: dict[int, _Rows], V: int) -> np.ndarray:
    """Indices of the pivot's configurations to try: within a DP move (layers, last-chunk layers,
    chunk-0 layers) one whose own path lengths and every pair row constant are >= another's is
    dropped (the DP of the other is feasible wherever its is)."""
    M = sA.nv.shape[0]
    vec = np.concatenate([sA.lengths] + [r.const.transpose(2, 0, 1).reshape(M, -1) for r in rows.values()], axis=1)
    key = np.stack([sA.nv.sum(axis=1), sA.nv[:, V - 1], sA.nv[:, 0]], axis=1)
    keep: list[int] = []
    for k in np.unique(key, axis=0):
        idx = np.flatnonzero((key == k).all(axis=1))
        keep.extend(idx[pareto_mask(vec[idx])] if idx.size > 1 else idx)
    return np.array(sorted(keep), dtype=np.int64)


class _PairThresholdDP:
    """The module docstring's DP over the stages other than the pivot A, whose configuration is
    fixed (the last stage: after the others; the first: before them), per threshold."""

    def __init__(self, sls: list[StageLengths], rows: dict[int, _Rows], tabs: dict[int, tuple[np.ndarray, np.ndarray]],
                 A: int, pivot_configs: np.ndarray, N: int, V: int) -> None:
        self.sls, self.rows, self.tabs, self.A, self.pivot_configs = sls, rows, tabs, A, pivot_configs
        self.N, self.V, self.P = N, V, len(sls)
        self.work = 0.0
        self.hint = int(pivot_configs[0]) if pivot_configs.size else -1  # last found feasible: tried first
        # per configuration the largest threshold its DP was found infeasible at (feasibility only
        # grows with T, so it is infeasible below it too)
        self.dead: dict[int, float] = {}
        # states before stage p that can still reach (N, 0) (the stage DP's rule)
        ext = np.array([[nv[:, V - 1].min(), nv[:, V - 1].max(), (nv.sum(axis=1) - nv[:, V - 1]).min(),
                         nv.sum(axis=1).max()] for nv in (s.nv for s in sls)])
        suf = np.cumsum(ext[::-1], axis=0)[::-1]
        r = np.arange(N + 1)[None, :]
        left = N - np.arange(N + 1)[:, None]
        self.reach = [(r >= a) & (r <= b) & (left >= r + c) & (left <= d) for a, b, c, d in suf]

    def feasible(self, T: float, work: float, deadline: float | None = None) -> bool | None:
        """Whether the DP of some kept pivot configuration reaches (N, 0) at T; None when the work
        cap or the deadline (time.monotonic()) is passed first."""
        N, V, L, A = self.N, self.V, self.P - 1, self.A
        thr1 = [_one_stay_thresholds(T, s, N) for s in self.sls]
        sA = self.sls[A]
        for i in sorted(self.pivot_configs.tolist(), key=lambda j: j != self.hint):
            if self.dead.get(i, -np.inf) >= T:
                continue
            nt, n0, nl = int(sA.nv[i].sum()), int(sA.nv[i, 0]), int(sA.nv[i, V - 1])
            C0: np.ndarray | None = np.full((N + 1, N + 1), np.inf)
            if A == 0:  # stage 0 first: from (0, r) to (nt, r − nl) where its own paths hold
                R = np.arange(N + 1 - nl)
                ok = thr1[0][i, R] >= 0.0
                C0[nt, R[ok]] = float(n0)
                stages = range(1, L + 1)
            else:
                C0[0, :] = 0.0
                stages = range(L)
            for p in stages:
                C0[~self.reach[p]] = np.inf
                C0 = self._stage(T, p, int(i), C0, thr1[p])
                if C0 is None:
                    break
                if self.work > work or (deadline is not None and time.monotonic() > deadline):
                    return None
            if A == 0:
                done = C0 is not None and np.isfinite(C0[N, 0])
            else:
                done = (C0 is not None and nt <= N and np.isfinite(C0[N - nt, nl])
                        and C0[N - nt, nl] <= thr1[L][i, 0])
            if done:
                self.hint = int(i)
                return True
            self.dead[i] = max(self.dead.get(i, -np.inf), T)
        return False

    def _stage(self, T: float, p: int, i: int, C0: np.ndarray, thr1: np.ndarray) -> np.ndarray | None:
        """The DP step over stage p for pivot configuration i: C0 [N + 1, N + 1] before p -> after
        p (None when no state is left)."""
        N, V = self.N, self.V
        s_f, r_f = np.nonzero(np.isfinite(C0))
        if s_f.size == 0:
            return None
        sl, rw = self.sls[p], self.rows[p]
        nv = sl.nv
        nt, n0, nl = nv.sum(axis=1), nv[:, 0], nv[:, V - 1]
        M = nt.size
        R = r_f[None, :] - nl[:, None]  # [M, F] last-chunk layers after p
        ok = (R >= 0) & (s_f[None, :] + nt[:, None] <= N)
        Rc = np.clip(R, 0, N)
        thr = thr1[np.arange(M)[:, None], Rc]  # [M, F]
        if rw.cS.size:
            nA = int(self.sls[self.A].nv[i].sum())
            before, after = self.tabs[p]
            kb = s_f - (nA if self.A == 0 else 0)  # layers in the region before p
            hb = before[np.clip(kb, 0, N)]  # [F]
            ka = N - s_f[None, :] - nt[:, None] - (nA if self.A != 0 else 0)  # [M, F] layers after p
            ha = np.where(ka >= 0, after[np.clip(ka, 0, N)], 0.0)
            G = rw.cS.size
            step = max(1, int(STEP_ELEMENTS // max(1, M * s_f.size)))  # rows per block: bounded temporaries
            for a in range(0, G, step):
                g = slice(a, min(G, a + step))
                slack = (T - rw.const[g, :, i][:, :, None] - rw.cS[g, None, None] * s_f[None, None, :]
                         - rw.cR[g, None, None] * Rc[None, :, :] - rw.kb[g, None, None] * hb[None, None, :]
                         - rw.km[g, None, None] * ha[None, :, :])  # [rows, M, F]
                np.minimum(thr, _limit(slack, rw.c0[g, None, None]).min(axis=0) + 1e-9, out=thr)
                self.work += slack.size
        src = C0[s_f, r_f]  # [F]
        val = np.where(ok & (src[None, :] <= thr), src[None, :] + n0[:, None], np.inf)  # [M, F]
        new = np.full_like(C0, np.inf)
        np.minimum.at(new, ((s_f[None, :] + nt[:, None])[ok], R[ok]), val[ok])
        return new if np.isfinite(new).any() else None


@dataclass(frozen=True)
class PairDP:
    """:func:`pair_dp_bound` as a :class:`~autotune.tuner.bounds.LowerBound` (V = 2, P >= 3,
    schedules with whole backward ops and chunk-major positions), against the incumbent, where the
    V's certified gap is over :data:`MIN_GAP`."""

    name: str = "pair DP"

    def applies(self, problem: Problem, V: int) -> bool:
        return V == 2 and problem.P > 2 and integer_setup(problem, V) is not None

    def bound(self, problem: Problem, V: int, ctx: BoundContext) -> BoundOutcome | None:
        lo, up = ctx.lower_ms, ctx.upper_ms
        if up is None or not np.isfinite(up) or (lo is not None and lo > 0 and (up - lo) / lo <= MIN_GAP):
            return None
        res = pair_dp_bound(problem, V, upper_ms=up, lower_ms=lo, deadline=ctx.deadline)
        if res is None:
            return None
        return BoundOutcome(res.bound_ms, None, {"evaluations": res.evaluations})
