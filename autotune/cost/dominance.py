"""The one Pareto filter of autotune (pure numpy): which rows of a table no other row dominates.

Used by the cost model (live-count vectors of a schedule), the lower bounds (recompute fronts,
live-count vectors, stage configurations), the exact oracle and the recompute fits (recompute
options), and the time-memory front of ``--objective time,memory``.
"""

from __future__ import annotations

import numpy as np

#: Rows compared at once in the quadratic case (bounds the [block, n, d] temporaries).
BLOCK = 256


def pareto_mask(vals: np.ndarray, *, tol: float = 0.0, keep_ties: bool = False) -> np.ndarray:
    """bool [n]: the rows of ``vals`` [n, d] on the Pareto front, every column minimised (negate a
    column, or the table, to maximise).

    Default: the rows are taken in lexicographic order (column 0 first; equal rows in the order
    given) and a row is dropped when an earlier row of that order is within ``tol`` of it or below
    it in every column (``earlier - tol <= row``). With ``tol = 0`` that is the textbook front
    with the first of equal rows kept. Two columns take a sorted sweep (O(n log n)); more, blocks
    of :data:`BLOCK` rows against the rows before them (O(n²·d)).

    ``keep_ties``: a row is dropped only when another row is <= it + tol in every column and
    < it - tol in some column (``other <= row + tol``, ``other < row - tol``), so rows equal
    within ``tol`` are all kept.
    """
    vals = np.asarray(vals, dtype=np.float64)
    if vals.ndim == 1:
        vals = vals[:, None]
    if keep_ties:
        return _strict_mask(vals, tol)
    out = np.zeros(vals.shape[0], dtype=bool)
    out[pareto_order(vals, tol=tol)] = True
    return out


def pareto_order(vals: np.ndarray, *, tol: float = 0.0) -> np.ndarray:
    """int [k]: the indices of :func:`pareto_mask`'s rows (default rule), in lexicographic order
    of the rows (a sorted front: column 0 ascending)."""
    vals = np.asarray(vals, dtype=np.float64)
    if vals.ndim == 1:
        vals = vals[:, None]
    n = vals.shape[0]
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    order = np.lexsort(vals.T[::-1])
    s = vals[order]
    if s.shape[1] == 1:
        keep = np.zeros(n, dtype=bool)
        keep[0] = True
    elif s.shape[1] == 2:
        # sorted by column 0, so an earlier row is below in it: compare the running min of column 1
        run_min = np.minimum.accumulate(s[:, 1])
        keep = np.concatenate([[True], s[1:, 1] < run_min[:-1] - tol])
    else:
        keep = _sweep_blocks(s, tol)
    return order[keep]


def _sweep_blocks(s: np.ndarray, tol: float) -> np.ndarray:
    """bool [n] keep-mask of the default rule on lexicographically sorted rows ``s`` [n, d], d >= 3.

    A row is dropped when an earlier row r has r - tol <= it in every column. Blocks of
    :data:`BLOCK` rows are compared with the rows kept so far, then the survivors with the earlier
    survivors of their block: O(n · (front + BLOCK) · d) instead of O(n² · d). With tol = 0 that
    is the rule exactly (dominance is transitive: a dropped row's dominator is itself dominated by
    an earlier kept row, which then dominates the row too). With tol > 0 it is not transitive, so the rows
    this keeps are checked once more against every earlier row."""
    n, d = s.shape
    keep = np.zeros(n, dtype=bool)
    front = np.empty((0, d))
    for lo in range(0, n, BLOCK):
        blk = s[lo:lo + BLOCK]
        alive = np.arange(len(blk))
        if len(front):  # the kept rows first (few), then the block's survivors among themselves
            alive = alive[~_below(blk, front, tol).any(axis=1)]
        sub = blk[alive]
        alive = alive[~(_below(sub, sub, tol) & np.tri(len(sub), k=-1, dtype=bool)).any(axis=1)]
        keep[lo + alive] = True
        front = np.concatenate([front, blk[alive]])
    if tol > 0:
        kept = np.nonzero(keep)[0]
        for lo in range(0, len(kept), BLOCK):
            k = kept[lo:lo + BLOCK]
            le = (s[None, :, :] - tol <= s[k, None, :]).all(-1) & (np.arange(n)[None, :] < k[:, None])
            keep[k[le.any(axis=1)]] = False
    return keep


def _below(rows: np.ndarray, by: np.ndarray, tol: float) -> np.ndarray:
    """bool [a, b]: ``by[j] - tol <= rows[i]`` in every column, built one column at a time (no
    [a, b, d] temporary; every 8 columns it stops when no pair is left): ~3 × faster than
    ``.all(-1)`` on the exact recompute fit's tables (~2,000 rows × up to 33 columns)."""
    out = by[None, :, 0] - tol <= rows[:, None, 0]
    for c in range(1, rows.shape[1]):
        out &= by[None, :, c] - tol <= rows[:, None, c]
        if c % 8 == 0 and not out.any():
            break
    return out


def _strict_mask(vals: np.ndarray, tol: float) -> np.ndarray:
    """:func:`pareto_mask` with ``keep_ties``: no other row <= it + tol everywhere and < it - tol
    somewhere.

    Only the rows of the exact front (:func:`pareto_order`, tol 0) need to be tried as dominators:
    any row o that dominates a row this way has a front row f <= o in every column, and f then
    dominates that row the same way. O(n · front · d)."""
    n = vals.shape[0]
    if n == 0:
        return np.ones(0, dtype=bool)
    f = vals[pareto_order(vals)]
    keep = np.ones(n, dtype=bool)
    for lo in range(0, n, BLOCK):
        blk = vals[lo:lo + BLOCK]
        le = (f[None, :, :] <= blk[:, None, :] + tol).all(-1)  # [b, front]
        lt = (f[None, :, :] < blk[:, None, :] - tol).any(-1)
        keep[lo:lo + len(blk)] = ~(le & lt).any(axis=1)
    return keep
