"""Wrap-pair DP lower bound for pp_interleave_num > 1 (pure numpy, no Optuna; issue 17).

Why. With V > 1 the last stage P-1 and stage 0 are neighbours in the pipeline: chunk v's
forward on P-1 feeds chunk v+1's forward on stage 0, and chunk v+1's backward on stage 0 feeds
chunk v's backward on P-1. A layout whose chunks are unbalanced (e.g. 2 + 6 layers per stage
instead of 4 + 4) has a critical path that ping-pongs between those two stages: it runs a stretch
of P-1's program, crosses to stage 0 through such an edge, runs a stretch of stage 0's program,
crosses back, and so on. The device DP (:mod:`autotune.tuner.bounds.device_dp`) prices only paths
that stay on one stage, so on P16 V2 m64 L128 dense loose its relaxed optimum is such a layout
(value 31,018 ms, simulated 40,494.9 ms when every stage holds 2 + 6 layers).

Paths ("two-stage" paths of the pair (a, b) = (P-1, 0)). Enter an op x of stage a or b through
x's dependency chain (the forwards of x's micro-batch through every earlier pipeline position,
for a backward also the backwards down to it), walk along the pair's ops, each step either
program order on one stage or a data edge between the two stages (p2p when it crosses), reach an
op y and leave through the ops that depend on y (:func:`two_stage_paths`). Every step is an edge
of the event simulation's dependency graph (an op starts after its data dependency ends, + p2p
across stages, and after the previous op of its stage), so the path's length is <= the step time
of every layout (cost-model reference §6.1; the same argument as
:func:`autotune.tuner.bounds._paths.critical_path`). The one-stay paths of a and b are among them
(a walk that never crosses).

Bound. Only (x, y) whose two chains together run every mini-stage of the other stages at least
once ("no-skip") are kept. Then, with d = F + B (+ replay) per mini-stage and W = Σ_all d (one
micro-batch's chain), such a path's length is >= W − d_a − d_b + G(c_a, c_b), where G is the
path's length on the pair alone, Σ_pair counts · (F, B without replay) + hops · p2p (replay >= 0 is
dropped there), a function of the two stages' configurations only. So T >= W + E_w(c_a, c_b) with
E_w = max over the kept paths of G − cost_a − cost_b (cost = F + B + least replay, the device DP's
share of W), beside the device DP's one-stay terms T >= W + E(c_p). For a threshold ε on the max of
all E terms the least W is a knapsack over the stages 1..P-2 (state: layers placed) closed by the
pairs (c_{P-1}, c_0) whose E, E and E_w are <= ε; the bound is min over ε of W(ε) + ε, and ε only
needs the finitely many E values (a layout whose max is e* is feasible at ε = e*), so it is exact
for this family over integer splits. W(ε) falls as ε grows, so an interval [ε_i, ε_j] of
thresholds is worth at least W(ε_j) + ε_i: a best-first bisection over the sorted E values
evaluates W at most :data:`MAX_EVALS` times and returns the least of its values and of the
intervals it did not split (a bound at any stop).

Relaxations (each only lowers the bound): the device DP's stage tables — layer kinds by position,
a free recompute class per layer, the least replay that fits each live-count vector, each
configuration pruned when even its no-replay one-stay path exceeds the incumbent (so the result
is min(bound, incumbent), as the device DP's) — and, in G, no replay. The device DP's joint replay
pass and its last-stage skipping paths are not used: on rows where those raise the device DP
(memory-bound ones) this bound is below it and ``tighten`` keeps the device DP's.

Measured (incumbent = the search's answer; CPU s on top of the device DP's stage tables, which
are memoised: :func:`autotune.tuner.bounds.device_dp.stage_tables`): P16 V2 m64 L128 dense loose
31,018.0 (device DP) → 31,126.2 ms in 0.12–0.15 s (the search reported 31,044.3 from the stage DP:
gap 3.20 % → 2.93 %); MoE loose 17,580.7 → 17,587.7 ms; dense tight, MoE tight, the 96L pp16 vpp2
less-memory row and TeleChat2 96L pp8 vpp3 stay at the device DP's value (this bound alone is +2 to
+7 ms over the device DP's first pass, below its joint pass), 0.06–0.15 s each.

What the family still misses (measured on the rows above): paths that skip the light chunk of the
stages in between and stay on several stages. On dense loose the layouts the DP picks next keep
both end stages balanced and unbalance the middle ones ([[5 5 1 1 1 1 2 2 2 2 3 3 3 3 4 4], [4 4 7 7
7 7 6 6 6 6 5 5 5 5 4 2]] simulates to 40,153 ms; its critical path stays on stages 1, 2, 5 and 9
and runs only chunk 1 elsewhere). No-skip two-stage paths of the adjacent pairs (p, p+1) and of
the pairs (p, P-1), coupled in the same kind of DP, add nothing there (31,126.2 ms either way). On
the less-memory row the answer's critical path stays on stage 1 and runs chunk 1 of every other
stage twice and chunk 0's backwards of stages 2..15 not at all: a separable sum of its own
(Σ_q F0 + 2·F1 + 2·B1), which a DP would have to carry beside W.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from autotune.cost.simulate import CompiledSchedule
from autotune.tuner.bounds._base import BoundContext, BoundOutcome
from autotune.tuner.bounds._paths import data_children, dependency_chain
from autotune.tuner.bounds._relax import integer_setup
from autotune.tuner.bounds.device_dp import MAX_CONFIGS, stage_tables
from autotune.tuner.problem import Problem

#: Work cap: evaluations of W(ε) (one knapsack over the middle stages each) in the threshold
#: bisection; past it the intervals not split count with their lower value (a weaker bound).
MAX_EVALS = 48
#: Work cap of the two-stage path DP: walks × ops of the pair × configurations of a × of b
#: (each op is a few passes over the [Ma, Mb] table: ~12 ns a unit, e.g. 1.4e8 units in 1.7 s on
#: the pp 2 config of :func:`pair_lengths`'s docstring). Past it the bound is not computed (None).
PAIR_WORK = 400_000_000
#: The two-stage path DP checks its deadline every this many ops (each a pass over its [Ma, Mb]
#: table: a few ms on the largest tables it takes).
CLOCK_EVERY = 8


@dataclass(frozen=True)
class _Group:
    """Entries of a two-stage walk that share their compatible exits: per entry class its pair
    counts C [2 stages, 2 (F, B), V] of the entry chain, hops, and its ops (local indices); per
    compatible exit class the same for the exit chain."""

    entries: tuple[tuple[np.ndarray, int, np.ndarray], ...]
    exits: tuple[tuple[np.ndarray, int, np.ndarray], ...]


@dataclass(frozen=True)
class TwoStagePaths:
    """The two-stage paths of a stage pair (a, b) of a compiled schedule (see module docstring).

    Attributes:
        a, b: the two stages; ops: int [n'] op ids of both stages in a topological order;
        side: int [n'] 0 on a, 1 on b; chunk: int [n']; fwd: bool [n'];
        prev: int [n'] local index of the previous op on the same stage (-1: none);
        dep: int [n'] local index of the data dependency when it is on the other stage of the pair
            (-1: none or off the pair); cross: float [n'] 1.0 when that dependency crosses stages;
        groups: the (entries, compatible exits) groups (:class:`_Group`); k: ``seq_split_num``.
    """

    a: int
    b: int
    ops: np.ndarray
    side: np.ndarray
    chunk: np.ndarray
    fwd: np.ndarray
    prev: np.ndarray
    dep: np.ndarray
    cross: np.ndarray
    groups: tuple[_Group, ...]
    k: int


def two_stage_paths(cs: CompiledSchedule, a: int, b: int) -> TwoStagePaths:
    """The walks of the pair (a, b) (a != b) with their no-skip entry and exit chains.

    An entry class is (the other stages' mini-stages its chain runs, its counts on a and b, its
    hops); likewise an exit class. An entry and an exit are compatible when their chains together
    run every forward and backward mini-stage off the pair at least once. Entries with the same set
    of compatible exits share one walk (the walk is a max-plus recursion, so merging their starts is
    exact).

    Raises:
        ValueError: the schedule splits the backward (B/W ops), or a == b.
    """
    if cs.split_bw:
        raise ValueError("two-stage paths need a schedule that runs the whole backward as one op")
    if a == b:
        raise ValueError("a two-stage path needs two stages")
    P, V, n = cs.P, cs.V, cs.num_ops
    dep, fwd, chunk, stage, cross = cs.dep, cs.fwd, cs.chunk, cs.stage, cs.cross
    topo = np.asarray(cs.topo, dtype=np.int64)
    ops = topo[(stage[topo] == a) | (stage[topo] == b)]
    loc = {int(o): i for i, o in enumerate(ops)}
    child = data_children(cs)

    def chain(x: int, up: bool) -> tuple[np.ndarray, int]:
        return dependency_chain(cs, child, x, up)

    # An op's chains depend only on its class (forward or backward, chunk, stage) when every
    # class's dependency and dependant are of one class each with one cross flag (true of the
    # interleaved schedules: one micro-batch's data chain is the same for every micro-batch);
    # checked here, so a schedule where it fails only costs time (chains walked op by op).
    cls = ((~fwd.astype(bool)).astype(np.int64) * V + chunk.astype(np.int64)) * P + stage.astype(np.int64)
    kid = np.full(n, n, dtype=np.int64)
    for j, i in child.items():
        kid[j] = i
    has_d, has_k = dep < n, kid < n
    sig = np.stack([cls, np.where(has_d, cls[np.minimum(dep, n - 1)], -1), np.where(has_d, cross, 0),
                    np.where(has_k, cls[np.minimum(kid, n - 1)], -1),
                    np.where(has_k, cross[np.minimum(kid, n - 1)], 0)], axis=1)
    by_class = np.unique(sig, axis=0).shape[0] == np.unique(cls).size
    memo: dict[tuple[int, bool], tuple[np.ndarray, int]] = {}

    def chain_of(x: int, up: bool) -> tuple[np.ndarray, int]:
        if not by_class:
            return chain(x, up)
        key = (int(cls[x]), up)
        if key not in memo:
            memo[key] = chain(x, up)
        return memo[key]

    off = np.ones((2, V, P), dtype=bool)
    off[:, :, [a, b]] = False
    ent: dict[tuple, list] = {}
    ext: dict[tuple, list] = {}
    for i, o in enumerate(ops):
        for up, table in ((True, ent), (False, ext)):
            C, h = chain_of(int(o), up)
            cover = C[off] >= 1
            pair = np.stack([C[:, :, a], C[:, :, b]])  # [2, 2, V]
            key = (cover.tobytes(), pair.tobytes(), h)
            table.setdefault(key, [cover, pair, h, []])[3].append(i)
    ekeys, xkeys = list(ent), list(ext)
    by_exits: dict[tuple[int, ...], list[int]] = {}
    for ei, ek in enumerate(ekeys):
        comp = tuple(xi for xi, xk in enumerate(xkeys) if (ent[ek][0] | ext[xk][0]).all())
        if comp:
            by_exits.setdefault(comp, []).append(ei)
    groups = []
    for comp, es in by_exits.items():
        groups.append(_Group(
            tuple((ent[ekeys[e]][1], ent[ekeys[e]][2], np.asarray(ent[ekeys[e]][3], dtype=np.int64)) for e in es),
            tuple((ext[xkeys[x]][1], ext[xkeys[x]][2], np.asarray(ext[xkeys[x]][3], dtype=np.int64)) for x in comp)))
    side = (stage[ops] == b).astype(np.int64)
    prev = np.full(ops.size, -1, dtype=np.int64)
    dl = np.full(ops.size, -1, dtype=np.int64)
    for i, o in enumerate(ops):
        if cs.prev[o] < n:
            prev[i] = loc[int(cs.prev[o])]
        d = int(dep[o])
        if d < n and d in loc and stage[d] != stage[o]:
            dl[i] = loc[d]
    return TwoStagePaths(a, b, ops, side, chunk[ops].astype(np.int64), fwd[ops].astype(bool), prev, dl,
                         cross[ops].astype(np.float64), tuple(groups), int(cs.k))


def pair_lengths(tp: TwoStagePaths, Fa: np.ndarray, Ba: np.ndarray, Fb: np.ndarray, Bb: np.ndarray,
                 p2p_ms: float, deadline: float | None = None) -> np.ndarray | None:
    """G [Ma, Mb] (ms): the longest kept two-stage path's length on the pair alone, Σ_pair counts ·
    durations + hops · p2p_ms, for every configuration of stage a (forward / backward ms per
    micro-batch and chunk ``Fa``, ``Ba`` float [Ma, V]) against every one of b (``Fb``, ``Bb``
    [Mb, V]); -inf where no kept path exists. An op runs 1 / ``seq_split_num`` of its mini-stage's
    micro-batch time (as in the simulation); a hop costs the whole p2p_ms.

    None when ``deadline`` (time.monotonic()) passes during the walks (checked every
    :data:`CLOCK_EVERY` ops): each op is a few passes over the [Ma, Mb] table, and on MindFormers'
    r0.6.1 bloom 7.1B demo (pp 2, m 2, 30 layers: 1,316 × 4,495 configurations) one call took
    4.5 s, so that a ``--timeout 10`` search ended at 11.7-12.3 s; with the tables reused (below)
    it takes 1.7 s, with the same values to the bit."""
    k = tp.k
    Ma, Mb = Fa.shape[0], Fb.shape[0]
    dur_a = np.stack([Fa, Ba]) / k  # [2, Ma, V] by (F, B)
    dur_b = np.stack([Fb, Bb]) / k

    def terms(entries) -> dict[int, list[tuple[np.ndarray, np.ndarray, float]]]:
        """op -> the (a's part [Ma], b's part [Mb], hops · p2p_ms) of each entry / exit at it."""
        out: dict[int, list[tuple[np.ndarray, np.ndarray, float]]] = {}
        for pair, hops, idx in entries:
            t = (np.einsum("kv,kmv->m", pair[0], dur_a), np.einsum("kv,kmv->m", pair[1], dur_b), hops * p2p_ms)
            for i in idx.tolist():
                out.setdefault(i, []).append(t)
        return out

    # [Ma, Mb] tables (~50 MB each at ~1,300 × 4,500 configurations) are reused, not allocated
    # per op: glibc serves blocks that large with fresh mmapped pages, zero-filled on each use
    # (a pp 2 config's one call took 4.5 s, over half of it page faults charged as system time)
    pool: list[np.ndarray] = []
    tmp = np.empty((Ma, Mb))

    def take() -> np.ndarray:
        return pool.pop() if pool else np.empty((Ma, Mb))

    def outer(t: tuple[np.ndarray, np.ndarray, float], out: np.ndarray) -> np.ndarray:
        """out = a's part + b's part + hops' ms, summed in that order (as a broadcast sum)."""
        np.add(t[0][:, None], t[1][None, :], out=out)
        out += t[2]
        return out

    n = tp.ops.size
    uses = np.zeros(n, dtype=np.int64)  # how many later ops read each op's value
    for i in range(n):
        if tp.prev[i] >= 0:
            uses[tp.prev[i]] += 1
        if tp.dep[i] >= 0:
            uses[tp.dep[i]] += 1
    kind = np.where(tp.fwd, 0, 1)
    best = np.full((Ma, Mb), -np.inf)
    for g in tp.groups:
        start = terms(g.entries)
        exit_at = terms(g.exits)
        first = min(start)
        val: dict[int, np.ndarray] = {}
        left = uses.copy()
        for i in range(first, n):
            if deadline is not None and i % CLOCK_EVERY == 0 and time.monotonic() > deadline:
                return None
            cand = None  # the longest path into op i: its entries' and its predecessors' values
            for t in start.get(i, ()):
                if cand is None:
                    cand = outer(t, take())
                else:
                    np.maximum(cand, outer(t, tmp), out=cand)
            for j, hop in ((tp.prev[i], 0.0), (tp.dep[i], tp.cross[i] * p2p_ms)):
                if j >= 0 and j in val:
                    x = val[j]
                    if cand is None:
                        cand = take()
                        if hop:
                            np.add(x, hop, out=cand)
                        else:
                            np.copyto(cand, x)
                    elif hop:
                        np.maximum(cand, np.add(x, hop, out=tmp), out=cand)
                    else:
                        np.maximum(cand, x, out=cand)
                    left[j] -= 1
                    if left[j] == 0:
                        pool.append(val.pop(j))
            if cand is None:
                continue
            d = dur_a[kind[i], :, tp.chunk[i]][:, None] if tp.side[i] == 0 else dur_b[kind[i], :, tp.chunk[i]][None, :]
            cand += d
            for t in exit_at.get(i, ()):  # v + max over exits = max over exits of v + exit (exactly)
                np.maximum(best, np.add(cand, outer(t, tmp), out=tmp), out=best)
            if left[i] > 0:
                val[i] = cand
            else:
                pool.append(cand)
    return best


def pair_work(tp: TwoStagePaths, Ma: int, Mb: int) -> int:
    """Array elements :func:`pair_lengths` touches (walks × ops × Ma × Mb): its work cap."""
    return len(tp.groups) * int(tp.ops.size) * Ma * Mb


@dataclass
class WrapDPBound:
    """Result of :func:`wrap_dp_bound`: the bound (ms), the thresholds ε (distinct E values), the
    W(ε) evaluations done and the configurations of the last and the first stage."""

    bound_ms: float
    thresholds: int
    evals: int
    configs_last: int
    configs_first: int


def wrap_dp_bound(problem: Problem, V: int, *, upper_ms: float | None, lower_ms: float | None = None,
                  max_configs: int = MAX_CONFIGS, max_evals: int = MAX_EVALS,
                  pair_work_cap: int = PAIR_WORK, deadline: float | None = None) -> WrapDPBound | None:
    """Lower bound (ms) on the step time of every memory-feasible layout with pp_interleave_num V
    whose step time is <= ``upper_ms`` (a feasible step time: the result is min(bound, upper_ms),
    a bound on the optimum whenever some layout reaches ``upper_ms``). See the module docstring.

    Args:
        problem: the tuning problem; V: pp_interleave_num (> 1).
        upper_ms: the incumbent (ms); lower_ms: a bound already proven (ms) or None: the threshold
            search stops once its best value is at or below it (the result then cannot raise it;
            it is still a bound).
        max_configs, max_evals, pair_work_cap: work caps (see :data:`MAX_EVALS`, :data:`PAIR_WORK`).
        deadline: time.monotonic() limit, or None: the stage tables stop there (their own rule,
            :func:`~autotune.tuner.bounds.device_dp.stage_tables`), nothing starts past it, and
            the threshold search keeps the bound its open intervals prove (as at ``max_evals``).

    Returns None where it does not apply (V = 1, P = 1, a schedule that splits B/W, non-default
    pipeline positions, no finite ``upper_ms``), when a work cap stops the tables or the pair DP,
    or when the deadline passes before the threshold search starts. (It ran 3.5-4 s past a 1 s
    deadline on a pp 32 × vpp 4 × m 256 config before it took one: the time-left phase of a
    ``--timeout 10`` search then ended 2 s late.)
    """
    def late() -> bool:
        return deadline is not None and time.monotonic() > deadline

    if upper_ms is None or not np.isfinite(upper_ms) or V < 2 or problem.P < 2:
        return None
    upper = float(upper_ms)
    out = stage_tables(problem, V, upper, max_configs, deadline)
    if out is None or late():
        return None
    stages, _, su, _ = out
    P, N = problem.P, problem.N
    first, last = stages[0], stages[-1]
    if any(st.n.shape[0] == 0 for st in stages):
        return WrapDPBound(upper, 0, 0, last.n.shape[0], first.n.shape[0])
    cs = su.cs
    pair_ops = sum(len(cs.order[s]) for s in (P - 1, 0))
    if pair_ops * last.n.shape[0] * first.n.shape[0] > pair_work_cap:  # one walk at least
        return None
    tp = two_stage_paths(cs, P - 1, 0)
    if pair_work(tp, last.n.shape[0], first.n.shape[0]) > pair_work_cap:
        return None
    if late():
        return None
    G = pair_lengths(tp, last.F, last.B, first.F, first.B, su.p2p_ms, deadline)
    if G is None:
        return None
    Ew = G - last.cost[:, None] - first.cost[None, :]  # [ML, M0]; -inf: no kept path
    vals = [st.E[np.isfinite(st.E)] for st in stages] + [Ew[np.isfinite(Ew)]]
    S = np.unique(np.concatenate(vals))
    if S.size == 0:
        return WrapDPBound(upper, 0, 0, last.n.shape[0], first.n.shape[0])
    mid = stages[1:P - 1]
    rL = N - last.layers[:, None] - first.layers[None, :]  # layers left for the middle stages
    cost_pair = last.cost[:, None] + first.cost[None, :]

    def allowed(E: np.ndarray, eps: float) -> np.ndarray:
        return E <= eps + 1e-9 * max(1.0, abs(eps))

    def W(eps: float) -> float:
        D = np.full(N + 1, np.inf)
        D[0] = 0.0
        for st in mid:
            ok = np.flatnonzero(allowed(st.E, eps))
            new = np.full(N + 1, np.inf)
            L, c = st.layers[ok], st.cost[ok]
            for l in np.unique(L):
                if l <= N:
                    np.minimum(new[l:], D[:N + 1 - l] + c[L == l].min(), out=new[l:])
            D = new
        A = allowed(last.E, eps)[:, None] & allowed(first.E, eps)[None, :] & allowed(Ew, eps) & (rL >= 0)
        if not A.any():
            return float("inf")
        return float((cost_pair[A] + D[rL[A]]).min())

    if late():
        return None
    stop = -np.inf if lower_ms is None else float(lower_ms)
    value, evals = _threshold_search(W, S, upper, stop, lambda n: n >= max_evals or late())
    return WrapDPBound(value, int(S.size), evals, last.n.shape[0], first.n.shape[0])


def _threshold_search(W: Callable[[float], float], S: np.ndarray, upper: float, stop: float,
                      spent: Callable[[int], bool]) -> tuple[float, int]:
    """min over the thresholds eps in S (ascending) of W(eps) + eps, W non-increasing in eps, by a
    best-first bisection: (its value, capped at ``upper``, and the W evaluations made). An interval
    whose lower value cannot beat the best so far is dropped; once the best is at or below
    ``stop`` (a bound already proven) or ``spent(evaluations)`` (the work cap or the clock), each
    open interval keeps its lower value, so the result is a bound whenever it stops."""
    cache: dict[int, float] = {}

    def h(i: int) -> float:
        if i not in cache:
            cache[i] = W(float(S[i]))
        return cache[i]

    K = S.size
    best = min(upper, h(K - 1) + float(S[-1]))
    todo = [(0, K - 1)]
    left: list[float] = []
    while todo:
        # best-first: the interval with the least lower value
        todo.sort(key=lambda t: h(t[1]) + float(S[t[0]]), reverse=True)
        i, j = todo.pop()
        lb = h(j) + float(S[i])
        if lb >= best:
            continue
        if best <= stop or spent(len(cache)):
            left.append(lb)
            continue
        if j - i <= 1:
            best = min(best, h(i) + float(S[i]))
            continue
        mid_k = (i + j) // 2
        best = min(best, h(mid_k) + float(S[mid_k]))
        todo += [(i, mid_k), (mid_k, j)]
    return min([best] + left), len(cache)


@dataclass(frozen=True)
class WrapDP:
    """:func:`wrap_dp_bound` as a :class:`~autotune.tuner.bounds.LowerBound` (V > 1, schedules with
    whole backward ops and chunk-major positions; needs an incumbent ``ctx.upper_ms``)."""

    name: str = "wrap-pair DP"

    def applies(self, problem: Problem, V: int) -> bool:
        return V > 1 and problem.P > 1 and integer_setup(problem, V) is not None

    def bound(self, problem: Problem, V: int, ctx: BoundContext) -> BoundOutcome | None:
        wb = wrap_dp_bound(problem, V, upper_ms=ctx.upper_ms, lower_ms=ctx.lower_ms, deadline=ctx.deadline)
        if wb is None:
            return None
        return BoundOutcome(wb.bound_ms, None, {"wrap evals": wb.evals})
