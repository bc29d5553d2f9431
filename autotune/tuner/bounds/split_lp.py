"""Split-by-split LP lower bound for pp_interleave_num > 1 when the layer splits are few (pure numpy +
scipy's HiGHS LP, no Optuna; issue 17).

When. Deep pipelines with one or two layers a mini-stage (pp 32 × vpp 2 with 64 layers, pp 64 × vpp 2
with 128) have only a few thousand layer splits: every middle mini-stage holds at least one layer, so
only the few layers left over move. There the relaxation bounds (stage DP, device DP: one-stay
paths over relaxed layers) stop 4–5 % under the answer: the critical paths stay on two stages,
and the recompute each stage needs is shared by all paths through it. This bound enumerates the
splits (:func:`~autotune.tuner.problem.compositions`) and bounds each one on its own.

Per split s. Every stage q has a finite set of memory-feasible recompute configurations (the
(full, select, comm) counts of each of its chunks whose peak fits the budget; the peak of a stage
depends only on its own column, as in :mod:`autotune.tuner.exact`), of which only those whose
per-chunk replay vector (ms) is Pareto-minimal matter: recompute adds replay to backward ops only
and the simulated step time is monotone in every op duration. For a family Π of dependency paths
(count vectors cf, cb [V, P] and hops, :func:`~autotune.tuner.bounds._paths.critical_path`), any
layout with split s and configurations k_q has step time >= max_π Σ cf·f + cb·(b0 + r_{k_q}) +
hops·p2p (cost-model reference §6.1). The LP

    minimise T  over x[q, k] >= 0, Σ_k x[q, k] = 1 per stage,
    s.t.  Σ cf_π·f + cb_π·b0 + hops_π·p2p + Σ_q Σ_k x[q, k]·(cb_π[:, q]·r_{q,k}) <= T   for π in Π

relaxes "min over configurations of max over paths" (x integer is exactly that), so its value is a
lower bound for split s. Its rounded solution (the largest x per stage) is a real, fitting layout
whose simulated critical path joins Π (lazy path generation); when that layout's step time
equals the LP value, the split is solved exactly. Each LP value is kept
:data:`~autotune.tuner.bounds._base.DUAL_SAFETY` below HiGHS's
(:func:`~autotune.tuner.bounds._base.highs_proven`).

Across splits. Every split starts at the max over the one-stay paths of its own least path length
(per path, each stage at its least weighted replay). An LP's duals λ (>= 0, summing to 1) give a
Lagrangian bound valid for *every* split, Σ_π λ_π (path terms) + Σ_q min_k (Σ_π λ_π cb_π[:, q])·r_k
(weak duality), evaluated for all splits at once. Best first: the split with the least bound is
solved next (a split whose LP stays below its layouts gets its integer program, once). This pass
over the splits stops when the least bound is within the target gap (the search's ``--gap``,
default 0.5 %) of the best layout found (with ``--gap 0``, when it reaches it: the bound then
equals the exact optimum of the cost model over the space), reaches the incumbent ``upper_ms``,
belongs to a split already given its integer program, or at the work cap. The bound returned is
the least over the splits at the stop (anytime). The best layout found is returned as a seed.

Measured (scaling.py, dense tight; run to the end, stop gap 0; CPU s of this bound alone, not the
search): P32 V2 m32 L64, 2,080 splits:
6,923.8 ms proven optimal (the search's answer was 6,971.2, its bound 6,649.3); P64 V2 m64 L128,
8,256 splits: 13,920.3 proven optimal (the answer's value; bound 13,360.1 before).

Relaxations: none besides the path family and the LP (layer kinds by position, the head / tail,
the workspace and every live-count vector are the cost model's own: the configurations are priced
by :meth:`~autotune.tuner.problem.Problem.costs` and :func:`~autotune.cost.simulate.peak_activation`).
Applies when the schedule runs the whole backward as one op and places chunks in order (not
V-shaped), seq_split_num = 1, V's splits number at most :data:`MAX_SPLITS` and no mini-stage can
hold more than :data:`MAX_CHUNK_LAYERS` layers.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import numpy as np

from autotune.cost.inputs import first_layers
from autotune.cost.simulate import compile_schedule
from autotune.tuner.bounds._base import DUAL_SAFETY, BoundContext, BoundOutcome, highs_proven
from autotune.tuner.bounds._clock import cannot_finish
from autotune.tuner.bounds._quiet import quiet_native_stdout
from autotune.tuner.bounds._paths import critical_path, one_stay_counts
from autotune.tuner.problem import (Candidate, Problem, compositions, count_splits_v, first_min, improves,
                                    stage_configurations)
from autotune.tuner.recompute import recompute_choices

#: Most layer splits of one V this bound enumerates (a work cap, deterministic).
MAX_SPLITS = 10_000
#: Most recompute configurations of one stage column (the product over its chunks of their (full,
#: select, comm) count choices) this bound prices; past it no proof (a work cap).
MAX_STAGE_COMBOS = 100_000
#: Largest layer count a mini-stage may hold for this bound to apply (a chunk of 16 layers has 1,785
#: (full, select, comm) count choices): pipeline_stage 1 × vpp 2 with 28 layers (GLM2-6B) has 29
#: splits but ~10^6 configurations a stage column (its corpus search ran 7 minutes, 4.7 GB).
MAX_CHUNK_LAYERS = 16
#: Most configurations priced over all distinct stage columns (a work cap; past it no proof).
MAX_COMBOS = 2_000_000
#: Most LP solves (a work cap, deterministic); past it the least bound over the splits stands.
MAX_LPS = 400
#: Lazy path rounds per split (each adds the rounded layout's critical path).
ROUNDS = 6
#: Paths of the family put in a split's LP at first: those with the largest own bound for that split
#: (the others join when the LP's solution violates them: row generation, same optimum).
LP_ROWS = 64
#: The pass over the splits stops once the least bound is within this fraction of the best layout
#: found, when the caller gives no target (``BoundContext.target_gap``, the search's ``--gap``,
#: whose default this is: ``autotune search`` stops there too; ``--gap 0`` runs it to the end).
STOP_GAP = 0.005
#: A split's LP is solved in units of 1/1000 of its largest path constant (ms), its coefficients
#: rounded to this many units (scale invariance: the same problem with every time × a constant
#: then gives HiGHS the same numbers, so the same vertex where several picks tie; in ms, at 1e-3 ×
#: the times, HiGHS's absolute tolerances picked another). The rounding moves a path's value by
#: at most (stages + 1) / 2 × 1e-9 of that constant, far inside
#: :data:`~autotune.tuner.bounds._base.DUAL_SAFETY`. (Units of the whole constant, values near 1,
#: made HiGHS's LPs ~2 × slower on scaling.py's P32 V2 m32 L64 MoE; these took the same time as ms.)
LP_QUANTUM = 1e-6


def _in_units(x: np.ndarray, unit: float) -> np.ndarray:
    """``x`` (ms) in ``unit`` ms, rounded to :data:`LP_QUANTUM` units."""
    return np.round(x / unit / LP_QUANTUM) * LP_QUANTUM


def _splits(problem: Problem, V: int) -> np.ndarray:
    """Every split of V, int [S, V, P] (:func:`~autotune.tuner.problem.compositions`)."""
    lo, hi = problem.bounds(V)
    return compositions(problem.N, lo.reshape(-1), hi.reshape(-1)).reshape(-1, V, problem.P)


@dataclass
class _Configs:
    """The Pareto-minimal fitting recompute configurations of every distinct (stage, column) met:
    ``stage[u]``, ``combos[u]`` int [k, V, 3] (full, select, comm per chunk), ``replay[u]`` float
    [k, V] ms per micro-batch; ``key_id`` int [S, P] maps each split's stages to them."""

    stage: list[int] = field(default_factory=list)
    combos: list[np.ndarray] = field(default_factory=list)
    replay: list[np.ndarray] = field(default_factory=list)
    key_id: np.ndarray | None = None

    def padded(self) -> tuple[np.ndarray, np.ndarray]:
        """(replay float [U, K, V] padded with 0, valid bool [U, K])."""
        U, K = len(self.replay), max(1, max(len(r) for r in self.replay))
        V = self.replay[0].shape[1] if self.replay else 1
        R = np.zeros((U, K, V))
        ok = np.zeros((U, K), dtype=bool)
        for u, r in enumerate(self.replay):
            R[u, :len(r)] = r
            ok[u, :len(r)] = True
        return R, ok


def _configs(problem: Problem, V: int, splits: np.ndarray, deadline: float | None = None) -> _Configs | None:
    """The stage configuration sets of every split (module docstring); None past
    :data:`MAX_COMBOS`, or when the pricing is past ``deadline`` (time.monotonic()) or will be at
    its rate so far (:func:`~autotune.tuner.bounds._clock.cannot_finish`: GPT-2 52B's pp 16 ×
    vpp 4, 2,080 splits, priced for 9–20 s past a 3 s first pass). Stages are keyed by their
    column, and by its first layers too when the model's layers differ by position (kinds)."""
    S, _, P = splits.shape
    starts = first_layers(splits, problem.positions(V))
    typed = problem.pa.kind_prefix.shape[0] > 1
    q_idx = np.broadcast_to(np.arange(P)[None, :, None], (S, P, 1))
    cols = splits.transpose(0, 2, 1)  # S, P, V
    parts = [q_idx, cols] + ([starts.transpose(0, 2, 1)] if typed else [])
    rows = np.concatenate(parts, axis=2).reshape(S * P, -1)
    uniq, inv = np.unique(rows, axis=0, return_inverse=True)
    out = _Configs(key_id=inv.reshape(S, P))
    priced = 0
    first = np.zeros(len(uniq), dtype=np.int64)
    first[inv[::-1]] = np.arange(S * P)[::-1]  # a (split, stage) of each key
    t0 = time.monotonic()
    for u in range(len(uniq)):
        if cannot_finish(t0, u, len(uniq), deadline):
            return None
        s, q = divmod(int(first[u]), P)
        opts = [recompute_choices(int(splits[s, v, q]), problem.kinds) for v in range(V)]
        k = math.prod(len(o) for o in opts)
        priced += k
        if k > MAX_STAGE_COMBOS or priced > MAX_COMBOS:
            return None
        pick = np.indices([len(o) for o in opts]).reshape(V, -1)  # itertools.product's order
        combos = np.stack([np.asarray(opts[v], dtype=np.int64)[pick[v]] for v in range(V)], axis=1)  # k, V, 3
        keep, replay = stage_configurations(problem, splits[s], q, combos)
        out.stage.append(q)
        out.combos.append(combos[keep])
        out.replay.append(replay)
    return out


@dataclass
class _Family:
    """The path family: forward / backward counts float [n, V, P] and hops float [n]."""

    cf: np.ndarray
    cb: np.ndarray
    hops: np.ndarray
    seen: set = field(default_factory=set)

    def add(self, cf: np.ndarray, cb: np.ndarray, hops: float) -> bool:
        key = np.round(np.concatenate([cf.reshape(-1), cb.reshape(-1), [hops]]), 9).tobytes()
        if key in self.seen:
            return False
        self.seen.add(key)
        self.cf = np.concatenate([self.cf, cf[None]])
        self.cb = np.concatenate([self.cb, cb[None]])
        self.hops = np.append(self.hops, hops)
        return True


@dataclass
class SplitLPBound:
    """Result of :func:`split_lp_bound`: the bound (ms; +inf when no split fits), the best layout
    found (a real, fitting layout; None when none), whether the bound equals it (the exact optimum
    of the space), the LPs solved and the splits enumerated."""

    bound_ms: float
    best: Candidate | None
    exact: bool
    lps: int
    splits: int


class _Search:
    """The best-first search of the module docstring over one V's splits."""

    def __init__(self, problem: Problem, V: int, splits: np.ndarray, cfg: _Configs) -> None:
        self.problem, self.V, self.splits = problem, V, splits
        P = problem.P
        self.cs = compile_schedule(problem.schedule, P, V, problem.m, problem.seq_split_num)
        self.cfg = cfg
        self.R, self.Rok = self.cfg.padded()
        self.R_stage = np.asarray(self.cfg.stage, dtype=np.int64)
        z = np.zeros_like(splits)
        base = problem.costs(V, splits, z, z, z)
        self.f0, self.b0 = base.fwd_ms, base.bwd_ms  # [S, V, P] ms without replay
        self.p2p = float(problem.pa.p2p_ms)
        nsets = np.array([len(r) for r in self.cfg.replay])
        self.feasible = (nsets[self.cfg.key_id] > 0).all(axis=1)
        rows = [(np.asarray(cf, float), np.asarray(cb, float), float(h))
                for per in one_stay_counts(self.cs) for cf, cb, h in per]
        self.fam = _Family(np.zeros((0, V, P)), np.zeros((0, V, P)), np.zeros(0))
        for cf, cb, h in rows:
            self.fam.add(cf, cb, h)
        self.lb = np.full(len(splits), -np.inf)
        for i in range(len(self.fam.hops)):
            self.raise_by(self.fam.cf[i], self.fam.cb[i], self.fam.hops[i])
        self.lps = 0
        self.best: Candidate | None = None

    def least_replay(self, wb: np.ndarray) -> np.ndarray:
        """float [U]: per configuration set, the least Σ_v wb[v, q]·replay over its configurations."""
        vals = np.einsum("ukv,vu->uk", self.R, wb[:, self.R_stage])
        return np.where(self.Rok, vals, np.inf).min(axis=1)

    def raise_by(self, wf: np.ndarray, wb: np.ndarray, wh: float) -> None:
        """Raise every split's bound to the weighted path bound (one path, or a Lagrangian mix)."""
        G = self.least_replay(wb)
        v = (np.einsum("svp,vp->s", self.f0, wf) + np.einsum("svp,vp->s", self.b0, wb) + wh * self.p2p
             + G[self.cfg.key_id].sum(axis=1))
        self.lb = np.maximum(self.lb, np.where(self.feasible, v, np.inf))

    def layout(self, s: int, picks: list[int]) -> Candidate:
        """The layout of split s with configuration picks[q] on each stage, scored."""
        V, P = self.V, self.problem.P
        t = np.zeros((3, V, P), dtype=np.int64)
        for q, u in enumerate(self.cfg.key_id[s]):
            t[:, :, q] = self.cfg.combos[u][picks[q]].T
        c = Candidate(V, self.splits[s].copy(), t[0], t[1], t[2], origin=f"split-lp-v{V}")
        return self.problem.score([c])[0]

    @staticmethod
    def _solve(c: np.ndarray, A: np.ndarray, b: np.ndarray, Aeq: np.ndarray, integral: bool,
               deadline: float | None):
        """One HiGHS solve of min c·x, A x <= b, Aeq x = 1, 0 <= x <= 1 but the last (T) free above
        0; the LP gives the duals (``ineqlin.marginals``), the integer program x whole. A deadline
        becomes HiGHS's time limit (the caller then keeps only a proven value). The integer program
        runs without HiGHS's MIP presolve, whose optimum is not always one
        (:data:`autotune.tuner.bounds.milp.MIP_PRESOLVE`)."""
        from scipy.optimize import Bounds, LinearConstraint, linprog, milp  # noqa: PLC0415 (heavy import)

        n = len(c)
        limit = {} if deadline is None else {"time_limit": max(0.1, deadline - time.monotonic())}
        if not integral:
            return linprog(c, A_ub=A, b_ub=b, A_eq=Aeq, b_eq=np.ones(len(Aeq)),
                           bounds=[(0.0, 1.0)] * (n - 1) + [(0.0, None)], method="highs", options=limit)
        with quiet_native_stdout():  # HiGHS' integer solver prints debug lines to C stdout
            return milp(c, integrality=np.r_[np.ones(n - 1), 0.0],
                        bounds=Bounds(np.zeros(n), np.r_[np.ones(n - 1), np.inf]),
                        constraints=[LinearConstraint(A, -np.inf, b), LinearConstraint(Aeq, 1.0, 1.0)],
                        options={"disp": False, "mip_rel_gap": 1e-9, "presolve": False, **limit})

    def solve_split(self, s: int, integral: bool, deadline: float | None) -> float:
        """The split's LP (or integer program) with lazy paths; returns its value (a bound for s)."""
        P = self.problem.P
        ids = self.cfg.key_id[s]
        sizes = [len(self.cfg.replay[u]) for u in ids]
        off = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        nx = int(off[-1])
        Aeq = np.zeros((P, nx + 1))
        for q in range(P):
            Aeq[q, off[q]:off[q + 1]] = 1.0
        value = -np.inf
        for _ in range(ROUNDS):
            if deadline is not None and time.monotonic() > deadline:
                break
            fam = self.fam
            const = (np.einsum("nvp,vp->n", fam.cf, self.f0[s]) + np.einsum("nvp,vp->n", fam.cb, self.b0[s])
                     + fam.hops * self.p2p)
            blocks = [fam.cb[:, :, q] @ self.cfg.replay[u].T for q, u in enumerate(ids)]  # n, k_q
            unit = (float(np.abs(const).max()) or 1.0) / 1e3  # ms: the LP below is in this unit (LP_QUANTUM)
            const = _in_units(const, unit)
            blocks = [_in_units(b, unit) for b in blocks]
            A = np.concatenate(blocks + [-np.ones((len(const), 1))], axis=1)
            own = const + np.array([b.min(axis=1) for b in blocks]).sum(axis=0)
            rows = np.argsort(-own, kind="stable")[:LP_ROWS]
            c = np.zeros(nx + 1)
            c[nx] = 1.0
            while True:
                res = self._solve(c, A[rows], -const[rows], Aeq, integral, deadline)
                self.lps += 1
                if res.x is None or (not integral and res.status != 0):
                    return value  # no solution, or an LP stopped before its optimum: no proof
                viol = A @ res.x + const > 1e-7 * max(1.0, abs(res.fun))
                viol[rows] = False
                if not viol.any():
                    break
                rows = np.concatenate([rows, np.flatnonzero(viol)])
            # HiGHS proves within its feasibility tolerances: keep DUAL_SAFETY below (an integer
            # program stopped early would hold an incumbent, not a bound: its dual bound then)
            proven = float(res.fun)
            if integral and getattr(res, "mip_dual_bound", None) is not None:
                proven = min(proven, float(res.mip_dual_bound))
            value = max(value, highs_proven(proven) * unit)
            if not integral:
                lam = np.maximum(-np.asarray(res.ineqlin.marginals), 0.0)
                if lam.sum() > 0:  # the duals: a Lagrangian mix of paths, a bound for every split
                    lam = lam / lam.sum()
                    fam = self.fam
                    self.raise_by(np.einsum("n,nvp->vp", lam, fam.cf[rows]), np.einsum("n,nvp->vp", lam, fam.cb[rows]),
                                  float(lam @ fam.hops[rows]))
            picks = [int(np.argmax(res.x[off[q]:off[q + 1]])) for q in range(P)]
            cand = self.layout(s, picks)
            if cand.excess_mib <= 0 and (self.best is None or improves(cand.step_ms, self.best.step_ms)):
                self.best = cand
            if cand.step_ms <= value * (1.0 + 2 * DUAL_SAFETY):
                break
            co = self.problem.costs(self.V, cand.layers[None], cand.rec[None], cand.sel[None], cand.com[None])
            cp = critical_path(self.cs, co.fwd_ms[0], co.bwd_ms[0], self.p2p)
            if not self.fam.add(cp.cf.astype(float), cp.cb.astype(float), float(cp.hops)):
                break
            self.raise_by(self.fam.cf[-1], self.fam.cb[-1], self.fam.hops[-1])
        return value

    def run(self, upper_ms: float | None, deadline: float | None, stop_gap: float) -> SplitLPBound:
        S = len(self.splits)
        stage_of = np.zeros(S, dtype=np.int8)  # 0 open, 1 LP solved, 2 integer program solved
        while self.lps < MAX_LPS and (deadline is None or time.monotonic() <= deadline):
            s = first_min(self.lb)  # near-ties by position: a time scale cannot move the pick
            least = float(self.lb[s])
            stop = min(upper_ms if upper_ms is not None else np.inf,
                       self.best.step_ms / (1.0 + stop_gap) if self.best is not None else np.inf)
            if not np.isfinite(least) or least >= stop * (1.0 - 2 * DUAL_SAFETY) or stage_of[s] == 2:
                break
            val = self.solve_split(s, integral=stage_of[s] == 1, deadline=deadline)
            self.lb[s] = max(self.lb[s], val)
            stage_of[s] += 1
        least = float(self.lb.min()) if S else np.inf
        best = self.best
        exact = best is not None and least >= best.step_ms * (1.0 - 2 * DUAL_SAFETY)
        return SplitLPBound(least, best, exact, self.lps, S)


def split_lp_bound(problem: Problem, V: int, *, upper_ms: float | None = None,
                   deadline: float | None = None, stop_gap: float | None = None) -> SplitLPBound | None:
    """Lower bound (ms) on the step time of every memory-feasible layout with pp_interleave_num V
    (module docstring), and the best layout met; None when it does not apply (:class:`SplitLP`).

    Args:
        upper_ms: a feasible step time (ms): the pass stops once every split's bound reaches it
            (the result is then >= min(bound, upper_ms), as the other bounds' with an incumbent).
        deadline: time.monotonic() limit (anytime: the least bound over the splits at the stop).
        stop_gap: stop once the least bound is within this fraction of the best layout (None:
            :data:`STOP_GAP`; 0: run to the end or the work cap).
    """
    if not SplitLP().applies(problem, V):
        return None
    splits = _splits(problem, V)
    cfg = _configs(problem, V, splits, deadline)
    if cfg is None:
        return None
    return _Search(problem, V, splits, cfg).run(upper_ms, deadline, STOP_GAP if stop_gap is None else stop_gap)


class SplitLP:
    """:func:`split_lp_bound` as a :class:`~autotune.tuner.bounds._base.LowerBound`; its best
    layout is returned as a seed (``BoundOutcome.layouts``)."""

    name = "split LP"

    def applies(self, problem: Problem, V: int) -> bool:
        if V < 2 or problem.seq_split_num != 1:
            return False
        cs = compile_schedule(problem.schedule, problem.P, V, problem.m, problem.seq_split_num)
        if cs.split_bw:
            return False
        if not np.array_equal(problem.positions(V), np.arange(V * problem.P).reshape(V, problem.P)):
            return False  # a V-shaped placement: the stage keys assume chunk-major layer order
        if count_splits_v(problem, V) > MAX_SPLITS:  # memoised on the problem
            return False
        lo, hi = (a.reshape(V, problem.P) for a in problem.bounds(V))
        most = np.minimum(hi, problem.N - (lo.sum() - lo))  # a mini-stage's largest layer count
        return int(most.max()) <= MAX_CHUNK_LAYERS

    def bound(self, problem: Problem, V: int, ctx: BoundContext) -> BoundOutcome | None:
        r = split_lp_bound(problem, V, upper_ms=ctx.upper_ms, deadline=ctx.deadline, stop_gap=ctx.target_gap)
        if r is None:
            return None
        layouts = (r.best,) if r.best is not None else ()
        split = r.best.layers if r.best is not None else None
        return BoundOutcome(r.bound_ms, split, {"split_lps": r.lps}, layouts=layouts)
