"""Provable lower bounds on the step time of any memory-feasible layout (pure numpy, no Optuna).

Certified gap of an answer = (best - bound) / bound; the bound is a *proof*, not an estimate:
every layout of the search space that fits the HBM budget simulates to a step time >= the bound.

Why it holds (cost-model reference §6.1, the critical-path bound generalised to interleaving):

1. Path bound. Every op on stage p transitively needs the chunk-0 forwards of stages 0..p-1 of
   some micro-batch (p stage hops), and every op on stage p is followed by the chunk-0 backwards
   of stages p-1..0 (p more hops). Stage p runs its 2·m·V ops one at a time, so for every stage p

       T >= A_p + m·W_p,   A_p = Σ_{q<p} (f(0,q) + b(0,q)) + 2·p·p2p,   W_p = Σ_v (f(v,p) + b(v,p))

   with f/b the per-micro-batch forward / backward(+replay) ms of mini-stage (v, p) and head/tail
   included. (Balanced stages make it exact: (m·V + P - 1)·t_chunk.)
2. Memory. Stage p's peak = static_p + max_j Σ_v live_j[v]·act(v,p) (+ a workspace >= 0) over the
   schedule's live-count vectors, so any one vector ν gives static_p + Σ_v ν[v]·act(v,p) <= cap.
3. Lagrangian relaxation. For weights λ on the simplex (over stages) and μ >= 0 (MiB⁻¹·ms), a
   feasible layout satisfies T >= Σ_p λ_p (A_p + m·W_p) + Σ_p μ_p (mem_p - cap). The right side is a
   sum over layers (each layer contributes to one mini-stage) once the "first r layers" recompute
   rule is relaxed to a free per-layer recompute class, so its minimum over all layouts is a DP
   over mini-stages in layer order (pipeline positions, so V-shaped placements too): O(V·P·N²).
   Any (λ, μ) gives a valid bound; a projected subgradient ascent (Polyak steps towards the best
   known step time) raises it. Static MiB changes per recompute class (``static_delta_mib``) are
   part of the memory term.
4. Column generation (V > 1). The path family starts with the per-stage entry/exit paths of step 1
   and grows with the longest path (:func:`critical_path`) of the relaxed minimiser's durations
   every few iterations and of every layout the search found. Each added member is a chain of the
   dependency graph, so step 3's argument holds for the enlarged family unchanged; a minimiser
   that dodged the old paths (e.g. tiny chunk-0 mini-stages that shorten the ramp of step 1) is
   priced by its own critical path at the next solve.

The bound of a problem is the minimum over its pp_interleave_num candidates. For pure partition
problems, :func:`minmax_partition` is the exact min-max DP of §6.2 (checked on SYN-1).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from autotune.cost.inputs import BOTH, COMM, FULL, NONE, SELECT
from autotune.cost.simulate import compile_schedule
from autotune.tuner.problem import Problem


def minmax_partition(cost: list[float] | np.ndarray, P: int, *, head: float = 0.0,
                     tail: float = 0.0) -> tuple[float, list[int]]:
    """Exact min over contiguous splits (>= 1 item per part) of the largest part cost (§6.2).

    ``D[k][j] = min_{i<j} max(D[k-1][i], C(i, j, k))`` with ``head`` added to part 0 and ``tail``
    to part P-1. Returns (optimal bottleneck, one optimal split as part sizes).

    Raises:
        ValueError: fewer items than parts, or P < 1.
    """
    c = np.asarray(cost, dtype=np.float64)
    N = c.size
    if P < 1 or N < P:
        raise ValueError(f"need 1 <= P <= number of items, got P={P}, items={N}")
    S = np.concatenate([[0.0], np.cumsum(c)])
    inf = np.inf
    D = np.full((P + 1, N + 1), inf)
    arg = np.zeros((P + 1, N + 1), dtype=np.int64)
    D[0, 0] = 0.0
    for k in range(1, P + 1):
        extra = (head if k == 1 else 0.0) + (tail if k == P else 0.0)
        for j in range(k, N + 1):
            i = np.arange(k - 1, j)
            val = np.maximum(D[k - 1, i], S[j] - S[i] + extra)
            a = int(np.argmin(val))
            D[k, j], arg[k, j] = val[a], i[a]
    split, j = [], N
    for k in range(P, 0, -1):
        i = int(arg[k, j])
        split.append(j - i)
        j = i
    return float(D[P, N]), split[::-1]


def allowed_classes(kinds: tuple[str, ...] | list[str]) -> list[int]:
    """Recompute classes (indices of RECOMPUTE_CLASSES) a layer may take under ``kinds``."""
    out = [NONE]
    if "select" in kinds:
        out.append(SELECT)
    if "comm" in kinds:
        out.append(COMM)
    if "select" in kinds and "comm" in kinds:
        out.append(BOTH)
    if "full" in kinds:
        out.append(FULL)
    return out


@dataclass
class BoundResult:
    """A lower bound on the step time (ms) of every memory-feasible layout of a problem.

    Attributes:
        bound_ms: min over V of ``per_v_ms[V]``.
        per_v_ms: V -> bound for layouts with that pp_interleave_num (inf: none fits for sure).
        layers_v: V -> the relaxed problem's best split int [V, P] (a good seed, not a proof).
        iterations: subgradient iterations done in all.
    """

    bound_ms: float
    per_v_ms: dict[int, float] = field(default_factory=dict)
    layers_v: dict[int, np.ndarray] = field(default_factory=dict)
    iterations: int = 0


def _simplex(x: np.ndarray) -> np.ndarray:
    """Euclidean projection onto the probability simplex."""
    u = np.sort(x)[::-1]
    css = np.cumsum(u) - 1.0
    k = np.arange(1, x.size + 1)
    rho = np.nonzero(u - css / k > 0)[0][-1]
    return np.maximum(x - css[rho] / (rho + 1.0), 0.0)


class _Lagrangian:
    """The relaxed problem for one V (see module docstring, step 3), over a family of paths.

    Paths per stage p: enter at the first forward of chunk u in p's order (after the forwards of
    all pipeline positions before (u, p), same micro-batch), run p's ops up to the last backward of
    chunk w, leave through the backwards of all positions before (w, p). Each path is linear in the
    per-mini-stage forward / backward times: ``CF`` / ``CB`` [n_paths, V, P] counts and ``K``
    [n_paths] (p2p hops × p2p_ms). With V = 1 there is one path per stage, the bound of step 1.
    """

    def __init__(self, problem: Problem, V: int) -> None:
        from autotune.cost.schedules import get_schedule

        pa = problem.pa
        self.P, self.V, self.m, self.N = problem.P, V, problem.m, problem.N
        P = self.P
        kind = np.argmax(np.diff(pa.kind_prefix, axis=1), axis=0)  # [N]
        cls = allowed_classes(problem.kinds)
        self.f = pa.fwd_k[kind]  # [N] ms per micro-batch
        self.b = pa.bwd_kc[kind, NONE]
        self.extra = (pa.bwd_kc[kind][:, cls] - pa.bwd_kc[kind, NONE][:, None])  # [N, C]
        self.act = pa.act_kc[kind][:, cls]  # [N, C]
        self.static = pa.static_k[kind]  # [N]
        # static MiB change of a layer under each class (RecomputeOption.static_delta_mib)
        self.sdelta = (pa.static_dc[kind][:, cls] if pa.static_dc is not None
                       else np.zeros_like(self.act))  # [N, C]
        pos = np.asarray(get_schedule(problem.schedule).virtual_position(P, V))
        self.pos = pos
        #: mini-stages (v, p) in layer order (pipeline position 0, 1, ...)
        self.walk = [tuple(int(x) for x in np.argwhere(pos == q)[0]) for q in range(V * P)]
        (hv, hp), (tv, tp) = self.walk[0], self.walk[-1]
        hf, hb, ha, hs, _ = pa.head
        tf, tb, ta, ts, _ = pa.tail
        self.end_f = np.zeros((V, P))
        self.end_b = np.zeros((V, P))
        self.end_f[hv, hp] += hf
        self.end_b[hv, hp] += hb
        self.end_f[tv, tp] += tf
        self.end_b[tv, tp] += tb
        self.head_act, self.tail_act = ha, ta
        self.const_static = np.full(P, pa.stage_const_mib)
        self.const_static[hp] += hs
        self.const_static[tp] += ts
        p2p = pa.p2p_ms if P > 1 else 0.0
        self.p2p = p2p
        self.cap = problem.hbm_mib
        cs = compile_schedule(problem.schedule, P, V, self.m, problem.seq_split_num)
        self.cs = cs
        #: B/W-split schedule (zero_bubble_v): a backward op is B (bwd - W) and W is its own op
        self.split = bool(cs.split_bw)
        self.wl = pa.w_k()[kind]  # [N] weight-gradient ms per layer (no replay)
        hw = pa.head_w_ms if pa.head_w_ms is not None else 0.5 * hb
        tw = pa.tail_w_ms if pa.tail_w_ms is not None else 0.5 * tb
        self.end_w = np.zeros((V, P))
        self.end_w[hv, hp] += hw
        self.end_w[tv, tp] += tw
        # cross-stage hops on the chain position 0 -> q (a V-shaped turn stays on one device)
        st_at = np.asarray([p_ for _, p_ in self.walk])
        self.hops_to = np.concatenate([[0], np.cumsum(st_at[1:] != st_at[:-1])]).astype(np.int64)
        kind_op = cs.kind.astype(np.int64)
        CF, CB, CW, K = [], [], [], []

        def seg(p: int, k0: int, k1: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
            order = cs.order[p][k0:k1 + 1]
            ch, kd = cs.chunk[order], kind_op[order]
            cf = np.zeros((V, P))
            cb = np.zeros((V, P))
            cw = np.zeros((V, P))
            cf[:, p] = np.bincount(ch[kd == 0], minlength=V)
            cb[:, p] = np.bincount(ch[kd == 1], minlength=V)
            cw[:, p] = np.bincount(ch[kd == 2], minlength=V)
            return cf, cb, cw

        for p in range(P):
            order = cs.order[p]
            ch, kd = cs.chunk[order], kind_op[order]
            for u in range(V):
                first = np.flatnonzero((kd == 0) & (ch == u))
                if first.size == 0:
                    continue
                k0 = int(first[0])
                ends = []
                for w in range(V):
                    last = np.flatnonzero((kd == 1) & (ch == w))
                    if last.size and int(last[-1]) >= k0:
                        ends.append((int(last[-1]), w))
                if self.split:
                    ends.append((len(order) - 1, None))  # up to the stage's last op, no exit
                for k1, w in ends:
                    cf, cb, cw = seg(p, k0, k1)
                    cf[pos < pos[u, p]] += 1.0
                    hops = int(self.hops_to[pos[u, p]])
                    if w is not None:
                        cb[pos < pos[w, p]] += 1.0
                        hops += int(self.hops_to[pos[w, p]])
                        if self.split:
                            cw[hv, hp] += 1.0  # W of position 0 after its B (same device)
                    CF.append(cf)
                    CB.append(cb)
                    CW.append(cw)
                    K.append(hops * p2p)
        # ops of a seqpipe unit last 1/k of the micro-batch time (simulate._durations)
        self.CF, self.CB, self.K = np.asarray(CF) / cs.k, np.asarray(CB) / cs.k, np.asarray(K)
        self.CW = np.asarray(CW) / cs.k
        self._keys = {self._key(a, b, c, w) for a, b, c, w in zip(self.CF, self.CB, self.K, self.CW)}
        self.vecs = []
        for p in range(P):
            vs = [cs.mem_fwd[p]] + ([cs.mem_bwd[p][0]] if cs.mem_bwd[p][0].size else [])
            self.vecs.append(np.unique(np.concatenate(vs).reshape(-1, V).astype(np.float64), axis=0))
        lo, hi = problem.bounds(V)
        self.lo = np.asarray([lo[v, p] for v, p in self.walk])
        self.hi = np.asarray([hi[v, p] for v, p in self.walk])
        self.nu = np.stack([vv[int(np.argmax(vv.sum(axis=1)))] for vv in self.vecs])  # [P, V]

    @property
    def num_paths(self) -> int:
        return int(self.K.size)

    def to_vp(self, split: np.ndarray) -> np.ndarray:
        """A split in walk (layer) order as int [V, P]."""
        out = np.zeros((self.V, self.P), dtype=np.int64)
        for k, (v, p) in enumerate(self.walk):
            out[v, p] = split[k]
        return out

    @staticmethod
    def _key(cf: np.ndarray, cb: np.ndarray, k: float, cw: np.ndarray) -> tuple:
        return (np.round(cf, 9).tobytes(), np.round(cb, 9).tobytes(), round(float(k), 9),
                np.round(cw, 9).tobytes())

    def add_path(self, cf: np.ndarray, cb: np.ndarray, k: float, cw: np.ndarray | None = None) -> bool:
        """Add one dependency-graph path (op counts [V, P] of forwards, backwards (B ops when
        split) and W ops, already divided by seq_split_num; constant ms); False when it is
        already in the family."""
        cw = np.zeros_like(cf) if cw is None else cw
        key = self._key(cf, cb, k, cw)
        if key in self._keys:
            return False
        self._keys.add(key)
        self.CF = np.concatenate([self.CF, cf[None]])
        self.CB = np.concatenate([self.CB, cb[None]])
        self.CW = np.concatenate([self.CW, cw[None]])
        self.K = np.append(self.K, float(k))
        return True

    def wcoef(self, cb: np.ndarray, cw: np.ndarray) -> np.ndarray:
        """Coefficient of the W ms of each mini-stage in a path's length: a path's length is
        Σ cf·F + Σ cb·(Bwd − W) + Σ cw·W = Σ cf·F + Σ cb·Bwd + Σ (cw − cb)·W when the schedule
        splits the backward (B ops run bwd − W), and Σ cf·F + Σ cb·Bwd otherwise."""
        return (cw - cb) if self.split else np.zeros_like(cb)

    def solve(self, lam: np.ndarray, mu: np.ndarray) -> tuple[float, np.ndarray, np.ndarray, np.ndarray]:
        """min over layouts of the Lagrangian; returns (value, split [V·P], g [paths], h [P]).

        g = the path lengths and h_p = relaxed mem_p - cap of the minimiser (the subgradient).
        """
        P, V, N = self.P, self.V, self.N
        cf = np.tensordot(lam, self.CF, axes=1)  # [V, P]
        cb = np.tensordot(lam, self.CB, axes=1)
        cwd = self.wcoef(cb, np.tensordot(lam, self.CW, axes=1))
        (hv, hp), (tv, tp) = self.walk[0], self.walk[-1]
        const = (float(lam @ self.K) + float((cf * self.end_f + cb * self.end_b + cwd * self.end_w).sum())
                 + float(np.where(mu > 0, mu * (self.const_static - self.cap), 0.0).sum())
                 + mu[hp] * self.nu[hp, hv] * self.head_act + mu[tp] * self.nu[tp, tv] * self.tail_act)
        n_ms = V * P
        INF = np.inf
        dp = np.full(N + 1, INF)
        dp[0] = 0.0
        back = np.zeros((n_ms, N + 1), dtype=np.int64)
        choice = np.zeros((n_ms, N), dtype=np.int64)
        size = np.arange(N + 1)[:, None] - np.arange(N + 1)[None, :]
        for k in range(n_ms):
            v, p = self.walk[k]
            rc = cb[v, p] * self.extra + mu[p] * (self.nu[p, v] * self.act + self.sdelta)  # [N, C]
            choice[k] = np.argmin(rc, axis=1)
            per = (cf[v, p] * self.f + cb[v, p] * self.b + cwd[v, p] * self.wl + mu[p] * self.static
                   + rc.min(axis=1))
            C = np.concatenate([[0.0], np.cumsum(per)])
            ok = (size >= self.lo[k]) & (size <= self.hi[k])
            cand = np.where(ok, dp[None, :] - C[None, :], INF)
            a = np.argmin(cand, axis=1)
            dp = cand[np.arange(N + 1), a] + C
            back[k] = a
        value = float(dp[N]) + const
        split = np.zeros(n_ms, dtype=np.int64)
        j = N
        for k in range(n_ms - 1, -1, -1):
            i = int(back[k, j])
            split[k] = j - i
            j = i
        g, h = self._terms(split, choice)
        return value, split, g, h

    def _terms(self, split: np.ndarray, choice: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        fm, bm, mem = self.durations(split, choice)
        wm = self.w_durations(split)
        self.last_fb = (fm, bm, wm)
        g = self.lengths(fm, bm, wm)
        return g, mem - self.cap

    def lengths(self, fm: np.ndarray, bm: np.ndarray, wm: np.ndarray) -> np.ndarray:
        """Length (ms) of every path of the family for mini-stage durations [V, P] (forward,
        backward incl. replay, W part of the backward)."""
        g = (self.CF * fm).sum(axis=(1, 2)) + (self.CB * bm).sum(axis=(1, 2)) + self.K
        if self.split:
            g = g + ((self.CW - self.CB) * wm).sum(axis=(1, 2))
        return g

    def w_durations(self, split: np.ndarray) -> np.ndarray:
        """W ms [V, P] per micro-batch of a split in walk order (recompute never changes it)."""
        start = np.concatenate([[0], np.cumsum(split)])
        wm = self.end_w.copy()
        for k, (v, p) in enumerate(self.walk):
            wm[v, p] += self.wl[start[k]:start[k + 1]].sum()
        return wm

    def durations(self, split: np.ndarray, choice: np.ndarray) -> tuple[np.ndarray, ...]:
        """Forward / backward ms [V, P] per micro-batch and the relaxed memory [P] (MiB) of a split
        (walk order) with per-layer recompute classes ``choice`` [V·P, N]."""
        P, V = self.P, self.V
        start = np.concatenate([[0], np.cumsum(split)])
        fm = self.end_f.copy()
        bm = self.end_b.copy()
        mem = self.const_static.copy()
        (hv, hp), (tv, tp) = self.walk[0], self.walk[-1]
        mem[hp] += self.nu[hp, hv] * self.head_act
        mem[tp] += self.nu[tp, tv] * self.tail_act
        for k in range(V * P):
            v, p = self.walk[k]
            idx = np.arange(start[k], start[k + 1])
            c = choice[k, idx]
            fm[v, p] += self.f[idx].sum()
            bm[v, p] += self.b[idx].sum() + self.extra[idx, c].sum()
            mem[p] += (self.static[idx].sum() + self.nu[p, v] * self.act[idx, c].sum()
                       + self.sdelta[idx, c].sum())
        return fm, bm, mem

    def update_nu(self, split: np.ndarray) -> None:
        """Point ν of each stage at its largest live vector for this split (no recompute)."""
        P, V = self.P, self.V
        start = np.concatenate([[0], np.cumsum(split)])
        a = np.zeros((P, V))
        for k in range(V * P):
            v, p = self.walk[k]
            a[p, v] = self.act[start[k]:start[k + 1], 0].sum()
        for p in range(P):
            self.nu[p] = self.vecs[p][int(np.argmax(self.vecs[p] @ a[p]))]


class CriticalPath(NamedTuple):
    """A longest path: its length (ms), forward / backward (B when split) / W op counts [V, P]
    (divided by ``seq_split_num``) and its cross-stage hops."""

    length: float
    cf: np.ndarray
    cb: np.ndarray
    hops: int
    cw: np.ndarray


def critical_path(cs, fwd_ms: np.ndarray, bwd_ms: np.ndarray, p2p_ms: float,
                  w_ms: np.ndarray | None = None) -> CriticalPath:
    """A longest path of the schedule's dependency graph for one set of mini-stage durations.

    Args:
        cs: compiled schedule; fwd_ms, bwd_ms: float [V, P] per micro-batch (ms, backward incl.
            replay); p2p_ms: per hop; w_ms: float [V, P] W part of the backward (ms), used when the
            schedule splits the backward (B ops then run ``bwd − w``, W ops ``w``, as in
            :func:`autotune.cost.simulate.duration_table`; None = half of ``bwd_ms``).

    Returns :class:`CriticalPath`. Counts are divided by ``seq_split_num`` so that the path's
    length for *any* durations is ``Σ cf·f + Σ cb·b + hops·p2p`` (+ ``Σ cw·w − Σ cb·w`` when split):
    the path is a chain of ops each starting after its predecessor (data edge, + p2p across
    stages, or program order), so every layout's step time is >= that length (the simulation is
    a max-plus system; this is its longest path for these durations).
    """
    topo, dep, prev, cross = cs._scalar
    n = cs.num_ops
    if cs.split_bw:
        w = 0.5 * bwd_ms if w_ms is None else w_ms
        table = np.stack([fwd_ms, bwd_ms - w, w])  # [3, V, P] by op kind
        d = table[cs.kind.astype(np.int64), cs.chunk, cs.stage] / cs.k
    else:
        d = np.where(cs.fwd, fwd_ms[cs.chunk, cs.stage], bwd_ms[cs.chunk, cs.stage]) / cs.k
    dl = d.tolist()
    end = [0.0] * (n + 1)
    pred = [-1] * (n + 1)
    for i, dp_, pr, c in zip(topo, dep, prev, cross):
        a = end[dp_] + c * p2p_ms
        b = end[pr]
        if a >= b:
            end[i] = a + dl[i]
            pred[i] = dp_ if dp_ < n else -1
        else:
            end[i] = b + dl[i]
            pred[i] = pr if pr < n else -1
    i = int(np.argmax(end[:n]))
    length = end[i]
    cnt = np.zeros((3, cs.V, cs.P))
    hops = 0
    while i >= 0:
        cnt[int(cs.kind[i]), cs.chunk[i], cs.stage[i]] += 1.0
        j = pred[i]
        if j >= 0 and j == cs.dep[i] and cs.cross[i]:
            hops += 1
        i = j
    return CriticalPath(float(length), cnt[0] / cs.k, cnt[1] / cs.k, hops, cnt[2] / cs.k)


def lower_bound(problem: Problem, *, upper_ms: float | None = None, iters: int = 300,
                tol: float = 1e-4, layouts: list | None = None,
                gen_every: int = 10, patience: int = 5, stage_dp: bool = True) -> BoundResult:
    """Lower bound on the step time (ms) of any layout in ``problem`` that fits its HBM budget.

    Args:
        problem: the tuning problem (its V candidates, bounds and recompute kinds are respected).
        upper_ms: the best known feasible step time (ms); used as the Polyak target and to stop
            early once the bound for a V reaches it (that V then cannot beat the incumbent).
        iters: subgradient iterations per V.
        tol: stop a V when its bound is within ``tol`` (fraction) of ``upper_ms``.
        layouts: known layouts (:class:`~autotune.tuner.problem.Candidate`); the critical path of
            each one with its V joins that V's path family (V > 1).
        gen_every: every this many iterations the critical path of the relaxed minimiser's
            durations joins the family (column generation; 0 = never).
        stage_dp: also run the stage-by-stage threshold DP of :mod:`autotune.tuner.stage_dp`
            for V > 1 and keep the larger of the two bounds (both are proofs).

    With V = 1 the exact path DP of :func:`path_dp_bound` is used (much tighter); with V > 1 the
    larger of the stage DP (:func:`autotune.tuner.stage_dp.stage_dp_bound`: the max over
    "one-stay" paths, exact over integer splits) and the
    Lagrangian path relaxation of the module docstring over a growing family of dependency-graph
    paths: the per-stage entry/exit paths, plus the longest path (:func:`critical_path`) of every
    given layout and of the relaxed problem's minimisers. Every member is a path of the graph, so
    any convex weighting of the family stays a valid bound (weak duality), and adding the
    minimiser's own critical path cuts exactly the layouts the current weights under-price.

    Returns:
        :class:`BoundResult` (``bound_ms`` may be +inf when no layout can fit).
    """
    res = BoundResult(bound_ms=float("inf"))
    for V in problem.vpp_candidates:
        if V == 1:
            dp = path_dp_bound(problem, upper_ms=upper_ms)
            res.iterations += dp.evaluations
            res.per_v_ms[1] = dp.bound_ms
            if dp.split is not None:
                res.layers_v[1] = dp.split
            continue
        val, split, its = _vpp_bound(problem, V, upper_ms=upper_ms, iters=iters, tol=tol,
                                     layouts=[c for c in (layouts or []) if c.V == V],
                                     gen_every=gen_every, patience=patience)
        res.iterations += its
        if stage_dp:
            from autotune.tuner.stage_dp import stage_dp_bound

            sd = stage_dp_bound(problem, V, upper_ms=upper_ms, lower_ms=val)
            if sd is not None:
                res.iterations += sd.evaluations
                val = max(val, sd.bound_ms)
        res.per_v_ms[V] = val
        res.layers_v[V] = split
    res.bound_ms = min(res.per_v_ms.values()) if res.per_v_ms else float("inf")
    return res


def _vpp_bound(problem: Problem, V: int, *, upper_ms: float | None, iters: int, tol: float,
               layouts: list, gen_every: int, patience: int = 5) -> tuple[float, np.ndarray, int]:
    """(bound ms, relaxed split int [V, P], iterations) of the Lagrangian for one V > 1."""
    from autotune.cost.inputs import stage_costs
    from autotune.cost.schedules import get_schedule

    lag = _Lagrangian(problem, V)
    P = problem.P
    for c in layouts:
        costs = stage_costs(problem.pa, c.layers[None], c.rec[None], c.sel[None], c.com[None],
                            pos=lag.pos if get_schedule(problem.schedule).name == "zero_bubble_v" else None)
        cp = critical_path(lag.cs, costs.fwd_ms[0], costs.bwd_ms[0], lag.p2p, costs.bwd_w_ms[0])
        lag.add_path(cp.cf, cp.cb, cp.hops * lag.p2p, cp.cw)
    # Price of one MiB in ms (full recompute of the stage's layers), so that the memory
    # multipliers move on the same scale as the stage weights.
    saved = np.maximum(lag.act[:, :1] - lag.act, 0.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(saved > 0, problem.m * lag.extra / saved, np.nan)
    kappa = float(np.nanmedian(ratio)) if np.isfinite(ratio).any() else 1.0
    lam = np.full(lag.num_paths, 1.0 / lag.num_paths)
    nu_mu = np.zeros(P)  # μ / kappa
    best, best_split = -np.inf, None
    delta = None
    stall = 0
    it = 0
    for it in range(1, iters + 1):
        val, split, g, h = lag.solve(lam, kappa * nu_mu)
        if best_split is None or val > best + 1e-9 * abs(best):
            best, best_split, stall = val, split, 0
        else:
            stall += 1
        if delta is None:
            delta = max(abs(val) * 0.05, 1e-6)
        if upper_ms is not None and best >= upper_ms * (1 - tol):
            break
        if gen_every and (it == 1 or it % gen_every == 0):
            fm, bm, wm = lag.last_fb
            cp = critical_path(lag.cs, fm, bm, lag.p2p, wm)
            if lag.add_path(cp.cf, cp.cb, cp.hops * lag.p2p, cp.cw):
                lam = np.append(lam, 0.0)
                g = np.append(g, float(lag.lengths(fm, bm, wm)[-1]))
                stall = 0
        if stall >= patience:
            delta *= 0.5
            stall = 0
            if delta < abs(best) * tol * 0.1:
                break
        lag.update_nu(split)
        gl = g - g.mean()
        hs = kappa * h if np.isfinite(lag.cap) else np.zeros(P)
        hm = np.where((nu_mu > 0) | (hs > 0), hs, 0.0)
        norm2 = float(gl @ gl + hm @ hm)
        if norm2 <= 1e-18:
            break  # a stationary point of the dual: the bound cannot rise further
        goal = best + delta
        if upper_ms is not None:
            goal = min(goal, upper_ms)
        step = max(goal - val, 0.0) / norm2
        if EG:
            # exponentiated gradient on the path weights (mirror ascent on the simplex)
            spread = max(float(g.max() - g.min()), 1e-12)
            eta = EG * delta / max(abs(best), 1e-12) * abs(best) / spread
            z = np.log(np.maximum(lam, 1e-300)) + eta * (g - g.max()) / spread * 10
            z -= z.max()
            lam = np.exp(z)
            lam = np.maximum(lam, 1e-12)
            lam /= lam.sum()
        else:
            lam = _simplex(lam + step * g)
        nu_mu = np.maximum(0.0, nu_mu + step * hs)
    return float(best), lag.to_vp(best_split), it

EG = 0.0


# ---------------------------------------------------------------------------------------------
# Exact path-DP bound for pp_interleave_num = 1 (cost-model reference §6.1, critical path).
# ---------------------------------------------------------------------------------------------

def _pareto_sum(a: np.ndarray, b: np.ndarray, max_points: int = 4096) -> np.ndarray:
    """Pareto-minimal points of the Minkowski sum of two frontiers (rows (act MiB, extra ms)).

    When more than ``max_points`` remain, points are merged by act buckets into their componentwise
    minimum — a relaxation (every true point is dominated by a kept one), so bounds stay valid.
    """
    s = (a[:, None, :] + b[None, :, :]).reshape(-1, 2)
    return _pareto_front(s, max_points)


def _pareto_front(s: np.ndarray, max_points: int = 4096) -> np.ndarray:
    """Rows (act, extra) not dominated, sorted by act ascending (extra strictly descending)."""
    order = np.lexsort((s[:, 1], s[:, 0]))
    s = s[order]
    run_min = np.minimum.accumulate(s[:, 1])
    keep = np.concatenate([[True], s[1:, 1] < run_min[:-1] - 1e-12])
    f = s[keep]
    if f.shape[0] > max_points:
        edges = np.linspace(f[0, 0], f[-1, 0], max_points + 1)
        bucket = np.clip(np.searchsorted(edges, f[:, 0], side="right") - 1, 0, max_points - 1)
        lo_act = np.full(max_points, np.inf)
        lo_ext = np.full(max_points, np.inf)
        np.minimum.at(lo_act, bucket, f[:, 0])
        np.minimum.at(lo_ext, bucket, f[:, 1])
        ok = np.isfinite(lo_act)
        f = _pareto_front(np.stack([lo_act[ok], lo_ext[ok]], axis=1), max_points)
    return f


class _RecomputeFrontiers:
    """Least recompute replay (ms) of a group of layers under an activation budget (MiB).

    Relaxation of MindFormers' "first r layers" rule: every layer picks any allowed recompute class
    freely, so ``min_extra(counts, A)`` is <= the replay of every real recompute choice whose kept
    activation is <= A. With ``nu`` given the memory coordinate of a choice is its whole share of
    the stage peak, ``nu·act + static_delta_mib`` (MiB; static deltas may be negative, e.g.
    parallel_optimizer_comm_recompute), so the budget is then in MiB of the stage. Per kind, the Pareto frontier of (Σ act, Σ extra) over n layers is built by
    a DP over n; kinds combine by Pareto Minkowski sums (cached per count tuple).
    """

    def __init__(self, pa, kinds: tuple[str, ...], max_n: int, nu: float | None = None) -> None:
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
                fr.append(_pareto_sum(fr[-1], self.opts[k]))
            self.per_kind.append(fr)
        self.cache: dict[tuple[int, ...], np.ndarray] = {}

    def frontier(self, counts: tuple[int, ...]) -> np.ndarray:
        if counts not in self.cache:
            f = np.zeros((1, 2))
            for k, n in enumerate(counts):
                if n:
                    f = self.per_kind[k][n] if f.shape[0] == 1 and f[0, 0] == 0 and f[0, 1] == 0 \
                        else _pareto_sum(f, self.per_kind[k][n], max_points=1024)
            self.cache[counts] = f
        return self.cache[counts]

    def min_extra(self, counts: tuple[int, ...], budget: np.ndarray) -> np.ndarray:
        """Least Σ extra (ms) with Σ act <= budget (float [Q] MiB); +inf where nothing fits."""
        f = self.frontier(counts)
        i = np.searchsorted(f[:, 0], budget + 1e-9, side="right") - 1
        return np.where(i >= 0, f[np.maximum(i, 0), 1], np.inf)


@dataclass
class PathDPBound:
    """Result of :func:`path_dp_bound`: the bound (ms), the relaxed problem's best split int [1, P]
    and the threshold-DP evaluations done."""

    bound_ms: float
    split: np.ndarray | None
    evaluations: int


def _block_tables(problem: Problem) -> tuple[np.ndarray, np.ndarray]:
    """F[i, j] (fwd ms of layers i..j-1, per micro-batch) and Bmin[p, i, j] (the least backward +
    replay ms of that block on stage p among recompute choices whose kept activation fits; inf when
    none fits, or when the block size breaks stage p's bounds). Head/tail are included on the first
    and last stage.

    Fit test of a block on stage p (live count ν): const + Σ static + Σ static_delta(class) +
    ν·(Σ act(class) + end act) <= cap, the workspace (>= 0) dropped. Without static deltas the
    frontier over Σ act is shared by all stages (budget (cap − const − Σ static)/ν − end act);
    with them (``RecomputeOption.static_delta_mib``, negative under
    parallel_optimizer_comm_recompute) each distinct ν gets the frontier over
    Σ (ν·act + static_delta), so the assumed fit is exactly the real one, never stricter."""
    pa, P, N = problem.pa, problem.P, problem.N
    has_sd = pa.static_dc is not None and bool(np.any(pa.static_dc[:, allowed_classes(problem.kinds)]))
    frontiers: dict[float | None, _RecomputeFrontiers] = {}

    def frontier_for(nu: float | None) -> _RecomputeFrontiers:
        if nu not in frontiers:
            frontiers[nu] = _RecomputeFrontiers(pa, problem.kinds, N, nu)
        return frontiers[nu]
    cs = compile_schedule(problem.schedule, P, 1, problem.m, problem.seq_split_num)
    kp = pa.kind_prefix.astype(np.int64)  # K, N+1
    cnt = kp[:, None, :] - kp[:, :, None]  # K, i, j
    fwd = np.einsum("k,kij->ij", pa.fwd_k, cnt)
    bwd0 = np.einsum("k,kij->ij", pa.bwd_kc[:, NONE], cnt)
    static = np.einsum("k,kij->ij", pa.static_k, cnt)
    size = np.arange(N + 1)[None, :] - np.arange(N + 1)[:, None]
    lo, hi = problem.bounds(1)
    hf, hb, ha, hs, _ = pa.head
    tf, tb, ta, ts, _ = pa.tail
    F = np.where(size >= 0, fwd, np.inf)
    Bmin = np.full((P, N + 1, N + 1), np.inf)
    ii, jj = np.nonzero(size >= 0)
    keys = [tuple(int(x) for x in cnt[:, i, j]) for i, j in zip(ii, jj)]
    groups: dict[tuple[int, ...], list[int]] = {}
    for q, key in enumerate(keys):
        groups.setdefault(key, []).append(q)
    for p in range(P):
        rows = [cs.mem_fwd[p].reshape(-1, 1)]
        if cs.mem_bwd[p][0].size:
            rows.append(cs.mem_bwd[p][0].reshape(-1, 1))
        nu = float(np.concatenate(rows).max()) / cs.k  # live micro-batches' worth of activation
        const = pa.stage_const_mib + (hs if p == 0 else 0.0) + (ts if p == P - 1 else 0.0)
        end_act = (ha if p == 0 else 0.0) + (ta if p == P - 1 else 0.0)
        end_b = (hb if p == 0 else 0.0) + (tb if p == P - 1 else 0.0)
        room = problem.hbm_mib - const - static[ii, jj]
        if has_sd:
            fr = frontier_for(nu)
            budget = room - nu * end_act
        else:
            fr = frontier_for(None)
            budget = (room / nu if nu > 0 else np.where(room >= 0, np.inf, -np.inf)) - end_act
        extra = np.full(ii.size, np.inf)
        for key, qs in groups.items():
            qs_a = np.asarray(qs)
            extra[qs_a] = fr.min_extra(key, budget[qs_a])
        ok = (size[ii, jj] >= lo[0, p]) & (size[ii, jj] <= hi[0, p]) & ((room >= 0) | has_sd)
        Bmin[p, ii, jj] = np.where(ok, bwd0[ii, jj] + extra + end_b, np.inf)
    Fp = np.broadcast_to(F, (P, N + 1, N + 1)).copy()
    Fp[0] += hf
    Fp[-1] += tf
    return Fp, Bmin


def _pair_cycle(cs) -> tuple[int, int, int, int, int] | None:
    """The "ping-pong" path between the last two stages s = P-2 and L = P-1 (V = 1).

    Walk stage s's ops in program order; at each forward F_s(j) jump to F_L(j) (data edge, p2p), run
    L's ops in program order up to B_L(j), come back to B_s(j) (data edge, p2p) and go on along s.
    Every step is an edge of the dependency graph, so its length bounds the step time. In 1F1B's
    steady state each round trip covers two micro-batches and costs t_s + t_L + 2·p2p, i.e. the
    p2p latency is paid once per micro-batch, which the single-stage paths cannot see.

    Returns (forwards on s, backwards on s, forwards on L, backwards on L, cross hops) counted along
    the path, or None when the path is not of that shape (first op of s not a forward or last op
    not a backward).
    """
    P = cs.P
    s, L = P - 2, P - 1
    os_, oL = [int(x) for x in cs.order[s]], [int(x) for x in cs.order[L]]
    if not os_ or not cs.fwd[os_[0]] or cs.fwd[os_[-1]]:
        return None
    pos_s = {op: i for i, op in enumerate(os_)}
    pos_L = {op: i for i, op in enumerate(oL)}
    fwd_on_L = {int(cs.dep[op]): op for op in oL if cs.fwd[op]}  # F_s(j) -> F_L(j)
    bwd_on_s = {int(cs.dep[op]): op for op in os_ if not cs.fwd[op]}  # B_L(j) -> B_s(j)
    bwd_L_of = {}
    for op in oL:
        if not cs.fwd[op]:
            bwd_L_of[int(cs.mb[op])] = op
    cF_s = cB_s = cF_L = cB_L = hops = 0
    i = 0
    while i < len(os_):
        x = os_[i]
        if cs.fwd[x]:
            cF_s += 1
            y = fwd_on_L.get(x)
            z = bwd_L_of.get(int(cs.mb[x])) if y is not None else None
            if y is not None and z is not None and z in bwd_on_s and pos_L[z] >= pos_L[y]:
                for op in oL[pos_L[y]:pos_L[z] + 1]:
                    cF_L += int(cs.fwd[op])
                    cB_L += int(not cs.fwd[op])
                back = bwd_on_s[z]
                if pos_s[back] > i:
                    hops += 2
                    i = pos_s[back]
                    continue
                return None
        else:
            cB_s += 1
        i += 1
    return cF_s, cB_s, cF_L, cB_L, hops


def _detour_counts(cs, p: int, max_r: int | None = None,
                   ratios: tuple[float, ...] = (0.5, 1.0, 2.0, 3.0)) -> list[tuple[int, int, int]]:
    """Op counts (r, forwards, backwards) on stage p (V = 1) of "detour" paths of the dependency
    graph: walk stage p's ops in program order; at a forward F_p(u) the path may leave through
    F_{p+1}(u) … F_{P-1}(u) (data edges), B_{P-1}(u) … B_{p+1}(u), come back to B_p(u) (data edge)
    and go on along p from there, skipping p's ops in between. r = number of such round trips.
    Each round trip costs at least Σ_{q>p} (f_q + b_q) per unit ≥ the forward + backward without
    replay of every layer after p's block (and the tail), plus 2·(P−1−p) p2p hops, so with the
    entry prefix and exit of the base path every such path gives
    T >= prefix_p + (cF·f_p + cB·b_p + r·Suf(end of p's block))/k + (2p + 2r(P−1−p))·p2p.

    For each r (0 < r <= ``max_r``) and each weighting b/f in ``ratios`` the heaviest path is found
    by a DP over p's order (any path is valid; the weighting only chooses which ones to keep).
    Returns the distinct non-dominated (r, cF, cB); empty for the last stage.
    """
    P = cs.P
    if p >= P - 1:
        return []
    order = [int(x) for x in cs.order[p]]
    n = len(order)
    fw = [bool(cs.fwd[x]) for x in order]
    idx_b = {}
    for i, x in enumerate(order):
        if not fw[i]:
            idx_b[int(cs.mb[x])] = i
    jump = [-1] * n  # jump[i] = index of B_p(u) for a forward at i (if after it)
    for i, x in enumerate(order):
        if fw[i]:
            kb = idx_b.get(int(cs.mb[x]), -1)
            if kb > i + 1:
                jump[i] = kb
    R = max_r if max_r is not None else min(2 * P, n // 2)
    out: set[tuple[int, int, int]] = set()
    for rho in ratios:
        wt = [1.0 if f else rho for f in fw]
        # best[r][i] = (weight, cF, cB) of the heaviest path from op 0 to op i with r round trips
        neg = (-np.inf, 0, 0)
        best = [[neg] * n for _ in range(R + 1)]
        best[0][0] = (wt[0], int(fw[0]), int(not fw[0]))
        for r in range(R + 1):
            row = best[r]
            for i in range(n):
                cur = row[i]
                if cur[0] == -np.inf:
                    continue
                if i + 1 < n:
                    cand = (cur[0] + wt[i + 1], cur[1] + int(fw[i + 1]), cur[2] + int(not fw[i + 1]))
                    if cand[0] > row[i + 1][0]:
                        row[i + 1] = cand
                if r < R and jump[i] >= 0:
                    kb = jump[i]
                    cand = (cur[0] + wt[kb], cur[1], cur[2] + 1)
                    if cand[0] > best[r + 1][kb][0]:
                        best[r + 1][kb] = cand
        for r in range(1, R + 1):
            w_, cf_, cb_ = best[r][n - 1]
            if w_ > -np.inf:
                out.add((r, cf_, cb_))
    keep = [t for t in out if not any(o != t and all(a >= b for a, b in zip(o, t)) for o in out)]
    return sorted(keep)


def path_dp_bound(problem: Problem, *, upper_ms: float | None = None, rel_tol: float = 1e-7) -> PathDPBound:
    """Lower bound (ms) on the step time of every memory-feasible layout with pp_interleave_num 1.

    Proof sketch (cost-model reference §6.1). Every stage runs its ops one at a time, and an op starts
    after its data dependency ended (+ p2p when it ran on another stage). For stage p the chain
    "forwards of the first unit on stages 0..p-1 → all 2·m·k ops of stage p → backwards of the last
    unit on stages p-1..0" is a path of the dependency graph, so for any layout

        T >= Σ_{q<p} (f_q + b_q)/k + (n_F(p)·f_p + n_B(p)·b_p)/k + 2·p·p2p      (all p)

    with f/b per micro-batch (b = backward + replay), k = seq_split_num and n_F/n_B the forwards /
    backwards of stage p (m·k each). For a fitting layout, b_q >= Bmin(block_q, q): the least backward
    over every recompute choice (each layer's class chosen freely, a relaxation of the "first r
    layers" rule) whose share of the peak, static + Σ static_delta(class) + ν_q·Σ act(class)/k,
    fits the budget, ν_q the stage's largest live count (the workspace term, >= 0, is dropped;
    static deltas of ``RecomputeOption`` may be negative and are counted, see
    :func:`_block_tables`). So T >= min over splits of
    max_p [prefix_p + m·(f_p + Bmin_p) + 2·p·p2p]. For a threshold T the best split is found by a DP
    over (stage, layers placed) keeping the least prefix (a smaller prefix never hurts a later
    stage), and the least feasible T by bisection (to ``rel_tol``); the value returned is the lower
    end of the final bracket, so it is a valid bound. The last two stages must also satisfy the
    pair path of :func:`_pair_cycle` (prefix + its length), which adds the p2p latency paid per
    micro-batch in 1F1B's steady state; the DP stays exact because every constraint grows with the
    prefix.

    Raises:
        ValueError: the problem has no pp_interleave_num 1 candidate.
    """
    if 1 not in problem.vpp_candidates:
        raise ValueError("path_dp_bound needs pp_interleave_num 1 among the candidates")
    P, N = problem.P, problem.N
    cs = compile_schedule(problem.schedule, P, 1, problem.m, problem.seq_split_num)
    k = float(cs.k)
    nF = np.array([np.count_nonzero(cs.fwd[cs.order[p]]) for p in range(P)]) / k
    nB = np.array([np.count_nonzero(~cs.fwd[cs.order[p]]) for p in range(P)]) / k
    p2p = problem.pa.p2p_ms if P > 1 else 0.0
    F, Bmin = _block_tables(problem)
    pathw = nF[:, None, None] * F + nB[:, None, None] * Bmin + (2 * np.arange(P) * p2p)[:, None, None]
    stepw = (F + Bmin) / k  # contribution to later prefixes
    # detour paths (see _detour_counts): r round trips through the stages after p, each at least
    # Suf[j] = forward + backward (no replay) of the layers after p's block [i, j) and the tail
    pa = problem.pa
    kp = pa.kind_prefix.astype(np.float64)
    fb = pa.fwd_k + pa.bwd_kc[:, NONE]
    suf = (fb @ (kp[:, -1:] - kp)) + pa.tail[0] + pa.tail[1]  # [N+1] ms per micro-batch
    with np.errstate(invalid="ignore"):
        for p in range(P - 1):
            for r, cf_, cb_ in _detour_counts(cs, p):
                w = (cf_ * F[p] + cb_ * Bmin[p] + r * suf[None, :]) / k \
                    + (2 * p + 2 * r * (P - 1 - p)) * p2p
                pathw[p] = np.maximum(pathw[p], np.where(np.isfinite(pathw[p]), w, np.inf))

    cyc = _pair_cycle(cs) if P >= 2 else None
    if cyc is not None:
        s_, L_ = P - 2, P - 1
        cF_s, cB_s, cF_L, cB_L, hops = cyc
        # pair path through stages s = P-2 (block [i, j)) and L = P-1 (block [j, N)), i, j free
        pairw = (cF_s * F[s_] + cB_s * Bmin[s_]) / k + ((cF_L * F[L_][:, N] + cB_L * Bmin[L_][:, N]) / k)[None, :] \
            + (2 * s_ + hops) * p2p  # [i, j]

    def feasible(T: float) -> tuple[bool, np.ndarray | None]:
        D = np.full(N + 1, np.inf)
        D[0] = 0.0
        back = np.zeros((P, N + 1), dtype=np.int64)
        for p in range(P):
            ok = D[:, None] + pathw[p] <= T
            cand = np.where(ok, D[:, None] + stepw[p], np.inf)  # i, j
            if cyc is not None and p == P - 2:
                # only splits whose last two blocks also satisfy the pair path; D[j] then keeps
                # the least prefix among blocks [i, j) meeting it (monotone: exact).
                cand = np.where(D[:, None] + pairw <= T, cand, np.inf)
            back[p] = np.argmin(cand, axis=0)
            D = cand[back[p], np.arange(N + 1)]
        if not np.isfinite(D[N]):
            return False, None
        split, j = np.zeros(P, dtype=np.int64), N
        for p in range(P - 1, -1, -1):
            i = int(back[p, j])
            split[p] = j - i
            j = i
        return True, split

    finite = pathw[np.isfinite(pathw)]
    if finite.size == 0:
        return PathDPBound(float("inf"), None, 0)
    lo_T = 0.0
    hi_T = float(upper_ms) if upper_ms is not None and np.isfinite(upper_ms) else float(finite.max()) * P
    evals = 0
    ok, split = feasible(hi_T)
    evals += 1
    while not ok:  # the incumbent may be below the relaxed optimum only if it is infeasible
        lo_T, hi_T = hi_T, hi_T * 2
        ok, split = feasible(hi_T)
        evals += 1
        if hi_T > 1e15:
            return PathDPBound(float("inf"), None, evals)
    while hi_T - lo_T > rel_tol * hi_T:
        mid = 0.5 * (lo_T + hi_T)
        ok, s = feasible(mid)
        evals += 1
        if ok:
            hi_T, split = mid, s
        else:
            lo_T = mid
    return PathDPBound(lo_T, split.reshape(1, P) if split is not None else None, evals)
