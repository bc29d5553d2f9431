"""Throughput and integrity of ``autotune sweep``: trials/s and scenarios/min for 1, 2 and 4 local
workers on a journal file and on PostgreSQL, for a 20-scenario sweep of the tiny synthetic config
(tests/sweep/data), and the counts the sweep guarantees: scenarios done, trials left WAITING or
RUNNING, layouts evaluated twice by a re-queue, failed trials, takeovers and lost worker processes.

    .venv/bin/python benchmarks/sweep_bench.py [--trials 30] [--workers 1 2 4] [--stores journal postgres]
                                               [--kill-after S] [--json]

Each run starts from an empty store (a new journal file / a new database, dropped afterwards) and
times the whole ``autotune sweep`` command in a subprocess: process start-up, study creation, the
searches and the summary. Trials are simulated by the numpy cost model (fast), so the numbers
measure the store and the workers. ``--kill-after S`` SIGKILLs one local worker process S seconds
into each run with more than one worker (the counts must stay: every scenario done, 0 waiting,
0 duplicates; a failed trial and a takeover per kill). PostgreSQL: 127.0.0.1:5432, trust auth
(scripts/ensure_postgres.sh starts it when stopped). CPU seconds are the command's and its worker
processes' user + sys time.

Measured on this project's 2-core machine (shared with other jobs), 30 trials per scenario; every
run: 20 of 20 scenarios done, 0 trials waiting, 0 duplicates, exit 0 (table in the README's
nightly-sweep section):

    store     workers  wall s  CPU s  trials/s   killed run (--kill-after 4): wall s, failed, takeovers
    journal   1          6.0    4.4    100.9
    journal   2          8.3    5.8     72.8     44.1 (the killed worker held the journal lock: 30 s), 1, 1
    journal   4          9.7    6.9     61.9     15.4, 1, 1
    postgres  1         34.3   26.0     17.5
    postgres  2         34.8   32.4     17.3     43.8, 0, 0 (killed before its first trial)
    postgres  4         31.5   37.4     19.0     42.0, 0, 1
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

MBS = (2, 4, 6, 8, 10)
MEMORIES = ("0.6GB", "0.8GB", "1GB", "1.5GB")


def write_sweep(path: Path, trials: int) -> Path:
    """The benchmark's sweep: the tests' tiny sweep (tests/sweep/sweep_helpers.py), MBS x MEMORIES."""
    from tests.sweep.sweep_helpers import write_sweep as write_tiny_sweep

    return write_tiny_sweep(path, trials=trials, mbs=MBS, memories=MEMORIES, lease=30)


def pg_database():
    import psycopg

    conn = user = None
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


def _workers(pid: int) -> list[int]:
    """The local worker processes of the sweep command ``pid`` (spawned children; not
    multiprocessing's resource tracker)."""
    out = []
    for p in Path("/proc").iterdir():
        if p.name.isdigit():
            try:
                if int((p / "stat").read_text().rsplit(")", 1)[1].split()[1]) == pid \
                        and b"spawn_main" in (p / "cmdline").read_bytes():
                    out.append(int(p.name))
            except (OSError, IndexError, ValueError):
                continue
    return out


def counts(target: str, sweep_file: Path) -> dict:
    """The integrity counts of a finished sweep (see the module docstring)."""
    from tests.sweep.sweep_helpers import snapshot

    snap = snapshot(target, sweep_file)
    finished = waiting = dup = failed = takeovers = 0
    for s in snap.values():
        fin = [t for t in s["trials"] if t[1] in ("COMPLETE", "PRUNED")]
        finished += len(fin)
        waiting += sum(t[1] in ("WAITING", "RUNNING") for t in s["trials"])
        failed += sum(t[1] == "FAIL" for t in s["trials"])
        takeovers += s["gen"] or 0
        for t in fin:  # every finished trial (seed, retry, polish, sampler proposal) has its own layout
            dup += any(u[5] == t[5] and u[0] != t[0] for u in fin)
    return {"scenarios": len(snap), "done": sum(s["done"] is not None for s in snap.values()),
            "trials": finished, "waiting": waiting, "duplicates": dup, "failed_trials": failed,
            "takeovers": takeovers}


def one(store: str, workers: int, trials: int, tmp: Path, kill_after: float | None) -> dict:
    sweep_file = write_sweep(tmp / f"sweep-{store}-{workers}.yaml", trials)
    out = tmp / f"out-{store}-{workers}"
    drop = None
    if store == "postgres":
        target, drop = pg_database()
    else:
        target = str(out / "sweep.journal")
    try:
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        proc = subprocess.Popen([sys.executable, "-m", "autotune.cli", "sweep", str(sweep_file), "--storage",
                                 target, "--workers", str(workers), "--out", str(out)], cwd=ROOT,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env={**os.environ, "AUTOTUNE_SWEEP_QUIET": "1"})
        killed = 0
        if kill_after is not None and workers > 1:
            time.sleep(kill_after)
            kids = _workers(proc.pid)
            if kids and proc.poll() is None:
                os.kill(kids[0], signal.SIGKILL)
                killed = 1
        _, err = proc.communicate()
        wall = time.perf_counter() - t0
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        c = counts(target, sweep_file)
    finally:
        if drop:
            drop()
    lost = len(re.findall(r"died with signal", err))
    return {"store": store, "workers": workers, **c, "seconds": round(wall, 2), "cpu_s": round(cpu, 1),
            "trials_per_s": round(c["trials"] / wall, 1), "scenarios_per_min": round(60 * c["scenarios"] / wall, 1),
            "killed": killed, "lost_workers": lost, "exit": proc.returncode}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=30, help="trials per scenario (default 30)")
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2, 4])
    ap.add_argument("--stores", nargs="+", default=["journal", "postgres"], choices=["journal", "postgres"])
    ap.add_argument("--kill-after", type=float, default=None,
                    help="SIGKILL one local worker process this many seconds into each multi-worker run")
    ap.add_argument("--json", action="store_true", help="print JSON lines instead of a table")
    args = ap.parse_args()
    print(f"20-scenario sweep, {args.trials} trials each, {os.cpu_count()} CPU cores", flush=True)
    cols = ("store", "workers", "exit", "seconds", "cpu_s", "trials", "trials_per_s", "scenarios_per_min", "done",
            "waiting", "duplicates", "failed_trials", "takeovers", "lost_workers")
    if not args.json:
        print("  ".join(cols), flush=True)
    with tempfile.TemporaryDirectory() as d:
        for store in args.stores:
            for w in args.workers:
                r = one(store, w, args.trials, Path(d), args.kill_after)
                print(json.dumps(r) if args.json else "  ".join(str(r[c]) for c in cols), flush=True)


if __name__ == "__main__":
    main()
