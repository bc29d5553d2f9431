"""Workers that share one study store and split a sweep's scenarios through it.

Protocol (the same on a journal file and on a database):

- **claim**: a worker owns a scenario by winning the claim ``(study, gen)`` on the claims board
  (:mod:`autotune.sweep.claims`: a table in the database, a side log next to a journal file); each
  generation has exactly one winner. Claims are not studies: the dashboard shows only scenarios.
- **heartbeat**: the owner bumps its claim's ``beat`` counter every ``lease/4`` s. Observers time
  the counter with their own clock (no clock sync between hosts needed); a claim whose counter has
  not moved for ``lease_seconds`` — or whose owner process is known dead on this same host, or
  which its owner released — is **stale**, and the scenario is taken over by claiming ``gen + 1``.
- **recovery**: the new owner marks the dead worker's RUNNING trials FAIL and re-queues them
  (Optuna's retry, ``system_attrs['failed_trial']`` names the original), then resumes the study to
  its budget: the re-queued trial runs first, no layout the study already holds (evaluated, WAITING
  or RUNNING) is enqueued again, and only finished trials count (:func:`autotune.tuner.runner.run_study`).
- **done**: the finished scenario's summary row, tuned YAML and report are stored as the
  ``autotune_sweep`` user attribute of the scenario study, so any host can write the summary.
  Before that, the owner fails any trial still WAITING (only a scenario ``timeout`` leaves one),
  so a finished sweep holds no WAITING trial.
- **budget**: work, never the clock: ``trials`` finished trials, the search's fixed local-search
  moves and the certified-gap stop. A scenario runs without the search's wall-clock safety net
  unless it sets ``timeout`` (then its row says ``timed_out`` with the gap at that moment when the
  limit fires), so the same sweep file and seed give the same rows on any machine, under any load
  and with any number of workers.
- **failures**: a storage error (lost database connection, full disk) is retried with exponential
  backoff for ``storage_retry_seconds``, then the worker stops with a one-line error. A scenario
  whose workers died :data:`MAX_CLAIMS` times is recorded as ``failed`` (not retried forever); an
  unexpected error inside one scenario's search is recorded as ``failed`` with its message, and
  the other scenarios go on.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from autotune.api import search
from autotune.errors import AutotuneError, ConfigError
from autotune.sweep.claims import Claim, open_claims
from autotune.sweep.spec import Scenario, Sweep, load_sweep
from autotune.sweep.summary import result_record
from autotune.tuner.storage import (MAX_RETRY, POLISH_ORIGIN, RetryStaleTrial, is_storage_error, mask_url,
                                    open_storage, redact)

log = logging.getLogger("autotune.sweep")

RESULT_ATTR = "autotune_sweep"
#: Name part of the claim studies of the old protocol (removed when a sweep starts).
LEGACY_CLAIM_SEP = ".claim."
#: A scenario claimed this many times (its workers died each time) is recorded as ``failed``.
MAX_CLAIMS = 4
#: Longest wait between two tries of a failed storage operation (s).
MAX_BACKOFF_S = 30.0

__all__ = ["RESULT_ATTR", "MAX_CLAIMS", "POLISH_ORIGIN", "Worker", "ScenarioState", "read_states",
           "prepare", "run_worker", "finished_budget_trials"]


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
    """What the store says about one scenario right now: its stored record (None until done)
    and its latest claim (None: never claimed)."""

    done: dict[str, Any] | None
    claim: Claim | None

    @property
    def gen(self) -> int | None:
        return None if self.claim is None else self.claim.gen


def read_states(storage: Any, board: Any, sweep: Sweep) -> dict[str, ScenarioState]:
    """Scenario study name -> :class:`ScenarioState`, from one listing of the storage and the board."""
    studies = {s.study_name: s for s in storage.get_all_studies()}
    names = [sc.study_name for sc in sweep.scenarios]
    claims = board.latest(names)
    out = {}
    for name in names:
        st = studies.get(name)
        out[name] = ScenarioState(done=st.user_attrs.get(RESULT_ATTR) if st is not None else None,
                                  claim=claims.get(name))
    return out


def finished_budget_trials(trials: list[Any]) -> int:
    """Trials that count against a scenario's budget: COMPLETE or PRUNED (the search's final
    polish trial included; a trial failed by a dead worker is not counted, its retry is)."""
    from autotune.tuner.runner import finished_trials  # noqa: PLC0415 - tuner.runner imports optuna (heavy)

    return finished_trials(trials)


class _Heartbeat(threading.Thread):
    """Bumps the claim's ``beat`` through the worker's claims board (its own connection pool / log)."""

    def __init__(self, board: Any, target: str, study_name: str, gen: int, token: str, interval: float) -> None:
        super().__init__(daemon=True, name="autotune-sweep-heartbeat")
        self.board, self.target, self.interval = board, target, interval
        self.key = (study_name, gen, token)
        self.halt = threading.Event()

    def run(self) -> None:
        beat = 0
        while not self.halt.wait(self.interval):
            beat += 1
            try:
                self.board.beat(*self.key, beat)
            except Exception as exc:  # noqa: BLE001 - a missed beat only risks a takeover
                log.warning("heartbeat failed: %s", one_line(exc, self.target))


def one_line(exc: BaseException, target: str | None) -> str:
    """``Type: first line of the message`` of an exception, the storage password masked."""
    text = str(exc).strip().splitlines()
    return redact(f"{type(exc).__name__}: {text[0] if text else ''}".rstrip(": "), target)


class Worker:
    """One worker process: claims scenarios until none is left, then waits for the others.

    Args:
        sweep: the loaded sweep; target: the storage URL or journal path.
        label: name used in log lines; poll_s: seconds between looks at the store when idle.
        parent_pid: for a local worker process, its parent's pid: when the parent is gone (the
            ``autotune sweep`` command was killed), the worker takes no new scenario.

    The storage is opened by :meth:`run`, inside its retry loop: the sweep command has already
    opened it (:func:`prepare`), so a worker that cannot open it (the database restarting while
    the worker starts) retries like any other storage error.
    """

    def __init__(self, sweep: Sweep, target: str, *, label: str = "worker", poll_s: float = 1.0,
                 parent_pid: int | None = None) -> None:
        self.sweep, self.target, self.label = sweep, target, label
        self.poll_s = min(poll_s, sweep.lease_seconds / 4)
        self.parent_pid = parent_pid
        self.storage: Any = None   # opened by _connect, inside run()'s retry loop
        self.board: Any = None
        self.worker_id = uuid.uuid4().hex[:12]
        self._seen: dict[tuple[str, int], tuple[Any, float]] = {}
        self._mine: dict[str, tuple[int, str]] = {}   # study -> (gen, token) of claims this worker holds
        self.ran: list[str] = []

    # --- claims -------------------------------------------------------------------------------
    def _stale(self, study_name: str, c: Claim) -> bool:
        if c.released:
            return True
        pid = c.owner.get("pid")
        if c.owner.get("host") == HOST and isinstance(pid, int) and pid != os.getpid() and _pid_dead(pid):
            return True
        key = (study_name, c.gen)
        now = time.monotonic()
        prev = self._seen.get(key)
        if prev is None or prev[0] != c.beat:
            self._seen[key] = (c.beat, now)
            return False
        return now - prev[1] > self.sweep.lease_seconds

    def _parent_gone(self) -> bool:
        return self.parent_pid is not None and os.getppid() != self.parent_pid

    # --- loop ---------------------------------------------------------------------------------
    def run(self) -> list[str]:
        """Work until every scenario is done; returns the scenarios this worker finished.

        Storage errors are retried with exponential backoff (1, 2, 4, … s, at most
        :data:`MAX_BACKOFF_S` apart) for ``sweep.storage_retry_seconds`` in all; the clock restarts
        whenever a scenario finishes.

        Raises:
            ConfigError: the storage stayed unreachable (rule ``storage``, one line, password masked).
        """
        delay, spent, progress = 1.0, 0.0, len(self.ran)
        while True:
            try:
                return self._loop()
            except Exception as exc:  # noqa: BLE001 - storage errors are retried, the rest re-raised
                opening = isinstance(exc, ConfigError) and exc.rule == "storage"   # open_storage, masked
                if not (opening or is_storage_error(exc)):
                    raise
                detail = exc.message if opening else one_line(exc, self.target)
                if len(self.ran) > progress:
                    delay, spent, progress = 1.0, 0.0, len(self.ran)
                if spent >= self.sweep.storage_retry_seconds:
                    for study, (gen, token) in self._mine.items():   # none before _connect
                        try:
                            self.board.release(study, gen, token)
                        except Exception:  # noqa: BLE001 - the store is gone; the lease will expire
                            pass
                    raise ConfigError(f"lost the study storage {mask_url(self.target)} and could not reach it "
                                      f"again for {spent:.0f} s: {detail}",
                                      field="--storage", value=mask_url(self.target), rule="storage") from None
                wait = min(delay, MAX_BACKOFF_S, max(0.1, self.sweep.storage_retry_seconds - spent))
                log.warning("%s: storage error, retrying in %.0f s: %s", self.label, wait, detail)
                time.sleep(wait)
                spent += wait
                delay *= 2

    def _connect(self) -> None:
        if self.board is None:
            self.storage = open_storage(self.target)
            self.board = open_claims(self.storage, self.target)

    def _loop(self) -> list[str]:
        self._connect()
        while True:
            if self._parent_gone():
                log.warning("%s: the sweep command that started this worker is gone; stopping", self.label)
                return self.ran
            states = read_states(self.storage, self.board, self.sweep)
            todo = [sc for sc in self.sweep.scenarios if states[sc.study_name].done is None]
            if not todo:
                return self.ran
            claimed = None
            for sc in todo:
                c = states[sc.study_name].claim
                mine = self._mine.get(sc.study_name)
                if mine is not None and c is not None and c.gen == mine[0]:
                    claimed = (sc, mine[0], mine[1])   # resume our own claim (after a storage error)
                    break
                if c is not None and not self._stale(sc.study_name, c):
                    continue
                gen = 0 if c is None else c.gen + 1
                owner = {"host": HOST, "pid": os.getpid(), "worker": self.worker_id}
                token = self.board.claim(sc.study_name, gen, owner)
                if token is not None:
                    self._mine[sc.study_name] = (gen, token)
                    claimed = (sc, gen, token)
                    break
            if claimed is None:
                time.sleep(self.poll_s)
                continue
            sc, gen, token = claimed
            beat = _Heartbeat(self.board, self.target, sc.study_name, gen, token,
                              max(0.2, self.sweep.lease_seconds / 4))
            beat.start()
            try:
                log.info("%s: %s scenario %s (study %s)", self.label, "took over" if gen else "claimed",
                         sc.name, sc.study_name)
                if self._run_scenario(sc, gen):
                    self.ran.append(sc.name)
                self._mine.pop(sc.study_name, None)
            finally:
                beat.halt.set()
                beat.join(timeout=5)

    def _recover(self, sc: Scenario) -> int:
        """Fail the RUNNING trials of the scenario's previous owner (dead, or this worker before a
        storage error) and re-queue them; returns how many were failed.

        On an RDB storage with heartbeats Optuna does it: :func:`optuna.storages.fail_stale_trials`
        fails every trial whose heartbeat is older than the grace period and its retry callback
        (:class:`autotune.tuner.storage.RetryStaleTrial`) enqueues the same parameters again; this
        waits at most ``grace_period + 2·heartbeat_interval`` s for the dead trials to go stale. Trials
        still RUNNING then (journal files have no heartbeats; a trial killed before its first beat)
        are failed here and re-queued by the same callback. The final ``local-polish`` trial is not
        re-queued (the search derives it again).
        """
        import optuna  # noqa: PLC0415 - optuna: heavy, loaded when a worker runs
        from optuna.trial import TrialState  # noqa: PLC0415 - optuna: heavy

        sid = self.storage.get_study_id_from_name(sc.study_name)
        running = {t._trial_id: t for t in self.storage.get_all_trials(sid, deepcopy=False)
                   if t.state == TrialState.RUNNING}
        if not running:
            return 0
        study = optuna.load_study(study_name=sc.study_name, storage=self.storage)
        interval = (self.storage.get_heartbeat_interval()
                    if isinstance(self.storage, optuna.storages.RDBStorage) else None)
        failed = 0
        if interval:
            grace = self.storage.grace_period or 2 * interval
            deadline = time.monotonic() + grace + 2 * interval
            while running:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                    optuna.storages.fail_stale_trials(study)
                still = {i: t for i, t in running.items()
                         if self.storage.get_trial(i).state == TrialState.RUNNING}
                failed += len(running) - len(still)
                running = still
                if not running or time.monotonic() > deadline:
                    break
                time.sleep(0.25)
        retry = RetryStaleTrial(max_retry=MAX_RETRY)
        for tid, t in running.items():
            try:
                self.storage.set_trial_user_attr(tid, "failed_reason", "worker died")
                self.storage.set_trial_state_values(tid, TrialState.FAIL)
            except optuna.exceptions.UpdateFinishedTrialError:
                continue  # it finished meanwhile (a slow worker, not a dead one)
            retry(study, t)
            failed += 1
        if failed:
            log.info("%s: %s: %d trial(s) of a dead worker marked FAIL and re-queued", self.label, sc.name,
                     failed)
        return failed

    def _fail_waiting(self, sc: Scenario, reason: str) -> int:
        """Fail the scenario's WAITING trials (a time limit left them): a finished scenario is never
        resumed, so nothing may stay queued. Returns how many."""
        from optuna.trial import TrialState  # noqa: PLC0415 - optuna: heavy

        sid = self.storage.get_study_id_from_name(sc.study_name)
        n = 0
        for t in self.storage.get_all_trials(sid, deepcopy=False, states=(TrialState.WAITING,)):
            self.storage.set_trial_user_attr(t._trial_id, "failed_reason", reason)
            if self.storage.set_trial_state_values(t._trial_id, TrialState.FAIL):
                n += 1
        return n

    def _record(self, sc: Scenario, record: dict[str, Any]) -> None:
        sid = self.storage.get_study_id_from_name(sc.study_name)
        self.storage.set_study_user_attr(sid, RESULT_ATTR, record)

    def _run_scenario(self, sc: Scenario, gen: int) -> bool:
        """Run (or resume) one scenario and store its record; False when another worker took it
        over meanwhile (nothing recorded)."""
        from optuna.exceptions import UpdateFinishedTrialError  # noqa: PLC0415 - optuna: heavy

        t0 = time.monotonic()
        worker = f"{HOST}:{os.getpid()}"
        if gen >= MAX_CLAIMS:
            msg = (f"claimed {gen} times and never finished (its workers died or lost the store each "
                   f"time); given up so that the sweep can end")
            log.warning("%s: scenario %s: %s", self.label, sc.name, msg)
            if self.board.is_current(sc.study_name, gen):
                self._record(sc, result_record(sc, None, status="failed", error=msg, seconds=0.0, worker=worker))
            return True
        self._recover(sc)
        result, status, error = None, "done", None
        try:
            kwargs = _gap_kwargs(sc.target_gap)
            result = search(sc.config, sc.profile, space=sc.space, trials=sc.trials, timeout=sc.timeout,
                            safety_net=False, seed=sc.seed, storage=self.storage, study_name=sc.study_name,
                            device=sc.device, hbm_margin=sc.hbm_margin, **kwargs)
            if result.best is None:
                status = "infeasible"
            elif result.timed_out:
                status = "timed_out"
        except AutotuneError as exc:
            status, error = "invalid", redact(str(exc), self.target)
        except UpdateFinishedTrialError:
            # This worker was slow, not dead: another one took the scenario over and failed our
            # running trial. Its retry is the new owner's; nothing of ours is recorded.
            log.warning("%s: scenario %s was taken over while a trial ran; leaving it to the new owner",
                        self.label, sc.name)
            return False
        except Exception as exc:  # noqa: BLE001 - storage errors are retried by run(); the rest is recorded
            if is_storage_error(exc):
                raise
            status, error = "failed", one_line(exc, self.target)
            log.error("%s: scenario %s failed: %s", self.label, sc.name, error)
        if not self.board.is_current(sc.study_name, gen):
            log.warning("%s: scenario %s was taken over by another worker; not recording", self.label, sc.name)
            return False
        left = self._fail_waiting(sc, "not run: the scenario's time limit ended it")
        if left:
            log.info("%s: %s: %d queued trial(s) not run (time limit) marked FAIL", self.label, sc.name, left)
        record = result_record(sc, result, status=status, error=error, seconds=time.monotonic() - t0,
                               worker=worker)
        self._record(sc, record)
        log.info("%s: %s %s in %.1f s", self.label, sc.name, status, time.monotonic() - t0)
        return True


def _gap_kwargs(target_gap: float | None) -> dict[str, Any]:
    """``gap=`` for :func:`autotune.api.search`: the scenario's target gap; ``0`` means "use the whole
    trial budget" (``gap=None``: no certified-gap stop); None keeps the search's default."""
    if target_gap is None:
        return {}
    return {"gap": None if target_gap == 0 else float(target_gap)}


def prepare(sweep: Sweep, target: str, *, fresh: bool = False) -> None:
    """Open the store, create every scenario study and the claims board once, before workers start
    (concurrent creation of a fresh schema crashes workers); remove claim studies of the old
    protocol; with ``fresh`` delete the sweep's studies and forget their claims first.

    Raises:
        ConfigError: the storage cannot be opened (password masked).
    """
    from optuna.exceptions import DuplicatedStudyError  # noqa: PLC0415 - optuna: heavy
    from optuna.study import StudyDirection  # noqa: PLC0415 - optuna: heavy

    storage = open_storage(target)
    board = open_claims(storage, target)
    names = {s.study_name: s._study_id for s in storage.get_all_studies()}
    ours = [sc.study_name for sc in sweep.scenarios]
    for name, sid in list(names.items()):
        if any(name.startswith(n + LEGACY_CLAIM_SEP) for n in ours):
            storage.delete_study(sid)
            del names[name]
    if fresh:
        for n in ours:
            if n in names:
                storage.delete_study(names.pop(n))
        board.reset(ours)
    for sc in sweep.scenarios:
        if sc.study_name in names:
            continue
        try:
            sid = storage.create_new_study([StudyDirection.MINIMIZE], sc.study_name)
            storage.set_study_user_attr(sid, "scenario", sc.name)
        except DuplicatedStudyError:
            pass


def run_worker(sweep_path: str, target: str, label: str = "worker", parent_pid: int | None = None) -> list[str]:
    """Entry point of one worker process: load the sweep and work (see :class:`Worker`).

    Raises:
        ConfigError: bad sweep file, or the storage is unreachable (password masked).
        RuntimeError: an unexpected error outside a scenario (message masked).
    """
    setup_logging(target)
    try:
        return Worker(load_sweep(sweep_path), target, label=label, parent_pid=parent_pid).run()
    except ConfigError as exc:
        raise ConfigError(redact(exc.message, target), field=exc.field, value=exc.value, rule=exc.rule) from None
    except Exception as exc:  # noqa: BLE001 - keep the password out of whatever surfaces
        msg = one_line(exc, target)
        if is_storage_error(exc):
            raise ConfigError(msg, field="--storage", value=mask_url(target), rule="storage") from None
        raise RuntimeError(msg) from None


def setup_logging(target: str | None = None) -> None:
    """One ``autotune sweep:`` line per event on stderr; a background thread's uncaught error (e.g.
    Optuna's trial heartbeat when the database is gone) is one masked warning line, not a traceback."""
    if not log.handlers:
        h = logging.StreamHandler()
        h.setFormatter(logging.Formatter("autotune sweep: %(message)s"))
        log.addHandler(h)
        log.setLevel(logging.INFO if os.environ.get("AUTOTUNE_SWEEP_QUIET") is None else logging.WARNING)
        log.propagate = False

    def hook(args: threading.ExceptHookArgs) -> None:
        if args.exc_type is SystemExit:
            return
        name = args.thread.name if args.thread is not None else "thread"
        log.warning("%s stopped: %s", name, one_line(args.exc_value or args.exc_type(), target))

    threading.excepthook = hook
