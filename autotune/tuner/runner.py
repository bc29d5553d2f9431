"""The Optuna study that drives the search (the only place Optuna is used for tuning).

Flow: baselines (user's config, even split + full recompute, even split + no recompute) and the
heuristic seeds (:mod:`autotune.tuner.heuristic`) are enqueued first; TPE (seeded, multivariate,
constant liar) then proposes candidates through the valid-by-construction parameters of
:mod:`autotune.tuner.params`. Each trial stores its exact layout in ``user_attrs``; memory goes to
``trial.set_constraint("hbm_excess_mib", peak - budget)`` and a trial whose static memory alone
exceeds the budget is pruned before it is simulated. At the end, a local search from the best trial
runs and its answer is recorded as one more trial, so the study's history holds the final answer.

The trial budget belongs to the study: it counts finished (COMPLETE or PRUNED) trials, so resuming
a study (``--storage``, a sweep's takeover) runs only what is missing, a layout the study already
holds is never enqueued twice, and nothing is left WAITING unless a time limit cut the run.
Opening storages lives in :mod:`autotune.tuner.storage` (imported here, never the reverse).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np
import optuna

from autotune.errors import ConfigError
from autotune.extras import require_storage
from autotune.tuner.heuristic import finish_one_opt, local_search
from autotune.tuner.params import decode, encode, representable
from autotune.tuner.problem import Candidate, Problem, improves
from autotune.tuner.storage import (GRACE_PERIOD_S, HEARTBEAT_INTERVAL_S, MAX_RETRY, POLISH_ORIGIN,  # noqa: F401
                                    RetryStaleTrial, is_url, make_rdb_storage, normalize_url)
from autotune.tuner.storage import open_storage as open_target

CONSTRAINT_KEY = "hbm_excess_mib"

#: TPE's expected-improvement candidates per trial (see run_study).
N_EI_CANDIDATES = 8
#: Work cap of TPE's proposals per :func:`run_study` call: at most this many (proposal ×
#: parameter) units, i.e. ``TPE_PARAM_TRIALS // parameters`` proposals besides the queued seeds.
#: Multivariate TPE costs ~(trials so far × parameters) per proposal, so 200 proposals over the
#: 512 parameters of pp 32 × vpp 4 took ~4× the CPU of 200 over TeleChat2's 128; the cap keeps
#: the trial budget of every problem with <= 128 parameters (the shipped examples) and shrinks it
#: above (512 parameters: 50 proposals, 1,024: 25). Deterministic (no clock).
TPE_PARAM_TRIALS = 25_600


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
    return json.dumps({"V": c.V, "layers": c.layers.tolist(), "rec": c.rec.tolist(),
                       "sel": c.sel.tolist(), "com": c.com.tolist()})


def candidate_from_trial(trial: optuna.trial.FrozenTrial) -> Candidate | None:
    """The exact layout a trial evaluated, or will evaluate when it is WAITING (None when it has
    none recorded)."""
    raw = trial.user_attrs.get("layout")
    if raw is None:
        return None
    d = json.loads(raw)
    arr = lambda k: np.asarray(d[k], dtype=np.int64)  # noqa: E731
    return Candidate(int(d["V"]), arr("layers"), arr("rec"), arr("sel"), arr("com"),
                     step_ms=trial.values[0] if trial.values else float("inf"),
                     origin=trial.user_attrs.get("origin", "tpe"))


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
    it is enqueued or evaluated), else decoded from its parameters when all are present (a retried
    trial whose worker died before recording the layout); None when neither is there."""
    c = candidate_from_trial(trial)
    if c is not None:
        return c.key()
    from autotune.tuner.params import param_names

    names = ["pp_interleave_num", *param_names(problem)]
    if not all(n in trial.params for n in names):
        return None
    try:
        return decode(problem, trial.params).key()
    except (KeyError, ValueError, IndexError):
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
        stopped_by: why it ended: ``"gap"`` (a trial reached ``stop_at_ms``), ``"trials"`` (the
            budget is used), ``"timeout"`` (the wall clock; ``timed_out``).
        waiting: WAITING trials left in the study (only after a time limit or a budget smaller
            than the queue; a resumed run runs them first).
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


def run_study(problem: Problem, *, seeds: list[Candidate], n_trials: int = 200,
              timeout: float | None = None, seed: int | None = 0, storage: Any = None,
              study_name: str | None = None, progress: bool | str = False, local_polish: bool = True,
              on_trial: Callable[[int, float | None], None] | None = None,
              stop_at_ms: float | None = None, polish_deadline: float | None = None,
              bound_ms: float | None = None, progress_every_s: float = 30.0) -> StudyOutcome:
    """Run (or resume) the study up to ``n_trials`` finished trials and return the best
    memory-feasible candidate.

    The budget is the study's, not this call's: a resumed study that already holds k finished
    trials runs at most ``n_trials - k`` more (resume means resume). Order of work:

    1. trials already WAITING in the study (a dead worker's re-queued trial, seeds a time limit
       left) run first, oldest first;
    2. the seeds the study does not hold yet (by layout, whatever the state: evaluated, WAITING or
       RUNNING) are enqueued, at most as many as the budget has room for (the best ranked when
       there are more: feasible first, then by step time);
    3. TPE proposes the rest;
    4. a local search from the best trial; its answer is the last trial when it is faster (one
       budget slot is kept for it when ``local_polish`` and ``n_trials >= 2``; when it finds
       nothing faster, TPE uses that slot).

    The gap stop (``stop_at_ms``) ends TPE's proposals, never the queue: the study stops once a
    feasible trial reaches it and no trial is left WAITING, so a retried trial always runs.

    Args:
        problem: the tuning problem.
        seeds: candidates to enqueue (deduplicated against the study).
        n_trials: the study's trial budget (finished trials, the polish trial included), >= 0;
            TPE proposes at most ``TPE_PARAM_TRIALS // parameters`` of them per call (a work cap
            that only bites above 128 parameters, i.e. 4·V·P > 128).
        timeout: wall-clock limit in seconds for this call's trials; when it fires the outcome says
            ``timed_out`` and WAITING trials may remain.
        seed: sampler seed (same seed and inputs -> same answer when no timeout cuts the run).
        storage: None (memory), a journal file path, a database URL or an Optuna storage object
            (see :func:`open_storage`); an existing study of the same name is resumed.
        study_name: defaults to ``autotune``.
        progress: False; True or "bar": a tqdm bar (stderr) with the best value and the certified
            gap; "lines": one line on stderr every ``progress_every_s`` seconds (logs, non-TTY).
        on_trial: called after each trial with (finished trials in the study, best step so far).
        stop_at_ms: stop the study once a feasible trial reaches this step time (ms) — the
            certified-gap stop: ``bound × (1 + gap)``.
        polish_deadline: time.monotonic() limit for the final local search.
        bound_ms: the lower bound (ms), shown as the certified gap in the progress output.

    Raises:
        ConfigError: ``storage`` cannot be opened (password masked).
    """
    t0 = time.monotonic()
    TS = optuna.trial.TrialState
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    # n_ei_candidates 8 (default 24): multivariate TPE over ~100 parameters spends most of a
    # trial sampling candidates (15 of 20 s for 200 trials on TeleChat2 vpp1-4, measured); the
    # solver seeds and local moves carry the search, the sampler explores around them
    sampler = optuna.samplers.TPESampler(seed=seed, multivariate=True, constant_liar=True,
                                         n_startup_trials=10, n_ei_candidates=N_EI_CANDIDATES)
    study = optuna.create_study(storage=open_storage(storage), sampler=sampler,
                                study_name=study_name or "autotune", direction="minimize",
                                load_if_exists=True)
    existing = study.get_trials(deepcopy=False)
    finished_before = finished_trials(existing)
    waiting_before = sum(1 for t in existing if t.state == TS.WAITING)
    held = {k for t in existing if t.state in HELD and (k := trial_key(problem, t)) is not None}
    reserve = 1 if local_polish and n_trials >= 2 else 0
    # trials this call may finish before the polish slot (WAITING ones included)
    todo = max(0, n_trials - reserve - finished_before)
    room = max(0, todo - waiting_before)
    fresh: list[Candidate] = []
    for c in seeds:
        if c.key() in held or not representable(problem, c):
            continue
        held.add(c.key())
        fresh.append(c)
    if len(fresh) > room:  # keep the best ranked, in their given order
        keep = {id(c) for c in sorted(fresh, key=lambda c: c.rank())[:room]}
        fresh = [c for c in fresh if id(c) in keep]
    for c in fresh:
        study.enqueue_trial(encode(problem, c), user_attrs={"origin": c.origin, "layout": _layout_attr(c)})

    def objective(trial: optuna.Trial) -> float:
        V = trial.suggest_categorical("pp_interleave_num", problem.vpp_candidates)
        params: dict[str, Any] = {"pp_interleave_num": V}
        from autotune.tuner.params import param_names, W_MAX

        for name in param_names(problem):
            hi = W_MAX if name.startswith("w") else 1.0
            params[name] = trial.suggest_float(name, 0.0, hi)
        cand = decode(problem, params)
        trial.set_user_attr("layout", _layout_attr(cand))
        if "origin" not in trial.user_attrs:
            trial.set_user_attr("origin", "tpe")
        costs = problem.costs(cand.V, cand.layers[None], cand.rec[None], cand.sel[None], cand.com[None])
        static_excess = float(costs.static_mib[0].max() - problem.hbm_mib)
        if static_excess > 0:  # pruned before it is simulated
            trial.set_constraint(CONSTRAINT_KEY, static_excess)
            raise optuna.TrialPruned(f"static memory alone exceeds the budget by {static_excess:.0f} MiB")
        s = problem.score_costs(cand.V, costs)
        cand.step_ms = float(s.step_ms[0])
        cand.peak_mib = float(s.peak_mib[0].max())
        cand.excess_mib = cand.peak_mib - problem.hbm_mib
        trial.set_constraint(CONSTRAINT_KEY, cand.excess_mib)
        trial.set_user_attr("peak_mib", cand.peak_mib)
        return cand.step_ms

    bar = None
    if progress and progress != "lines":
        from autotune.tuner.progress_bar import tqdm_class

        bar = tqdm_class()(total=n_trials, initial=min(finished_before, n_trials), desc="search", unit="trial",
                           leave=False, dynamic_ncols=True)
    last_line = [time.monotonic()]

    def status(best: float | None) -> str:
        if best is None:
            return "no feasible trial yet"
        txt = f"best {best:.1f} ms"
        if bound_ms:
            txt += f", certified gap {max(0.0, best - bound_ms) / bound_ms:.2%}"
        return txt

    feas_best: list[float] = [min((t.values[0] for t in existing if t.state == TS.COMPLETE
                                   and t.values and _fits(t)), default=float("inf"))]
    count = {"finished": finished_before, "ran": 0, "calls": 0, "gap": False}

    def cb(study: optuna.Study, trial: optuna.trial.FrozenTrial) -> None:
        count["calls"] += 1
        if trial.state in FINISHED:
            count["finished"] += 1
            count["ran"] += 1
        if trial.state == TS.COMPLETE and trial.values and _fits(trial):
            feas_best[0] = min(feas_best[0], float(trial.values[0]))
        best = feas_best[0] if np.isfinite(feas_best[0]) else None
        if bar is not None:
            bar.update(1)
            bar.set_postfix_str(status(best))
        elif progress == "lines" and time.monotonic() - last_line[0] >= progress_every_s:
            import sys

            last_line[0] = time.monotonic()
            print(f"search: {count['finished']}/{n_trials} trials, {status(best)}, "
                  f"{time.monotonic() - t0:.0f} s", file=sys.stderr, flush=True)
        if on_trial is not None:
            on_trial(count["finished"], best)
        if stop_at_ms is not None and best is not None and best <= stop_at_ms:
            count["gap"] = True
        if count["gap"] and not study.get_trials(deepcopy=False, states=(TS.WAITING,)):
            study.stop()  # the gap target is met and the queue is empty

    met = stop_at_ms is not None and feas_best[0] <= stop_at_ms
    timed_out = False
    # the queued trials run first, then at most tpe_cap proposals (TPE_PARAM_TRIALS)
    from autotune.tuner.params import param_names

    tpe_cap = max(10, TPE_PARAM_TRIALS // max(1, len(param_names(problem))))
    todo = min(todo, waiting_before + len(fresh) + tpe_cap)
    if todo > 0 and not (met and not waiting_before):
        study.optimize(objective, n_trials=todo, timeout=timeout, callbacks=[cb], catch=())
        # optimize ends early only by the gap stop or by the clock (catch=(): errors propagate)
        timed_out = timeout is not None and not count["gap"] and count["calls"] < todo
    count["gap"] = count["gap"] or met
    waiting = len(study.get_trials(deepcopy=False, states=(TS.WAITING,)))
    best, closest = best_and_closest(study)
    done = count["gap"] or (stop_at_ms is not None and best is not None and best.step_ms <= stop_at_ms)
    if reserve and not timed_out and not waiting and count["finished"] < n_trials:
        polished = None
        if best is not None:
            from autotune.tuner.solve import LOCAL_ITERS

            polished = problem.score([best])[0]
            if not done:  # the gap target met: only the 1-opt finish (every answer is 1-opt)
                polished = local_search(problem, polished, max_iters=LOCAL_ITERS, deadline=polish_deadline)
            polished = finish_one_opt(problem, polished, deadline=polish_deadline)
        better = (polished is not None and improves(polished.step_ms, best.step_ms)
                  and representable(problem, polished))
        if better:
            study.enqueue_trial(encode(problem, polished),
                                user_attrs={"origin": POLISH_ORIGIN, "layout": _layout_attr(polished)})
        if better or not done:
            # the polish trial, or (nothing faster found) one more TPE proposal in its slot
            study.optimize(objective, n_trials=1, callbacks=[cb], catch=())
            best, closest = best_and_closest(study)
            done = stop_at_ms is not None and best is not None and best.step_ms <= stop_at_ms
    if bar is not None:
        bar.close()
    stopped_by = "timeout" if timed_out else ("gap" if done else "trials")
    return StudyOutcome(study, best, closest, count["finished"], time.monotonic() - t0, timed_out,
                        ran=count["ran"], stopped_by=stopped_by, waiting=waiting)


def _fits(trial: optuna.trial.FrozenTrial) -> bool:
    """True when the trial's memory constraint holds (<= 0)."""
    cons = trial.constraints
    vals = cons.values() if isinstance(cons, dict) else (cons or [])
    return all(float(c) <= 0 for c in vals)


def best_and_closest(study: optuna.Study) -> tuple[Candidate | None, Candidate | None]:
    """(best feasible candidate, the candidate with the least memory excess) of a study."""
    best = closest = None
    best_excess = float("inf")
    for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,)):
        c = candidate_from_trial(t)
        if c is None:
            continue
        cons = t.constraints
        excess = float(cons.get(CONSTRAINT_KEY, 0.0)) if isinstance(cons, dict) else (float(cons[0]) if cons else 0.0)
        c.excess_mib = excess
        c.peak_mib = float(t.user_attrs.get("peak_mib", float("nan")))
        if excess <= 0 and (best is None or c.step_ms < best.step_ms):
            best = c
        if excess < best_excess:
            best_excess, closest = excess, c
    return best, closest
