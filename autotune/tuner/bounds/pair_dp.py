"""Last-stage pair DP lower bound for pp_interleave_num 2 (pure numpy, no Optuna; issue 17).

Why. The stage DP (:mod:`autotune.tuner.bounds.stage_dp`) prices the paths that stay on one stage,
exactly over integer splits, and on the dense rows of ``benchmarks/scaling.py`` that family is
spent: its relaxed optima fit at layouts whose every one-stay path is short but whose step is
long. On those layouts the longest paths with two stays have one of them on the last stage
(``benchmarks/stay_families.py --pairs``): a long walk along the last stage's program, the
backward chain of one micro-batch down to another stage p, and the end of p's program (its
cooldown), or the same in the other order.

Paths. For a stage p < L = P − 1 and (first, second) = (L, p), (p, L) or (p, p), and for stage 0
also (L, L): enter an op x of the first stage through x's dependency chain, walk the first stage's
program from x to an op y, follow y's data dependents to the first op x' of the second stage they
reach, walk the second stage's program from x' to y' and leave through the ops that depend on y'.
x ranges over the first op and the first forward / backward of each chunk, y over every op, y'
over the last op and the last forward / backward of each chunk (:func:`pair_shapes`). With both
stays on one stage the chain from y comes back to that stage later in its program: a forward of
chunk 0 after the later stages' chunk 0 and the earlier stages' chunk 1, a forward of the last
chunk as its own backward after the later stages' forwards and backwards, a backward the other
way. On a split that puts many chunk-0 layers on the middle stages and few on the ends such a
path is the longest (the loose row of ``benchmarks/scaling.py``: the one-stay paths of the DP's
witness 31,375.5 ms, its paths with two stays on stage 0 32,844.0; docs/search.md, the
double-stay round). (L, L) rows
are kept with stage 0 only: its chain passes stage 0 itself and the last chunk of the stages
between, all priced exactly there, while with a later p the chunk-1 layers before p fall out (the
regions' least counts: A1 is capped at A0). Every edge is a dependency edge of the event
simulation (cost-model reference §6.1), so every layout's step time is >= such a path's length.

Length, bounded below with the stage DP's relaxations (the cheapest layer kinds' least sums,
recompute classes free per layer, each stage's least replay that fits its memory rows):
- on p and on L, the exact op counts (the chains' ops there included) at the configuration's
  forward / backward ms, and replay at least t × W(1 − θ, θ) for each θ of :data:`THETAS`, where
  W(w) is the least replay weighted by w over the recompute choices that fit (per memory row)
  and t the largest factor with t·(1 − θ, θ) <= the stay's backward ops per chunk (W is
  homogeneous and nondecreasing in w); θ = 0, 1 give each chunk's least replay, θ = 1/2 the
  stage's least replay E times the stay's fewest backward ops of a chunk;
- on the other stages, per region (the stages before p; those between p and L) and chunk, the
  least count over the region's stages times the region's layers of that chunk at the relaxed
  layer's ms: the chunk-0 layers before p are the stage DP's C0, the others before p are s − C0
  (s: layers placed before p), the last-chunk layers between p and L are the DP's R less L's, the
  others N − s − n_p − n_L less those; the head's ms at its exact count; and each region's least
  backward count times the least replay of its stages (min-plus convolutions over the stages'
  least replay per layer count: before p a function of s, between p and L of N − s − n_p − n_L).
Rows with the same region coefficients (whatever their direction, x, y' and y) are one row with
the largest constant for each pair of configurations (of p and of L); only the paths of a row that
no earlier path of it dominates (as many ops of every kind on p and on L, as many fixed ms) are
priced (:func:`_row_maxima`).

DP. The stage DP's threshold DP (state (s, last-chunk layers still to place), value "fewest
chunk-0 layers placed"), with the last stage's configuration c_L fixed: a pair row of stage p is
then one more path of p whose threshold on C0 depends on s as well as R (its coefficients on s and
R may have any sign; the one on C0 is >= 0, so fewer C0 is never worse and the DP stays exact for
the relaxed problem). T is feasible when the DP of some c_L reaches (N, 0); bisection between the
V's bound so far and the incumbent gives the bound (the last infeasible T, a proof at any stop).
A c_L whose every row constant and own path length is >= another's with the same DP move is
dropped. Each threshold T runs on the configurations that can hold it: one whose own one-stay
paths pass T is dropped, the other stages' least replay is taken again over those left (it can
only rise), to a fixpoint (:meth:`_PairThresholdDP.restricted`); after a feasible T the
bisection keeps that restricted DP. Work: per threshold and c_L, the rows × configurations ×
reached states of each stage (:data:`WORK` caps the sum; deterministic).

V = 2 only: with more chunks the middle ones' layers are not in the DP's state, their regions take
the least coefficient of the chunks they hold, and on pp 4 × vpp 3 and pp 16 × vpp 3 the bound
did not rise. The first stage as the pivot (the same rows with stage 0's configuration fixed
before the DP's first step) was measured and left out: docs/search.md, the pair-DP round.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from autotune.cost.dominance import pareto_mask
from autotune.cost.simulate import CompiledSchedule
from autotune.tuner.bounds._base import BoundContext, BoundOutcome
from autotune.tuner.bounds._paths import data_children, dependency_chain, stage_paths
from autotune.tuner.bounds._relax import IntegerSetup, integer_setup, row_frontiers
from autotune.tuner.bounds.stage_dp import (StageConfigs, StageLengths, group_lengths, least_replay,
                                            least_replay_by_count, min_plus, move_keys, other_replay, reach_masks,
                                            screen_configs, stage_configs, stage_lengths, stage_rooms,
                                            stage_vectors, threshold_limit, undominated_by_move, under_cap)
from autotune.tuner.problem import Problem

#: Work cap: Σ over thresholds, last-stage configurations and stages of pair rows × configurations
#: × reached states (array elements, ~10 ns each); past it the bisection stops (its last
#: infeasible threshold is the bound).
WORK = 5e8
#: Shape cap: pair paths (3 directions, 4 for stage 0, × entries × exits × middle ops y, per
#: stage: at most (1 + 2V)² · the ops of a stage a direction) over all stages; a larger schedule
#: is not priced (None). With 2 directions the cap was 1 M: pp 64 × vpp 2 × m 512 (6.5 M then)
#: took 15 CPU s and 320 MiB, pp 16 × vpp 2 × m 512 (1.5 M then) 2.0–4.3 s, both for no rise;
#: pp 16 × vpp 2 × m 256 (0.77 M then, 1.18 M now) takes ~1 s.
MAX_SHAPES = 1_500_000
#: The bisection's stop (relative width of the last bracket). A bracket of 1e-4 left up to 6 ms
#: of the pp 16 × vpp 2 × 256-layer relaxed optimum unproven (64,411.6 against 64,412.7 ms at
#: 1e-5, 3 more thresholds near the optimum, where the restricted tables are small).
BISECTION_REL_TOL = 1e-5
#: Work cap of the rows' constants: Σ over stages of pair paths × configurations × last-stage
#: configurations (array elements, ~5 ns each); a larger problem is not priced (None).
#: scaling.py's pp 16 × vpp 2 × m 64 × 256 layers needs 1.13e9 (~115 configurations a stage):
#: at 2e8 it returned None in 2.4 s, at 2e9 it proves 64,412.7 ms in 6.7 s (from 63,878.6, the
#: answer 65,054.8 as incumbent; 290 MiB peak). The other V = 2 rows need 0.8e7-1.3e8.
ROWS_WORK = 2e9
#: Array elements of one block of the DP step's row thresholds (rows × configurations × reached
#: states; a few temporaries of this size live at once).
STEP_ELEMENTS = 4_000_000
#: Configuration pairs (of p and of the last stage) from which :func:`_pair_rows` first drops
#: the paths that cannot hold their row's constant (:func:`_row_maxima`): its Pareto filters cost
#: ~2.6 µs a path, the constants ~15 ns a path and pair. pp 16 × vpp 2 × m 64 × 256 layers (~115 ×
#: 118 pairs) 17.8 -> 15.2 s with them, pp 16 × vpp 2 × m 256 (7 × 3, 1 M paths) 4.4 -> 6.8 s.
PRUNE_MIN_PAIRS = 256
#: Array elements per block when a row's constant is maximised over its paths.
ROWS_CHUNK = 2_000_000
#: The bound runs only where the V's certified gap is over this (below the search's default gap
#: target there is nothing to gain).
MIN_GAP = 0.005


@dataclass(frozen=True)
class PairShapes:
    """Pair paths of a stage p and the last stage L (module docstring), one row per path: op
    counts on p and on L on_p, on_L float [J, 2 (F, B), V] (divided by ``seq_split_num``, the
    chains' ops there included), cross-stage hops [J], the off-pair chains' counts of the head's
    mini-stage (0, 0) head [J, 2 (F, B)] (0 when p = 0), per region the least count, counts
    [J, 4, 2 (F, B)]: chunk 0 of the stages before p (A0), their other chunks (A1, capped at A0),
    the last chunk of the stages between p and L (BL), their other chunks (B0), and the least
    backward count before p (kb) and between (km), [J] each."""

    on_p: np.ndarray
    on_L: np.ndarray
    hops: np.ndarray
    head: np.ndarray
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


def region_stages(P: int, p: int) -> tuple[range, range]:
    """The stages a pair row of stage p and the last stage prices by region: those before p and
    those between p and the last stage."""
    return range(0, p), range(p + 1, P - 1)


def _region_counts(off: np.ndarray, p: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Off-pair counts off float [J, 2, V, P] -> (per-region least counts [J, 4 (A0, A1, BL, B0),
    2 (F, B)], least backward count before p [J], between p and the last stage [J]); a region
    without stages counts 0. A1 is capped at A0 so that the C0 coefficient A0 − A1 stays >= 0."""
    J, _, V, P = off.shape
    before, between = region_stages(P, p)
    out = np.zeros((J, 4, 2))
    kb = np.zeros(J)
    km = np.zeros(J)
    if len(before):
        sl = slice(before.start, before.stop)
        low = off[:, :, :, sl].min(axis=3)  # [J, 2, V]
        out[:, 0] = low[:, :, 0]
        out[:, 1] = np.minimum(low[:, :, 1:].min(axis=2), out[:, 0]) if V > 1 else low[:, :, 0]
        kb = off[:, 1, :, sl].min(axis=(1, 2))
    if len(between):
        sl = slice(between.start, between.stop)
        low = off[:, :, :, sl].min(axis=3)
        out[:, 2] = low[:, :, V - 1]
        out[:, 3] = low[:, :, :V - 1].min(axis=2)
        km = off[:, 1, :, sl].min(axis=(1, 2))
    return out, kb, km


def pair_shapes(cs: CompiledSchedule, p: int) -> PairShapes:
    """The pair paths of stage p and the last stage (module docstring): one stay on each in either
    order, two stays on p, and with p = 0 two stays on the last stage.

    Raises:
        ValueError: p is not one of the stages 0 .. P − 2."""
    P, V = cs.P, cs.V
    L = P - 1
    if not 0 <= p < L:
        raise ValueError(f"stage {p}: give 0 <= p < P - 1 = {L}")
    child = data_children(cs)
    fwd, chunk, stage = cs.fwd, cs.chunk, cs.stage
    on_p, on_L, hops, head, cnt, kbs, kms = [], [], [], [], [], [], []
    for a, b in ((L, p), (p, L), (p, p)) + (((L, L),) if p == 0 else ()):
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
            z = None if to is None else unit_op.get((int(cs.mb[y]),) + to)
            if z is None:
                continue
            if a == b and pos_b[z] <= ty:
                continue  # a guard: z depends on y and compiled programs cannot deadlock, so z is later
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
                first = own_a[ys_a[sel] + 1] - own_a[tx]  # [J, 2, V] the walks on a and on b
                second = own_b[tyy + 1] - own_b[xs_a[sel]]
                reg, kb, km = _region_counts(off, p)
                on_p.append((first if a == p else 0.0) + (second if b == p else 0.0) + off[:, :, :, p])
                on_L.append((first if a == L else 0.0) + (second if b == L else 0.0) + off[:, :, :, L])
                hops.append(he + hx + mh_a[sel])
                head.append(off[:, :, 0, 0] if p > 0 else np.zeros((sel.size, 2)))
                cnt.append(reg)
                kbs.append(kb)
                kms.append(km)
    if not on_p:
        z = np.zeros((0, 2, V))
        return PairShapes(z, z, np.zeros(0), np.zeros((0, 2)), np.zeros((0, 4, 2)), np.zeros(0), np.zeros(0))
    k = cs.k
    return PairShapes(np.concatenate(on_p) / k, np.concatenate(on_L) / k, np.concatenate(hops),
                      np.concatenate(head) / k, np.concatenate(cnt) / k, np.concatenate(kbs) / k,
                      np.concatenate(kms) / k)


#: Chunk weightings (1 − θ, θ) at which each configuration's least weighted replay is priced for
#: the stays (:func:`_chunk_replay`, :func:`_stay_ms`): θ float [K = 21], sorted, in [0, 1]:
#: every 1/16, and every 1/32 from 13/32 to 19/32 (near 1/2), where
#: the long stays sit (a walk over most of a stage's program has about as many backward ops of
#: each chunk). θ = 0, 1/2, 1 alone were the rule before (each chunk's least replay, and E / 2).
#: Measured with the answers as the incumbent (docs/search.md): pp 8 × vpp 2 × m 64 61,862.5 ms
#: with those three, 61,893.7 with every 1/8 or 1/16, 62,080.9 with every 1/32 or this set;
#: pp 16 × vpp 2 × m 64 × 64 layers 18,418.3 with the three or the 1/32 near 1/2 alone, 18,431.4
#: with every 1/16. Pricing cost grows with the count (pp 32 × vpp 2 × m 64: 1.2 s with the
#: three, 4.2 s with these 21, 5.1 s with 33).
THETAS = np.unique(np.concatenate([np.linspace(0.0, 1.0, 17), np.arange(13, 20) / 32]))


def _chunk_replay(problem: Problem, su: IntegerSetup, p: int, nv: np.ndarray) -> np.ndarray:
    """float [M, K] ms: for configurations nv int [M, 2] of stage p, the least replay weighted by
    (1 − θ, θ) for each θ of :data:`THETAS`, over the recompute choices that fit (per memory row,
    the largest over the rows: :func:`~autotune.tuner.bounds._weighted.worst_row_weighted`; 0
    where none is priced finite: the configurations kept all fit)."""
    fr = row_frontiers(problem)
    rows, room = stage_rooms(problem, su, p, nv)
    out = np.zeros((nv.shape[0], THETAS.size))
    for k, th in enumerate(THETAS):
        e = least_replay(problem, p, fr, nv, rows, room, np.array([1.0 - th, th]))
        out[:, k] = np.where(np.isfinite(e), e, 0.0)
    return out


def _stay_scale(cB: np.ndarray) -> np.ndarray:
    """float [J, K] (K = THETAS.size; backward ops, a count): for a stay with backward ops
    (b0, b1) per chunk (cB [J, 2]) and each θ of :data:`THETAS` the largest t with
    t·(1 − θ, θ) <= (b0, b1) componentwise (θ = 0: t = b0; θ = 1: t = b1). The least weighted
    replay W(w) (ms) = max over memory rows of the least w·x over the choices x >= 0 that fit the
    row is homogeneous and nondecreasing in w, so W(b0, b1) >= t · W(1 − θ, θ) for every θ."""
    b0, b1 = cB[:, 0:1], cB[:, 1:2]
    with np.errstate(divide="ignore", invalid="ignore"):  # θ = 0 or 1: np.where drops that side
        return np.minimum(np.where(THETAS < 1, b0 / (1.0 - THETAS), np.inf),
                          np.where(THETAS > 0, b1 / THETAS, np.inf))


def _stay_ms(su: IntegerSetup, p: int, sl: StageLengths, Ev: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """float [M, J] ms of stays on stage p with op counts [J, 2, 2], for its configurations ``sl``
    and their sampled weighted least replay Ev [M, K] (:func:`_chunk_replay`): forward and
    backward ms (the layer kinds' least sums and the head / tail) and the replay bound
    max over θ of t_θ × Ev[θ] (:func:`_stay_scale`), in blocks of stays (bounded temporaries)."""
    fv = su.mix.fwd(sl.nv) + su.end_fwd_ms[:, p]  # [M, V]
    bv = su.mix.bwd(sl.nv) + su.end_bwd_ms[:, p]
    cB = counts[:, 1]  # [J, V]
    t = _stay_scale(cB)  # [J, K]
    out = fv @ counts[:, 0].T + bv @ cB.T
    M, J = out.shape
    step = max(1, int(ROWS_CHUNK // max(1, M * THETAS.size)))
    for a in range(0, J, step):
        j = slice(a, min(J, a + step))
        out[:, j] += (Ev[:, None, :] * t[None, j, :]).max(axis=2)
    return out


def _unique_rows(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(distinct rows of a C-contiguous float [J, d] array, int [J]: each row's index among them),
    by the rows' bytes (a 1-D sort; ``np.unique(axis=0)`` sorts column by column, ~50 × slower
    on 100,000 rows). Rows must not hold -0.0 (add 0.0 first)."""
    v = a.view(np.dtype((np.void, a.dtype.itemsize * a.shape[1]))).ravel()
    _, first, inv = np.unique(v, return_index=True, return_inverse=True)
    return a[first], inv.reshape(-1)


@dataclass
class _Rows:
    """Stage p's pair rows for every last-stage configuration: const float [G, M, M_L] ms and per
    row the coefficients (ms per layer) on s (cS), C0 (c0 >= 0) and R (cR), and the backward
    counts that multiply the least replay before p (kb) and between p and the last stage (km)."""

    const: np.ndarray
    cS: np.ndarray
    c0: np.ndarray
    cR: np.ndarray
    kb: np.ndarray
    km: np.ndarray


def _pair_rows(problem: Problem, su: IntegerSetup, p: int, sh: PairShapes, sl: StageLengths, sL: StageLengths,
               Ev: np.ndarray, EvL: np.ndarray) -> _Rows:
    """Stage p's :class:`_Rows` (module docstring): rows with the same region coefficients merged,
    keeping the largest constant over their paths. The regions' layer counts in terms of the DP's
    state (s layers placed before p, C0 of them in chunk 0, R last-chunk layers after p) and the
    last stage's configuration (n_L layers, nl_L in the last chunk): C0, s − C0, R − nl_L and
    N − s − n_p − n_L − (R − nl_L)."""
    lay = su.layer
    N, V = problem.N, sL.nv.shape[1]
    coef = sh.counts @ np.array([lay.fwd_ms, lay.bwd_ms])  # [J, 4] ms per layer: A0, A1, BL, B0
    head = problem.pa.head
    fixed = sh.hops * su.p2p_ms + sh.head @ np.array([head.fwd_ms, head.bwd_ms])  # [J]
    key = np.ascontiguousarray(np.concatenate([coef, sh.kb[:, None], sh.km[:, None]], axis=1).round(9) + 0.0)
    keys, inv = _unique_rows(key)
    top = (_row_maxima(sh, fixed, inv, keys.shape[0]) if sl.nv.shape[0] * sL.nv.shape[0] >= PRUNE_MIN_PAIRS
           else np.arange(inv.size))
    inv, fixed = inv[top], fixed[top]
    Sp = _stay_ms(su, p, sl, Ev, sh.on_p[top])  # [M, J]
    SL = _stay_ms(su, su.cs.P - 1, sL, EvL, sh.on_L[top])  # [M_L, J]
    n_p = sl.nv.sum(axis=1)
    nL, nlL = sL.nv.sum(axis=1), sL.nv[:, V - 1]
    G = keys.shape[0]
    const = np.full((G, n_p.size, nL.size), -np.inf)
    step = max(1, int(ROWS_CHUNK // max(1, n_p.size * nL.size)))
    for t in range(G):
        j_all = np.flatnonzero(inv == t)
        for at in range(0, j_all.size, step):
            j = j_all[at:at + step]
            np.maximum(const[t], (Sp[:, None, j] + SL[None, :, j] + fixed[None, None, j]).max(axis=2), out=const[t])
    A0, A1, BL, B0, kb, km = (keys[:, i] for i in range(6))
    const += (B0[:, None, None] * (N - n_p[None, :, None] - nL[None, None, :])
              - (BL - B0)[:, None, None] * nlL[None, None, :])
    return _Rows(const, A1 - B0, A0 - A1, BL - B0, kb, km)


def _row_maxima(sh: PairShapes, fixed: np.ndarray, inv: np.ndarray, groups: int) -> np.ndarray:
    """int [k]: the paths of :func:`_pair_rows` that can hold their row's largest constant: per
    row (``inv`` int [J]: each path's row of ``groups``), the Pareto front of its paths on their
    ops of every (direction, chunk) on p and on the last stage and their fixed ms (``fixed`` [J]),
    maximised (:func:`~autotune.cost.dominance.pareto_mask`: of equal paths the first is kept). A
    stay's ms (:func:`_stay_ms`) is nondecreasing in its op counts (forward / backward and replay
    ms >= 0, t_θ nondecreasing), so a dropped path is never above the row's largest.
    On pp 16 × vpp 2 × m 64 × 256 layers about half the paths are kept."""
    J = inv.size
    vec = np.concatenate([sh.on_p.reshape(J, -1), sh.on_L.reshape(J, -1), fixed[:, None]], axis=1)
    keep = np.zeros(J, dtype=bool)
    order = np.argsort(inv, kind="stable")
    cuts = np.searchsorted(inv[order], np.arange(groups + 1))
    for g in range(groups):
        j = order[cuts[g]:cuts[g + 1]]
        keep[j[pareto_mask(-vec[j])]] = True
    return np.flatnonzero(keep)


@dataclass
class PairDPBound:
    """Result of :func:`pair_dp_bound`: the bound (ms), thresholds tried and work spent (array
    elements)."""

    bound_ms: float
    evaluations: int
    work: float


def _region_tabs(sls: list[StageLengths], N: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per stage p < P − 1 the least Σ of the least replay per micro-batch over the ways to place
    k layers on the stages before p, and on those between p and the last stage (two float [N + 1]
    ms; +inf made 0: a count no placement reaches never occurs in a layout that fits): min-plus
    convolutions (:func:`~autotune.tuner.bounds.stage_dp.min_plus`) of each stage's least replay
    per layer count over its configurations, a prefix scan and a suffix scan (the stages of
    :func:`region_stages`)."""
    P = len(sls)
    g = least_replay_by_count([sl.nv for sl in sls], [sl.E for sl in sls], N)
    unit = np.full(N + 1, np.inf)
    unit[0] = 0.0
    before = [unit]  # before[p]: stages 0 .. p − 1
    for q in range(P - 2):
        before.append(min_plus(before[-1], g[q]))
    between = [unit]  # built from p = P − 2 down: stages p + 1 .. P − 2
    for q in range(P - 2, 0, -1):
        between.append(min_plus(between[-1], g[q]))
    between.reverse()
    return [(np.where(np.isfinite(b), b, 0.0), np.where(np.isfinite(m), m, 0.0)) for b, m in zip(before, between)]


def pair_dp_bound(problem: Problem, V: int, *, upper_ms: float, lower_ms: float | None = None,
                  rel_tol: float = BISECTION_REL_TOL, work: float = WORK, max_configs: int = 200_000,
                  deadline: float | None = None) -> PairDPBound | None:
    """Lower bound (ms) on the step time of every memory-feasible layout with pp_interleave_num V
    that is faster than ``upper_ms`` (a feasible step time; the result is at most the larger of it
    and ``lower_ms``): the module docstring's DP. ``lower_ms``: a bound already proven (the
    bisection starts there).

    Returns :class:`PairDPBound`, or None where the bound does not apply (V != 2, B/W-split
    schedules, P < 3, more pair paths than :data:`MAX_SHAPES`, more count vectors than
    ``max_configs``, more pair-path work than :data:`ROWS_WORK`, or ``deadline``
    (time.monotonic()) passed before the DP). Past ``work`` array elements or ``deadline`` the
    bisection stops and its last infeasible threshold is returned (a proof). Raises nothing of its
    own."""
    if V != 2 or problem.P < 3 or not np.isfinite(upper_ms):
        return None
    dp = _setup(problem, V, float(upper_ms), max_configs, deadline)
    if not isinstance(dp, _PairThresholdDP):
        return dp
    lo_T = max(float(lower_ms) if lower_ms is not None and np.isfinite(lower_ms) else 0.0, 0.0)
    hi_T = float(upper_ms)
    evals = 0
    while hi_T - lo_T > rel_tol * hi_T:
        if dp.memo.work >= work or (deadline is not None and time.monotonic() > deadline):
            break
        T = 0.5 * (lo_T + hi_T)
        evals += 1
        at = dp.restricted(T)  # the configurations that can hold T (the same memo as dp)
        ok = False if at is None else at.feasible(T, work, deadline)
        if ok is None:
            break  # the work cap or the deadline cut this threshold short: not proven either way
        if ok:
            hi_T = T
            dp = at  # every later threshold is below T
        else:
            lo_T = T
    return PairDPBound(lo_T, evals, dp.memo.work)


def _setup(problem: Problem, V: int, cap: float, max_configs: int, deadline: float | None
           ) -> _PairThresholdDP | PairDPBound | None:
    """The DP of :func:`pair_dp_bound` for thresholds <= ``cap`` (ms): the stage tables, the pair
    rows and the last stage's configurations to try; or its result when there is nothing to
    bisect (:class:`PairDPBound` at ``cap``: no layout is faster) or None (the bound does not
    apply, a work cap, the deadline)."""
    su = integer_setup(problem, V)
    if su is None:
        return None
    P, N = problem.P, problem.N
    L = P - 1
    cs = su.cs
    if (3 * L + 1) * max(len(o) for o in cs.order) * (1 + 2 * V) ** 2 > MAX_SHAPES:
        return None
    paths = stage_paths(cs, su.p2p_ms)
    all_vecs = stage_vectors(problem, su, V, cap, max_configs)
    if all_vecs is None:
        return None
    fr = row_frontiers(problem)
    screened = screen_configs(problem, su, paths, fr, all_vecs, cap)
    if screened is None:
        return PairDPBound(cap, 0, 0.0)  # no layout is faster than the incumbent
    configs = [stage_configs(problem, su, p, paths[p], fr, vecs, cap) for p, vecs in enumerate(screened)]
    if any(c is None for c in configs):
        return PairDPBound(cap, 0, 0.0)
    H = other_replay(configs, N)
    sls = [stage_lengths(problem, su, p, paths[p], fr, cf, H[p], cap) for p, cf in enumerate(configs)]
    if any(s is None for s in sls):
        return PairDPBound(cap, 0, 0.0)
    Ev = [_chunk_replay(problem, su, p, sl.nv) for p, sl in enumerate(sls)]
    shapes = []
    for p in range(L):
        if deadline is not None and time.monotonic() > deadline:
            return None
        shapes.append(pair_shapes(cs, p))
    if sum(sh.hops.size * sls[p].nv.shape[0] for p, sh in enumerate(shapes)) * sls[L].nv.shape[0] > ROWS_WORK:
        return None
    rows = []
    for p in range(L):
        if deadline is not None and time.monotonic() > deadline:
            return None
        rows.append(_pair_rows(problem, su, p, shapes[p], sls[p], sls[L], Ev[p], Ev[L]))
    keep = _undominated_last(sls[L], rows)
    return _PairThresholdDP(sls, rows, keep, np.arange(sls[L].nv.shape[0]), N, V, [sp.a_b for sp in paths], H,
                            _Memo(hint=int(keep[0]) if keep.size else -1))


def _undominated_last(sL: StageLengths, rows: list[_Rows]) -> np.ndarray:
    """Indices of the last stage's configurations to try: within a DP move one whose own path
    lengths and every pair row constant are >= another's is dropped (the DP of the other is
    feasible wherever its is; :func:`~autotune.tuner.bounds.stage_dp.undominated_by_move`)."""
    M = sL.nv.shape[0]
    vec = np.concatenate([sL.lengths] + [r.const.transpose(2, 0, 1).reshape(M, -1) for r in rows], axis=1)
    return np.flatnonzero(undominated_by_move(move_keys(sL.nv), vec, keep_ties=False))


def _extents(sls: list[StageLengths]) -> np.ndarray:
    """int [P, 4]: per stage (each with at least one configuration) its least / most last-chunk
    layers, least other layers and most layers (:func:`~autotune.tuner.bounds.stage_dp.reach_masks`'
    input)."""
    V = sls[0].nv.shape[1]
    out = []
    for nv in (s.nv for s in sls):
        nt, nl = nv.sum(axis=1), nv[:, V - 1]
        out.append([nl.min(), nl.max(), (nt - nl).min(), nt.max()])
    return np.array(out, dtype=np.int64)


@dataclass
class _Memo:
    """What the thresholds of one bisection share, whatever configurations each one runs on:
    the work spent (array elements), the last-stage configuration last found feasible (``hint``,
    tried first) and per last-stage configuration the largest threshold (ms) its DP was found
    infeasible at (``dead``; feasibility only grows with T, and a restricted DP is feasible at
    no T where the DP it came from is not). Configurations are named by their index in the first
    table (``_PairThresholdDP.lid``)."""

    hint: int = -1
    work: float = 0.0
    dead: dict[int, float] = field(default_factory=dict)


class _PairThresholdDP:
    """The module docstring's DP over stages 0 .. P − 2 with the last stage's configuration fixed
    (checked after them), per threshold. ``aB`` [P] per stage: each one-stay path's backward ops
    on the other stages (``StagePaths.a_b``), which multiply the other stages' least replay H in
    the paths' lengths (:func:`~autotune.tuner.bounds.stage_dp.stage_lengths`); ``H`` float [P, N + 1]
    ms: that least replay as the lengths were priced with it (:func:`other_replay`)."""

    def __init__(self, sls: list[StageLengths], rows: list[_Rows], last: np.ndarray, lid: np.ndarray, N: int,
                 V: int, aB: list[np.ndarray], H: np.ndarray, memo: _Memo) -> None:
        """``last``: the last-stage configurations to try (indices into ``sls[-1]``); ``lid``
        int [M_L]: each last-stage configuration's index in the first table; ``memo``: shared
        with every DP restricted from this one."""
        self.sls, self.rows, self.last, self.lid = sls, rows, last, lid
        self.N, self.V, self.P = N, V, len(sls)
        self.aB, self.H, self.memo = aB, H, memo
        self.groups = [group_lengths(s.lengths, s.alpha0, s.alphaR) for s in self.sls]  # one-stay paths
        self.reach = reach_masks(_extents(self.sls), self.N)
        self.tabs = _region_tabs(sls, N)

    def restricted(self, T: float) -> _PairThresholdDP | None:
        """This DP for thresholds <= T (ms) only (self when nothing changes; None when some stage has
        no configuration left: nothing is feasible at T). A configuration whose own one-stay path
        lengths pass T can hold no threshold <= T (every coefficient of those paths is >= 0;
        ``under_cap``'s tolerance); without it the other stages' least replay H can only rise,
        which lengthens the paths of the configurations left: repeated until nothing changes.
        The regions' replay sums are taken again over what is left; the memo is shared. With
        the search's early incumbent as the cap (pp 16 × vpp 2 × m 64: 34,526 ms against the
        answer's 33,730) the work cap had cut the bisection after 4 thresholds, before its first
        infeasible one. (Its own cost, a few min-plus convolutions per round, is not counted in
        the work.)"""
        sls, H, L, N = self.sls, self.H, self.P - 1, self.N
        keeps = [np.ones(s.nv.shape[0], dtype=bool) for s in sls]
        changed = False
        while True:
            keep = [under_cap(s.lengths, T) for s in sls]
            if all(k.all() for k in keep):
                break
            changed = True
            if not all(k.any() for k in keep):
                return None
            sls = [StageLengths(s.nv[k], s.E[k], s.lengths[k], s.alpha0, s.alphaR) for s, k in zip(sls, keep)]
            for kk, k in zip(keeps, keep):
                kk[np.flatnonzero(kk)] = k
            H2 = other_replay([StageConfigs(s.nv, s.E, np.empty((s.nv.shape[0], 0))) for s in sls], N)
            out = []
            for p, s in enumerate(sls):
                n_oth = N - s.nv.sum(axis=1)
                rise = H2[p][n_oth] - H[p][n_oth]  # >= 0: a least over fewer configurations
                lengths = s.lengths + np.maximum(np.nan_to_num(rise, posinf=0.0), 0.0)[:, None] * self.aB[p][None, :]
                lengths[~np.isfinite(H2[p][n_oth])] = np.inf  # the others can no longer hold the rest
                out.append(s._replace(lengths=lengths))
            sls, H = out, H2
        if not changed:
            return self
        rows = [_Rows(r.const[:, keeps[p]][:, :, keeps[L]], r.cS, r.c0, r.cR, r.kb, r.km)
                for p, r in enumerate(self.rows)]
        pos = np.full(keeps[L].size, -1)  # each kept last-stage configuration's new index
        pos[np.flatnonzero(keeps[L])] = np.arange(int(keeps[L].sum()))
        last = pos[self.last][pos[self.last] >= 0]
        return _PairThresholdDP(sls, rows, last, self.lid[keeps[L]], N, self.V, self.aB, H, self.memo)

    def _one_stay(self, T: float, p: int) -> np.ndarray:
        """float [M, N + 1]: per configuration of stage p and R the largest C0 that keeps every
        one-stay path <= T (the stage DP's rule)."""
        gbase, a0, aR = self.groups[p]
        R = np.arange(self.N + 1, dtype=np.float64)
        slack = T - gbase[:, :, None] - aR[None, :, None] * R[None, None, :]
        return threshold_limit(slack, a0[None, :, None]).min(axis=1) + 1e-9

    def feasible(self, T: float, work: float, deadline: float | None = None) -> bool | None:
        """Whether the DP of some kept last-stage configuration reaches (N, 0) at T; None when the
        work cap or the deadline (time.monotonic()) is passed first."""
        N, V, L = self.N, self.V, self.P - 1
        thr1 = [self._one_stay(T, p) for p in range(self.P)]
        sL = self.sls[L]
        memo = self.memo
        for i in sorted(self.last.tolist(), key=lambda j: int(self.lid[j]) != memo.hint):
            if memo.dead.get(int(self.lid[i]), -np.inf) >= T:
                continue
            C0: np.ndarray | None = np.full((N + 1, N + 1), np.inf)
            C0[0, :] = 0.0
            for p in range(L):
                C0[~self.reach[p]] = np.inf
                C0 = self._stage(T, p, int(i), C0, thr1[p])
                if C0 is None:
                    break
                if memo.work >= work or (deadline is not None and time.monotonic() > deadline):
                    return None
            nt, nl = int(sL.nv[i].sum()), int(sL.nv[i, V - 1])
            if (C0 is not None and nt <= N and np.isfinite(C0[N - nt, nl])
                    and C0[N - nt, nl] <= thr1[L][i, 0]):
                memo.hint = int(self.lid[i])
                return True
            memo.dead[int(self.lid[i])] = max(memo.dead.get(int(self.lid[i]), -np.inf), T)
        return False

    def _stage(self, T: float, p: int, i: int, C0: np.ndarray, thr1: np.ndarray) -> np.ndarray | None:
        """The DP step over stage p for last-stage configuration i: C0 [N + 1, N + 1] before p ->
        after p (None when no state is left)."""
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
            before, between = self.tabs[p]
            hb = before[s_f]  # [F] least replay of the stages before p
            k = N - s_f[None, :] - nt[:, None] - int(self.sls[-1].nv[i].sum())  # [M, F] layers between
            hm = np.where(k >= 0, between[np.clip(k, 0, N)], 0.0)
            G = rw.cS.size
            step = max(1, int(STEP_ELEMENTS // max(1, M * s_f.size)))  # rows per block: bounded temporaries
            for a in range(0, G, step):
                g = slice(a, min(G, a + step))
                slack = (T - rw.const[g, :, i][:, :, None] - rw.cS[g, None, None] * s_f[None, None, :]
                         - rw.cR[g, None, None] * Rc[None, :, :] - rw.kb[g, None, None] * hb[None, None, :]
                         - rw.km[g, None, None] * hm[None, :, :])  # [rows, M, F]
                np.minimum(thr, threshold_limit(slack, rw.c0[g, None, None]).min(axis=0) + 1e-9, out=thr)
                self.memo.work += slack.size
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
        return BoundOutcome(res.bound_ms, None, {"evaluations": res.evaluations, "work": res.work})
