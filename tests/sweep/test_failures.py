"""A dead worker is not a dead sweep (journal file and the real PostgreSQL):

- SIGKILL of one local worker process of ``autotune sweep --workers 3``: the command replaces it,
  a sibling takes its scenario over, and it exits 0 with every scenario done — no traceback;
- SIGKILL of a whole host (the command and all its worker processes): another host finishes every
  scenario, with the same rows as an undisturbed run;
- a scenario that kills every worker that runs it is given up after MAX_CLAIMS tries: exit 1 naming it;
- a lost database connection is retried with backoff; a database gone for good ends in one line.

Each run ends with no WAITING trial and no layout evaluated twice (sweep_helpers.check_clean).
"""

from __future__ import annotations

import csv
import io
import time

import pytest

from autotune.sweep import run_sweep
from tests.conftest import MACHINE_LOAD
from tests.sweep.sweep_helpers import (budget_done, check_clean, kill_group, pg_admin, snapshot,
                                       start_worker, study_names, wait_for, write_sweep)

# end to end: real worker processes killed on a journal and on PostgreSQL. The kills are timed against
# running trials, so these run in the one process of the tests that load the machine
# (tests/conftest.py: MACHINE_LOAD), never beside their busy loops.
pytestmark = [pytest.mark.slow, MACHINE_LOAD]


def _rows(path):
    return {r["scenario"]: r for r in csv.DictReader(io.StringIO(path.read_text()))}


def _running_in(store, sweep, pids):
    """A scenario whose owner is one of ``pids`` and which has a RUNNING trial and a finished one."""
    for name, s in snapshot(store, sweep).items():
        if s["claim"].get("pid") in pids and s["done"] is None:
            if any(t[1] == "RUNNING" for t in s["trials"]) and any(t[1] == "COMPLETE" for t in s["trials"]):
                return name, s["claim"]["pid"]
    return None


def _children(pid: int) -> list[int]:
    from pathlib import Path

    out = []
    for p in Path("/proc").iterdir():
        if p.name.isdigit():
            try:
                ppid = int((p / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            if ppid == pid:
                out.append(int(p.name))
    return out


def test_sigkill_of_a_local_worker_process_is_not_fatal(store, tmp_path):
    sweep = write_sweep(tmp_path / "sweep.yaml", trials=10, mbs=(4, 8, 12), memories=("1GB", "0.6GB"))
    log = tmp_path / "host.log"
    host = start_worker(str(sweep), "--storage", store, "--workers", "3", "--out", str(tmp_path / "out"),
                        delay=0.3, log=log)
    name, pid = wait_for(lambda: _running_in(store, sweep, set(_children(host.pid))), timeout=120, every=0.05)
    import os
    import signal

    os.kill(pid, signal.SIGKILL)
    assert host.wait(timeout=240) == 0, log.read_text()
    text = log.read_text()
    assert "Traceback" not in text and "TerminatedWorkerError" not in text
    assert f"(pid {pid}) died with signal 9 (SIGKILL)" in text
    snap = snapshot(store, sweep)
    assert snap[name]["gen"] == 1                                   # taken over once
    assert all(s["done"]["row"]["status"] == "done" for s in snap.values())
    assert all(budget_done(s, 10) for s in snap.values())
    check_clean(snap)
    rows = _rows(tmp_path / "out" / "summary.csv")
    assert len(rows) == 6 and {r["status"] for r in rows.values()} == {"done"}


def test_sigkill_of_a_whole_host_leaves_the_job_to_the_other(store, tmp_path):
    sweep = write_sweep(tmp_path / "sweep.yaml", trials=10, mbs=(4, 8, 12), memories=("1GB", "0.6GB"))
    ref = run_sweep(sweep, storage=str(tmp_path / "ref" / "ref.journal"), out_dir=tmp_path / "ref")
    assert ref.exit_code == 0
    a = start_worker(str(sweep), "--storage", store, "--workers", "2", "--out", str(tmp_path / "a"), delay=0.3,
                     log=tmp_path / "a.log", group=True)
    time.sleep(1.0)
    b = start_worker(str(sweep), "--storage", store, "--workers", "2", "--out", str(tmp_path / "b"), delay=0.3,
                     log=tmp_path / "b.log", group=True)
    wait_for(lambda: _running_in(store, sweep, set(_children(a.pid))), timeout=120, every=0.05)
    kill_group(a)                                                  # host A: command and workers
    assert b.wait(timeout=240) == 0, (tmp_path / "b.log").read_text()
    assert "Traceback" not in (tmp_path / "b.log").read_text()
    snap = snapshot(store, sweep)
    assert any(s["gen"] >= 1 for s in snap.values())                # something was taken over
    check_clean(snap)
    assert all(budget_done(s, 10) for s in snap.values())
    # the same rows as the undisturbed run (this space is enumerated: the answer is the optimum)
    assert (tmp_path / "b" / "summary.csv").read_text() == (tmp_path / "ref" / "summary.csv").read_text()


def test_a_scenario_that_kills_its_workers_is_given_up(tmp_path):
    sweep = write_sweep(tmp_path / "sweep.yaml", trials=6, mbs=(4, 8), memories=("1GB",))
    log = tmp_path / "host.log"
    host = start_worker(str(sweep), "--workers", "2", "--out", str(tmp_path / "out"), log=log,
                        env={"AUTOTUNE_TEST_KILL_MB": "8"})
    assert host.wait(timeout=240) == 1, log.read_text()
    text = log.read_text()
    assert "Traceback" not in text
    assert "could not finish: tiny-mb8-hbm1GB: claimed 4 times and never finished" in text
    rows = _rows(tmp_path / "out" / "summary.csv")
    assert rows["tiny-mb4-hbm1GB"]["status"] == "done" and rows["tiny-mb8-hbm1GB"]["status"] == "failed"
    assert text.count("died with signal 9 (SIGKILL)") == 4
    assert "## Errors" in (tmp_path / "out" / "summary.md").read_text()


def _db(url: str) -> str:
    return url.rsplit("/", 1)[1]


def _block(dbname: str, allow: bool) -> None:
    conn, _ = pg_admin()
    try:
        conn.execute(f'ALTER DATABASE "{dbname}" ALLOW_CONNECTIONS {"true" if allow else "false"}')
        if not allow:
            conn.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s "
                         "AND pid <> pg_backend_pid()", (dbname,))
    finally:
        conn.close()


def test_lost_database_connection_is_retried(pg_url, tmp_path):
    sweep = write_sweep(tmp_path / "sweep.yaml", trials=10, mbs=(4, 8), memories=("1GB", "0.6GB"))
    log = tmp_path / "host.log"
    host = start_worker(str(sweep), "--storage", pg_url, "--workers", "2", "--out", str(tmp_path / "out"),
                        delay=0.2, log=log)
    wait_for(lambda: _running_in(pg_url, sweep, set(_children(host.pid))), timeout=120, every=0.05)
    _block(_db(pg_url), allow=False)                      # the database goes away for 4 s
    time.sleep(4)
    _block(_db(pg_url), allow=True)
    assert host.wait(timeout=240) == 0, log.read_text()
    text = log.read_text()
    assert "storage error, retrying in" in text and "Traceback" not in text
    snap = snapshot(pg_url, sweep)
    check_clean(snap)
    assert all(budget_done(s, 10) for s in snap.values())


def test_database_gone_for_good_is_one_line(pg_url, tmp_path):
    sweep = write_sweep(tmp_path / "sweep.yaml", trials=10, mbs=(4, 8), memories=("1GB",),
                        extra_top="storage_retry_seconds: 3\n")
    log = tmp_path / "host.log"
    host = start_worker(str(sweep), "--storage", pg_url, "--out", str(tmp_path / "out"), delay=0.2, log=log)
    wait_for(lambda: _running_in(pg_url, sweep, {host.pid}), timeout=120, every=0.05)
    _block(_db(pg_url), allow=False)
    try:
        assert host.wait(timeout=120) == 2, log.read_text()
    finally:
        _block(_db(pg_url), allow=True)
    lines = log.read_text().strip().splitlines()
    assert "Traceback" not in "\n".join(lines)
    assert lines[-1].startswith("error: [storage] --storage: lost the study storage postgresql+psycopg://")
    assert "could not reach it again for" in lines[-1]
    assert [ln for ln in lines if ln.startswith("error:")] == [lines[-1]]


@pytest.mark.parametrize("n", [0, 3])
def test_claims_are_not_studies(tmp_path, n):
    """The old protocol's claim studies are removed when a sweep starts; none are created."""
    import optuna
    from optuna.study import StudyDirection

    from autotune.sweep.spec import load_sweep
    from autotune.tuner.storage import open_storage

    sweep = write_sweep(tmp_path / "sweep.yaml", trials=4, mbs=(4,), memories=("1GB",))
    store = str(tmp_path / "s.journal")
    st = open_storage(store)
    name = load_sweep(sweep).scenarios[0].study_name
    st.create_new_study([StudyDirection.MINIMIZE], f"{name}.claim.{n}")
    assert run_sweep(sweep, storage=store, out_dir=tmp_path / "out").exit_code == 0
    assert study_names(store) == [name]
    assert optuna.load_study(study_name=name, storage=open_storage(store)).user_attrs["scenario"] == "tiny-mb4-hbm1GB"


def test_a_worker_that_starts_while_the_database_is_down_waits_for_it(pg_url, tmp_path, caplog):
    """A worker opens the store inside its retry loop: in CI, worker 2 of ``--workers 2`` was still
    starting when the database went away for 4 s, its first connection failed and the sweep
    stopped with exit 2 ("cannot open the study storage"). The sweep command had opened the store
    (prepare), so a worker's failure to open it is a storage error like any other."""
    import threading

    from autotune.sweep.spec import load_sweep
    from autotune.sweep.worker import Worker, prepare

    sweep = load_sweep(write_sweep(tmp_path / "sweep.yaml", trials=4, mbs=(4,), memories=("1GB",)))
    prepare(sweep, pg_url)
    _block(_db(pg_url), allow=False)
    back = threading.Timer(3.0, _block, (_db(pg_url), True))
    back.start()
    try:
        with caplog.at_level("WARNING", logger="autotune.sweep"):
            ran = Worker(sweep, pg_url, label="worker 2").run()
    finally:
        back.join()
        _block(_db(pg_url), allow=True)
    assert ran == ["tiny-mb4-hbm1GB"]
    assert "worker 2: storage error, retrying in 1 s: cannot open the study storage" in caplog.text
    snap = snapshot(pg_url, tmp_path / "sweep.yaml")
    check_clean(snap)
    assert all(budget_done(s, 4) for s in snap.values())
