"""Workers that share one study store and split a sweep's scenarios through it.

Protocol (works the same on a journal file and on a database, because it only uses Optuna storage
operations that are atomic on both):

- **claim**: a worker owns a scenario by creating the study ``<study>.claim.<gen>``. Study creation
  is atomic (a duplicate name fails), so exactly one worker wins generation ``gen``.
- **heartbeat**: the owner bumps the ``beat`` counter on its claim study every ``lease/4`` s.
  Observers time the counter with their own clock (no clock sync between hosts needed); a claim
  whose counter has not moved for ``lease_seconds`` — or whose owner process is known dead on this
  same host — is **stale**, and the scenario is taken over by creating generation ``gen + 1``.
- **recovery**: the new owner marks the dead worker's RUNNING trials FAIL and enqueues their
  parameters again (``origin=retry``), then runs only the budget not yet finished.
- **done**: the finished scenario's summary row, tuned YAML and report are stored as the
  ``autotune_sweep`` user attribute of the scenario study, so any host can write the summary.

The trial budget counts finished (COMPLETE or PRUNED) trials other than the search's final
``local-polish`` trial; trials failed by a dead worker do not count.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from autotune.errors import AutotuneError, ConfigError
from autotune.sweep.spec import Scenario, Sweep
from autotune.tuner.storage import open_storage, redact

log = logging.getLogger("autotune.sweep")

RESULT_ATTR = "autotune_sweep"
CLAIM_SEP = ".claim."
POLISH_ORIGIN = "local-polish"  # = autotune.tuner.runner.POLISH_ORIGIN (not imported: no Optuna at import)


def claim_name(study_name: str, gen: int) -> str:
    return f"{study_name}{CLAIM_SEP}{gen}"


def _host_id() -> str:
    boot = ""
    try:
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()[:8]
    except OSError:
        pass
    return f"{socket.gethostname()}/{boot}"


HOST = _host_id()


def _pid_dead(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    try:  # a killed child its parent has not reaped yet is a zombie: dead for our purpose
        stat = Path(f"/proc/{pid}/stat").read_text()
        return stat.rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except (OSError, IndexError):
        return False


@dataclass
class ScenarioState:
    """What the storage says about one scenario right now."""

    done: dict[str, Any] | None
    gen: int | None            # latest claim generation (None: never claimed)
    claim: dict[str, Any]      # that claim's user attrs (owner host/pid/worker, beat)


def read_states(storage: Any, sweep: Sweep) -> dict[str, ScenarioState]:
    """Scenario study name -> :class:`ScenarioState`, from one listing of the storage."""
    studies = {s.study_name: s for s in storage.get_all_studies()}
    out = {}
    for sc in sweep.scenarios:
        st = studies.get(sc.study_name)
        done = st.user_attrs.get(RESULT_ATTR) if st is not None else None
        gen, attrs = None, {}
        g = 0
        while claim_name(sc.study_name, g) in studies:
            gen, attrs = g, studies[claim_name(sc.study_name, g)].user_attrs
            g += 1
        out[sc.study_name] = ScenarioState(done=done, gen=gen, claim=dict(attrs))
    return out


def finished_budget_trials(trials: list[Any]) -> int:
    """Trials that count against the budget: COMPLETE or PRUNED, not the final polish trial."""
    from optuna.trial import TrialState

    return sum(1 for t in trials if t.state in (TrialState.COMPLETE, TrialState.PRUNED)
               and t.user_attrs.get("origin") != POLISH_ORIGIN)


class _Heartbeat(threading.Thread):
    """Bumps the claim's ``beat`` through the worker's own storage object (Optuna's RDB and journal
    storages are thread-safe), so a scenario opens no new connection."""

    def __init__(self, storage: Any, target: str, claim_study_id: int, interval: float) -> None:
        super().__init__(daemon=True, name="autotune-sweep-heartbeat")
        self.storage, self.target, self.claim_study_id, self.interval = storage, target, claim_study_id, interval
        self.halt = threading.Event()

    def run(self) -> None:
        storage = self.storage
        beat = 0
        while not self.halt.wait(self.interval):
            beat += 1
            try:
                storage.set_study_user_attr(self.claim_study_id, "beat", beat)
            except Exception as exc:  # noqa: BLE001 - a missed beat only risks a takeover
                log.warning("heartbeat failed: %s", redact(str(exc), self.target))


class Worker:
    """One worker process: claims scenarios until none is left, then waits for the others."""

    def __init__(self, sweep: Sweep, target: str, *, label: str = "worker", poll_s: float = 0.5) -> None:
        self.sweep, self.target, self.label = sweep, target, label
        self.poll_s = min(poll_s, sweep.lease_seconds / 4)
        self.storage = open_storage(target)
        self.worker_id = uuid.uuid4().hex[:12]
        self._seen: dict[str, tuple[Any, float]] = {}
        self.ran: list[str] = []

    # --- claims -------------------------------------------------------------------------------
    def _stale(self, study_name: str, st: ScenarioState) -> bool:
        c = st.claim
        if c.get("released"):
            return True
        if c.get("host") == HOST and isinstance(c.get("pid"), int) and c["pid"] != os.getpid() \
                and _pid_dead(c["pid"]):
            return True
        key = claim_name(study_name, st.gen or 0)
        now = time.monotonic()
        beat = c.get("beat")
        prev = self._seen.get(key)
        if prev is None or prev[0] != beat:
            self._seen[key] = (beat, now)
            return False
        return now - prev[1] > self.sweep.lease_seconds

    def _try_claim(self, sc: Scenario, gen: int) -> int | None:
        from optuna.exceptions import DuplicatedStudyError
        from optuna.study import StudyDirection

        try:
            sid = self.storage.create_new_study([StudyDirection.MINIMIZE], claim_name(sc.study_name, gen))
        except DuplicatedStudyError:
            return None
        for k, v in (("host", HOST), ("pid", os.getpid()), ("worker", self.worker_id), ("beat", 0)):
            self.storage.set_study_user_attr(sid, k, v)
        return sid

    def _still_mine(self, sc: Scenario, gen: int) -> bool:
        names = {s.study_name for s in self.storage.get_all_studies()}
        return claim_name(sc.study_name, gen + 1) not in names

    # --- loop ---------------------------------------------------------------------------------
    def run(self) -> list[str]:
        """Work until every scenario is done; returns the scenarios this worker ran."""
        while True:
            states = read_states(self.storage, self.sweep)
            todo = [sc for sc in self.sweep.scenarios if states[sc.study_name].done is None]
            if not todo:
                return self.ran
            claimed = None
            for sc in todo:
                st = states[sc.study_name]
                gen = 0 if st.gen is None else st.gen + 1
                if st.gen is not None and not self._stale(sc.study_name, st):
                    continue
                sid = self._try_claim(sc, gen)
                if sid is not None:
                    claimed = (sc, gen, sid)
                    break
            if claimed is None:
                time.sleep(self.poll_s)
                continue
            sc, gen, sid = claimed
            beat = _Heartbeat(self.storage, self.target, sid, max(0.2, self.sweep.lease_seconds / 4))
            beat.start()
            try:
                log.info("%s: %s scenario %s (study %s)", self.label, "took over" if gen else "claimed",
                         sc.name, sc.study_name)
                self._run_scenario(sc, gen, sid)
                self.ran.append(sc.name)
            finally:
                beat.halt.set()
                beat.join(timeout=5)

    def _recover(self, sc: Scenario) -> tuple[int, int]:
        """Fail the RUNNING trials of the scenario's dead owner and re-queue them; returns
        (failed, finished budget trials).

        On an RDB storage with heartbeats Optuna does it: :func:`optuna.storages.fail_stale_trials`
        fails every trial whose heartbeat is older than the grace period and its retry callback
        (:class:`autotune.tuner.runner.RetryStaleTrial`) enqueues the same parameters again; this
        waits at most ``grace_period + 2·heartbeat_interval`` s for the dead trials to go stale. Trials
        still RUNNING then (journal files have no heartbeats; a trial killed before its first beat)
        are failed here and re-queued by the same callback. Retried trials carry
        ``system_attrs['failed_trial']`` (the original's number); the final ``local-polish`` trial
        is not retried (it is outside the budget).
        """
        import warnings

        import optuna
        from optuna.trial import TrialState

        from autotune.tuner.runner import MAX_RETRY, RetryStaleTrial

        sid = self.storage.get_study_id_from_name(sc.study_name)
        running = {t._trial_id: t for t in self.storage.get_all_trials(sid, deepcopy=False)
                   if t.state == TrialState.RUNNING}
        if running:
            study = optuna.load_study(study_name=sc.study_name, storage=self.storage)
            interval = (self.storage.get_heartbeat_interval()
                        if isinstance(self.storage, optuna.storages.RDBStorage) else None)
            if interval:
                grace = self.storage.grace_period or 2 * interval
                deadline = time.monotonic() + grace + 2 * interval
                while running:
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                        optuna.storages.fail_stale_trials(study)
                    running = {i: t for i, t in running.items()
                               if self.storage.get_trial(i).state == TrialState.RUNNING}
                    if not running or time.monotonic() > deadline:
                        break
                    time.sleep(0.25)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                retry = RetryStaleTrial(max_retry=MAX_RETRY)
            for tid, t in running.items():
                self.storage.set_trial_user_attr(tid, "failed_reason", "worker died")
                self.storage.set_trial_state_values(tid, TrialState.FAIL)
                retry(study, t)
        trials = self.storage.get_all_trials(sid, deepcopy=False)
        failed = sum(1 for t in trials if t.state == TrialState.FAIL)
        if failed:
            log.info("%s: %s: %d trial(s) of a dead worker marked FAIL and re-queued", self.label, sc.name,
                     failed)
        return failed, finished_budget_trials(trials)

    def _run_scenario(self, sc: Scenario, gen: int, claim_sid: int) -> None:
        from optuna.exceptions import UpdateFinishedTrialError

        from autotune.api import search

        _, finished = self._recover(sc)
        t0 = time.monotonic()
        result = None
        status, error = "done", None
        try:
            kwargs = _gap_kwargs(search, sc.target_gap)
            result = search(sc.config, sc.profile, space=sc.space, trials=max(0, sc.trials - finished),
                            timeout=sc.timeout, seed=sc.seed, storage=self.storage,
                            study_name=sc.study_name, device=sc.device, hbm_margin=sc.hbm_margin, **kwargs)
            if result.best is None:
                status = "infeasible"
        except AutotuneError as exc:
            status, error = "invalid", redact(str(exc), self.target)
        except UpdateFinishedTrialError:
            # This worker was slow, not dead: another one took the scenario over and failed our
            # running trial. Its retry is the new owner's; nothing of ours is recorded.
            log.warning("%s: scenario %s was taken over while a trial ran; leaving it to the new owner",
                        self.label, sc.name)
            return
        if not self._still_mine(sc, gen):
            log.warning("%s: scenario %s was taken over by another worker; not recording", self.label, sc.name)
            return
        from autotune.sweep.summary import result_record

        record = result_record(sc, result, status=status, error=error,
                               seconds=time.monotonic() - t0, worker=f"{HOST}:{os.getpid()}")
        sid = self.storage.get_study_id_from_name(sc.study_name)
        self.storage.set_study_user_attr(sid, RESULT_ATTR, record)
        log.info("%s: %s %s in %.1f s", self.label, sc.name, status, time.monotonic() - t0)


def _gap_kwargs(search: Any, target_gap: float | None) -> dict[str, Any]:
    """``gap=`` for :func:`autotune.api.search`: the scenario's target gap; ``0`` means "use the whole
    trial budget" (``gap=None``: no certified-gap stop); None keeps the search's default."""
    if target_gap is None:
        return {}
    return {"gap": None if target_gap == 0 else float(target_gap)}


def prepare(sweep: Sweep, target: str, *, fresh: bool = False) -> None:
    """Create every scenario study once, before workers start (concurrent creation of a fresh
    schema crashes workers); with ``fresh`` delete the sweep's studies and claims first."""
    from optuna.exceptions import DuplicatedStudyError
    from optuna.study import StudyDirection

    storage = open_storage(target)
    names = {s.study_name: s._study_id for s in storage.get_all_studies()}
    if fresh:
        for sc in sweep.scenarios:
            for name, sid in names.items():
                if name == sc.study_name or name.startswith(sc.study_name + CLAIM_SEP):
                    storage.delete_study(sid)
        names = {}
    for sc in sweep.scenarios:
        if sc.study_name in names:
            continue
        try:
            sid = storage.create_new_study([StudyDirection.MINIMIZE], sc.study_name)
            storage.set_study_user_attr(sid, "scenario", sc.name)
        except DuplicatedStudyError:
            pass


def run_worker(sweep_path: str, target: str, label: str = "worker") -> list[str]:
    """Entry point of one worker process (loky-picklable): load the sweep and work."""
    from autotune.sweep.spec import load_sweep

    _setup_logging()
    try:
        return Worker(load_sweep(sweep_path), target, label=label).run()
    except ConfigError as exc:
        raise ConfigError(redact(exc.message, target), field=exc.field, value=exc.value, rule=exc.rule) from None
    except Exception as exc:  # noqa: BLE001 - keep the password out of whatever surfaces
        from autotune.sweep.run import _is_storage_error

        msg = redact(f"{type(exc).__name__}: {exc}", target)
        if _is_storage_error(exc):
            raise ConfigError(msg, field="--storage", value=None, rule="storage") from None
        raise RuntimeError(msg) from None


def _setup_logging() -> None:
    if not log.handlers:
        h = logging.StreamHandler()
        h.setFormatter(logging.Formatter("autotune sweep: %(message)s"))
        log.addHandler(h)
        log.setLevel(logging.INFO if os.environ.get("AUTOTUNE_SWEEP_QUIET") is None else logging.WARNING)
        log.propagate = False
