"""Relaxations shared by the lower bounds (pure numpy, no Optuna).

Each relaxation can only lower a bound, so a bound computed on the relaxed problem stays a proof:

- a free recompute class per layer (not MindFormers' "first r layers" rule): the least replay of
  a group of layers under a memory budget is a Pareto front of (memory, replay ms) over class
  multisets (:class:`RecomputeFrontiers` per layer kind, :class:`RowFrontiers` for the relaxed
  layer);
- for a configuration of many layers (:data:`LP_MIN_LAYERS`), recompute classes mixed fractionally
  within a layer (the linear relaxation, :func:`min_extra_lp`);
- the cheapest layer kind per recompute class (:func:`relaxed_layer`, componentwise minimum: exact
  for a homogeneous model);
- the backward workspace dropped from the memory peak where a bound says so.

:class:`IntegerSetup` is what the V > 1 integer bounds (stage DP, device DP, integer program)
start from.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import NamedTuple

import numpy as np

from autotune.cost.dominance import pareto_order, undominated
from autotune.cost.inputs import NONE, ProfileArrays
from autotune.cost.schedules import get_schedule
from autotune.cost.simulate import CompiledSchedule, compile_schedule
from autotune.tuner.problem import Problem
from autotune.tuner.recompute import allowed_classes


def pareto_sum(a: np.ndarray, b: np.ndarray, max_points: int = 4096) -> np.ndarray:
    """Pareto-minimal points of the Minkowski sum of two frontiers (rows (act MiB, extra ms)).

    When more than ``max_points`` remain, points are merged by act buckets into their componentwise
    minimum — a relaxation (every true point is dominated by a kept one), so bounds stay valid.
    """
    s = (a[:, None, :] + b[None, :, :]).reshape(-1, 2)
    return pareto_front(s, max_points)


def pareto_front(s: np.ndarray, max_points: int = 4096) -> np.ndarray:
    """Rows (act, extra) not dominated (within 1e-12), sorted by act ascending (extra strictly
    descending); past ``max_points`` merged by act buckets (a relaxation, see :func:`pareto_sum`)."""
    f = s[pareto_order(s, tol=1e-12)]
    if f.shape[0] > max_points:
        edges = np.linspace(f[0, 0], f[-1, 0], max_points + 1)
        bucket = np.clip(np.searchsorted(edges, f[:, 0], side="right") - 1, 0, max_points - 1)
        lo_act = np.full(max_points, np.inf)
        lo_ext = np.full(max_points, np.inf)
        np.minimum.at(lo_act, bucket, f[:, 0])
        np.minimum.at(lo_ext, bucket, f[:, 1])
        ok = np.isfinite(lo_act)
        f = pareto_front(np.stack([lo_act[ok], lo_ext[ok]], axis=1), max_points)
    return f


class RecomputeFrontiers:
    """Least recompute replay (ms) of a group of layers under an activation budget (MiB).

    Relaxation of MindFormers' "first r layers" rule: every layer picks any allowed recompute class
    freely, so ``min_extra(counts, A)`` is <= the replay of every real recompute choice whose kept
    activation is <= A. With ``nu`` given the memory coordinate of a choice is its whole share of
    the stage peak, ``nu·act + static_delta_mib`` (MiB; static deltas may be negative, e.g.
    parallel_optimizer_comm_recompute), so the budget is then in MiB of the stage. Per kind, the
    Pareto frontier of (Σ act, Σ extra) over n layers is built by a DP over n; kinds combine by
    Pareto Minkowski sums (cached per count tuple).
    """

    def __init__(self, pa: ProfileArrays, kinds: tuple[str, ...], max_n: int, nu: float | None = None) -> None:
        cls = allowed_classes(kinds)
        self.K = pa.fwd_k.size
        sd = pa.static_dc if pa.static_dc is not None else np.zeros_like(pa.act_kc)
        # memory coordinate of one layer's choice: act (MiB per micro-batch) or, with a live count
        # nu, its whole contribution to the stage peak nu·act + static_delta (MiB)
        coord = pa.act_kc[:, cls] if nu is None else nu * pa.act_kc[:, cls] + sd[:, cls]
        self.opts = [np.stack([coord[k], pa.bwd_kc[k, cls] - pa.bwd_kc[k, NONE]], axis=1)
                     for k in range(self.K)]
        self.per_kind: list[list[np.ndarray]] = []
        for k in range(self.K):
            fr = [np.zeros((1, 2))]
            for _ in range(max_n):
                fr.append(pareto_sum(fr[-1], self.opts[k]))
            self.per_kind.append(fr)
        self.cache: dict[tuple[int, ...], np.ndarray] = {}

    def frontier(self, counts: tuple[int, ...]) -> np.ndarray:
        """The front of a group with ``counts`` layers of each kind: rows (MiB, replay ms), MiB
        ascending."""
        if counts not in self.cache:
            f = np.zeros((1, 2))
            for k, n in enumerate(counts):
                if n:
                    f = self.per_kind[k][n] if f.shape[0] == 1 and f[0, 0] == 0 and f[0, 1] == 0 \
                        else pareto_sum(f, self.per_kind[k][n], max_points=1024)
            self.cache[counts] = f
        return self.cache[counts]

    def min_extra(self, counts: tuple[int, ...], budget: np.ndarray) -> np.ndarray:
        """Least Σ extra (ms) with Σ act <= budget (float [Q] MiB); +inf where nothing fits."""
        f = self.frontier(counts)
        i = np.searchsorted(f[:, 0], budget + 1e-9, side="right") - 1
        return np.where(i >= 0, f[np.maximum(i, 0), 1], np.inf)


@dataclass(frozen=True)
class RelaxedLayer:
    """The relaxed layer: componentwise minimum over the layer kinds present, per micro-batch:
    forward and backward (no replay) ms, static MiB; per allowed recompute class [C'] the
    activation MiB kept, the replay ms, the static MiB change and the backward workspace MiB."""

    fwd_ms: float
    bwd_ms: float
    static_mib: float
    act_mib: np.ndarray
    extra_ms: np.ndarray
    sdelta_mib: np.ndarray
    ws_mib: np.ndarray


def relaxed_layer(problem: Problem, ks: np.ndarray | None = None) -> RelaxedLayer:
    """:class:`RelaxedLayer` of the layer kinds ``ks`` (int indices; default: every kind present in
    the problem), allowed classes only."""
    pa = problem.pa
    ks = np.flatnonzero(pa.kind_prefix[:, -1] > 0) if ks is None else np.asarray(ks, dtype=np.int64)
    cls = allowed_classes(problem.kinds)
    b0k = pa.bwd_kc[ks, NONE]
    sd = pa.static_dc[ks][:, cls] if pa.static_dc is not None else np.zeros((ks.size, len(cls)))
    return RelaxedLayer(float(pa.fwd_k[ks].min()), float(b0k.min()), float(pa.static_k[ks].min()),
                        pa.act_kc[ks][:, cls].min(axis=0),
                        (pa.bwd_kc[ks][:, cls] - b0k[:, None]).min(axis=0), sd.min(axis=0),
                        pa.ws_kc[ks][:, cls].min(axis=0))


class RowFrontiers:
    """Least replay ms of n relaxed layers against one memory coordinate w·act + static_delta."""

    def __init__(self, layer: RelaxedLayer) -> None:
        self.layer = layer
        self.cache: dict[tuple[int, float], np.ndarray] = {}
        self.pre: dict[tuple, np.ndarray] = {}
        self.values: dict[tuple, float] = {}  # min_extra_ms memo: (weight / scale groups, budget) -> ms

    def get(self, n: int, w: float) -> np.ndarray:
        key = (n, w)
        if key not in self.cache:
            if n == 0:
                f = np.zeros((1, 2))
            else:
                opt = np.stack([w * self.layer.act_mib + self.layer.sdelta_mib, self.layer.extra_ms], axis=1)
                prev = self.get(n - 1, w)
                f = pareto_front((prev[:, None, :] + opt[None, :, :]).reshape(-1, 2))
            self.cache[key] = f
        return self.cache[key]

    def prefix(self, counts: tuple[int, ...], w: tuple[float, ...], c: tuple[float, ...] | None = None) -> np.ndarray:
        """Pareto frontier of the Minkowski sum over chunks of ``get(n_v, w_v)`` (memoised), with
        chunk v's replay coordinate × c_v when scales ``c`` (>= 0) are given: a scale keeps the
        memory coordinate and its order, and each sum is Pareto-pruned again."""
        key = (counts, w) if c is None else (counts, w, c)
        if key not in self.pre:
            if not counts:
                f = np.zeros((1, 2))
            else:
                acc = self.prefix(counts[:-1], w[:-1], None if c is None else c[:-1])
                g = self.get(counts[-1], w[-1])
                if c is not None:
                    g = g * np.array([1.0, c[-1]])
                f = pareto_front((acc[:, None, :] + g[None, :, :]).reshape(-1, 2))
            self.pre[key] = f
        return self.pre[key]


def row_frontiers(problem: Problem, layer: RelaxedLayer | None = None) -> RowFrontiers:
    """The :class:`RowFrontiers` of ``layer`` (default: the problem's relaxed layer,
    :func:`relaxed_layer`), shared by every bound and pass on the problem (kept in
    ``problem.fit_cache`` under the layer's values: the problem is frozen, and a layer's fronts do
    not depend on V), so fronts and :func:`min_extra_ms` values are built once per search. The
    stage DP and the device DP's typed fronts (:class:`~autotune.tuner.bounds._kinds.TypedFronts`,
    whose first type is the same relaxed layer) share it: on pp 32 × vpp 4 × m 256 dense in
    ``benchmarks/scaling.py`` each priced ~47,000 of the same (layers, budget) pairs before."""
    layer = relaxed_layer(problem) if layer is None else layer
    key = ("row_frontiers", layer.fwd_ms, layer.bwd_ms, layer.static_mib,
           *(getattr(layer, a).tobytes() for a in ("act_mib", "extra_ms", "sdelta_mib", "ws_mib")))
    fr = problem.fit_cache.get(key)
    if fr is None:
        fr = problem.fit_cache[key] = RowFrontiers(layer)
    return fr


def min_extra_ms(fr: RowFrontiers, counts: tuple[int, ...], w: np.ndarray, budget: float,
                 c: np.ndarray | None = None) -> float:
    """min Σ_v replay over per-layer classes with Σ_v (w_v·act + static_delta) <= budget (MiB);
    with chunk weights ``c`` [V] (>= 0), min Σ_v c_v·(replay of chunk v) (the stage DP's own-stage
    term, :mod:`autotune.tuner.bounds._weighted`). +inf when nothing fits.

    Every layer is the relaxed layer, so the layers of chunks with the same weight w_v (and scale
    c_v) are interchangeable: those chunks merge into one group of Σ n_v layers (``get(n1, w) ⊕
    get(n2, w)`` and ``get(n1 + n2, w)`` have the same Pareto front, so the value is the same), and
    empty chunks drop out. The frontier of all groups but the one with the most layers is a Pareto
    Minkowski sum (memoised by prefix, :meth:`RowFrontiers.prefix`); that group is matched to each
    of its points by binary search. Values are memoised per (groups, budget) in ``fr.values``: the
    stage tables ask for the same groups and budget for every configuration with the same layers
    per weight."""
    merged: dict[tuple[float, float], int] = {}
    for n, x, s in zip(counts, w, np.ones(len(counts)) if c is None else c):
        if n:
            k = (float(x), float(s))
            merged[k] = merged.get(k, 0) + int(n)
    grp = tuple(sorted(merged.items(), key=lambda g: (g[1], g[0])))  # the most layers last
    key = ("min_extra", grp, float(budget))
    val = fr.values.get(key)
    if val is not None:
        return val
    if not grp:
        val = 0.0 if budget + 1e-9 >= 0.0 else float("inf")
    else:
        head = grp[:-1]
        scales = None if c is None else tuple(s for (_, s), _ in head)
        acc = fr.prefix(tuple(n for _, n in head), tuple(x for (x, _), _ in head), scales)
        (x, s), n = grp[-1]
        last = fr.get(n, x)
        i = np.searchsorted(last[:, 0], budget - acc[:, 0] + 1e-9, side="right") - 1
        ok = i >= 0
        val = float((acc[ok, 1] + s * last[i[ok], 1]).min()) if ok.any() else float("inf")
    fr.values[key] = val
    return val


#: Configurations holding at least this many layers get :func:`min_extra_lp` (the linear
#: relaxation) instead of the exact Pareto fronts in :func:`min_extra_rows`: the fronts' Minkowski
#: sums grow with the layers per group and made pp 2 stages (24-32 layers) and P 8 × V 4 × L 256
#: (32 layers a stage) spend minutes in the stage tables, while the linear relaxation differs
#: from the exact value by at most one layer's replay (~1/(3n) of the stage's own ops at n layers).
LP_MIN_LAYERS = 16

#: Cells (configurations × prefix-front points × last-group front points) compared at once by
#: :func:`min_extra_rows` (bounds its temporaries).
BATCH_CELLS = 2_000_000


def min_extra_rows(fr: RowFrontiers, nv: np.ndarray, rows: np.ndarray, budget: np.ndarray) -> np.ndarray:
    """:func:`min_extra_ms` of every configuration (layer counts int [M, V]) against every
    live-count vector (rows [R, V]) with its own budget (MiB [M, R]): float [M, R] ms.

    Batched: per vector, the configurations are reduced to their layers per distinct weight (the
    merge of :func:`min_extra_ms`) and budget, each distinct one priced once, and those with the
    same layers in every group but the largest share that groups' memoised front sum; the largest
    group is matched to each of its points for all of them in one array operation (the count of
    front points that fit is the binary search's index). Configurations of at least
    :data:`LP_MIN_LAYERS` layers get the linear relaxation :func:`min_extra_lp` instead (a lower
    value, so the bounds built on it stay bounds)."""
    nv = np.asarray(nv, dtype=np.int64)
    out = np.zeros((nv.shape[0], rows.shape[0]))
    for r, w in enumerate(rows):
        u = np.unique(w)
        gc = nv @ (w[:, None] == u[None, :]).astype(np.int64)  # [M, G] layers per weight
        key = np.concatenate([gc.astype(np.float64), budget[:, r:r + 1]], axis=1)
        uk, inv = np.unique(key, axis=0, return_inverse=True)
        ukc = np.rint(uk[:, :-1]).astype(np.int64)
        big = ukc.sum(axis=1) >= LP_MIN_LAYERS
        val = np.empty(uk.shape[0])
        val[~big] = _min_extra_keys(fr, u, ukc[~big], uk[~big, -1])
        val[big] = min_extra_lp(fr.layer, u, ukc[big], uk[big, -1])
        out[:, r] = val[inv.reshape(-1)]
    return out



def worst_row_extra(fr: RowFrontiers, nv: np.ndarray, rows: np.ndarray, budget: np.ndarray) -> np.ndarray:
    """float [M] ms: ``max(0, min_extra_rows(fr, nv, rows, budget).max(axis=1))``, the same values,
    with the exact Pareto fronts built only for the live-count vectors that can hold the maximum.

    Every (configuration, row) is first given lp <= exact <= ub (:func:`lp_dual_bounds`: the
    linear relaxation and one integer choice that fits); :func:`row_maximum` then prices exactly
    only the rows whose ub can still raise the maximum (rows where lp is within a tolerance of
    infeasible always are, so +inf comes from the exact test as before). On
    scaling.py's pp 32 × vpp 4 × m 256, 256-layer MoE problem the stage DP's tables built ~409,600
    prefix fronts over its 1,568 rows; see docs/search.md."""
    nv = np.asarray(nv, dtype=np.int64)
    M, R = nv.shape[0], rows.shape[0]
    out = np.zeros(M)
    if M == 0 or R == 0:
        return out
    lp, ub, near = row_bounds(rows, budget, _weight_groups(fr, nv))

    def price(i: np.ndarray, r: np.ndarray) -> np.ndarray:
        val = np.empty(i.size)
        for q in np.unique(r):  # one batch per live-count vector
            k = np.flatnonzero(r == q)
            val[k] = min_extra_rows(fr, nv[i[k]], rows[q:q + 1], budget[i[k], q:q + 1])[:, 0]
        return val
    return row_maximum(lp, ub, near, nv.sum(axis=1) < LP_MIN_LAYERS, price, rounds=1)


def _weight_groups(fr: RowFrontiers, nv: np.ndarray
                   ) -> Callable[[np.ndarray], tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """:func:`row_bounds`' ``groups`` for configurations nv int [M, V] of ``fr``'s relaxed layer:
    the chunks with one weight are one group (as :func:`min_extra_ms`)."""
    layer = fr.layer

    def groups(w: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        u = np.unique(w)
        mem = u[:, None] * layer.act_mib[None, :] + layer.sdelta_mib[None, :]
        return mem, np.broadcast_to(layer.extra_ms, mem.shape), nv @ (w[:, None] == u[None, :]).astype(np.int64)
    return groups


def worst_row_floor(fr: RowFrontiers, nv: np.ndarray, rows: np.ndarray, budget: np.ndarray) -> np.ndarray:
    """float [M] ms: a lower bound on :func:`worst_row_extra` of the same arguments, from the
    linear relaxation alone (:func:`row_bounds`' lp, no Pareto front built): max(0, the largest
    finite lp over the rows), +inf where a row is over the budget for sure (as
    :func:`row_maximum`). Each pair's lp is <= its exact value and :func:`worst_row_extra` is the
    max over the rows of the exact values (or of lp itself), so this is <= it; the caller keeps a
    float margin."""
    nv = np.asarray(nv, dtype=np.int64)
    M, R = nv.shape[0], rows.shape[0]
    if M == 0 or R == 0:
        return np.zeros(M)
    lp, _ub, near = row_bounds(rows, budget, _weight_groups(fr, nv))
    fin = np.isfinite(lp)
    out = np.maximum(0.0, np.where(fin, lp, -np.inf).max(axis=1, initial=0.0))
    out[(~fin & ~near).any(axis=1)] = np.inf
    return out


def min_extra_lp(layer: RelaxedLayer, u: np.ndarray, gc: np.ndarray, b: np.ndarray) -> np.ndarray:
    """float [K]: a lower bound on :func:`min_extra_ms` of configurations with gc[k, g] relaxed
    layers of weight u[g] (int [K, G]) within budget b[k] (MiB): the linear relaxation (each layer
    may mix recompute classes fractionally), computed exactly through its Lagrangian dual.

    With mem_gc = u_g·act_c + static_delta_c (MiB) and replay e_c (ms) of class c, every λ >= 0
    gives D(λ) = Σ_g n_g·min_c (e_c + λ·mem_gc) − λ·b <= the least replay of every integer choice
    within b (weak duality). D is concave and piecewise linear with kinks only where two classes
    tie in some group, λ = (e_c − e_c')/(mem_c' − mem_c), so its maximum over λ >= 0 is the
    largest value at 0 and at those ties (the linear relaxation's optimum, which leaves at most
    one layer split between two classes: within that layer's replay of the exact value). +inf
    where even the least-memory class of every layer exceeds b (the exact value's test)."""
    mem = u[:, None] * layer.act_mib[None, :] + layer.sdelta_mib[None, :]  # [G, C] MiB
    return lp_dual(mem, np.broadcast_to(layer.extra_ms, mem.shape), gc, b)


def lp_dual(mem: np.ndarray, extra: np.ndarray, n: np.ndarray, b: np.ndarray) -> np.ndarray:
    """float [K] ms: the linear relaxation of "n[k, g] layers of group g each take a class c
    (memory mem[g, c] MiB, replay extra[g, c] ms), Σ memory <= b[k] MiB, least Σ replay", exactly,
    through its Lagrangian dual (see :func:`min_extra_lp`: the maximum of D(λ) over λ = 0 and the
    class ties of every group); +inf where even the least-memory class of every layer exceeds b,
    values below 0 raised to 0."""
    if n.shape[0] == 0:
        return np.zeros(0)
    return _dual_maximum(mem, extra, n, b)[0]


def _dual_maximum(mem: np.ndarray, extra: np.ndarray, n: np.ndarray, b: np.ndarray
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(lp float [K] ms, the candidate λ float [Λ] (0 and every group's class ties), the index of
    each K's maximiser λ* int [K], infeasible bool [K]) of :func:`lp_dual` (K >= 1)."""
    e = extra
    with np.errstate(divide="ignore", invalid="ignore"):
        lam = (e[:, :, None] - e[:, None, :]) / (mem[:, None, :] - mem[:, :, None])  # [G, C, C]
    lam = np.unique(np.concatenate([[0.0], lam[np.isfinite(lam) & (lam > 0)]]))
    g = (e[None, :, :] + lam[:, None, None] * mem[None, :, :]).min(axis=2)  # [Λ, G] ms per layer
    nf = n.astype(np.float64)
    vals = nf @ g.T - (b + 1e-9)[:, None] * lam[None, :]  # [K, Λ]
    j = vals.argmax(axis=1)
    best = vals[np.arange(n.shape[0]), j]
    infeasible = nf @ mem.min(axis=1) > b + 1e-9
    return np.where(infeasible, np.inf, np.maximum(best, 0.0)), lam, j, infeasible


def lp_dual_bounds(mem: np.ndarray, extra: np.ndarray, n: np.ndarray, b: np.ndarray
                   ) -> tuple[np.ndarray, np.ndarray]:
    """(lp, ub), float [K] ms each: :func:`lp_dual`'s value and the replay of an integer choice
    that fits, so lp <= the exact least replay <= ub (+inf together).

    With the minimisers of extra + λ·mem just left and just right of the dual's maximiser λ*: every
    group on its right minimiser fits (D's right slope at λ*, Σ n·mem of that choice − b, is <= 0
    at a maximum of the concave D); and moving whole layers from the left minimisers to the right
    ones, each at λ* ms per MiB freed, reaches a fitting choice within lp + the largest replay
    rise of one moved layer. ub is the smaller of the two."""
    K = n.shape[0]
    if K == 0:
        return np.zeros(0), np.zeros(0)
    lp, lam, j, infeasible = _dual_maximum(mem, extra, n, b)
    e, nf = extra, n.astype(np.float64)
    # just right of λ*: halfway to the next tie that is not λ* again (the same tie computed from
    # two class pairs can differ in the last bits)
    nxt = np.searchsorted(lam, lam * (1.0 + 1e-9) + 1e-12, side="right")
    right = np.where(nxt < lam.size, 0.5 * (lam + lam[np.minimum(nxt, lam.size - 1)]), 2.0 * lam + 1.0)[j]
    prv = np.searchsorted(lam, lam * (1.0 - 1e-9) - 1e-12, side="left") - 1
    left = np.where(prv >= 0, 0.5 * (lam + lam[np.maximum(prv, 0)]), lam)[j]  # just left of λ* (or 0)
    G = mem.shape[0]
    gi = np.arange(G)[None, :]
    cr = (e[None, :, :] + right[:, None, None] * mem[None, :, :]).argmin(axis=2)  # [K, G]
    cl = (e[None, :, :] + left[:, None, None] * mem[None, :, :]).argmin(axis=2)
    used = (nf * mem[gi, cr]).sum(axis=1)
    ub = np.where(used > b + 1e-6 * (1.0 + np.abs(b)), np.inf, (nf * e[gi, cr]).sum(axis=1))
    # from the left choices (D(λ*) = their replay + λ*·(their memory − b)) whole layers move to
    # the right ones, each freeing memory at λ* ms per MiB, until the rest fits: the last move
    # overshoots by less than one layer, so lp + the largest switch's replay rise fits too
    rise = np.where(nf > 0, e[gi, cr] - e[gi, cl], 0.0).max(axis=1, initial=0.0)
    ub = np.where(infeasible, np.inf, np.minimum(ub, lp + rise))
    return lp, ub


def row_maximum(lp: np.ndarray, ub: np.ndarray, near: np.ndarray, exact: np.ndarray,
                price: Callable[[np.ndarray, np.ndarray], np.ndarray], rounds: int | None = None) -> np.ndarray:
    """float [M] ms: max(0, max over rows r of the exact least replay of (configuration i, row r)),
    pricing as few pairs exactly as it can.

    Args:
        lp, ub: float [M, R] ms, a lower and an upper value of each pair's exact least replay
            (:func:`lp_dual_bounds`; +inf lp: over the budget).
        near: bool [M, R], pairs whose least-memory choice is within a tolerance of the budget
            (lp's +inf test and the exact one could disagree there: always priced).
        exact: bool [M], configurations priced exactly (the others get max(0, max_r lp)).
        price: (i int [K], r int [K]) -> the exact values float [K] of those pairs.
        rounds: after this many rounds the pairs left are priced in one call (None: no limit; a
            caller whose ``price`` batches well by row wants few calls).

    A configuration with a row over the budget for sure is +inf. The others are priced in rounds,
    each taking per configuration its unpriced row with the largest ub (near rows first); a row
    whose ub is at or below the best exact value so far cannot raise the maximum and is dropped,
    so a configuration usually needs one or two rows. The same answer as pricing every pair.
    """
    rounds = np.inf if rounds is None else rounds
    M = lp.shape[0]
    out = np.zeros(M)
    out[~exact] = np.maximum(0.0, lp[~exact].max(axis=1, initial=0.0))
    fin = np.isfinite(lp)
    gone = exact & (~fin & ~near).any(axis=1)  # a row over the budget for sure
    out[gone] = np.inf
    top = np.where(fin, lp, -np.inf).max(axis=1, initial=-np.inf)  # the largest finite lp
    tol = 1e-9 * (1.0 + np.abs(np.where(np.isfinite(top), top, 0.0)))
    todo = (exact & ~gone)[:, None] & (near | (fin & (ub + tol[:, None] >= top[:, None])))
    best = np.full(M, -np.inf)
    order = np.where(near, np.inf, ub)
    done = 0
    while todo.any():
        if done < rounds:
            i = np.flatnonzero(todo.any(axis=1))
            r = np.where(todo[i], order[i], -np.inf).argmax(axis=1)
        else:  # the rest at once
            i, r = np.nonzero(todo)
        val = price(i, r)
        np.maximum.at(best, i, val)
        todo[i, r] = False
        done += 1
        btol = 1e-9 * (1.0 + np.abs(np.where(np.isfinite(best), best, 0.0)))
        todo &= near | (ub > (best + btol)[:, None])  # a row with ub <= best cannot raise it
        todo[np.isposinf(best)] = False
    some = exact & ~gone
    out[some] = np.maximum(0.0, best[some])
    return out


def row_bounds(rows: np.ndarray, budget: np.ndarray,
               groups: Callable[[np.ndarray], tuple[np.ndarray, np.ndarray, np.ndarray]]
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(lp, ub, near), each [M, R], the inputs of :func:`row_maximum` for M configurations against
    live-count vectors ``rows`` [R, V] with budgets ``budget`` (MiB [M, R]).

    ``groups(w)`` gives, for one vector w, the layer groups of the linear relaxation: memory
    (MiB [G, C]) and replay (ms [G, C]) of each group's classes, and every configuration's layers
    per group (int [M, G]). lp, ub: :func:`lp_dual_bounds`; near: the least-memory choice within a
    tolerance of the budget."""
    M, R = budget.shape
    lp, ub, near = np.empty((M, R)), np.empty((M, R)), np.zeros((M, R), dtype=bool)
    for r, w in enumerate(rows):
        mem, extra, n = groups(np.asarray(w, dtype=np.float64))
        lp[:, r], ub[:, r] = lp_dual_bounds(mem, extra, n, budget[:, r])
        least = n @ mem.min(axis=1)
        near[:, r] = np.abs(budget[:, r] - least) <= 1e-6 * (1.0 + np.abs(budget[:, r]))
    return lp, ub, near


def _min_extra_keys(fr: RowFrontiers, u: np.ndarray, gc: np.ndarray, b: np.ndarray) -> np.ndarray:
    """float [K]: :func:`min_extra_ms` of configurations with gc[k, g] relaxed layers of weight
    u[g] (int [K, G]) within budget b[k] (MiB).

    Each value is a function of (u, its layers per group, its budget, and the group matched by
    binary search: the one with the most layers over the batch), so it is memoised under those in
    ``fr.values`` and priced once: the stage DP's first pass and the device DP's tables ask for the
    same ones (pp 32 × vpp 4 × m 256 dense in ``benchmarks/scaling.py``: 95,075 asked for, 48,035
    distinct, 4.5 CPU s of pricing before). The same values as pricing each batch whole."""
    K = gc.shape[0]
    val = np.full(K, np.inf)
    if K == 0:
        return val
    last = int(np.argmax(gc.sum(axis=0)))
    head = ("keys", u.tobytes(), last)
    keys = [head + (row.tobytes(), x) for row, x in zip(gc, b.tolist())]
    got = [fr.values.get(k) for k in keys]
    todo = np.array([g is None for g in got])
    for k in np.flatnonzero(~todo):
        val[k] = got[k]
    if todo.any():
        new = _price_keys(fr, u, gc[todo], b[todo], last)
        val[todo] = new
        for k, x in zip(np.flatnonzero(todo), new.tolist()):
            fr.values[keys[k]] = x
    return val


def _price_keys(fr: RowFrontiers, u: np.ndarray, gc: np.ndarray, b: np.ndarray, last: int) -> np.ndarray:
    """:func:`_min_extra_keys`' values, priced: the front sum of every group but ``last`` (memoised
    by prefix; a key's "prefix front") against ``last``'s front, for all keys at once.

    Every (key k, point a of its prefix front) pair gets room = b[k] − memory(a) + 1e-9; the
    number of points of ``last``'s front (n layers of k, memory ascending) within that room, less
    one, picks its replay, and k's value is the least replay(a) + that over its pairs (+inf when no
    point fits). One pass over all pairs (a binary search per last front) instead of one per prefix
    front: on
    ``benchmarks/scaling.py``'s pp 32 × vpp 4 × m 256 MoE problem the stage DP priced ~67,000
    prefix fronts in 1,931 calls, each with a dozen small numpy calls. The same float operations
    per pair as pricing each prefix front alone, whose count over a front padded with +inf to its
    keys' widest front counts the padding for a +inf room (kept: the count is capped there) and
    nothing for a NaN one."""
    K, G = gc.shape
    rest = [g for g in range(G) if g != last]
    if rest:
        pk, pinv = np.unique(gc[:, rest], axis=0, return_inverse=True)
        pinv = pinv.reshape(-1)
    else:
        pk, pinv = np.zeros((1, 0), dtype=np.int64), np.zeros(K, dtype=np.int64)
    accs = []
    for pre in pk:
        nz = [(int(n), float(u[g])) for n, g in zip(pre, rest) if n]
        accs.append(fr.prefix(tuple(n for n, _ in nz), tuple(x for _, x in nz)))
    sizes = np.array([a.shape[0] for a in accs], dtype=np.int64)
    acc = np.concatenate(accs)  # every prefix front, one after another
    off = np.concatenate([[0], np.cumsum(sizes)])
    wl = float(u[last])
    dist, which = np.unique(gc[:, last], return_inverse=True)
    which = which.reshape(-1)
    fronts = [fr.get(int(n), wl) for n in dist]
    lens = np.array([f.shape[0] for f in fronts], dtype=np.int64)
    fm = np.full((dist.size, int(lens.max())), np.inf)  # memory ascending, +inf past the front
    fx = np.zeros(fm.shape)
    for i, f in enumerate(fronts):
        fm[i, :f.shape[0]], fx[i, :f.shape[0]] = f[:, 0], f[:, 1]
    wide = np.zeros(pk.shape[0], dtype=np.int64)  # per prefix front: its keys' widest last front
    np.maximum.at(wide, pinv, lens[which])
    val = np.empty(K)
    for lo, hi, kidx, aidx, first in pair_blocks(sizes[pinv], off[pinv], BATCH_CELLS):
        room = b[kidx] - acc[aidx, 0] + 1e-9
        dk = which[kidx]
        i = np.empty(kidx.size, dtype=np.int64)
        for d in np.unique(dk):  # per last front: the points within each room, by binary search
            at = np.flatnonzero(dk == d)
            i[at] = np.searchsorted(fm[d], room[at], side="right")
        i = np.where(np.isnan(room), 0, np.minimum(i, wide[pinv[kidx]])) - 1
        v = np.where(i >= 0, acc[aidx, 1] + fx[dk, np.maximum(i, 0)], np.inf)
        val[lo:hi] = np.minimum.reduceat(v, first)
    return val


def pair_blocks(cnt: np.ndarray, start: np.ndarray, cells: int):
    """The (key, point) pairs of keys that own ``cnt[k]`` >= 1 consecutive points from ``start[k]``
    (int [K] each) of a concatenated table, in blocks of whole keys holding about ``cells`` pairs
    (at least one key): yields (lo, hi, kidx, aidx, first): the block's keys lo..hi-1, each pair's
    key and point (int [n]), and where each key's pairs begin in the block (int [hi - lo], the
    ``np.minimum.reduceat`` offsets)."""
    ends = np.cumsum(cnt)
    K = cnt.size
    lo = 0
    while lo < K:
        hi = max(lo + 1, int(np.searchsorted(ends, (ends[lo - 1] if lo else 0) + cells, side="right")))
        ks = np.arange(lo, hi)
        kidx = np.repeat(ks, cnt[ks])
        first = np.concatenate([[0], np.cumsum(cnt[ks])[:-1]])
        yield lo, hi, kidx, start[kidx] + np.arange(kidx.size) - first[kidx - lo], first
        lo = hi


def live_rows(cs: CompiledSchedule, p: int, end_ws: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Stage p's memory rows for the integer bounds: the live-count vectors (micro-batches' worth of
    activation per chunk, float [R, V]) of its forwards and backwards, each with the workspace
    (MiB, float [R]) it holds at least: 0 on a forward, the head's / tail's ``end_ws[chunk]`` on a
    backward of that chunk (its workspace is a max over the mini-stage, so >= it; the layers' own
    dropped). Only the undominated (rows, workspace) pairs: a row below another in every column
    never binds."""
    V = cs.V
    fwd = np.asarray(cs.mem_fwd[p]).reshape(-1, V).astype(np.float64)
    vecs, chunks = cs.mem_bwd[p]
    rows = np.concatenate([fwd, np.asarray(vecs, dtype=np.float64).reshape(-1, V)])
    held = np.asarray(end_ws, dtype=np.float64)[np.asarray(chunks, dtype=np.int64).reshape(-1)]
    ws = np.concatenate([np.zeros(fwd.shape[0]), held if np.asarray(vecs).size else np.zeros(0)])
    top = undominated(np.concatenate([rows, ws[:, None]], axis=1))
    return top[:, :V] / cs.k, top[:, V]


def count_vectors(lo: np.ndarray, hi: np.ndarray, cap: int) -> list[tuple[int, ...]]:
    """All int vectors lo <= n <= hi (elementwise) with Σ n <= cap, in lexicographic order."""
    out: list[tuple[int, ...]] = []
    V = lo.size
    rest_lo = np.concatenate([np.cumsum(lo[::-1])[::-1][1:], [0]])

    def rec(v: int, acc: tuple[int, ...], used: int) -> None:
        if v == V:
            out.append(acc)
            return
        for x in range(int(lo[v]), int(min(hi[v], cap - used - rest_lo[v])) + 1):
            rec(v + 1, acc + (x,), used + x)
    rec(0, (), 0)
    return out


@dataclass(frozen=True)
class KindMix:
    """How many layers of each kind the model has (int [K]) and each kind's forward and backward
    (no replay) ms and static MiB per layer, for the least sums of any n of its layers: the
    cheapest kinds first, kind k at most ``counts[k]`` times. The relaxed layer's n × cheapest falls
    far below that on a mixed model: DeepSeek-V3's 3 dense layers hold 939 MiB of static memory
    each, its MoE layers 4,407 MiB, so 8 of its layers hold >= 5 × 4,407 + 3 × 939 MiB, not
    8 × 939."""

    counts: np.ndarray
    fwd_ms: np.ndarray
    bwd_ms: np.ndarray
    static_mib: np.ndarray

    @staticmethod
    def least(values: np.ndarray, counts: np.ndarray, n: np.ndarray) -> np.ndarray:
        """float like ``n`` (int, 0 <= n <= Σ counts): the least Σ of ``values`` (per kind [K])
        over multisets of n layers holding kind k at most counts[k] times (greedy by value: exact).
        ``counts`` int [K], or [..., K] per entry of ``n`` (caps of their own, e.g. a stage's
        :func:`kind_windows`); where n passes Σ counts the sum holds only Σ counts layers."""
        order = np.argsort(values, kind="stable")
        v, c = np.asarray(values, dtype=np.float64)[order], np.asarray(counts, dtype=np.int64)[..., order]
        before = np.cumsum(c, axis=-1) - c  # the layers of the cheaper kinds
        take = np.clip(np.asarray(n, dtype=np.int64)[..., None] - before, 0, c)
        return take @ v

    def fwd(self, n: np.ndarray) -> np.ndarray:
        """Least forward ms of n layers (float like n)."""
        return self.least(self.fwd_ms, self.counts, n)

    def bwd(self, n: np.ndarray) -> np.ndarray:
        """Least backward ms without replay of n layers (float like n)."""
        return self.least(self.bwd_ms, self.counts, n)

    def static(self, n: np.ndarray) -> np.ndarray:
        """Least static MiB of n layers (float like n)."""
        return self.least(self.static_mib, self.counts, n)


def present_kinds(problem: Problem) -> np.ndarray:
    """int [K]: the indices of the layer kinds the model has (kinds with no layer dropped), in
    kind order: the K of :class:`KindMix` and :class:`KindWindows`."""
    return np.flatnonzero(problem.pa.kind_prefix[:, -1] > 0)


def kind_mix(problem: Problem) -> KindMix:
    """The :class:`KindMix` of the problem's layers (kinds present only)."""
    pa = problem.pa
    ks = present_kinds(problem)
    return KindMix(pa.kind_prefix[ks, -1].astype(np.int64), pa.fwd_k[ks].astype(np.float64),
                   pa.bwd_kc[ks, NONE].astype(np.float64), pa.static_k[ks].astype(np.float64))


class KindWindows(NamedTuple):
    """:func:`kind_windows`: static MiB per kind [K], the model's layers per kind [K], and per
    mini-stage j in layer order (j = v·P + p) the layers of each kind it can hold [V·P, K]."""

    static_mib: np.ndarray
    counts: np.ndarray
    window: np.ndarray


def typed_layers(problem: Problem) -> tuple[RelaxedLayer, ...]:
    """One :class:`RelaxedLayer` per layer kind present (the K of :func:`present_kinds`): each is
    that kind's own layer, exactly."""
    return tuple(relaxed_layer(problem, np.array([k])) for k in present_kinds(problem))


def _same_layers(layers: tuple[RelaxedLayer, ...]) -> bool:
    """Whether every layer of ``layers`` has the same values in every field (within 1e-9)."""
    def values(lay: RelaxedLayer) -> np.ndarray:
        return np.concatenate([np.ravel(getattr(lay, f.name)).astype(np.float64) for f in fields(lay)])

    return all(np.allclose(values(b), values(layers[0]), rtol=0.0, atol=1e-9) for b in layers[1:])


def several_kinds(problem: Problem) -> bool:
    """Whether the model's layers are of several kinds that differ (in static MiB, time,
    activation, replay, static change or workspace): DeepSeek-V3's dense + MoE layers and MTP
    tail, not a Llama's (one kind) nor a model whose kinds are the same layer. The relaxations
    that charge every layer the cheapest kind (the stage DP) are exact only without them."""
    return kind_mix(problem).counts.size >= 2 and not _same_layers(typed_layers(problem))


def kind_windows(problem: Problem, V: int, fixed: np.ndarray | None = None) -> KindWindows | None:
    """The :class:`KindWindows` of a model of several layer kinds that differ (in static MiB, time,
    activation, replay, static change or workspace); None otherwise. Mini-stage j holds
    positions >= Σ_{j' < j} lo[j'] and < N − Σ_{j' > j} lo[j'] (the
    others hold at least their lower bounds ``problem.bounds(V)``, or exactly the ``fixed``
    split's, whose windows are then its own positions): on a model whose dense layers come first,
    a mini-stage after a few others holds none. A relaxation of the real kinds (their order is
    dropped), so a bound."""
    if not several_kinds(problem):
        return None
    mix = kind_mix(problem)
    lo = (problem.bounds(V)[0] if fixed is None else np.asarray(fixed)).reshape(-1).astype(np.int64)
    before = np.concatenate([[0], np.cumsum(lo)[:-1]])
    after = np.concatenate([np.cumsum(lo[::-1])[::-1][1:], [0]])
    end = np.maximum(before, problem.N - after)
    pref = problem.pa.kind_prefix[present_kinds(problem)]
    window = (pref[:, end] - pref[:, before]).T.astype(np.float64)
    return KindWindows(mix.static_mib, mix.counts.astype(np.float64), window)


@dataclass(frozen=True)
class IntegerSetup:
    """What the V > 1 integer bounds (stage DP, device DP, integer program) start from: the
    compiled schedule, the relaxed layer, p2p ms per hop, the head / tail per-micro-batch forward,
    backward ms and activation MiB placed on their mini-stages (float [V, P]), each stage's
    constant static MiB (float [P], head / tail static included) and the head / tail backward
    workspace MiB on their mini-stages (float [V, P]; the cost model's workspace of a mini-stage
    is a max over its layers and its head / tail, so it is >= this) and the layer kinds' mix
    (:class:`KindMix`: least sums of n layers)."""

    cs: CompiledSchedule
    layer: RelaxedLayer
    p2p_ms: float
    end_fwd_ms: np.ndarray
    end_bwd_ms: np.ndarray
    end_act_mib: np.ndarray
    const_static_mib: np.ndarray
    end_ws_mib: np.ndarray
    mix: KindMix


def integer_setup(problem: Problem, V: int) -> IntegerSetup | None:
    """:class:`IntegerSetup` for pp_interleave_num V, or None where these bounds do not apply: V = 1,
    a schedule that splits B/W, or pipeline positions other than chunk-major (head on (0, 0),
    tail on (V-1, P-1))."""
    if V < 2:
        return None
    P = problem.P
    cs = compile_schedule(problem.schedule, P, V, problem.m, problem.seq_split_num)
    if cs.split_bw:
        return None
    pos = np.asarray(get_schedule(problem.schedule).virtual_position(P, V))
    if not (pos[0, 0] == 0 and pos[V - 1, P - 1] == V * P - 1):
        return None
    pa = problem.pa
    head, tail = pa.head, pa.tail
    end = np.zeros((3, V, P))  # fwd ms, bwd ms, act MiB
    end[:, 0, 0] += (head.fwd_ms, head.bwd_ms, head.act_mib)
    end[:, V - 1, P - 1] += (tail.fwd_ms, tail.bwd_ms, tail.act_mib)
    const_static = np.full(P, pa.stage_const_mib)
    const_static[0] += head.static_mib
    const_static[P - 1] += tail.static_mib
    end_ws = np.zeros((V, P))
    end_ws[0, 0] = head.ws_mib
    end_ws[V - 1, P - 1] = max(end_ws[V - 1, P - 1], tail.ws_mib)
    return IntegerSetup(cs, relaxed_layer(problem), pa.p2p_ms if P > 1 else 0.0, end[0], end[1], end[2],
                        const_static, end_ws, kind_mix(problem))


class LayerTerms(NamedTuple):
    """Every decoder layer (layer order) under a free recompute class per layer: forward, backward
    without replay and weight-gradient ms [N]; replay ms, kept activation MiB and static change MiB
    (``RecomputeOption.static_delta_mib``) per allowed class [N, C]; static MiB [N]."""

    fwd_ms: np.ndarray
    bwd_ms: np.ndarray
    w_ms: np.ndarray
    extra_ms: np.ndarray
    act_mib: np.ndarray
    sdelta_mib: np.ndarray
    static_mib: np.ndarray


def layer_terms(problem: Problem) -> LayerTerms:
    """:class:`LayerTerms` of the problem's layers for its allowed recompute classes."""
    pa = problem.pa
    kind = np.argmax(np.diff(pa.kind_prefix, axis=1), axis=0)  # [N]
    cls = allowed_classes(problem.kinds)
    act = pa.act_kc[kind][:, cls]
    sdelta = pa.static_dc[kind][:, cls] if pa.static_dc is not None else np.zeros_like(act)
    return LayerTerms(pa.fwd_k[kind], pa.bwd_kc[kind, NONE], pa.w_k()[kind],
                      pa.bwd_kc[kind][:, cls] - pa.bwd_kc[kind, NONE][:, None], act, sdelta,
                      pa.static_k[kind])
