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
                extra: str = "") -> Path:
    """A sweep over tiny.yaml: len(mbs) x len(memories) scenarios."""
    path.write_text(f"""name: test
defaults:
  trials: {trials}
  target_gap: 0
  seed: 0
  profile: {DATA / 'tiny_profile.yaml'}
  space: {DATA / 'tiny_space.yaml'}
lease_seconds: {lease}
scenarios:
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


def start_worker(*args: str, delay: float = 0.0, log: Path | None = None) -> subprocess.Popen:
    """Start ``autotune sweep ...`` as a separate process (a "host"); ``delay`` s per trial."""
    code = (f"import sys; sys.path.insert(0, {str(HERE)!r}); import slowtrials; slowtrials.install({delay}); "
            "from autotune.cli import main; main(sys.argv[1:])")
    out = open(log, "w") if log else subprocess.DEVNULL
    return subprocess.Popen([sys.executable, "-c", code, "sweep", *args], cwd=ROOT, stdout=out,
                            stderr=subprocess.STDOUT, env={**os.environ})


def kill(proc: subprocess.Popen) -> None:
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()


def snapshot(target: str, sweep_file: Path) -> dict[str, Any]:
    """Per scenario: record, claims, and trials as (number, state, value, origin, retry_of), where
    retry_of is the number of the failed trial a retry re-runs (Optuna's ``failed_trial``)."""
    from autotune.sweep.spec import load_sweep
    from autotune.tuner.storage import open_storage
    from autotune.sweep.worker import CLAIM_SEP, read_states

    sweep = load_sweep(sweep_file)
    storage = open_storage(target)
    studies = {s.study_name: s for s in storage.get_all_studies()}
    states = read_states(storage, sweep)
    out = {}
    for sc in sweep.scenarios:
        st = studies.get(sc.study_name)
        trials = storage.get_all_trials(st._study_id, deepcopy=False) if st else []
        out[sc.name] = {
            "study": sc.study_name, "budget": sc.trials, "done": states[sc.study_name].done,
            "claims": sorted(n for n in studies if n.startswith(sc.study_name + CLAIM_SEP)),
            "claim": states[sc.study_name].claim,
            "trials": [(t.number, t.state.name, t.values[0] if t.values else None, t.user_attrs.get("origin"),
                        t.system_attrs.get("failed_trial")) for t in trials],
        }
    return out


def budget_count(trials) -> int:
    return sum(1 for t in trials if t[1] in ("COMPLETE", "PRUNED") and t[3] != "local-polish")


def wait_for(pred, timeout: float = 60, every: float = 0.1):
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        v = pred()
        if v:
            return v
        time.sleep(every)
    raise AssertionError("condition not met in time")
