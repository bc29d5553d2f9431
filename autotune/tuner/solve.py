"""Fast solvers that feed the Optuna study: exact enumeration when the space is small, else
solver seeds (even split + cheapest fitting recompute, the lower bound's relaxed split, each
improved by local moves) and the lower bound that certifies the gap (pure numpy, no Optuna)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from autotune.tuner.bounds import lower_bound
from autotune.tuner.device_dp import device_dp_bound
from autotune.tuner.exact import ExactBudgetExceeded, exact_optimum
from autotune.tuner.heuristic import exact_fit_spec, fitted, local_search, polish_recompute
from autotune.tuner.milp_bound import milp_bound, milp_recompute
from autotune.tuner.problem import Candidate, Problem, even_layers

#: Spaces with at most this many layer splits (all V) are enumerated exactly (branch and bound:
#: 20,128 splits of the 16-layer pp4 vpp1-2 benchmark take about 2 s).
EXACT_MAX_SPLITS = 25_000
#: Work budget of the exact enumeration (recompute combinations built + layouts simulated; about
#: 330,000 units per second on one core): a space with few splits but many recompute combinations
#: per stage (12 layers, 2 stages, V up to 4, full/select/comm, tight memory) falls back to the
#: solver path instead of enumerating for minutes. Deterministic (no clock).
EXACT_MAX_WORK = 1_500_000


def count_splits(problem: Problem) -> int:
    """Number of layer splits over all V candidates (a counting DP; never enumerates)."""
    total = 0
    N = problem.N
    for V in problem.vpp_candidates:
        lo, hi = problem.bounds(V)
        ways = np.zeros(N + 1, dtype=object)
        ways[0] = 1
        for a, b in zip(lo.reshape(-1), hi.reshape(-1)):
            nxt = np.zeros(N + 1, dtype=object)
            for x in range(int(a), int(min(b, N)) + 1):
                nxt[x:] = nxt[x:] + ways[:N + 1 - x]
            ways = nxt
        total += int(ways[N])
    return total


@dataclass
class BoundAndSeeds:
    """Seeds to enqueue, the lower bound (ms; +inf when nothing can fit) and whether exact."""

    seeds: list[Candidate]
    bound_ms: float
    exact: bool = False
    notes: list[str] = field(default_factory=list)


#: A V's best layout is given the integer-program recompute polish when it is within this
#: fraction of the incumbent (the polish gained 1.0 % on TeleChat2 vpp3; a V further behind
#: would not catch up).
POLISH_WITHIN = 0.02
#: Local searches run from this many of the best starts (a work cap, not a clock: deterministic).
LOCAL_STARTS = 3
#: Moves per local search.
LOCAL_ITERS = 60
#: Subgradient iterations (and stall patience) of the second bound pass for V > 1 (a work cap).
REFINE_ITERS = 1500
REFINE_PATIENCE = 30


def bound_and_seeds(problem: Problem, seeds: list[Candidate], *,
                    deadline: float | None = None) -> BoundAndSeeds:
    """Exact optimum as the seed and the bound when the space is small; otherwise solver seeds
    and the Lagrangian path bound (:func:`autotune.tuner.bounds.lower_bound`).

    Args:
        problem: the tuning problem.
        seeds: caller's seeds (user config, baselines), kept first.
        deadline: time.monotonic() limit for the local-search seeds.
    """
    out = list(seeds)
    notes: list[str] = []
    if count_splits(problem) <= EXACT_MAX_SPLITS:
        try:
            ex = exact_optimum(problem, max_work=EXACT_MAX_WORK, deadline=deadline)
        except ExactBudgetExceeded as exc:
            notes.append(f"exact enumeration skipped: {exc}")
        else:
            if ex.best is not None:
                out.append(ex.best)
            return BoundAndSeeds(out, ex.best.step_ms if ex.best is not None else float("inf"), True)
    starts = [fitted(problem, V, even_layers(problem.N, problem.P, V)[None], f"even-fit-v{V}")[0]
              for V in problem.vpp_candidates]
    problem.score([c for c in out if not np.isfinite(c.step_ms)])
    feas = [c.step_ms for c in starts + out if c.excess_mib <= 0]
    ub = min(feas) if feas else None
    b = lower_bound(problem, upper_ms=ub)
    relaxed = [fitted(problem, V, lay[None], f"bound-split-v{V}")[0] for V, lay in b.layers_v.items()
               if np.isfinite(b.per_v_ms[V]) and (ub is None or b.per_v_ms[V] < ub)]
    out += starts + relaxed
    # Local moves from the most promising starts, best first; a V whose bound is above the
    # incumbent cannot hold the optimum and is skipped (per-V pruning).
    pool = sorted(starts + relaxed, key=lambda c: c.rank())
    feas_pool = [x.step_ms for x in pool if x.excess_mib <= 0]
    inc = min(feas_pool + ([ub] if ub is not None else [])) if feas_pool or ub is not None else float("inf")
    done = 0
    for c in pool:
        if done >= LOCAL_STARTS or (deadline is not None and time.monotonic() > deadline):
            break
        if b.per_v_ms.get(c.V, 0.0) > inc:
            continue  # this V cannot beat the incumbent (its bound is above it)
        if c.V > 1:
            # interleaved: moves re-fit recompute exactly (least replay per stage, replay on the
            # first / last chunk weighted by EXACT_EDGE_WEIGHT), from the better-fitted start
            fit = exact_fit_spec(c.V)
            ex = fitted(problem, c.V, c.layers[None], c.origin, fit=fit)[0]
            ls = local_search(problem, ex if ex.rank() < c.rank() else c, max_iters=LOCAL_ITERS,
                              deadline=deadline, fit=fit)
            # coordinate descent over stages on the recompute, by simulation
            out += [ls, polish_recompute(problem, ls)]
        else:
            out.append(local_search(problem, c, max_iters=LOCAL_ITERS, deadline=deadline))
        done += 1
    # Recompute polish: the integer program with the split pinned picks each mini-stage's
    # recompute classes (the greedy fit can leave ~1 % on memory-tight problems); the best layout
    # of each V that can still win is polished and kept when it fits and is faster.
    problem.score([c for c in out if not np.isfinite(c.step_ms)])
    for V in problem.vpp_candidates:
        mine = [c for c in out if c.V == V and c.excess_mib <= 0]
        if V < 2 or not mine:
            continue
        c0 = min(mine, key=lambda c: c.step_ms)
        inc = min(c.step_ms for c in out if c.excess_mib <= 0)
        if b.per_v_ms.get(V, 0.0) >= inc or c0.step_ms > inc * (1 + POLISH_WITHIN):
            continue  # this V cannot win, or is too far behind for a recompute polish to help
        if c0.origin.endswith("+polish"):
            continue  # polish_recompute's coordinate descent already tuned it (the integer
            # program's own polish costs seconds there: 6532.6 -> 6528.5 ms on TeleChat2 vpp4)
        pols = [c for c in problem.score(milp_recompute(problem, c0, deadline=deadline)) if c.excess_mib <= 0]
        if pols and min(c.step_ms for c in pols) < c0.step_ms - 1e-9:
            out.append(min(pols, key=lambda c: c.step_ms))
    # Second bound pass for V > 1 (every layout in ``out`` is scored by now), against the
    # incumbent. First the device-by-device DP (autotune.tuner.device_dp: exact over integer
    # splits for the no-skip paths, every stage's replay counted; about a second), so that the
    # integer program starts from it and a V it already settles is skipped.
    feas = [c.step_ms for c in out if c.excess_mib <= 0]
    ub2 = min(feas) if feas else None
    if ub2 is not None:
        for V in problem.vpp_candidates:
            if V > 1 and b.per_v_ms.get(V, 0.0) < ub2:
                dd = device_dp_bound(problem, V, upper_ms=ub2)
                if dd is not None:
                    b.per_v_ms[V] = max(b.per_v_ms[V], dd.bound_ms)
    vs = sorted((V for V in problem.vpp_candidates
                 if V > 1 and (ub2 is None or b.per_v_ms.get(V, 0.0) < ub2)), key=lambda V: b.per_v_ms[V])
    # Then the integer program over layer counts with lazily generated paths
    # (autotune.tuner.milp_bound), seeded with the critical paths of every layout found and the
    # incumbent as a cutoff; where it does not apply (B/W-split schedules) the Lagrangian's column
    # generation pass with the incumbent as the Polyak target.
    refine = []
    for i, V in enumerate(vs):
        # the bound is the minimum over V: once a V processed earlier, or one no pass raises,
        # is at or below this V's bound, raising this one cannot change the minimum
        fixed_v = [W for W in problem.vpp_candidates if W not in vs[i:]]
        if any(b.per_v_ms[W] <= b.per_v_ms[V] for W in fixed_v):
            continue
        mb = milp_bound(problem, V, layouts=[c for c in out if c.V == V], lower_ms=b.per_v_ms[V],
                        upper_ms=ub2, deadline=deadline)
        if mb is None:
            refine.append(V)
            continue
        b.per_v_ms[V] = max(b.per_v_ms[V], mb.bound_ms)
        if mb.split is not None:
            out += fitted(problem, V, mb.split[None], f"milp-split-v{V}")
    if refine:
        from dataclasses import replace

        b2 = lower_bound(replace(problem, vpp_candidates=refine), upper_ms=ub2, iters=REFINE_ITERS,
                         patience=REFINE_PATIENCE, layouts=[c for c in out if c.V in refine],
                         stage_dp=False)  # the first pass ran it; its value is kept below
        for V in refine:
            b.per_v_ms[V] = max(b.per_v_ms[V], b2.per_v_ms[V])
    b.bound_ms = min(b.per_v_ms.values())
    return BoundAndSeeds(out, b.bound_ms, notes=notes)
