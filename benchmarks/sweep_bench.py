"""Throughput of ``autotune sweep``: trials/s and scenarios/min for 1, 2 and 4 workers on a journal
file and on PostgreSQL, for a 20-scenario sweep of the tiny synthetic config (tests/sweep/data).

    .venv/bin/python benchmarks/sweep_bench.py [--trials 30] [--workers 1 2 4] [--stores journal postgres]

Each run starts from an empty store (a new journal file / a new database, dropped afterwards) and
times the whole command: process start-up, study creation, the searches and the summary. Trials
are simulated by the numpy cost model (fast), so the numbers measure the store and the workers.
PostgreSQL: 127.0.0.1:5432, trust auth (scripts/ensure_postgres.sh starts it when stopped).

Measured on this 2-core machine (trials/s, scenarios/min), before -> after one storage object per
worker (no reconnect per scenario) with heartbeats + Optuna's stale-trial retry on PostgreSQL:
postgres 1 worker 6.5 -> 8.2 (13.0 -> 16.5), 2 workers 6.8 -> 8.7 (13.6 -> 17.3), 4 workers
11.8 -> 10.1 (23.6 -> 20.3; the per-trial heartbeat write and stale-trial query cost more than the
saved connections when 4 processes share 2 cores); journal 1 worker 53.9 -> 54.0, 2 workers
58.7 -> 64.2, 4 workers 80.8 -> 41.4 (a second run, with other jobs on the machine, gave 50.8; this
4-worker journal slowdown is not explained yet: 4 processes on 2 cores, and the claim heartbeat
now shares the worker's journal object and its lock).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
DATA = ROOT / "tests" / "sweep" / "data"

MBS = (2, 4, 6, 8, 10)
MEMORIES = ("0.6GB", "0.8GB", "1GB", "1.5GB")


def write_sweep(path: Path, trials: int) -> Path:
    """The benchmark's sweep: the tests' tiny sweep (tests/sweep/sweep_helpers.py), MBS x MEMORIES."""
    from tests.sweep.sweep_helpers import write_sweep as write_tiny_sweep

    return write_tiny_sweep(path, trials=trials, mbs=MBS, memories=MEMORIES, lease=30)


def pg_database():
    import psycopg

    for user in ("postgres", "root"):
        try:
            conn = psycopg.connect(host="127.0.0.1", port=5432, user=user, dbname="test", autocommit=True)
            break
        except psycopg.OperationalError:
            conn = None
    if conn is None:
        raise SystemExit("PostgreSQL not reachable on 127.0.0.1:5432 (run scripts/ensure_postgres.sh)")
    name = f"autotune_bench_{uuid.uuid4().hex[:8]}"
    conn.execute(f'CREATE DATABASE "{name}"')
    url = f"postgresql+psycopg://{user}@127.0.0.1:5432/{name}"

    def drop() -> None:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.close()
    return url, drop


def one(store: str, workers: int, trials: int, tmp: Path) -> dict:
    from autotune.sweep import run_sweep
    from autotune.sweep.spec import load_sweep
    from autotune.tuner.storage import open_storage

    sweep_file = write_sweep(tmp / f"sweep-{store}-{workers}.yaml", trials)
    out = tmp / f"out-{store}-{workers}"
    drop = None
    if store == "postgres":
        target, drop = pg_database()
    else:
        target = str(out / "sweep.journal")
    try:
        t0 = time.perf_counter()
        res = run_sweep(sweep_file, storage=target, workers=workers, out_dir=out)
        wall = time.perf_counter() - t0
        st = open_storage(target)
        names = {s.study_name for s in load_sweep(sweep_file).scenarios}
        n_trials = sum(len(st.get_all_trials(s._study_id, deepcopy=False)) for s in st.get_all_studies()
                       if s.study_name in names)
    finally:
        if drop:
            drop()
    return {"store": store, "workers": workers, "scenarios": len(res.rows), "trials": n_trials,
            "seconds": round(wall, 2), "trials_per_s": round(n_trials / wall, 1),
            "scenarios_per_min": round(60 * len(res.rows) / wall, 1), "exit": res.exit_code}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=30, help="trials per scenario (default 30)")
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2, 4])
    ap.add_argument("--stores", nargs="+", default=["journal", "postgres"], choices=["journal", "postgres"])
    ap.add_argument("--json", action="store_true", help="print JSON lines instead of a table")
    args = ap.parse_args()
    os.environ["AUTOTUNE_SWEEP_QUIET"] = "1"
    print(f"20-scenario sweep, {args.trials} trials each, {os.cpu_count()} CPU cores", flush=True)
    if not args.json:
        print(f"{'store':<10}{'workers':>8}{'trials':>8}{'seconds':>9}{'trials/s':>10}{'scen/min':>10}")
    with tempfile.TemporaryDirectory() as d:
        for store in args.stores:
            for w in args.workers:
                r = one(store, w, args.trials, Path(d))
                if args.json:
                    print(json.dumps(r), flush=True)
                else:
                    print(f"{r['store']:<10}{r['workers']:>8}{r['trials']:>8}{r['seconds']:>9.1f}"
                          f"{r['trials_per_s']:>10.1f}{r['scenarios_per_min']:>10.1f}", flush=True)


if __name__ == "__main__":
    main()
