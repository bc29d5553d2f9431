"""Least replay weighted per chunk, for the stage DP's own-stage term (pure numpy, no Optuna).

A path that runs c_v backward ops of chunk v on a stage pays Σ_v c_v·x_v of replay there, x_v
the replay ms per micro-batch of chunk v's recompute choice. Every choice that fits the stage's
memory rows pays at least

    max over the rows r of  min { Σ_v c_v·x_v : the choice fits row r }

(a choice that fits every row fits each one), and that is >= (min_v c_v)·(least Σ_v x_v), the
term the stage DP charged before (:mod:`autotune.tuner.bounds.stage_dp`): c_v >= min c. The
relaxation is :mod:`autotune.tuner.bounds._relax`'s (a free recompute class per layer, the
relaxed layer); the exact value is :func:`~autotune.tuner.bounds._relax.min_extra_ms` with the
chunk weights (its Pareto fronts with the replay coordinate of chunk v scaled by c_v),
configurations of at least
:data:`~autotune.tuner.bounds._relax.LP_MIN_LAYERS` layers the linear relaxation (lower).
"""

from __future__ import annotations

import numpy as np

from autotune.tuner.bounds._relax import LP_MIN_LAYERS, RowFrontiers, min_extra_ms, row_bounds, row_maximum


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


def worst_row_weighted(fr: RowFrontiers, nv: np.ndarray, rows: np.ndarray, budget: np.ndarray,
                       c: np.ndarray) -> np.ndarray:
    """float [M] ms: max(0, max over the live-count vectors ``rows`` [R, V] of
    :func:`~autotune.tuner.bounds._relax.min_extra_ms` with chunk weights c [V]) of configurations
    nv int [M, V] with budgets ``budget`` (MiB [M, R]); +inf where a row cannot fit. As
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
        return np.array([min_extra_ms(fr, nv[a], rows[b], budget[a, b], c) for a, b in zip(i, r)])
    return row_maximum(lp, ub, near, nv.sum(axis=1) < LP_MIN_LAYERS, price)
