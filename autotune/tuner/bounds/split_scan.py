"""pp_interleave_num 1 solved split by split: every layer split with its least-replay recompute,
simulated, best first (pure numpy, no Optuna; issue 17).

Why a split's optimum is one layout. With V = 1 every stage runs one chunk: its ops are the
forwards and backwards of one mini-stage. Recompute changes only the backward's duration (its
replay) and the stage's peak, which depends on the stage's own column alone; the simulated step
time is monotone non-decreasing in every op duration (a max-plus system: cost-model reference
§6.2, :mod:`autotune.tuner.exact`). So the fastest fitting layout of a split gives every stage
the fitting recompute with the least replay, found per stage by the exact fit
(:func:`autotune.tuner.fit.fit_exact`: every (full, select, comm) count of the mini-stage,
undominated on (memory rows, replay)), and simulating it gives the split's optimum. Where the
exact fit falls back to its greedy (a mini-stage with more options than
:data:`~autotune.tuner.fit.EXACT_FIT_MAX_OPTS`), the split is bounded by its step time without
recompute instead, a weaker value that is still a bound.

Best first. A split's step time without recompute (memory ignored) is at most its optimum
(durations only grow), so splits are visited in that order, in batches of :data:`BATCH`, and the
scan stops once that value reaches the best layout found or the incumbent ``upper_ms``, once the
bound is within the target gap of the best layout, at :data:`MAX_VISITED` splits, or at the
deadline. The bound is the least of the best layout found, the incumbent and the next split's
value without recompute: every split below it was solved (anytime: a cut scan still proves
that). It is kept :data:`SAFETY` below (the exact fit keeps the options undominated at a
mini-stage's canonical first layer, which differ from its own only where two options' costs tie
within rounding).

When. V = 1, the schedule runs the whole backward as one op (not B/W-split), and V = 1 has at
most :data:`MAX_SPLITS` splits (pp 2: N − 1 of them; pp 4 × 64 layers about 40,000 within the
offset bounds): the path DP's relaxation (recompute classes free) stops up to ~1 % under the
optimum there. Measured on the corpus's Qwen2.5-32B 32k (pp 2, 64 layers, m 128): the path DP
568,403.0 ms, this 573,008.6 ms (the even split, the search's answer: proven the V = 1 optimum).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from autotune.cost.budget import excess_mib
from autotune.cost.simulate import compile_schedule
from autotune.tuner.bounds._base import BoundContext, BoundOutcome
from autotune.tuner.fit import fit_cache, fit_exact
from autotune.tuner.problem import Candidate, Problem, compositions, count_splits_v, first_min

#: Most splits of V = 1 for which the scan applies (their step times without recompute are
#: simulated at once).
MAX_SPLITS = 50_000
#: Most splits one scan solves (fit + simulate); past it the bound is the next split's value.
MAX_VISITED = 2_000
#: Splits solved per batch.
BATCH = 32
#: Relative margin taken off the bound (rounding of the exact fit's option filter: ties of option
#: costs summed over a few dozen layers, ~1e-14 relative). Below the search's own tolerance
#: (:data:`~autotune.tuner.problem.REL_TOL`, 1e-9), so a V = 1 the scan solved reads as one that
#: cannot beat its optimum (:func:`autotune.tuner.solve.can_win`).
SAFETY = 1e-10


@dataclass(frozen=True)
class SplitScanResult:
    """:func:`split_scan_bound`'s result: the bound (ms; +inf when no split fits), the fastest
    fitting layout found (or None), the splits solved and whether the scan visited every split
    below the bound (``complete``; False when the visit cap or the deadline stopped it)."""

    bound_ms: float
    best: Candidate | None
    solved: int
    complete: bool


def split_scan_bound(problem: Problem, *, upper_ms: float | None = None, deadline: float | None = None,
                     stop_gap: float | None = None, lower_ms: float | None = None) -> SplitScanResult | None:
    """The least step time of any fitting V = 1 layout, or a lower bound on it (module docstring).

    Args:
        problem: the tuning problem (V = 1 must be one of its candidates).
        upper_ms: the incumbent (ms): splits whose step time without recompute reaches it are not
            solved (the bound is then at most it).
        deadline: time.monotonic() limit, checked per batch.
        stop_gap: stop once (best − bound) / bound <= this (the search's ``--gap``).
        lower_ms: a bound already proven for V = 1 (ms), or None. Every split's optimum is at least
            it, so the scan can prove more only after solving every split whose step time without
            recompute is at most it: when those are more than :data:`MAX_VISITED`, it does not
            start (None).

    Returns:
        :class:`SplitScanResult`, or None (``lower_ms`` above the reach of the visit cap).
    """
    V, P = 1, problem.P
    lo, hi = problem.bounds(V)
    splits = compositions(problem.N, lo.reshape(-1), hi.reshape(-1)).reshape(-1, V, P)
    if not len(splits):
        return SplitScanResult(float("inf"), None, 0, True)
    z = np.zeros_like(splits)
    lb0 = problem.evaluate(V, splits, z, z, z).step_ms
    order = np.argsort(lb0, kind="stable")
    lb0 = lb0[order]
    if lower_ms is not None and np.searchsorted(lb0, lower_ms, side="right") > MAX_VISITED:
        return None
    cut = np.inf if upper_ms is None else float(upper_ms)
    best: Candidate | None = None
    floor = np.inf  # least no-recompute value of the splits the exact fit could not solve
    memo = fit_cache(problem)
    at, solved = 0, 0
    while at < len(order):
        limit = min(cut, best.step_ms if best is not None else np.inf)
        if lb0[at] >= limit - 1e-9 * max(1.0, abs(limit)):
            at = len(order)  # every split left is at or above the best / the incumbent
            break
        if stop_gap is not None and best is not None:
            lower = min(best.step_ms, float(lb0[at]), floor)
            if lower > 0 and (best.step_ms - lower) / lower <= stop_gap:
                break
        if solved >= MAX_VISITED or (deadline is not None and time.monotonic() > deadline):
            break
        idx = order[at:at + BATCH]
        L = splits[idx]
        inexact = np.zeros((len(idx), P), dtype=bool)
        rec, sel, com, fits = fit_exact(problem, L, memo=memo, deadline=None, inexact=inexact)
        s = problem.evaluate(V, L, rec, sel, com)
        exact = ~inexact.any(axis=1)
        floor = min(floor, float(lb0[at:at + len(idx)][~exact].min(initial=np.inf)))
        # every fitting layout counts, a split's with the greedy's recompute too (not its optimum)
        ok = np.nonzero(fits)[0]
        if len(ok):
            i = int(ok[first_min(s.step_ms[ok])])
            if best is None or s.step_ms[i] < best.step_ms - 1e-9:
                peak = float(s.peak_mib[i].max())
                best = Candidate(V, L[i].copy(), rec[i], sel[i], com[i], float(s.step_ms[i]), peak,
                                 excess_mib(peak, problem.hbm_mib), origin="split-scan-v1")
        at += len(idx)
        solved += len(idx)
    nxt = float(lb0[at]) if at < len(order) else np.inf
    value = min(nxt, floor, cut, best.step_ms if best is not None else np.inf)
    complete = at >= len(order) or nxt >= min(cut, best.step_ms if best is not None else np.inf)
    if np.isfinite(value):
        value -= SAFETY * abs(value)
    return SplitScanResult(float(value), best, solved, bool(complete))


class SplitScan:
    """:func:`split_scan_bound` as a :class:`~autotune.tuner.bounds._base.LowerBound` (V = 1 with
    at most :data:`MAX_SPLITS` splits, a schedule with whole backward ops); its best layout is a
    seed (``BoundOutcome.layouts``)."""

    name = "split scan"

    def applies(self, problem: Problem, V: int) -> bool:
        if V != 1:
            return False
        if compile_schedule(problem.schedule, problem.P, 1, problem.m, problem.seq_split_num).split_bw:
            return False
        return count_splits_v(problem, 1) <= MAX_SPLITS

    def bound(self, problem: Problem, V: int, ctx: BoundContext) -> BoundOutcome | None:
        r = split_scan_bound(problem, upper_ms=ctx.upper_ms, deadline=ctx.deadline, stop_gap=ctx.target_gap,
                             lower_ms=ctx.lower_ms)
        if r is None:
            return BoundOutcome(ctx.lower_ms) if ctx.lower_ms is not None else None
        layouts = (r.best,) if r.best is not None else ()
        split = r.best.layers if r.best is not None else None
        return BoundOutcome(r.bound_ms, split, {"split_scan_solved": r.solved}, layouts=layouts,
                            cut=not r.complete and ctx.deadline is not None and time.monotonic() > ctx.deadline)
