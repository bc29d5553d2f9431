"""Lower bound for pp_interleave_num > 1: a compact integer program over layer counts whose
dependency paths are generated lazily (solved by HiGHS through :func:`scipy.optimize.milp`).

The stage DP (:mod:`autotune.tuner.stage_dp`) is exact over integer splits but only for one-stay
paths whose counts on other stages it bounds by a three-term pattern; the Lagrangian
(:mod:`autotune.tuner.bounds`) keeps exact counts but prices a convex mix of paths, so its
minimiser is fractional. Here both are kept: the exact count vector of every path in a family,
and integer layer counts.

Model (every relaxation below can only lower the optimum, so its value — or any dual bound of
the branch and bound — is a proof):

    minimise T  over  n[v, p] integer (layers of mini-stage (v, p), the problem's bounds),
                      y[v, p, c] >= 0 real (layers of recompute class c; Σ_c y = n),
    s.t.  Σ n = N;
          for every stage p and every undominated live-count vector w of its schedule
              static_p + Σ_v (n·static + Σ_c y_c (w_v·act_c + static_delta_c)) + w·act_end <= HBM;
          for every path π of the family
              Σ_{v,p} cf_π[v,p]·(n f + end_f) + cb_π[v,p]·(n b0 + Σ_c y_c extra_c + end_b)
              + hops_π·p2p <= T.

Relaxations: the cheapest layer kind per recompute class (componentwise minimum: exact for a
homogeneous model), a free and fractional recompute class per layer (not the "first r layers"
rule), the workspace term of the peak dropped, each live-count vector checked separately — the
same as the stage DP's (see its docstring). A path is any chain of the schedule's dependency
graph (data edges + p2p, program order on a stage), so its length under the real durations is
<= the simulated step time (cost-model reference §6.1; :func:`autotune.tuner.bounds.critical_path`).

Family. It starts with every one-stay path (:func:`autotune.tuner.stage_dp.stage_paths`, with
exact counts) and the longest path of each layout the search already has. After each solve the
longest path of the minimiser's relaxed durations and of each of its single-layer moves joins
(lazy constraint generation). When the minimiser's own longest path is already priced (its length
equals T) and HiGHS proved optimality, the value is the exact optimum of the relaxed problem.

Work is capped by HiGHS nodes weighted by the LP size and by the number of solves (deterministic:
the same problem gives the same bound); a wall-clock deadline is only a safety net.
"""

from __future__ import annotations

import contextlib
import os
import time
from dataclasses import dataclass

import numpy as np

from autotune.cost.inputs import BOTH, COMM, FULL, SELECT
from autotune.tuner.bounds._base import BoundContext, BoundOutcome
from autotune.tuner.bounds._paths import critical_path, one_stay_counts
from autotune.tuner.bounds._relax import integer_setup, undominated
from autotune.tuner.problem import Candidate, Problem
from autotune.tuner.recompute import allowed_classes

#: Work cap over all solves, in HiGHS branch-and-bound nodes × (LP variables × rows)²: measured,
#: a node's time grows about with the square of the LP size (2.5 ms on the 24-mini-stage
#: TeleChat2 problem, 14 ms on its 32-mini-stage vpp4 variant). Deterministic (no clock): 1.5e12
#: gives ~1,400 nodes (~4 s) on the first and ~370 (~5 s) on the second; 48 layers pp5 vpp2
#: converges well inside it (~500 nodes of a small LP).
NODE_WORK = 1.5e12
#: Relative margin taken off HiGHS's dual bound (its MIP feasibility tolerance is 1e-6).
DUAL_SAFETY = 1e-6
#: Work cap of :func:`milp_recompute` (same units as NODE_WORK; the pinned split solves in a few
#: hundred nodes on the benchmark problems).
POLISH_WORK = 2e12
#: Longest-path walks per solve for the minimiser's neighbours (ops × moves; ~1 µs an op).
NEIGHBOUR_OPS = 2_000_000
#: Solves of the lazy loop (each adds the minimiser's and its neighbours' longest paths).
MAX_SOLVES = 12


@dataclass
class MilpBound:
    """Result of :func:`milp_bound`: the bound (ms; +inf when nothing can fit), the relaxed
    minimiser int [V, P] (a seed, not a proof; None when none was found), the family size,
    the solves run and whether the relaxed problem was solved exactly (``converged``)."""

    bound_ms: float
    split: np.ndarray | None
    paths: int
    solves: int
    converged: bool


@contextlib.contextmanager
def _quiet_stdout():
    """HiGHS writes a few debug lines to the C-level stdout even with output off; silence fd 1
    for the solve so that ``--format json`` stays machine-readable."""
    try:
        fd = os.dup(1)
    except OSError:  # no fd 1 (embedded interpreters)
        yield
        return
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 1)
            yield
    finally:
        os.dup2(fd, 1)
        os.close(fd)


def milp_bound(problem: Problem, V: int, *, layouts: list | None = None,
               lower_ms: float | None = None, upper_ms: float | None = None,
               node_work: float = NODE_WORK, max_solves: int = MAX_SOLVES,
               deadline: float | None = None) -> MilpBound | None:
    """Lower bound (ms) on the step time of every memory-feasible layout with pp_interleave_num V.

    See the module docstring for the model. Args:
        problem: the tuning problem; V: pp_interleave_num (>= 2).
        layouts: known layouts (:class:`~autotune.tuner.problem.Candidate`); the longest path of
            each one with this V joins the initial family.
        lower_ms: a bound already proven (T >= it is added; the result is never below it).
        upper_ms: a feasible step time: T <= it is added (prunes the search); when that makes the
            program infeasible, no layout beats ``upper_ms`` and it is returned as the bound.
        node_work, max_solves: work caps (Σ nodes × (variables × rows)² over all solves, solves);
        deadline: time.monotonic() safety limit.

    Returns None when the bound does not apply (V = 1, a schedule that splits B/W, non-default
    pipeline positions) or scipy is missing.
    """
    out = _milp(problem, V, layouts=layouts, lower_ms=lower_ms, upper_ms=upper_ms, node_work=node_work,
                max_solves=max_solves, deadline=deadline)
    return None if out is None else out[0]


def milp_recompute(problem: Problem, cand, *, max_solves: int = MAX_SOLVES,
                   deadline: float | None = None) -> list:
    """The recompute of ``cand``'s layer split chosen by the integer program with the split fixed
    (a polish of the greedy :func:`autotune.tuner.heuristic.fit_recompute`; not a proof).

    Per mini-stage the layers of each recompute class are integers, a class with a workspace
    (full recompute) switches the mini-stage's backward workspace on (binary), head / tail
    workspaces are counted, and select-only and comm-only layers exclude each other, so the
    counts map back onto MindFormers' (recompute, select_recompute, select_comm_recompute):
    full = r, select = r + both + select-only, comm = r + both + comm-only (exact for one layer
    kind; with several kinds the cheapest is modelled, so the caller must re-score).

    Returns unscored :class:`~autotune.tuner.problem.Candidate` s, one per distinct solve answer
    (the last first; the work cap may stop the lazy loop before it converges, so the caller scores
    them all); empty when not applicable or nothing fits the relaxed memory model.
    """
    V = cand.V
    out = _milp(problem, V, layouts=[cand], max_solves=max_solves, deadline=deadline,
                node_work=POLISH_WORK, fixed=np.asarray(cand.layers))
    if out is None:
        return []
    cls = allowed_classes(problem.kinds)
    res = []
    seen = set()
    for yf in reversed(out[1]):  # the last solve first: it priced the most paths
        y = np.rint(yf).astype(np.int64)  # [V, P, C] over allowed classes
        if y.tobytes() in seen:
            continue
        seen.add(y.tobytes())
        cnt = {c: (y[:, :, cls.index(c)] if c in cls else np.zeros_like(y[:, :, 0]))
               for c in (FULL, BOTH, SELECT, COMM)}
        rec = cnt[FULL]
        sel = rec + cnt[BOTH] + cnt[SELECT] if "select" in problem.kinds else np.zeros_like(rec)
        com = rec + cnt[BOTH] + cnt[COMM] if "comm" in problem.kinds else np.zeros_like(rec)
        res.append(Candidate(V, np.asarray(cand.layers).copy(), rec, sel, com,
                             origin=f"{cand.origin}+milp-recompute"))
    return res


def _milp(problem: Problem, V: int, *, layouts: list | None, lower_ms: float | None = None,
          upper_ms: float | None = None, node_work: float, max_solves: int, deadline: float | None,
          fixed: np.ndarray | None = None) -> tuple[MilpBound, list[np.ndarray]] | None:
    """The lazy loop of :func:`milp_bound`; with ``fixed`` (int [V, P]) the split is pinned and
    the recompute classes are modelled exactly (see :func:`milp_recompute`). Returns (result,
    every solve's class counts float [V, P, C], in solve order)."""
    # scipy: a heavy import (~0.6 s), needed only when the integer program runs
    from scipy.optimize import Bounds, LinearConstraint, milp  # noqa: PLC0415
    from scipy.sparse import csr_matrix  # noqa: PLC0415

    su = integer_setup(problem, V)
    if su is None:
        return None
    cs, lay, p2p = su.cs, su.layer, su.p2p_ms
    end_f, end_b, end_a, const_static = su.end_fwd_ms, su.end_bwd_ms, su.end_act_mib, su.const_static_mib
    P, N, k = problem.P, problem.N, cs.k
    C = lay.act_mib.size
    lo, hi = problem.bounds(V)

    exact = fixed is not None
    nn, ny = V * P, V * P * C
    cls = allowed_classes(problem.kinds)
    wsmin = lay.ws_mib  # [C] MiB, cheapest kind per class
    end_ws_mib = su.end_ws_mib
    wcls = [c for c in range(C) if wsmin[c] > 0] if exact else []
    excl = exact and SELECT in cls and COMM in cls
    nu = nn * len(wcls)          # binary: class c present in mini-stage j (its workspace is on)
    nw = nn if wcls else 0       # workspace MiB of mini-stage j
    nx = nn if excl else 0       # binary: select-only (1) or comm-only (0) in mini-stage j
    iu, iw, ix = nn + ny, nn + ny + nu, nn + ny + nu + nw
    nvar = ix + nx + 1
    iT = nvar - 1
    rows: list[np.ndarray] = []
    rlo: list[float] = []
    rhi: list[float] = []

    def add_row(r: np.ndarray, a: float, b: float) -> None:
        rows.append(r)
        rlo.append(a)
        rhi.append(b)

    r = np.zeros(nvar)
    r[:nn] = 1.0
    add_row(r, N, N)
    for j in range(nn):  # Σ_c y = n
        r = np.zeros(nvar)
        r[j] = -1.0
        r[nn + j * C:nn + (j + 1) * C] = 1.0
        add_row(r, 0.0, 0.0)
    cap_j = (np.asarray(fixed) if exact else np.minimum(hi, N)).reshape(-1).astype(np.float64)
    for j in range(nn):
        for t, c in enumerate(wcls):
            r = np.zeros(nvar)
            r[nn + j * C + c] = 1.0
            r[iu + j * len(wcls) + t] = -cap_j[j]
            add_row(r, -np.inf, 0.0)  # y_c <= n·u_c
            r = np.zeros(nvar)
            r[iw + j] = 1.0
            r[iu + j * len(wcls) + t] = -float(wsmin[c])
            add_row(r, 0.0, np.inf)  # ws >= W_c·u_c
        if excl:
            r = np.zeros(nvar)
            r[nn + j * C + cls.index(SELECT)] = 1.0
            r[ix + j] = -cap_j[j]
            add_row(r, -np.inf, 0.0)  # select-only <= n·x
            r = np.zeros(nvar)
            r[nn + j * C + cls.index(COMM)] = 1.0
            r[ix + j] = cap_j[j]
            add_row(r, -np.inf, cap_j[j])  # comm-only <= n·(1 - x)
    if np.isfinite(problem.hbm_mib):
        for p in range(P):
            # after a forward: live activations; during a backward of chunk ch: + its workspace
            groups = [(np.asarray(cs.mem_fwd[p]).reshape(-1, V), None)]
            vecs, chunks = cs.mem_bwd[p]
            if vecs.size:
                groups += [(vecs[chunks == ch].reshape(-1, V), int(ch)) for ch in np.unique(chunks)]
            for vv, ch in groups:
                if vv.size == 0:
                    continue
                for w in undominated(vv.astype(np.float64)) / k:
                    r = np.zeros(nvar)
                    for v in range(V):
                        j = v * P + p
                        r[j] = lay.static_mib
                        r[nn + j * C:nn + (j + 1) * C] = w[v] * lay.act_mib + lay.sdelta_mib
                    room = problem.hbm_mib - const_static[p] - float(w @ end_a[:, p])
                    if ch is not None:
                        if nw:
                            r[iw + ch * P + p] = 1.0
                        else:
                            room -= float(end_ws_mib[ch, p])  # head / tail workspace (a max, so >= it)
                    add_row(r, -np.inf, room)

    seen: set[bytes] = set()
    path_rows: list[np.ndarray] = []
    path_hi: list[float] = []

    def add_path(cf: np.ndarray, cb: np.ndarray, hops: float) -> bool:
        key = np.concatenate([cf.reshape(-1), cb.reshape(-1), [hops]]).round(9).tobytes()
        if key in seen:
            return False
        seen.add(key)
        r = np.zeros(nvar)
        r[:nn] = (cf * lay.fwd_ms + cb * lay.bwd_ms).reshape(-1)
        r[nn:nn + ny] = (cb[:, :, None] * lay.extra_ms[None, None, :]).reshape(-1)
        r[iT] = -1.0
        path_rows.append(r)
        path_hi.append(-float((cf * end_f).sum() + (cb * end_b).sum() + hops * p2p))
        return True

    def durations(n: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return n * lay.fwd_ms + end_f, n * lay.bwd_ms + (y * lay.extra_ms).sum(axis=-1) + end_b

    for stage_rows in one_stay_counts(cs):
        for cf, cb, hops in stage_rows:
            add_path(cf, cb, hops)
    for c in layouts or []:
        if c.V == V:
            n = np.asarray(c.layers, dtype=np.float64)
            y = np.zeros((V, P, C))
            y[:, :, 0] = n  # no replay: the path is what matters, not its length here
            cp = critical_path(cs, *durations(n, y), p2p)
            add_path(cp.cf, cp.cb, cp.hops)

    integ = np.zeros(nvar)
    integ[:nn] = 1
    vlo = np.zeros(nvar)
    vhi = np.full(nvar, np.inf)
    vlo[:nn] = lo.reshape(-1)
    vhi[:nn] = np.minimum(hi, N).reshape(-1)
    vhi[nn:nn + ny] = N
    if exact:
        vlo[:nn] = vhi[:nn] = cap_j
        integ[nn:nn + ny] = 1
        integ[iu:iu + nu] = 1
        vhi[iu:iu + nu] = 1
        vlo[iw:iw + nw] = end_ws_mib.reshape(-1)[:nw]
        integ[ix:ix + nx] = 1
        vhi[ix:ix + nx] = 1
    if lower_ms is not None and np.isfinite(lower_ms):
        vlo[iT] = lower_ms
    has_upper = upper_ms is not None and np.isfinite(upper_ms)
    if has_upper:
        vhi[iT] = upper_ms
    obj = np.zeros(nvar)
    obj[iT] = 1.0
    best = float(lower_ms) if lower_ms is not None and np.isfinite(lower_ms) else 0.0
    split = None
    solves = 0
    converged = False
    all_y: list[np.ndarray] = []
    flo, fhi = lo.reshape(-1), hi.reshape(-1)
    work = 0.0
    while solves < max_solves and work < node_work:
        if deadline is not None and time.monotonic() > deadline:
            break
        A = csr_matrix(np.asarray(rows + path_rows))
        cons = LinearConstraint(A, np.asarray(rlo + [-np.inf] * len(path_rows)), np.asarray(rhi + path_hi))
        size = float(nvar * (len(rows) + len(path_rows))) ** 2
        opts = {"node_limit": max(50, int((node_work - work) / size)), "mip_rel_gap": 1e-6, "disp": False}
        if deadline is not None:
            opts["time_limit"] = max(1.0, deadline - time.monotonic())
        with _quiet_stdout():
            res = milp(obj, integrality=integ, bounds=Bounds(vlo, vhi), constraints=cons, options=opts)
        solves += 1
        work += (int(getattr(res, "mip_node_count", 0) or 0) + 1) * size
        if res.status == 2:  # infeasible: nothing fits, or nothing beats upper_ms
            return MilpBound(float(upper_ms) if has_upper else float("inf"), split,
                             len(path_rows), solves, True), all_y
        dual = getattr(res, "mip_dual_bound", None)
        if res.status == 0 and res.fun is not None:
            dual = res.fun if dual is None else min(float(res.fun), float(dual))
        if dual is not None and np.isfinite(dual):
            # HiGHS proves within its feasibility tolerances (1e-6): keep that much below
            best = max(best, float(dual) - DUAL_SAFETY * max(1.0, abs(float(dual))))
        if res.x is None:
            break
        n = np.rint(res.x[:nn]).reshape(V, P)
        y = np.maximum(res.x[nn:nn + ny].reshape(V, P, C), 0.0)
        all_y.append(y)
        split = n.astype(np.int64)
        fx, bx = durations(n, y)
        cp = critical_path(cs, fx, bx, p2p)
        if res.status == 0 and cp.length <= float(res.fun) * (1 + 1e-7) + 1e-9:
            converged = True
            break
        added = add_path(cp.cf, cp.cb, cp.hops)
        if exact:  # a pinned split has no moves to anticipate
            if not added:
                break
            continue
        if solves >= max_solves or work >= node_work:
            break  # no solve left to use new paths
        # anticipate: the longest paths of the minimiser's single-layer moves (skipped when that
        # would walk more than NEIGHBOUR_OPS ops, e.g. 256 micro-batches)
        flat = split.reshape(-1)
        for a in (range(nn) if cs.num_ops * nn * (nn - 1) <= NEIGHBOUR_OPS else ()):
            if flat[a] - 1 < flo[a]:
                continue
            for b in range(nn):
                if a == b or flat[b] + 1 > fhi[b]:
                    continue
                f2 = flat.astype(np.float64)
                f2[a] -= 1
                f2[b] += 1
                c2 = critical_path(cs, *durations(f2.reshape(V, P), y), p2p)
                if (c2.cf * fx).sum() + (c2.cb * bx).sum() + c2.hops * p2p > float(res.fun) * (1 + 1e-7):
                    added |= add_path(c2.cf, c2.cb, c2.hops)  # violated at the minimiser too
        if not added:
            break
    return MilpBound(best, split, len(path_rows), solves, converged), all_y


@dataclass(frozen=True)
class IntegerProgram:
    """:func:`milp_bound` as a :class:`~autotune.tuner.bounds.LowerBound` (V > 1, schedules with
    whole backward ops and chunk-major positions): the known layouts' critical paths seed its
    family, it starts at ``ctx.lower_ms`` and uses ``ctx.upper_ms`` as a cutoff; its split (the
    relaxed minimiser) is a seed."""

    name: str = "integer program"

    def applies(self, problem: Problem, V: int) -> bool:
        return integer_setup(problem, V) is not None

    def bound(self, problem: Problem, V: int, ctx: BoundContext) -> BoundOutcome | None:
        mb = milp_bound(problem, V, layouts=[c for c in ctx.layouts if c.V == V], lower_ms=ctx.lower_ms,
                        upper_ms=ctx.upper_ms, deadline=ctx.deadline)
        if mb is None:
            return None
        return BoundOutcome(mb.bound_ms, mb.split, {"solves": mb.solves, "paths": mb.paths})
