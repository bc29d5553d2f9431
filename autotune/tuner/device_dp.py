"""Exact device-by-device DP lower bound for pp_interleave_num > 1 (pure numpy, no Optuna).

Paths. Every one-stay path (:func:`autotune.tuner.stage_dp.one_stay_counts`) of stage p whose op
count is >= 1 on every mini-stage of the *other* stages ("no-skip": it enters p through a
micro-batch's whole forward chain and leaves through a whole backward chain) is, on relaxed
durations d = F + B per mini-stage,

    length = W + E_π(p),   W = Σ_all mini-stages (F + B),
    E_π(p) = Σ_v (cf_v − 1)·F(v, p) + (cb_v − 1)·B(v, p) + hops·p2p  (+ Σ_off (c − 1)·d >= 0, dropped)

so the step time T of any layout is >= W + max_p max_π E_π(p). W is a sum of per-stage terms and
E only depends on one stage's configuration: for a threshold ε on the max, the least W is a
knapsack DP over stages (state: layers placed) of per-stage tables "least W_p of a stage holding
L layers whose E <= ε"; the bound is min over ε of (W(ε) + ε). ε only needs the finitely many E
values of the stage configurations (a layout whose max E is e* is feasible at ε = e*), so the
minimum is exact for the relaxed problem — integer layer counts, no convex mix of paths, and
every stage's memory-forced replay counted in W (the stage DP of :mod:`autotune.tuner.stage_dp`
drops the other stages' replay; the Lagrangian of :mod:`autotune.tuner.bounds` mixes paths).

Relaxations (each can only lower the bound): the cheapest layer kind per recompute class, a free
recompute class per layer and each undominated live-count vector of the memory checked on its
own (the least replay that fits is the max over vectors; :func:`autotune.tuner.stage_dp._min_extra`),
the workspace term dropped; in E the stage's replay R is weighted by the path's least backward
count on the stage minus one (the replay's true weight Σ_v cb_v·x_v >= min_v cb_v · R); paths
that skip mini-stages of other stages and paths that stay on several stages are not in the
family (the integer program of :mod:`autotune.tuner.milp_bound` prices them).

Cost: the stage configurations (layer-count vectors, capped by a stage's own path m·Σ n (f + b0)
<= T and pruned by W_min + E0 > upper) each need one replay frontier per memory vector; the DP
is vectorised over all ε at once. TeleChat2 96 layers pp8: 0.3 s (V = 3), 1.4 s (V = 4).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from autotune.tuner.problem import Problem
from autotune.tuner.stage_dp import _count_vectors, _min_extra, _RowFrontiers, _setup, _undominated, one_stay_counts


#: Work cap: stage configurations (layer-count vectors) enumerated over all stages.
MAX_CONFIGS = 300_000


@dataclass
class DeviceDPBound:
    """Result of :func:`device_dp_bound`: the bound (ms), the stage configurations priced and the
    number of thresholds ε the DP evaluated."""

    bound_ms: float
    configs: int
    thresholds: int


def _stage_tables(problem: Problem, V: int, upper_ms: float, max_configs: int
                  ) -> tuple[list[tuple[np.ndarray, ...]], int] | None:
    """Per stage the configurations that can still beat ``upper_ms``: list of (n float [M, V],
    F ms [M, V], B ms without replay [M, V], least replay ms [M], E ms [M]) and the number of
    configurations enumerated; None when a work cap or the applicability check fails, or when no
    stage has a no-skip path (a stage may be left with no configuration: nothing beats upper)."""
    su = _setup(problem, V)
    if su is None:
        return None
    cs, lay, p2p = su.cs, su.lay, su.p2p
    end_f, end_b, end_a, const_static = su.end_f, su.end_b, su.end_a, su.const_static
    P, N, m, k = problem.P, problem.N, problem.m, cs.k
    lo, hi = problem.bounds(V)
    fb0 = lay.f + lay.b0
    w_const = N * fb0 + float(end_f.sum() + end_b.sum())  # W without replay (ms)
    n_cap = N if fb0 <= 0 else min(N, int(upper_ms / (m * fb0)) + 1)  # a stage's own ops path
    fam = one_stay_counts(cs)
    fr = _RowFrontiers(lay)
    tables = []
    total = 0
    any_path = False
    for p in range(P):
        off = np.ones((V, P), dtype=bool)
        off[:, p] = False
        keep = [(cf[:, p] - 1.0, cb[:, p] - 1.0, hops * p2p) for cf, cb, hops in fam[p]
                if (cf[off] >= 1.0 - 1e-9).all() and (cb[off] >= 1.0 - 1e-9).all()]
        vecs = _count_vectors(lo[:, p], np.minimum(hi[:, p], n_cap), n_cap)
        total += len(vecs)
        if total > max_configs:
            return None
        nv = np.asarray(vecs, dtype=np.float64).reshape(-1, V)  # [M, V]
        F = nv * lay.f + end_f[:, p]
        B = nv * lay.b0 + end_b[:, p]
        if keep:
            any_path = True
            A_f = np.array([a for a, _, _ in keep])  # [Q, V]
            A_b = np.array([b for _, b, _ in keep])
            K = np.array([c for _, _, c in keep])
            E0 = F @ A_f.T + B @ A_b.T + K[None, :]  # [M, Q]
            ok = w_const + E0.max(axis=1) <= upper_ms * (1 + 1e-9)
        else:
            E0 = np.full((nv.shape[0], 1), -np.inf)
            ok = np.ones(nv.shape[0], dtype=bool)
        rows = _undominated(np.concatenate(
            [cs.mem_fwd[p]] + ([cs.mem_bwd[p][0]] if cs.mem_bwd[p][0].size else [])).reshape(-1, V)
            .astype(np.float64)) / k
        static = const_static[p] + nv.sum(axis=1) * lay.static
        e = np.zeros(nv.shape[0])
        for i in np.flatnonzero(ok):
            cnt = tuple(int(x) for x in vecs[i])
            for w in rows:
                room = problem.hbm_mib - static[i] - float(w @ end_a[:, p])
                e[i] = max(e[i], _min_extra(fr, cnt, w, room))
                if not np.isfinite(e[i]):
                    break
        ok &= np.isfinite(e)
        if keep:
            wmin = A_b.min(axis=1)  # per path: least (cb − 1) over the stage's chunks (>= −1)
            E = (E0 + wmin[None, :] * np.where(ok, e, 0.0)[:, None]).max(axis=1)
        else:
            E = E0[:, 0]
        tables.append((nv[ok], F[ok], B[ok], e[ok], E[ok]))
    if not any_path:
        return None
    return tables, total


def _dp(tables, eps: np.ndarray, N: int) -> np.ndarray:
    """Least Σ_stages (F + B + replay) ms over one configuration per stage with Σ layers = N and
    every stage's E <= eps[k], for all k at once: float [len(eps)] (+inf where none)."""
    Kn = eps.size
    D = np.full((Kn, N + 1), np.inf)
    D[:, 0] = 0.0
    for nv, F, B, e, E in tables:
        L = np.rint(nv.sum(axis=1)).astype(np.int64)
        c = F.sum(axis=1) + B.sum(axis=1) + e
        first = np.searchsorted(eps, E - 1e-9 * np.maximum(1.0, np.abs(E)), side="left")  # -inf -> 0
        new = np.full_like(D, np.inf)
        for l in np.unique(L):
            sel = L == l
            col = np.full(Kn + 1, np.inf)
            np.minimum.at(col, first[sel], c[sel])
            g = np.minimum.accumulate(col[:Kn])  # cheapest l-layer configuration allowed at eps[k]
            np.minimum(new[:, l:], D[:, :N + 1 - l] + g[:, None], out=new[:, l:])
        D = new
    return D[:, N]


def device_dp_bound(problem: Problem, V: int, *, upper_ms: float, max_configs: int = MAX_CONFIGS
                    ) -> DeviceDPBound | None:
    """Lower bound (ms) on the step time of every memory-feasible layout with pp_interleave_num V
    whose step time is <= ``upper_ms`` (a feasible step time: the result is min(bound, upper_ms),
    so it is a bound on the optimum whenever some layout reaches ``upper_ms``).

    See the module docstring for the model. Returns None where it does not apply (V = 1, a
    schedule that splits B/W, non-default pipeline positions, no finite ``upper_ms``, no no-skip
    path) or when the stage configurations would exceed ``max_configs`` (a work cap).
    """
    if upper_ms is None or not np.isfinite(upper_ms):
        return None
    out = _stage_tables(problem, V, float(upper_ms), max_configs)
    if out is None:
        return None
    tables, total = out
    N = problem.N
    if any(t[0].shape[0] == 0 for t in tables):
        return DeviceDPBound(float(upper_ms), total, 0)
    finite = [t[4][np.isfinite(t[4])] for t in tables]
    eps = np.unique(np.concatenate(finite))
    if eps.size == 0:
        return DeviceDPBound(float(upper_ms), total, 0)
    val = _dp(tables, eps, N) + eps
    best = float(val.min()) if np.isfinite(val).any() else float("inf")
    return DeviceDPBound(min(best, float(upper_ms)), total, eps.size)
