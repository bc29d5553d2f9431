"""Exact path-DP lower bound for pp_interleave_num = 1 (cost-model reference §6.1, critical path).

See :func:`path_dp_bound` for the proof. Registered as :class:`PathDP`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from autotune.cost.budget import hbm_cap
from autotune.cost.inputs import NONE
from autotune.cost.simulate import compile_schedule
from autotune.tuner.bounds._base import BoundContext, BoundOutcome
from autotune.tuner.bounds._paths import detour_counts, pair_cycle
from autotune.tuner.bounds._relax import RecomputeFrontiers, live_rows
from autotune.tuner.problem import REL_TOL, Problem
from autotune.tuner.recompute import allowed_classes


#: Past its deadline the bisection stops once its bracket is this narrow (relative; ~10 of the
#: ~25 threshold DPs of a full run, each ~18 ms at pp 64 × 256 layers × m 512).
CUT_REL_TOL = 1e-3


@dataclass
class PathDPBound:
    """Result of :func:`path_dp_bound`: the bound (ms), the relaxed problem's best split int [1, P]
    (the last feasible threshold's), the threshold-DP evaluations done, and whether the deadline
    cut it (``cut``: the value is a weaker bound)."""

    bound_ms: float
    split: np.ndarray | None
    evaluations: int
    cut: bool = False


def _block_tables(problem: Problem, deadline: float | None = None) -> tuple[np.ndarray, np.ndarray, bool]:
    """F[i, j] (fwd ms of layers i..j-1, per micro-batch) and Bmin[p, i, j] (the least backward +
    replay ms of that block on stage p among recompute choices whose kept activation fits; inf when
    none fits, or when the block size breaks stage p's bounds). Head/tail are included on the first
    and last stage.

    Fit test of a block on stage p: const + Σ static + Σ static_delta(class) + ν·(Σ act(class) +
    end act) (+ W) <= cap, for the largest forward row's live count ν (W = 0) and the largest
    backward row's (W = the head's / tail's workspace, which the backward's workspace, a max over
    the mini-stage, is at least; the layers' own workspace dropped): every row of the peak must
    fit, so the block's least replay is the largest over the two. Without static deltas the
    frontier over Σ act is shared by all stages (budget (cap − const − Σ static)/ν − end act);
    with them (``RecomputeOption.static_delta_mib``, negative under
    parallel_optimizer_comm_recompute) each distinct ν gets the frontier over
    Σ (ν·act + static_delta), so the assumed fit is exactly the real one, never stricter.

    ``deadline`` (time.monotonic()): the stages met after it get Bmin without the activation fit,
    the backward with no replay (and the static memory test): a smaller Bmin, so the bound stays
    a proof, only weaker (the third value: whether that happened). The fronts cost 0.3 CPU s a
    stage on pp 64 × 128 layers with DeepSeek-V3's static deltas (one front per live count), 20 s
    for the 64 stages."""
    pa, P, N = problem.pa, problem.P, problem.N
    has_sd = pa.static_dc is not None and bool(np.any(pa.static_dc[:, allowed_classes(problem.kinds)]))
    frontiers: dict[float | None, RecomputeFrontiers] = {}

    def frontier_for(nu: float | None) -> RecomputeFrontiers:
        if nu not in frontiers:
            frontiers[nu] = RecomputeFrontiers(pa, problem.kinds, N, nu)
        return frontiers[nu]
    cs = compile_schedule(problem.schedule, P, 1, problem.m, problem.seq_split_num)
    kp = pa.kind_prefix.astype(np.int64)  # K, N+1
    cnt = kp[:, None, :] - kp[:, :, None]  # K, i, j
    fwd = np.einsum("k,kij->ij", pa.fwd_k, cnt)
    bwd0 = np.einsum("k,kij->ij", pa.bwd_kc[:, NONE], cnt)
    static = np.einsum("k,kij->ij", pa.static_k, cnt)
    size = np.arange(N + 1)[None, :] - np.arange(N + 1)[:, None]
    lo, hi = problem.bounds(1)
    hf, hb, ha, hs = pa.head.fwd_ms, pa.head.bwd_ms, pa.head.act_mib, pa.head.static_mib
    tf, tb, ta, ts = pa.tail.fwd_ms, pa.tail.bwd_ms, pa.tail.act_mib, pa.tail.static_mib
    F = np.where(size >= 0, fwd, np.inf)
    Bmin = np.full((P, N + 1, N + 1), np.inf)
    ii, jj = np.nonzero(size >= 0)
    keys = [tuple(int(x) for x in cnt[:, i, j]) for i, j in zip(ii, jj)]
    groups: dict[tuple[int, ...], list[int]] = {}
    for q, key in enumerate(keys):
        groups.setdefault(key, []).append(q)
    cut = False
    for p in range(P):
        const = pa.stage_const_mib + (hs if p == 0 else 0.0) + (ts if p == P - 1 else 0.0)
        end_act = (ha if p == 0 else 0.0) + (ta if p == P - 1 else 0.0)
        end_b = (hb if p == 0 else 0.0) + (tb if p == P - 1 else 0.0)
        # a backward holds its mini-stage's workspace, a max over its layers and head / tail: >= the
        # head's / tail's (the LM head's logits on the last stage, often GBs at long sequences)
        end_ws = max(pa.head.ws_mib if p == 0 else 0.0, pa.tail.ws_mib if p == P - 1 else 0.0)
        room = hbm_cap(problem.hbm_mib) - const - static[ii, jj]
        extra = np.zeros(ii.size)
        rows, held = live_rows(cs, p, np.array([end_ws]))  # V = 1: one live count per row
        if deadline is not None and time.monotonic() > deadline:
            rows, cut = rows[:0], True  # past the deadline: no activation fit (no replay), a weaker proof
        for nu, ws in zip(rows[:, 0].tolist(), held.tolist()):  # every row must fit: the largest
            extra = np.maximum(extra, _least_extra(frontier_for(nu if has_sd else None), groups, room - ws,
                                                   nu, end_act, has_sd))
        ok = (size[ii, jj] >= lo[0, p]) & (size[ii, jj] <= hi[0, p]) & ((room >= 0) | has_sd)
        Bmin[p, ii, jj] = np.where(ok, bwd0[ii, jj] + extra + end_b, np.inf)
    Fp = np.broadcast_to(F, (P, N + 1, N + 1)).copy()
    Fp[0] += hf
    Fp[-1] += tf
    return Fp, Bmin, cut



def _least_extra(fr: RecomputeFrontiers, groups: dict[tuple[int, ...], list[int]], room: np.ndarray, nu: float,
                 end_act: float, has_sd: bool) -> np.ndarray:
    """float [Q]: the least replay ms of each block (``groups``: layer-kind counts -> block indices)
    whose ν·(Σ act + end act) (+ Σ static delta) fits ``room`` (MiB, float [Q]); +inf where none."""
    if has_sd:
        budget = room - nu * end_act
    else:
        budget = (room / nu if nu > 0 else np.where(room >= 0, np.inf, -np.inf)) - end_act
    extra = np.full(room.size, np.inf)
    for key, qs in groups.items():
        qs_a = np.asarray(qs)
        extra[qs_a] = fr.min_extra(key, budget[qs_a])
    return extra


def path_dp_bound(problem: Problem, *, upper_ms: float | None = None, rel_tol: float = 1e-7,
                  deadline: float | None = None, lower_ms: float | None = None) -> PathDPBound:
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
    pair path of :func:`pair_cycle` (prefix + its length), which adds the p2p latency paid per
    micro-batch in 1F1B's steady state; the DP stays exact because every constraint grows with the
    prefix.

    ``deadline`` (time.monotonic(), None: none): past it the block tables' activation fit stops
    (:func:`_block_tables`), the detour paths not yet added are left out and the bisection stops
    once the bracket is within :data:`CUT_REL_TOL` (``cut``: the value, the lower end of the
    bracket, is still a bound, a weaker one); a bisection that starts past it starts from
    ``lower_ms`` (a bound proven before, ms), not from 0 (~7 threshold DPs instead of ~20 at pp 64
    × m 512). Without a deadline every step runs to its end.

    Raises:
        ValueError: the problem has no pp_interleave_num 1 candidate.
    """
    if 1 not in problem.vpp_candidates:
        raise ValueError("path_dp_bound needs pp_interleave_num 1 among the candidates")
    P = problem.P
    pathw, stepw, pairw, cut = _path_weights(problem, deadline)
    finite = pathw[np.isfinite(pathw)]
    if finite.size == 0:
        return PathDPBound(float("inf"), None, 0)
    lo_T = 0.0
    hi_T = float(upper_ms) if upper_ms is not None and np.isfinite(upper_ms) else float(finite.max()) * P
    evals = 0
    ok, split = _feasible(hi_T, pathw, stepw, pairw)
    evals += 1
    while not ok:  # the incumbent may be below the relaxed optimum only if it is infeasible
        lo_T, hi_T = hi_T, hi_T * 2
        ok, split = _feasible(hi_T, pathw, stepw, pairw)
        evals += 1
        if hi_T > 1e15:
            return PathDPBound(float("inf"), None, evals)
    if deadline is not None and lower_ms is not None and time.monotonic() > deadline:
        lo_T = min(max(lo_T, float(lower_ms)), hi_T)  # a proven bound: the bracket's lower end may start there
    while hi_T - lo_T > rel_tol * hi_T:
        if deadline is not None and time.monotonic() > deadline and hi_T - lo_T <= CUT_REL_TOL * hi_T:
            cut = True  # past the deadline: the bracket is left at CUT_REL_TOL
            break
        mid = 0.5 * (lo_T + hi_T)
        ok, s = _feasible(mid, pathw, stepw, pairw)
        evals += 1
        if ok:
            hi_T, split = mid, s
        else:
            lo_T = mid
    return PathDPBound(lo_T, split.reshape(1, P) if split is not None else None, evals, cut)


def _path_weights(problem: Problem, deadline: float | None = None
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray | None, bool]:
    """The DP's weights (ms) for blocks [i, j) of layers on stage p: the longest of its paths
    (entry prefix excluded) pathw [P, N+1, N+1], its contribution to later stages' prefixes stepw
    [P, N+1, N+1], the pair path of the last two stages pairw [i, j] (None without one), and
    whether ``deadline`` cut the block tables' activation fit or left detour paths out (weaker
    weights, still a bound)."""
    P, N = problem.P, problem.N
    cs = compile_schedule(problem.schedule, P, 1, problem.m, problem.seq_split_num)
    k = float(cs.k)
    nF = np.array([np.count_nonzero(cs.fwd[cs.order[p]]) for p in range(P)]) / k
    nB = np.array([np.count_nonzero(~cs.fwd[cs.order[p]]) for p in range(P)]) / k
    p2p = problem.pa.p2p_ms if P > 1 else 0.0
    F, Bmin, cut = _block_tables(problem, deadline)
    pathw = nF[:, None, None] * F + nB[:, None, None] * Bmin + (2 * np.arange(P) * p2p)[:, None, None]
    stepw = (F + Bmin) / k  # contribution to later prefixes
    # detour paths (see detour_counts): r round trips through the stages after p, each at least
    # Suf[j] = forward + backward (no replay) of the layers after p's block [i, j) and the tail
    pa = problem.pa
    kp = pa.kind_prefix.astype(np.float64)
    fb = pa.fwd_k + pa.bwd_kc[:, NONE]
    suf = (fb @ (kp[:, -1:] - kp)) + pa.tail.fwd_ms + pa.tail.bwd_ms  # [N+1] ms per micro-batch
    with np.errstate(invalid="ignore"):
        for p in range(P - 1):
            if deadline is not None and time.monotonic() > deadline:
                cut = True  # the detours of the stages left are not added: weaker weights
                break
            for r, cf_, cb_ in detour_counts(cs, p):
                w = (cf_ * F[p] + cb_ * Bmin[p] + r * suf[None, :]) / k \
                    + (2 * p + 2 * r * (P - 1 - p)) * p2p
                pathw[p] = np.maximum(pathw[p], np.where(np.isfinite(pathw[p]), w, np.inf))
    cyc = pair_cycle(cs) if P >= 2 else None
    if cyc is None:
        return pathw, stepw, None, cut
    s_, L_ = P - 2, P - 1
    # pair path through stages s = P-2 (block [i, j)) and L = P-1 (block [j, N)), i, j free
    last = (cyc.fwd_last * F[L_][:, N] + cyc.bwd_last * Bmin[L_][:, N]) / k
    pairw = (cyc.fwd_s * F[s_] + cyc.bwd_s * Bmin[s_]) / k + last[None, :] + (2 * s_ + cyc.hops) * p2p  # [i, j]
    return pathw, stepw, pairw, cut


def _feasible(T: float, pathw: np.ndarray, stepw: np.ndarray, pairw: np.ndarray | None
              ) -> tuple[bool, np.ndarray | None]:
    """Whether some split keeps every path <= T (ms): the DP over (stage, layers placed) keeping
    the least prefix; returns (feasible, one such split int [P]: at each stage the first block
    whose prefix is within :data:`~autotune.tuner.problem.REL_TOL` of the least, so that near-ties
    go by position at every time scale; its paths may exceed T by that tolerance: a seed, not a
    proof)."""
    P, N = pathw.shape[0], pathw.shape[1] - 1
    D = np.full(N + 1, np.inf)
    D[0] = 0.0
    back = np.zeros((P, N + 1), dtype=np.int64)
    for p in range(P):
        ok = D[:, None] + pathw[p] <= T
        cand = np.where(ok, D[:, None] + stepw[p], np.inf)  # i, j
        if pairw is not None and p == P - 2:
            # only splits whose last two blocks also satisfy the pair path; D[j] then keeps
            # the least prefix among blocks [i, j) meeting it (monotone: exact).
            cand = np.where(D[:, None] + pairw <= T, cand, np.inf)
        D = cand.min(axis=0)
        # the split: among blocks whose prefix is within REL_TOL of the least, the first (ties in
        # exact arithmetic went to whichever rounded lower, so a time scale changed the seed);
        # D keeps the least itself, so the feasibility test and the bound are as before
        near = cand <= (D + REL_TOL * np.abs(np.where(np.isfinite(D), D, 0.0)))[None, :]
        back[p] = np.argmax(near, axis=0)
    if not np.isfinite(D[N]):
        return False, None
    split, j = np.zeros(P, dtype=np.int64), N
    for p in range(P - 1, -1, -1):
        i = int(back[p, j])
        split[p] = j - i
        j = i
    return True, split


@dataclass(frozen=True)
class PathDP:
    """:func:`path_dp_bound` as a :class:`~autotune.tuner.bounds.LowerBound` (V = 1 only); its
    split is the relaxed problem's best split."""

    name: str = "path DP"

    def applies(self, problem: Problem, V: int) -> bool:
        return V == 1

    def bound(self, problem: Problem, V: int, ctx: BoundContext) -> BoundOutcome:
        dp = path_dp_bound(problem, upper_ms=ctx.upper_ms, deadline=ctx.deadline, lower_ms=ctx.lower_ms)
        return BoundOutcome(dp.bound_ms, dp.split, {"evaluations": dp.evaluations}, cut=dp.cut)
