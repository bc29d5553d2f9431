"""Stage-by-stage threshold DP lower bound for pp_interleave_num > 1 (pure numpy, no Optuna).

The Lagrangian bound (:mod:`autotune.tuner.bounds.lagrangian`) prices a *convex mix* of critical paths, so
its minimising split may be fractional and its certified gap stays at 7–12 % on interleaved
problems. This bound takes the *max* over a family of paths exactly, over integer layer splits.

Paths ("one-stay" paths, cost-model reference §6.1 generalised). For a stage p pick an op x and a
later op y of p's program. The path enters x through x's data-dependency chain (for a backward
B(v, p, j): the forwards of micro-batch j through every pipeline position, then its backwards down
to (v, p); for a forward: the forwards of the earlier positions), walks p's ops in program order
from x to y, and leaves y through the chain of ops that depend on it. Every edge is a dependency
edge of the event simulation (op start = max(end of its data dependency + p2p across stages, end
of the previous op of the stage)), so every layout's step time is >= the path's length. x ranges
over the stage's first op and the first forward / backward of each chunk, y over the last op and
the last forward / backward of each chunk. On the layouts the search returns (48 layers pp5 vpp2,
96 layers pp8 vpp3) the longest such path is the step time or within 0.05 % of it; on irregular
splits (1 layer beside 9) the critical path stays on several stages and these paths fall short.

Decomposition. A path's op counts on stages other than p are bounded below by a pattern over
three sums: every other stage's forward / backward ms, the chunk-0 mini-stages of earlier stages
(C0 layers) and the last-chunk mini-stages of later stages (R layers); any left-over count is
dropped (durations are >= 0, so the length only falls). On stage p the counts are kept exactly.

Relaxations (each can only lower the bound): a stage's n layers (and the N - n elsewhere) are
charged the least static MiB, forward and backward ms any n of the model's layers have (the kinds'
least sums, :class:`~autotune.tuner.bounds._relax.KindMix`: the cheapest kinds first, each at most
as often as the model has it), and their recompute is the cheapest layer kind's (componentwise
minimum per recompute class, so homogeneous models lose nothing); each
layer picks its recompute class freely (not the "first r layers" rule); on stage p a path's replay
is the largest over the memory rows of each row's least Σ_v cb_v·x_v over the recompute choices
that fit that row (x_v: chunk v's replay ms; :func:`_own_replay`), or, past
:data:`MAX_WEIGHTINGS`, the least Σ_v x_v weighted by the path's smallest backward count over
chunks; of the workspace term of the memory
peak only the head's / tail's is kept (on backward rows of their chunk), and the fit test uses each
undominated (live-count vector, workspace) row of the schedule separately.

Other stages' replay. The ``a_b`` backward ops a path runs on every other mini-stage each include
that mini-stage's replay, and every other stage q must fit its own layers: so the path is charged
a_b · H_p(N − n), H_p(k) the least Σ_{q≠p} E_q over the ways to place k layers on the other stages,
each in one of its fitting configurations (E_q its least replay summed over its chunks;
:func:`other_replay`, min-plus convolutions over the stages). A configuration of p whose
remaining layers no placement can hold is dropped. The replay of the chunk-0 / last-chunk
backwards the C0 and R terms count is not charged (a chunk's least replay alone is often 0: the
other chunk can take the recompute). Raises scaling.py's P32 V2 m64 L128 dense tight from 18,826.4
to 19,152.0 ms (its answer 20,052.8 as ``upper_ms``; docs/search.md).

DP. For a threshold T, scan stages 0..P-1 with state (layers placed, last-chunk layers still to
place) and value "fewest chunk-0 layers placed" (every constraint grows with C0, so fewer is never
worse: the DP is exact for the relaxed problem). T is feasible when the state (N, 0) is reached;
bisection gives the least feasible T to a relative tolerance and the bound is the last infeasible
T. Per T: P × (layer-count vectors) vectorised steps over the (N+1)² state grid, each over
the box of the states still reached (states from which the later stages' least / most layers
cannot reach (N, 0) are dropped first). With a feasible step time ``upper_ms`` the bisection never
tries a T above it, so configurations whose paths without replay already pass it are dropped
before their replay is priced. A configuration's least replay is the exact Pareto-front value
(:func:`~autotune.tuner.bounds._relax.worst_row_extra`: its fronts built only for the memory rows
that can hold the maximum), or the linear relaxation's for configurations of at least
:data:`~autotune.tuner.bounds._relax.LP_MIN_LAYERS` layers.

Applies when the schedule runs the whole backward as one op (not zero_bubble_v) and V > 1.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from autotune.cost.budget import hbm_cap
from autotune.cost.dominance import pareto_mask
from autotune.tuner.bounds._base import BoundContext, BoundOutcome
from autotune.tuner.bounds._clock import cannot_finish
from autotune.tuner.bounds._paths import StagePaths, stage_paths
from autotune.tuner.bounds._relax import (IntegerSetup, KindMix, RowFrontiers, count_vectors, integer_setup,
                                          kind_windows, live_rows, row_frontiers, worst_row_extra, worst_row_floor)
from autotune.tuner.bounds._weighted import chunk_weights, worst_row_weighted
from autotune.tuner.problem import Problem


@dataclass
class StageDPBound:
    """Result of :func:`stage_dp_bound`: the bound (ms; +inf when no layout can fit), the
    bisection's threshold-DP evaluations, the count vectors tried and the relaxed problem's best
    layer split int [V, P] (a seed, not a proof)."""

    bound_ms: float
    evaluations: int
    configs: int
    split: np.ndarray | None = None


class _StageTable(NamedTuple):
    """One stage's configurations for the DP, sorted by DP move: layer counts nv int [M, V], the
    largest path constant per path group gbase [M, G] (ms), each group's ms per chunk-0 layer
    before the stage a0 [G] and per last-chunk layer after it aR [G], and the groups of configs
    with the same move (layers, last-chunk layers, chunk-0 layers): their keys int [K, 3] and
    first rows ``starts`` [K]."""

    nv: np.ndarray
    gbase: np.ndarray
    a0: np.ndarray
    aR: np.ndarray
    keys: np.ndarray
    starts: np.ndarray


class StageConfigs(NamedTuple):
    """Stage p's configurations that fit (and pass ``cap_ms``): layer counts nv int [M, V], their
    least replay E float [M] (ms per micro-batch, summed over the chunks) and their path lengths
    without replay base [M, Q] (ms)."""

    nv: np.ndarray
    E: np.ndarray
    base: np.ndarray


#: Work cap of the weighted own-stage replay (:func:`_own_replay`): a stage with more distinct
#: chunk weightings over its paths keeps the weaker term (E × the fewest backward ops of a chunk).
#: vpp 2 has 4-6, vpp 3 11-15, vpp 4 24-28. Measured on scaling.py (the answers as ``upper_ms``,
#: every configuration priced): at vpp 4 the stage DP alone went from 0.6 to 10.6 CPU s (P16 V4
#: m64 L128 dense) and from 4.6 to 42.7 s (P32 V4 m256 L256 dense), for no higher bound.
MAX_WEIGHTINGS = 8


def under_cap(base: np.ndarray, cap_ms: float) -> np.ndarray:
    """bool [M]: configurations whose every path length (base [M, Q], ms) is at most ``cap_ms``,
    to a relative 1e-6 (the incumbent's own configurations stay)."""
    return base.max(axis=1, initial=-np.inf) <= cap_ms + 1e-6 * (1.0 + abs(cap_ms))


def stage_configs(problem: Problem, su: IntegerSetup, p: int, sp: StagePaths, fr: RowFrontiers,
                   vecs: list[tuple[int, ...]] | np.ndarray, cap_ms: float | None = None,
                   floor: bool = False) -> StageConfigs | None:
    """The :class:`StageConfigs` of stage p over the layer-count vectors ``vecs``; None when no
    configuration fits the memory budget. With ``cap_ms`` (ms), configurations whose paths
    without replay already pass it are dropped before their replay is priced (they can hold no
    threshold T <= cap_ms; the bisection of :func:`stage_dp_bound` stays there), and None also
    means that none is left. With ``floor`` E is only a lower bound of the least replay (the
    linear relaxation's, :func:`~autotune.tuner.bounds._relax.worst_row_floor`, no Pareto front
    built): :func:`stage_dp_bound`'s screen."""
    V, P, N = su.end_fwd_ms.shape[0], problem.P, problem.N
    pa = problem.pa
    hf, hb = pa.head.fwd_ms, pa.head.bwd_ms
    tf, tb = pa.tail.fwd_ms, pa.tail.bwd_ms
    mix = su.mix
    nv = np.asarray(vecs, dtype=np.int64).reshape(-1, V)  # [M, V]
    fv = mix.fwd(nv) + su.end_fwd_ms[:, p]  # [M, V]
    bv = mix.bwd(nv) + su.end_bwd_ms[:, p]
    nt = nv.sum(axis=1)
    oth_f = mix.fwd(N - nt)[:, None] + (hf if p else 0.0) + (tf if p < P - 1 else 0.0)
    oth_b = mix.bwd(N - nt)[:, None] + (hb if p else 0.0) + (tb if p < P - 1 else 0.0)
    base = (sp.K[None, :] + fv @ sp.cF.T + bv @ sp.cB.T + sp.a_f * oth_f + sp.a_b * oth_b
            + (sp.c0_f * hf + sp.c0_b * hb if p else 0.0)
            + (sp.r_f * tf + sp.r_b * tb if p < P - 1 else 0.0))  # [M, Q] without the replay
    if cap_ms is not None:
        under = under_cap(base, cap_ms)
        nv, base = nv[under], base[under]
    rows, room = stage_rooms(problem, su, p, nv)
    if floor:
        E = worst_row_floor(fr, nv, rows, room)
        fin = np.isfinite(E)  # +inf: over the budget for sure (dropped below)
        E[fin] = np.maximum(0.0, E[fin] - 1e-9 * (1.0 + E[fin]))  # a float margin under the exact values
    else:
        E = least_replay(problem, p, fr, nv, rows, room)
    fits = np.isfinite(E)
    if not fits.any():
        return None
    return StageConfigs(nv[fits], E[fits], base[fits])


def stage_rooms(problem: Problem, su: IntegerSetup, p: int, nv: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Stage p's undominated memory rows (live counts [R, V], :func:`~autotune.tuner.bounds._relax.live_rows`)
    and, for configurations nv int [M, V], the MiB left to the layers' activations under each
    (room [M, R]: the budget less the static MiB and the head / tail terms)."""
    rows, ws = live_rows(su.cs, p, su.end_ws_mib[:, p])
    static = su.const_static_mib[p] + layer_static(problem, su, p, nv)  # [M] MiB
    return rows, hbm_cap(problem.hbm_mib) - static[:, None] - (rows @ su.end_act_mib[:, p] + ws)[None, :]


def layer_static(problem: Problem, su: IntegerSetup, p: int, nv: np.ndarray) -> np.ndarray:
    """float [M] MiB: the least static memory the layers of stage p's configurations nv int [M, V]
    can hold. The kinds' least sums (:class:`~autotune.tuner.bounds._relax.KindMix`: the cheapest
    kinds first over the stage's n layers), each kind at most as often as the model has it and as
    the stage can hold it where its mini-stages sit in layer order: Σ_v min(n_v, chunk v's window)
    (:func:`~autotune.tuner.bounds._relax.kind_windows`, whose windows assume only each other
    mini-stage's least layer count). The caps are summed over the chunks before the greedy, so a
    chunk's window can lend a kind to the stage's other chunks (a per-chunk greedy would be
    tighter; not measured). On DeepSeek-V3 (3 dense layers of 939 MiB static first, then MoE
    layers of 4,407 MiB) every stage was priced as if it held the 3 dense layers: 10.4 GB of room
    that stages 4 and later cannot have (stages 1-3 at most 3, 2 and 1 of them: the head's
    chunk-0 mini-stage may be empty), so the bounds let it recompute far less than it must."""
    nt = nv.sum(axis=1)
    key = ("stage_dp.kind_windows", nv.shape[1])
    if key not in problem.fit_cache:  # the same for every stage and call of a problem and V
        problem.fit_cache[key] = kind_windows(problem, nv.shape[1])
    kw = problem.fit_cache[key]
    if kw is None:
        return su.mix.static(nt)
    V, P = nv.shape[1], problem.P
    win = kw.window[np.arange(V) * P + p]  # [V, K] layers of each kind chunk v of p can hold
    cap = np.minimum(np.minimum(nv[:, :, None], win[None, :, :]).sum(axis=1), kw.counts[None, :])  # [M, K]
    return KindMix.least(kw.static_mib, cap, nt)


def _own_replay(problem: Problem, su: IntegerSetup, p: int, fr: RowFrontiers, sp: StagePaths, nv: np.ndarray,
                E: np.ndarray, lengths: np.ndarray, grp: np.ndarray) -> np.ndarray:
    """float [M, Q] ms: each path's replay on stage p for configurations nv int [M, V] of least
    replay E [M]: at least E × the path's fewest backward ops of a chunk (the term in
    ``lengths`` [M, Q], the paths' lengths so far), and, where the stage has at most
    :data:`MAX_WEIGHTINGS` distinct weightings, the least replay weighted by the path's backward
    ops per chunk (:func:`~autotune.tuner.bounds._weighted.worst_row_weighted`, once per weighting
    of :func:`~autotune.tuner.bounds._weighted.chunk_weights`, memoised as :func:`least_replay`).
    A path with 49 backward ops of chunk 0 and 64 of chunk 1 was charged 49 × (x_0 + x_1); now
    49·x_0 + 64·x_1 at its least over the recompute choices that fit. On scaling.py (the answers
    as ``upper_ms``) the stage DP of P32 V2 m64 L128 dense rises from 19,156.9 to 19,383.3 ms
    and P16 V2 m32 L128's from 17,455.7 to 17,555.8.

    The weighted value is at most E × the path's most backward ops of a chunk (the least
    unweighted choice of each row pays at most that), so a (configuration, weighting) pair is
    priced only where that much could lift some path of the weighting above the longest path of
    its group ``grp`` [Q] (the paths the stage table keeps one maximum of): elsewhere the table
    is the same either way."""
    out = _fewest_count_replay(sp, E)
    cw, scale, which = chunk_weights(sp.cB)
    if cw.shape[0] == 0 or cw.shape[0] > MAX_WEIGHTINGS or nv.shape[0] == 0:
        return out
    gmax = np.full((nv.shape[0], int(grp.max()) + 1), -np.inf)
    for g in range(gmax.shape[1]):
        gmax[:, g] = lengths[:, grp == g].max(axis=1)
    most = lengths + E[:, None] * (sp.cB.max(axis=1) - sp.cB.min(axis=1))[None, :]  # [M, Q] at most
    tol = 1e-9 * (1.0 + np.abs(gmax[:, grp]))
    lifts = np.isfinite(E)[:, None] & (which >= 0)[None, :] & (most > gmax[:, grp] + tol)  # [M, Q]
    rows, room = stage_rooms(problem, su, p, nv)
    for d in range(cw.shape[0]):
        q = np.flatnonzero(which == d)
        i = np.flatnonzero(lifts[:, q].any(axis=1))
        if i.size == 0:
            continue
        Wd = least_replay(problem, p, fr, nv[i], rows, room[i], cw[d])
        Wd = np.where(np.isfinite(Wd), Wd, 0.0)  # E's own test decides what fits (float edges)
        out[np.ix_(i, q)] = np.maximum(out[np.ix_(i, q)], Wd[:, None] * scale[None, q])
    return out


def least_replay(problem: Problem, p: int, fr: RowFrontiers, nv: np.ndarray, rows: np.ndarray,
                  room: np.ndarray, weights: np.ndarray | None = None) -> np.ndarray:
    """:func:`~autotune.tuner.bounds._relax.worst_row_extra` of stage p's configurations nv int
    [M, V] (room [M, R] MiB), or with chunk ``weights`` [V] its weighted form
    (:func:`~autotune.tuner.bounds._weighted.worst_row_weighted`), memoised on the problem's
    ``fit_cache`` per (V, p, weights) by count vector:
    the value depends on the problem and the vector only, and the bound passes run the stage DP
    twice, the second time on a subset of the first's vectors (on scaling.py's P32 V4 m256 L256
    MoE problem the pricing was 20 of the second run's 22 CPU s)."""
    M, V = nv.shape
    code = nv @ ((problem.N + 1) ** np.arange(V, dtype=np.int64))  # one integer per vector
    key = ("stage_dp.least_replay", V, p) + (() if weights is None else (weights.tobytes(),))
    known, val = problem.fit_cache.get(key, (np.zeros(0, np.int64), np.zeros(0)))
    at = np.minimum(np.searchsorted(known, code), max(known.size - 1, 0))
    hit = (known[at] == code) if known.size else np.zeros(M, dtype=bool)
    E = np.empty(M)
    E[hit] = val[at[hit]]
    miss = ~hit
    if miss.any():
        E[miss] = (worst_row_extra(fr, nv[miss], rows, room[miss]) if weights is None
                   else worst_row_weighted(fr, nv[miss], rows, room[miss], weights))
        allc = np.concatenate([known, code[miss]])
        allv = np.concatenate([val, E[miss]])
        order = np.argsort(allc, kind="stable")
        problem.fit_cache[key] = (allc[order], allv[order])
    return E


def min_plus(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """(a ⊕ b)[k] = min_i a[i] + b[k − i] over float [N + 1] arrays (ms; +inf: no way)."""
    n = a.size
    out = np.full(n, np.inf)
    for i in np.flatnonzero(np.isfinite(a)):
        np.minimum(out[i:], a[i] + b[:n - i], out=out[i:])
    return out


def least_replay_by_count(nvs: list[np.ndarray], Es: list[np.ndarray], N: int) -> np.ndarray:
    """float [P, N + 1] ms: per stage q the least replay per micro-batch E (Es[q] [M_q]) over its
    configurations nvs[q] int [M_q, V] holding n layers (+inf: none holds n)."""
    g = np.full((len(nvs), N + 1), np.inf)
    for q, (nv, E) in enumerate(zip(nvs, Es)):
        np.minimum.at(g[q], nv.sum(axis=1), E)
    return g


def other_replay(configs: list[StageConfigs], N: int) -> np.ndarray:
    """float [P, N + 1] ms: H[p, k], the least Σ_{q != p} E_q of k layers placed on the stages
    other than p, each stage q holding one of its fitting configurations (E_q its least replay
    per micro-batch, summed over its chunks); +inf when no such placement exists. Min-plus
    convolutions (:func:`min_plus`) of g_q[n] = least E_q of a configuration with n layers
    (:func:`least_replay_by_count`), prefix and suffix."""
    P = len(configs)
    g = least_replay_by_count([c.nv for c in configs], [c.E for c in configs], N)
    unit = np.full(N + 1, np.inf)
    unit[0] = 0.0
    pre, suf = [unit], [unit]
    for q in range(P - 1):
        pre.append(min_plus(pre[-1], g[q]))
        suf.append(min_plus(suf[-1], g[P - 1 - q]))
    return np.stack([min_plus(pre[p], suf[P - 1 - p]) for p in range(P)])


def _fewest_count_replay(sp: StagePaths, E: np.ndarray) -> np.ndarray:
    """float [M, Q] ms: each path's replay on its stage charged as the least replay E [M] × the
    path's fewest backward ops of a chunk (the term :func:`_own_replay` starts from)."""
    return E[:, None] * sp.cB.min(axis=1)[None, :]


def _with_replay(sp: StagePaths, cf: StageConfigs, H: np.ndarray, own: np.ndarray | None = None
                 ) -> tuple[np.ndarray, np.ndarray]:
    """(ok bool [M], lengths float [ok.sum(), Q] ms): each configuration's path lengths with the
    replay counted (:func:`stage_lengths`' rule, its docstring), for the configurations whose
    other stages can hold the remaining layers (``ok``: H finite there)."""
    h = H[H.size - 1 - cf.nv.sum(axis=1)]  # [M]: H is indexed by the N − n layers elsewhere
    ok = np.isfinite(h)
    own = _fewest_count_replay(sp, cf.E) if own is None else own
    return ok, cf.base[ok] + own[ok] + h[ok, None] * sp.a_b[None, :]


class StageLengths(NamedTuple):
    """Stage p's configurations that can still hold a threshold under the cap, with their path
    lengths: layer counts nv int [M, V], least replay E [M] (ms per micro-batch), every one-stay
    path's length with its replay lengths [M, Q] (ms, :func:`stage_lengths`' rule) and each path's
    ms per chunk-0 layer before the stage alpha0 [Q] and per last-chunk layer after it alphaR [Q]."""

    nv: np.ndarray
    E: np.ndarray
    lengths: np.ndarray
    alpha0: np.ndarray
    alphaR: np.ndarray


def stage_lengths(problem: Problem, su: IntegerSetup, p: int, sp: StagePaths, fr: RowFrontiers, cf: StageConfigs,
                  H: np.ndarray, cap_ms: float | None = None) -> StageLengths | None:
    """The :class:`StageLengths` of stage p from its fitting configurations ``cf``: every path's
    length is its length without replay, plus its replay on the stage (:func:`_own_replay`: the
    least replay weighted by the path's backward ops per chunk, or E × its fewest backward ops of
    a chunk), plus ``a_b`` times the least replay the other stages need for the N − n layers they
    hold (``H`` [N + 1], :func:`other_replay`: each backward of another stage the path counts runs
    that stage's replay). The weighted term (never below the other) is priced only for the
    configurations still under ``cap_ms`` with the other. None when no configuration is left
    (the others cannot hold the remaining layers, or the path passes ``cap_ms``)."""
    lay = su.layer
    ok, base = _with_replay(sp, cf, H)
    keep = np.flatnonzero(ok)
    if cap_ms is not None:
        under = under_cap(base, cap_ms)
        keep, base = keep[under], base[under]
    cf = StageConfigs(cf.nv[keep], cf.E[keep], cf.base[keep])
    alpha0 = sp.c0_f * lay.fwd_ms + sp.c0_b * lay.bwd_ms  # [Q] ms per chunk-0 layer before p
    alphaR = sp.r_f * lay.fwd_ms + sp.r_b * lay.bwd_ms  # [Q] ms per last-chunk layer after p
    # paths with the same (alpha0, alphaR) differ only in their constant: the replay is priced
    # where it can lift a path above its group's longest
    _, grp = _coefficient_groups(alpha0, alphaR)
    _, base = _with_replay(sp, cf, H, _own_replay(problem, su, p, fr, sp, cf.nv, cf.E, base, grp))
    nv, E = cf.nv, cf.E
    if cap_ms is not None:
        under = under_cap(base, cap_ms)
        nv, E, base = nv[under], E[under], base[under]
    if nv.shape[0] == 0:
        return None
    return StageLengths(nv, E, base, alpha0, alphaR)


def _coefficient_groups(alpha0: np.ndarray, alphaR: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(the distinct (alpha0, alphaR) pairs [G, 2] ms per layer, rounded to 1e-9; int [Q]: each
    path's group) of the paths' coefficients alpha0, alphaR [Q]."""
    coef, grp = np.unique(np.round(np.stack([alpha0, alphaR], axis=1), 9), axis=0, return_inverse=True)
    return coef, grp.reshape(-1)


def group_lengths(lengths: np.ndarray, alpha0: np.ndarray, alphaR: np.ndarray
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Paths with the same coefficients differ only in their constant: (the largest length of
    each coefficient group [M, G] ms, the groups' ms per chunk-0 layer before the stage a0 [G] and
    per last-chunk layer after it aR [G]) from every path's length [M, Q] and coefficients alpha0,
    alphaR [Q] (ms per layer)."""
    coef, grp = _coefficient_groups(alpha0, alphaR)
    gbase = np.full((lengths.shape[0], coef.shape[0]), -np.inf)
    for g in range(coef.shape[0]):
        gbase[:, g] = lengths[:, grp == g].max(axis=1)
    return gbase, coef[:, 0], coef[:, 1]


def move_keys(nv: np.ndarray) -> np.ndarray:
    """int [M, 3]: each configuration's DP move (layers, last-chunk layers, chunk-0 layers) from
    its layer counts nv int [M, V]."""
    return np.stack([nv.sum(axis=1), nv[:, -1], nv[:, 0]], axis=1)


def undominated_by_move(key: np.ndarray, vec: np.ndarray, keep_ties: bool) -> np.ndarray:
    """bool [M]: configurations not dominated within their DP move (rows of ``key`` [M, 3] alike):
    one whose every value of ``vec`` [M, d] (path constants, ms) is >= another's never helps the
    DP (``keep_ties``: equal rows all kept, else the first)."""
    keep = np.ones(key.shape[0], dtype=bool)
    _, inv = np.unique(key, axis=0, return_inverse=True)
    inv = inv.reshape(-1)
    for g in np.flatnonzero(np.bincount(inv) > 1):
        idx = np.flatnonzero(inv == g)
        keep[idx] = pareto_mask(vec[idx], keep_ties=keep_ties)
    return keep


def _table(nv: np.ndarray, lengths: np.ndarray, alpha0: np.ndarray, alphaR: np.ndarray) -> _StageTable:
    """The DP's :class:`_StageTable` of one stage from its configurations nv int [M, V] (M >= 1)
    and their path lengths [M, Q] (ms) with each path's ms per chunk-0 layer before the stage
    alpha0 [Q] and per last-chunk layer after it alphaR [Q] (:func:`group_lengths`), configurations
    sorted by DP move and those dominated within one dropped (:func:`undominated_by_move`)."""
    gbase, a0, aR = group_lengths(lengths, alpha0, alphaR)
    key = move_keys(nv)
    order = np.lexsort(key.T[::-1])
    nv, gbase, key = nv[order], gbase[order], key[order]
    keep = undominated_by_move(key, gbase, keep_ties=True)
    nv, gbase, key = nv[keep], gbase[keep], key[keep]
    starts = np.flatnonzero(np.concatenate([[True], np.any(key[1:] != key[:-1], axis=1)]))
    return _StageTable(nv, gbase, a0, aR, key[starts], starts)


def threshold_limit(slack: np.ndarray, a0: np.ndarray | float) -> np.ndarray:
    """The largest C0 with a0 · C0 <= slack (ms; a0 >= 0 ms per chunk-0 layer, broadcast): slack /
    a0 where a0 > 0, else +inf where slack >= 0 (to 1e-9 ms) and -inf elsewhere."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(a0 > 0, slack / np.where(a0 > 0, a0, 1.0), np.where(slack >= -1e-9, np.inf, -np.inf))


def reach_masks(ext: np.ndarray, N: int) -> list[np.ndarray]:
    """bool [N + 1, N + 1] per stage p: the DP states (s layers placed, r last-chunk layers left)
    before p that can still reach (N, 0), from ext int [P, 4] — each stage's least / most
    last-chunk layers, least other layers and most layers: r within [Σ nl_min, Σ nl_max] and the
    N − s layers left within [r + Σ (nt − nl)_min, Σ nt_max], sums over stages p..P-1."""
    suf = np.cumsum(ext[::-1], axis=0)[::-1]  # [P, 4] sums over stages p..P-1
    r = np.arange(N + 1)[None, :]
    left = N - np.arange(N + 1)[:, None]  # layers left after s placed
    return [(r >= a) & (r <= b) & (left >= r + c) & (left <= d) for a, b, c, d in suf]


def _stage_table(problem: Problem, su: IntegerSetup, p: int, sp: StagePaths, fr: RowFrontiers, cf: StageConfigs,
                 H: np.ndarray, cap_ms: float | None = None) -> _StageTable | None:
    """The :class:`_StageTable` of stage p from its fitting configurations ``cf``
    (:func:`stage_lengths`, then :func:`_table`); None when no configuration is left."""
    sl = stage_lengths(problem, su, p, sp, fr, cf, H, cap_ms)
    return None if sl is None else _table(sl.nv, sl.lengths, sl.alpha0, sl.alphaR)


class _ThresholdDP:
    """The DP of the module docstring over the stage tables, for thresholds T (ms)."""

    def __init__(self, tabs: list[_StageTable], N: int, V: int) -> None:
        self.tabs, self.N, self.V, self.P = tabs, N, V, len(tabs)
        self.Rg = np.arange(N + 1, dtype=np.float64)
        self.moves = []  # per stage: runs of groups with the same (layers, last-chunk layers)
        for t in tabs:
            keys = t.keys
            brk = np.flatnonzero(np.concatenate([[True], np.any(keys[1:, :2] != keys[:-1, :2], axis=1), [True]]))
            self.moves.append([(int(a), int(b)) for a, b in zip(brk[:-1], brk[1:])])
        ext = np.array([[k[:, 1].min(), k[:, 1].max(), (k[:, 0] - k[:, 1]).min(), k[:, 0].max()]
                        for k in (t.keys for t in tabs)]).reshape(-1, 4)
        self.reach = reach_masks(ext, N)

    def thresholds(self, T: float, p: int, upto: int | None = None) -> np.ndarray:
        """[M, R]: the largest C0 that keeps every path of config i <= T (R after stage p; the
        first ``upto`` values of R, all N + 1 by default)."""
        t = self.tabs[p]
        a0, aR = t.a0, t.aR
        Rg = self.Rg if upto is None else self.Rg[:upto]
        slack = T - t.gbase[:, :, None] - aR[None, :, None] * Rg[None, None, :]  # M G R
        return threshold_limit(slack, a0[None, :, None]).min(axis=1) + 1e-9

    def feasible(self, T: float) -> list[np.ndarray] | None:
        """The DP tables C0 before each stage and after the last one when T is feasible, else
        None. C0[s, r]: fewest chunk-0 layers among stages < p, s layers placed, r last-chunk
        layers to place."""
        N, INF = self.N, np.inf
        C0 = np.full((N + 1, N + 1), INF)
        C0[0, :] = 0.0
        hist = []
        for p in range(self.P):
            keys, starts = self.tabs[p].keys, self.tabs[p].starts
            new = np.full_like(C0, INF)
            C0[~self.reach[p]] = INF  # states that cannot reach (N, 0) any more
            # only the box of reached states moves (s: layers placed, r: last-chunk layers left)
            live = np.isfinite(C0)
            s_in, r_in = np.flatnonzero(live.any(axis=1)), np.flatnonzero(live.any(axis=0))
            if s_in.size == 0:
                return None
            s_lo, s_hi, r_lo, r_hi = s_in[0], s_in[-1] + 1, r_in[0], r_in[-1] + 1
            thr = np.maximum.reduceat(self.thresholds(T, p, r_hi), starts, axis=0)  # groups, R < r_hi
            for a, b in self.moves[p]:  # groups a..b-1 share (layers, last-chunk layers)
                nt, nl = int(keys[a, 0]), int(keys[a, 1])
                s1, r0 = min(s_hi, N + 1 - nt), max(r_lo, nl)
                if s1 <= s_lo or r_hi <= r0:
                    continue
                n0 = keys[a:b, 2].astype(np.float64)[:, None, None]
                src = C0[None, s_lo:s1, r0:r_hi]  # s, r  -> target s+nt, R = r - nl
                cand = np.where(src <= thr[a:b, None, r0 - nl:r_hi - nl], src + n0, INF).min(axis=0)
                tgt = new[s_lo + nt:s1 + nt, r0 - nl:r_hi - nl]
                np.minimum(tgt, cand, out=tgt)
            hist.append(C0)
            C0 = new
            if not np.isfinite(C0).any():
                return None
        if not np.isfinite(C0[N, 0]):
            return None
        return hist + [C0]

    def trace(self, T: float, hist: list[np.ndarray]) -> np.ndarray:
        """One split int [V, P] reaching (N, 0) at T: per stage a config whose move fits."""
        N, V, P = self.N, self.V, self.P
        split = np.zeros((V, P), dtype=np.int64)
        s_, r_, c_ = N, 0, float(hist[P][N, 0])
        for p in range(P - 1, -1, -1):
            nv = self.tabs[p].nv
            thr = self.thresholds(T, p)
            prev = hist[p]
            for i in range(nv.shape[0]):
                nt, n0, nl = int(nv[i].sum()), int(nv[i, 0]), int(nv[i, V - 1])
                s0, r0 = s_ - nt, r_ + nl
                if s0 < 0 or r0 > N:
                    continue
                c0 = prev[s0, r0]
                if c0 + n0 == c_ and c0 <= thr[i, r_]:
                    split[:, p] = nv[i]
                    s_, r_, c_ = s0, r0, float(c0)
                    break
        return split


def screen_configs(problem: Problem, su: IntegerSetup, paths: list[StagePaths], fr: RowFrontiers,
                   all_vecs: list, cap: float, deadline: float | None = None) -> list[np.ndarray] | None | bool:
    """Each stage's count vectors that can still hold a layout faster than ``cap`` (ms), judged
    with lower bounds before any least replay is priced exactly: :func:`_stage_table`'s path test
    (path without replay + the stage's least replay × its fewest backward ops of a chunk + the
    other stages' least replay × ``a_b``) with the linear relaxation's floor of each least replay
    (:func:`stage_configs` with ``floor``) and the other stages' term from those floors
    (:func:`other_replay`). Every term is <= its exact value, so a vector dropped here would be
    dropped by the exact test too, on any subset of the other stages' vectors; the exact tables
    are then built on what is left (fewer configurations elsewhere only raise the other stages'
    least replay, and every layout faster than ``cap`` keeps its own). None when a stage has no
    vector left (no layout is faster than ``cap``); False when it gave up on ``deadline``
    (:func:`cannot_finish`: no proof).

    On scaling.py's P32 V4 m256 L256 MoE problem the last bound pass priced 22,567 configurations
    exactly, of which ~3,000 reached the stage tables."""
    N = problem.N
    pre = []
    t0 = time.monotonic()
    for p, vecs in enumerate(all_vecs):
        if cannot_finish(t0, p, len(all_vecs), deadline):
            return False
        cf = stage_configs(problem, su, p, paths[p], fr, vecs, cap, floor=True)
        if cf is None:
            return None
        pre.append(cf)
    H = other_replay(pre, N)
    out = []
    for p, cf in enumerate(pre):
        ok, lengths = _with_replay(paths[p], cf, H[p])
        keep = cf.nv[ok][under_cap(lengths, cap)]
        if keep.shape[0] == 0:
            return None
        out.append(keep)
    return out


def stage_vectors(problem: Problem, su: IntegerSetup, V: int, upper_ms: float | None,
                  max_configs: int) -> list[list[tuple[int, ...]]] | None:
    """Every stage's layer-count vectors (chunk layers within the problem's bounds; None past
    ``max_configs`` in all). With a feasible step time ``upper_ms`` (ms) a stage holds at most
    upper_ms / (m · (f + b0)) + 1 layers: its own ops are one path. The cap is checked on the
    total before any table (pp8 vpp4 m128, 256 layers: ~58,900 a stage, 471,000 in all; 6.9 CPU s
    of tables were built and dropped when it was checked after the first stages' tables)."""
    lay = su.layer
    P, N, m = problem.P, problem.N, problem.m
    lo, hi = problem.bounds(V)
    fb0 = lay.fwd_ms + lay.bwd_ms
    n_cap = N
    if upper_ms is not None and np.isfinite(upper_ms) and fb0 > 0:
        n_cap = min(n_cap, int(upper_ms / (m * fb0)) + 1)
    out, total = [], 0
    for p in range(P):
        out.append(count_vectors(lo[:, p], np.minimum(hi[:, p], n_cap), min(n_cap, N)))
        total += len(out[-1])
        if total > max_configs:
            return None
    return out


def stage_dp_bound(problem: Problem, V: int, *, upper_ms: float | None = None,
                   lower_ms: float | None = None, rel_tol: float = 1e-4,
                   max_configs: int = 200_000, deadline: float | None = None) -> StageDPBound | None:
    """Lower bound (ms) on the step time of every memory-feasible layout with pp_interleave_num V.

    See the module docstring for the paths, the relaxations and the DP. Returns None when the
    bound does not apply (V = 1, a B/W-split schedule) or when the per-stage layer-count vectors
    would exceed ``max_configs`` (a work cap; the caller keeps its other bound). ``upper_ms``: a
    feasible step time (caps the layers per stage and starts the bisection); ``lower_ms``: a bound
    already proven (the bisection starts there, so the result is never below it). Past
    ``deadline`` (time.monotonic()) the stage tables stop (None), also as soon as their rate so far
    shows they cannot end before it (:func:`cannot_finish`), and the bisection returns the largest
    threshold it has shown infeasible (a bound, anytime).
    """
    su = integer_setup(problem, V)
    if su is None or cannot_finish(0.0, 0, 1, deadline):
        return None
    N = problem.N
    paths = stage_paths(su.cs, su.p2p_ms, deadline)
    if paths is None:
        return None
    all_vecs = stage_vectors(problem, su, V, upper_ms, max_configs)
    if all_vecs is None:
        return None
    total = sum(len(v) for v in all_vecs)
    fr = row_frontiers(problem)
    # a feasible layout's step time: no T above it is ever tried, so the tables drop what cannot
    # hold one below it, and a DP without a way through means no layout is faster than it
    cap = float(upper_ms) if upper_ms is not None and np.isfinite(upper_ms) else None
    if cap is not None:
        screened = screen_configs(problem, su, paths, fr, all_vecs, cap, deadline)
        if screened is False:
            return None
        if screened is None:
            return StageDPBound(cap, 0, total)
        all_vecs = screened
    configs = []
    t0 = time.monotonic()
    for p, vecs in enumerate(all_vecs):
        if cannot_finish(t0, p, len(all_vecs), deadline):
            return None
        cf = stage_configs(problem, su, p, paths[p], fr, vecs, cap)
        if cf is None:
            return StageDPBound(float("inf") if cap is None else cap, 0, total)
        configs.append(cf)
    H = other_replay(configs, N)
    tabs = []
    t0 = time.monotonic()
    for p, cf in enumerate(configs):
        if cannot_finish(t0, p, len(configs), deadline):
            return None
        tab = _stage_table(problem, su, p, paths[p], fr, cf, H[p], cap)
        if tab is None:
            return StageDPBound(float("inf") if cap is None else cap, 0, total)
        tabs.append(tab)
    dp = _ThresholdDP(tabs, N, V)
    evals = 0
    hi_T = cap if cap is not None else float(max(float(np.max(t.gbase)) for t in tabs)) * 2 + 1.0
    lo_T = 0.0
    if lower_ms is not None and np.isfinite(lower_ms) and lower_ms < hi_T:
        lo_T = float(lower_ms)  # a bound already proven: the result is the larger of the two
    hist = dp.feasible(hi_T)
    evals += 1
    if hist is None and cap is not None:
        return StageDPBound(cap, evals, total)
    while hist is None:
        lo_T, hi_T = hi_T, hi_T * 2
        hist = dp.feasible(hi_T)
        evals += 1
        if hi_T > 1e15:
            return StageDPBound(float("inf"), evals, total)
    while hi_T - lo_T > rel_tol * hi_T:
        if deadline is not None and time.monotonic() > deadline:
            break
        mid = 0.5 * (lo_T + hi_T)
        evals += 1
        h_mid = dp.feasible(mid)
        if h_mid is not None:
            hi_T, hist = mid, h_mid
        else:
            lo_T = mid
    return StageDPBound(lo_T, evals, total, dp.trace(hi_T, hist))


@dataclass(frozen=True)
class StageDP:
    """:func:`stage_dp_bound` as a :class:`~autotune.tuner.bounds.LowerBound` (V > 1, schedules with
    whole backward ops and chunk-major positions); it starts its bisection at ``ctx.lower_ms``."""

    name: str = "stage DP"

    def applies(self, problem: Problem, V: int) -> bool:
        return integer_setup(problem, V) is not None

    def bound(self, problem: Problem, V: int, ctx: BoundContext) -> BoundOutcome | None:
        sd = stage_dp_bound(problem, V, upper_ms=ctx.upper_ms, lower_ms=ctx.lower_ms, deadline=ctx.deadline)
        if sd is None:
            return None
        return BoundOutcome(sd.bound_ms, sd.split, {"evaluations": sd.evaluations})
