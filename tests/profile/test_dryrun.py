"""Dry-run memory fit: log parsing, exact and noisy recovery, interleaved runs, refusal, the
published 96-layer 16-stage case (pinned), and no double-counted per-stage constant."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from autotune.config.layout import make_layout
from autotune.config.training import load_config
from autotune.cost.report import evaluate_layout
from autotune.errors import ConfigError
from autotune.profile.analytic import analytic_profile
from autotune.cost.dryrun_fit import fit_dryruns
from autotune.cost.probe import design_probes
from autotune.profile.dryrun import DryRun, dryrun_from_config, load_dryrun_file, order_stage_logs, parse_peak_log
from autotune.profile.merge import leaf_fields, merge_profile

DATA = Path(__file__).parent / "data"


def write_stage_logs(tmp: Path, peaks_mib, *, used_delta: float = 100.0) -> list[Path]:
    """One MindSpore-style log per stage (rank ids 0, 8, 16, ... as in a real msrun)."""
    paths = []
    for i, pk in enumerate(peaks_mib):
        p = tmp / f"worker_{8 * i}.log"
        p.write_text(f"[INFO] step 1 loss 9.1\n"
                     f"Used peak memory usage (without fragments): {pk - used_delta:.0f}M\n"
                     f"Actual peak memory usage (with fragments): {pk:.0f}M\n"
                     f"[INFO] step 2 ... Actual peak memory usage (with fragments): {pk - 5:.0f}M\n")
        paths.append(p)
    return paths


def simulated_peaks(profile, run: DryRun) -> np.ndarray:
    rep = evaluate_layout(profile, run.layout, micro_batch_num=run.micro_batch_num, schedule=run.schedule)
    return np.asarray([s.peak_mib for s in rep.stages])


@pytest.fixture(scope="module")
def small():
    cfg = load_config(DATA / "llama_small.yaml")
    return cfg, analytic_profile(cfg)


# ---------------------------------------------------------------- parsing

def test_parse_peak_log_takes_largest_and_units(tmp_path):
    p = tmp_path / "stage.log"
    p.write_text("Actual peak memory usage (with fragments): 48874M\n"
                 "Actual peak memory usage (with fragments): 50000M\n"
                 "Used peak memory usage (without fragments): 47.5G\n")
    assert parse_peak_log(p) == 50000.0
    assert parse_peak_log(p, which="used") == 47.5 * 1024


def test_parse_peak_log_missing_line_hints_other_kind(tmp_path):
    p = tmp_path / "stage.log"
    p.write_text("Used peak memory usage (without fragments): 100M\n")
    with pytest.raises(ConfigError) as e:
        parse_peak_log(p)
    assert e.value.rule == "dryrun_log" and "--peak used" in str(e.value)
    with pytest.raises(ConfigError):
        parse_peak_log(tmp_path / "absent.log")


def test_stage_logs_ordered_by_rank_number(tmp_path):
    names = ["worker_16.log", "worker_0.log", "worker_8.log"]
    for n in names:
        (tmp_path / n).write_text("")
    assert [p.name for p in order_stage_logs([tmp_path / n for n in names])] == \
        ["worker_0.log", "worker_8.log", "worker_16.log"]


def test_dryrun_from_config_reads_logs(tmp_path, small):
    cfg, prof = small
    run0 = DryRun(make_layout([[3, 5, 5, 3]], [[2, 1, 0, 0]], [[3, 2, 1, 0]], [[1, 3, 0, 2]]),
                  np.ones(4), 8)
    peaks = np.round(simulated_peaks(prof, run0))
    logs = write_stage_logs(tmp_path, peaks)
    run = dryrun_from_config(cfg, list(reversed(logs)))
    np.testing.assert_array_equal(run.peak_mib_p, peaks)
    np.testing.assert_array_equal(run.layout.layers_vp, [[3, 5, 5, 3]])
    with pytest.raises(ConfigError) as e:
        dryrun_from_config(cfg, logs[:3])
    assert e.value.rule == "dryrun_stages"


# ---------------------------------------------------------------- recovery

FITTED = ["kinds.dense.static_mib", "kinds.dense.act_mib", "kinds.dense.full.act_mib",
          "kinds.dense.full.workspace_mib", "kinds.dense.select.act_mib", "kinds.dense.comm.act_mib",
          "kinds.dense.both.act_mib", "stage_const_mib", "head.static_mib", "tail.static_mib"]


def probe_runs(prof, P=4, N=16, m=8, seed=0, noise=0.0):
    plan = design_probes(P, N, ("full", "select", "comm"), micro_batch_num=m, seed=seed)
    rng = np.random.default_rng(123)
    runs = []
    for pr in plan.probes:
        r = DryRun(pr.layout, np.ones(P), m, label=pr.label)
        peaks = simulated_peaks(prof, r) * (1 + noise * rng.standard_normal(P))
        runs.append(dataclasses.replace(r, peak_mib_p=peaks))
    return plan, runs


def test_round_trip_probe_peaks_fit_same_profile_exact(small):
    """profile -> our simulated dry-run peaks for the probe configs -> fit -> the same profile."""
    _, prof = small
    plan, runs = probe_runs(prof)
    assert len(plan.probes) == 3 and plan.rank == 10
    fit = fit_dryruns(runs, prior=prof)
    assert sorted(fit.names) == sorted(FITTED)
    truth = leaf_fields(prof)
    for name, val in fit.coef().items():
        assert val == pytest.approx(truth[name], rel=1e-9, abs=1e-6), name
    assert fit.max_abs_residual_mib < 1e-6
    merged, prov = merge_profile(prof, [(fit.fields(), "dryrun:probes")])
    got = leaf_fields(merged)
    assert got.keys() == truth.keys()
    for name in truth:
        assert got[name] == pytest.approx(truth[name], rel=1e-9, abs=1e-9), name
    assert prov["kinds.dense.static_mib"] == "dryrun:probes" and prov["tail.act_mib"] == "analytic"


def test_recovery_with_noise_within_one_percent(small):
    _, prof = small
    # 0.05 % noise on every peak, eight random probe runs on 8 stages (64 stage peaks)
    plan = design_probes(8, 32, ("full", "select", "comm"), micro_batch_num=8, seed=3,
                         target_cond=1.0, max_runs=8)
    assert len(plan.probes) == 8
    p32 = prof.with_num_layers(32)
    rng = np.random.default_rng(7)
    runs = []
    for pr in plan.probes:
        r = DryRun(pr.layout, np.ones(8), 8, label=pr.label)
        runs.append(dataclasses.replace(
            r, peak_mib_p=simulated_peaks(p32, r) * (1 + 5e-4 * rng.standard_normal(8))))
    fit = fit_dryruns(runs, prior=p32)
    truth = leaf_fields(p32)
    for name, val in fit.coef().items():
        assert abs(val - truth[name]) <= 0.01 * truth[name], (name, val, truth[name])
    assert 0 < fit.rms_residual_mib < 0.002 * runs[0].peak_mib_p.max()
    assert np.all(np.isfinite(fit.stderr_mib))


def test_interleaved_dry_runs_fit_with_schedule_inflight_counts(small):
    """V = 2 (interleaved 1F1B, m = 8 on 4 stages): chunk-wise live counts from our schedule."""
    _, prof = small
    prof = prof.with_num_layers(24)
    rng = np.random.default_rng(5)
    runs = []
    for k in range(4):
        layers = np.full((2, 4), 3)
        for _ in range(6):
            a, b = rng.integers(0, 8, size=2)
            fa, fb = divmod(a, 4), divmod(b, 4)
            if layers[fa] > 1:
                layers[fa] -= 1
                layers[fb] += 1
        rec = rng.integers(0, layers + 1)
        sel = rng.integers(0, layers + 1)
        com = rng.integers(0, layers + 1)
        r = DryRun(make_layout(layers, rec, sel, com), np.ones(4), 8, label=f"vpp{k}")
        runs.append(dataclasses.replace(r, peak_mib_p=simulated_peaks(prof, r)))
    fit = fit_dryruns(runs, prior=prof)
    truth = leaf_fields(prof)
    for name, val in fit.coef().items():
        assert val == pytest.approx(truth[name], rel=1e-9, abs=1e-6), name
    assert fit.max_abs_residual_mib < 1e-6


def test_underdetermined_fit_is_refused_with_probe_hint(small):
    _, prof = small
    run = DryRun(make_layout([[4, 4, 4, 4]], select_vp=[[4, 4, 4, 4]]), np.ones(4), 8)
    run = dataclasses.replace(run, peak_mib_p=simulated_peaks(prof, run))
    with pytest.raises(ConfigError) as e:
        fit_dryruns([run])
    msg = str(e.value)
    assert e.value.rule == "fit_underdetermined"
    assert "autotune probe --pipeline-stage 4 --num-layers 16 --kinds select" in msg
    assert "more stage peaks" in msg or "more independent" in msg


def test_fix_holds_a_field_at_the_prior(small):
    _, prof = small
    plan, runs = probe_runs(prof)
    fit = fit_dryruns(runs, prior=prof, fix=["stage_const_mib"])
    assert "stage_const_mib" not in fit.names and fit.fixed["stage_const_mib"] == prof.stage_const_mib
    assert fit.coef()["head.static_mib"] == pytest.approx(prof.head.static_mib)


# ---------------------------------------------------------------- the published dry run

# 96 layers, 16 stages, as published (micro_batch_num_profiled = 8 -> 1F1B in flight min(16 - i, 8)).
PINNED_M8 = {
    "kinds.dense.static_mib": 216.8, "kinds.dense.act_mib": 1872.2,
    "kinds.dense.select.act_mib": 1018.0, "kinds.dense.both.act_mib": 870.1,
    "kinds.dense.comm.act_mib": 668.2, "stage_const_mib": 2943.3,
    "head.static_mib": 36699.1, "tail.static_mib": 13326.5,
}
RESID_M8 = [0.0, 6828.4, 7954.3, -1171.6, 4648.2, 1674.5, -8813.5, -1036.0, -3491.4, -4655.8,
            -1915.2, -1862.9, -1116.3, -816.1, 3773.5, 0.0]
# Same data, in-flight p - i (what the case notes say, i.e. m >= 16): ten times smaller residuals.
PINNED_M16 = {
    "kinds.dense.static_mib": 2217.5, "kinds.dense.act_mib": 1002.9,
    "kinds.dense.select.act_mib": 783.5, "kinds.dense.both.act_mib": 423.1,
    "kinds.dense.comm.act_mib": 695.8, "stage_const_mib": 1206.8,
    "head.static_mib": 3407.9, "tail.static_mib": 4678.9,
}


@pytest.fixture
def case(shared):
    return load_dryrun_file(shared / "cases" / "dryrun_pipeline_balance_readme.json")


def test_published_case_fit_pinned(case):
    n, runs = case
    assert n == 96 and runs[0].micro_batch_num == 8
    fit = fit_dryruns(runs)
    print(fit.table())
    assert fit.rank == 8 and len(fit.rows) == 16
    assert fit.cond == pytest.approx(10.03, abs=0.01)
    for k, v in PINNED_M8.items():
        assert fit.coef()[k] == pytest.approx(v, abs=0.06), k
    np.testing.assert_allclose(fit.residual_mib, RESID_M8, atol=0.06)
    assert fit.rms_residual_mib == pytest.approx(4120.0, abs=0.1)
    assert fit.not_covered == ["kinds.dense.full.act_mib"]


def test_published_case_with_p_minus_i_in_flight(case):
    _, runs = case
    fit = fit_dryruns([dataclasses.replace(runs[0], micro_batch_num=16)])
    print(fit.table())
    for k, v in PINNED_M16.items():
        assert fit.coef()[k] == pytest.approx(v, abs=0.06), k
    assert fit.rms_residual_mib == pytest.approx(411.2, abs=0.1)
    # physically ordered: none > select > comm > both
    c = fit.coef()
    assert c["kinds.dense.act_mib"] > c["kinds.dense.select.act_mib"] > c["kinds.dense.comm.act_mib"] \
        > c["kinds.dense.both.act_mib"] > 0


def test_published_case_constant_counted_once(case):
    """The fitted profile, run through the cost model, reproduces the fit's predictions on every
    stage, the first and last included: the per-stage constant is not added twice there."""
    _, runs = case
    run = runs[0]
    fit = fit_dryruns(runs)
    prof, _ = merge_profile(None, [(fit.fields(), "dryrun")], layer_kinds=[("dense", 96)])
    rep = evaluate_layout(prof, run.layout, micro_batch_num=8)
    np.testing.assert_allclose([s.peak_mib for s in rep.stages], fit.predicted_mib, atol=1e-6)
    c = fit.coef()
    # stage 0 by hand: 6 layers (5 select of which 0 comm), 8 in flight, constant once + head extra
    stage0 = (6 * c["kinds.dense.static_mib"] + c["stage_const_mib"] + c["head.static_mib"]
              + 8 * (5 * c["kinds.dense.select.act_mib"] + 1 * c["kinds.dense.act_mib"]))
    assert rep.stages[0].peak_mib == pytest.approx(stage0)
    # the fit pins first/last stage through their own extras (one row each): zero residual there
    assert fit.residual_mib[0] == pytest.approx(0, abs=1e-6)
    assert fit.residual_mib[-1] == pytest.approx(0, abs=1e-6)
