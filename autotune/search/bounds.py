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
   over mini-stages in layer order: O(V·P·N²). Any (λ, μ) gives a valid bound; a projected
   subgradient ascent (Polyak steps towards the best known step time) raises it.

The bound of a problem is the minimum over its pp_interleave_num candidates. For pure partition
problems, :func:`minmax_partition` is the exact min-max DP of §6.2 (checked on SYN-1).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from autotune.cost.inputs import BOTH, COMM, FULL, NONE, SELECT
from autotune.cost.simulate import compile_schedule
from autotune.search.problem import Problem


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
        hf, hb, ha, hs, _ = pa.head
        tf, tb, ta, ts, _ = pa.tail
        self.end_f = np.zeros((V, P))
        self.end_b = np.zeros((V, P))
        self.end_f[0, 0] += hf
        self.end_b[0, 0] += hb
        self.end_f[-1, -1] += tf
        self.end_b[-1, -1] += tb
        self.head_act, self.tail_act = ha, ta
        self.const_static = np.full(P, pa.stage_const_mib)
        self.const_static[0] += hs
        self.const_static[-1] += ts
        p2p = pa.p2p_ms if P > 1 else 0.0
        self.cap = problem.hbm_mib
        cs = compile_schedule(problem.schedule, P, V, self.m, problem.seq_split_num)
        pos = np.asarray(get_schedule(problem.schedule).virtual_position(P, V))
        CF, CB, K, owner = [], [], [], []
        for p in range(P):
            order = cs.order[p]
            ch, fw = cs.chunk[order], cs.fwd[order]
            for u in range(V):
                first = np.flatnonzero(fw & (ch == u))
                if first.size == 0:
                    continue
                k0 = int(first[0])
                for w in range(V):
                    last = np.flatnonzero(~fw & (ch == w))
                    if last.size == 0 or int(last[-1]) < k0:
                        continue
                    k1 = int(last[-1])
                    cf = np.zeros((V, P))
                    cb = np.zeros((V, P))
                    cf[pos < pos[u, p]] += 1.0
                    cb[pos < pos[w, p]] += 1.0
                    seg_c, seg_f = ch[k0:k1 + 1], fw[k0:k1 + 1]
                    cf[:, p] += np.bincount(seg_c[seg_f], minlength=V)
                    cb[:, p] += np.bincount(seg_c[~seg_f], minlength=V)
                    CF.append(cf)
                    CB.append(cb)
                    K.append((int(pos[u, p]) + int(pos[w, p])) * p2p)
                    owner.append(p)
        self.CF, self.CB, self.K = np.asarray(CF), np.asarray(CB), np.asarray(K)
        self.vecs = []
        for p in range(P):
            vs = [cs.mem_fwd[p]] + ([cs.mem_bwd[p][0]] if cs.mem_bwd[p][0].size else [])
            self.vecs.append(np.unique(np.concatenate(vs).reshape(-1, V).astype(np.float64), axis=0))
        lo, hi = problem.bounds(V)
        self.lo, self.hi = lo.reshape(-1), hi.reshape(-1)
        self.nu = np.stack([vv[int(np.argmax(vv.sum(axis=1)))] for vv in self.vecs])  # [P, V]

    @property
    def num_paths(self) -> int:
        return int(self.K.size)

    def solve(self, lam: np.ndarray, mu: np.ndarray) -> tuple[float, np.ndarray, np.ndarray, np.ndarray]:
        """min over layouts of the Lagrangian; returns (value, split [V·P], g [paths], h [P]).

        g = the path lengths and h_p = relaxed mem_p - cap of the minimiser (the subgradient).
        """
        P, V, N = self.P, self.V, self.N
        cf = np.tensordot(lam, self.CF, axes=1)  # [V, P]
        cb = np.tensordot(lam, self.CB, axes=1)
        const = (float(lam @ self.K) + float((cf * self.end_f + cb * self.end_b).sum())
                 + float((mu * (self.const_static - self.cap)).sum())
                 + mu[0] * self.nu[0, 0] * self.head_act + mu[-1] * self.nu[-1, -1] * self.tail_act)
        n_ms = V * P
        INF = np.inf
        dp = np.full(N + 1, INF)
        dp[0] = 0.0
        back = np.zeros((n_ms, N + 1), dtype=np.int64)
        choice = np.zeros((n_ms, N), dtype=np.int64)
        size = np.arange(N + 1)[:, None] - np.arange(N + 1)[None, :]
        for k in range(n_ms):
            v, p = divmod(k, P)
            rc = cb[v, p] * self.extra + mu[p] * self.nu[p, v] * self.act  # [N, C]
            choice[k] = np.argmin(rc, axis=1)
            per = cf[v, p] * self.f + cb[v, p] * self.b + mu[p] * self.static + rc.min(axis=1)
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
        P, V = self.P, self.V
        start = np.concatenate([[0], np.cumsum(split)])
        fm = self.end_f.copy()
        bm = self.end_b.copy()
        mem = self.const_static.copy()
        mem[0] += self.nu[0, 0] * self.head_act
        mem[-1] += self.nu[-1, -1] * self.tail_act
        for k in range(V * P):
            v, p = divmod(k, P)
            idx = np.arange(start[k], start[k + 1])
            c = choice[k, idx]
            fm[v, p] += self.f[idx].sum()
            bm[v, p] += self.b[idx].sum() + self.extra[idx, c].sum()
            mem[p] += self.static[idx].sum() + self.nu[p, v] * self.act[idx, c].sum()
        g = (self.CF * fm).sum(axis=(1, 2)) + (self.CB * bm).sum(axis=(1, 2)) + self.K
        return g, mem - self.cap

    def update_nu(self, split: np.ndarray) -> None:
        """Point ν of each stage at its largest live vector for this split (no recompute)."""
        P, V = self.P, self.V
        start = np.concatenate([[0], np.cumsum(split)])
        a = np.zeros((P, V))
        for k in range(V * P):
            v, p = divmod(k, P)
            a[p, v] = self.act[start[k]:start[k + 1], 0].sum()
        for p in range(P):
            self.nu[p] = self.vecs[p][int(np.argmax(self.vecs[p] @ a[p]))]


def lower_bound(problem: Problem, *, upper_ms: float | None = None, iters: int = 300,
                tol: float = 1e-4) -> BoundResult:
    """Lower bound on the step time (ms) of any layout in ``problem`` that fits its HBM budget.

    Args:
        problem: the tuning problem (its V candidates, bounds and recompute kinds are respected).
        upper_ms: the best known feasible step time (ms); used as the Polyak target and to stop
            early once the bound for a V reaches it (that V then cannot beat the incumbent).
        iters: subgradient iterations per V.
        tol: stop a V when its bound is within ``tol`` (fraction) of ``upper_ms``.

    Returns:
        :class:`BoundResult` (``bound_ms`` may be +inf when no layout can fit).
    """
    res = BoundResult(bound_ms=float("inf"))
    for V in problem.vpp_candidates:
        lag = _Lagrangian(problem, V)
        P = problem.P
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
        for it in range(iters):
            res.iterations += 1
            val, split, g, h = lag.solve(lam, kappa * nu_mu)
            if best_split is None or val > best + 1e-9 * abs(best):
                best, best_split, stall = val, split, 0
            else:
                stall += 1
            if delta is None:
                delta = max(abs(val) * 0.05, 1e-6)
            if upper_ms is not None and best >= upper_ms * (1 - tol):
                break
            if stall >= 5:
                delta *= 0.5
                stall = 0
                if delta < abs(best) * tol * 0.1:
                    break
            lag.update_nu(split)
            gl = g - g.mean()
            hs = kappa * h
            hm = np.where((nu_mu > 0) | (hs > 0), hs, 0.0)
            norm2 = float(gl @ gl + hm @ hm)
            if norm2 <= 1e-18:
                break  # a stationary point of the dual: the bound cannot rise further
            goal = best + delta
            if upper_ms is not None:
                goal = min(goal, upper_ms)
            step = max(goal - val, 0.0) / norm2
            lam = _simplex(lam + step * g)
            nu_mu = np.maximum(0.0, nu_mu + step * hs)
        res.per_v_ms[V] = float(best)
        res.layers_v[V] = best_split.reshape(V, P)
    res.bound_ms = min(res.per_v_ms.values()) if res.per_v_ms else float("inf")
    return res
