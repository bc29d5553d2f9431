"""``--hbm-margin``: the search packs against budget − margin and every output shows each answer's
headroom to the full budget (issue 19 item 10).

The toy (conftest's 8-layer, 2-stage profile) is enumerated exactly, so its answers are the cost
model's optima; measured with the exact oracle, the optimum for a budget of

    120 MiB: 60.0 ms, peak 120 MiB      110 MiB: 62.5 ms, peak 110 MiB      90 MiB: 68.0 ms, peak 85 MiB

So a 120 MiB budget with a 10 MiB margin must give the 110 MiB answer, and with a 25 % margin
(30 MiB) the 90 MiB one.
"""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

import autotune
from autotune.cli import main
from tests.emit.conftest import TOY8_PROFILE, TOY_CONFIG


@pytest.fixture
def toy(tmp_path):
    cfg = tmp_path / "train.yaml"
    cfg.write_text(TOY_CONFIG)
    prof = tmp_path / "profile.yaml"
    prof.write_text(TOY8_PROFILE)
    return cfg, prof


def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def test_margin_gives_the_optimum_of_the_lower_limit(toy):
    cfg, prof = toy
    plain = autotune.search(cfg, prof, trials=20, hbm_mib=110)
    res = autotune.search(cfg, prof, trials=20, hbm_mib=120, hbm_margin="10MiB")
    assert res.exact and plain.exact
    assert res.hbm_margin_mib == 10.0 and res.config.hbm_mib == 110.0   # the pruner's and checker's limit
    assert res.best.step_time_ms == pytest.approx(62.5) == plain.best.step_time_ms
    assert res.best.peak_mib == pytest.approx(110.0)
    assert res.tuned_values() == plain.tuned_values()
    no_margin = autotune.search(cfg, prof, trials=20, hbm_mib=120)
    assert no_margin.best.step_time_ms == pytest.approx(60.0)         # the margin changed the answer
    assert no_margin.best.peak_mib == pytest.approx(120.0)            # 0 MiB headroom without it


def test_search_json_carries_margin_and_headroom(toy):
    cfg, prof = toy
    r = run("search", cfg, "--profile", prof, "--trials", "20", "--hbm", "120MiB", "--hbm-margin", "0.25",
            "--format", "json")
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    assert out["hbm_margin_mib"] == pytest.approx(30.0)
    best = out["best"]
    assert best["step_time_ms"] == pytest.approx(68.0) and best["peak_mib"] == pytest.approx(85.0)
    assert best["hbm_budget_mib"] == pytest.approx(120.0)       # the budget as given
    assert best["hbm_margin_mib"] == pytest.approx(30.0)
    assert best["hbm_limit_mib"] == pytest.approx(90.0)         # what fits was checked against
    assert best["headroom_mib"] == pytest.approx(35.0)
    assert best["headroom_pct"] == pytest.approx(100 * 35 / 120)
    assert [s["headroom_mib"] for s in best["stages"]] == pytest.approx([120 - s["peak_mib"] for s in best["stages"]])
    assert all(s["peak_mib"] <= 90.0 for s in best["stages"])
    sh = best["device_time"]
    assert sh["compute"] + sh["recompute"] + sh["idle"] == pytest.approx(1.0) and min(sh.values()) >= 0
    for base in out["baselines"].values():
        if base is not None:
            assert base["headroom_mib"] == pytest.approx(120.0 - base["peak_mib"])
            assert base["fits"] == (base["peak_mib"] <= 90.0 + 1e-9)


def test_search_text_shows_margin_and_headroom(toy, tmp_path):
    cfg, prof = toy
    out = tmp_path / "best.yaml"
    r = run("search", cfg, "--profile", prof, "--trials", "20", "--hbm", "120MiB", "--hbm-margin", "25%",
            "--out", out)
    assert r.exit_code == 0, r.output
    assert ("worst-stage peak 85 MiB = 70.8% of budget 120 MiB (safety margin 30 MiB), 35 MiB headroom (29.2%) "
            "| fits") in r.output
    assert "headroom MiB" in r.output
    assert "note: the worst stage leaves" not in r.output      # a margin was asked for
    head = out.read_text().splitlines()[1]
    assert head.endswith("worst-stage peak 85 MiB = 70.8% of budget 120 MiB (safety margin 30 MiB), "
                         "35 MiB headroom (29.2%)")
    assert 'max_device_memory: "1GB"' in out.read_text()       # the budget in the YAML is not changed


def test_tight_answer_without_margin_gets_a_note(toy):
    cfg, prof = toy
    r = run("search", cfg, "--profile", prof, "--trials", "20", "--hbm", "120MiB")
    assert r.exit_code == 0, r.output
    assert "worst-stage peak 120 MiB = 100.0% of budget 120 MiB, 0 MiB headroom (0.0%)" in r.output
    assert "note: the worst stage leaves 0 MiB headroom (0.0%); peak memory is an estimate, so " \
           "--hbm-margin 0.05" in r.output


def test_margin_that_nothing_meets_is_one_line(toy):
    cfg, prof = toy
    r = run("search", cfg, "--profile", prof, "--trials", "10", "--hbm", "120MiB", "--hbm-margin", "80MiB")
    assert r.exit_code == 2
    assert "NO CONFIGURATION FITS the HBM budget with the safety margin" in r.output
    err = [ln for ln in r.output.splitlines() if ln.startswith("error:")]
    assert len(err) == 1 and "[R_HBM_INFEASIBLE] --hbm-margin: no configuration leaves the safety margin free: " \
        "budget 120 MiB - margin 80 MiB = limit 40 MiB" in err[0]


def test_bad_margin_stops_before_the_search(toy, monkeypatch):
    import autotune.api

    monkeypatch.setattr(autotune.api, "search", lambda *a, **k: pytest.fail("searched"))
    cfg, prof = toy
    r = run("search", cfg, "--profile", prof, "--hbm-margin", "2")
    assert r.exit_code == 2 and "[R_HBM_MARGIN] --hbm-margin: a bare number is a fraction" in r.output


def test_evaluate_with_margin(toy):
    """conftest's TOY_CONFIG as written peaks at 127 MiB (stage 0) and 75 MiB (stage 1): with a
    150 MiB budget its headroom is 23 MiB, so a 20 MiB margin fits and a 24 MiB one does not."""
    cfg, prof = toy
    base = ["evaluate", cfg, "--profile", prof, "--hbm", "150MiB"]
    plain = json.loads(run(*base, "--format", "json").output)
    assert plain["peak_mib"] == pytest.approx(127.0) and plain["fits"] is True
    assert plain["headroom_mib"] == pytest.approx(23.0) and plain["hbm_margin_mib"] == 0
    assert plain["hbm_limit_mib"] == pytest.approx(150.0)
    ok = json.loads(run(*base, "--hbm-margin", "20MiB", "--format", "json").output)
    assert ok["fits"] is True and ok["hbm_limit_mib"] == pytest.approx(130.0)
    tight = json.loads(run(*base, "--hbm-margin", "24MiB", "--format", "json").output)
    assert tight["fits"] is False and tight["headroom_mib"] == pytest.approx(23.0)
    assert tight["hbm_budget_mib"] == pytest.approx(150.0) and tight["hbm_limit_mib"] == pytest.approx(126.0)
    assert [s["headroom_mib"] for s in tight["stages"]] == pytest.approx([23.0, 75.0])
    text = run(*base, "--hbm-margin", "24MiB").output
    assert ("worst-stage peak 127 MiB = 84.7% of budget 150 MiB (safety margin 24 MiB), 23 MiB headroom (15.3%) "
            "| DOES NOT FIT the safety margin |") in text


def test_dry_run_uses_the_limit(toy):
    cfg, prof = toy
    r = run("search", cfg, "--profile", prof, "--hbm", "120MiB", "--hbm-margin", "20MiB", "--dry-run",
            "--format", "json")
    assert r.exit_code == 0, r.output
    info = json.loads(r.output)
    assert "peak MiB <= 100.0 per stage" in info["constraints"]   # budget 120 - margin 20
    assert info["hbm_margin_mib"] == 20.0 and info["config"].endswith("train.yaml")


def test_sweep_margin_knob(toy, tmp_path):
    from autotune.sweep.spec import load_sweep

    cfg, prof = toy
    (tmp_path / "s.yaml").write_text(
        f"defaults: {{trials: 10, profile: {prof}}}\nscenarios:\n"
        f"  - {{name: a, config: {cfg}, set: {{context.max_device_memory: '120MB'}}}}\n"
        f"  - {{name: b, config: {cfg}, set: {{context.max_device_memory: '120MB'}}, hbm_margin: '10MiB'}}\n")
    sw = load_sweep(tmp_path / "s.yaml")
    a, b = sw.scenarios
    assert a.hbm_margin is None and b.hbm_margin == "10MiB"
    assert a.study_name != b.study_name                        # a margin is a different scenario
    assert b.config.hbm_mib == 120.0                           # the budget as given; search applies the margin
    (tmp_path / "bad.yaml").write_text(f"scenarios:\n  - {{name: a, config: {cfg}, hbm_margin: 3}}\n")
    with pytest.raises(autotune.errors.ConfigError, match="R_HBM_MARGIN"):
        load_sweep(tmp_path / "bad.yaml")


def test_sweep_applies_the_margin_and_reports_headroom(toy, tmp_path):
    import csv

    from autotune.sweep.run import run_sweep

    cfg, prof = toy
    (tmp_path / "s.yaml").write_text(
        f"defaults: {{trials: 20, profile: {prof}}}\nscenarios:\n"
        f"  - {{name: a, config: {cfg}, set: {{context.max_device_memory: '120MB'}}}}\n"
        f"  - {{name: b, config: {cfg}, set: {{context.max_device_memory: '120MB'}}, hbm_margin: '10MiB'}}\n")
    out = run_sweep(tmp_path / "s.yaml", out_dir=tmp_path / "o")
    assert out.exit_code == 0
    rows = {r["scenario"]: r for r in csv.DictReader((tmp_path / "o" / "summary.csv").open())}
    assert (rows["a"]["step_ms"], rows["a"]["peak_mib"], rows["a"]["headroom_mib"]) == ("60.0", "120", "0")
    assert (rows["b"]["step_ms"], rows["b"]["peak_mib"], rows["b"]["headroom_mib"]) == ("62.5", "110", "10")
    assert rows["b"]["hbm_mib"] == "120"
    result = json.loads((tmp_path / "o" / "b" / "result.json").read_text())
    assert result["result"]["hbm_margin_mib"] == 10.0
    assert result["result"]["best"]["headroom_mib"] == pytest.approx(10.0)


@pytest.mark.slow
def test_pareto_rows_carry_headroom(toy):
    cfg, prof = toy
    res = autotune.search(cfg, prof, trials=20, hbm_mib=120, hbm_margin="10MiB", objective="time,memory")
    assert res.pareto and res.pareto[0]["step_time_ms"] == pytest.approx(62.5)   # the 110 MiB optimum
    for f in res.pareto:
        assert f["peak_mib"] <= 110.0 + 1e-9
        assert f["margin_mib"] == pytest.approx(110.0 - f["peak_mib"])
        assert f["headroom_mib"] == pytest.approx(120.0 - f["peak_mib"])
    assert res.to_dict()["pareto"] == res.pareto


def test_megatron_input_takes_a_margin_on_the_command_line(tmp_path):
    """``search --hbm-margin`` on Megatron input packs against budget − margin (it was refused):
    the JSON names the margin, and the answer peaks at most the limit."""
    args = tmp_path / "megatron.yaml"
    args.write_text("num_layers: 8\nhidden_size: 256\nnum_attention_heads: 4\nseq_length: 128\n"
                    "pipeline_model_parallel_size: 2\nmicro_batch_size: 1\nglobal_batch_size: 8\n"
                    "vocab_size: 1024\nworld_size: 2\n")
    # 2,200 MiB: the best config peaks at 2,116.3 MiB; a 100 MiB margin leaves 2,100 MiB, which
    # nothing reaches (the closest peaks at 2,104 MiB): refused with the margin named, not ignored.
    r = run("search", args, "--from", "megatron", "--hbm", "2200MiB", "--format", "json", "--quiet")
    assert r.exit_code == 0, r.output
    res = json.loads(r.output)
    assert res["hbm_margin_mib"] == 0.0 and res["best"]["peak_mib"] == pytest.approx(2116.33, abs=0.01)
    r = run("search", args, "--from", "megatron", "--hbm", "2200MiB", "--hbm-margin", "100MiB", "--quiet")
    assert r.exit_code == 2
    assert "[R_HBM_INFEASIBLE] --hbm-margin" in r.output and "limit 2100 MiB" in r.output
    r = run("search", args, "--from", "megatron", "--hbm", "2250MiB", "--hbm-margin", "100MiB", "--format", "json",
            "--quiet")
    assert r.exit_code == 0, r.output
    res = json.loads(r.output)
    assert res["hbm_margin_mib"] == 100.0 and res["best"]["peak_mib"] <= 2150.0
    bad = run("search", args, "--from", "megatron", "--hbm-margin", "1.5")
    assert bad.exit_code == 2 and "--hbm-margin" in bad.output
