"""The search policy behind :func:`autotune.search`: sub-problems, baselines, the budget split,
the Optuna studies and the Pareto pool.

1. :func:`subproblems`: one :class:`~autotune.tuner.problem.Problem` per sub-problem of the space
   (scheduler × boolean knobs × micro_batch_num × pattern sets) with a runnable pp_interleave_num.
2. :func:`prepare`: per sub-problem the seeds (the user's layout, the even split with full and with
   no recompute) and :func:`~autotune.tuner.solve.bound_and_seeds` (half of ``timeout``, shared
   out); the baselines are reported on the first sub-problem.
3. :func:`run_studies`: the studies, in order of their lower bound; a sub-problem whose bound
   cannot beat the best found, or once the certified-gap target is met, is skipped (with
   ``objective="time,memory"`` every one runs and feeds the Pareto pool).
4. :func:`run_search` puts it together as a :class:`SearchOutcome`.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from autotune.config.layout import Layout, canonical_values, layout_from_config, mtp_layers_in_split
from autotune.config.margin import apply_margin
from autotune.config.training import TrainingConfig
from autotune.cost.budget import fits
from autotune.cost.report import CostReport, evaluate_layout
from autotune.errors import ConfigError
from autotune.profile.schema import ModelProfile
from autotune.tuner.inputs import DEFAULT_DEVICE, as_config, config_schedule
from autotune.tuner.outcome import SAFETY_TIMEOUT_S, SearchOutcome
from autotune.tuner.least_peak import least_peak
from autotune.tuner.pareto import exact_front, heuristic_front, non_dominated
from autotune.tuner.problem import Candidate, Problem, even_layers, runnable_vpp, vpp_not_runnable
from autotune.tuner.progress import LINE_EVERY_S, Progress, as_progress
from autotune.tuner.runner import add_trial, best_and_closest, candidate_from_trial, open_storage, run_study
from autotune.tuner.bounds import floor_ms
from autotune.tuner.solve import (ANSWER_SHARE_OF_TIME_LEFT, BoundAndSeeds, bound_and_seeds, improve_with_time_left,
                                  raise_with_time_left)
from autotune.tuner.space import SearchSpace, Variant, expand_space, load_search_space

#: The objectives :func:`run_search` accepts.
OBJECTIVES = ("time", "time,memory")

#: Layouts the static verdict's least-peak descents may price (memory only), per V.
STATIC_PRICED = 20_000


@dataclass
class Prepared:
    """One sub-problem ready for its study: its space variant, problem and solver output."""

    var: Variant
    problem: Problem
    bs: BoundAndSeeds


@dataclass
class StudiesOutcome:
    """What :func:`run_studies` found: the best and the closest (variant, candidate), the study
    of the best, trials run, whether a clock cut a study, and the Pareto pool (time,memory)."""

    best: tuple[Variant, Candidate] | None = None
    closest: tuple[Variant, Candidate] | None = None
    study: Any = None
    trials: int = 0
    timed_out: bool = False
    gap_met: bool = False
    local_optimum: bool = False
    work_cap: bool = False
    time_limit_s: float | None = None
    pareto_pool: list[tuple[Variant, Candidate]] = field(default_factory=list)
    pareto_exact: bool = True


#: The time left after the trials raises the bound until this long before the limit (s; at most
#: TIME_LEFT_MARGIN of it): a proof started just before its deadline finishes its current step
#: (a set-up loop, a DP round, an LP solve) first, which ran up to ~1 s past it on pp 64 × m 512.
TIME_LEFT_MARGIN_S = 1.0
TIME_LEFT_MARGIN = 0.05
#: With a ``--timeout``, when the bound phase left a V with only the work floor (m·W/P, a gap of
#: ~30 % on the largest configs), the trials get this share of the time left and the bound the
#: rest: the trials of those configs end at a local optimum within seconds, while the floor keeps
#: the certified gap meaningless (pp 64 × m 512 at --timeout 30 under load: the trials took the
#: rest and the gap stayed 32.6 %).
TRIALS_SHARE_FLOORED = 0.5
#: The least wall clock a study gets under a ``--timeout`` (s): enough for its first trial to
#: start (Optuna checks the clock before each trial, the first check right at its start; with no
#: time at all it runs none), and with a limit the best seed is that trial
#: (:func:`~autotune.tuner.runner.run_study`), so the answer is never worse than the bound
#: phase's best. The 1 s minimum before it made ``--timeout 2`` on the TeleChat2 example end
#: after 2.4-2.5 s.
MIN_TRIALS_S = 0.05
#: The bound phase's share of the wall clock left after reading (``--timeout``, or the safety net
#: without one); the trials get the rest.
BOUND_PHASE_SHARE = 0.5


def check_arguments(gap: float | None, objective: str, timeout: float | None = None) -> str:
    """The objective without spaces.

    Raises:
        ConfigError (rule ``range``): a gap that is not a finite fraction >= 0 (nan, inf, negative), a
            timeout (s) that is not a finite number > 0; (rule ``choice``) an unknown objective.
    """
    if gap is not None and not (math.isfinite(gap) and gap >= 0):
        raise ConfigError(f"gap must be a finite fraction >= 0 or None (no early stop), got {gap}", field="gap",
                          value=gap, rule="range")
    if timeout is not None and not (math.isfinite(timeout) and timeout > 0):
        raise ConfigError(f"timeout must be a finite number of seconds > 0 or None (no wall-clock limit), got "
                          f"{timeout}", field="timeout", value=timeout, rule="range")
    objective = objective.replace(" ", "")
    if objective not in OBJECTIVES:
        raise ConfigError(f"objective must be one of {', '.join(OBJECTIVES)}, got {objective!r}",
                          field="objective", value=objective, rule="choice")
    return objective


def subproblems(cfg: TrainingConfig, sp: SearchSpace, variants: list[Variant]) -> list[tuple[Variant, Problem]]:
    """(variant, problem) of every sub-problem with a runnable pp_interleave_num, in order.

    Raises:
        ConfigError: no sub-problem has one.
    """
    P, N = cfg.pipeline_stage, cfg.num_layers
    subs: list[tuple[Variant, Problem]] = []
    for var in variants:
        c = var.cfg
        vs = runnable_vpp(N, P, c.micro_batch_num, var.schedule, sp.pp_interleave_num, c.seq_split_num)
        if not vs:
            continue
        # MindFormers rejects full recompute with seq_split_num > 1 (R_SEQPIPE_RECOMPUTE): never write it
        kinds = tuple(k for k in sp.recompute_kinds if not (k == "full" and c.seq_split_num > 1))
        problem = Problem(var.pa, P=P, m=c.micro_batch_num, schedule=var.schedule, hbm_mib=float(cfg.hbm_mib),
                          vpp_candidates=vs, kinds=kinds, max_abs_offset=sp.max_abs_offset,
                          seq_split_num=c.seq_split_num, recompute_granularity=sp.recompute_granularity)
        subs.append((var, problem))
    if not subs:
        v0 = variants[0]
        raise ConfigError(f"no pp_interleave_num in {sp.pp_interleave_num} can run with num_layers={N}, "
                          f"pipeline_stage={P}, micro_batch_num={v0.cfg.micro_batch_num} ({v0.schedule})",
                          field="pp_interleave_num", value=sp.pp_interleave_num, rule="search_space")
    return subs


def vpp_not_searched(cfg: TrainingConfig, sp: SearchSpace, variants: list[Variant]) -> dict[int, str]:
    """pp_interleave_num candidates of ``sp`` that no sub-problem can run -> why (the first
    variant's reason, :func:`~autotune.tuner.problem.vpp_not_runnable`), so that the output says
    which V's the search dropped instead of dropping them silently (a new user's pp 3 config with
    128 micro-batches searched vpp 1 alone without a word)."""
    P, N = cfg.pipeline_stage, cfg.num_layers
    why: dict[int, str] = {}
    runs: set[int] = set()
    for var in variants:
        c = var.cfg
        out = vpp_not_runnable(N, P, c.micro_batch_num, var.schedule, sp.pp_interleave_num, c.seq_split_num)
        runs |= set(sp.pp_interleave_num) - set(out)
        for V, reason in out.items():
            why.setdefault(V, reason)
    return {V: r for V, r in sorted(why.items()) if V not in runs}


def _priced(cfg: TrainingConfig, var: Variant, source: Any, layout: Layout) -> CostReport:
    """``evaluate_layout`` of ``layout`` on ``source`` (profile or arrays) with the sub-problem's
    micro_batch_num, schedule and seq_split_num and the config's budget."""
    return evaluate_layout(source, layout, micro_batch_num=var.cfg.micro_batch_num, schedule=var.schedule,
                           hbm_mib=cfg.hbm_mib, seq_split_num=var.cfg.seq_split_num)


def report(cfg: TrainingConfig, var: Variant, c: Candidate | None) -> CostReport | None:
    """The cost report of candidate ``c`` of a sub-problem (None for None)."""
    return None if c is None else _priced(cfg, var, var.pa, c.layout())


def user_report(cfg: TrainingConfig, var: Variant, user: Layout) -> CostReport:
    """The cost report of the config's own layout as ``autotune evaluate`` prices it: its own
    pattern tables (one per pattern, per op) on the profile's own arrays, not a candidate's one
    count per side on the sub-problem's folded arrays (:func:`autotune.tuner.space.fold_patterns`)."""
    return _priced(cfg, var, var.profile, user)


def user_layout(cfg: TrainingConfig) -> tuple[Layout | None, dict[str, Any] | None]:
    """The config's own layout, or None and why (``ConfigError.to_dict()``) when it breaks a rule:
    the search still runs, and the result says why there is no "user" baseline."""
    try:
        return layout_from_config(cfg), None
    except ConfigError as exc:
        return None, exc.to_dict()


def outside_space_error(user: Layout, prepared: list[Prepared]) -> dict[str, Any]:
    """Why a readable user layout has no baseline: it is not in the searched space."""
    var0, prob0 = prepared[0].var, prepared[0].problem
    return {"rule": "R_USER_OUTSIDE_SPACE", "field": "model.model_config.pp_interleave_num",
            "message": f"your config (pp_interleave_num {user.vpp}, {var0.schedule}) is not "
                       f"in the searched space (pp_interleave_num candidates "
                       f"{list(prob0.vpp_candidates)} runnable with these sizes)"}


def base_seeds(cfg: TrainingConfig, problem: Problem, user: Layout | None) -> list[Candidate]:
    """The seeds every sub-problem starts from: the user's layout (when its V is runnable here),
    the even split with full recompute (when the space may write it) and with none."""
    seeds: list[Candidate] = []
    if user is not None and user.vpp in problem.vpp_candidates:
        seeds.append(Candidate.from_layout(user, origin="user"))
    V0 = cfg.pp_interleave_num if cfg.pp_interleave_num in problem.vpp_candidates else problem.vpp_candidates[0]
    even = even_layers(cfg.num_layers, cfg.pipeline_stage, V0)
    z = np.zeros_like(even)
    full = Candidate(V0, even, even.copy(), z, z, origin="even_full_recompute")
    none = Candidate(V0, even, z, z, z, origin="even_no_recompute")
    return seeds + ([full] if "full" in problem.kinds else []) + [none]


def baselines_of(cfg: TrainingConfig, var: Variant, problem: Problem,
                 user: Layout | None) -> dict[str, CostReport | None]:
    """The baselines on a sub-problem (the first one: the config's own knobs, the first scheduler
    candidate): your config, the even split with full and with no recompute."""
    V0 = cfg.pp_interleave_num if cfg.pp_interleave_num in problem.vpp_candidates else problem.vpp_candidates[0]
    even = even_layers(cfg.num_layers, cfg.pipeline_stage, V0)
    z = np.zeros_like(even)
    mine = user is not None and user.vpp in problem.vpp_candidates
    return {"user": user_report(cfg, var, user) if mine else None,
            "even_full_recompute": report(cfg, var, Candidate(V0, even, even.copy(), z, z)),
            "even_no_recompute": report(cfg, var, Candidate(V0, even, z, z, z))}


def prepare(cfg: TrainingConfig, subs: list[tuple[Variant, Problem]], user: Layout | None,
            timeout: float | None, t0: float, prog: Progress | None = None,
            target_gap: float | None = None,
            timed: bool = False) -> tuple[dict[str, CostReport | None], list[Prepared]]:
    """The baselines (:func:`baselines_of` on the first sub-problem) and each sub-problem's seeds
    and bound; with ``timeout`` the k-th sub-problem's solvers stop at ``t0 + timeout ·
    BOUND_PHASE_SHARE · (k + 1) / len(subs)``. ``prog`` shows the ``bounds`` phase (sub-problem,
    solver step, best and bound so far). ``target_gap``: a sub-problem's later bound passes stop
    at that certified gap (its own; the whole search's gap is then at or below it too).
    ``timed``: ``timeout`` is the user's, not the safety net
    (:func:`~autotune.tuner.solve.bound_and_seeds`' anytime pass)."""
    prog = prog or Progress()
    baselines = baselines_of(cfg, subs[0][0], subs[0][1], user)
    prepared = []
    for k, (var, problem) in enumerate(subs):
        share = None if timeout is None else t0 + timeout * BOUND_PHASE_SHARE * (k + 1) / len(subs)
        which = f"sub-problem {k + 1}/{len(subs)}"
        prog.phase("bounds", which)

        def say(step: str, best: float | None, bound: float | None, which: str = which) -> None:
            prog.update(detail=f"{which}: {step}", best_ms=best, bound_ms=bound)

        bs = bound_and_seeds(problem, base_seeds(cfg, problem, user), deadline=share, report=say,
                             target_gap=target_gap, timed=timed)
        prepared.append(Prepared(var, problem, bs))
    return baselines, prepared


def bounds_by_vpp(prepared: list[Prepared]) -> dict[int, float | None] | None:
    """pp_interleave_num V -> the least of the sub-problems' bounds on layouts with that V (ms;
    None: no layout with that V fits, proven), in V order. An enumerated sub-problem gives each of
    its V's its optimum (at most every V's optimum there, so a bound for each). None when every
    sub-problem was enumerated (the answer is the optimum), when the space holds one V (the
    overall bound says it all) or when nothing fits at any V (there is no bound to break down)."""
    if all(pr.bs.exact for pr in prepared):
        return None
    out: dict[int, float] = {}
    for pr in prepared:
        per_v = ({V: pr.bs.bound_ms for V in pr.problem.vpp_candidates} if pr.bs.exact
                 else pr.bs.per_v_ms)
        for V, b in per_v.items():
            out[int(V)] = min(out.get(int(V), float("inf")), float(b))
    if len(out) < 2 or not any(np.isfinite(b) for b in out.values()):
        return None
    return {V: (b if np.isfinite(b) else None) for V, b in sorted(out.items())}


def _holds_floor(pr: Prepared) -> bool:
    """Whether a V of the sub-problem still holds only a floor after the bound phase (the clock
    gave it no proof, only the work floor with whole layers or the stay LP:
    ``BoundAndSeeds.floor_ms``; its certified gap says less than a proof's would)."""
    if pr.bs.exact:
        return False
    for V, b in pr.bs.per_v_ms.items():
        if V in pr.bs.unfinished:
            # the stay LP's floor is already at least the whole-layer one (stay_floors)
            floor = pr.bs.floor_ms[V] if V in pr.bs.floor_ms else floor_ms(pr.problem, V)
            if b <= floor:
                return True
    return False


def _trial_limit(timeout: float | None, t0: float, floored: bool) -> float | None:
    """The trials' wall clock (s from ``t0``): the user's ``timeout``, or, when the bound phase left
    a V with only the work floor, the time so far plus TRIALS_SHARE_FLOORED of what is left, so
    that the time after the trials can raise that bound (:func:`bounds_with_time_left`)."""
    if timeout is None or not floored:
        return timeout
    now = time.monotonic() - t0
    return now + TRIALS_SHARE_FLOORED * max(0.0, timeout - now)


def answer_with_time_left(prepared: list[Prepared], st: StudiesOutcome, trials: int, deadline: float,
                          gap: float | None, prog: Progress) -> bool:
    """The trials' answer ``st.best`` improved with part of the time a user's ``--timeout`` has left
    after the trials stopped on their own (:func:`~autotune.tuner.solve.improve_with_time_left`
    on its sub-problem, up to ``deadline``, time.monotonic()); a faster layout found runs as one
    more trial of that sub-problem's study (``st.study``) while the trial budget has room, and
    becomes ``st.best`` (``st.trials`` counts it): True then. Shown as the ``polish`` phase."""
    if st.best is None or st.study is None or st.trials >= trials or time.monotonic() >= deadline:
        return False
    var, best = st.best
    pr = next((p for p in prepared if p.var is var), None)
    if pr is None:
        return False
    prog.phase("polish", "local search and kicks with the time left")
    faster = improve_with_time_left(pr.problem, pr.bs, best, deadline=deadline, target_gap=gap)
    if faster is None or not add_trial(st.study, pr.problem, faster):
        return False
    st.trials += 1
    got, _ = best_and_closest(st.study)
    if got is None or got.step_ms >= best.step_ms - 1e-9:
        return False
    st.best = (var, got)
    return True


def bounds_with_time_left(prepared: list[Prepared], best_ms: float, deadline: float, gap: float | None,
                          prog: Progress) -> list[Prepared]:
    """The sub-problems' bounds raised with the time a user's ``--timeout`` has left after the
    trials stopped (on their own, or at their share when a V held only the work floor:
    :func:`_trial_limit`; :func:`~autotune.tuner.solve.raise_with_time_left`), lowest bound
    first, to ``deadline`` (time.monotonic()); shown as the ``bounds`` phase again. The trials'
    answer ``best_ms`` (ms) is the incumbent of every sub-problem."""
    if time.monotonic() >= deadline:
        return prepared
    prog.phase("bounds", "with the time left")
    out = list(prepared)
    for k in sorted(range(len(out)), key=lambda k: out[k].bs.bound_ms):
        pr = out[k]

        def say(step: str, best: float | None, bound: float | None, k: int = k) -> None:
            prog.update(detail=f"sub-problem {k + 1}/{len(out)}: {step}", best_ms=best, bound_ms=bound)

        out[k] = Prepared(pr.var, pr.problem, raise_with_time_left(pr.problem, pr.bs, best_ms, deadline=deadline,
                                                                   target_gap=gap, report=say))
    return out


def _front_of(pr: Prepared, outcome: Any, sp: SearchSpace) -> list[tuple[Variant, Candidate]]:
    """Front candidates of one sub-problem: exact when it was enumerated (mini-stage granularity),
    else the heuristic budget ladder merged with every feasible trial and seed."""
    problem, bs = pr.problem, pr.bs
    evaluated = []
    for t in outcome.study.get_trials(deepcopy=False):
        c = candidate_from_trial(t)
        if c is not None and t.values:
            evaluated.append(c)
    evaluated = problem.score(evaluated + [c for c in bs.seeds]) if evaluated or bs.seeds else []
    if bs.exact and (sp.recompute_granularity == "mini_stage" or problem.vpp_candidates == (1,)):
        pts = exact_front(problem)
    else:
        pts = heuristic_front(problem, evaluated)
    return [(pr.var, c) for c in pts + [c for c in evaluated if c.excess_mib <= 0]]


def run_studies(prepared: list[Prepared], sp: SearchSpace, *, pareto: bool, trials: int,
                timeout: float | None, t0: float, seed: int | None, storage: Any, study_name: str | None,
                progress: "bool | str | Progress", gap: float | None, safety_net: bool = True) -> StudiesOutcome:
    """Run the sub-problems' studies in order of their lower bound (module docstring, step 3).

    Without ``timeout`` the studies get :data:`SAFETY_TIMEOUT_S` counted from ``t0`` (the bound
    phase had the first half of it), or no wall clock at all with ``safety_net=False``."""
    bounds = [pr.bs.bound_ms for pr in prepared]
    lb = min(bounds)
    stop_at = lb * (1 + gap) if gap is not None and np.isfinite(lb) and lb > 0 else None
    limit = (SAFETY_TIMEOUT_S if safety_net else None) if timeout is None else timeout
    out = StudiesOutcome(time_limit_s=limit)
    runs: list[str] = []
    for i in sorted(range(len(prepared)), key=lambda i: (bounds[i], i)):
        pr = prepared[i]
        best = out.best
        if not pareto and best is not None and (bounds[i] >= best[1].step_ms - 1e-9
                                                or (stop_at is not None and best[1].step_ms <= stop_at)):
            continue  # cannot beat the best found, or the gap target is met
        remaining = None if limit is None else max(MIN_TRIALS_S, limit - (time.monotonic() - t0))
        name = study_name if len(prepared) == 1 else f"{study_name or 'autotune'}-{i}"
        outcome = run_study(pr.problem, seeds=pr.bs.seeds, n_trials=trials, timeout=remaining, seed=seed,
                            storage=storage, study_name=name, progress=progress, stop_at_ms=stop_at,
                            polish_deadline=None if timeout is None else time.monotonic() + remaining,
                            bound_ms=lb if np.isfinite(lb) and lb > 0 else None)
        out.trials += outcome.trials
        out.timed_out = out.timed_out or outcome.timed_out
        out.gap_met = out.gap_met or outcome.stopped_by == "gap"
        runs.append(outcome.stopped_by)
        if out.study is None:
            out.study = outcome.study
        if outcome.best is not None and (best is None or outcome.best.step_ms < best[1].step_ms - 1e-9):
            out.best, out.study = (pr.var, outcome.best), outcome.study
        cl = outcome.closest
        if outcome.best is None and cl is None:
            cl = min(pr.problem.score(list(pr.bs.seeds)), key=lambda c: c.excess_mib)
        if cl is not None and (out.closest is None or cl.excess_mib < out.closest[1].excess_mib):
            out.closest = (pr.var, cl)
        if pareto:
            out.pareto_pool += _front_of(pr, outcome, sp)
            out.pareto_exact = out.pareto_exact and pr.bs.exact and (
                sp.recompute_granularity == "mini_stage" or pr.problem.vpp_candidates == (1,))
    out.local_optimum = bool(runs) and all(r == "neighbourhood" for r in runs)
    out.work_cap = "work" in runs and all(r in ("neighbourhood", "work") for r in runs)
    return out


def _patterns(layout: Layout | None) -> tuple[list[str] | None, list[str] | None]:
    if layout is None:
        return None, None
    return (list(layout.select_patterns) or None, list(layout.comm_patterns) or None)


def pareto_front(cfg: TrainingConfig, pool: list[tuple[Variant, Candidate]], user: Layout | None,
                 margin_mib: float = 0.0) -> list[dict[str, Any]]:
    """The non-dominated (step, peak) configs of the pool as dicts, fastest first (see
    :attr:`SearchOutcome.pareto`; ``cfg.hbm_mib`` is the budget less the safety margin)."""
    front = []
    for v, c in non_dominated(pool, step=lambda x: x[1].step_ms, peak=lambda x: x[1].peak_mib):
        sp_v = v.select_patterns if v.select_patterns is not None else _patterns(user)[0]
        cp_v = v.comm_patterns if v.comm_patterns is not None else _patterns(user)[1]
        front.append({"step_time_ms": c.step_ms, "peak_mib": c.peak_mib,
                      "margin_mib": float(cfg.hbm_mib) - c.peak_mib,
                      "headroom_mib": float(cfg.hbm_mib) + margin_mib - c.peak_mib,
                      "config": canonical_values(c.layout(), use_legacy=cfg.use_legacy,
                                                 select_patterns=sp_v, comm_patterns=cp_v,
                                                 mtp_in_split=mtp_layers_in_split(cfg)),
                      "settings": dict(v.settings), "schedule": v.schedule, "origin": c.origin})
    return front


def static_verdict(cfg: TrainingConfig, subs: list[tuple[Variant, Problem]], user: Layout | None,
                   user_error: dict[str, Any] | None, margin_mib: float, t0: float) -> SearchOutcome | None:
    """The answer without a bound phase when no layout of any sub-problem can fit: the least
    worst-stage static memory plus one micro-batch's activations (or one layer's backward workspace) of every layout
    (:meth:`Problem.memory_floor_mib`) exceeds the budget (less the margin). Seconds, not minutes:
    the baselines are evaluated, nothing is searched; the closest layout is the least-peak one
    (:func:`~autotune.tuner.least_peak.least_peak` of every V, a capped memory-only descent) or
    the even split with full recompute when that peaks less. None when some layout may fit."""
    floors = [p.memory_floor_mib() for _, p in subs]
    static, floor = min(f[0] for f in floors), min(f[1] for f in floors)
    if fits(floor, float(cfg.hbm_mib)):
        return None
    var, problem = subs[0]
    baselines = baselines_of(cfg, var, problem, user)
    if baselines["user"] is None and user_error is None and user is not None:
        user_error = outside_space_error(user, [Prepared(var, problem, BoundAndSeeds([], float("inf")))])
    sel_p, comm_p = _patterns(user)
    # the closest is a config the space may write (seq pipe forbids full recompute: R_SEQPIPE_RECOMPUTE)
    full = baselines["even_full_recompute"] if "full" in problem.kinds else None
    closest = full or baselines["even_no_recompute"]
    low = min((least_peak(problem, V, max_priced=STATIC_PRICED) for V in problem.vpp_candidates),
              key=lambda c: c.peak_mib)
    if low.peak_mib < closest.peak_mib:
        closest = report(cfg, var, low)
    return SearchOutcome(best=None, closest=closest,
                         baselines=baselines, trials=0, seconds=time.monotonic() - t0, config=var.cfg,
                         profile=var.profile, select_patterns=var.select_patterns or sel_p,
                         comm_patterns=var.comm_patterns or comm_p, stopped_by="static_memory",
                         settings=dict(var.settings), subproblems=len(subs), hbm_margin_mib=margin_mib,
                         user_config_error=user_error, min_static_mib=static, min_peak_mib=floor)


def _stopped_by(st: StudiesOutcome, timed_out: bool, timeout: float | None, stop_at: float | None) -> str:
    """Why the search ended (:attr:`SearchOutcome.stopped_by`)."""
    best = st.best
    if timed_out:
        return "timeout" if timeout is not None else "safety_net"
    if st.gap_met or (stop_at is not None and best is not None and best[1].step_ms <= stop_at):
        return "gap"
    if st.work_cap:
        return "work"
    return "neighbourhood" if st.local_optimum else "trials"


def run_search(config: str | Path | TrainingConfig, profile: str | Path | ModelProfile | None = None, *,
               space: SearchSpace | str | Path | None = None, trials: int = 200,
               timeout: float | None = None, seed: int | None = 0, storage: Any = None,
               study_name: str | None = None, device: str = DEFAULT_DEVICE, hbm_mib: float | None = None,
               overrides: dict[str, float] | None = None, progress: "bool | str | Progress" = False,
               gap: float | None = 0.005, objective: str = "time",
               hbm_margin: float | str | None = None, safety_net: bool = True,
               progress_every_s: float = LINE_EVERY_S) -> SearchOutcome:
    """The search of :func:`autotune.search` (same arguments and errors; module docstring).
    ``progress``: False, True / "bar", "lines" or a :class:`~autotune.tuner.progress.Progress`
    (phases ``reading``, ``bounds``, ``search``, ``polish``); ``progress_every_s``: seconds between
    status lines with "lines"."""
    prog, own = as_progress(progress, progress_every_s)
    try:
        if prog.phases[-1:] != ["reading"]:  # the CLI entered it already
            prog.phase("reading", "config, profile, search space")
        return _run_search(config, profile, space=space, trials=trials, timeout=timeout, seed=seed,
                           storage=storage, study_name=study_name, device=device, hbm_mib=hbm_mib,
                           overrides=overrides, prog=prog, gap=gap, objective=objective,
                           hbm_margin=hbm_margin, safety_net=safety_net)
    finally:
        if own:
            prog.close()


def _run_search(config: str | Path | TrainingConfig, profile: str | Path | ModelProfile | None, *,
                space: SearchSpace | str | Path | None, trials: int, timeout: float | None, seed: int | None,
                storage: Any, study_name: str | None, device: str, hbm_mib: float | None,
                overrides: dict[str, float] | None, prog: Progress, gap: float | None, objective: str,
                hbm_margin: float | str | None, safety_net: bool) -> SearchOutcome:
    t0 = time.monotonic()
    objective = check_arguments(gap, objective, timeout)
    cfg = as_config(config, hbm_mib)
    if cfg.hbm_mib is None:
        raise ConfigError("no HBM budget: set context.max_device_memory or pass --hbm",
                          field="context.max_device_memory", value=None, rule="missing_key")
    cfg, margin_mib = apply_margin(cfg, hbm_margin, field="hbm_margin")
    sp = space if isinstance(space, SearchSpace) else load_search_space(space)
    storage = open_storage(storage)  # a bad URL or path fails now, not after the bound phase
    if sp.pipeline_scheduler == "keep":
        config_schedule(cfg)
    variants = expand_space(cfg, sp, profile, device=device, overrides=overrides)
    subs = subproblems(cfg, sp, variants)
    user, user_error = user_layout(cfg)
    verdict = static_verdict(cfg, subs, user, user_error, margin_mib, t0)
    if verdict is not None:
        return verdict
    # the bound phase gets half of the wall clock left after reading: of --timeout, or of the safety
    # net without one (a problem whose solvers would run longer, e.g. pp 8 x vpp 4 x 256 dense + MoE
    # layers, whose exact-fit local search ran > 10 min, is cut there and says so instead of running
    # on). Left after reading: a pp 64 x m 512 config compiles its schedules for V 1-4 in ~2 s, which
    # took most of a short --timeout's half when the half counted from the start.
    limit = timeout if timeout is not None else (SAFETY_TIMEOUT_S if safety_net else None)
    t_bounds = time.monotonic()
    left = None if limit is None else max(0.0, limit - (t_bounds - t0))
    bound_s = None if left is None else left * BOUND_PHASE_SHARE  # the bound phase's share (s)
    baselines, prepared = prepare(cfg, subs, user, left, t_bounds, prog,
                                  target_gap=None if objective == "time,memory" else gap, timed=timeout is not None)
    # a bound phase whose share ran out, or a solver step past its part of it, was cut short
    cut_in_bounds = bound_s is not None and time.monotonic() > t_bounds + bound_s
    step_cut = any(pr.bs.cut for pr in prepared)
    if baselines["user"] is None and user_error is None and user is not None:
        user_error = outside_space_error(user, prepared)
    lb = min(pr.bs.bound_ms for pr in prepared)
    by_vpp = bounds_by_vpp(prepared)
    pareto = objective == "time,memory"
    floored = timeout is not None and not pareto and any(_holds_floor(pr) for pr in prepared)
    st = run_studies(prepared, sp, pareto=pareto, trials=trials, timeout=_trial_limit(timeout, t0, floored), t0=t0,
                     seed=seed, storage=storage, study_name=study_name, progress=prog, gap=gap,
                     safety_net=safety_net)
    best, closest = st.best, st.closest
    stop_at = lb * (1 + gap) if gap is not None and np.isfinite(lb) and lb > 0 else None
    faster = False
    if (timeout is not None and best is not None and not pareto and (floored or not st.timed_out)
            and (cut_in_bounds or step_cut)):
        end = t0 + timeout - min(TIME_LEFT_MARGIN_S, TIME_LEFT_MARGIN * timeout)
        now = time.monotonic()
        faster = answer_with_time_left(prepared, st, trials, now + ANSWER_SHARE_OF_TIME_LEFT * max(0.0, end - now),
                                       gap, prog)
        best = st.best
        prepared = bounds_with_time_left(prepared, best[1].step_ms, end, gap, prog)
        lb, by_vpp = min(pr.bs.bound_ms for pr in prepared), bounds_by_vpp(prepared)
    cert = None
    if best is not None and np.isfinite(lb) and lb > 0:
        cert = max(0.0, (best[1].step_ms - lb) / lb)
    # a step cut short matters only when the answer is not certified within the --gap target
    cut_in_bounds = cut_in_bounds or (step_cut and not (gap is not None and cert is not None and cert <= gap))
    timed_out = st.timed_out or cut_in_bounds
    chosen = best or closest
    var = chosen[0] if chosen else subs[0][0]
    sel_p, comm_p = _patterns(user)
    if var.select_patterns is not None:
        sel_p = var.select_patterns
    if var.comm_patterns is not None:
        comm_p = var.comm_patterns
    front = pareto_front(cfg, st.pareto_pool, user, margin_mib) if pareto else None
    return SearchOutcome(best=report(cfg, var, best[1]) if best else None,
                         closest=report(cfg, var, closest[1]) if best is None and closest else None,
                         baselines=baselines, trials=st.trials, seconds=time.monotonic() - t0,
                         config=var.cfg, profile=var.profile, study=st.study,
                         select_patterns=sel_p, comm_patterns=comm_p,
                         lower_bound_ms=float(lb) if np.isfinite(lb) else None, certified_gap=cert,
                         lower_bound_by_vpp=by_vpp,
                         exact=all(pr.bs.exact for pr in prepared), timed_out=timed_out,
                         stopped_by=_stopped_by(st, timed_out, timeout, stop_at),
                         time_limit_s=timeout if timeout is not None else st.time_limit_s,
                         settings=dict(var.settings), pareto=front,
                         pareto_exact=bool(front is not None and st.pareto_exact), subproblems=len(prepared),
                         hbm_margin_mib=margin_mib, user_config_error=user_error,
                         bound_phase_cut=bool(cut_in_bounds), bound_phase_s=bound_s, time_left_faster=faster,
                         trials_share_halved=bool(floored), vpp_not_searched=vpp_not_searched(cfg, sp, variants),
                         trials_stopped_by=_stopped_by(st, st.timed_out, timeout, stop_at))
