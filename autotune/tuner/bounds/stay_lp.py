"""The stay LP: a bound for any V in a fraction of a second, from one linear program over the
layer counts (pure numpy + HiGHS through scipy, no Optuna).

Every op of a step runs on one device, one op at a time, and starts after its data dependency
ends (:func:`autotune.cost.simulate.simulate`). So for any device d and any two of its ops a
before b in its program order, the step time is at least

    T >= head(a) + Σ durations of d's ops from a to b + tail(b)       (ms)

where head(a) is the length of the chain of dependencies that ends where a starts (a forward of a
micro-batch at pipeline position q waits for that micro-batch's forwards at positions 0 .. q − 1)
and tail(b) the length of a chain of ops that depend on b, one after the other (a backward at
position q is followed by the same micro-batch's backwards at q − 1 .. 0), with ``p2p_ms`` per
cross-stage edge on both: one "stay" on device d, the path family of the stage DP
(:mod:`.stage_dp`). Every duration is linear in the numbers of layers of each kind and recompute
class each mini-stage holds, and so is every stage's peak HBM at each of its candidate peaks
(static MiB plus the live micro-batches' activations, the live-count vectors of
:class:`~autotune.cost.simulate.CompiledSchedule`; the backward workspace, >= 0, left out). The LP

    min T  s.t.  the stay inequalities, for a the first op and b the last op of each (op kind,
                 chunk) on d, b also d's last op, a before b, every device d;
                 every stage's peak <= the budget at each of its live-count vectors;
                 each mini-stage within ``problem.bounds(V)``; kind k's layers sum to its count

over x[p, v, k, c] >= 0 (layers of kind k with recompute class c in mini-stage (v, p), the classes
``problem.kinds`` allow) relaxes every layout of pp_interleave_num V: layer counts and recompute
fractional, any class per layer (not MindFormers' "first r layers" rule), kinds at any position.
Its value, less HiGHS's tolerance (:func:`~autotune.tuner.bounds._base.highs_proven`), is a
lower bound on the step time of every layout of V that fits the budget, at least the work floor
(:mod:`.work_floor`: the pairs include each device's first and last op).

What it proves and costs (scaling.py's problems; ms, CPU s on a 2-core AMD EPYC): pp 16 × vpp 2
× m 64 dense tight 31,469 (the work floor 27,541, the search's bound 33,562) in 0.10 s; MoE tight
20,461 (15,570) in 0.07 s; pp 32 × vpp 4 × m 256 dense 121,026 (109,787; the stage DP 130,003)
in 0.5 s; pp 64 × vpp 2 × m 512 MoE 101,866 (61,032) in 0.3 s; pp 64 × vpp 4 × m 512 dense
122,098 in 1.3 s. It stays below the DP bounds because layers are whole in a layout: at one or
two layers a mini-stage, moving a fraction of a layer, or recomputing one, costs the LP a
fraction of what a layout pays (the stage DP, exact over integer splits, takes ~6 s a V at pp 64
× m 512). :func:`autotune.tuner.solve.stay_floors` gives it to the V's a short ``--timeout``
leaves without a proof, in place of the work floor.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from autotune.cost.budget import hbm_cap
from autotune.cost.simulate import CompiledSchedule, compile_schedule
from autotune.tuner.bounds._base import BoundContext, BoundOutcome, highs_proven
from autotune.tuner.bounds._paths import next_ops, op_chain
from autotune.tuner.bounds._relax import live_rows, present_kinds
from autotune.tuner.bounds.work_floor import work_floor_ms
from autotune.tuner.problem import Problem
from autotune.tuner.recompute import allowed_classes

#: Forward, backward (B when the schedule splits it), weight-gradient ops (``CompiledSchedule.kind``).
_F, _B, _W = 0, 1, 2


class _Rows:
    """Sparse LP rows in COO form, added one at a time (:meth:`add`) or as a block of rows of
    equal length (:meth:`block`)."""

    def __init__(self) -> None:
        self.r: list[np.ndarray] = []
        self.c: list[np.ndarray] = []
        self.v: list[np.ndarray] = []
        self.rhs: list[np.ndarray] = []
        self.count = 0

    def block(self, cols: np.ndarray, vals: np.ndarray, rhs: np.ndarray) -> None:
        """Rows i = 0 .. R − 1: Σ_j vals[i, j] · x[cols[i, j]] (op) rhs[i]; cols, vals [R, k]."""
        cols = np.asarray(cols, dtype=np.int64)
        rhs = np.asarray(rhs, dtype=np.float64).reshape(-1)
        vals = np.broadcast_to(np.asarray(vals, dtype=np.float64), cols.shape)
        self.r.append(np.repeat(np.arange(self.count, self.count + rhs.size), cols.shape[1]))
        self.c.append(cols.reshape(-1))
        self.v.append(vals.reshape(-1))
        self.rhs.append(rhs)
        self.count += rhs.size

    def add(self, cols, vals, rhs: float) -> None:
        """One row: Σ vals · x[cols] (op) rhs."""
        cols = np.asarray(cols, dtype=np.int64).reshape(1, -1)
        self.block(cols, np.asarray(vals, dtype=np.float64).reshape(1, -1) if np.ndim(vals) else vals, [rhs])

    def matrix(self, n: int):
        from scipy.sparse import coo_matrix  # noqa: PLC0415 (heavy import, needed only when the bound runs)

        if not self.count:
            return None, None
        m = coo_matrix((np.concatenate(self.v), (np.concatenate(self.r), np.concatenate(self.c))),
                       shape=(self.count, n)).tocsr()
        return m, np.concatenate(self.rhs)


@dataclass
class _Model:
    """Column layout of the LP: x [P, V, nk, nc] (layers), then the op durations of each (op kind,
    chunk, stage) row as :func:`~autotune.cost.simulate.duration_table` numbers them, then the
    prefix sums HF / HB over pipeline positions of the forward / backward durations, then each
    mini-stage's activation per micro-batch [V, P] and each stage's static memory [P] (so that the
    many memory rows are short), then T. Times are in :func:`stay_lp_ms`'s unit (the work floor /
    1000, ms), memory in units of the budget, so that the LP is well scaled."""

    P: int
    V: int
    nk: int
    nc: int
    nkind: int
    dur0: int = field(init=False)
    hf0: int = field(init=False)
    hb0: int = field(init=False)
    act0: int = field(init=False)
    st0: int = field(init=False)
    t: int = field(init=False)
    n: int = field(init=False)

    def __post_init__(self) -> None:
        VP = self.V * self.P
        self.dur0 = self.P * self.V * self.nk * self.nc
        self.hf0 = self.dur0 + self.nkind * VP
        self.hb0 = self.hf0 + VP + 1
        self.act0 = self.hb0 + VP + 1
        self.st0 = self.act0 + VP
        self.t = self.st0 + self.P
        self.n = self.t + 1

    def x(self, p: int, v: int) -> np.ndarray:
        """Columns of mini-stage (v, p)'s x, [nk·nc] (kind-major)."""
        k = self.nk * self.nc
        start = (p * self.V + v) * k
        return np.arange(start, start + k)

    def dur(self, kind: int, v: int, p: int) -> int:
        return self.dur0 + kind * self.V * self.P + v * self.P + p


def _ranges(cs: CompiledSchedule, pos: np.ndarray, ops: list[int]) -> list[tuple[int, int, int]] | None:
    """When ``ops`` are, per op kind (forward, backward), one op at each pipeline position of a
    range [a, b) and no weight-gradient op: the (kind, a, b) of each, else None (the chain's
    length is then a difference of the LP's prefix sums)."""
    o = np.asarray(ops, dtype=np.int64)
    kind = cs.kind[o]
    if (kind == _W).any():
        return None
    out = []
    for k in (_F, _B):
        q = np.sort(pos[cs.chunk[o[kind == k]], cs.stage[o[kind == k]]])
        if q.size and not np.array_equal(q, np.arange(q[0], q[0] + q.size)):
            return None
        if q.size:
            out.append((k, int(q[0]), int(q[-1]) + 1))
    return out


def _chain_terms(cs: CompiledSchedule, mod: _Model, pos: np.ndarray, ops: list[int]) -> tuple[np.ndarray, np.ndarray]:
    """LP columns and coefficients of a chain's length: differences of the prefix-sum columns when
    the chain covers ranges of positions (:func:`_ranges`), else each op's duration column."""
    rng = _ranges(cs, pos, ops)
    if rng is not None:
        cols, vals = [], []
        for k, a, b in rng:
            first = mod.hf0 if k == _F else mod.hb0
            cols += [first + b, first + a]
            vals += [1.0, -1.0]
        return np.asarray(cols, dtype=np.int64), np.asarray(vals)
    cols = [mod.dur(int(cs.kind[o]), int(cs.chunk[o]), int(cs.stage[o])) for o in ops]
    u, c = np.unique(np.asarray(cols, dtype=np.int64), return_counts=True)
    return u, c.astype(np.float64)


def _stays(cs: CompiledSchedule, mod: _Model, pos: np.ndarray, p2p_ms: float, unit: float, ub: _Rows) -> int:
    """The stay inequalities of every device (module docstring) as rows of ``ub``; their number."""
    P, V, n = cs.P, cs.V, cs.num_ops
    dep, nxt, cross = cs.dep.tolist(), next_ops(cs), cs.cross.tolist()
    count = 0
    for d in range(P):
        order = np.asarray(cs.order[d])
        cat = cs.kind[order].astype(np.int64) * V + cs.chunk[order]
        cum = np.zeros((order.size + 1, mod.nkind * V))
        np.add.at(cum, (np.arange(1, order.size + 1), cat), 1.0)
        np.cumsum(cum, axis=0, out=cum)
        ent = sorted({int(np.flatnonzero(cat == c)[0]) for c in np.unique(cat)})
        ext = sorted({int(np.flatnonzero(cat == c)[-1]) for c in np.unique(cat)} | {order.size - 1})
        heads = {i: op_chain(int(order[i]), dep, cross, n, False) for i in ent}
        tails = {j: op_chain(int(order[j]), nxt, cross, n, True) for j in ext}
        tail_terms = {j: _chain_terms(cs, mod, pos, ops) for j, (ops, _) in tails.items()}
        stay_cols = np.array([mod.dur(t, v, d) for t in range(mod.nkind) for v in range(V)])
        for i, (head_ops, hh) in heads.items():
            hc, hv = _chain_terms(cs, mod, pos, head_ops)
            for j, (_, th) in tails.items():
                if j < i:
                    continue
                tc, tv = tail_terms[j]
                sv = cum[j + 1] - cum[i]
                keep = sv > 0
                cols = np.concatenate([hc, stay_cols[keep], tc, [mod.t]])
                vals = np.concatenate([hv, sv[keep], tv, [-1.0]])
                ub.add(cols, vals, -p2p_ms * (hh + th) / unit)
                count += 1
    return count


def _coefficients(problem: Problem, ks: int) -> tuple[list[int], dict[str, np.ndarray]]:
    """Present kinds and per (kind, class) [nk, nc] the per-layer op ms (forward, backward or B, W;
    per unit: / seq_split_num), static MiB and activation MiB per micro-batch (a unit keeps 1 /
    seq_split_num of it: :func:`~autotune.tuner.bounds._relax.live_rows` divides the counts)."""
    pa = problem.pa
    kinds = present_kinds(problem).tolist()
    cls = allowed_classes(problem.kinds)
    ix = np.ix_(kinds, cls)
    one = np.ones((len(kinds), len(cls)))
    w = pa.w_k()[kinds][:, None] * one
    st = pa.static_k[kinds][:, None] * one
    if pa.static_dc is not None:
        st = st + pa.static_dc[ix]
    return kinds, {"fwd": pa.fwd_k[kinds][:, None] * one / ks, "bwd": pa.bwd_kc[ix] / ks, "w": w / ks,
                   "static": st, "act": pa.act_kc[ix]}


def _durations(problem: Problem, cs: CompiledSchedule, mod: _Model, co: dict[str, np.ndarray],
               pos: np.ndarray, unit: float, eq: _Rows) -> None:
    """Equality rows: each (op kind, chunk, stage) duration column = its layers' ms (+ the head's or
    the tail's), and the prefix sums HF[q + 1] = HF[q] + the forward at position q (HB likewise)."""
    pa, P, V, ks = problem.pa, problem.P, mod.V, cs.k
    hw = 0.5 * pa.head.bwd_ms if pa.head_w_ms is None else pa.head_w_ms
    tw = 0.5 * pa.tail.bwd_ms if pa.tail_w_ms is None else pa.tail_w_ms
    ends = {}
    for (e, w_ms), at in ((pa.head, hw), np.argwhere(pos == 0)[0]), ((pa.tail, tw), np.argwhere(pos == V * P - 1)[0]):
        f, b = e.fwd_ms, e.bwd_ms
        add = [f, b - w_ms, w_ms] if cs.split_bw else [f, b]
        key = (int(at[0]), int(at[1]))
        ends[key] = [a + x for a, x in zip(ends.get(key, [0.0] * mod.nkind), add)]
    per_kind = [co["fwd"], co["bwd"] - co["w"], co["w"]] if cs.split_bw else [co["fwd"], co["bwd"]]
    xcols = np.stack([mod.x(p, v) for v in range(V) for p in range(P)])  # [VP, nk·nc], row v·P + p
    for t in range(mod.nkind):
        coef = (per_kind[t] / unit).reshape(-1)
        const = np.array([ends.get((v, p), [0.0] * mod.nkind)[t] for v in range(V) for p in range(P)]) / ks / unit
        cols = np.concatenate([(mod.dur0 + t * V * P + np.arange(V * P))[:, None], xcols], axis=1)
        eq.block(cols, np.concatenate([[1.0], -coef])[None], const)
    at = np.argsort(pos.reshape(-1))  # row v·P + p of each position
    q = np.arange(V * P)
    for first, kind in ((mod.hf0, _F), (mod.hb0, _B)):
        cols = np.stack([first + q + 1, first + q, mod.dur0 + kind * V * P + at], axis=1)
        eq.block(cols, np.array([[1.0, -1.0, -1.0]]), np.zeros(V * P))
        eq.add([first], [1.0], 0.0)


def _memory(problem: Problem, cs: CompiledSchedule, mod: _Model, co: dict[str, np.ndarray],
            pos: np.ndarray, eq: _Rows, ub: _Rows) -> None:
    """Each stage's peak at each of its live-count vectors within the budget (rows in units of the
    budget): static MiB + Σ_v live_v · activation MiB of chunk v (the head's and tail's included),
    through one activation column per mini-stage and one static column per stage."""
    pa, P, V = problem.pa, problem.P, mod.V
    cap = hbm_cap(problem.hbm_mib)
    hv, hp = (int(x) for x in np.argwhere(pos == 0)[0])
    tv, tp = (int(x) for x in np.argwhere(pos == V * P - 1)[0])
    st, act = co["static"].reshape(-1) / cap, co["act"].reshape(-1) / cap
    ends = np.zeros((V, P))
    ends[hv, hp] += pa.head.act_mib
    ends[tv, tp] += pa.tail.act_mib
    for d in range(P):
        xcols = np.stack([mod.x(d, v) for v in range(V)])  # [V, nk·nc]
        cols = np.concatenate([(mod.act0 + np.arange(V) * P + d)[:, None], xcols], axis=1)
        eq.block(cols, np.concatenate([[1.0], -act])[None], ends[:, d] / cap)
        const = pa.stage_const_mib + (pa.head.static_mib if d == hp else 0.0) + \
            (pa.tail.static_mib if d == tp else 0.0)
        eq.add(np.concatenate([[mod.st0 + d], xcols.reshape(-1)]), np.concatenate([[1.0], -np.tile(st, V)]),
               const / cap)
        u, _ = live_rows(cs, d, np.zeros(V))  # [J, V] micro-batches' worth per chunk; workspace dropped
        cols = np.broadcast_to(np.concatenate([[mod.st0 + d], mod.act0 + np.arange(V) * P + d]), (len(u), V + 1))
        ub.block(cols, np.concatenate([np.ones((len(u), 1)), u], axis=1), np.ones(len(u)))


def stay_lp_ms(problem: Problem, V: int, *, deadline: float | None = None) -> float | None:
    """The stay LP's bound (module docstring) for pp_interleave_num V, ms: every layout of V that
    fits ``problem.hbm_mib`` simulates to at least it. None when HiGHS does not prove an optimum
    (infeasible: then no layout fits, but the caller keeps a bound it trusts more; the time
    limit ``deadline``, time.monotonic(); numerical trouble)."""
    from scipy.optimize import linprog  # noqa: PLC0415 (heavy import, needed only when the bound runs)

    P = problem.P
    cs = compile_schedule(problem.schedule, P, V, problem.m, problem.seq_split_num)
    pos = np.asarray(problem.positions(V))
    kinds, co = _coefficients(problem, cs.k)
    mod = _Model(P, V, len(kinds), co["fwd"].shape[1], 3 if cs.split_bw else 2)
    unit = max(work_floor_ms(problem), 1e-9) / 1e3  # ms: time columns in this unit (well-scaled LP)
    eq, ub = _Rows(), _Rows()
    _durations(problem, cs, mod, co, pos, unit, eq)
    _stays(cs, mod, pos, problem.pa.p2p_ms, unit, ub)
    if np.isfinite(problem.hbm_mib):
        _memory(problem, cs, mod, co, pos, eq, ub)
    lo, hi = (b.T.reshape(-1) for b in problem.bounds(V))  # [P·V], p-major as the x columns
    xcols = np.stack([mod.x(p, v) for p in range(P) for v in range(V)])
    ub.block(xcols, -1.0, -lo.astype(np.float64))
    capped = hi < problem.N
    if capped.any():
        ub.block(xcols[capped], 1.0, hi[capped].astype(np.float64))
    counts = problem.pa.kind_prefix[kinds, -1].astype(np.float64)
    for j in range(len(kinds)):
        cols = np.concatenate([mod.x(p, v)[j * mod.nc:(j + 1) * mod.nc] for p in range(P) for v in range(V)])
        eq.add(cols, 1.0, counts[j])
    c = np.zeros(mod.n)
    c[mod.t] = 1.0
    A_ub, b_ub = ub.matrix(mod.n)
    A_eq, b_eq = eq.matrix(mod.n)
    opts = {} if deadline is None else {"time_limit": max(0.05, deadline - time.monotonic())}
    bounds = np.full((mod.n, 2), [-np.inf, np.inf])
    bounds[:mod.dur0, 0] = 0.0  # the layer counts; durations, prefix sums and T are defined by rows
    res = linprog(c, A_ub=A_ub, b_ub=b_ub, A_eq=A_eq, b_eq=b_eq, bounds=bounds, method="highs-ipm", options=opts)
    if res.status != 0 or not np.isfinite(res.fun):
        return None
    return highs_proven(float(res.fun) * unit)


@dataclass(frozen=True)
class StayLP:
    """:func:`stay_lp_ms` as a :class:`~autotune.tuner.bounds._base.LowerBound` (every V; None
    where HiGHS proves no optimum)."""

    name: str = "stay LP"

    def applies(self, problem: Problem, V: int) -> bool:
        return True

    def bound(self, problem: Problem, V: int, ctx: BoundContext) -> BoundOutcome | None:
        value = stay_lp_ms(problem, V, deadline=ctx.deadline)
        if value is None:
            return None
        return BoundOutcome(max(value, ctx.lower_ms) if ctx.lower_ms is not None else value, None, {"stay LP": 1})
