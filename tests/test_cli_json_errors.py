"""``--format json`` errors of ``evaluate``, ``search`` and ``report``: ``{"error": {"rule",
"field", "message"}}`` on stdout (as ``check --format json``) besides the one-line ``error:`` on
stderr, exit 2; text output keeps stdout empty; a search whose JSON result is printed before its
error (nothing fits) keeps stdout one JSON document."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from autotune.cli import main

ROOT = Path(__file__).resolve().parents[1]
GLM = ROOT / "examples" / "real_configs" / "05_glm4_9b.yaml"


def _run(*args: str):
    return CliRunner().invoke(main, [str(a) for a in args], prog_name="autotune")


@pytest.fixture()
def bad_config(tmp_path: Path) -> Path:
    p = tmp_path / "bad.yaml"
    p.write_text(GLM.read_text(encoding="utf-8").replace("mp_comm_recompute: true", "mp_comm_recompute: 1"),
                 encoding="utf-8")
    return p


@pytest.mark.parametrize("argv", [["evaluate"], ["search", "--dry-run"], ["search", "--quiet"],
                                  ["report", "--out", "OUT"]], ids=["evaluate", "dry-run", "search", "report"])
def test_json_error_on_stdout_and_text_on_stderr(argv, bad_config, tmp_path):
    argv = [str(tmp_path / "r") if a == "OUT" else a for a in argv]
    r = _run(*argv, bad_config, "--format", "json")
    assert r.exit_code == 2
    err = json.loads(r.stdout)["error"]
    assert err["rule"] == "R_RECOMPUTE_BOOL" and err["field"] == "recompute_config.mp_comm_recompute"
    assert r.stderr.startswith("error: [R_RECOMPUTE_BOOL] recompute_config.mp_comm_recompute:")
    text = _run(*argv, bad_config)
    assert text.exit_code == 2 and text.stdout == "" and text.stderr == r.stderr


def test_missing_file_is_a_json_error(tmp_path):
    r = _run("evaluate", tmp_path / "none.yaml", "--format", "json")
    assert r.exit_code == 2 and json.loads(r.stdout)["error"]["rule"] == "file"


def test_nothing_fits_keeps_one_json_document_on_stdout():
    r = _run("search", GLM, "--hbm", "1GB", "--format", "json", "--quiet")
    assert r.exit_code == 2
    doc = json.loads(r.stdout)            # the result alone: no error object after it
    assert doc["best"] is None and doc["closest"] is not None
    assert r.stderr.strip().splitlines()[-1].startswith("error: [R_HBM_INFEASIBLE] --hbm:")


@pytest.mark.parametrize("argv,field,starts", [
    (["evaluate", "--format", "json"], "CONFIG", "Missing argument 'CONFIG'"),
    (["check", "--format=json"], "CONFIG", "Missing argument 'CONFIG'"),
    (["search", GLM, "--timeout", "0", "--format", "json"], "--timeout", "Invalid value for '--timeout'"),
    (["report", GLM, "--bogus", "--format", "json"], "--bogus", "No such option '--bogus'"),
])
def test_usage_error_is_a_json_error_when_json_was_asked(argv, field, starts):
    r = _run(*argv)
    assert r.exit_code == 2
    err = json.loads(r.stdout)["error"]
    assert err == {"rule": "usage", "field": field, "message": err["message"]} and err["message"].startswith(starts)
    assert r.stderr.startswith("error: " + starts) and r.stderr.count("\n") == 1


@pytest.mark.parametrize("argv", [
    ["evaluate"],                                              # no --format at all
    ["evaluate", "--format", "json", GLM, "--format", "xml"],  # click keeps the last one: not json
    ["search", GLM, "--timeout", "0", "--format", "text"],
])
def test_usage_error_keeps_stdout_empty_without_json(argv):
    r = _run(*argv)
    assert r.exit_code == 2 and r.stdout == "" and r.stderr.startswith("error: ")


@pytest.mark.parametrize("argv,moved", [
    (["--format", "json", "search", "x.yaml", "--trials", "3"], "autotune search x.yaml --trials 3 --format json"),
    (["--format=json", "check", "x.yaml"], "autotune check x.yaml --format=json"),
])
def test_a_sub_command_option_before_the_sub_command_is_one_usage_line(argv, moved):
    """`autotune --format json search x.yaml`: click's usage block before; now one line that
    says where the option goes (the typed sub-command's own), and JSON when json was asked."""
    r = _run(*argv)
    assert r.exit_code == 2 and r.stderr.count("\n") == 1
    assert r.stderr.startswith("error: No such option '--format' before the sub-command")
    assert f"e.g. '{moved}'" in r.stderr
    err = json.loads(r.stdout)["error"]
    assert err["rule"] == "usage" and err["field"] == "--format" and moved in err["message"]
    hbm = _run("--hbm", "3GB", "search", "x.yaml")
    assert hbm.exit_code == 2 and hbm.stdout == "" and "'autotune search x.yaml --hbm 3GB'" in hbm.stderr
    # the typed sub-command lacks the option, or none was typed: which sub-commands have it, no
    # command line that would fail again (a new user got 'autotune check x.yaml evaluate --hbm 50GB')
    other = _run("--hbm", "50GB", "check", "x.yaml")
    assert other.exit_code == 2 and other.stderr == (
        "error: No such option '--hbm' before the sub-command, nor one of 'autotune check': it is an option of "
        "'autotune evaluate', 'autotune report', 'autotune search' (see 'autotune evaluate --help')\n")
    alone = _run("--workers", "2")
    assert alone.exit_code == 2 and alone.stderr == (
        "error: No such option '--workers' before the sub-command: it is an option of 'autotune sweep' "
        "(see 'autotune sweep --help')\n")
    # an option no sub-command has: click's message and the group's --help, on one line
    typo = _run("--debugx", "check")
    assert typo.exit_code == 2
    assert typo.stderr == "error: No such option '--debugx'. Did you mean '--debug'? (see 'autotune --help')\n"


def test_run_warnings_reach_evaluate_and_search(tmp_path):
    """micro_batch_num not set with pipeline_stage 4: MindFormers runs 1 micro-batch, which
    MindSpore's pipeline rejects. `check` warns (W_MICRO_BATCH_DEFAULT); `evaluate` says it on
    stderr (text) or under "warnings" (json), and `search` on stderr before the work and in its
    json's "warnings", whatever layout it picks."""
    cfg = tmp_path / "no_mb.yaml"
    cfg.write_text(GLM.read_text(encoding="utf-8").replace("  micro_batch_num: 64\n", ""), encoding="utf-8")
    line = "warning W_MICRO_BATCH_DEFAULT: parallel_config.micro_batch_num: micro_batch_num is not set"
    assert line in _run("check", cfg).output
    ev = _run("evaluate", cfg)
    assert ev.exit_code == 0 and ev.stderr.startswith(line)
    js = _run("evaluate", cfg, "--format", "json")
    assert [w["code"] for w in json.loads(js.stdout)["warnings"]] == ["W_MICRO_BATCH_DEFAULT"]
    se = _run("search", cfg, "--dry-run")
    assert se.stderr.startswith(line)
    full = _run("search", cfg, "--quiet", "--format", "json", "--trials", "3", "--timeout", "20")
    assert "W_MICRO_BATCH_DEFAULT" in [w["code"] for w in json.loads(full.stdout)["warnings"]]
    # with micro_batch_num set, none of it
    assert "W_MICRO_BATCH_DEFAULT" not in _run("evaluate", GLM).stderr


def test_an_inference_config_is_warned_by_check_and_search(tmp_path):
    cfg = tmp_path / "predict.yaml"
    cfg.write_text(GLM.read_text(encoding="utf-8").replace("run_mode: finetune", "run_mode: predict"), encoding="utf-8")
    assert "warning W_RUN_MODE: run_mode: run_mode is 'predict'" in _run("check", cfg).output
    assert "warning W_RUN_MODE" in _run("search", cfg, "--dry-run").stderr
    assert "W_RUN_MODE" not in _run("check", GLM).output


def test_a_missing_option_value_points_at_the_sub_commands_help():
    """click names the group for an option without its value; the pointer names the sub-command."""
    r = _run("search", GLM, "--timeout")
    assert r.exit_code == 2
    assert r.stderr == "error: Option '--timeout' requires an argument (see 'autotune search --help')\n"
    assert "(see 'autotune --help')" in _run("bogus").stderr        # no sub-command: the group's help
