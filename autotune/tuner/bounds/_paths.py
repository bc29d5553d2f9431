"""Paths of a schedule's dependency graph, shared by the lower bounds (pure numpy, no Optuna).

A path is a chain of ops, each starting after its predecessor (a data edge, + p2p across stages,
or program order on a stage), so its length under any layout's durations is <= that layout's
simulated step time (cost-model reference §6.1). A path is stored as op counts per mini-stage
(divided by ``seq_split_num``) and its cross-stage hops: its length for forward / backward ms f, b
[V, P] is ``Σ cf·f + Σ cb·b + hops·p2p_ms``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from autotune.cost.simulate import CompiledSchedule, _scalar_times
from autotune.tuner.bounds._clock import cannot_finish
from autotune.tuner.problem import REL_TOL, first_min


class CriticalPath(NamedTuple):
    """A longest path: its length (ms), forward / backward (B when split) / W op counts [V, P]
    (divided by ``seq_split_num``) and its cross-stage hops."""

    length: float
    cf: np.ndarray
    cb: np.ndarray
    hops: int
    cw: np.ndarray


def data_children(cs: CompiledSchedule) -> dict[int, int]:
    """Op -> the first op (in op order) whose data dependency it is (ops nothing depends on are
    absent)."""
    n = cs.num_ops
    child: dict[int, int] = {}
    for i in range(n):
        if cs.dep[i] < n:
            child.setdefault(int(cs.dep[i]), i)
    return child


#: ``CompiledSchedule.kind`` of a weight-gradient op (forward 0, backward or B 1).
W_OP = 2


def next_ops(cs: CompiledSchedule) -> list[int]:
    """Per op, one op that depends on it: a non-W one first, then the lowest id
    (``cs.num_ops``: none), list [num_ops + 1]. The chains after an op follow it
    (:func:`op_chain`). (Not :func:`data_children` / :func:`dependency_chain`: those take the
    first dependent, a W op on a split backward, and count a W as a backward, whose duration
    differs.)"""
    n = cs.num_ops
    ids = np.flatnonzero(cs.dep < n)
    order = np.lexsort((ids, cs.kind[ids] == W_OP, cs.dep[ids]))  # by parent, non-W first, then id
    parents, first = np.unique(cs.dep[ids[order]], return_index=True)
    nxt = np.full(n + 1, n, dtype=np.int64)
    nxt[parents] = ids[order][first]
    return nxt.tolist()


def op_chain(op: int, ptr: list[int], cross: list[float], n: int, after: bool) -> tuple[list[int], float]:
    """The ops of the chain that follows ``ptr`` from ``op`` (``cs.dep``: the chain before it;
    :func:`next_ops`: a chain after it), and the number of its cross-stage edges (each costs
    ``p2p_ms``)."""
    ops: list[int] = []
    hops = 0.0
    j = op
    while ptr[j] < n:
        if not after:
            hops += cross[j]
        j = ptr[j]
        if after:
            hops += cross[j]
        ops.append(j)
    return ops, hops


def dependency_chain(cs: CompiledSchedule, child: dict[int, int], x: int, up: bool) -> tuple[np.ndarray, int]:
    """The data-dependency chain into op x (``up``: its dependency, that one's, ...) or out of it
    (its first dependent, ..., ``child`` from :func:`data_children`), x itself excluded: op
    counts float [2 (forward, backward), V, P] and its cross-stage hops."""
    n = cs.num_ops
    dep, fwd, chunk, stage, cross = cs.dep, cs.fwd, cs.chunk, cs.stage, cs.cross
    C = np.zeros((2, cs.V, cs.P))
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


def critical_path(cs: CompiledSchedule, fwd_ms: np.ndarray, bwd_ms: np.ndarray, p2p_ms: float,
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
    a max-plus system; this is its longest path for these durations). ``length`` is the longest
    path's length; the chain returned is the one that takes, at every op, the data edge over
    program order unless program order is longer by more than :data:`REL_TOL`, and ends at the
    lowest-numbered op whose end is within REL_TOL of the longest (so its length is within about
    REL_TOL × ops of ``length``, and multiplying every duration by a constant does not change the
    chain, except where two chains differ by almost exactly REL_TOL).
    """
    n = cs.num_ops
    if cs.split_bw:
        w = 0.5 * bwd_ms if w_ms is None else w_ms
        table = np.stack([fwd_ms, bwd_ms - w, w])  # [3, V, P] by op kind
        d = table[cs.kind.astype(np.int64), cs.chunk, cs.stage] / cs.k
    else:
        d = np.where(cs.fwd, fwd_ms[cs.chunk, cs.stage], bwd_ms[cs.chunk, cs.stage]) / cs.k
    # end times: the simulation's own scalar loop (end = max(data dependency + p2p, previous op)
    # + duration); then per op the edge the chain takes back
    end = np.asarray(_scalar_times(cs, d[cs.topo].tolist(), float(p2p_ms), False)[0])  # [n + 1]
    a = end[cs.dep] + cs.cross * p2p_ms
    # near-ties go to the data edge, so a time scale cannot flip the path
    pred = np.where(a >= end[cs.prev] * (1.0 - REL_TOL), cs.dep, cs.prev)
    pred[pred >= n] = -1
    i = first_min(-end[:n])  # the first op within REL_TOL of the longest
    length = end[:n].max()
    cnt = np.zeros((3, cs.V, cs.P))
    hops = 0
    while i >= 0:
        cnt[int(cs.kind[i]), cs.chunk[i], cs.stage[i]] += 1.0
        j = pred[i]
        if j >= 0 and j == cs.dep[i] and cs.cross[i]:
            hops += 1
        i = j
    return CriticalPath(float(length), cnt[0] / cs.k, cnt[1] / cs.k, hops, cnt[2] / cs.k)



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


#: :func:`one_stay_counts` of the last few compiled schedules: id -> (schedule, counts); the
#: schedule is held so that its id is not reused while the entry lives.
_ONE_STAY: dict[int, tuple[CompiledSchedule, list]] = {}
ONE_STAY_MEMO = 16


def one_stay_counts(cs: CompiledSchedule, deadline: float | None = None
                    ) -> list[list[tuple[np.ndarray, np.ndarray, int]]] | None:
    """Exact op counts of every one-stay path (see module docstring), per stage p: a list of
    (forward counts float [V, P], backward counts float [V, P], cross-stage hops), counts divided
    by ``seq_split_num``. A path's length for mini-stage durations f, b (ms per micro-batch) is
    Σ cf·f + Σ cb·b + hops·p2p_ms.

    Memoised per compiled schedule (the stage DP, the device DP, the integer program, the split LP
    and the search's step floors all read them; ~0.75 s a call on pp 32 × vpp 4 × m 256); the
    arrays are read-only.

    ``deadline`` (time.monotonic(); None: none): None when the counting, stage by stage, is past it
    or will be at its rate so far (nothing is memoised then; a late start of the stage DP spent
    ~0.5 s here on pp 64 × vpp 3 × m 512).

    Raises:
        ValueError: the schedule splits the backward (B/W ops).
    """
    hit = _ONE_STAY.get(id(cs))
    if hit is not None and hit[0] is cs:
        return hit[1]
    out = _one_stay_counts(cs, deadline)
    if out is None:
        return None
    for rows in out:
        for cf, cb, _ in rows:
            cf.flags.writeable = False
            cb.flags.writeable = False
    if len(_ONE_STAY) >= ONE_STAY_MEMO:
        _ONE_STAY.pop(next(iter(_ONE_STAY)))
    _ONE_STAY[id(cs)] = (cs, out)
    return out


def _one_stay_counts(cs: CompiledSchedule, deadline: float | None = None
                     ) -> list[list[tuple[np.ndarray, np.ndarray, int]]] | None:
    if cs.split_bw:
        raise ValueError("one-stay paths need a schedule that runs the whole backward as one op")
    P, V = cs.P, cs.V
    fwd, chunk = cs.fwd, cs.chunk
    child = data_children(cs)

    def chain(x: int, up: bool) -> tuple[np.ndarray, int]:
        return dependency_chain(cs, child, x, up)

    out = []
    t0 = time.monotonic()
    for p in range(P):
        if cannot_finish(t0, p, P, deadline):
            return None
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


def stage_paths(cs: CompiledSchedule, p2p_ms: float, deadline: float | None = None) -> list[StagePaths] | None:
    """One-stay paths of every stage (see module docstring) for a compiled non-split schedule;
    None when :func:`one_stay_counts` gave up on ``deadline``.

    Raises:
        ValueError: the schedule splits the backward (B/W ops).
    """
    counts = one_stay_counts(cs, deadline)
    if counts is None:
        return None
    out = []
    for p, paths in enumerate(counts):
        rows = [(cf[:, p], cb[:, p], hops * p2p_ms) + _counts_fit(cf, cb, p) for cf, cb, hops in paths]
        cols = list(zip(*rows))
        out.append(StagePaths(np.asarray(cols[0]), np.asarray(cols[1]), np.asarray(cols[2]),
                              *(np.asarray(c, dtype=np.float64) for c in cols[3:])))
    return out



class PairCycle(NamedTuple):
    """Op counts of :func:`pair_cycle`'s path: forwards / backwards on stage P-2 and on the last
    stage, and its cross-stage hops."""

    fwd_s: int
    bwd_s: int
    fwd_last: int
    bwd_last: int
    hops: int


def pair_cycle(cs: CompiledSchedule) -> PairCycle | None:
    """The "ping-pong" path between the last two stages s = P-2 and L = P-1 (V = 1).

    Walk stage s's ops in program order; at each forward F_s(j) jump to F_L(j) (data edge, p2p), run
    L's ops in program order up to B_L(j), come back to B_s(j) (data edge, p2p) and go on along s.
    Every step is an edge of the dependency graph, so its length bounds the step time. In 1F1B's
    steady state each round trip covers two micro-batches and costs t_s + t_L + 2·p2p, i.e. the
    p2p latency is paid once per micro-batch, which the single-stage paths cannot see.

    Returns the :class:`PairCycle` counts along the path, or None when the path is not of that
    shape (first op of s not a forward or last op not a backward).
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
    return PairCycle(cF_s, cB_s, cF_L, cB_L, hops)


def detour_counts(cs: CompiledSchedule, p: int, max_r: int | None = None,
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
    by a DP over p's order (any path is valid; the weighting only chooses which ones to keep): row r
    (paths with r round trips) is a max-plus prefix scan, ``best_r[i] = S[i] + max_{j<=i} (in_r[j]
    − S[j])`` with S the running weight and in_r the values entering at j (op 0 for r = 0, the
    landing B_p(u) of a round trip from row r − 1), computed for all ratios at once with
    ``np.maximum.accumulate``; a tie keeps the path that entered last (weights are multiples of
    0.5: the sums are exact). Returns the distinct non-dominated (r, cF, cB); empty for the last
    stage.
    """
    P = cs.P
    if p >= P - 1:
        return []
    order = np.asarray(cs.order[p], dtype=np.int64)
    n = order.size
    fw = np.asarray(cs.fwd, dtype=bool)[order]
    mb = np.asarray(cs.mb, dtype=np.int64)[order]
    pos_b = np.full(int(mb.max()) + 1, -1, dtype=np.int64)
    pos_b[mb[~fw]] = np.flatnonzero(~fw)
    src = np.flatnonzero(fw)  # a forward at i jumps to B_p of its micro-batch when that is after i + 1
    dst = pos_b[mb[src]]
    keep = dst > src + 1
    src, dst = src[keep], dst[keep]
    R = max_r if max_r is not None else min(2 * P, n // 2)
    rho = np.asarray(ratios, dtype=np.float64)[:, None]
    wt = np.where(fw[None, :], 1.0, rho)  # [ratios, n]
    S = np.cumsum(wt, axis=1)
    PF = np.cumsum(fw)
    PB = np.cumsum(~fw)
    idx = np.arange(n)
    # entries of row 0: op 0 alone
    h = np.full(wt.shape, -np.inf)
    h[:, 0] = wt[:, 0] - S[:, 0]
    eF = np.zeros(wt.shape, dtype=np.int64)
    eB = np.zeros(wt.shape, dtype=np.int64)
    eF[:, 0], eB[:, 0] = int(fw[0]), int(not fw[0])
    out: set[tuple[int, int, int]] = set()
    for r in range(R + 1):
        g = np.maximum.accumulate(h, axis=1)
        prev = np.concatenate([np.full((len(ratios), 1), -np.inf), g[:, :-1]], axis=1)
        new = np.isfinite(h) & (h >= prev)
        at = np.maximum.accumulate(np.where(new, idx, -1), axis=1)  # the entry each best path took
        reach = at >= 0
        a = np.maximum(at, 0)
        cF = np.take_along_axis(eF, a, axis=1) + PF[None, :] - PF[a]
        cB = np.take_along_axis(eB, a, axis=1) + PB[None, :] - PB[a]
        if r > 0:
            for t in range(len(ratios)):
                if reach[t, -1]:
                    out.add((r, int(cF[t, -1]), int(cB[t, -1])))
        if r == R or not reach[:, src].any():
            break
        # row r + 1: the round trips leaving from the forwards at src and landing at dst
        w = g + S
        h = np.full(wt.shape, -np.inf)
        ok = reach[:, src]
        h[:, dst] = np.where(ok, w[:, src] + wt[:, dst] - S[:, dst], -np.inf)
        eF = np.zeros(wt.shape, dtype=np.int64)
        eB = np.zeros(wt.shape, dtype=np.int64)
        eF[:, dst] = cF[:, src]
        eB[:, dst] = cB[:, src] + 1
    keep_ = [t for t in out if not any(o != t and all(x >= y for x, y in zip(o, t)) for o in out)]
    return sorted(keep_)

