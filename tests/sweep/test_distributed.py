"""Many workers on one store (journal file and the machine's real PostgreSQL): every scenario done
exactly once with its trial budget, a SIGKILLed worker's scenario taken over without losing a
finished trial, re-queueing nothing twice and leaving nothing WAITING, and re-runs that do only
what is missing. Claims live beside the studies: the store lists only the scenario studies."""

from __future__ import annotations

import json
import os
import re
import signal

import pytest

from tests.conftest import MACHINE_LOAD
from tests.sweep.sweep_helpers import (budget_done, check_clean, cli, kill, snapshot, start_worker, study_names,
                                       wait_for, write_sweep)


# end to end: real worker processes on a journal and on PostgreSQL. The kills are timed against
# running trials, so these run in the one process of the tests that load the machine
# (tests/conftest.py: MACHINE_LOAD), never beside their busy loops.
pytestmark = [pytest.mark.slow, MACHINE_LOAD]


def _worked_on(stdout: str) -> int:
    return int(re.search(r"this run worked on (\d+)", stdout).group(1))


def test_four_workers_each_scenario_once(store, tmp_path):
    sweep = write_sweep(tmp_path / "sweep.yaml", trials=12, mbs=(4, 8, 12), memories=("1GB", "0.6GB"))
    if "://" in store:  # four "hosts" against one database
        procs = [start_worker(str(sweep), "--storage", store, "--out", str(tmp_path / f"out{i}"),
                              log=tmp_path / f"w{i}.log") for i in range(4)]
        codes = [p.wait(timeout=180) for p in procs]
        assert codes == [0, 0, 0, 0], [(tmp_path / f"w{i}.log").read_text() for i in range(4)]
        outs = [tmp_path / f"out{i}" for i in range(4)]
    else:  # one command, four local processes, journal file
        res = cli("sweep", str(sweep), "--storage", store, "--workers", "4", "--out", str(tmp_path / "out0"))
        assert res.returncode == 0, res.stderr
        assert _worked_on(res.stdout) == 6
        outs = [tmp_path / "out0"]
    snap = snapshot(store, sweep)
    assert len(snap) == 6
    # the store holds the six scenario studies and nothing else (no claim pseudo-studies)
    assert study_names(store) == sorted(s["study"] for s in snap.values())
    for name, s in snap.items():
        assert s["gen"] == 0, name                                  # claimed once, never taken over
        assert s["done"]["row"]["status"] == "done"
        assert s["budget"] == 12 and budget_done(s), (name, s["trials"])
        assert all(t[1] != "FAIL" for t in s["trials"])
    check_clean(snap)
    summaries = {(o / "summary.csv").read_text() for o in outs}
    assert len(summaries) == 1                                  # every host writes the same summary
    text = summaries.pop()
    assert len(text.strip().splitlines()) == 7
    for name in snap:
        assert (outs[0] / name / "best.yaml").is_file()


def test_sigkill_worker_mid_run_then_rerun_does_nothing(store, tmp_path):
    """Three "hosts"; one is SIGKILLed while a trial runs and seeds are still queued. The taker runs
    the re-queued trial, enqueues none of the queued seeds again, and uses the budget exactly."""
    sweep = write_sweep(tmp_path / "sweep.yaml", trials=14, mbs=(4, 8), memories=("1GB", "0.6GB"))
    def host(i: int):
        return start_worker(str(sweep), "--storage", store, "--out", str(tmp_path / f"out{i}"), delay=0.4,
                            log=tmp_path / f"w{i}.log")

    # the victim claims a scenario before the other hosts start: started together under load, the
    # other two could claim and finish all four scenarios while the victim was still importing
    # (a fresh-clone CI run waited 90 s for the victim to run a trial and failed)
    victim = host(0)
    wait_for(lambda: any(s["claim"].get("pid") == victim.pid for s in snapshot(store, sweep).values()),
             timeout=90, every=0.05)
    procs = [victim, host(1), host(2)]

    def victim_running(snap):
        for name, s in snap.items():
            if s["claim"].get("pid") == victim.pid and s["done"] is None:
                running = [t for t in s["trials"] if t[1] == "RUNNING"]
                if running and sum(t[1] == "COMPLETE" for t in s["trials"]) >= 1:
                    return name
        return None

    def victim_frozen_while_running():
        # Seen running: SIGSTOP and look again, so that the worker cannot finish the trial between
        # the look and the kill (under load it did: the snapshot taken after SIGKILL had no
        # RUNNING trial); a live pid with a fresh lease is not taken over. Not running then:
        # SIGCONT and wait for the next one.
        if victim_running(snapshot(store, sweep)) is None:
            return None
        os.kill(victim.pid, signal.SIGSTOP)
        snap = snapshot(store, sweep)
        name = victim_running(snap)
        if name is None:
            os.kill(victim.pid, signal.SIGCONT)
            return None
        return name, snap

    name, before = wait_for(victim_frozen_while_running, timeout=90, every=0.05)
    kill(victim)
    killed_running = [t for t in before[name]["trials"] if t[1] == "RUNNING"]
    queued_before = [t for t in before[name]["trials"] if t[1] == "WAITING"]
    completed_before = {(n, t[0]): t[2] for n, s in before.items() for t in s["trials"] if t[1] == "COMPLETE"}
    assert killed_running, "the worker was killed while a trial ran"
    for i, p in enumerate(procs[1:], start=1):
        assert p.wait(timeout=180) == 0, (tmp_path / f"w{i}.log").read_text()

    after = snapshot(store, sweep)
    # the sweep completed and the summary is complete
    rows = (tmp_path / "out1" / "summary.csv").read_text().strip().splitlines()
    assert len(rows) == 1 + 4 and all(",done," in r for r in rows[1:])
    # no finished trial was lost
    for (n, number), value in completed_before.items():
        t = next(t for t in after[n]["trials"] if t[0] == number)
        assert t[1] == "COMPLETE" and t[2] == value
    # the killed trial is failed, and its retry ran
    by_number = {t[0]: t for t in after[name]["trials"]}
    for t in killed_running:
        assert by_number[t[0]][1] == "FAIL"
        retries = [r for r in after[name]["trials"] if r[4] == t[0]]
        if t[3] != "local-polish":
            assert len(retries) == 1 and retries[0][1] in ("COMPLETE", "PRUNED")
    # the seeds that were queued ran once, in their own trials (not enqueued again)
    for t in queued_before:
        assert by_number[t[0]][1] in ("COMPLETE", "PRUNED"), t
    # taken over once, budget kept, nothing WAITING, nothing evaluated twice
    assert after[name]["gen"] == 1
    for n, s in after.items():
        assert budget_done(s), (n, s["trials"])
    check_clean(after)
    assert study_names(store) == sorted(s["study"] for s in after.values())

    # re-run after completion: no new work, same summary
    res = cli("sweep", str(sweep), "--storage", store, "--out", str(tmp_path / "out1"))
    assert res.returncode == 0, res.stderr
    assert _worked_on(res.stdout) == 0
    assert snapshot(store, sweep) == after


def test_rerun_after_kill_finishes_only_what_is_missing(tmp_path, pg_url):
    sweep = write_sweep(tmp_path / "sweep.yaml", trials=12, mbs=(4, 8), memories=("1GB", "0.6GB"))
    proc = start_worker(str(sweep), "--storage", pg_url, "--out", str(tmp_path / "out"), delay=0.08,
                        log=tmp_path / "w.log")

    def one_done_one_running():
        s = snapshot(pg_url, sweep)
        done = [n for n, v in s.items() if v["done"] is not None]
        running = [n for n, v in s.items() if v["done"] is None and any(t[1] == "COMPLETE" for t in v["trials"])]
        return (done, s) if done and running else None

    done, before = wait_for(one_done_one_running, timeout=90, every=0.05)
    kill(proc)
    before = snapshot(pg_url, sweep)
    done = [n for n, v in before.items() if v["done"] is not None]
    res = cli("sweep", str(sweep), "--storage", pg_url, "--out", str(tmp_path / "out"))
    assert res.returncode == 0, res.stderr
    assert _worked_on(res.stdout) == 4 - len(done)
    after = snapshot(pg_url, sweep)
    for n in done:  # finished scenarios untouched
        assert after[n]["trials"] == before[n]["trials"] and after[n]["gen"] == before[n]["gen"]
    for n, s in after.items():
        assert s["done"] is not None and budget_done(s)
    check_clean(after)
    assert len((tmp_path / "out" / "summary.csv").read_text().strip().splitlines()) == 5
    data = json.loads((tmp_path / "out" / done[0] / "result.json").read_text())
    assert data["row"]["scenario"] == done[0]
