"""Deterministic by work: the same sweep file and seed give byte-identical summary.csv rows — and the
same trials, in the same order, with the same values — with 1, 4 and 8 local workers while other
processes load every core, on a journal file and on the real PostgreSQL.

The scenarios (tests/sweep/data/small*.yaml) are too large to enumerate, so the lower bound, the
solver seeds, the neighbourhood sampler, the certified-gap stop (``target_gap: 0.005``) and the
runs without it (``target_gap: 0``: they end at the trial budget or at a local optimum) all take
part.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest

from tests.conftest import MACHINE_LOAD
from tests.sweep.sweep_helpers import DATA, ROOT, check_clean, pg_admin, snapshot

SWEEP = """name: determinism
defaults: {{trials: 12, seed: 0, profile: {data}/small_profile.yaml, space: {data}/small_space.yaml}}
lease_seconds: 30
scenarios:
  - name: budget
    config: {data}/small.yaml
    target_gap: 0
    matrix:
      parallel_config.micro_batch_num: [4, 8, 16]
  - name: gap
    config: {data}/small.yaml
    target_gap: 0.005
    set: {{context.max_device_memory: "0.6GB"}}
    matrix:
      parallel_config.micro_batch_num: [4, 8, 16]
"""


def _load(n: int) -> list[subprocess.Popen]:
    """``n`` processes that keep a core busy each (other tenants of the machine)."""
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]


def _fresh_db() -> tuple[str, callable]:
    import uuid

    conn, user = pg_admin()
    name = f"autotune_det_{uuid.uuid4().hex[:10]}"
    conn.execute(f'CREATE DATABASE "{name}"')

    def drop() -> None:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.close()
    return f"postgresql+psycopg://{user}@127.0.0.1:5432/{name}", drop


def _trials(snap: dict) -> dict:
    return {n: [(t[1], t[2], t[3], t[5]) for t in s["trials"]] for n, s in snap.items()}


def _start(sweep, store: str, workers: int, out, log) -> subprocess.Popen:
    """``autotune sweep`` with ``workers`` local worker processes (in a process group of its own,
    so that a failed test can kill them all), its output in ``log``."""
    with open(log, "w") as f:
        return subprocess.Popen([sys.executable, "-m", "autotune.cli", "sweep", str(sweep), "--storage", store,
                                 "--workers", str(workers), "--out", str(out)], cwd=ROOT, stdout=f,
                                stderr=subprocess.STDOUT, start_new_session=True)


@pytest.mark.slow
@MACHINE_LOAD  # its busy loops load every core: no wall-clock limit is measured meanwhile
@pytest.mark.parametrize("kind", ["journal", "postgres"])
def test_same_rows_with_1_4_8_workers_under_load(kind, tmp_path):
    """The three sweeps (1, 4 and 8 workers, each on its own store) run at once, beside the busy
    loops: each is loaded by the loops and by the other two (one after another, the loops ran for
    the sum of the three, each sweep on a third of the machine's cores at best)."""
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text(SWEEP.format(data=DATA))
    load = _load(os.cpu_count() or 2)
    results, stores, drops, procs = {}, {}, [], {}
    try:
        for workers in (1, 4, 8):
            if kind == "journal":
                stores[workers] = str(tmp_path / f"out{workers}" / "sweep.journal")
            else:
                stores[workers], drop = _fresh_db()
                drops.append(drop)
        for workers in (1, 4, 8):
            procs[workers] = _start(sweep, stores[workers], workers, tmp_path / f"out{workers}",
                                    tmp_path / f"cli{workers}.log")
        for workers, proc in procs.items():
            out = tmp_path / f"out{workers}"
            assert proc.wait(timeout=600) == 0, (tmp_path / f"cli{workers}.log").read_text()
            snap = snapshot(stores[workers], sweep)
            check_clean(snap)
            results[workers] = ((out / "summary.csv").read_text(), _trials(snap),
                                {n: json.loads((out / n / "result.json").read_text())["row"] for n in snap})
    finally:
        for p in procs.values():
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
        for p in [*load, *procs.values()]:
            p.kill()
            p.wait()
        for drop in drops:
            drop()
    csv1, trials1, rows1 = results[1]
    assert "budget-mb16" in csv1 and len(csv1.strip().splitlines()) == 7
    for workers in (4, 8):
        csv_w, trials_w, rows_w = results[workers]
        assert csv_w == csv1, workers                      # byte-identical summary
        assert rows_w == rows1, workers                    # and result.json rows
        assert trials_w == trials1, workers                # the very same trials, in order
    stopped = {line.split(",")[0]: line for line in csv1.strip().splitlines()[1:]}
    for m in (4, 8, 16):
        n = rows1[f"budget-mb{m}"]["trials"]
        assert n == 12 and ",trials," in stopped[f"budget-mb{m}"] or \
            n < 12 and ",neighbourhood," in stopped[f"budget-mb{m}"], stopped[f"budget-mb{m}"]
    assert any(",gap," in stopped[f"gap-mb{m}"] for m in (4, 8, 16))  # the gap stop took part
