"""Outputs of a sweep: best.yaml per scenario, summary.csv/md that diff cleanly night to night,
the --baseline diff, --report, --fresh, and exit code 1 with the infeasible scenarios listed."""

from __future__ import annotations

import csv
import io

import yaml
from click.testing import CliRunner

from autotune.cli import main
from autotune.sweep import run_sweep
from tests.sweep.sweep_helpers import snapshot, write_sweep


def _rows(path):
    return list(csv.DictReader(io.StringIO(path.read_text())))


def test_infeasible_exit_1_listed_and_outputs(tmp_path):
    sweep = write_sweep(tmp_path / "s.yaml", trials=8, mbs=(4,), memories=("1GB", "0.2GB"))
    out = tmp_path / "out"
    res = CliRunner().invoke(main, ["sweep", str(sweep), "--out", str(out), "--report"])
    assert res.exit_code == 1, res.output
    assert "no feasible configuration: tiny-mb4-hbm0.2GB" in res.output
    rows = {r["scenario"]: r for r in _rows(out / "summary.csv")}
    assert rows["tiny-mb4-hbm0.2GB"]["status"] == "infeasible" and rows["tiny-mb4-hbm0.2GB"]["fits"] == "no"
    ok = rows["tiny-mb4-hbm1GB"]
    assert ok["status"] == "done" and ok["fits"] == "yes" and float(ok["step_ms"]) > 0
    assert float(ok["peak_mib"]) <= 1024 and ok["certified_gap_pct"] != ""
    md = (out / "summary.md").read_text()
    assert "## No feasible configuration" in md and "tiny-mb4-hbm0.2GB" in md
    best = yaml.safe_load((out / "tiny-mb4-hbm1GB" / "best.yaml").read_text())
    assert best["parallel_config"]["micro_batch_num"] == 4
    assert best["model"]["model_config"]["offset"] is not None
    assert (out / "tiny-mb4-hbm1GB" / "report.txt").read_text().strip()
    assert (out / "sweep.journal").is_file()


def test_rerun_same_summary_baseline_and_fresh(tmp_path):
    sweep = write_sweep(tmp_path / "s.yaml", trials=8, mbs=(4, 8), memories=("1GB",))
    a = run_sweep(sweep, out_dir=tmp_path / "night1")
    assert a.exit_code == 0 and len(a.ran) == 2
    # next night: same store, one scenario changed (new budget -> new study), one unchanged
    sweep2 = write_sweep(tmp_path / "s2.yaml", trials=8, mbs=(4, 8), memories=("1GB",),
                         extra="  - name: extra\n    config: %s\n    set: {parallel_config.micro_batch_num: 6}\n"
                         % (tmp_path / "s.yaml").read_text().split("config: ")[1].split("\n")[0])
    store = str(tmp_path / "night1" / "sweep.journal")
    b = run_sweep(sweep2, storage=store, out_dir=tmp_path / "night2",
                  baseline=tmp_path / "night1" / "summary.csv")
    assert b.exit_code == 0 and b.ran == ["extra"]                 # finished scenarios are reused
    rows = {r["scenario"]: r for r in _rows(tmp_path / "night2" / "summary.csv")}
    assert rows["extra"]["settings_changed"] == "new"
    assert rows["tiny-mb4-hbm1GB"]["settings_changed"] == "no"
    assert rows["tiny-mb4-hbm1GB"]["step_change_pct"] == "+0.0"
    assert rows["tiny-mb4-hbm1GB"]["prev_step_ms"] == rows["tiny-mb4-hbm1GB"]["step_ms"]
    # a plain re-run writes byte-identical summaries (no timestamps)
    first = (tmp_path / "night1" / "summary.md").read_text()
    c = run_sweep(sweep, out_dir=tmp_path / "night1")
    assert c.ran == [] and (tmp_path / "night1" / "summary.md").read_text() == first
    # --fresh starts over explicitly
    before = snapshot(store, sweep)
    d = run_sweep(sweep, out_dir=tmp_path / "night1", fresh=True)
    assert sorted(d.ran) == sorted(before) and (tmp_path / "night1" / "summary.md").read_text() == first
    after = snapshot(store, sweep)
    assert all(s["gen"] == 0 for s in after.values())  # the claims were forgotten with the studies
