"""Layer kinds by position in the device DP (pure numpy, no Optuna; issue 17).

A profile's layer kinds are fixed by position (its ``layer_kinds`` runs: DeepSeek-V3's first
layers are dense, the rest MoE, each MoE layer holding 4,407 MiB of static memory against the
dense layer's 939). Mini-stages fill the layers in pipeline-position order
(:func:`autotune.cost.inputs.first_layers`), and every mini-stage holds at least its lower bound
lo (:meth:`autotune.tuner.problem.Problem.bounds`). So layer j of mini-stage (v, p) holding n
layers sits at a global index in [e + j, h − n + j], where e is the sum of lo over the mini-stages
before it in pipeline order and h is N minus the sum over those after it. A layer whose window
holds one kind *is* that kind; any other layer is relaxed to the componentwise minimum over the
kinds present (:func:`autotune.tuner.bounds._relax.relaxed_layer`), as every layer was before.

A stage configuration then counts its layers per chunk and **type**: type 0 is the relaxed layer,
type 1 + i the i-th kind present, exactly. With one kind present there is one type (the relaxed
layer is then exact, nothing changes). Every real layout's layer is >= its type's layer in every
component (time, static, per-class activation, replay, static change, workspace), so a bound
computed on types stays a proof.
"""

from __future__ import annotations

import itertools
import math

import numpy as np

from autotune.cost.dominance import pareto_mask, pareto_order
from autotune.cost.schedules import get_schedule
from autotune.tuner.bounds._relax import (BATCH_CELLS, RelaxedLayer, RowFrontiers, min_extra_ms, pareto_front,
                                          pair_blocks, relaxed_layer, row_bounds, row_frontiers, row_maximum,
                                          typed_layers, worst_row_extra)
from autotune.tuner.problem import Problem


class LayerTypes:
    """The layer types of pp_interleave_num V (module docstring): ``layers`` (type -> relaxed
    layer), per-type forward / backward ms and static MiB [T], and :meth:`typed` counts."""

    def __init__(self, problem: Problem, V: int) -> None:
        pa = problem.pa
        ks = np.flatnonzero(pa.kind_prefix[:, -1] > 0)
        self.layers: tuple[RelaxedLayer, ...] = (relaxed_layer(problem),)
        if ks.size > 1:
            self.layers += typed_layers(problem)
        self.T = len(self.layers)
        self.fwd_ms = np.array([lay.fwd_ms for lay in self.layers])
        self.bwd_ms = np.array([lay.bwd_ms for lay in self.layers])
        self.static_mib = np.array([lay.static_mib for lay in self.layers])
        self._pref = pa.kind_prefix[ks].astype(np.int64)  # [K', N + 1]
        N = problem.N
        lo = problem.bounds(V)[0].reshape(-1)
        pos = np.asarray(get_schedule(problem.schedule).virtual_position(problem.P, V)).reshape(-1)
        order = np.argsort(pos, kind="stable")
        before = np.empty_like(lo)
        before[order] = np.cumsum(lo[order]) - lo[order]
        self._e = before.reshape(V, problem.P)  # least first index of each mini-stage
        self._h = (N - (lo.sum() - before - lo)).reshape(V, problem.P)  # least end beyond it
        self._N = N
        self._cache: dict[tuple[int, int, int], np.ndarray] = {}

    def chunk(self, v: int, p: int, n: int) -> np.ndarray:
        """int [T]: how many of the n layers of mini-stage (v, p) have each type."""
        key = (v, p, n)
        out = self._cache.get(key)
        if out is None:
            out = np.zeros(self.T, dtype=np.int64)
            if self.T == 1:
                out[0] = n
            else:
                j = np.arange(n)
                a = np.clip(self._e[v, p] + j, 0, self._N)
                b = np.clip(self._h[v, p] - n + j + 1, 0, self._N)
                have = (self._pref[:, np.maximum(a, b)] - self._pref[:, a]) > 0  # [K', n]
                one = have.sum(axis=0) == 1
                t = np.where(one, 1 + np.argmax(have, axis=0), 0)
                out += np.bincount(t, minlength=self.T)
            self._cache[key] = out
        return out

    def typed(self, p: int, nv: np.ndarray) -> np.ndarray:
        """int [M, V, T]: the type counts of stage p's configurations ``nv`` (int-valued [M, V])."""
        n = np.rint(nv).astype(np.int64)
        if self.T == 1:
            return n[:, :, None]
        out = np.zeros(n.shape + (self.T,), dtype=np.int64)
        for v in range(n.shape[1]):
            uniq, inv = np.unique(n[:, v], return_inverse=True)
            out[:, v] = np.stack([self.chunk(v, p, int(u)) for u in uniq])[inv.reshape(-1)]
        return out

    @property
    def fwd_max_ms(self) -> float:
        """The largest forward ms of a type (a skipped layer's forward is at most it)."""
        return float(self.fwd_ms.max())


def _canonical(groups) -> tuple[tuple[int, int, float], ...]:
    """(type, layers, weight) groups in the order :meth:`TypedFronts.min_extra` and
    :meth:`TypedFronts.min_extra_batch` both price them: fewest layers first (the last, largest,
    is matched by binary search), then type, then weight."""
    return tuple(sorted(groups, key=lambda g: (g[1], g[0], g[2])))


class TypedFronts:
    """Least replay of a stage's typed layers against memory rows (one
    :class:`~autotune.tuner.bounds._relax.RowFrontiers` per type); with one type exactly
    :func:`~autotune.tuner.bounds._relax.min_extra_ms`."""

    def __init__(self, types: LayerTypes, problem: Problem | None = None) -> None:
        # with the problem: each type's fronts are the problem's shared ones (row_frontiers)
        self.fr = [RowFrontiers(lay) if problem is None else row_frontiers(problem, lay) for lay in types.layers]
        self.T = types.T
        self.pre: dict[tuple, np.ndarray] = {}

    def get(self, t: int, n: int, w: float) -> np.ndarray:
        """Front (memory MiB, replay ms) of n layers of type t against the coordinate w·act + δ."""
        return self.fr[t].get(n, w)

    def _prefix(self, cols: tuple[tuple[int, int, float], ...]) -> np.ndarray:
        if cols not in self.pre:
            if not cols:
                f = np.zeros((1, 2))
            else:
                acc = self._prefix(cols[:-1])
                f = pareto_front((acc[:, None, :] + self.get(*cols[-1])[None, :, :]).reshape(-1, 2))
            self.pre[cols] = f
        return self.pre[cols]

    def min_extra(self, tn: tuple[tuple[int, ...], ...], w: np.ndarray, budget: float) -> float:
        """min Σ replay (ms) over per-layer classes with Σ_v Σ_t (w_v·act + δ) <= budget (MiB);
        ``tn`` the type counts per chunk (+inf when nothing fits)."""
        if self.T == 1:
            return min_extra_ms(self.fr[0], tuple(c[0] for c in tn), w, budget)
        # Layers of one type are interchangeable, so the (chunk, type) groups with the same type and
        # weight merge (get(n1, w) ⊕ get(n2, w) and get(n1 + n2, w) have the same front, as in
        # min_extra_ms); the groups in a canonical order, the most layers last (matched by binary
        # search), so the memoised prefix sums are shared and small.
        merged: dict[tuple[int, float], int] = {}
        for c, wv in zip(tn, w):
            for t, n in enumerate(c):
                if n:
                    key = (t, float(wv))
                    merged[key] = merged.get(key, 0) + int(n)
        cols = _canonical((t, n, x) for (t, x), n in merged.items())
        if not cols:
            return 0.0 if budget >= -1e-9 else float("inf")
        acc = self._prefix(cols[:-1])
        last = self.get(*cols[-1])
        i = np.searchsorted(last[:, 0], budget - acc[:, 0] + 1e-9, side="right") - 1
        ok = i >= 0
        return float((acc[ok, 1] + last[i[ok], 1]).min()) if ok.any() else float("inf")

    def worst_rows(self, tn: np.ndarray, rows: np.ndarray, room: np.ndarray) -> np.ndarray:
        """float [M] ms: max(0, max over rows r of ``min_extra(tn[i], rows[r], room[i, r])``) for
        every configuration i (type counts int [M, V, T], live-count vectors [R, V], budgets MiB
        [M, R]), the same values, with the exact fronts asked only for the rows that can hold the
        maximum (:func:`~autotune.tuner.bounds._relax.row_maximum`; the groups of the linear
        relaxation are the (chunk, type) pairs)."""
        M, V, T = tn.shape
        if self.T == 1:
            return worst_row_extra(self.fr[0], tn[:, :, 0], rows, room)
        lays = [fr.layer for fr in self.fr]
        act = np.stack([lay.act_mib for lay in lays])  # [T, C]
        sd = np.stack([lay.sdelta_mib for lay in lays])
        ex = np.stack([lay.extra_ms for lay in lays])
        n = tn.reshape(M, V * T)
        extra = np.broadcast_to(ex[None], (V, T, ex.shape[1])).reshape(V * T, -1)

        def groups(w: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
            return (w[:, None, None] * act[None] + sd[None]).reshape(V * T, -1), extra, n
        lp, ub, near = row_bounds(rows, room, groups)

        def price(i: np.ndarray, r: np.ndarray) -> np.ndarray:
            val = np.empty(i.size)
            for q in np.unique(r):  # one batch per live-count vector
                k = np.flatnonzero(r == q)
                val[k] = self.min_extra_batch(tn[i[k]], rows[q], room[i[k], q])
            return val
        return row_maximum(lp, ub, near, np.ones(M, dtype=bool), price, rounds=1)

    def min_extra_batch(self, tn: np.ndarray, w: np.ndarray, budget: np.ndarray) -> np.ndarray:
        """float [K] ms: :meth:`min_extra` of K configurations (type counts int [K, V, T]) against
        one live-count vector ``w`` [V], each with its own budget (MiB [K]); the same values
        (the same float64 operations per configuration), with the configurations that merge
        to the same (type, weight) groups sharing one prefix front (on pp 32 × vpp 4 × m 256 MoE
        the device DP priced ~420,000 pairs one by one before), and every (configuration,
        prefix-front point) pair priced in one pass, a binary search per last front (one pass per
        group composition before)."""
        K = tn.shape[0]
        val = np.full(K, np.inf)
        if K == 0:
            return val
        w = np.asarray(w, dtype=np.float64)
        u = np.unique(w)
        G = u.size
        ind = (w[:, None] == u[None, :]).astype(np.int64)  # [V, G]
        gc = np.einsum("kvt,vg->ktg", np.asarray(tn, dtype=np.int64), ind).reshape(K, -1)  # [K, T·G]
        keys, inv = np.unique(gc, axis=0, return_inverse=True)
        inv = inv.reshape(-1)
        budget = np.asarray(budget, dtype=np.float64)
        # per distinct group composition: its prefix front (every group but the last) and its
        # last group's front, then every (configuration, prefix-front point) pair in one pass
        accs, lasts, lidx, empty = [], {}, np.zeros(keys.shape[0], dtype=np.int64), np.zeros(keys.shape[0], bool)
        # every key's (type, layers, weight) groups in :func:`_canonical` order at once: column
        # c = t·G + g, u ascending, so (layers, c) orders as (layers, type, weight)
        r, c = np.nonzero(keys)
        n = keys[r, c]
        o = np.lexsort((c, n, r))
        ends = np.cumsum(np.bincount(r, minlength=keys.shape[0])).tolist()
        groups = list(zip((c[o] // G).tolist(), n[o].tolist(), u[c[o] % G].tolist()))
        a = 0
        for j, b in enumerate(ends):
            cols = tuple(groups[a:b])
            a = b
            if not cols:
                empty[j] = True
                accs.append(np.zeros((1, 2)))
                continue
            accs.append(self._prefix(cols[:-1]))
            lidx[j] = lasts.setdefault(cols[-1], len(lasts))
        fronts = [self.get(*c) for c in lasts]
        sizes = np.array([a.shape[0] for a in accs], dtype=np.int64)
        off = np.concatenate([[0], np.cumsum(sizes)])
        acc = np.concatenate(accs)
        for lo, hi, kidx, aidx, first in pair_blocks(sizes[inv], off[inv], BATCH_CELLS):
            room = budget[kidx] - acc[aidx, 0] + 1e-9
            tot = np.full(kidx.size, np.inf)
            lk = lidx[inv[kidx]]
            live = ~empty[inv[kidx]]
            for d, f in enumerate(fronts):  # per last front: the points within each room
                at = np.flatnonzero(live & (lk == d))
                i = np.searchsorted(f[:, 0], room[at], side="right") - 1
                tot[at] = np.where(i >= 0, acc[aidx[at], 1] + f[np.maximum(i, 0), 1], np.inf)
            v = np.minimum.reduceat(tot, first)
            none = empty[inv[lo:hi]]
            val[lo:hi] = np.where(none, np.where(budget[lo:hi] >= -1e-9, 0.0, np.inf), v)
        return val


def class_counts(n: int, C: int) -> np.ndarray:
    """int [K, C]: how many of n layers take each of C classes, every multiset once (K = C(n + C − 1,
    C − 1); stars and bars: the C − 1 bars' places among n + C − 1)."""
    if C == 1:
        return np.array([[n]], dtype=np.int64)
    bars = np.array(list(itertools.combinations(range(n + C - 1), C - 1)), dtype=np.int64)
    edges = np.concatenate([np.full((len(bars), 1), -1), bars, np.full((len(bars), 1), n + C - 1)], axis=1)
    return np.diff(edges, axis=1) - 1


#: Tolerance of the chunk options' Pareto filter (``pareto_mask(..., tol=TOL, keep_ties=True)``).
TOL = 1e-9


def _exact_column(x: np.ndarray, n: int, tol: float) -> bool:
    """Whether every Σ_i c_i·x_i with c_i >= 0, Σ c_i <= n is computed exactly in float64 (any
    order, FMA or not) on a grid g = 2^-s > 2·tol: every x_i a multiple of g and n·max|x_i| < 2^53·g."""
    top = float(np.abs(x).max()) * n
    for s in range(0, 64):
        g = 2.0 ** -s
        if g <= 2 * tol:
            return False
        if top < 2.0 ** 53 * g and np.all(np.rint(x / g) == x / g):
            return True
    return False


def _prune(d: np.ndarray, theta: np.ndarray) -> np.ndarray:
    """bool [K]: the rows of ``d`` [K, c] that no row o of it meets with o <= row in every column
    and o < row − θ in some column (float64 comparisons, ``row - theta`` rounded as written).

    No column: nothing is pruned. One: o = the least value. Two: sorted by column 0, the least
    column 1 among the rows with column 0 < row − θ0 (then <= row in column 1), or among those
    with column 0 <= row (then < row − θ1). More: only the rows of the exact front
    (:func:`pareto_order`) are tried — a row o that prunes a row has a front row f <= o in every
    column, and f prunes it too — and of those only the ones <= the block's largest column 0
    (blocks of 256 rows in column-0 order)."""
    K, c = d.shape
    if c == 0:
        return np.ones(K, dtype=bool)
    if c == 1:
        return ~(d[:, 0].min() < d[:, 0] - theta[0])
    if c == 2:
        order = np.argsort(d[:, 0], kind="stable")
        x, run = d[order, 0], np.minimum.accumulate(d[order, 1])
        below = np.searchsorted(x, d[:, 0] - theta[0], side="left")  # rows with column 0 < row − θ0
        upto = np.searchsorted(x, d[:, 0], side="right")  # rows with column 0 <= row
        a = (below > 0) & (run[np.maximum(below - 1, 0)] <= d[:, 1])
        b = run[upto - 1] < d[:, 1] - theta[1]
        return ~(a | b)
    f = d[pareto_order(d)]  # sorted by column 0
    keep = np.ones(K, dtype=bool)
    order = np.argsort(d[:, 0], kind="stable")
    for lo in range(0, K, 256):
        idx = order[lo:lo + 256]
        blk, low = d[idx], d[idx] - theta
        g = f[:np.searchsorted(f[:, 0], blk[-1, 0], side="right")]  # only these are <= in column 0
        le = g[None, :, 0] <= blk[:, None, 0]
        lt = g[None, :, 0] < low[:, None, 0]
        for j in range(1, c):
            le &= g[None, :, j] <= blk[:, None, j]
            lt |= g[None, :, j] < low[:, None, j]
        keep[idx] = ~(le & lt).any(axis=1)
    return keep


class FrontTooLarge(Exception):
    """:func:`front_counts` stopped: a level kept more than its ``max_rows`` multisets."""


def front_counts(per: np.ndarray, ws: np.ndarray, n: int, tol: float,
                 max_rows: int | None = None) -> np.ndarray | None:
    """int [K, C]: multisets of n layers over the C classes (count vectors in lexicographic order,
    the order of :func:`class_counts`) among which ``pareto_mask(arr, tol=tol, keep_ties=True)``
    keeps exactly the rows it keeps among all C(n + C − 1, C − 1) of them, ``arr`` being (``cnt @
    per`` [C, 3], the largest ``ws`` [C] of the classes used) as :meth:`ChunkOptions._single`
    builds it. None when the float error of the sums is not far below ``tol`` (then enumerate).

    How. For each workspace level w (a distinct value of ``ws``), the multisets over the classes
    with ws <= w (group w) are built one layer at a time: level k is every level k − 1 survivor
    plus one class, each count vector once, and a row m is dropped when a row o of level k has
    v(o) <= v(m) in every sum and v(o) < v(m) − θ in one (:func:`_prune`, θ = tol + η); v are the
    sums ``cnt @ per``, W the largest workspace. The answer is the union over the groups' level-n
    rows. Its size is about the front's (~700 rows for 64 layers, not 814,385).

    Why, in exact arithmetic (η = 0). (1) If a sub-multiset m0 = m − r of an n-multiset m of group
    w is dropped by o0, the n-multiset o = o0 + r is in group w too, and v(o) − v(m) = v(o0) −
    v(m0) (sums are linear): o <= m in every sum and < m − tol in one. Take w = W(m): W(o) <=
    W(m), so o dominates m exactly and by more than tol in a column, and m is neither on the exact
    front F (no row <= in all columns, < in one) nor kept by keep_ties (no row <= + tol in all, < −
    tol in one). (2) So for m in F or kept, every sub-multiset of m survives its level of group
    W(m) (by induction on k each is built: take one layer off, that survived), and m is in the
    union U. (3) keep_ties over U keeps the rows it keeps over all multisets: a row it keeps over
    all is in U by (2), and U has fewer rows to drop it; a row it drops over all is dropped by some
    row of F (``dominance._strict_mask``: an F row below the dropping row drops it too), and F is in
    U by (2). The groups are what make the DP valid: within one the workspace is left out of the
    pruning, and yet the pruner's workspace is at most the pruned row's at w = W(m).

    Float64. Each sum ``cnt @ per`` (at every level and at the end, any summation order, FMA or
    not) is within γ_C·n·max|per| of its real value per column; E = (C + 2)·2^-53·(n·max|per| +
    tol) also covers the roundings of row ± tol. A column whose values sit on a grid 2^-s > 2·tol
    with every sum below 2^53 grid steps (:func:`_exact_column`: integer MiB, zero static deltas)
    is computed exactly and there "< x − tol" is "< x" and "<= x + tol" is "<= x": η = 0, (1)–(3)
    hold as written (all of them, when every column is exact). Any other column gets η = 4E (four
    sums' errors and two roundings), so the o of (1) still has o <= m + tol in it and o < m − tol
    where it was the strict column, computed: (1) and (2) hold for the keep_ties rows whatever
    the roundings; an exact-front row may be dropped when its pruner is above it in such a column
    by no more than 4E, which (3) can feel only if two n-multisets differ, in such a column, by
    within a few E of ±tol — where the enumeration's own answer depends on the rounding of ``cnt
    @ per``. With 8E > tol (E ~ 1e-12 for 64 layers of 38 ms) the sums are too coarse for this
    and None sends the caller to the enumeration; a column on a coarse grid (MiB) never does.

    Raises :class:`FrontTooLarge` as soon as a level keeps more than ``max_rows`` rows (a work
    cap; None: no cap).
    """
    C = per.shape[0]
    if C == 1 or n == 0:
        return class_counts(n, C)
    big = np.abs(per).max(axis=0) * n
    err = (C + 2) * 2.0 ** -53 * (big + tol) * 1.01
    exact = np.array([_exact_column(per[:, j], n, tol) for j in range(per.shape[1])])
    if (8 * err[~exact] > tol).any():
        return None
    theta = tol + np.where(exact, 0.0, 4 * err)
    live = ~(exact & (per == per[:1]).all(axis=0))  # an exact column equal over the classes never prunes
    per, theta = per[:, live], theta[live]
    base = n + 1
    if base ** C >= 2 ** 62:
        return None
    weight = base ** np.arange(C - 1, -1, -1, dtype=np.int64)  # c0 the most significant digit
    eye = np.eye(C, dtype=np.int64)
    out = []
    for w in np.unique(ws):
        step = eye[ws <= w]
        cur = np.zeros((1, C), dtype=np.int64)
        for _ in range(n):
            cand = (cur[:, None, :] + step[None, :, :]).reshape(-1, C)
            _, first = np.unique(cand @ weight, return_index=True)
            cand = cand[first]
            cur = cand[_prune(cand @ per, theta)]
            if max_rows is not None and len(cur) > max_rows:
                raise FrontTooLarge(f"{len(cur)} multisets kept at a level (cap {max_rows})")
        out.append(cur)
    allc = np.concatenate(out)
    _, first = np.unique(allc @ weight, return_index=True)
    return allc[first]


#: :meth:`ChunkOptions.size` of a configuration with a chunk whose front was not built (over
#: ``ChunkOptions.max_rows``): above every cap.
TOO_LARGE = 2 ** 62
#: With ``ChunkOptions.max_rows`` set, a chunk holding several layer types is not built when the
#: sums of two types' fronts would make more than this many times ``max_rows`` rows before their
#: filter (two fronts near the cap would make ~4e8).
COMBINE_ROWS = 50


class ChunkOptions:
    """Per chunk type counts: the class multisets of its layers not dominated in (activation MiB
    kept per micro-batch, static delta MiB, replay ms, backward workspace MiB — the largest of its
    classes'): float [K, 4] (memoised). One type's options are those of its :func:`front_counts`
    multisets (the same array as filtering all of them).

    ``max_rows`` (a work cap, None: none): a type's front is not built past that many multisets
    at a level of :func:`front_counts` (nor enumerated past that many), nor two types' fronts
    combined past :data:`COMBINE_ROWS` × that many sums: :meth:`get` is then None and
    :meth:`size` :data:`TOO_LARGE`. :func:`chunk_options` sets it on a single pipeline stage."""

    def __init__(self, types: LayerTypes, max_rows: int | None = None) -> None:
        self.layers = types.layers
        self.max_rows = max_rows
        self.one: dict[tuple[int, int], np.ndarray | None] = {}
        self.cache: dict[tuple[int, ...], np.ndarray | None] = {}

    def _single(self, t: int, n: int) -> np.ndarray | None:
        if (t, n) not in self.one:
            lay = self.layers[t]
            per = np.stack([lay.act_mib, lay.sdelta_mib, lay.extra_ms], axis=1)  # [C, 3]
            C = per.shape[0]
            if n:
                try:  # [K, C]: the multisets that can be on it
                    cnt = front_counts(per, lay.ws_mib, n, TOL, self.max_rows)
                except FrontTooLarge:
                    self.one[(t, n)] = None
                    return None
                if cnt is None:
                    if self.max_rows is not None and math.comb(n + C - 1, C - 1) > self.max_rows:
                        self.one[(t, n)] = None
                        return None
                    cnt = class_counts(n, C)  # every multiset of n classes
                ws = np.where(cnt > 0, lay.ws_mib[None, :], -np.inf).max(axis=1)
                arr = np.concatenate([cnt @ per, ws[:, None]], axis=1)
            else:
                arr = np.zeros((1, 4))
            self.one[(t, n)] = arr[pareto_mask(arr, tol=TOL, keep_ties=True)]
        return self.one[(t, n)]

    def get(self, counts: tuple[int, ...]) -> np.ndarray | None:
        """The undominated options of a chunk with ``counts`` layers of each type (None: a type's
        front is over ``max_rows``)."""
        if counts not in self.cache:
            acc = None
            for t, n in enumerate(counts):
                if n or t == 0:
                    g = self._single(t, int(n))
                    if g is None or (acc is not None and self.max_rows is not None
                                     and len(acc) * len(g) > COMBINE_ROWS * self.max_rows):
                        self.cache[counts] = None  # a front, or two types' sums, past the cap
                        return None
                    if acc is None:
                        # the first type: its front plus the zero row is its front (a keep-ties
                        # filter at TOL keeps every row of a set it has filtered)
                        acc = np.concatenate([g[:, :3] + 0.0, np.maximum(0.0, g[:, 3:])], axis=1)
                        continue
                    acc = np.concatenate([(acc[:, None, :3] + g[None, :, :3]).reshape(-1, 3),
                                          np.maximum(acc[:, None, 3:], g[None, :, 3:]).reshape(-1, 1)], axis=1)
                    acc = acc[pareto_mask(acc, tol=TOL, keep_ties=True)]
            self.cache[counts] = np.zeros((1, 4)) if acc is None else acc
        return self.cache[counts]

    def size(self, tn: tuple[tuple[int, ...], ...]) -> int:
        """Combinations of a stage configuration's chunks (product of their option counts);
        :data:`TOO_LARGE` when a chunk's front is over ``max_rows``."""
        opts = [self.get(c) for c in tn]
        if any(o is None for o in opts):
            return TOO_LARGE
        return math.prod(o.shape[0] for o in opts)  # Python ints: no int64 wrap-around


#: On a single pipeline stage a chunk can hold most of the model, and with five recompute classes
#: whose sums trade off every class multiset can be on a type's front: GPT-2 xl (48 layers, pp 1)
#: has all 270,725 multisets of 48 layers on it; building the fronts of 1-48 layers took 14 of the
#: device DP's 19 CPU s, for configurations that were over ``MAX_JOINT`` anyway (64 layers: 86 s).
#: There :class:`ChunkOptions` builds a front only while every level of :func:`front_counts` keeps
#: at most this many rows; a configuration with a chunk past it keeps the device DP's per-path
#: bound (a work cap: the joint pricing of a chunk whose final front would be smaller, beside
#: chunks with few options, is lost). TeleChat2's fronts on one stage stay far below it (a few
#: hundred rows), so its joint pass is unchanged. Elsewhere a chunk holds N / (P·V) layers and no
#: cap is set.
SINGLE_STAGE_FRONT_ROWS = 20_000


def chunk_options(problem: Problem, types: LayerTypes) -> ChunkOptions:
    """The problem's :class:`ChunkOptions`, shared by every V (kept in ``problem.fit_cache``):
    the layer types' layers (the relaxed layer, then one per kind present) do not depend on V,
    only which of them a mini-stage holds does. Built once per search instead of once per V: the
    device DP's joint pass on a single-stage MindFormers config (GPT-2 xl, 48 layers, pp 1, vpp
    2-4) built the same 48 chunk fronts three times (76 of its 86 CPU s)."""
    key = ("chunk_options",)
    jo = problem.fit_cache.get(key)
    if jo is None:
        cap = SINGLE_STAGE_FRONT_ROWS if problem.P == 1 else None
        jo = problem.fit_cache[key] = ChunkOptions(types, max_rows=cap)
    return jo
