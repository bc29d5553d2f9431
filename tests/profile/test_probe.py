"""Probe design and the `autotune probe` / `autotune profile --from-dryrun` commands."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml
from click.testing import CliRunner

from autotune.cli import main
from autotune.config.training import load_config
from autotune.cost.report import evaluate_layout
from autotune.errors import ConfigError
from autotune.profile.analytic import analytic_profile
from autotune.cost.dryrun_fit import design_quality
from autotune.cost.probe import design_probes
from autotune.profile.dryrun import DryRun, load_dryrun_file

DATA = Path(__file__).parent / "data"


def test_deterministic_and_full_rank():
    a = design_probes(4, 16, ("full", "select", "comm"), seed=1)
    b = design_probes(4, 16, ("full", "select", "comm"), seed=1)
    assert [p.values for p in a.probes] == [p.values for p in b.probes]
    assert a.rank == len(a.unknowns) == 10 and a.cond <= 50
    # fewest runs: 10 unknowns need >= 10 stage peaks, i.e. 3 runs of 4 stages
    assert len(a.probes) == 3
    for p in a.probes:
        assert p.layout.layers_vp.min() >= 1 and p.layout.num_layers == 16


def test_one_run_suffices_on_many_stages():
    plan = design_probes(16, 96, ("select", "comm"))
    assert len(plan.probes) == 1 and plan.rank == 8


def test_a_uniform_run_is_rank_deficient():
    from autotune.config.layout import make_layout

    names, rank, cond = design_quality([DryRun(make_layout([[4, 4, 4, 4]]), np.ones(4), 4)],
                                       [("dense", 16)])
    assert rank < len(names) and cond == float("inf")


def test_bad_arguments():
    with pytest.raises(ConfigError) as e:
        design_probes(2, 8)
    assert e.value.rule == "probe"
    with pytest.raises(ConfigError):
        design_probes(4, 16, ("offload",))


def test_cli_probe_then_fit_round_trip(tmp_path):
    """autotune probe -> (our simulated dry-run peaks filled into runs.yaml) -> autotune profile
    --from-dryrun runs.yaml -> the analytic profile's memory fields back."""
    r = CliRunner().invoke(main, ["probe", "--pipeline-stage", "4", "--num-layers", "16",
                                  "--micro-batch-num", "8", "--out", str(tmp_path / "probes")])
    assert r.exit_code == 0, r.output
    runs_file = tmp_path / "probes" / "runs.yaml"
    block = yaml.safe_load((tmp_path / "probes" / "probe1.yaml").read_text())
    assert set(block) == {"model", "parallel_config", "recompute_config"}
    manifest = yaml.safe_load(runs_file.read_text())
    cfg = load_config(DATA / "llama_small.yaml")
    prof = analytic_profile(cfg)
    from autotune.config.layout import layout_from_values

    for run in manifest["runs"]:
        lay = layout_from_values(16, 4, 1, offset=run["offset"], recompute=run["recompute"],
                                 select_recompute=run["select_recompute"],
                                 select_comm_recompute=run["select_comm_recompute"])
        rep = evaluate_layout(prof, lay, micro_batch_num=run["micro_batch_num"])
        run["peak_mib_per_stage"] = [s.peak_mib for s in rep.stages]
    runs_file.write_text(yaml.safe_dump(manifest))
    n, runs = load_dryrun_file(runs_file)
    assert n == 16 and len(runs) == len(manifest["runs"])
    out = tmp_path / "fitted.yaml"
    r = CliRunner().invoke(main, ["profile", str(DATA / "llama_small.yaml"), "--from-dryrun",
                                  str(runs_file), "--out", str(out), "--report", str(tmp_path / "rep.json")])
    assert r.exit_code == 0, r.output
    assert "rank 10" in r.output
    got = yaml.safe_load(out.read_text())
    d = got["kinds"]["dense"]
    assert d["static_mib"] == pytest.approx(prof.kinds["dense"].static_mib)
    assert d["both"]["act_mib"] == pytest.approx(prof.kinds["dense"].both.act_mib)
    assert d["full"]["workspace_mib"] == pytest.approx(prof.kinds["dense"].full.workspace_mib)
    assert got["stage_const_mib"] == pytest.approx(prof.stage_const_mib)
    assert got["sources"]["field.head.static_mib"] == "dryrun:runs.yaml"
    assert got["sources"]["field.kinds.dense.fwd_ms"] == "analytic"


def test_cli_dryrun_logs_with_config(tmp_path):
    cfg = load_config(DATA / "llama_small.yaml")
    prof = analytic_profile(cfg)
    from autotune.config.layout import layout_from_config

    rep = evaluate_layout(prof, layout_from_config(cfg), micro_batch_num=8)
    logs = []
    for i, s in enumerate(rep.stages):
        p = tmp_path / f"worker_{i}.log"
        p.write_text(f"Actual peak memory usage (with fragments): {s.peak_mib:.0f}M\n")
        logs.append(str(p))
    r = CliRunner().invoke(main, ["profile", "--config", str(DATA / "llama_small.yaml"),
                                  *sum((["--from-dryrun", x] for x in logs), [])])
    # one run of 4 stages cannot identify 10 unknowns: refused, with the probe command to run
    assert r.exit_code == 2, r.output
    assert "[fit_underdetermined]" in r.output and "autotune probe --pipeline-stage 4" in r.output
    assert "Traceback" not in r.output


def test_cli_published_case_with_override(shared):
    case = shared / "cases" / "dryrun_pipeline_balance_readme.json"
    r = CliRunner().invoke(main, ["profile", "--from-dryrun", str(case), "--micro-batch-num", "16"])
    assert r.exit_code == 0, r.output
    assert "rms residual 411.2 MiB" in r.output
    r = CliRunner().invoke(main, ["profile", "--from-dryrun", str(case)])
    assert "micro_batch_num 8 < pipeline_stage 16" in r.output


def test_cli_profile_analytic_still_works():
    r = CliRunner().invoke(main, ["profile", str(DATA / "llama_small.yaml"), "--device", "h100"])
    assert r.exit_code == 0, r.output
    assert "device: h100" in r.output
    r = CliRunner().invoke(main, ["profile"])
    assert r.exit_code == 2 and "[cli]" in r.output


def test_cli_dryrun_import_warns_times_from_analytic(tmp_path, shared):
    """A dry-run fit gives memory only: the times (and p2p) are named with their analytic values;
    without CONFIG they are 0 and the warning says so; --strict refuses."""
    case = shared / "cases" / "dryrun_pipeline_balance_readme.json"
    out = tmp_path / "p.yaml"
    r = CliRunner().invoke(main, ["profile", "--from-dryrun", str(case), "--micro-batch-num", "16",
                                  "--out", str(out)])
    assert r.exit_code == 0, r.output
    w = yaml.safe_load(out.read_text())["warnings"]
    line = [x for x in w if x.startswith("kinds.dense: ")]
    assert line and "fwd_ms 0 ms, bwd_ms 0 ms" in line[0] and "no base profile" in line[0]
    assert any(x.startswith("p2p_ms 0 ms") for x in w)
    r = CliRunner().invoke(main, ["profile", "--from-dryrun", str(case), "--micro-batch-num", "16",
                                  "--strict"])
    assert r.exit_code == 2 and "kinds.dense.fwd_ms" in r.output and "Traceback" not in r.output
