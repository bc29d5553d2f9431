"""Helpers for the sweep tests: a real PostgreSQL database per test (127.0.0.1:5432, trust auth,
created and dropped here), journal files, sweep files over the tiny synthetic config, and helpers
to start worker processes (each one stands for a host running ``autotune sweep``)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
DATA = HERE / "data"
ROOT = HERE.parents[1]
PG_HOST, PG_PORT = "127.0.0.1", 5432


def pg_admin():
    import psycopg

    last = None
    for user in ("postgres", "root"):
        try:
            return psycopg.connect(host=PG_HOST, port=PG_PORT, user=user, dbname="test", autocommit=True,
                                   connect_timeout=5), user
        except psycopg.OperationalError as exc:
            last = exc
    raise RuntimeError(f"PostgreSQL on {PG_HOST}:{PG_PORT} not reachable (run scripts/ensure_postgres.sh): {last}")


def write_sweep(path: Path, *, trials: int = 16, memories=("1GB", "0.6GB"), mbs=(4, 8), lease: float = 10,
                extra: str = "", extra_top: str = "") -> Path:
    """A sweep over tiny.yaml: len(mbs) x len(memories) scenarios (``extra``: more scenario entries;
    ``extra_top``: more top-level keys)."""
    path.write_text(f"""name: test
defaults:
  trials: {trials}
  target_gap: 0
  seed: 0
  profile: {DATA / 'tiny_profile.yaml'}
  space: {DATA / 'tiny_space.yaml'}
lease_seconds: {lease}
{extra_top}scenarios:
  - name: tiny
    config: {DATA / 'tiny.yaml'}
    matrix:
      parallel_config.micro_batch_num: {list(mbs)}
      context.max_device_memory: {list(memories)}
{extra}""")
    return path


def cli(*args: str, env: dict[str, str] | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    """Run ``autotune`` in a subprocess and wait."""
    return subprocess.run([sys.executable, "-m", "autotune.cli", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout, env={**os.environ, **(env or {})})


HOOKS = HERE / "hooks"


def slow_env(delay: float) -> dict[str, str]:
    """Environment that makes every Optuna trial of a process (and of the worker processes it
    spawns) stay RUNNING ``delay`` s longer (tests/sweep/hooks/sitecustomize.py)."""
    path = os.pathsep.join([str(HOOKS), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return {"PYTHONPATH": path, "AUTOTUNE_TEST_TRIAL_DELAY": str(delay)}


def start_worker(*args: str, delay: float = 0.0, log: Path | None = None, group: bool = False,
                 env: dict[str, str] | None = None) -> subprocess.Popen:
    """Start ``autotune sweep ...`` as a separate process (a "host"); ``delay`` s per trial, also in
    the local worker processes it starts; ``group``: in its own process group (kill the whole host)."""
    out = open(log, "w") if log else subprocess.DEVNULL
    return subprocess.Popen([sys.executable, "-m", "autotune.cli", "sweep", *args], cwd=ROOT, stdout=out,
                            stderr=subprocess.STDOUT, env={**os.environ, **slow_env(delay), **(env or {})},
                            start_new_session=group)


def kill(proc: subprocess.Popen) -> None:
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()


def kill_group(proc: subprocess.Popen) -> None:
    """SIGKILL a whole host: the command and every worker process it started."""
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def snapshot(target: str, sweep_file: Path) -> dict[str, Any]:
    """Per scenario: record, latest claim generation and owner, and trials as (number, state, value,
    origin, retry_of, layout), where retry_of is the number of the failed trial a retry re-runs
    (Optuna's ``failed_trial``)."""
    from autotune.sweep.claims import open_claims
    from autotune.sweep.spec import load_sweep
    from autotune.sweep.worker import read_states
    from autotune.tuner.storage import open_storage

    sweep = load_sweep(sweep_file)
    storage = open_storage(target)
    studies = {s.study_name: s for s in storage.get_all_studies()}
    states = read_states(storage, open_claims(storage, target), sweep)
    out = {}
    for sc in sweep.scenarios:
        st = studies.get(sc.study_name)
        trials = storage.get_all_trials(st._study_id, deepcopy=False) if st else []
        c = states[sc.study_name].claim
        out[sc.name] = {
            "study": sc.study_name, "budget": sc.trials, "done": states[sc.study_name].done,
            "gen": None if c is None else c.gen, "claim": {} if c is None else c.owner,
            "trials": [(t.number, t.state.name, t.values[0] if t.values else None, t.user_attrs.get("origin"),
                        t.system_attrs.get("failed_trial"), t.user_attrs.get("layout")) for t in trials],
        }
    return out


def study_names(target: str) -> list[str]:
    from autotune.tuner.storage import open_storage

    return sorted(s.study_name for s in open_storage(target).get_all_studies())


def check_clean(snap: dict[str, Any]) -> None:
    """The guarantees of a finished sweep, per scenario: done, no WAITING or RUNNING trial, no layout
    evaluated twice (an enqueued seed, a retry, the polish or a sampler proposal: every finished
    trial has a layout no other finished trial has), every retried
    trial FAIL, and the finished trials within the budget."""
    for name, s in snap.items():
        assert s["done"] is not None, name
        states = [t[1] for t in s["trials"]]
        assert "WAITING" not in states and "RUNNING" not in states, (name, s["trials"])
        finished = [t for t in s["trials"] if t[1] in ("COMPLETE", "PRUNED")]
        assert len(finished) <= s["budget"], (name, len(finished))
        assert s["done"]["row"]["trials"] == len(finished), name
        for t in finished:
            same = [u for u in finished if u[5] == t[5] and u[0] != t[0]]
            assert not same, (name, "evaluated twice", t[:5], [u[:5] for u in same])
        by_number = {t[0]: t for t in s["trials"]}
        for t in s["trials"]:
            if t[4] is not None:
                assert by_number[t[4]][1] == "FAIL", (name, t[:5])


def budget_count(trials) -> int:
    return sum(1 for t in trials if t[1] in ("COMPLETE", "PRUNED"))


def budget_done(s: dict[str, Any], budget: int | None = None) -> bool:
    """A finished scenario used its trial budget, or stopped before it at a local optimum (the
    neighbourhood sampler had nothing left that could help: the row's ``stopped_by`` says so)."""
    n, budget = budget_count(s["trials"]), s["budget"] if budget is None else budget
    stopped = (s.get("done") or {}).get("row", {}).get("stopped_by")
    return n == budget or (n < budget and stopped == "neighbourhood")


def wait_for(pred, timeout: float = 60, every: float = 0.1):
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        v = pred()
        if v:
            return v
        time.sleep(every)
    raise AssertionError("condition not met in time")
