"""Run a sweep end to end: validate, prepare the store, start workers, write the summary.

Local workers are separate processes (``multiprocessing``, spawn start method: no database
connection or lock is inherited across a fork) supervised here. A worker that dies (SIGKILL, the
kernel's out-of-memory killer) is not an error: its scenario's claim goes stale at once (same host,
dead pid), a sibling takes it over and re-runs only its unfinished trial, and a replacement process
is started so that ``--workers`` stay busy. joblib/loky is not used for this: a dead loky worker
breaks the whole executor (``TerminatedWorkerError``, the siblings are terminated too).
"""

from __future__ import annotations

import logging
import multiprocessing as mp
import multiprocessing.connection
import os
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from autotune.errors import ConfigError
from autotune.sweep.claims import open_claims
from autotune.sweep.spec import Sweep, load_sweep
from autotune.sweep.summary import read_baseline, write_outputs
from autotune.sweep.worker import (MAX_CLAIMS, RESULT_ATTR, Worker, one_line, prepare, read_states, run_worker,
                                   setup_logging)
from autotune.tuner.storage import is_storage_error, mask_url, open_storage, redact, resolve_target

log = logging.getLogger("autotune.sweep")


@dataclass
class SweepOutcome:
    """Rows of the summary, the scenarios by status, and where things went.

    Attributes:
        rows: summary rows (sorted by scenario); infeasible / failed / timed_out / invalid: scenario
            names by status; ran: scenarios this command finished; seconds: wall time (s);
        storage: the store, password masked; out_dir: the output folder; errors: scenario -> error;
        lost_workers: local worker processes that died and were replaced.
    """

    rows: list[dict[str, Any]]
    infeasible: list[str]
    invalid: list[str]
    ran: list[str]
    seconds: float
    storage: str  # masked
    out_dir: str
    errors: dict[str, str] = field(default_factory=dict)
    failed: list[str] = field(default_factory=list)
    timed_out: list[str] = field(default_factory=list)
    lost_workers: int = 0

    @property
    def exit_code(self) -> int:
        """0: every scenario finished with a feasible config; 1: some has none or could not finish
        (``failed``); 2: some scenario turned out invalid while running (bad input)."""
        if self.invalid:
            return 2
        return 1 if self.infeasible or self.failed else 0


def collect(sweep: Sweep, target: str) -> dict[str, dict[str, Any]]:
    """Scenario name -> stored record, for every finished scenario."""
    storage = open_storage(target)
    states = read_states(storage, open_claims(storage, target), sweep)
    return {sc.name: states[sc.study_name].done for sc in sweep.scenarios
            if states[sc.study_name].done is not None}


def _child(sweep_path: str, target: str, label: str, parent_pid: int, conn: Any) -> None:
    """Body of a local worker process: work, then send ("ok", ran) or the error to the parent."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    try:
        msg: tuple = ("ok", run_worker(sweep_path, target, label, parent_pid=parent_pid))
    except ConfigError as exc:
        msg = ("config", exc.message, exc.field, exc.value, exc.rule)
    except BaseException as exc:  # noqa: BLE001 - reported by the parent as one line
        msg = ("error", one_line(exc, target))
    conn.send(msg)
    conn.close()


class _Pool:
    """``n`` local worker processes; a dead one is replaced (at most ``limit`` times in all)."""

    def __init__(self, sweep: Sweep, sweep_path: str, target: str, n: int) -> None:
        self.sweep, self.sweep_path, self.target = sweep, sweep_path, target
        self.ctx = mp.get_context("spawn")
        self.live: dict[int, tuple[Any, Any, str]] = {}
        self.started = 0
        self.lost = 0
        # every death moves one scenario one claim generation on; past MAX_CLAIMS it is given up
        self.limit = MAX_CLAIMS * len(sweep.scenarios) + n
        for _ in range(n):
            self._start()

    def _start(self) -> None:
        self.started += 1
        label = f"worker {self.started}"
        recv, send = self.ctx.Pipe(duplex=False)
        p = self.ctx.Process(target=_child, args=(self.sweep_path, self.target, label, os.getpid(), send),
                             name=f"autotune-sweep-{self.started}")
        p.start()
        send.close()
        self.live[p.sentinel] = (p, recv, label)

    def stop(self) -> None:
        for p, _, _ in self.live.values():
            if p.is_alive():
                p.terminate()
        for p, _, _ in self.live.values():
            p.join(timeout=10)
        self.live.clear()

    def wait(self) -> list[str]:
        """Run until every process has finished; returns the scenarios they finished.

        Raises:
            ConfigError / RuntimeError: a worker stopped with an error (the others are stopped).
        """
        ran: list[str] = []
        try:
            while self.live:
                for s in mp.connection.wait(list(self.live)):
                    p, recv, label = self.live.pop(s)
                    p.join()
                    try:  # a killed worker closed its end without a word: EOF
                        msg = recv.recv() if recv.poll() else None
                    except (EOFError, OSError):
                        msg = None
                    recv.close()
                    if msg is not None and msg[0] == "ok":
                        ran += msg[1]
                    elif msg is not None and msg[0] == "config":
                        raise ConfigError(msg[1], field=msg[2], value=msg[3], rule=msg[4])
                    elif msg is not None:
                        raise RuntimeError(f"{label}: {msg[1]}")
                    else:
                        self._lost(p, label)
        finally:
            self.stop()
        return ran

    def _lost(self, p: Any, label: str) -> None:
        code = p.exitcode
        how = f"signal {-code} ({signal.Signals(-code).name})" if code is not None and code < 0 else f"exit {code}"
        self.lost += 1
        if self.lost > self.limit:
            raise RuntimeError(f"{self.lost} local worker processes died ({label}: {how}); giving up")
        log.warning("%s (pid %s) died with %s; its scenario goes to another worker, starting a replacement",
                    label, p.pid, how)
        self._start()


def run_sweep(sweep_path: str | Path, *, storage: str | None = None, workers: int = 1,
              out_dir: str | Path = "sweep-out", fresh: bool = False, baseline: str | Path | None = None,
              report: bool = False) -> SweepOutcome:
    """Run (or resume) a sweep and write ``out_dir``.

    Args:
        sweep_path: the SWEEP.yaml.
        storage: database URL or journal path shared by all workers/hosts; None -> a journal file
            ``out_dir/sweep.journal``.
        workers: local worker processes (1: in this process); other hosts may run the same command.
        fresh: delete this sweep's studies first (start over).
        baseline: a previous night's ``summary.csv`` to diff against.
        report: also write ``<scenario>/report.txt``.

    Raises:
        ConfigError: bad sweep file, baseline, storage or worker count, or a storage that stayed
            unreachable (password masked).
        RuntimeError: an unexpected error outside the scenarios (message masked).
    """
    t0 = time.monotonic()
    if workers < 1:
        raise ConfigError(f"must be >= 1, got {workers}", field="--workers", value=workers, rule="range")
    sweep = load_sweep(sweep_path)
    prev = read_baseline(baseline) if baseline is not None else None
    target = resolve_target(storage, out_dir)
    setup_logging(target)
    lost = 0
    try:
        prepare(sweep, target, fresh=fresh)
        if workers == 1:
            ran = Worker(sweep, target, label="worker 1").run()
        else:
            pool = _Pool(sweep, str(Path(sweep_path).resolve()), target, workers)
            ran = pool.wait()
            lost = pool.lost
        records = collect(sweep, target)
    except ConfigError as exc:
        raise ConfigError(redact(exc.message, target), field=exc.field, value=exc.value, rule=exc.rule) from None
    except Exception as exc:  # noqa: BLE001 - mask the password whatever went wrong
        msg = one_line(exc, target)
        if is_storage_error(exc):
            raise ConfigError(msg, field="--storage", value=mask_url(target), rule="storage") from None
        raise RuntimeError(msg) from None
    rows = write_outputs(out_dir, sweep.name, records, baseline=prev, report=report)
    by = lambda status: [r["scenario"] for r in rows if r["status"] == status]  # noqa: E731
    return SweepOutcome(rows=rows, infeasible=by("infeasible"), invalid=by("invalid"), failed=by("failed"),
                        timed_out=by("timed_out"), ran=ran, seconds=time.monotonic() - t0,
                        storage=mask_url(target), out_dir=str(out_dir),
                        errors={n: r["error"] for n, r in records.items() if r.get("error")}, lost_workers=lost)


__all__ = ["run_sweep", "SweepOutcome", "collect", "RESULT_ATTR"]
