"""The project's neighbourhood search as an Optuna sampler: every trial is a real proposal.

:class:`NeighbourhoodSampler` proposes, for each trial that is not enqueued, the best-ranked layout
one move away from the study's incumbent (its best trial: feasible first, then fastest) that the
study does not hold yet and that beats the incumbent. The moves are those of the solver's local
search (:mod:`autotune.tuner.moves`), tried in order:

1. one layer from one mini-stage to another, the touched stages' recompute re-fitted exactly
   (:func:`autotune.tuner.fit.search_fit`, as in :func:`autotune.tuner.solve.improve`);
2. the 1-opt moves (:class:`autotune.tuner.moves.OneOptMoves`: one layer moved with the counts
   kept, or one recompute count ±1);
3. two single-layer moves at once, among the best ones (:func:`autotune.tuner.moves.pair_moves`);
4. one stage's recompute replaced by another fitting combination of its chunks' options
   (:func:`autotune.tuner.fit.stage_options`, the :data:`TRADE_TOP` least-replay ones).

When the incumbent fits and two or more neighbours beat it, the improving moves on distinct
devices (pipeline stages) are also applied together (:func:`autotune.tuner.heuristic.
compound_moves`: the best 2, 4, 8, 16 of them); such a layout that fits and beats the best single
neighbour is proposed first, so one trial takes what would take a trial each (pp 32 × vpp 4 ×
m 256 in ``benchmarks/scaling.py``: the study's 6 proposals before its work cap gained 0.43 %
where one move a trial gained 0.03 %).

Each neighbourhood is simulated in one batch (memoised per incumbent), so a proposal is known to
improve before its trial runs, and the trial records it. When no neighbour beats the incumbent
(a local optimum of all four neighbourhoods), :meth:`NeighbourhoodSampler.propose` returns None
and the runner stops the study: more trials could not help this search.

The proposal is a pure function of the study's trials (no random state), so the same study gives
the same trials in any process: a resumed or taken-over sweep study goes on exactly where it was.
With a ``deadline`` (the study's ``--timeout``) a scan that reaches it is dropped and no proposal
is made (``timed_out``; the proposals are then not reproducible): the scans check the clock per
stage fitted and per batch simulated, and in blocks of 512 layouts once under 5 s remain
(:func:`autotune.tuner.fit.clock_block`), so the study ends within one of those steps of its limit
(a few vectorised steps the clock cannot enter take up to ~0.9 s on the largest problems), not one
whole scan later: on ``benchmarks/scaling.py``'s pp 8 × vpp 4 × m 128 dense row with
``--timeout 10`` a 2.2 s scan begun 0.16 s before the limit had ended the search at 12.16 s.

Memory goes where Optuna's samplers and optuna-dashboard read it: after each COMPLETE or PRUNED
trial, :meth:`NeighbourhoodSampler.after_trial` stores the system attribute ``constraints`` =
``(peak - budget MiB,)`` (Optuna 5.0.0's ``_process_constraints_after_trial``, the helper its
TPE / NSGA-II ``constraints_func`` use; feasible when <= 0), read from the trial's
``hbm_excess_mib`` user attribute.
"""

from __future__ import annotations

import json
from typing import Any, Sequence

import numpy as np
import optuna
from optuna.samplers._base import _process_constraints_after_trial

from autotune.cost.budget import fits
from autotune.tuner.fit import PastDeadline, check_deadline, fit_cache, search_fit, stage_options
from autotune.tuner.heuristic import COMPOUND_POOL, _pair_top, compound_moves
from autotune.cost.simulate import compile_schedule
from autotune.tuner.moves import LazyScan, OneOptMoves, PairMoves, Scan, SingleLayerMoves, StageTrades, scan
from autotune.tuner.params import encode, representable
from autotune.tuner.problem import REL_TOL, Candidate, Problem, better, rank_order, ranked

#: User attribute holding a trial's memory excess (MiB, peak - budget; <= 0 fits).
EXCESS_ATTR = "hbm_excess_mib"
#: Recompute combinations per stage the third neighbourhood tries (a work cap).
TRADE_TOP = 200
#: Incumbents whose scans are remembered (bounds memory).
SCAN_MEMO = 8
#: Work cap of one sampler (one :func:`~autotune.tuner.runner.run_study` call): neighbours scanned
#: × the schedule's ops, whether simulated or set aside unsimulated by the scan's screen (a
#: recompute trade that cannot be faster; :func:`~autotune.tuner.moves.scan` with ``beat``).
#: Counting only the simulated ones let pp 32 × vpp 4 × m 256 dense run 15 more proposals for
#: 18 more CPU s and 0.02 % (132,715.1 -> 132,689.1 ms), so the count stays. Past it, an incumbent whose
#: neighbourhood is not scanned yet gets no proposal and the study stops (``stopped_by="work"``);
#: the final local search and the 1-opt finish still run. Every problem of
#: ``benchmarks/search_quality.py`` and all but the largest of ``benchmarks/scaling.py`` stay under
#: it (TeleChat2 vpp1-4: 2.1e6; P16 V2 m512 L128: 1.2e9; P64 V1 m128: 1.1e9). On P64 V2 m512 L256
#: the study spent ~24 of its 34 CPU s scanning for a 0.03 % faster layout (145,091.6 ->
#: 145,051.1 ms). Deterministic (no clock).
SAMPLER_OPS = 2e9


def trial_layout(trial: optuna.trial.FrozenTrial) -> Candidate | None:
    """The layout a trial holds (its ``layout`` user attribute), scored from its value and
    ``hbm_excess_mib`` when it has them; None without one."""
    raw = trial.user_attrs.get("layout")
    if raw is None:
        return None
    d = json.loads(raw)
    arr = lambda k: np.asarray(d[k], dtype=np.int64)  # noqa: E731
    c = Candidate(int(d["V"]), arr("layers"), arr("rec"), arr("sel"), arr("com"),
                  origin=trial.user_attrs.get("origin", "neighbour"))
    if trial.values:
        c.step_ms = float(trial.values[0])
    if EXCESS_ATTR in trial.user_attrs:
        c.excess_mib = float(trial.user_attrs[EXCESS_ATTR])
        c.peak_mib = float(trial.user_attrs.get("peak_mib", float("nan")))
    return c


def _constraints(trial: optuna.trial.FrozenTrial) -> Sequence[float]:
    return (float(trial.user_attrs[EXCESS_ATTR]),)


class NeighbourhoodSampler(optuna.samplers.BaseSampler):
    """Proposes neighbours of the study's incumbent (module docstring).

    Args:
        problem: the tuning problem the study searches (its parameters are
            :mod:`autotune.tuner.params`'s).
        deadline: time.monotonic() limit of the scans (None: none); past it :meth:`propose`
            returns None and sets ``timed_out``.

    A parameter the sampler has no proposal for (a study not made by autotune, or the study holds
    no evaluated layout yet) is drawn by Optuna's ``RandomSampler(seed=0)``, so the sampler never
    fails a trial.
    """

    def __init__(self, problem: Problem, deadline: float | None = None) -> None:
        self.problem = problem
        self.deadline = deadline
        self.timed_out = False  # a scan was not made or not finished: the deadline passed
        self._scans: dict[tuple, list[Candidate]] = {}
        self._by_trial: dict[int, dict[str, Any] | None] = {}
        self._fallback = optuna.samplers.RandomSampler(seed=0)
        self.proposed = 0
        self.spent_ops = 0.0  # simulated ops of the scans (SAMPLER_OPS)
        self.capped = False  # an incumbent went unscanned because the work cap was spent

    # --- Optuna's sampler interface -------------------------------------------------------------
    def infer_relative_search_space(self, study: optuna.Study, trial: optuna.trial.FrozenTrial) -> dict:
        return {}

    def sample_relative(self, study: optuna.Study, trial: optuna.trial.FrozenTrial, search_space: dict) -> dict:
        return {}

    def sample_independent(self, study: optuna.Study, trial: optuna.trial.FrozenTrial, param_name: str,
                           param_distribution: optuna.distributions.BaseDistribution) -> Any:
        if trial.number not in self._by_trial:
            c = self.propose(study)
            self._by_trial[trial.number] = None if c is None else encode(self.problem, c)
            self.proposed += c is not None
        params = self._by_trial[trial.number]
        if params is not None and param_name in params:
            return params[param_name]
        return self._fallback.sample_independent(study, trial, param_name, param_distribution)

    def after_trial(self, study: optuna.Study, trial: optuna.trial.FrozenTrial,
                    state: optuna.trial.TrialState, values: Sequence[float] | None) -> None:
        self._by_trial.pop(trial.number, None)
        if EXCESS_ATTR in trial.user_attrs:
            _process_constraints_after_trial(_constraints, study, trial, state)

    # --- the proposal ---------------------------------------------------------------------------
    def incumbent(self, trials: list[optuna.trial.FrozenTrial]) -> Candidate | None:
        """The best evaluated layout of ``trials`` (least clipped excess, then step, then trial
        number); None when none is evaluated."""
        best = None
        for t in trials:
            if t.state != optuna.trial.TrialState.COMPLETE:
                continue
            c = trial_layout(t)
            if c is None or not np.isfinite(c.step_ms) or not np.isfinite(c.excess_mib):
                continue
            if best is None or better(c, best):
                best = c
        return best

    def propose(self, study: optuna.Study) -> Candidate | None:
        """The best-ranked neighbour of the incumbent that beats it and the study does not hold
        (module docstring); None at a local optimum, when nothing is evaluated yet, or when the
        incumbent's neighbourhood is not scanned yet and :data:`SAMPLER_OPS` is spent (then
        ``capped`` is set) or the deadline passed before its scan ended (then ``timed_out``)."""
        trials = study.get_trials(deepcopy=False)
        inc = self.incumbent(trials)
        if inc is None:
            return None
        if inc.key() not in self._scans and self.spent_ops >= SAMPLER_OPS:
            self.capped = True
            return None
        held = {t.user_attrs["layout"] for t in trials if "layout" in t.user_attrs}
        try:
            ranked_nb = self._ranked(inc)
        except PastDeadline:
            self.timed_out = True
            return None
        for c in ranked_nb:
            if not better(c, inc):
                break  # ranked: no later neighbour beats the incumbent either
            if layout_json(c) not in held:
                return c
        return None

    def _ranked(self, inc: Candidate) -> list[Candidate]:
        """The representable neighbours of ``inc`` that beat it, best first, over the four
        neighbourhoods in order (the first that has any wins; memoised)."""
        key = inc.key()
        if key in self._scans:
            return self._scans[key]
        p = self.problem
        check_deadline(self.deadline)
        fit = search_fit(inc.V)  # the scans below clock it with self.deadline
        memo = fit_cache(p)
        out: list[Candidate] = []
        lazy = self._lazy_single(inc, fit, memo)
        single = None if lazy is None else lazy.scan()
        out = self._improving(inc, single)
        if not out:
            # a move over the budget never beats a fitting incumbent: price memory first
            one_opt = OneOptMoves(fitting_only=bool(fits(inc.peak_mib, p.hbm_mib)))
            out = self._improving(inc, self._scan(p, inc, one_opt, fit=fit, memo=memo, beat=True))
        if not out and single is not None:
            top = _pair_top(p, inc.V, None)
            if top >= 2:
                if lazy is not None:
                    single = lazy.settle(top).scan()
                order = rank_order(single.step_ms, single.excess_mib(p))
                pairs = PairMoves(singles=single.layouts.layers, order=order, top=top)
                out = self._improving(inc, self._scan(p, inc, pairs, fit=fit, memo=memo))
        if not out:
            opts = stage_options(p, inc, TRADE_TOP, deadline=self.deadline)
            trades = StageTrades(tuple((s, opts[s]) for s in range(p.P) if opts[s] is not None))
            sc = self._scan(p, inc, trades, beat=True)
            if sc is not None:  # each stage's improving trades in its own rank order, as a scan each
                for seg in trades.segments():
                    out += self._improving(inc, sc.part(seg))
            out = ranked(out)
        out = self._with_compound(inc, out)
        if len(self._scans) >= SCAN_MEMO:
            self._scans.pop(next(iter(self._scans)))
        self._scans[key] = out
        return out

    def _with_compound(self, inc: Candidate, out: list[Candidate]) -> list[Candidate]:
        """``out`` (the improving neighbours, best first) with the fitting layouts of
        :func:`~autotune.tuner.heuristic.compound_moves` over them that beat ``out[0]`` put first
        (best first): the improving moves on distinct devices applied together, so one trial takes
        what would take a trial each (only when ``inc`` fits). Their simulations count in
        ``spent_ops`` (:data:`SAMPLER_OPS`) as the scans' do."""
        p = self.problem
        if len(out) < 2 or not fits(inc.peak_mib, p.hbm_mib):
            return out
        combos = [c for c in compound_moves(inc, out[:COMPOUND_POOL]) if representable(p, c)]  # "neighbour"s
        self._spend(len(combos), inc.V)
        wins = [c for c in p.score(combos) if fits(c.peak_mib, p.hbm_mib) and better(c, out[0])]
        return ranked(wins) + out if wins else out

    def _lazy_single(self, inc: Candidate, fit, memo: dict) -> LazyScan | None:
        """The single-layer moves of ``inc`` as a :class:`~autotune.tuner.moves.LazyScan` with
        every neighbour that can beat a fitting ``inc`` simulated: those whose step floor is below
        inc's step × (1 − REL_TOL) × (1 + 2·REL_TOL). Its :meth:`_improving` list is the full
        scan's: a neighbour left out is slower than every better one by more than the tie unit
        (REL_TOL × the least step), so it ranks after them, and the row that ends the list in the
        full scan is not better either way. The pair-move order settles later, only when needed.
        For an incumbent over the budget every neighbour is simulated (as the full scan did).
        None when ``inc`` has no neighbour. Counts every neighbour in ``spent_ops``, as before."""
        p = self.problem
        lz = LazyScan(p, inc, SingleLayerMoves(), fit=fit, memo=memo, deadline=self.deadline)
        if lz.empty:
            return None
        self._spend(len(lz.step_ms), inc.V)
        if not fits(inc.peak_mib, p.hbm_mib):
            return lz.settle(len(lz.step_ms))
        return lz.settle_below(inc.step_ms * (1.0 - REL_TOL) * (1.0 + 2.0 * REL_TOL))

    def _scan(self, p: Problem, inc: Candidate, nbhd, **kw) -> Scan | None:
        """:func:`~autotune.tuner.moves.scan`, its simulated ops (neighbours × the schedule's
        ops) added to ``spent_ops`` (:data:`SAMPLER_OPS`)."""
        sc = scan(p, inc, nbhd, deadline=self.deadline, **kw)
        if sc is not None:
            self._spend(len(sc.step_ms), inc.V)
        return sc

    def _spend(self, layouts: int, V: int) -> None:
        """Add ``layouts`` simulations of V's schedule (× its ops) to ``spent_ops``."""
        p = self.problem
        self.spent_ops += float(layouts) * compile_schedule(p.schedule, p.P, V, p.m, p.seq_split_num).num_ops

    def _improving(self, inc: Candidate, sc: Scan | None) -> list[Candidate]:
        """The neighbours of a scan that beat ``inc`` and are layouts of the space, best first."""
        if sc is None:
            return []
        p = self.problem
        order = rank_order(sc.step_ms, sc.excess_mib(p))
        out = []
        for i in order:
            c = sc.candidate(p, int(i), origin="neighbour")
            if not better(c, inc):
                break
            if representable(p, c):
                out.append(c)
        return out


def layout_json(c: Candidate) -> str:
    """The ``layout`` user attribute of a candidate (the key a study holds it by)."""
    return json.dumps({"V": c.V, "layers": c.layers.tolist(), "rec": c.rec.tolist(),
                       "sel": c.sel.tolist(), "com": c.com.tolist()})
