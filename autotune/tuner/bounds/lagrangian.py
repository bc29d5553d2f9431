"""Provable lower bounds on the step time of any memory-feasible layout (pure numpy, no Optuna):
the Lagrangian path relaxation for pp_interleave_num > 1.

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

The bound of a problem is the minimum over its pp_interleave_num candidates
(:func:`autotune.tuner.bounds.tighten`). Registered as :class:`Lagrangian`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from autotune.cost.budget import hbm_cap
from autotune.cost.inputs import stage_costs
from autotune.cost.schedules import get_schedule
from autotune.cost.simulate import CompiledSchedule, compile_schedule
from autotune.tuner.bounds._base import BoundContext, BoundOutcome
from autotune.tuner.bounds._paths import critical_path
from autotune.tuner.bounds._relax import layer_terms
from autotune.tuner.problem import Problem


def _simplex(x: np.ndarray) -> np.ndarray:
    """Euclidean projection onto the probability simplex."""
    u = np.sort(x)[::-1]
    css = np.cumsum(u) - 1.0
    k = np.arange(1, x.size + 1)
    rho = np.nonzero(u - css / k > 0)[0][-1]
    return np.maximum(x - css[rho] / (rho + 1.0), 0.0)


def _entry_exit_paths(cs: CompiledSchedule, pos: np.ndarray, hops_to: np.ndarray, head: tuple[int, int],
                      split: bool, p2p_ms: float) -> tuple[list, list, list, list]:
    """The starting path family (module docstring, step 1, generalised): per stage p and chunks
    u, w, enter at p's first forward of chunk u (after the forwards of all positions before
    (u, p)), run p's ops up to its last backward of chunk w, leave through the backwards of all
    positions before (w, p); with a B/W split also the path up to p's last op with no exit.
    Returns lists of forward / backward / W op counts [V, P] (not yet divided by
    ``seq_split_num``) and of hop ms."""
    V, P = cs.V, cs.P
    hv, hp = head
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
            if split:
                ends.append((len(order) - 1, None))  # up to the stage's last op, no exit
            for k1, w in ends:
                cf, cb, cw = seg(p, k0, k1)
                cf[pos < pos[u, p]] += 1.0
                hops = int(hops_to[pos[u, p]])
                if w is not None:
                    cb[pos < pos[w, p]] += 1.0
                    hops += int(hops_to[pos[w, p]])
                    if split:
                        cw[hv, hp] += 1.0  # W of position 0 after its B (same device)
                CF.append(cf)
                CB.append(cb)
                CW.append(cw)
                K.append(hops * p2p_ms)
    return CF, CB, CW, K


def split_step(dp: np.ndarray, C: np.ndarray, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray]:
    """One mini-stage of the Lagrangian's layer-split DP: for every j (layers placed so far,
    0..N) ``new[j] = min over i with lo <= j - i <= hi of (dp[i] - C[i]) + C[j]`` and ``arg[j]``
    the first (smallest) i attaining it, 0 where none is finite (float [N+1], int [N+1]).

    ``C`` is the mini-stage's cumulative cost (C[j] - C[i]: layers i..j-1 on it). With no upper
    limit (hi >= N, every mini-stage of a search without layer caps) the window is a prefix and
    the minimum a running minimum, O(N); otherwise the (N+1)² table. Both give the same values
    and the same first arguments (test_lagrangian.py)."""
    N = dp.size - 1
    val = dp - C
    if hi >= N:
        best = np.minimum.accumulate(val)
        new = np.empty(N + 1, dtype=bool)
        new[0] = True
        new[1:] = val[1:] < best[:-1]   # strictly below every earlier value: a new first argmin
        first = np.maximum.accumulate(np.where(new, np.arange(N + 1), 0))
        out = np.full(N + 1, np.inf)
        arg = np.zeros(N + 1, dtype=np.int64)
        if lo <= N:
            out[lo:] = best[:N + 1 - lo]
            arg[lo:] = first[:N + 1 - lo]
        return out + C, arg
    size = np.arange(N + 1)[:, None] - np.arange(N + 1)[None, :]
    cand = np.where((size >= lo) & (size <= hi), val[None, :], np.inf)
    arg = np.argmin(cand, axis=1)
    return cand[np.arange(N + 1), arg] + C, arg


class _Relaxation:
    """The relaxed problem for one V (see module docstring, step 3), over a family of paths.

    Paths per stage p: enter at the first forward of chunk u in p's order (after the forwards of
    all pipeline positions before (u, p), same micro-batch), run p's ops up to the last backward of
    chunk w, leave through the backwards of all positions before (w, p). Each path is linear in the
    per-mini-stage forward / backward times: ``CF`` / ``CB`` [n_paths, V, P] counts and ``K``
    [n_paths] (p2p hops × p2p_ms). With V = 1 there is one path per stage, the bound of step 1.
    """

    def __init__(self, problem: Problem, V: int) -> None:
        pa = problem.pa
        self.P, self.V, self.m, self.N = problem.P, V, problem.m, problem.N
        P = self.P
        self.layer = layer_terms(problem)
        pos = np.asarray(get_schedule(problem.schedule).virtual_position(P, V))
        self.pos = pos
        #: mini-stages (v, p) in layer order (pipeline position 0, 1, ...)
        self.walk = [tuple(int(x) for x in np.argwhere(pos == q)[0]) for q in range(V * P)]
        self.walk_v = np.asarray([v for v, _ in self.walk], dtype=np.int64)
        self.walk_p = np.asarray([p for _, p in self.walk], dtype=np.int64)
        cs = compile_schedule(problem.schedule, P, V, self.m, problem.seq_split_num)
        self.cs = cs
        #: B/W-split schedule (zero_bubble_v): a backward op is B (bwd - W) and W is its own op
        self.split = bool(cs.split_bw)
        self._place_ends(pa)
        self.p2p = pa.p2p_ms if P > 1 else 0.0
        self.cap_mib = hbm_cap(problem.hbm_mib)
        # cross-stage hops on the chain position 0 -> q (a V-shaped turn stays on one device)
        st_at = np.asarray([p_ for _, p_ in self.walk])
        self.hops_to = np.concatenate([[0], np.cumsum(st_at[1:] != st_at[:-1])]).astype(np.int64)
        CF, CB, CW, K = _entry_exit_paths(cs, pos, self.hops_to, self.walk[0], self.split, self.p2p)
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

    def _place_ends(self, pa) -> None:
        """Head costs on pipeline position 0, tail costs on the last: forward / backward / W ms
        [V, P], their activation MiB and each stage's constant static MiB [P]."""
        V, P = self.V, self.P
        (hv, hp), (tv, tp) = self.walk[0], self.walk[-1]
        head, tail = pa.head, pa.tail
        self.end_fwd_ms = np.zeros((V, P))
        self.end_bwd_ms = np.zeros((V, P))
        self.end_fwd_ms[hv, hp] += head.fwd_ms
        self.end_bwd_ms[hv, hp] += head.bwd_ms
        self.end_fwd_ms[tv, tp] += tail.fwd_ms
        self.end_bwd_ms[tv, tp] += tail.bwd_ms
        self.head_act_mib, self.tail_act_mib = head.act_mib, tail.act_mib
        self.const_static_mib = np.full(P, pa.stage_const_mib)
        self.const_static_mib[hp] += head.static_mib
        self.const_static_mib[tp] += tail.static_mib
        hw = pa.head_w_ms if pa.head_w_ms is not None else 0.5 * head.bwd_ms
        tw = pa.tail_w_ms if pa.tail_w_ms is not None else 0.5 * tail.bwd_ms
        self.end_w_ms = np.zeros((V, P))
        self.end_w_ms[hv, hp] += hw
        self.end_w_ms[tv, tp] += tw

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
        ends = cf * self.end_fwd_ms + cb * self.end_bwd_ms + cwd * self.end_w_ms
        const = (float(lam @ self.K) + float(ends.sum())
                 + float(np.where(mu > 0, mu * (self.const_static_mib - self.cap_mib), 0.0).sum())
                 + mu[hp] * self.nu[hp, hv] * self.head_act_mib + mu[tp] * self.nu[tp, tv] * self.tail_act_mib)
        n_ms = V * P
        dp = np.full(N + 1, np.inf)
        dp[0] = 0.0
        back = np.zeros((n_ms, N + 1), dtype=np.int64)
        lay = self.layer
        # every mini-stage's per-layer terms at once ([n_ms, N, C] and [n_ms, N]; k = walk position)
        wv, wp = self.walk_v, self.walk_p
        cbk, muk = cb[wv, wp][:, None], mu[wp][:, None]
        rc = cbk[:, :, None] * lay.extra_ms + muk[:, :, None] * (self.nu[wp, wv][:, None, None] * lay.act_mib
                                                               + lay.sdelta_mib)
        choice = np.argmin(rc, axis=2)
        per = (cf[wv, wp][:, None] * lay.fwd_ms + cbk * lay.bwd_ms + cwd[wv, wp][:, None] * lay.w_ms
               + muk * lay.static_mib + rc.min(axis=2))
        C = np.zeros((n_ms, N + 1))
        np.cumsum(per, axis=1, out=C[:, 1:])
        for k in range(n_ms):
            dp, back[k] = split_step(dp, C[k], int(self.lo[k]), int(self.hi[k]))
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
        return g, mem - self.cap_mib

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
        wm = self.end_w_ms.copy()
        for k, (v, p) in enumerate(self.walk):
            wm[v, p] += self.layer.w_ms[start[k]:start[k + 1]].sum()
        return wm

    def durations(self, split: np.ndarray, choice: np.ndarray) -> tuple[np.ndarray, ...]:
        """Forward / backward ms [V, P] per micro-batch and the relaxed memory [P] (MiB) of a split
        (walk order) with per-layer recompute classes ``choice`` [V·P, N]."""
        P, V = self.P, self.V
        start = np.concatenate([[0], np.cumsum(split)])
        fm = self.end_fwd_ms.copy()
        bm = self.end_bwd_ms.copy()
        mem = self.const_static_mib.copy()
        (hv, hp), (tv, tp) = self.walk[0], self.walk[-1]
        mem[hp] += self.nu[hp, hv] * self.head_act_mib
        mem[tp] += self.nu[tp, tv] * self.tail_act_mib
        for k in range(V * P):
            v, p = self.walk[k]
            idx = np.arange(start[k], start[k + 1])
            c = choice[k, idx]
            fm[v, p] += self.layer.fwd_ms[idx].sum()
            bm[v, p] += self.layer.bwd_ms[idx].sum() + self.layer.extra_ms[idx, c].sum()
            mem[p] += (self.layer.static_mib[idx].sum() + self.nu[p, v] * self.layer.act_mib[idx, c].sum()
                       + self.layer.sdelta_mib[idx, c].sum())
        return fm, bm, mem

    def update_nu(self, split: np.ndarray) -> None:
        """Point ν of each stage at its largest live vector for this split (no recompute)."""
        P, V = self.P, self.V
        start = np.concatenate([[0], np.cumsum(split)])
        a = np.zeros((P, V))
        for k in range(V * P):
            v, p = self.walk[k]
            a[p, v] = self.layer.act_mib[start[k]:start[k + 1], 0].sum()
        for p in range(P):
            self.nu[p] = self.vecs[p][int(np.argmax(self.vecs[p] @ a[p]))]


def lagrangian_bound(problem: Problem, V: int, *, upper_ms: float | None, iters: int = 300, tol: float = 1e-4,
                     layouts: list | tuple = (), gen_every: int = 10,
                     patience: int = 5, deadline: float | None = None) -> tuple[float, np.ndarray, int]:
    """(bound ms, relaxed split int [V, P], iterations) of the Lagrangian for one V > 1 (module
    docstring, steps 3 and 4): a projected subgradient ascent with Polyak steps towards
    ``upper_ms``, the critical path of every layout in ``layouts`` (with this V) and of the
    relaxed minimiser every ``gen_every`` iterations joining the path family. Past ``deadline``
    (``time.monotonic()``) the ascent stops after the current iteration: every iterate's value is
    a valid bound, so the best one so far is returned (anytime)."""
    lag = _Relaxation(problem, V)
    P = problem.P
    for c in layouts:
        costs = stage_costs(problem.pa, c.layers[None], c.rec[None], c.sel[None], c.com[None],
                            pos=lag.pos if get_schedule(problem.schedule).name == "zero_bubble_v" else None)
        cp = critical_path(lag.cs, costs.fwd_ms[0], costs.bwd_ms[0], lag.p2p, costs.bwd_w_ms[0])
        lag.add_path(cp.cf, cp.cb, cp.hops * lag.p2p, cp.cw)
    # Price of one MiB in ms (full recompute of the stage's layers), so that the memory
    # multipliers move on the same scale as the stage weights.
    saved = np.maximum(lag.layer.act_mib[:, :1] - lag.layer.act_mib, 0.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(saved > 0, problem.m * lag.layer.extra_ms / saved, np.nan)
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
        if deadline is not None and time.monotonic() > deadline:
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
        hs = kappa * h if np.isfinite(lag.cap_mib) else np.zeros(P)
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
    return float(best), lag.to_vp(best_split), it


@dataclass(frozen=True)
class Lagrangian:
    """:func:`lagrangian_bound` as a :class:`~autotune.tuner.bounds.LowerBound` (V > 1): ``iters``
    subgradient iterations, stop at ``tol`` of the incumbent, a critical path joins the family
    every ``gen_every`` iterations, step halved after ``patience`` stalls; ``propose``: return the
    relaxed minimiser as a seed split."""

    iters: int = 300
    tol: float = 1e-4
    gen_every: int = 10
    patience: int = 5
    propose: bool = True
    name: str = "Lagrangian"

    def applies(self, problem: Problem, V: int) -> bool:
        return V > 1

    def bound(self, problem: Problem, V: int, ctx: BoundContext) -> BoundOutcome:
        val, split, its = lagrangian_bound(problem, V, upper_ms=ctx.upper_ms, iters=self.iters, tol=self.tol,
                                           layouts=[c for c in ctx.layouts if c.V == V],
                                           gen_every=self.gen_every, patience=self.patience,
                                           deadline=ctx.deadline)
        return BoundOutcome(val, split if self.propose else None, {"iterations": its})
