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
    of :data:`BLOCK` rows against the rows kept before them (O(n·front·d), :func:`_sweep_blocks`),
    or with tol = 0 and 256 to 16,384 rows bitsets of rows (O(n²·d / 64), :func:`_sweep_bitsets`),
    from 1,024 rows only once the block sweep has kept more than 256 rows
    (:data:`BLOCKS_FIRST_ROWS`).

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


def undominated(rows: np.ndarray) -> np.ndarray:
    """The distinct rows not below another row in every column (the largest, e.g. the largest
    live-count vectors of a schedule), in ``np.unique`` order."""
    rows = np.unique(rows, axis=0)
    return rows[pareto_mask(-rows)]


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
    elif tol == 0.0 and BITSET_MIN_ROWS <= n <= BITSET_MAX_ROWS:
        keep = _sweep_blocks(s, tol, max_front=BLOCKS_FIRST_FRONT) if n >= BLOCKS_FIRST_ROWS else None
        if keep is None:  # a large front: the bitsets (or a small table)
            keep = _sweep_bitsets(s)
    else:
        keep = _sweep_blocks(s, tol)
    return order[keep]


#: Rows from which :func:`_sweep_bitsets` takes a tol = 0 table: below, its per-column sorts cost
#: more than the block sweep (measured on the exact recompute fit's tables, 40 samples each,
#: bitsets against blocks: 128 rows 19.7 ms against 13.2, 256 rows 31.6 against 34.3, 1,024 rows
#: 84.5 against 155.3, tables with large fronts; the bound phase of scaling.py's P32 V4 m256 L256,
#: 13,108 tables under 256 rows, 5.9 s against 2.8).
BITSET_MIN_ROWS = 256
#: From this many rows a tol = 0 table first goes through the block sweep, which stops after the
#: block in which more than :data:`BLOCKS_FIRST_FRONT` rows are kept in all (then the bitsets take
#: the table; at most one block, 256 rows, more are kept by then): the
#: block sweep's cost grows with the front, the bitsets' with the rows squared. Measured on 60
#: tables of the exact recompute fit's pruning on Qwen2.5-32B 32k (pp 2, 64 layers, 2,300-4,000
#: rows of 5 columns, ~58 kept): 6.74 ms a table with the bitsets, 1.43 with the blocks; on random
#: tables of 2,000 rows with 27 columns the two take about the same time at a front of ~250 rows
#: (blocks 9.2 ms, bitsets 12.0 at 270 kept; blocks 34.9 ms, bitsets 9.2 when all 2,000 are kept).
#: A try that fails late costs both sweeps (a 4,000-row table whose front passes 256 rows in its
#: last block: 60 ms against 38 for the bitsets alone). Same rows kept either way.
BLOCKS_FIRST_ROWS = 1024
BLOCKS_FIRST_FRONT = 256
#: Most rows :func:`_sweep_bitsets` takes (its [n, n / 64] words: 4 MiB at 4,096 rows, 32 MiB at
#: this); larger tables go through :func:`_sweep_blocks`.
BITSET_MAX_ROWS = 16_384


def _sweep_bitsets(s: np.ndarray) -> np.ndarray:
    """bool [n] keep-mask of the default rule with tol = 0 on lexicographically sorted rows
    ``s`` [n, d], d >= 3: row i is dropped when some row j < i has s[j] <= s[i] in every column.

    Bitsets of rows (n / 64 words each): per column, the rows with a value <= s[i, c] are a prefix
    of that column's sorted order, so their set is a prefix OR of one-hot rows, found by binary
    search; row i's candidate dominators are the AND over the columns of those sets and of the rows
    before it (column 0 is skipped: it ascends), and a row left with none is kept and leaves the
    work. O(d · n · n / 64) word operations instead of the block sweep's O(d · n · front). With
    tol = 0 dominance is transitive, so "dominated by an earlier row" is the same as "by an earlier
    kept row" (:func:`_sweep_blocks`' rule). Measured on 150 tables of the exact recompute fit
    (scaling.py's P8 V4 m128 L256 MoE problem: ~2,240 rows, front ~1,000, ~26 columns): 1.3 s of
    CPU against the block sweep's 2.6 s, the same rows kept."""
    n, d = s.shape
    words = (n + 63) // 64
    rows = np.arange(n)
    onehot = np.zeros((n, words), dtype=np.uint64)
    onehot[rows, rows // 64] = np.left_shift(np.uint64(1), (rows % 64).astype(np.uint64))
    prefix = np.zeros((n + 1, words), dtype=np.uint64)
    np.bitwise_or.accumulate(onehot, axis=0, out=prefix[1:])
    acc = prefix[:-1].copy()  # row live[k]: the rows before it that are <= it in the columns so far
    live = rows
    cols = np.ascontiguousarray(s.T)
    rank = np.empty(n, dtype=np.int64)
    for c in range(1, d):  # column 0 ascends: it rules out no earlier row
        order = np.argsort(cols[c], kind="stable")
        v = cols[c][order]
        rank[order] = np.searchsorted(v, v, side="right")  # rows with a value <= this row's: a prefix
        np.bitwise_or.accumulate(onehot[order], axis=0, out=prefix[1:])
        acc &= prefix[rank[live]]
        if c % 2 == 0:  # rows with no candidate dominator left are kept: drop them from the work
            nz = acc.any(axis=1)
            live, acc = live[nz], acc[nz]
            if not live.size:
                break
    keep = np.ones(n, dtype=bool)
    keep[live[acc.any(axis=1)]] = False
    return keep


def _sweep_blocks(s: np.ndarray, tol: float, max_front: int | None = None) -> np.ndarray | None:
    """bool [n] keep-mask of the default rule on lexicographically sorted rows ``s`` [n, d], d >= 3;
    None after the block in which more than ``max_front`` rows are kept in all (when given).

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
        if max_front is not None and len(front) > max_front:
            return None
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
