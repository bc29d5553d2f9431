"""Pareto front of step time (ms) vs the largest per-stage peak (MiB) among memory-feasible
configs: ``autotune search --objective time,memory`` (pure numpy, no Optuna).

A point (t, m) is on the front when no feasible config has t' <= t and m' <= m with one strict.
A user choosing a safety margin reads the fastest config whose peak leaves that margin.

- :func:`exact_front` (enumerable problems): the epsilon-constraint method on the exact oracle.
  With budget b = HBM, the exact optimum (t1, q) is the fastest feasible time; lowering the budget
  to just under q and solving again gives the fastest config with a smaller peak, and so on until
  nothing fits. Every front point is reached (a front point (t, m) is the optimum of budget m,
  and every budget between two consecutive answers is visited), so after removing dominated
  points the front is exact — up to peaks closer than ``PEAK_TOL_MIB``, treated as equal.
- :func:`heuristic_front` (large problems): the same budget ladder with the fast solvers (even
  split + cheapest fitting recompute, improved by local moves) at ``ladder`` budgets between the
  least and the full budget, merged with every config the study evaluated. Deterministic, not
  guaranteed complete.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Iterable

import numpy as np

from autotune.cost.dominance import pareto_mask
from autotune.tuner.exact import exact_optimum
from autotune.tuner.fit import fitted
from autotune.tuner.heuristic import local_search
from autotune.tuner.problem import Candidate, Problem, even_layers

#: Peaks (MiB) closer than this are the same memory level for the front.
PEAK_TOL_MIB = 1e-6
#: Most epsilon-constraint steps of :func:`exact_front` (each is one exact solve).
MAX_EXACT_STEPS = 400


def non_dominated(points: Iterable[Any], *, step: Any = lambda c: c.step_ms,
                  peak: Any = lambda c: c.peak_mib) -> list[Any]:
    """The non-dominated items (minimizing step and peak), sorted by step time ascending (peak
    descending). Items with the same (step, peak) within tolerance appear once (the first seen)."""
    items = [x for x in points if np.isfinite(step(x)) and np.isfinite(peak(x))]
    items.sort(key=lambda x: (step(x), peak(x)))
    if not items:
        return []
    keep = pareto_mask(np.asarray([(step(x), peak(x)) for x in items], dtype=np.float64), tol=PEAK_TOL_MIB)
    return [x for x, k in zip(items, keep) if k]


def _with_budget(problem: Problem, hbm_mib: float) -> Problem:
    return replace(problem, hbm_mib=hbm_mib)


def exact_front(problem: Problem, *, max_steps: int = MAX_EXACT_STEPS) -> list[Candidate]:
    """Exact Pareto front of an enumerable problem (module docstring); candidates scored against
    the problem's own budget (``excess_mib`` <= 0). Empty when nothing fits.

    Raises:
        ValueError: the problem has too many splits for the exact oracle.
    """
    found: list[Candidate] = []
    budget = problem.hbm_mib
    for _ in range(max_steps):
        ex = exact_optimum(_with_budget(problem, budget))
        if ex.best is None:
            break
        c = problem.score([ex.best])[0]
        c.origin = "pareto-exact"
        found.append(c)
        budget = c.peak_mib - max(PEAK_TOL_MIB, 1e-9 * abs(c.peak_mib))
    return non_dominated(c for c in found if c.excess_mib <= 0)


def heuristic_front(problem: Problem, evaluated: Iterable[Candidate] = (), *, ladder: int = 8,
                    local_iters: int = 30) -> list[Candidate]:
    """Approximate front from the fast solvers at ``ladder`` budgets (module docstring) merged with
    ``evaluated`` candidates (scored ones; feasible ones kept)."""
    pool = [c for c in evaluated if np.isfinite(c.step_ms) and c.excess_mib <= 0]
    lows = []
    for V in problem.vpp_candidates:
        even = even_layers(problem.N, problem.P, V)
        z = np.zeros_like(even)
        full = Candidate(V, even, even.copy(), z, z, origin="even_full_recompute")
        lows.append(problem.score([full])[0].peak_mib)
    lo = min(lows) if lows else problem.hbm_mib
    hi = problem.hbm_mib
    if not np.isfinite(hi):
        hi = max(c.peak_mib for c in pool) if pool else lo
    budgets = np.linspace(min(lo, hi), hi, max(ladder, 1)) if ladder > 1 else np.array([hi])
    for b in budgets:
        pb = _with_budget(problem, float(b))
        for V in problem.vpp_candidates:
            c = fitted(pb, V, even_layers(problem.N, problem.P, V)[None], f"pareto-b{b:.0f}")[0]
            if c.excess_mib <= 0:
                c = local_search(pb, c, max_iters=local_iters)
            c = problem.score([Candidate(c.V, c.layers, c.rec, c.sel, c.com, origin=c.origin)])[0]
            if c.excess_mib <= 0:
                pool.append(c)
    return non_dominated(pool)
