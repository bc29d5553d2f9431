"""The work floor: the average device's share of the step's compute (the busiest device has at
least that), a bound that costs nothing (pure numpy, no Optuna).

Every op of a step runs on one of the P devices, one op at a time, so the step time is at least
the busiest device's busy time, which is at least the average: with W the forward + backward ms of
one micro-batch through every layer, the head and the tail (each layer's backward at its least over
the recompute classes: recompute only adds replay),

    T >= m · W / P        (ms; any schedule, any V, any layer split, any recompute choice).

The ``seq_split_num`` k splits a micro-batch's ops into k parts of 1/k the time each, so the total
is the same. Memory is not looked at, so the floor is weak (it leaves out the pipeline bubble and
every recompute the budget forces).

:func:`whole_layer_floor_ms` makes it stronger at no real cost: each device holds a whole number
of layers, and its first op waits for a chain of ops, its last op is followed by one. That is
what :class:`WorkFloor` proves (:func:`floor_ms`): :func:`~autotune.tuner.bounds._base.tighten`
gives it to a V whose proofs would start after their deadline, or whose proof the clock cut, so
that a short ``--timeout`` still ends with a finite bound for every V instead of running a slow
first proof past the limit.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from autotune.cost.simulate import CompiledSchedule, compile_schedule
from autotune.tuner.bounds._base import BoundContext, BoundOutcome
from autotune.tuner.bounds._paths import W_OP, next_ops, op_chain
from autotune.tuner.problem import Problem


def work_floor_ms(problem: Problem) -> float:
    """m · W / P (ms; module docstring): the least step time any layout of ``problem`` can have by
    the busiest device's work alone. Does not depend on V."""
    pa = problem.pa
    per_kind = pa.fwd_k + pa.bwd_kc.min(axis=1)  # [K] ms per micro-batch (replay >= 0: the no-recompute class)
    layers = float(per_kind @ pa.kind_prefix[:, -1].astype(np.float64))
    ends = pa.head.fwd_ms + pa.head.bwd_ms + pa.tail.fwd_ms + pa.tail.bwd_ms
    return problem.m * (layers + ends) / problem.P


def whole_layer_floor_ms(problem: Problem, V: int) -> float:
    """The busiest device's work with whole layers (ms): every layout of pp_interleave_num V
    simulates to at least it, memory not looked at.

    Device d runs its ops one at a time. Its first op waits for the chain of ops it depends on
    (``cs.dep``, the forwards of micro-batch 0 at the positions before it, ...) and its last op
    is followed by a chain of ops that depend on it (:func:`~._paths.next_ops`), neither of them
    on d, so (the stay LP's path from d's first op to its last, :mod:`.stay_lp`)

        T >= H_d + m · (Σ over d's layers of forward + least backward) + m · e_d + X_d

    with e_d the head's / tail's forward + backward where d holds them and H_d, X_d the chains'
    least lengths: each op at mini-stage (v, p) with ``problem.bounds(V)``'s least layer count
    there, at the least per-layer ms of any present kind (/ seq_split_num; the head / tail
    included at the first / last position), plus ``p2p_ms`` per cross-stage edge. The layers a
    device holds are a whole number n_d >= Σ_v lo[v, d] (at most Σ_v hi[v, d]), Σ_d n_d = N. With
    c the least per-layer forward + backward of the present kinds, the least T for which
    Σ_d min(hi_d, ⌊(T − H_d − X_d − m·e_d) / (m·c)⌋) >= N and every term >= lo_d is a bound; so is,
    for each kind k alone (N_k layers at c_k each, the other layers' work dropped), the least T
    that gives room for N_k of them. The value is the largest of these and the work floor.

    At one to five layers a device the rounding is what the fractional bounds miss: scaling.py's
    pp 64 × m 512 × 256 dense layers gives 136,766 ms at every V (133,393 without the chains)
    where the work floor is 109,787 and the stay LP 120,810-127,997. Costs the chains' walk (two
    per device): ~0.01-0.03 s there."""
    pa, P, m, N = problem.pa, problem.P, problem.m, problem.N
    cs = compile_schedule(problem.schedule, P, V, m, problem.seq_split_num)
    present = np.flatnonzero(pa.kind_prefix[:, -1] > 0)
    per_kind = (pa.fwd_k + pa.bwd_kc.min(axis=1))[present]  # [K'] ms per micro-batch
    pos = np.asarray(problem.positions(V))
    lo, hi = problem.bounds(V)
    lo_d = lo.sum(axis=0).astype(np.float64)
    hi_d = np.minimum(hi.sum(axis=0), N).astype(np.float64)
    e = np.zeros(P)
    e[int(np.argwhere(pos == 0)[0][1])] += pa.head.fwd_ms + pa.head.bwd_ms
    e[int(np.argwhere(pos == V * P - 1)[0][1])] += pa.tail.fwd_ms + pa.tail.bwd_ms
    fixed = _chain_floors(problem, cs, pos, lo) + m * e  # [P] ms
    best = _least_threshold(fixed, m * float(per_kind.min()), lo_d, hi_d, N)
    for j, k in enumerate(present):
        best = max(best, _least_threshold(fixed, m * float(per_kind[j]), np.zeros(P), hi_d,
                                          int(pa.kind_prefix[k, -1])))
    return max(best, work_floor_ms(problem))


def _chain_floors(problem: Problem, cs: CompiledSchedule, pos: np.ndarray, lo: np.ndarray) -> np.ndarray:
    """float [P] (ms): per device, the least length of the chain into its first op plus that of
    the chain out of its last op (:func:`whole_layer_floor_ms`), each op at ``lo`` layers of its
    mini-stage."""
    pa, P, V, n, k = problem.pa, cs.P, cs.V, cs.num_ops, float(cs.k)
    head_w = 0.5 * pa.head.bwd_ms if pa.head_w_ms is None else pa.head_w_ms
    tail_w = 0.5 * pa.tail.bwd_ms if pa.tail_w_ms is None else pa.tail_w_ms
    per_layer = least_op_ms(problem, cs.split_bw)
    ends = ([pa.head.fwd_ms, pa.head.bwd_ms - head_w, head_w], [pa.tail.fwd_ms, pa.tail.bwd_ms - tail_w, tail_w]) \
        if cs.split_bw else ([pa.head.fwd_ms, pa.head.bwd_ms, 0.0], [pa.tail.fwd_ms, pa.tail.bwd_ms, 0.0])
    least = np.stack([per_layer[t] * lo + ends[0][t] * (pos == 0) + ends[1][t] * (pos == V * P - 1)
                      for t in range(3)]) / k  # [3, V, P]
    dep, nxt, cross = cs.dep.tolist(), next_ops(cs), cs.cross.tolist()
    out = np.zeros(P)
    for d in range(P):
        order = cs.order[d]
        for op, ptr, after in ((order[0], dep, False), (order[-1], nxt, True)):
            ops, hops = op_chain(int(op), ptr, cross, n, after)
            o = np.asarray(ops, dtype=np.int64)
            kind = np.minimum(cs.kind[o].astype(np.int64), W_OP)
            out[d] += float(least[kind, cs.chunk[o], cs.stage[o]].sum()) + hops * pa.p2p_ms
    return out


def least_op_ms(problem: Problem, split_bw: bool) -> list[float]:
    """The least ms one layer adds to a forward, a backward (B on a split backward) and a W op, per
    micro-batch, over the kinds present and every recompute class: [F, B, W] (W 0.0 without the
    split). On a split backward B is the backward less the W of the same kind, so each is its own
    least over the kinds (the least backward less the least W could be above every kind's B)."""
    pa = problem.pa
    present = pa.kind_prefix[:, -1] > 0
    bwd_k = pa.bwd_kc[present].min(axis=1)  # [K'] the least backward of each kind (any class)
    f = float(pa.fwd_k[present].min())
    if not split_bw:
        return [f, float(bwd_k.min()), 0.0]
    w_k = pa.w_k()[present]
    return [f, float((bwd_k - w_k).min()), float(w_k.min())]


def _least_threshold(fixed: np.ndarray, per: float, lo: np.ndarray, hi: np.ndarray, count: int) -> float:
    """The least T (ms) at which whole counts n_d with lo_d <= n_d <= hi_d, fixed_d + per · n_d <=
    T, sum to ``count`` or more: one of the values fixed_d + per · j (j = 0 .. count), found by
    bisection (the test is monotone in T). 0.0 when ``count`` is 0; inf when no T does."""
    if count <= 0:
        return 0.0
    if per <= 0:
        return float(np.max(fixed)) if hi.sum() >= count else float("inf")
    cand = np.unique((fixed[:, None] + per * np.arange(count + 1)[None, :]).reshape(-1))

    def fits(T: float) -> bool:
        room = np.floor((T - fixed) / per + 1e-9)
        return bool(np.all(room >= lo) and np.minimum(room, hi).sum() >= count)

    if not fits(float(cand[-1])):
        return float("inf")
    a, b = 0, cand.size - 1
    while a < b:
        mid = (a + b) // 2
        if fits(float(cand[mid])):
            b = mid
        else:
            a = mid + 1
    return float(cand[a]) * (1.0 - 1e-12)


def floor_ms(problem: Problem, V: int) -> float:
    """What a V holds when the clock gave it no proof: :func:`whole_layer_floor_ms` (at least the
    work floor), ms."""
    return whole_layer_floor_ms(problem, V)


@dataclass(frozen=True)
class WorkFloor:
    """:func:`floor_ms` (the work floor with whole layers and the chains at each device's ends) as
    a :class:`~autotune.tuner.bounds._base.LowerBound` (every V)."""

    name: str = "work floor"

    def applies(self, problem: Problem, V: int) -> bool:
        return True

    def bound(self, problem: Problem, V: int, ctx: BoundContext) -> BoundOutcome:
        return BoundOutcome(floor_ms(problem, V), None, {"work floor": 1})
