"""The Optuna study that drives the search (the only place Optuna is used for tuning).

Flow: baselines (user's config, even split + full recompute, even split + no recompute) and the
solver seeds (:mod:`autotune.tuner.solve`) are enqueued first; then the project's own
neighbourhood search, as an Optuna sampler (:class:`~autotune.tuner.sampler.NeighbourhoodSampler`),
proposes neighbours of the best trial that beat it, until none does. A trial's parameters are the
layout in the config's terms (:mod:`autotune.tuner.params`: ``layers_s0_v1``,
``recompute_s0_v1``, ...), its user attributes ``layout``, ``origin``, ``peak_mib``, ``fits``,
``step_ms`` and ``hbm_excess_mib``; the sampler stores the memory excess as the trial's Optuna
constraint (system attribute ``constraints``, where optuna-dashboard reads it). A trial whose
static memory alone exceeds the budget is pruned before it is simulated. At the end, a local
search from the best trial runs and its answer is recorded as one more trial, so the study's
history holds the final answer.

The trial budget belongs to the study: it counts finished (COMPLETE or PRUNED) trials, so resuming
a study (``--storage``, a sweep's takeover) runs only what is missing, a layout the study already
holds is never enqueued twice, and nothing is left WAITING unless a time limit cut the run.
Opening storages lives in :mod:`autotune.tuner.storage` (imported here, never the reverse).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np
import optuna

from autotune.cost.budget import excess_mib, fits
from autotune.errors import ConfigError
from autotune.extras import require_storage
from autotune.tuner.heuristic import finish_one_opt, local_search
from autotune.tuner.params import decode, encode, param_names, representable
from autotune.tuner.problem import Candidate, Problem, improves, ranked
from autotune.tuner.progress import Progress, as_progress
from autotune.tuner.sampler import EXCESS_ATTR, NeighbourhoodSampler, layout_json, trial_layout
from autotune.tuner.solve import LOCAL_ITERS
from autotune.tuner.storage import (  # noqa: F401
    GRACE_PERIOD_S,
    HEARTBEAT_INTERVAL_S,
    MAX_RETRY,
    POLISH_ORIGIN,
    RetryStaleTrial,
    is_url,
    make_rdb_storage,
    normalize_url,
)
from autotune.tuner.storage import open_storage as open_target

#: The user attribute holding a trial's memory excess (MiB; the sampler stores it as the trial's
#: Optuna constraint).
CONSTRAINT_KEY = EXCESS_ATTR


def open_storage(storage: Any) -> Any:
    """The Optuna storage for ``storage``.

    Args:
        storage: ``None`` -> in memory; an Optuna storage object (``BaseStorage``, e.g. one
            ``RDBStorage`` shared by many studies so the database is connected once) -> itself; a
            string with ``://`` -> :func:`~autotune.tuner.storage.make_rdb_storage` (heartbeats and
            retry of dead workers' trials on PostgreSQL); any other string or path -> a journal file
            (``JournalStorage(JournalFileBackend(path))``, parent folders created).

    Raises:
        ConfigError: ``storage`` is neither of these, or cannot be opened (rule ``storage``, the
            password masked).
    """
    if storage is None or isinstance(storage, optuna.storages.BaseStorage):
        return storage
    if not isinstance(storage, (str, Path)):
        raise ConfigError(f"expected None, a journal file path, a database URL or an Optuna storage "
                          f"object, got {type(storage).__name__}", field="storage",
                          value=type(storage).__name__, rule="storage")
    require_storage(str(storage))  # names the extra instead of a driver ImportError
    target = str(storage)
    return open_target(normalize_url(target) if is_url(target) else target)


def _layout_attr(c: Candidate) -> str:
    return layout_json(c)


def candidate_from_trial(trial: optuna.trial.FrozenTrial) -> Candidate | None:
    """The exact layout a trial evaluated, or will evaluate when it is WAITING (None when it has
    none recorded); step_ms is +inf until it has a value."""
    return trial_layout(trial)


#: Trial states that count against the trial budget (evaluated: a pruned trial's static memory
#: was computed).
FINISHED = (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED)
#: Trial states whose layout the study already holds: never enqueued again (a FAIL trial either has
#: its retry WAITING, or was given up after MAX_RETRY tries).
HELD = FINISHED + (optuna.trial.TrialState.WAITING, optuna.trial.TrialState.RUNNING)


def finished_trials(trials: list[optuna.trial.FrozenTrial]) -> int:
    """Trials that count against the trial budget: COMPLETE or PRUNED (the final local-polish
    trial included; a trial failed by a dead worker is not counted, its retry is)."""
    return sum(1 for t in trials if t.state in FINISHED)


def trial_key(problem: Problem, trial: optuna.trial.FrozenTrial) -> tuple | None:
    """:meth:`Candidate.key` of the layout a trial holds: from its ``layout`` attribute (set when
    it is enqueued or evaluated), else decoded from its parameters when they form a layout (a
    retried trial whose worker died before recording the layout); None when neither is there."""
    c = candidate_from_trial(trial)
    if c is not None:
        return c.key()
    try:
        return decode(problem, trial.params).key()
    except (KeyError, ValueError, IndexError, TypeError):
        return None


@dataclass
class StudyOutcome:
    """What :func:`run_study` returns.

    Attributes:
        study: the Optuna study; best / closest: the best feasible candidate / the least memory
            excess; trials: finished trials in the study (COMPLETE + PRUNED, earlier runs of a
            resumed study included; never more than the budget unless earlier runs had a larger
            one); ran: of those, finished by this call; seconds: wall time of this call (s).
        timed_out: the wall-clock ``timeout`` ended the study before its budget or gap target.
        stopped_by: why it ended: ``"gap"`` (a trial reached ``stop_at_ms``), ``"neighbourhood"``
            (no neighbour of the best trial beats it: a local optimum, more trials cannot help),
            ``"work"`` (the sampler's scans used :data:`~autotune.tuner.sampler.SAMPLER_OPS`),
            ``"trials"`` (the budget is used), ``"timeout"`` (the wall clock; ``timed_out``).
        waiting: WAITING trials left in the study (only after a time limit or a budget smaller
            than the queue; a resumed run runs them first).
        proposed: trials the :class:`~autotune.tuner.sampler.NeighbourhoodSampler` proposed in
            this call (the others were enqueued: seeds, retries, the polish trial).
    """

    study: optuna.Study
    best: Candidate | None
    closest: Candidate | None
    trials: int
    seconds: float
    timed_out: bool = False
    ran: int = 0
    stopped_by: str = "trials"
    waiting: int = 0
    proposed: int = 0


def _enqueue_seeds(study: optuna.Study, problem: Problem, seeds: list[Candidate], room: int,
                   held: set, best_first: bool = False) -> None:
    """Enqueue the seeds the study does not hold, at most ``room`` (the best ranked when there are
    more), in their given order, or with ``best_first`` the best ranked first: under a wall clock
    (a short ``--timeout``) the study may run only its first trial, and the answer is the best
    trial."""
    fresh: list[Candidate] = []
    for c in seeds:
        if c.key() in held or not representable(problem, c):
            continue
        held.add(c.key())
        fresh.append(c)
    if len(fresh) > room:
        keep = {id(c) for c in ranked(fresh)[:room]}
        fresh = [c for c in fresh if id(c) in keep]
    if best_first and fresh:
        top = ranked(fresh)[0]
        fresh = [top] + [c for c in fresh if c is not top]
    for c in fresh:
        study.enqueue_trial(encode(problem, c), user_attrs={"origin": c.origin, "layout": _layout_attr(c)})


def make_objective(problem: Problem) -> Callable[[optuna.Trial], float]:
    """The study's objective: suggest the layout (:mod:`autotune.tuner.params`, fixed for an
    enqueued trial, the sampler's proposal otherwise), simulate it, return the step time (ms).

    User attributes: ``layout`` (exact layout JSON), ``origin`` (``user``, ``even_*``, a solver
    tag, ``neighbour``, ``local-polish``), ``hbm_excess_mib`` (peak - budget, the constraint),
    ``peak_mib`` (worst stage), ``fits``, ``step_ms``. A trial whose static memory alone exceeds
    the budget is pruned before it is simulated (``peak_mib`` is then its static peak); one whose
    parameters are not a layout (a hand-made trial) is pruned with the reason in ``invalid``."""

    def objective(trial: optuna.Trial) -> float:
        V = trial.suggest_categorical("pp_interleave_num", problem.vpp_candidates)
        params: dict[str, Any] = {"pp_interleave_num": V}
        for n in param_names(problem, int(V)):
            params[n] = trial.suggest_int(n, 0, problem.N)
        try:
            cand = decode(problem, params)
        except ValueError as exc:
            trial.set_user_attr("invalid", str(exc))
            raise optuna.TrialPruned(str(exc)) from None
        trial.set_user_attr("layout", _layout_attr(cand))
        if "origin" not in trial.user_attrs:
            trial.set_user_attr("origin", "neighbour")
        costs = problem.costs(cand.V, cand.layers[None], cand.rec[None], cand.sel[None], cand.com[None])
        static = float(costs.static_mib[0].max())
        if not fits(static, problem.hbm_mib):  # pruned before it is simulated
            trial.set_user_attr(EXCESS_ATTR, excess_mib(static, problem.hbm_mib))
            trial.set_user_attr("peak_mib", static)
            trial.set_user_attr("fits", False)
            raise optuna.TrialPruned(f"static memory alone exceeds the budget by {static - problem.hbm_mib:.0f} MiB")
        s = problem.score_costs(cand.V, costs)
        step, peak = float(s.step_ms[0]), float(s.peak_mib[0].max())
        trial.set_user_attr(EXCESS_ATTR, excess_mib(peak, problem.hbm_mib))
        trial.set_user_attr("peak_mib", peak)
        trial.set_user_attr("fits", bool(fits(peak, problem.hbm_mib)))
        trial.set_user_attr("step_ms", step)
        return step

    return objective


class _Tracker:
    """The study callback: counts finished trials, follows the best feasible step, feeds the
    progress output and stops the study at the gap target or a local optimum (never while trials
    are WAITING)."""

    def __init__(self, existing: list, finished: int, n_trials: int, prog: Progress, stop_at_ms: float | None,
                 sampler: NeighbourhoodSampler, on_trial: Callable | None) -> None:
        TS = optuna.trial.TrialState
        self.best = min((t.values[0] for t in existing if t.state == TS.COMPLETE and t.values and _fits(t)),
                        default=float("inf"))
        self.finished, self.ran, self.calls = finished, 0, 0
        self.n_trials, self.prog, self.stop_at = n_trials, prog, stop_at_ms
        self.sampler, self.on_trial = sampler, on_trial
        self.stopped_by: str | None = "gap" if self.met() else None

    def met(self) -> bool:
        return self.stop_at is not None and self.best <= self.stop_at

    def best_ms(self) -> float | None:
        return self.best if np.isfinite(self.best) else None

    def should_stop(self, study: optuna.Study) -> bool:
        """True when no trial is WAITING and the gap target is met or the neighbourhood is spent."""
        if study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.WAITING,)):
            return False
        if self.met():
            self.stopped_by = "gap"
        elif self.sampler.propose(study) is None:
            if self.sampler.timed_out:
                return True  # the clock, not a local optimum: stopped_by stays None
            self.stopped_by = "work" if self.sampler.capped else "neighbourhood"
        else:
            return False
        return True

    def __call__(self, study: optuna.Study, trial: optuna.trial.FrozenTrial) -> None:
        self.calls += 1
        if trial.state in FINISHED:
            self.finished += 1
            self.ran += 1
        if trial.state == optuna.trial.TrialState.COMPLETE and trial.values and _fits(trial):
            self.best = min(self.best, float(trial.values[0]))
        self.prog.update(detail=f"{self.finished}/{self.n_trials} trials", done=self.finished, best_ms=self.best_ms())
        if self.on_trial is not None:
            self.on_trial(self.finished, self.best_ms())
        if self.should_stop(study):
            study.stop()


def _polish(study: optuna.Study, problem: Problem, best: Candidate | None, deadline: float | None,
            done: bool) -> bool:
    """Enqueue the final local search's answer from ``best`` (then the 1-opt finish; only the 1-opt
    finish when the gap target is met: every answer is 1-opt) when it is faster (True), as the
    ``local-polish`` trial."""
    if best is None:
        return False

    polished = problem.score([best])[0]
    if not done:
        polished = local_search(problem, polished, max_iters=LOCAL_ITERS, deadline=deadline)
    polished = finish_one_opt(problem, polished, deadline=deadline)
    if improves(polished.step_ms, best.step_ms) and representable(problem, polished):
        study.enqueue_trial(encode(problem, polished),
                            user_attrs={"origin": POLISH_ORIGIN, "layout": _layout_attr(polished)})
        return True
    return False


def add_trial(study: optuna.Study, problem: Problem, cand: Candidate) -> bool:
    """Run ``cand`` as one more trial of ``study`` (origin ``local-polish``, as the final local
    search's answer: an answer a local search found after the trials); False when the study's
    parameters cannot write it (:func:`~autotune.tuner.params.representable`) or the study holds a
    WAITING trial (which would run first). The trial's parameters are fixed (the sampler
    proposes nothing for it)."""
    if not representable(problem, cand) or study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.WAITING,)):
        return False  # a WAITING trial would run before it
    study.enqueue_trial(encode(problem, cand), user_attrs={"origin": POLISH_ORIGIN, "layout": _layout_attr(cand)})
    study.optimize(make_objective(problem), n_trials=1, catch=())
    return True


def run_study(problem: Problem, *, seeds: list[Candidate], n_trials: int = 200,
              timeout: float | None = None, seed: int | None = 0, storage: Any = None,
              study_name: str | None = None, progress: "bool | str | Progress" = False, local_polish: bool = True,
              on_trial: Callable[[int, float | None], None] | None = None,
              stop_at_ms: float | None = None, polish_deadline: float | None = None,
              bound_ms: float | None = None, progress_every_s: float = 10.0) -> StudyOutcome:
    """Run (or resume) the study up to ``n_trials`` finished trials and return the best
    memory-feasible candidate.

    The budget is the study's, not this call's: a resumed study that already holds k finished
    trials runs at most ``n_trials - k`` more (resume means resume). Order of work:

    1. trials already WAITING in the study (a dead worker's re-queued trial, seeds a time limit
       left) run first, oldest first;
    2. the seeds the study does not hold yet (by layout, whatever the state) are enqueued, at most
       as many as the budget has room for (the best ranked when there are more);
    3. the :class:`~autotune.tuner.sampler.NeighbourhoodSampler` proposes neighbours of the best
       trial that beat it, until none does (``stopped_by="neighbourhood"``), its scans have spent
       :data:`~autotune.tuner.sampler.SAMPLER_OPS` (``"work"``), the gap target is met
       or the budget is used;
    4. a local search from the best trial (with the pair and kick escapes); its answer is the last
       trial when it is faster (one budget slot is kept for it when ``local_polish`` and
       ``n_trials >= 2``), and the sampler goes on from it while the budget lasts.

    The gap stop (``stop_at_ms``) and the local-optimum stop never cut the queue: a WAITING
    trial (a retry) always runs.

    Args:
        problem: the tuning problem.
        seeds: candidates to enqueue (deduplicated against the study).
        n_trials: the study's trial budget (finished trials, the polish trial included), >= 0.
        timeout: wall-clock limit in seconds for this call's trials; when it fires the outcome says
            ``timed_out`` and WAITING trials may remain. With one, the best ranked seed is enqueued
            first (a short limit may leave time for the first trial only).
        seed: kept for the API; the sampler is deterministic (same study -> same proposals).
        storage: None (memory), a journal file path, a database URL or an Optuna storage object
            (see :func:`open_storage`); an existing study of the same name is resumed.
        study_name: defaults to ``autotune``.
        progress: False; True or "bar": a tqdm bar (stderr); "lines": status lines on stderr every
            ``progress_every_s`` seconds (logs); or a :class:`~autotune.tuner.progress.Progress`.
        on_trial: called after each trial with (finished trials in the study, best step so far).
        stop_at_ms: stop the study once a feasible trial reaches this step time (ms) — the
            certified-gap stop: ``bound × (1 + gap)``.
        polish_deadline: time.monotonic() limit for the final local search.
        bound_ms: the lower bound (ms), shown with the certified gap in the progress output.

    Raises:
        ConfigError: ``storage`` cannot be opened (password masked).
    """
    t0 = time.monotonic()
    TS = optuna.trial.TrialState
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    prog, own = as_progress(progress, progress_every_s)
    sampler = NeighbourhoodSampler(problem, deadline=None if timeout is None else t0 + timeout)
    study = optuna.create_study(storage=open_storage(storage), sampler=sampler,
                                study_name=study_name or "autotune", direction="minimize",
                                load_if_exists=True)
    existing = study.get_trials(deepcopy=False)
    finished_before = finished_trials(existing)
    held = {k for t in existing if t.state in HELD and (k := trial_key(problem, t)) is not None}
    reserve = 1 if local_polish and n_trials >= 2 else 0
    todo = max(0, n_trials - reserve - finished_before)  # before the polish slot, WAITING included
    _enqueue_seeds(study, problem, seeds, max(0, todo - sum(1 for t in existing if t.state == TS.WAITING)), held,
                   best_first=timeout is not None)
    track = _Tracker(existing, finished_before, n_trials, prog, stop_at_ms, sampler, on_trial)
    prog.update(best_ms=track.best_ms(), bound_ms=bound_ms)
    prog.phase("search", f"{finished_before}/{n_trials} trials", total=n_trials, done=min(finished_before, n_trials))
    timed_out = False
    if todo > 0 and not track.should_stop(study):
        study.optimize(make_objective(problem), n_trials=todo, timeout=timeout, callbacks=[track], catch=())
        # optimize ends early only by the gap / local-optimum stop or by the clock (catch=())
        timed_out = timeout is not None and track.stopped_by is None and track.calls < todo
    timed_out = timed_out or sampler.timed_out  # its last scan met the clock
    waiting = len(study.get_trials(deepcopy=False, states=(TS.WAITING,)))
    best, closest = best_and_closest(study)
    while reserve and not timed_out and not waiting and track.finished < n_trials:
        prog.phase("polish", "local search from the best trial")
        if not _polish(study, problem, best, polish_deadline, track.met()) and \
                (track.met() or track.should_stop(study)):
            break  # nothing faster, and the gap target met or no neighbour either
        track.stopped_by = None
        prog.phase("search", f"{track.finished}/{n_trials} trials", total=n_trials, done=track.finished)
        study.optimize(make_objective(problem), n_trials=n_trials - track.finished, callbacks=[track], catch=())
        best, closest = best_and_closest(study)
        reserve = 0  # the polish runs once
    timed_out = timed_out or sampler.timed_out  # the polish's trials met the clock
    if own:
        prog.close()
    stopped_by = "timeout" if timed_out else ("gap" if track.met() else (track.stopped_by or "trials"))
    return StudyOutcome(study, best, closest, track.finished, time.monotonic() - t0, timed_out,
                        ran=track.ran, stopped_by=stopped_by, waiting=waiting, proposed=sampler.proposed)


def _excess(trial: optuna.trial.FrozenTrial) -> float:
    """The trial's memory constraint (MiB over the budget; 0 when it has none): the largest of its
    constraint values (Optuna's ``constraints`` list, or the named ``constraints:hbm_excess_mib`` of
    studies made before)."""
    cons = trial.constraints
    vals = [float(v) for v in (cons.values() if isinstance(cons, dict) else (cons or []))]
    if not vals and EXCESS_ATTR in trial.user_attrs:
        vals = [float(trial.user_attrs[EXCESS_ATTR])]
    return max(vals) if vals else 0.0


def _fits(trial: optuna.trial.FrozenTrial) -> bool:
    """True when the trial's memory constraint holds (<= 0)."""
    return _excess(trial) <= 0


def best_and_closest(study: optuna.Study) -> tuple[Candidate | None, Candidate | None]:
    """(best feasible candidate, the candidate with the least memory excess) of a study."""
    best = closest = None
    best_excess = float("inf")
    for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,)):
        c = candidate_from_trial(t)
        if c is None:
            continue
        excess = _excess(t)
        c.excess_mib = excess
        c.peak_mib = float(t.user_attrs.get("peak_mib", float("nan")))
        if excess <= 0 and (best is None or c.step_ms < best.step_ms):
            best = c
        if excess < best_excess:
            best_excess, closest = excess, c
    return best, closest
