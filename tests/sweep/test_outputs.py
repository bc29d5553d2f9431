"""Outputs of a sweep: best.yaml per scenario, summary.csv/md that diff cleanly night to night,
the --baseline diff, --report, --fresh, and exit code 1 with the infeasible scenarios listed."""

from __future__ import annotations

import csv
import io

import pytest
import yaml
from click.testing import CliRunner

from autotune.cli import main
from autotune.sweep import run_sweep
from tests.conftest import MACHINE_LOAD
from tests.sweep.sweep_helpers import DATA, snapshot, write_sweep


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


@pytest.mark.slow  # a sweep command with slowed trials
@MACHINE_LOAD  # a 1.2 s scenario timeout against slowed trials: never while the busy-loop tests run
def test_scenario_timeout_says_timed_out_everywhere(tmp_path):
    """An explicit scenario timeout that fires: the row says timed_out with the gap then, in
    summary.csv/md, result.json, report.txt and the command's output; the seeds it left queued are
    failed, so nothing stays WAITING."""
    import json

    from tests.sweep.sweep_helpers import check_clean, start_worker

    sweep = write_sweep(tmp_path / "s.yaml", trials=12, mbs=(4,), memories=("1GB",),
                        extra="  - name: slow\n    config: %s\n    timeout: 1.2\n" % (DATA / "tiny.yaml"))
    log = tmp_path / "host.log"
    host = start_worker(str(sweep), "--out", str(tmp_path / "out"), "--report", delay=0.8, log=log)
    assert host.wait(timeout=180) == 0, log.read_text()
    out = tmp_path / "out"
    rows = {r["scenario"]: r for r in _rows(out / "summary.csv")}
    cut, whole = rows["slow"], rows["tiny-mb4-hbm1GB"]
    # the whole one: its seeds hold the enumerated optimum, so it stops at a local optimum before 12
    assert whole["status"] == "done" and whole["stopped_by"] == "neighbourhood" and 0 < int(whole["trials"]) < 12
    assert cut["status"] == "timed_out" and cut["stopped_by"] == "timeout" and cut["fits"] == "yes"
    assert cut["certified_gap_pct"] != "" and 0 < int(cut["trials"]) < 12
    md = (out / "summary.md").read_text()
    assert "## Cut short by a time limit" in md and f"- slow: certified gap then {cut['certified_gap_pct']} %" in md
    res = json.loads((out / "slow" / "result.json").read_text())
    assert res["row"]["status"] == "timed_out"
    assert res["result"]["timed_out"] is True and res["result"]["stopped_by"] == "timeout"
    assert res["result"]["time_limit_s"] == 1.2
    assert "CUT SHORT by its 1.2 s timeout" in (out / "slow" / "report.txt").read_text()
    assert f"stopped at a local optimum after {whole['trials']} trials: no neighbour of the best config" in \
        (out / "tiny-mb4-hbm1GB" / "report.txt").read_text()
    assert f"cut short by its timeout: slow (certified gap then {cut['certified_gap_pct']} %)" in log.read_text()
    snap = snapshot(str(out / "sweep.journal"), sweep)
    check_clean(snap)
    not_run = [t for t in snap["slow"]["trials"] if t[1] == "FAIL"]
    assert not_run and all(t[3] != "neighbour" for t in not_run)     # queued seeds the clock left behind


@pytest.mark.slow  # a search with a slowed bound phase
@MACHINE_LOAD  # a 6 s safety net, 3.5 s sleeps, a 30 s wall-clock limit: never while the busy-loop tests run
def test_bound_phase_without_timeout_is_cut_by_the_safety_net(monkeypatch):
    """Without --timeout the bound phase has the safety net's first half (here 3 s of a patched
    6 s net): a bound phase that would run on (its local searches start 3.5 s late) stops there
    and the search says so (timed_out, stopped_by safety_net, the bound phase's half in the stop
    line on stderr)."""
    import json
    import time as _time

    import autotune.tuner.search as search_policy
    import autotune.tuner.solve as solve
    from autotune.commands.tune import search_cmd

    orig = solve.improve

    def slow_improve(*a, **k):
        _time.sleep(3.5)  # past the bound phase's 3 s: the local searches after it are cut
        return orig(*a, **k)

    monkeypatch.setattr(solve, "improve", slow_improve)
    monkeypatch.setattr(solve, "_exact", lambda *a, **k: None)  # the pipeline, not the enumeration
    monkeypatch.setattr(search_policy, "SAFETY_TIMEOUT_S", 6.0)
    args = [str(DATA / "small.yaml"), "--profile", str(DATA / "small_profile.yaml"), "--space",
            str(DATA / "small_space.yaml"), "--hbm", "0.6GB", "--format", "json"]
    t = _time.monotonic()
    res = CliRunner().invoke(search_cmd, args)
    assert res.exit_code == 0, res.output
    d = json.loads(res.stdout)
    assert d["timed_out"] is True and d["stopped_by"] == "safety_net" and d["time_limit_s"] == 6.0
    assert "CUT SHORT by the 6 s safety net" in res.stderr
    # its share: half of the 6 s left after reading (< 3 s), the figure the json gives
    assert 2.0 < d["bound_phase_s"] < 3.0
    assert (f"The bound phase ({d['bound_phase_s']:.1f} s, half of what the limit left after start-up and "
            "reading) stopped its local search") in res.stderr
    # its two 3.5 s sleeps used the whole net: the trials got only their minimum and met it too
    assert "The trials then met the clock too" in res.stderr and d["bound_phase_cut"] is True
    assert d["certified_gap"] is not None
    assert _time.monotonic() - t < 30


@pytest.mark.slow  # three searches with slowed trials
@MACHINE_LOAD  # a 1 s safety net against 0.3 s sleeps: never while the busy-loop tests run
def test_search_cut_by_the_safety_net_says_so_in_every_form(tmp_path, monkeypatch):
    import json
    import time as _time

    import optuna.study._optimize as opt

    import autotune.tuner.search as search_policy
    from autotune.commands.tune import search_cmd

    orig = opt._tell_with_warning

    def slow_tell(*a, **k):
        _time.sleep(0.3)
        return orig(*a, **k)

    monkeypatch.setattr(opt, "_tell_with_warning", slow_tell)
    monkeypatch.setattr(search_policy, "SAFETY_TIMEOUT_S", 1.0)
    args = [str(DATA / "small.yaml"), "--profile", str(DATA / "small_profile.yaml"), "--space",
            str(DATA / "small_space.yaml"), "--hbm", "0.6GB", "--trials", "40", "--gap", "0"]
    text = CliRunner().invoke(search_cmd, args + ["--report", str(tmp_path / "rep")])
    assert text.exit_code == 0, text.output
    assert "CUT SHORT by the 1 s safety net" in text.stdout and "certified gap then" in text.stdout
    assert "warning: CUT SHORT by the 1 s safety net" in text.stderr
    assert "CUT SHORT by the 1 s safety net" in (tmp_path / "rep" / "report.html").read_text()
    js = CliRunner().invoke(search_cmd, args + ["--format", "json"])
    d = json.loads(js.stdout)
    assert d["timed_out"] is True and d["stopped_by"] == "safety_net" and d["time_limit_s"] == 1.0
    assert d["certified_gap"] is not None and d["trials"] < 40
    # without the cut (normal trials, the real safety net: the 1 s one would give the bound phase
    # only 0.5 s): the stop reason is the gap target or the budget, never "timed_out"
    monkeypatch.undo()
    d = json.loads(CliRunner().invoke(search_cmd, args[:-2] + ["--format", "json"]).stdout)
    assert d["timed_out"] is False and d["stopped_by"] == "gap"
