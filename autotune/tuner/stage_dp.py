"""Stage-by-stage threshold DP lower bound for pp_interleave_num > 1 (pure numpy, no Optuna).

The Lagrangian bound of :mod:`autotune.tuner.bounds` prices a *convex mix* of critical paths, so
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

Relaxations (each can only lower the bound): every layer is replaced by the cheapest layer kind
present (componentwise minimum per recompute class, so homogeneous models lose nothing); each
layer picks its recompute class freely (not the "first r layers" rule); other stages' backward
counts use the backward without recompute replay; on stage p the replay ms E is weighted by the
path's smallest backward count over chunks; the workspace term of the memory peak is dropped and
the fit test uses each undominated live-count vector of the schedule separately.

DP. For a threshold T, scan stages 0..P-1 with state (layers placed, last-chunk layers still to
place) and value "fewest chunk-0 layers placed" (every constraint grows with C0, so fewer is never
worse: the DP is exact for the relaxed problem). T is feasible when the state (N, 0) is reached;
bisection gives the least feasible T to a relative tolerance and the bound is the last infeasible
T. Per T: P × (layer-count vectors) vectorised steps over the (N+1)² state grid.

Applies when the schedule runs the whole backward as one op (not zero_bubble_v) and V > 1.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from autotune.cost.inputs import NONE
from autotune.cost.schedules import get_schedule
from autotune.cost.simulate import compile_schedule
from autotune.tuner.bounds import _pareto_front, allowed_classes
from autotune.tuner.problem import Problem


@dataclass
class StagePaths:
    """The path family of one stage p, arrays over its Q paths.

    cF, cB: float [Q, V] forward / backward op counts on stage p (divided by seq_split_num);
    K: float [Q] ms of the cross-stage hops (hops × p2p_ms); a_f, a_b: [Q] coefficient of the
    forward / backward ms of all other stages; c0_f, c0_b: [Q] of the chunk-0 mini-stages of the
    earlier stages; r_f, r_b: [Q] of the last-chunk mini-stages of the later stages.
    """

    cF: np.ndarray
    cB: np.ndarray
    K: np.ndarray
    a_f: np.ndarray
    a_b: np.ndarray
    c0_f: np.ndarray
    c0_b: np.ndarray
    r_f: np.ndarray
    r_b: np.ndarray


def _counts_fit(CF: np.ndarray, CB: np.ndarray, p: int) -> tuple[float, float, float, float, float, float]:
    """Largest pattern (all others, chunk-0 earlier, last-chunk later) below a path's counts off p."""
    V, P = CF.shape
    out = []
    for C in (CF, CB):
        R = C.copy()
        R[:, p] = np.inf
        a = float(R.min()) if P > 1 else 0.0
        R -= a
        c0 = float(R[0, :p].min()) if p > 0 else 0.0
        R[0, :p] -= c0
        r = float(R[V - 1, p + 1:].min()) if p < P - 1 else 0.0
        out.append((a, c0, r))
    (af, c0f, rf), (ab, c0b, rb) = out
    return af, ab, c0f, c0b, rf, rb


def one_stay_counts(cs) -> list[list[tuple[np.ndarray, np.ndarray, int]]]:
    """Exact op counts of every one-stay path (see module docstring), per stage p: a list of
    (forward counts float [V, P], backward counts float [V, P], cross-stage hops), counts divided
    by ``seq_split_num``. A path's length for mini-stage durations f, b (ms per micro-batch) is
    Σ cf·f + Σ cb·b + hops·p2p_ms.

    Raises:
        ValueError: the schedule splits the backward (B/W ops).
    """
    if cs.split_bw:
        raise ValueError("one-stay paths need a schedule that runs the whole backward as one op")
    P, V, n = cs.P, cs.V, cs.num_ops
    dep, fwd, chunk, stage, cross = cs.dep, cs.fwd, cs.chunk, cs.stage, cs.cross
    child: dict[int, int] = {}
    for i in range(n):
        if dep[i] < n:
            child.setdefault(int(dep[i]), i)

    def chain(x: int, up: bool) -> tuple[np.ndarray, int]:
        C = np.zeros((2, V, P))
        hops = 0
        while True:
            if up:
                if dep[x] >= n:
                    break
                hops += int(cross[x])
                x = int(dep[x])
            else:
                if x not in child:
                    break
                x = child[x]
                hops += int(cross[x])
            C[0 if fwd[x] else 1, chunk[x], stage[x]] += 1
        return C, hops

    out = []
    for p in range(P):
        order = [int(x) for x in cs.order[p]]
        L = len(order)
        xs, ys = {0}, {L - 1}
        for v in range(V):
            bs = [t for t, o in enumerate(order) if not fwd[o] and chunk[o] == v]
            fs = [t for t, o in enumerate(order) if fwd[o] and chunk[o] == v]
            for seq in (bs, fs):
                if seq:
                    xs.add(seq[0])
                    ys.add(seq[-1])
        own = np.zeros((L + 1, 2, V))
        for t, o in enumerate(order):
            own[t + 1] = own[t]
            own[t + 1, 0 if fwd[o] else 1, chunk[o]] += 1
        rows = []
        for tx in sorted(xs):
            Ce, he = chain(order[tx], True)
            for ty in sorted(ys):
                if ty < tx:
                    continue
                Cx, hx = chain(order[ty], False)
                C = Ce + Cx
                C[:, :, p] += own[ty + 1] - own[tx]
                rows.append((C[0] / cs.k, C[1] / cs.k, he + hx))
        out.append(rows)
    return out


def stage_paths(cs, p2p_ms: float) -> list[StagePaths]:
    """One-stay paths of every stage (see module docstring) for a compiled non-split schedule.

    Raises:
        ValueError: the schedule splits the backward (B/W ops).
    """
    out = []
    for p, paths in enumerate(one_stay_counts(cs)):
        rows = [(cf[:, p], cb[:, p], hops * p2p_ms) + _counts_fit(cf, cb, p) for cf, cb, hops in paths]
        cols = list(zip(*rows))
        out.append(StagePaths(np.asarray(cols[0]), np.asarray(cols[1]), np.asarray(cols[2]),
                              *(np.asarray(c, dtype=np.float64) for c in cols[3:])))
    return out


@dataclass
class _Layer:
    """The relaxed layer: componentwise minimum over the layer kinds present (ms, MiB)."""

    f: float
    b0: float
    static: float
    act: np.ndarray     # [C'] MiB kept per micro-batch, allowed classes
    extra: np.ndarray   # [C'] replay ms
    sdelta: np.ndarray  # [C'] static MiB change
    ws: np.ndarray      # [C'] backward workspace MiB


def _relaxed_layer(problem: Problem) -> _Layer:
    pa = problem.pa
    ks = np.flatnonzero(pa.kind_prefix[:, -1] > 0)
    cls = allowed_classes(problem.kinds)
    b0k = pa.bwd_kc[ks, NONE]
    sd = pa.static_dc[ks][:, cls] if pa.static_dc is not None else np.zeros((ks.size, len(cls)))
    return _Layer(float(pa.fwd_k[ks].min()), float(b0k.min()), float(pa.static_k[ks].min()),
                  pa.act_kc[ks][:, cls].min(axis=0),
                  (pa.bwd_kc[ks][:, cls] - b0k[:, None]).min(axis=0), sd.min(axis=0),
                  pa.ws_kc[ks][:, cls].min(axis=0))


class _RowFrontiers:
    """Least replay ms of n relaxed layers against one memory coordinate w·act + static_delta."""

    def __init__(self, layer: _Layer) -> None:
        self.layer = layer
        self.cache: dict[tuple[int, float], np.ndarray] = {}
        self.pre: dict[tuple, np.ndarray] = {}

    def get(self, n: int, w: float) -> np.ndarray:
        key = (n, w)
        if key not in self.cache:
            if n == 0:
                f = np.zeros((1, 2))
            else:
                opt = np.stack([w * self.layer.act + self.layer.sdelta, self.layer.extra], axis=1)
                prev = self.get(n - 1, w)
                f = _pareto_front((prev[:, None, :] + opt[None, :, :]).reshape(-1, 2))
            self.cache[key] = f
        return self.cache[key]

    def prefix(self, counts: tuple[int, ...], w: tuple[float, ...]) -> np.ndarray:
        """Pareto frontier of the Minkowski sum over chunks of ``get(n_v, w_v)`` (memoised)."""
        key = (counts, w)
        if key not in self.pre:
            if not counts:
                f = np.zeros((1, 2))
            else:
                acc = self.prefix(counts[:-1], w[:-1])
                g = self.get(counts[-1], w[-1])
                f = _pareto_front((acc[:, None, :] + g[None, :, :]).reshape(-1, 2))
            self.pre[key] = f
        return self.pre[key]


def _min_extra(fr: _RowFrontiers, counts: tuple[int, ...], w: np.ndarray, budget: float) -> float:
    """min Σ_v replay over per-layer classes with Σ_v (w_v·act + static_delta) <= budget (MiB).

    The frontier of the first V-1 chunks is a Pareto Minkowski sum (memoised by prefix); the last
    chunk is matched to each of its points by binary search."""
    wk = tuple(float(x) for x in w)
    acc = fr.prefix(tuple(int(n) for n in counts[:-1]), wk[:-1])
    last = fr.get(int(counts[-1]), wk[-1])
    i = np.searchsorted(last[:, 0], budget - acc[:, 0] + 1e-9, side="right") - 1
    ok = i >= 0
    if not ok.any():
        return np.inf
    return float((acc[ok, 1] + last[i[ok], 1]).min())


def _undominated(rows: np.ndarray) -> np.ndarray:
    rows = np.unique(rows, axis=0)
    keep = [i for i in range(rows.shape[0])
            if not any(j != i and np.all(rows[j] >= rows[i]) for j in range(rows.shape[0]))]
    return rows[keep]


def _count_vectors(lo: np.ndarray, hi: np.ndarray, cap: int) -> list[tuple[int, ...]]:
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


@dataclass
class _Setup:
    """What both V > 1 integer bounds (this DP and :mod:`autotune.tuner.milp_bound`) start from:
    the compiled schedule, the relaxed layer, p2p ms, the head / tail per-micro-batch forward,
    backward ms and activation MiB placed on their mini-stages (float [V, P]), each stage's
    constant static MiB (float [P], head / tail static included) and the head / tail backward
    workspace MiB on their mini-stages (float [V, P]; the cost model's workspace of a mini-stage
    is a max over its layers and its head / tail, so it is >= this)."""

    cs: object
    lay: _Layer
    p2p: float
    end_f: np.ndarray
    end_b: np.ndarray
    end_a: np.ndarray
    const_static: np.ndarray
    end_w: np.ndarray


def _setup(problem: Problem, V: int) -> _Setup | None:
    """:class:`_Setup` for pp_interleave_num V, or None where these bounds do not apply: V = 1,
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
    end = np.zeros((3, V, P))  # f, b, act
    end[:, 0, 0] += pa.head[:3]
    end[:, V - 1, P - 1] += pa.tail[:3]
    const_static = np.full(P, pa.stage_const_mib)
    const_static[0] += pa.head[3]
    const_static[P - 1] += pa.tail[3]
    end_w = np.zeros((V, P))
    end_w[0, 0] = pa.head[4]
    end_w[V - 1, P - 1] = max(end_w[V - 1, P - 1], pa.tail[4])
    return _Setup(cs, _relaxed_layer(problem), pa.p2p_ms if P > 1 else 0.0, end[0], end[1], end[2],
                  const_static, end_w)


@dataclass
class StageDPBound:
    """Result of :func:`stage_dp_bound`: the bound (ms; +inf when no layout can fit), the
    bisection's threshold-DP evaluations, the count vectors tried and the relaxed problem's best
    layer split int [V, P] (a seed, not a proof)."""

    bound_ms: float
    evaluations: int
    configs: int
    split: np.ndarray | None = None


def stage_dp_bound(problem: Problem, V: int, *, upper_ms: float | None = None,
                   lower_ms: float | None = None, rel_tol: float = 1e-4,
                   max_configs: int = 200_000) -> StageDPBound | None:
    """Lower bound (ms) on the step time of every memory-feasible layout with pp_interleave_num V.

    See the module docstring for the paths, the relaxations and the DP. Returns None when the
    bound does not apply (V = 1, a B/W-split schedule) or when the per-stage layer-count vectors
    would exceed ``max_configs`` (a work cap; the caller keeps its other bound). ``upper_ms``: a
    feasible step time (caps the layers per stage and starts the bisection); ``lower_ms``: a bound
    already proven (the bisection starts there, so the result is never below it).
    """
    su = _setup(problem, V)
    if su is None:
        return None
    cs, lay, p2p = su.cs, su.lay, su.p2p
    end_f, end_b, end_a, const_static = su.end_f, su.end_b, su.end_a, su.const_static
    P, N, m, k = problem.P, problem.N, problem.m, cs.k
    pa = problem.pa
    paths = stage_paths(cs, p2p)
    hf, hb, _, _, _ = pa.head
    tf, tb, _, _, _ = pa.tail
    lo, hi = problem.bounds(V)
    fb0 = lay.f + lay.b0
    # a stage's own ops are one path: m·Σ n (f + b0) <= T; and static alone must fit
    n_cap = N
    if upper_ms is not None and np.isfinite(upper_ms) and fb0 > 0:
        n_cap = min(n_cap, int(upper_ms / (m * fb0)) + 1)
    fr = _RowFrontiers(lay)
    stage_tab = []
    total = 0
    for p in range(P):
        rows = _undominated(np.concatenate(
            [cs.mem_fwd[p]] + ([cs.mem_bwd[p][0]] if cs.mem_bwd[p][0].size else [])).reshape(-1, V)
            .astype(np.float64)) / k
        vecs = _count_vectors(lo[:, p], np.minimum(hi[:, p], n_cap), min(n_cap, N))
        total += len(vecs)
        if total > max_configs:
            return None
        ns, es = [], []
        for cnt in vecs:
            nt = sum(cnt)
            static = const_static[p] + nt * lay.static
            e = 0.0
            for w in rows:
                room = problem.hbm_mib - static - float(w @ end_a[:, p])
                e = max(e, _min_extra(fr, cnt, w, room))
                if not np.isfinite(e):
                    break
            if np.isfinite(e):
                ns.append(cnt)
                es.append(e)
        if not ns:
            return StageDPBound(float("inf"), 0, total)
        nv = np.asarray(ns, dtype=np.int64)  # [M, V]
        E = np.asarray(es)
        sp = paths[p]
        fv = nv * lay.f + end_f[:, p]  # [M, V]
        bv = nv * lay.b0 + end_b[:, p]
        own = fv @ sp.cF.T + bv @ sp.cB.T + E[:, None] * sp.cB.min(axis=1)[None, :]  # [M, Q]
        nt = nv.sum(axis=1)
        oth_f = lay.f * (N - nt)[:, None] + (hf if p else 0.0) + (tf if p < P - 1 else 0.0)
        oth_b = lay.b0 * (N - nt)[:, None] + (hb if p else 0.0) + (tb if p < P - 1 else 0.0)
        base = (sp.K[None, :] + own + sp.a_f * oth_f + sp.a_b * oth_b
                + (sp.c0_f * hf + sp.c0_b * hb if p else 0.0)
                + (sp.r_f * tf + sp.r_b * tb if p < P - 1 else 0.0))  # [M, Q]
        alpha0 = sp.c0_f * lay.f + sp.c0_b * lay.b0  # [Q] ms per chunk-0 layer before p
        alphaR = sp.r_f * lay.f + sp.r_b * lay.b0  # [Q] ms per last-chunk layer after p
        # paths with the same (alpha0, alphaR) differ only in their constant: keep the largest
        coef, grp = np.unique(np.round(np.stack([alpha0, alphaR], axis=1), 9), axis=0, return_inverse=True)
        grp = grp.reshape(-1)
        gbase = np.full((nv.shape[0], coef.shape[0]), -np.inf)
        for g in range(coef.shape[0]):
            gbase[:, g] = base[:, grp == g].max(axis=1)
        # configs with the same DP move (layers, chunk-0 layers, last-chunk layers) form a group
        key = np.stack([nv.sum(axis=1), nv[:, V - 1], nv[:, 0]], axis=1)  # layers, last, chunk 0
        order = np.lexsort(key.T[::-1])
        nv, gbase, key = nv[order], gbase[order], key[order]
        starts = np.flatnonzero(np.concatenate([[True], np.any(key[1:] != key[:-1], axis=1)]))
        # within a group a config whose every path constant is >= another's never helps
        keep = np.ones(nv.shape[0], dtype=bool)
        for a, b in zip(starts, np.append(starts[1:], nv.shape[0])):
            gb = gbase[a:b]
            if b - a > 1:
                dom = np.all(gb[None, :, :] <= gb[:, None, :], axis=2) & \
                    np.any(gb[None, :, :] < gb[:, None, :], axis=2)  # [i, j]: j dominates i
                keep[a:b] = ~dom.any(axis=1)
        nv, gbase, key = nv[keep], gbase[keep], key[keep]
        starts = np.flatnonzero(np.concatenate([[True], np.any(key[1:] != key[:-1], axis=1)]))
        stage_tab.append((nv, gbase, coef[:, 0], coef[:, 1], key[starts], starts))

    Rg = np.arange(N + 1, dtype=np.float64)
    INF = np.inf
    moves = []  # per stage: runs of groups with the same (layers, last-chunk layers)
    for t in stage_tab:
        keys = t[4]
        brk = np.flatnonzero(np.concatenate([[True], np.any(keys[1:, :2] != keys[:-1, :2], axis=1), [True]]))
        moves.append([(int(a), int(b)) for a, b in zip(brk[:-1], brk[1:])])

    def thresholds(T: float, p: int) -> np.ndarray:
        """[M, R]: the largest C0 that keeps every path of config i <= T (R after stage p)."""
        _, gbase, a0, aR, _, _ = stage_tab[p]
        slack = T - gbase[:, :, None] - aR[None, :, None] * Rg[None, None, :]  # M G R
        with np.errstate(divide="ignore", invalid="ignore"):
            lim = np.where(a0[None, :, None] > 0, slack / a0[None, :, None],
                           np.where(slack >= -1e-9, INF, -INF))
        return lim.min(axis=1) + 1e-9

    def feasible(T: float) -> list[np.ndarray] | None:
        """The DP tables C0 before each stage and after the last one when T is feasible, else
        None. C0[s, r]: fewest chunk-0 layers among stages < p, s layers placed, r last-chunk
        layers to place."""
        C0 = np.full((N + 1, N + 1), INF)
        C0[0, :] = 0.0
        hist = []
        for p in range(P):
            nv, _, _, _, keys, starts = stage_tab[p]
            thr = np.maximum.reduceat(thresholds(T, p), starts, axis=0)  # groups R
            new = np.full_like(C0, INF)
            for a, b in moves[p]:  # groups a..b-1 share (layers, last-chunk layers)
                nt, nl = int(keys[a, 0]), int(keys[a, 1])
                n0 = keys[a:b, 2].astype(np.float64)[:, None, None]
                src = C0[None, :N + 1 - nt, nl:]  # s, r  -> target s+nt, R = r - nl
                cand = np.where(src <= thr[a:b, None, :N + 1 - nl], src + n0, INF).min(axis=0)
                tgt = new[nt:, :N + 1 - nl]
                np.minimum(tgt, cand, out=tgt)
            hist.append(C0)
            C0 = new
            if not np.isfinite(C0).any():
                return None
        if not np.isfinite(C0[N, 0]):
            return None
        return hist + [C0]

    def trace(T: float, hist: list[np.ndarray]) -> np.ndarray:
        """One split int [V, P] reaching (N, 0) at T: per stage a config whose move fits."""
        split = np.zeros((V, P), dtype=np.int64)
        s_, r_, c_ = N, 0, float(hist[P][N, 0])
        for p in range(P - 1, -1, -1):
            nv = stage_tab[p][0]
            thr = thresholds(T, p)
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

    hi_T = float(upper_ms) if upper_ms is not None and np.isfinite(upper_ms) else None
    evals = 0
    if hi_T is None:
        hi_T = float(max(float(np.max(t[1])) for t in stage_tab)) * 2 + 1.0
    lo_T = 0.0
    if lower_ms is not None and np.isfinite(lower_ms) and lower_ms < hi_T:
        lo_T = float(lower_ms)  # a bound already proven: the result is the larger of the two
    hist = feasible(hi_T)
    evals += 1
    while hist is None:
        lo_T, hi_T = hi_T, hi_T * 2
        hist = feasible(hi_T)
        evals += 1
        if hi_T > 1e15:
            return StageDPBound(float("inf"), evals, total)
    while hi_T - lo_T > rel_tol * hi_T:
        mid = 0.5 * (lo_T + hi_T)
        evals += 1
        h_mid = feasible(mid)
        if h_mid is not None:
            hi_T, hist = mid, h_mid
        else:
            lo_T = mid
    return StageDPBound(lo_T, evals, total, trace(hi_T, hist))
