"""Fast solvers that feed the Optuna study (pure numpy, no Optuna): the exact optimum when the space
is small, else a short pipeline

    propose -> tighten -> improve -> polish -> tighten -> cover -> kick

- propose: the even split with the cheapest fitting recompute, per V; when none fits, also each
  V's least-peak split (:mod:`autotune.tuner.least_peak`);
- tighten: the first bound pass of :data:`autotune.tuner.bounds.REGISTRY` (every V's bound; its
  relaxed splits become seeds too);
- improve: local moves (:mod:`autotune.tuner.heuristic`) from the most promising starts of the V's
  that can still hold the optimum;
- polish: the integer program picks the recompute of each such V's best layout;
- tighten: the later bound passes against the incumbent (their relaxed splits become seeds);
- cover: local searches for the V's those passes leave below the incumbent that had none;
- kick: when the certified gap is still over its target, the iterated local search
  (:func:`~autotune.tuner.kicks.kick_search`: shears and random kicks, each followed by the
  local search) from the best layout found;
- finish: the best layout found gets the 1-opt descent (:func:`~autotune.tuner.heuristic.
  finish_one_opt`), before the later bound passes (a better incumbent prunes them) and again
  after them when their seeds hold a faster layout.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from typing import Callable

import numpy as np

from autotune.cost.budget import fits
from autotune.tuner.bounds import (ANYTIME, REGISTRY, BoundContext, BoundOutcome, Delegate, Pass, WorkFloor,
                                   floor_ms, several_kinds, stage_dp_first, stay_lp_ms, tighten)
from autotune.tuner.bounds.milp import milp_recompute
from autotune.tuner.exact import ExactBudgetExceeded, ExactResult, exact_optimum
from autotune.tuner.fit import fitted, search_fit
from autotune.tuner.heuristic import finish_one_opt, local_search, polish_recompute
from autotune.tuner.kicks import kick_patience, kick_search
from autotune.tuner.least_peak import least_peak
from autotune.tuner.params import representable
from autotune.tuner.problem import (Candidate, Problem, best_of, better, count_splits, even_layers, improves,
                                    ranked)

#: Spaces with at most this many layer splits (all V) are enumerated exactly (branch and bound:
#: 20,128 splits of the 16-layer pp4 vpp1-2 benchmark take about 2 s).
EXACT_MAX_SPLITS = 25_000
#: Work budget of the exact enumeration (recompute combinations built + layouts simulated; about
#: 330,000 units per second on one core): a space with few splits but many recompute combinations
#: per stage (12 layers, 2 stages, V up to 4, full/select/comm, tight memory) falls back to the
#: solver path instead of enumerating for minutes. Deterministic (no clock).
EXACT_MAX_WORK = 1_500_000
#: A V's best layout is given the integer-program recompute polish when it is within this
#: fraction of the incumbent (the polish gained 1.0 % on TeleChat2 vpp3; a V further behind
#: would not catch up).
POLISH_WITHIN = 0.02
#: With a deadline, the first bound pass stops its proofs at this fraction of the time left (each
#: V keeps at least its first proof) and the local searches at the second, so that a short
#: ``--timeout`` still improves the seeds; the later passes and the polish get the rest.
FIRST_PASS_SHARE = 0.3
IMPROVE_SHARE = 0.8
#: The anytime pass (:data:`autotune.tuner.bounds.ANYTIME`) runs, when it runs, until this fraction
#: of the time from the pipeline's start to ``deadline`` (the same base as the two shares above);
#: the local searches then get the time up to IMPROVE_SHARE. Unless the certified-gap target is
#: already met, it runs when the clock cut the first pass (a short ``--timeout``, or the safety
#: net on a huge problem) ...
ANYTIME_SHARE = 0.6
#: ... and also, with a user's ``--timeout``, when the first pass ended in time but that time
#: from the pipeline's start to ``deadline`` is at most this long (s): a ``--timeout`` of up to
#: about twice this for one sub-problem. Without one (the 300 s safety net) it runs only when the
#: first pass was cut.
ANYTIME_HORIZON_S = 60.0
#: Local searches run from this many of the best starts (a work cap, not a clock: deterministic).
LOCAL_STARTS = 3
#: Moves per local search.
LOCAL_ITERS = 60
#: A start more than this factor slower than the incumbent gets no local search (a work cap: on
#: pp 32 × vpp 4 × m 256 the first bound pass's relaxed split fitted at 228,618 ms against the
#: even split's 136,434 ms, and its descent spent ~35 of the bound phase's CPU s reaching
#: 213,218 ms; every start of ``search_quality.py`` is within it). Starts that do not fit are held
#: to it too (h16): there the relaxed split's greedy fit is over the budget at 2,444,792 ms, and
#: its 60-move descent (554 of its stage refits went to the greedy: mini-stages too large for the
#: exact fit) ended over the budget at 1,354,268 ms; ``improve`` took 151 CPU s before, 20 after.
LOCAL_START_WITHIN = 1.25
#: The kick search's certified-gap target when the caller gives none (the search's default
#: ``--gap``).
KICK_TARGET_GAP = 0.005
#: Past this certified gap the kick searches get more patience and also start from the other
#: V's (:func:`kick`): the issue's "within 2 %" target; below it they cost CPU for nothing on
#: the corpus.
KICK_WIDE_GAP = 0.02
#: ... from another V's fastest layout when that is at most this much slower than the incumbent
#: (a work cap: YiZhao-12B 8k's vpp 4 was 1.5 % behind and reached a faster answer).
KICK_WITHIN = 0.03


#: A progress callback: (step name, best feasible step ms or None, lower bound ms or None).
Report = Callable[[str, "float | None", "float | None"], None]


@dataclass(frozen=True)
class _Noted(Delegate):
    """``proof``, noting in ``ran`` each V it runs for (the anytime pass: which V's it covered)."""

    ran: set[int] = field(default_factory=set)

    def bound(self, problem: Problem, V: int, ctx: BoundContext) -> BoundOutcome | None:
        self.ran.add(V)
        return super().bound(problem, V, ctx)


@dataclass(frozen=True)
class _Except(Delegate):
    """``proof`` for every V but those in ``done`` (the later path-LP pass skips the V's the
    anytime pass already ran it for, to its own end)."""

    done: frozenset[int] = frozenset()

    def applies(self, problem: Problem, V: int) -> bool:
        return V not in self.done and self.proof.applies(problem, V)


@dataclass(frozen=True)
class _Only(Delegate):
    """``proof`` for the V's in ``only`` (the first pass again, with the time the trials left, for
    the V's the clock left short)."""

    only: frozenset[int] = frozenset()

    def applies(self, problem: Problem, V: int) -> bool:
        return V in self.only and self.proof.applies(problem, V)


@dataclass
class BoundAndSeeds:
    """Seeds to enqueue, the lower bound (ms; +inf when nothing can fit), whether exact, and
    whether a deadline cut a step (``cut``: the local searches, the polish or a later bound pass
    ended past its share of the deadline, so the seeds and the bound may depend on the machine's
    speed and load). ``per_v_ms``: pp_interleave_num V -> the bound (ms) on layouts with that V
    (+inf: none fits for sure; ``bound_ms`` is the least of them); empty when the space was
    enumerated (``exact``: the answer is the optimum). ``unfinished``: the V's the clock left
    short in the first bound pass (``Tightened.unfinished``), ``later_unfinished`` those of each
    later pass by its name; ``anytime_done``: the V's the anytime pass ran its proof for to its
    end (all three for :func:`raise_with_time_left`); ``floor_ms``: V -> the floor (ms) a V the
    first pass left short was given instead of a proof (:func:`stay_floors`: the larger of the
    work floor with whole layers and the stay LP), for the V's the stay LP ran for."""

    seeds: list[Candidate]
    bound_ms: float
    exact: bool = False
    notes: list[str] = field(default_factory=list)
    cut: bool = False
    per_v_ms: dict[int, float] = field(default_factory=dict)
    unfinished: frozenset[int] = frozenset()
    anytime_done: frozenset[int] = frozenset()
    later_unfinished: dict[str, frozenset[int]] = field(default_factory=dict)
    floor_ms: dict[int, float] = field(default_factory=dict)


def _incumbent(cands: list[Candidate]) -> float | None:
    """The least step time (ms) of the feasible (scored) candidates, None when none fits."""
    feas = [c.step_ms for c in cands if c.excess_mib <= 0]
    return min(feas) if feas else None


def propose(problem: Problem) -> list[Candidate]:
    """The even split of every V with the cheapest fitting recompute (greedy fit), scored. When
    none of them fits (a budget near the model's memory floor), also every V's least-peak split
    (:func:`~autotune.tuner.least_peak.least_peak`) with its cheapest fitting recompute, and the
    least-peak layout itself when that does not fit (the closest layout then)."""
    evens = [fitted(problem, V, even_layers(problem.N, problem.P, V)[None], f"even-fit-v{V}")[0]
             for V in problem.vpp_candidates]
    if any(c.excess_mib <= 0 for c in evens):
        return evens
    low = [least_peak(problem, V) for V in problem.vpp_candidates]
    refit = [fitted(problem, c.V, c.layers[None], c.origin)[0] for c in low]
    return evens + [r if r.excess_mib <= 0 else c for c, r in zip(low, refit)]


def improve(problem: Problem, starts: list[Candidate], per_v_ms: dict[int, float], upper_ms: float | None, *,
            deadline: float | None = None, every_v: bool = False,
            max_starts: int = LOCAL_STARTS) -> list[Candidate]:
    """Local searches from the ``max_starts`` best ``starts`` (by rank); with ``every_v``, first
    the best start of every V that can still hold the optimum, the V with the least bound first,
    then the others by rank, up to ``max(max_starts, such V's)`` searches in all.

    A start is skipped when its V's bound is above the incumbent (that V cannot hold the optimum;
    the incumbent drops as the searches find faster layouts) or when it is more than
    :data:`LOCAL_START_WITHIN` slower than the incumbent (a start over the budget: after its exact
    refit). Starts are re-fitted exactly (:func:`~autotune.tuner.fit.search_fit`: least replay per
    stage, edge chunks weighted when interleaved) when that ranks better and searched with that
    fit; an interleaved answer's recompute is then polished by simulation (both answers kept).
    Returns the answers in order.
    """
    pool = ranked(starts)
    feas = [x.step_ms for x in pool if x.excess_mib <= 0] + ([upper_ms] if upper_ms is not None else [])
    inc = min(feas) if feas else float("inf")
    firsts: list[Candidate] = []
    if every_v:
        for V in sorted({c.V for c in pool if can_win(per_v_ms.get(c.V, 0.0), inc)},
                        key=lambda v: (per_v_ms.get(v, 0.0), v)):
            firsts.append(next(c for c in pool if c.V == V))
    order = firsts + [c for c in pool if not any(c is f for f in firsts)]
    cap = max(max_starts, len(firsts))
    out: list[Candidate] = []
    done = 0
    for c in order:
        if done >= cap or (deadline is not None and time.monotonic() > deadline):
            break
        if per_v_ms.get(c.V, 0.0) > inc:
            continue  # this V cannot beat the incumbent (its bound is above it)
        if not can_win(per_v_ms.get(c.V, 0.0), inc):
            # solved at the incumbent (the split scan's V = 1): its descent could not improve the
            # answer; it still counts as one of the max_starts searches, so that the others
            # searched are those searched when it ran (on the corpus's Qwen2.5-14B 128k, letting
            # vpp 3 and 4 take its place cost 6.0 -> 15.5 CPU s for the same answer and bound)
            done += 1
            continue
        if c.excess_mib <= 0 and c.step_ms > LOCAL_START_WITHIN * inc:
            continue  # too far behind for a descent of LOCAL_ITERS moves to catch up
        fit = search_fit(c.V)
        ex = fitted(problem, c.V, c.layers[None], c.origin, fit=fit)[0]
        s = ex if better(ex, c) else c
        if s.excess_mib > 0 and s.step_ms > LOCAL_START_WITHIN * inc:
            continue  # over the budget and too far behind (it must shed its excess first)
        ls = local_search(problem, s, max_iters=LOCAL_ITERS, deadline=deadline, fit=fit)
        out.append(ls)
        if c.V > 1 and (deadline is None or time.monotonic() <= deadline):
            out.append(polish_recompute(problem, ls))
        done += 1
        inc = min([inc] + [x.step_ms for x in out if x.excess_mib <= 0])
    return out


def cover(problem: Problem, cands: list[Candidate], per_v_ms: dict[int, float], *,
          deadline: float | None = None, report: Report | None = None) -> list[Candidate]:
    """One local search (:func:`improve` with ``every_v``, from its best start) for each V whose
    bound, after the later bound passes, is still below the incumbent but none of whose layouts
    had one (the first :func:`improve` searches the best-ranked starts only). ``cands`` are scored
    here.

    Why: on YiZhao-12B 8k (pp 4, vpp 1-4 searched) the three best-ranked starts were two fitting
    vpp 1 layouts and vpp 2's even split; vpp 3 and 4, whose bounds are the least, were never
    searched, and the answer stayed at 13,460.9 ms against 13,009.4 ms from a vpp 4 search (gap
    8.35 -> 4.72 %). Doing it after the later passes, not in the first :func:`improve` nor
    before the integer program, spares the V's those passes rule out: on Qwen2.5-14B 128k (vpp 1
    optimal, certified gap 0) the device DP leaves vpp 3 and 4 0.6 % below the answer and the
    integer program settles them; searching them anyway took 19.5-21.6 CPU s instead of 6.6.

    ``report`` (the progress callback) is called once, before the searches, when there are any."""
    problem.score([c for c in cands if not np.isfinite(c.step_ms)])
    inc = _incumbent(cands)
    if inc is None:
        return []
    searched = {c.V for c in cands if "+local" in c.origin or "+kick" in c.origin}
    todo = {V for V in problem.vpp_candidates if V not in searched and can_win(per_v_ms.get(V, 0.0), inc)}
    starts = [c for c in cands if c.V in todo]
    if not starts:
        return []
    if report is not None:
        report(f"local search of vpp {', '.join(map(str, sorted({c.V for c in starts})))}", inc, min(per_v_ms.values()))
    return improve(problem, starts, per_v_ms, inc, deadline=deadline, every_v=True, max_starts=1)


def polish(problem: Problem, cands: list[Candidate], per_v_ms: dict[int, float], *,
           deadline: float | None = None) -> list[Candidate]:
    """The integer program's recompute (:func:`autotune.tuner.bounds.milp.milp_recompute`, split
    pinned) for the best layout of each interleaved V that can still win: its bound is below the
    incumbent and it is within :data:`POLISH_WITHIN` of it (the greedy fit can leave ~1 % on
    memory-tight problems) and its program is within the integer program's size cap
    (:data:`~autotune.tuner.bounds.milp.MAX_LP_CELLS`). A polished layout is returned when it fits
    and is faster. ``cands`` are scored here."""
    problem.score([c for c in cands if not np.isfinite(c.step_ms)])
    out: list[Candidate] = []
    for V in problem.vpp_candidates:
        if deadline is not None and time.monotonic() > deadline:
            break  # the program's set-up alone takes ~0.5 s on pp 32 × vpp 4 × m 256
        mine = [c for c in cands + out if c.V == V and c.excess_mib <= 0]
        if V < 2 or not mine:
            continue
        c0 = best_of(mine)
        inc = min(c.step_ms for c in cands + out if c.excess_mib <= 0)
        if not can_win(per_v_ms.get(V, 0.0), inc) or c0.step_ms > inc * (1 + POLISH_WITHIN):
            continue  # this V cannot win, or is too far behind for a recompute polish to help
        if c0.origin.endswith("+polish"):
            continue  # polish_recompute's coordinate descent already tuned it (the integer
            # program's own polish costs seconds there: 6532.6 -> 6528.5 ms on TeleChat2 vpp4)
        pols = [c for c in problem.score(milp_recompute(problem, c0, deadline=deadline)) if c.excess_mib <= 0]
        if pols and improves(min(c.step_ms for c in pols), c0.step_ms):
            out.append(best_of(pols))
    return out


def finish(problem: Problem, cands: list[Candidate], *, deadline: float | None = None) -> list[Candidate]:
    """The 1-opt descent (:func:`~autotune.tuner.heuristic.finish_one_opt`) from the fastest fitting
    candidate of ``cands`` (scored here) unless it is a 1-opt answer already; [] when none fits
    or the descent finds nothing faster, else [its answer]."""
    problem.score([c for c in cands if not np.isfinite(c.step_ms)])
    feas = [c for c in cands if fits(c.peak_mib, problem.hbm_mib)]
    if not feas:
        return []
    c0 = best_of(feas)
    if c0.origin.endswith("+1opt"):
        return []
    c1 = finish_one_opt(problem, c0, deadline=deadline)
    return [c1] if c1 is not c0 else []


def kick(problem: Problem, cands: list[Candidate], per_v_ms: dict[int, float], *,
         target_gap: float | None = None, deadline: float | None = None) -> list[Candidate]:
    """The kick search (:func:`~autotune.tuner.kicks.kick_search`) from the fastest fitting
    candidate while its certified gap against the least bound in ``per_v_ms`` is over
    ``target_gap`` (None: :data:`KICK_TARGET_GAP`). When that gap is over :data:`KICK_WIDE_GAP`,
    each search gets the patience of its schedule's size
    (:func:`~autotune.tuner.kicks.kick_patience`) and the kicks go on from the fastest layout of
    every other V that can still hold the optimum (its bound below the incumbent) and is within
    :data:`KICK_WITHIN` of the incumbent, the fastest first, until the gap target is met.
    ``cands`` are scored here. Returns the kick searches' answers that are faster than their
    starts ([] when none fits, the gap is met or nothing faster is found).

    Why every V: the answer's V is the one whose layouts the earlier steps happened to improve
    most, and another V's local optimum can be a few kicks from a faster layout. YiZhao-12B 8k
    (pp 4, m 8, vpp 1-4): the steps before leave vpp 3 at 13,174.7 ms (certified gap 6.07 % as
    the kicks start) and vpp 4 at 13,371.6; with patience 16 the kicks from vpp 3 find 13,165.1,
    those from vpp 4 13,020.2 ms (13,009.4 after the 1-opt finish and the study: the final gap
    4.74 %, 5.87 % before). Only past KICK_WIDE_GAP, decided once from the incumbent as the kicks
    start: on the corpus's configs within it the longer searches found nothing and cost up to
    2.4 CPU s each (TeleChat2 115B). A V missing from ``per_v_ms`` counts as bound 0 (never
    skipped for its bound)."""
    problem.score([c for c in cands if not np.isfinite(c.step_ms)])
    feas = [c for c in cands if fits(c.peak_mib, problem.hbm_mib)]
    gap = KICK_TARGET_GAP if target_gap is None else target_gap
    bound_ms = min(per_v_ms.values()) if per_v_ms else -np.inf
    if not feas or not np.isfinite(bound_ms):
        return []
    first = best_of(feas)
    wide = not _gap_met(first.step_ms, bound_ms, KICK_WIDE_GAP)
    others = [best_of([c for c in feas if c.V == V]) for V in sorted({c.V for c in feas} - {first.V})] if wide else []
    out: list[Candidate] = []
    for c0 in [first] + sorted(others, key=lambda c: (c.step_ms, c.V)):
        inc = best_of(feas + out)
        if _gap_met(inc.step_ms, bound_ms, gap) or (deadline is not None and time.monotonic() > deadline):
            break
        if c0 is not first and (not can_win(per_v_ms.get(c0.V, 0.0), inc.step_ms)
                                or c0.step_ms > inc.step_ms * (1 + KICK_WITHIN)):
            continue  # this V cannot win, or is too far behind for a few kicks to catch up
        c1 = kick_search(problem, c0, target_ms=bound_ms * (1 + gap), deadline=deadline,
                         patience=kick_patience(problem, c0.V) if wide else None)
        if c1 is not c0:
            out.append(c1)
    return out


def _exact(problem: Problem, deadline: float | None, notes: list[str]) -> ExactResult | None:
    """The exact enumeration, or None when it is skipped (too many splits, or over its work
    budget: a note says why)."""
    if count_splits(problem) > EXACT_MAX_SPLITS:
        return None
    try:
        return exact_optimum(problem, max_work=EXACT_MAX_WORK, deadline=deadline)
    except ExactBudgetExceeded as exc:
        notes.append(f"exact enumeration skipped: {exc}")
        return None


def _seeds_met(problem: Problem, layouts: tuple[Candidate, ...]) -> list[Candidate]:
    """The layouts a bound pass met (``Tightened.layouts``) that a trial can write
    (:func:`~autotune.tuner.params.representable`): seeds."""
    return [c for c in layouts if representable(problem, c)]


def can_win(bound_ms: float, incumbent_ms: float) -> bool:
    """Whether a V whose bound is ``bound_ms`` can still hold a layout faster than the incumbent
    (ms) by more than :data:`~autotune.tuner.problem.REL_TOL`, what counts as faster everywhere
    (:func:`~autotune.tuner.problem.improves`). A V proven optimal at the incumbent (the split
    scan's V = 1: its bound is the optimum less 1e-10 of it) is not searched again: its
    local search could not improve the answer."""
    return bool(improves(bound_ms, incumbent_ms))


def _gap_met(best_ms: float | None, bound_ms: float, target_gap: float | None) -> bool:
    """True when ``target_gap`` is set and the certified gap (best − bound) / bound is at or below it."""
    if target_gap is None or best_ms is None or not np.isfinite(bound_ms) or bound_ms <= 0:
        return False
    return (best_ms - bound_ms) / bound_ms <= target_gap


def _first_pass(problem: Problem, short: bool, share: Callable[[float], float | None]) -> tuple[Pass, float | None]:
    """The first bound pass and its deadline (time.monotonic()); ``share(f)``: the time at fraction
    f of the bound phase. :data:`REGISTRY`'s first pass to FIRST_PASS_SHARE; under a short
    ``--timeout`` (``short``) on a model of one layer kind, the stage DP first
    (:func:`~autotune.tuner.bounds.stage_dp_first`, its Lagrangian fallback to FIRST_PASS_SHARE)
    to ANYTIME_SHARE."""
    if short and not several_kinds(problem):
        return stage_dp_first(share(FIRST_PASS_SHARE)), share(ANYTIME_SHARE)
    return REGISTRY[0], share(FIRST_PASS_SHARE)


#: The stay LP's CPU s per (P · V)², for the time check of :func:`stay_floors` before any LP of
#: the call has run (measured: 1.0-1.5e-5 at P · V >= 64 on a quiet 2-core AMD EPYC, pp 64 × vpp 4
#: 0.75-0.9 s; ~1.7 × that on a slower host of the same kind, where pp 64 × vpp 4 took 1-1.6 s).
#: Once one has run, the rate it showed replaces it (times :data:`STAY_LP_RATE_MARGIN`).
STAY_LP_S_PER_CELL = 2e-5
#: Margin on the rate a run showed (the cost per (P · V)² grows a little with V: 1.0 → 1.15e-5
#: from pp 64 × vpp 2 to vpp 4, dense).
STAY_LP_RATE_MARGIN = 1.25


def stay_floors(problem: Problem, short: frozenset[int], per_v: dict[int, float],
                deadline: float | None) -> tuple[dict[int, float], dict[int, float]]:
    """The stay LP (:mod:`autotune.tuner.bounds.stay_lp`, a fraction of a second to ~1.5 s) for
    each V in ``short`` (V's the clock left short: given the work floor, or their proofs cut), the
    V with the least bound first (it sets the certified gap: in ascending V, a new user's
    ``--timeout 3`` on the TeleChat2 example raised vpp 3 and left vpp 4, the answer's V, at the
    work floor, 27.1 %), while it can end before ``deadline`` (time.monotonic(); its cost
    estimated as (P · V)² times :data:`STAY_LP_S_PER_CELL` before any run, then times the largest
    rate this call's runs showed and :data:`STAY_LP_RATE_MARGIN`; once the least bound's V cannot
    run, raising the others cannot move the least): the bound per V raised to it, and per V it
    ran for the floor it now holds (ms; the larger of the work floor with whole layers,
    :func:`~autotune.tuner.bounds.work_floor.floor_ms`, and the stay LP). Measured at pp 64 ×
    vpp 2 × m 512 MoE (scaling.py): 101,866 ms in ~0.3 CPU s where the work floor is 61,032 ms
    (97,108 with whole layers)."""
    raised, floors = dict(per_v), {}
    per_cell: float | None = None  # s per (P · V)² the runs of this call showed (the largest)
    for V in sorted(short, key=lambda V: (per_v.get(V, -np.inf), V)):  # the least bound first
        cells = float(problem.P * V) ** 2
        est = cells * (STAY_LP_S_PER_CELL if per_cell is None else STAY_LP_RATE_MARGIN * per_cell)
        t0 = time.monotonic()
        if deadline is not None and t0 + est > deadline:
            break
        value = stay_lp_ms(problem, V, deadline=deadline)
        per_cell = max(per_cell or 0.0, (time.monotonic() - t0) / cells)
        if value is None:
            continue
        floors[V] = max(floor_ms(problem, V), value)
        raised[V] = max(raised.get(V, -np.inf), value)
    return raised, floors


def _later_passes(problem: Problem, later: tuple[Pass, ...], per_v: dict[int, float], out: list[Candidate],
                  done: frozenset[int], deadline: float | None, target_gap: float | None, notes: list[str],
                  say: Report) -> tuple[dict[int, float], dict[str, frozenset[int]]]:
    """The later bound passes of :func:`bound_and_seeds` against its incumbent, in order, until the
    certified-gap target: the bound per V after them, and per pass the V's the clock left short
    (``Tightened.unfinished``). Seeds they meet are appended to ``out``; the path LP does not run
    again for the V's in ``done`` (the anytime pass ran it to its end)."""
    ub2 = _incumbent(out)
    later_short: dict[str, frozenset[int]] = {}
    for p in later:
        proofs = p.proofs
        if done and p.proofs == ANYTIME.proofs:  # not again for the V's the anytime pass ran it for
            proofs = tuple(_Except(q, done) for q in p.proofs)
            if not any(q.applies(problem, V) for q in proofs for V in problem.vpp_candidates):
                continue
        if _gap_met(ub2, min(per_v.values()), target_gap):
            notes.append(f"bound passes from {p.name!r} on skipped: certified gap at or below {target_gap:.2%}")
            break
        say(f"bound pass {p.seed_tag}", ub2, min(per_v.values()))
        t = tighten(problem, proofs, per_v, skip=p.skip,
                    ctx=BoundContext(upper_ms=ub2, layouts=tuple(out), deadline=deadline, target_gap=target_gap))
        per_v = dict(t.per_v_ms)
        if t.unfinished:
            later_short[p.name] = t.unfinished
        out += _seeds_met(problem, t.layouts)
        for V, split in t.splits.items():
            out += fitted(problem, V, split[None], f"{p.seed_tag}-split-v{V}")
    return per_v, later_short


def bound_and_seeds(problem: Problem, seeds: list[Candidate], *,
                    deadline: float | None = None, report: Report | None = None,
                    target_gap: float | None = None, timed: bool = False) -> BoundAndSeeds:
    """The exact optimum as the seed and the bound when the space is small; otherwise the module's
    pipeline: solver seeds and the lower bound of the passes of
    :data:`autotune.tuner.bounds.REGISTRY` (the first one before the local search, the others
    against its incumbent).

    Args:
        problem: the tuning problem.
        seeds: caller's seeds (user config, baselines), kept first.
        deadline: time.monotonic() limit of the whole pipeline (None: bounded by work only); the
            first bound pass and the local searches stop at FIRST_PASS_SHARE / IMPROVE_SHARE of it.
        report: called as each step starts with (step name, best feasible step ms so far or None,
            lower bound ms so far or None): the progress output (:mod:`autotune.tuner.progress`).
        target_gap: the search's certified-gap stop (a fraction): the later bound passes are
            skipped once (best − bound) / bound is at or below it (the search would stop there
            anyway; None runs them all). On codellama-34b 16p the first pass and the local search
            reach 0.14 % in 17 s of wall time, and the device DP and the integer program took
            38 s more to close it.
        timed: ``deadline`` comes from the user's ``--timeout`` (not the safety net): the anytime
            pass (:data:`autotune.tuner.bounds.ANYTIME`) then runs after the first pass when the
            time to ``deadline`` is at most :data:`ANYTIME_HORIZON_S`. It also runs, timed or not,
            when the clock cut the first pass; in both cases only while the certified-gap target
            is unmet. The later path-LP pass then skips the V's the anytime pass ran to its end.
    """
    out = list(seeds)
    notes: list[str] = []
    say = report or (lambda step, best, bound: None)
    say("exact enumeration or even splits", None, None)
    ex = _exact(problem, deadline, notes)
    if ex is not None:
        return BoundAndSeeds(out + ([ex.best] if ex.best is not None else []),
                             ex.best.step_ms if ex.best is not None else float("inf"), True)
    t_start = time.monotonic()

    def share(f: float) -> float | None:  # the first fraction f of the time up to the deadline
        return None if deadline is None else t_start + f * max(0.0, deadline - t_start)

    starts = propose(problem)
    problem.score([c for c in out if not np.isfinite(c.step_ms)])
    ub = _incumbent(starts + out)
    short = timed and deadline is not None and deadline - t_start <= ANYTIME_HORIZON_S
    (first, first_until), later = _first_pass(problem, short, share), REGISTRY[1:]

    def past(limit: float | None) -> bool:
        """A step that ended past its deadline was cut (the first pass is not counted: its proofs
        only weaken there, which the certified gap shows)."""
        return limit is not None and time.monotonic() > limit

    say("first bound pass", ub, None)
    b = tighten(problem, first.proofs, ctx=BoundContext(upper_ms=ub, deadline=first_until,
                                                        target_gap=target_gap),
                skip=first.skip, floor=WorkFloor())
    per_v, floors = stay_floors(problem, b.unfinished, dict(b.per_v_ms), deadline)
    done: frozenset[int] = frozenset()  # V's the anytime pass ran its proof for, to its end
    near = short or past(first_until)
    if near and per_v and not _gap_met(ub, min(per_v.values()), target_gap):
        # a --timeout: the anytime pass raises the bound while its share lasts (ANYTIME)
        say(ANYTIME.name, ub, min(per_v.values()))
        ran: set[int] = set()
        per_v = dict(tighten(problem, tuple(_Noted(q, ran) for q in ANYTIME.proofs), per_v, skip=ANYTIME.skip,
                             ctx=BoundContext(upper_ms=ub, layouts=tuple(starts + out),
                                              deadline=share(ANYTIME_SHARE), target_gap=target_gap)).per_v_ms)
        done = frozenset(ran) if not past(share(ANYTIME_SHARE)) else frozenset()
    relaxed = [fitted(problem, V, lay[None], f"bound-split-v{V}")[0] for V, lay in b.splits.items()
               if np.isfinite(per_v[V]) and (ub is None or can_win(per_v[V], ub))]
    out += starts + relaxed + _seeds_met(problem, b.layouts)
    say("local search", _incumbent(out), min(per_v.values()))
    out += improve(problem, starts + relaxed, dict(per_v), ub, deadline=share(IMPROVE_SHARE))
    cut = past(share(IMPROVE_SHARE))
    say("recompute polish", _incumbent(out), None)
    out += polish(problem, out, dict(per_v), deadline=deadline)
    out += finish(problem, out, deadline=deadline)
    per_v, later_short = _later_passes(problem, later, per_v, out, done, deadline, target_gap, notes, say)
    if not _gap_met(_incumbent(out), min(per_v.values()), target_gap):
        out += cover(problem, out, per_v, deadline=deadline, report=say)
    say("kicks", _incumbent(out), min(per_v.values()))
    out += kick(problem, out, per_v, target_gap=target_gap, deadline=deadline)
    out += finish(problem, out, deadline=deadline)
    cut |= past(deadline)
    return BoundAndSeeds(out, min(per_v.values()), notes=notes, cut=cut, per_v_ms=dict(per_v),
                         unfinished=b.unfinished, anytime_done=done, later_unfinished=later_short,
                         floor_ms=floors)


#: The share of the time a user's ``--timeout`` has left after the trials that
#: :func:`improve_with_time_left` may take (the bound gets the rest, and what it leaves).
ANSWER_SHARE_OF_TIME_LEFT = 0.5


def improve_with_time_left(problem: Problem, bs: BoundAndSeeds, best: Candidate, *, deadline: float,
                           target_gap: float | None = None) -> Candidate | None:
    """The answer the clock cut, improved with the time the trials left: when a user's
    ``--timeout`` cut the bound phase (its local searches, :func:`cover` or :func:`kick` past their
    share) and the study then stopped before the limit, at a local optimum, the steps the clock
    skipped run from the trials' answer ``best`` (scored): :func:`cover` (a local search for each V
    whose bound is below the answer and none of whose layouts had one), :func:`kick` and the 1-opt
    :func:`finish`, each until ``deadline`` (time.monotonic()), while the certified gap is over
    ``target_gap``. The bound phase's seeds (``bs.seeds``) are the other starts.

    Returns the fastest fitting layout found that is faster than ``best``, else None (an exact
    space, no bound, the gap target met, or nothing faster). Why: InternLM-7B of MindFormers
    r1.0 (pp 4, m 16, V 1-4) at ``--timeout 10``: the bound phase's share ended in its local
    searches before vpp 4 had one, the trials stopped at a vpp 2 local optimum (3,364.1 ms) after
    4.6 s, and the search ended there, 4.27 % from its bound, with 5 s of the limit unused; the
    untimed search's answer is a vpp 4 layout of 3,289.3 ms."""
    if bs.exact or not bs.per_v_ms or _gap_met(best.step_ms, bs.bound_ms, target_gap):
        return None
    cands = list(bs.seeds) + [best]
    out = cover(problem, cands, bs.per_v_ms, deadline=deadline)
    out += kick(problem, cands + out, bs.per_v_ms, target_gap=target_gap, deadline=deadline)
    out += finish(problem, cands + out, deadline=deadline)
    faster = [c for c in problem.score(out) if fits(c.peak_mib, problem.hbm_mib) and improves(c.step_ms, best.step_ms)]
    return best_of(faster) if faster else None


def raise_with_time_left(problem: Problem, bs: BoundAndSeeds, best_ms: float | None, *, deadline: float,
                         target_gap: float | None = None, report: Report | None = None) -> BoundAndSeeds:
    """The bound the clock cut, raised with the time the trials left: when a user's ``--timeout``
    cut the bound phase and the study then stopped before the limit (on its own, at a local
    optimum, typically within a second or two on the largest problems; or at half of the time
    left when a V held only a floor: ``search._trial_limit``), the stay LP runs for the V's the
    first pass left short that it has not run for (:func:`stay_floors`), the first pass's proofs
    run again for those V's (:attr:`BoundAndSeeds.unfinished`), then each later pass
    of :data:`~autotune.tuner.bounds.REGISTRY`, in order, for the V's the clock left short in it
    (:attr:`BoundAndSeeds.later_unfinished`; the path LP not again for the V's the anytime pass
    ran it for), each with its skip rule and ``best_ms`` (the answer's step) as the incumbent,
    until ``deadline`` (time.monotonic()) or the certified-gap target. What ran to its end is not
    run again (TeleChat2 at ``--timeout 10`` spent 3 s re-running passes for the same bound). The seeds are
    kept as they are (the trials are over). Measured on a pp 64 × m 512 TeleChat2-like config at
    ``--timeout 20``, where the first pass left vpp 2-4 with the work floor: gap 34.8 → 1.1 %
    on one host (docs/search.md); on a slower one the stage DP did not fit in the time left and
    the gap stayed 32.7 % (14.1 % since the stay LP).

    Returns ``bs`` with the raised ``bound_ms`` / ``per_v_ms`` (``bs`` itself when there is
    nothing to raise: enumerated, no bound, or the gap target met)."""
    if bs.exact or not bs.per_v_ms or _gap_met(best_ms, bs.bound_ms, target_gap):
        return bs
    say = report or (lambda step, best, bound: None)
    per_v, more = stay_floors(problem, bs.unfinished - set(bs.floor_ms), dict(bs.per_v_ms), deadline)
    ctx = BoundContext(upper_ms=best_ms, deadline=deadline, target_gap=target_gap)
    first, _ = _first_pass(problem, True, lambda f: deadline)
    steps = [(first.name, tuple(_Only(q, bs.unfinished) for q in first.proofs), "dominated")]
    for p in REGISTRY[1:]:
        short = bs.later_unfinished.get(p.name, frozenset())
        if p.proofs == ANYTIME.proofs:
            short = short - bs.anytime_done
        steps.append((p.name, tuple(_Only(q, short) for q in p.proofs), p.skip))
    for name, proofs, skip in steps:
        if time.monotonic() >= deadline or _gap_met(best_ms, min(per_v.values()), target_gap):
            break
        if not any(q.applies(problem, V) for q in proofs for V in problem.vpp_candidates):
            continue
        say(f"{name}, with the time left", best_ms, min(per_v.values()))
        per_v = dict(tighten(problem, proofs, per_v, skip=skip, ctx=ctx).per_v_ms)
    return replace(bs, bound_ms=min(per_v.values()), per_v_ms=per_v, floor_ms={**bs.floor_ms, **more})
