"""Least replay weighted per chunk, for the stage DP's own-stage term (pure numpy, no Optuna).

A path that runs c_v backward ops of chunk v on a stage pays Σ_v c_v·x_v of replay there, x_v
the replay ms per micro-batch of chunk v's recompute choice. Every choice that fits the stage's
memory rows pays at least

    max over the rows r of  min { Σ_v c_v·x_v : the choice fits row r }

(a choice that fits every row fits each one), and that is >= (min_v c_v)·(least Σ_v x_v), the
term the stage DP charged before (:mod:`autotune.tuner.bounds.stage_dp`): c_v >= min c. The
relaxation is :mod:`autotune.tuner.bounds._relax`'s (a free recompute class per layer, the
relaxed layer); the exact value uses its Pareto fronts with the replay coordinate of chunk v
scaled by c_v (a scale >= 0 keeps the memory coordinate and its order; each Minkowski sum is
Pareto-pruned again, so a zero weight is fine), configurations of at least
:data:`~autotune.tuner.bounds._relax.LP_MIN_LAYERS` layers the linear relaxation (lower).
"""

from __future__ import annotations

import numpy as np

from autotune.tuner.bounds._relax import LP_MIN_LAYERS, RowFrontiers, pareto_front, row_bounds, row_maximum


def chunk_weights(cB: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The distinct chunk weightings of a stage's paths, backward op counts cB float [Q, V].

    Returns (cw float [D, V], scale float [Q], which int [Q]): path q's replay term is scale[q]
    × the weighted least replay of cw[which[q]] (scale = the path's fewest backward ops of a chunk,
    or its most where one chunk has none; which = -1 where the weighting adds nothing to
    scale × the unweighted least replay: equal counts, or no backward op at all)."""
    Q, V = cB.shape
    lo, hi = cB.min(axis=1), cB.max(axis=1)
    scale = np.where(lo > 0, lo, hi)
    which = np.full(Q, -1, dtype=np.int64)
    useful = (hi > 0) & (hi > lo)
    if not useful.any():
        return np.zeros((0, V)), scale, which
    norm = np.round(cB[useful] / scale[useful, None], 9)
    cw, inv = np.unique(norm, axis=0, return_inverse=True)
    which[useful] = inv.reshape(-1)
    return cw, scale, which


def weighted_min_extra(fr: RowFrontiers, counts: np.ndarray, w: np.ndarray, c: np.ndarray, budget: float) -> float:
    """min Σ_v c_v·(replay of chunk v) over per-layer classes with Σ_v (w_v·act + static_delta)
    <= budget (MiB; ``counts`` int [V] layers, ``w`` [V] live counts, ``c`` [V] >= 0 weights);
    +inf when nothing fits. Chunks with the same (w, c) merge into one group (their layers are
    interchangeable); the front sum of every group but the one with the most layers is memoised
    (``fr.pre``), that group is matched to each of its points by binary search, and values are
    memoised per (groups, budget) in ``fr.values`` (as :func:`~autotune.tuner.bounds._relax.min_extra_ms`)."""
    merged: dict[tuple[float, float], int] = {}
    for n, x, s in zip(counts.tolist(), w.tolist(), c.tolist()):
        if n:
            merged[(x, s)] = merged.get((x, s), 0) + int(n)
    grp = tuple(sorted(merged.items(), key=lambda g: (g[1], g[0])))  # the most layers last
    key = ("weighted", grp, float(budget))
    val = fr.values.get(key)
    if val is not None:
        return val
    if not grp:
        val = 0.0 if budget + 1e-9 >= 0.0 else float("inf")
    else:
        acc = _scaled_sum(fr, grp[:-1])
        (x, s), n = grp[-1]
        last = fr.get(n, x)
        i = np.searchsorted(last[:, 0], budget - acc[:, 0] + 1e-9, side="right") - 1
        ok = i >= 0
        val = float((acc[ok, 1] + s * last[i[ok], 1]).min()) if ok.any() else float("inf")
    fr.values[key] = val
    return val


def _scaled_sum(fr: RowFrontiers, grp: tuple) -> np.ndarray:
    """Pareto front of the Minkowski sum over groups ((w, c), n) of ``fr.get(n, w)`` with the
    replay coordinate × c (memoised by prefix in ``fr.pre``)."""
    if not grp:
        return np.zeros((1, 2))
    key = ("scaled", grp)
    f = fr.pre.get(key)
    if f is None:
        (x, s), n = grp[-1]
        g = fr.get(n, x) * np.array([1.0, s])
        acc = _scaled_sum(fr, grp[:-1])
        f = pareto_front((acc[:, None, :] + g[None, :, :]).reshape(-1, 2))
        fr.pre[key] = f
    return f


def worst_row_weighted(fr: RowFrontiers, nv: np.ndarray, rows: np.ndarray, budget: np.ndarray,
                       c: np.ndarray) -> np.ndarray:
    """float [M] ms: max(0, max over the live-count vectors ``rows`` [R, V] of
    :func:`weighted_min_extra`) of configurations nv int [M, V] with budgets ``budget`` (MiB
    [M, R]) and chunk weights c [V]; +inf where a row cannot fit. As
    :func:`~autotune.tuner.bounds._relax.worst_row_extra`: each pair gets the linear relaxation and
    an integer choice that fits (lp <= exact <= ub) first, and only the pairs whose ub can raise a
    configuration's maximum are priced exactly; configurations of at least ``LP_MIN_LAYERS``
    layers keep the linear relaxation."""
    nv = np.asarray(nv, dtype=np.int64)
    M, R = nv.shape[0], rows.shape[0]
    if M == 0 or R == 0:
        return np.zeros(M)
    layer = fr.layer
    extra = c[:, None] * layer.extra_ms[None, :]  # [V, C] ms per layer of each chunk

    def groups(w: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        return w[:, None] * layer.act_mib[None, :] + layer.sdelta_mib[None, :], extra, nv

    lp, ub, near = row_bounds(rows, budget, groups)

    def price(i: np.ndarray, r: np.ndarray) -> np.ndarray:
        return np.array([weighted_min_extra(fr, nv[a], rows[b], c, budget[a, b]) for a, b in zip(i, r)])
    return row_maximum(lp, ub, near, nv.sum(axis=1) < LP_MIN_LAYERS, price)
