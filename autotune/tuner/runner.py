"""The Optuna study that drives the search (the only place Optuna is used for tuning).

Flow: baselines (user's config, even split + full recompute, even split + no recompute) and the
heuristic seeds (:mod:`autotune.tuner.heuristic`) are enqueued first; TPE (seeded, multivariate,
constant liar) then proposes candidates through the valid-by-construction parameters of
:mod:`autotune.tuner.params`. Each trial stores its exact layout in ``user_attrs``; memory goes to
``trial.set_constraint("hbm_excess_mib", peak - budget)`` and a trial whose static memory alone
exceeds the budget is pruned before it is simulated. At the end, a local search from the best trial
runs and its answer is recorded as one more trial, so the study's history holds the final answer.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np
import optuna

from autotune.extras import require_storage
from autotune.tuner.heuristic import local_search
from autotune.tuner.params import decode, encode, representable
from autotune.tuner.problem import Candidate, Problem

CONSTRAINT_KEY = "hbm_excess_mib"


#: Seconds between the heartbeats a running trial writes to an RDB storage (Optuna's own thread).
HEARTBEAT_INTERVAL_S = 1
#: A RUNNING trial whose last heartbeat is older than this (s) is failed by Optuna and retried.
GRACE_PERIOD_S = 3
#: How many times one trial is retried after its worker died (then it stays FAIL).
MAX_RETRY = 3
#: ``origin`` user attribute of the search's final local-search trial: never retried (the next run
#: derives it again from the study's best trial).
POLISH_ORIGIN = "local-polish"


class RetryStaleTrial(optuna.storages.RetryHeartbeatStaleTrialCallback):
    """Optuna's retry of a heartbeat-stale trial (re-queued WAITING with the same parameters and
    user attributes; ``system_attrs['failed_trial']`` names the original), except the final
    ``local-polish`` trial, which is not part of the trial budget."""

    def __call__(self, study: optuna.Study, trial: optuna.trial.FrozenTrial) -> None:
        if trial.user_attrs.get("origin") == POLISH_ORIGIN:
            return
        super().__call__(study, trial)


#: TPE's expected-improvement candidates per trial (see run_study).
N_EI_CANDIDATES = 8


def make_rdb_storage(url: str, *, heartbeat_interval: int | None = HEARTBEAT_INTERVAL_S,
                     grace_period: int | None = GRACE_PERIOD_S, max_retry: int | None = MAX_RETRY,
                     engine_kwargs: dict[str, Any] | None = None) -> Any:
    """``optuna.storages.RDBStorage`` for a SQLAlchemy URL, with heartbeats on server databases.

    On PostgreSQL / MySQL URLs a running trial writes a heartbeat every ``heartbeat_interval`` s
    (Optuna's thread); a trial silent for ``grace_period`` s (its worker died) is failed by Optuna
    at the next ``optimize`` of the study, or by :func:`optuna.storages.fail_stale_trials`, and
    re-queued by :class:`RetryStaleTrial` (at most ``max_retry`` times). SQLite URLs get no
    heartbeat (a single host; a dead process leaves its trial RUNNING, as Optuna does).
    ``heartbeat_interval=None`` turns heartbeats off.

    Optuna 5 deprecates ``failed_trial_callback=RetryFailedTrialCallback(...)`` (warning, removal
    in 6.0); the same retry is passed as ``heartbeat_stale_trial_callback``.

    Raises:
        whatever SQLAlchemy / the driver raises for a bad URL or an unreachable server (callers
        mask the password before showing it).
    """
    import warnings

    kwargs: dict[str, Any] = {"engine_kwargs": {"pool_pre_ping": True, **(engine_kwargs or {})}}
    with warnings.catch_warnings():  # heartbeats are "experimental" in Optuna 5: no warning per open
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        if heartbeat_interval is not None and not url.startswith("sqlite"):
            kwargs.update(heartbeat_interval=int(heartbeat_interval),
                          grace_period=int(grace_period) if grace_period is not None else None,
                          heartbeat_stale_trial_callback=RetryStaleTrial(max_retry=max_retry))
        return optuna.storages.RDBStorage(url, **kwargs)


def open_storage(storage: Any) -> Any:
    """The Optuna storage for ``storage``.

    Args:
        storage: ``None`` -> in memory; an Optuna storage object (``BaseStorage``, e.g. one
            ``RDBStorage`` shared by many studies so the database is connected once) -> itself; a
            string with ``://`` -> :func:`make_rdb_storage` (heartbeats and retry of dead workers'
            trials on PostgreSQL); any other string or path -> a journal file
            (``JournalStorage(JournalFileBackend(path))``, parent folders created).

    Raises:
        ConfigError: ``storage`` is neither of these (rule ``storage``).
    """
    from autotune.errors import ConfigError

    if storage is None or isinstance(storage, optuna.storages.BaseStorage):
        return storage
    if not isinstance(storage, (str, Path)):
        raise ConfigError(f"expected None, a journal file path, a database URL or an Optuna storage "
                          f"object, got {type(storage).__name__}", field="storage",
                          value=type(storage).__name__, rule="storage")
    from autotune.tuner.storage import is_url, normalize_url
    from autotune.tuner.storage import open_storage as open_target

    require_storage(str(storage))  # names the extra instead of a driver ImportError
    target = str(storage)
    return open_target(normalize_url(target) if is_url(target) else target)


def _layout_attr(c: Candidate) -> str:
    return json.dumps({"V": c.V, "layers": c.layers.tolist(), "rec": c.rec.tolist(),
                       "sel": c.sel.tolist(), "com": c.com.tolist()})


def candidate_from_trial(trial: optuna.trial.FrozenTrial) -> Candidate | None:
    """The exact layout a finished trial evaluated (None when it has none recorded)."""
    raw = trial.user_attrs.get("layout")
    if raw is None:
        return None
    d = json.loads(raw)
    arr = lambda k: np.asarray(d[k], dtype=np.int64)  # noqa: E731
    return Candidate(int(d["V"]), arr("layers"), arr("rec"), arr("sel"), arr("com"),
                     step_ms=trial.values[0] if trial.values else float("inf"),
                     origin=trial.user_attrs.get("origin", "tpe"))


@dataclass
class StudyOutcome:
    """What :func:`run_study` returns: the study, the best candidate, trial count and seconds."""

    study: optuna.Study
    best: Candidate | None
    closest: Candidate | None
    trials: int
    seconds: float
    timed_out: bool = False


def run_study(problem: Problem, *, seeds: list[Candidate], n_trials: int = 200,
              timeout: float | None = None, seed: int | None = 0, storage: Any = None,
              study_name: str | None = None, progress: bool = False, local_polish: bool = True,
              on_trial: Callable[[int, float | None], None] | None = None,
              stop_at_ms: float | None = None, polish_deadline: float | None = None,
              bound_ms: float | None = None, progress_every_s: float = 30.0) -> StudyOutcome:
    """Run (or resume) the study and return the best memory-feasible candidate.

    Args:
        problem: the tuning problem.
        seeds: candidates enqueued first (deduplicated; unrepresentable ones are recorded directly).
        n_trials: trials to run in this call (enqueued ones included).
        timeout: wall-clock limit in seconds for the TPE phase.
        seed: sampler seed (same seed and inputs -> same answer when no timeout cuts the run).
        storage: None (memory), a journal file path, a database URL or an Optuna storage object
            (see :func:`open_storage`); an existing study of the same name is resumed.
        study_name: defaults to ``autotune``.
        progress: False; True or "bar": a tqdm bar (stderr) with the best value and the certified
            gap; "lines": one line on stderr every ``progress_every_s`` seconds (logs, non-TTY).
        on_trial: called after each trial with (trials done, best step so far).
        stop_at_ms: stop the study once a feasible trial reaches this step time (ms) — the
            certified-gap stop: ``bound × (1 + gap)``.
        polish_deadline: time.monotonic() limit for the final local search.
        bound_ms: the lower bound (ms), shown as the certified gap in the progress output.
    """
    t0 = time.monotonic()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    # n_ei_candidates 8 (default 24): multivariate TPE over ~100 parameters spends most of a
    # trial sampling candidates (15 of 20 s for 200 trials on TeleChat2 vpp1-4, measured); the
    # solver seeds and local moves carry the search, the sampler explores around them
    sampler = optuna.samplers.TPESampler(seed=seed, multivariate=True, constant_liar=True,
                                         n_startup_trials=10, n_ei_candidates=N_EI_CANDIDATES)
    study = optuna.create_study(storage=open_storage(storage), sampler=sampler,
                                study_name=study_name or "autotune", direction="minimize",
                                load_if_exists=True)
    done_keys = set()
    for t in study.get_trials(deepcopy=False):
        c = candidate_from_trial(t)
        if c is not None:
            done_keys.add(c.key())
    queued = 0
    for c in seeds:
        if c.key() in done_keys or not representable(problem, c):
            continue
        done_keys.add(c.key())
        study.enqueue_trial(encode(problem, c), user_attrs={"origin": c.origin})
        queued += 1

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

        bar = tqdm_class()(total=n_trials, desc="search", unit="trial", leave=False, dynamic_ncols=True)
    last_line = [time.monotonic()]

    def status(best: float | None) -> str:
        if best is None:
            return "no feasible trial yet"
        txt = f"best {best:.1f} ms"
        if bound_ms:
            txt += f", certified gap {max(0.0, best - bound_ms) / bound_ms:.2%}"
        return txt

    feas_best: list[float] = [min((t.values[0] for t in study.get_trials(
        deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,)) if t.values and _fits(t)),
        default=float("inf"))]

    def cb(study: optuna.Study, trial: optuna.trial.FrozenTrial) -> None:
        if trial.state == optuna.trial.TrialState.COMPLETE and trial.values and _fits(trial):
            feas_best[0] = min(feas_best[0], float(trial.values[0]))
        best = feas_best[0] if np.isfinite(feas_best[0]) else None
        if bar is not None:
            bar.update(1)
            bar.set_postfix_str(status(best))
        elif progress == "lines" and time.monotonic() - last_line[0] >= progress_every_s:
            import sys

            last_line[0] = time.monotonic()
            print(f"search: {len(study.trials)}/{n_trials} trials, {status(best)}, "
                  f"{time.monotonic() - t0:.0f} s", file=sys.stderr, flush=True)
        if on_trial is not None:
            on_trial(len(study.trials), best)
        if (stop_at_ms is not None and trial.state == optuna.trial.TrialState.COMPLETE
                and trial.values and trial.values[0] <= stop_at_ms
                and all(float(c) <= 0 for c in (trial.constraints.values()
                                                 if isinstance(trial.constraints, dict)
                                                 else (trial.constraints or [])))):
            study.stop()

    t_opt = time.monotonic()
    n_before = len(study.trials)
    study.optimize(objective, n_trials=max(n_trials, queued), timeout=timeout, callbacks=[cb],
                   catch=())
    timed_out = (timeout is not None and time.monotonic() - t_opt >= timeout
                 and len(study.trials) - n_before < max(n_trials, queued))
    if bar is not None:
        bar.close()
    best, closest = best_and_closest(study)
    done = stop_at_ms is not None and best is not None and best.step_ms <= stop_at_ms
    if local_polish and best is not None and not done:
        from autotune.tuner.solve import LOCAL_ITERS

        polished = local_search(problem, problem.score([best])[0], max_iters=LOCAL_ITERS,
                                deadline=polish_deadline)
        if polished.step_ms < best.step_ms - 1e-9 and representable(problem, polished):
            study.enqueue_trial(encode(problem, polished), user_attrs={"origin": POLISH_ORIGIN})
            study.optimize(objective, n_trials=1)
            best, closest = best_and_closest(study)
    return StudyOutcome(study, best, closest, len(study.trials), time.monotonic() - t0, timed_out)


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
