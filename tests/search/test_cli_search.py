"""CLI: --dry-run prints the space size; --format json carries lower_bound_ms and certified_gap."""

from __future__ import annotations

import pytest
import json

from click.testing import CliRunner

from autotune.cli import main
from autotune.commands.tune import search_cmd

EX = "examples/telechat2_115b/train.yaml"


def test_dry_run_prints_space_size() -> None:
    r = CliRunner().invoke(search_cmd, [EX, "--dry-run", "--format", "json"])
    assert r.exit_code == 0, r.output
    info = json.loads(r.output)
    assert info["pp_interleave_num runnable"] == [1, 2, 3, 4]
    assert info["layer_splits"] > 10**20 and info["enumerable"] is False


@pytest.mark.slow
def test_json_has_bound_and_gap() -> None:
    r = CliRunner().invoke(search_cmd, [EX, "--format", "json", "--timeout", "3", "--trials", "5"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    for k in ("best", "baselines", "trials", "seconds", "lower_bound_ms", "certified_gap"):
        assert k in d
    # the bound phase alone takes longer than 3 s here: the JSON says the clock cut the search
    assert d["timed_out"] is True and d["stopped_by"] == "timeout" and d["time_limit_s"] == 3
    assert "CUT SHORT by its 3 s timeout" in r.stderr
    assert 0 < d["lower_bound_ms"] <= d["best"]["step_time_ms"]
    assert abs(d["certified_gap"] - (d["best"]["step_time_ms"] - d["lower_bound_ms"]) / d["lower_bound_ms"]) < 1e-9
    # every runnable pp_interleave_num holds a proof, even when the clock cut the bound phase; the
    # overall bound is the least of them
    by = d["lower_bound_by_vpp"]
    assert sorted(by) == ["1", "2", "3", "4"]
    assert min(by.values()) == d["lower_bound_ms"]


def test_key_typo_warned_on_stderr_before_the_search(tmp_path) -> None:
    """A memory key typo (``use_flash_attentoin``) is ignored and its default used, which moves the
    predicted peak: `search` says so on stderr before any work (it used to say nothing; only
    `check` printed it), and the JSON on stdout stays parseable."""
    text = open(EX).read()
    assert "use_flash_attention:" in text
    cfg = tmp_path / "typo.yaml"
    cfg.write_text(text.replace("use_flash_attention:", "use_flash_attentoin:"))
    r = CliRunner().invoke(search_cmd, [str(cfg), "--dry-run", "--format", "json"])
    assert r.exit_code == 0, r.output
    assert ("warning W_KEY_UNKNOWN: model.model_config.use_flash_attentoin: unknown key 'use_flash_attentoin': "
            "did you mean 'use_flash_attention'?") in r.stderr
    assert json.loads(r.stdout)["pp_interleave_num runnable"] == [1, 2, 3, 4]
    clean = CliRunner().invoke(search_cmd, [EX, "--dry-run", "--format", "json"])
    assert "W_KEY_UNKNOWN" not in clean.stderr


def test_nothing_fits_says_floor_and_closest_apart(tmp_path) -> None:
    """1 GB for the toy model: the static floor (8,889 MiB with one micro-batch) is a bound for
    every layout, the closest found is one layout (its least-peak split, 9,281 MiB; the even split
    with full recompute, the closest before, 9,553 MiB): the error names both for what they are,
    and the --out file's header says the layout does not fit (it said "tuned pipeline layout")."""
    out = tmp_path / "closest.yaml"
    r = CliRunner().invoke(main, ["search", "tests/e2e/data/toy.yaml", "--hbm", "1GB", "--out", str(out), "--quiet"])
    assert r.exit_code == 2
    assert "so every layout exceeds it by at least 7865 MiB" in r.output
    assert "the closest found exceeds it by 8257 MiB" in r.output
    assert "closest config exceeds memory by 8257 MiB on its worst stage" in r.output
    assert "keys to paste" not in r.output and "keys of the closest layout (it does NOT fit" in r.output
    assert "(no layout fits the budget)" in r.output and "(not runnable/invalid)" not in r.output
    assert "-11889 (-1161.0%)" in r.output  # the headroom and its share stay apart at four digits
    first = out.read_text().splitlines()[0]
    assert first.startswith("# autotune: NO CONFIGURATION FITS the HBM budget") and "does NOT fit" in first


@pytest.mark.slow
def test_out_header_and_json_carry_key_warnings_and_budget_mismatch(tmp_path) -> None:
    """The tuned file is what gets trained with: its header repeats a key warning (a typo'd
    memory key's default was used) and says when the budget searched (--hbm 20GB) is not the
    file's context.max_device_memory (13GB), which MindFormers runs with; the JSON carries the
    warnings under ``warnings``."""
    text = open("tests/e2e/data/toy.yaml").read()
    assert "model_config:\n" in text
    cfg = tmp_path / "toy_typo.yaml"
    cfg.write_text(text.replace("model_config:\n", "model_config:\n    use_flash_attentoin: true\n", 1))
    out = tmp_path / "best.yaml"
    r = CliRunner().invoke(main, ["search", str(cfg), "--hbm", "20GB", "--trials", "3", "--quiet",
                                  "--out", str(out), "--format", "json"])
    assert r.exit_code == 0, r.output
    head = [ln for ln in out.read_text().splitlines() if ln.startswith("# ")]
    assert ("# WARNING W_KEY_UNKNOWN: model.model_config.use_flash_attentoin: unknown key 'use_flash_attentoin': "
            "did you mean 'use_flash_attention'?") in "\n".join(head)
    assert ("# NOTE: tuned for an HBM budget of 20480 MiB (--hbm), but this file's context.max_device_memory "
            "is 13GB (13312 MiB)") in "\n".join(head)
    [w] = json.loads(r.stdout)["warnings"]
    assert w["code"] == "W_KEY_UNKNOWN" and w["field"] == "model.model_config.use_flash_attentoin"
    same = tmp_path / "same.yaml"
    r2 = CliRunner().invoke(main, ["search", "tests/e2e/data/toy.yaml", "--trials", "3", "--quiet", "--out", str(same)])
    assert r2.exit_code == 0, r2.output
    assert "NOTE: tuned for" not in same.read_text() and "WARNING" not in same.read_text()
    # the user's config line says "fits: yes" / "fits: NO", not Python's True / False
    [user_line] = [ln for ln in same.read_text().splitlines() if ln.startswith("# user's config: ")]
    assert user_line.endswith(("fits: yes", "fits: NO")), user_line


def test_a_text_file_that_mentions_pretrain_says_how_it_was_read(tmp_path):
    """A file that is not a YAML mapping but mentions pretrain_gpt.py (a README) is read as a
    Megatron-LM launch script; with no launch line in it the error says so, and that a MindFormers
    config must be a YAML mapping (a new user passed README.md and got a Megatron message only)."""
    notes = tmp_path / "notes.md"
    notes.write_text("# Notes\n\nWe train with `pretrain_gpt.py` on 64 GPUs.\n")
    r = CliRunner().invoke(main, ["search", str(notes)])
    assert r.exit_code == 2
    assert "[R_MEGATRON_SCRIPT]" in r.output and "no training command found" in r.output
    assert "read as a Megatron-LM launch script; a MindFormers config must be a YAML mapping" in r.output
    assert "Traceback" not in r.output


@pytest.mark.parametrize("option, value, rng", [
    ("--timeout", "nan", "x>0"), ("--timeout", "inf", "x>0"), ("--timeout", "NaN", "x>0"),
    ("--gap", "nan", "x>=0"), ("--gap", "inf", "x>=0"),
    ("--progress-every", "nan", "x>0"), ("--progress-every", "inf", "x>0"),
])
def test_non_finite_float_options_are_refused(option, value, rng) -> None:
    """``--timeout nan`` ran to the end and wrote ``"time_limit_s": NaN`` (invalid JSON); ``inf``
    wrote ``Infinity``. Refused like 0 and negative values: exit 2 before any work."""
    r = CliRunner().invoke(main, ["search", EX, option, value, "--format", "json", "--dry-run"])
    assert r.exit_code == 2
    assert f"Invalid value for '{option}': '{value}' is not a finite number (the range is {rng})" in r.output
    assert "Traceback" not in r.output and "time_limit_s" not in r.output


@pytest.mark.parametrize("value", ["nan", "inf", "-inf"])
def test_non_finite_assumption_override_is_refused(value) -> None:
    r = CliRunner().invoke(main, ["search", EX, "--set", f"stage_const_mib={value}", "--dry-run"])
    assert r.exit_code == 2
    assert (f"[assumption] --set stage_const_mib: must be a finite number in [0, 1048576], got {value}"
            in r.output), r.output


INF = float("inf")
PROFILE = "examples/telechat2_115b/profile.yaml"


@pytest.mark.parametrize("overrides, shown", [
    ({"stage_const_mib": INF}, "must be a finite number in [0, 1048576], got inf"),
    ({"efficiency": float("nan")}, "must be a finite number in [1e-06, 1], got nan"),
    ({"efficiency": -INF}, "must be a finite number in [1e-06, 1], got -inf"),
    ({"efficiency": None}, "must be a number, got None"),
    ({"efficiency": "0.5"}, "must be a number, got '0.5'"),
    ({"efficiency": True}, "must be a number, got True"),
    ({"nope": 1.0}, "unknown assumption 'nope'"),
])
@pytest.mark.parametrize("profile", [None, PROFILE])
def test_api_checks_assumption_overrides_as_the_cli_does(overrides, shown, profile) -> None:
    """The API's ``overrides`` go through the check the CLI's ``--set`` does: with a given profile
    ``inf`` used to pass unchecked (and ignored), and None or a string ended on a TypeError /
    ValueError instead of the one-line error."""
    import autotune
    from autotune.errors import ConfigError

    with pytest.raises(ConfigError) as ei:
        autotune.evaluate(EX, profile, overrides=overrides)
    key = next(iter(overrides))
    assert (ei.value.rule, ei.value.field) == ("assumption", f"--set {key}") and shown in ei.value.message
    with pytest.raises(ConfigError) as ei:
        autotune.search(EX, profile, overrides=overrides, trials=2)
    assert (ei.value.rule, ei.value.field) == ("assumption", f"--set {key}") and shown in ei.value.message


def test_api_megatron_profile_checks_assumption_overrides() -> None:
    """A Megatron profile built on a given analytic base checked nothing (``float(v)`` of each)."""
    from autotune.errors import ConfigError
    from autotune.api import load_megatron
    from autotune.megatron.profile import megatron_profile, training_config
    from autotune.profile.analytic import analytic_profile

    run = load_megatron("examples/megatron/llama3_70b.yaml")
    base = analytic_profile(training_config(run), "h100")
    with pytest.raises(ConfigError) as ei:
        megatron_profile(run, "h100", overrides={"efficiency": INF}, base=base)
    assert (ei.value.rule, ei.value.field) == ("assumption", "--set efficiency")


def test_set_with_a_given_profile_is_refused_not_ignored() -> None:
    """``--set`` changes the analytic profile's assumptions; with ``--profile`` it was ignored
    without a word (same step time with any value)."""
    r = CliRunner().invoke(main, ["evaluate", EX, "--profile", PROFILE, "--set", "efficiency=0.2"])
    assert r.exit_code == 2
    assert r.output.strip().splitlines()[-1].startswith(
        "error: [assumption] --set efficiency: an assumption of the analytic profile, which a given profile "
        "does not use"), r.output
    assert CliRunner().invoke(main, ["evaluate", EX, "--profile", PROFILE]).exit_code == 0


@pytest.mark.parametrize("kw", [{"timeout": float("nan")}, {"timeout": float("inf")}, {"timeout": 0.0},
                                {"gap": float("nan")}, {"gap": float("inf")}])
def test_api_refuses_non_finite_timeout_and_gap(kw) -> None:
    from autotune.errors import ConfigError
    from autotune.tuner.search import check_arguments
    with pytest.raises(ConfigError) as ei:
        check_arguments(kw.get("gap", 0.005), "time", kw.get("timeout"))
    assert (ei.value.field, ei.value.rule) == (next(iter(kw)), "range")
    assert check_arguments(0.0, "time", 20.0) == "time"


def test_a_pattern_that_matches_nothing_is_warned_by_search(tmp_path):
    """A select pattern that names no op of the model: ``check`` warns W_SELECT_NO_MATCH, and so does
    ``search`` (on stderr, in the JSON's ``warnings`` and in the ``--out`` header), since the answer
    keeps the config's patterns and their counts then recompute nothing. The toy config without
    it carries no such warning."""
    text = open("tests/e2e/data/toy.yaml").read()
    assert "  select_recompute: False\n" in text
    cfg = tmp_path / "toy_dead_pattern.yaml"
    cfg.write_text(text.replace("  select_recompute: False\n", "  select_recompute: ['nonexistent\\.op']\n"))
    out = tmp_path / "best.yaml"
    r = CliRunner().invoke(main, ["search", str(cfg), "--trials", "3", "--quiet", "--out", str(out),
                                  "--format", "json"])
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    [w] = [w for w in data["warnings"] if w["code"] == "W_SELECT_NO_MATCH"]
    assert w["field"] == "recompute_config.select_recompute" and "nonexistent" in w["message"]
    assert "warning W_SELECT_NO_MATCH: recompute_config.select_recompute:" in r.stderr
    assert "# WARNING W_SELECT_NO_MATCH: recompute_config.select_recompute:" in out.read_text()
    clean = CliRunner().invoke(main, ["search", "tests/e2e/data/toy.yaml", "--trials", "3", "--quiet",
                                      "--format", "json"])
    assert clean.exit_code == 0 and json.loads(clean.stdout)["warnings"] == []


def test_a_limit_spent_before_the_search_is_warned(monkeypatch, capsys) -> None:
    """``--timeout`` counts from the process's start: when start-up has used it (here 0.8 s of a
    1 s limit, with 0.5 s kept for the output) the search gets 10 % of it, and a W_TIMEOUT_SPENT
    line says that the limit cannot be kept; a limit with room left gets no such line."""
    import autotune.commands.tune as tune

    monkeypatch.setattr(tune, "_since_process_start", lambda: 0.8)
    assert tune._search_timeout(10.0) == pytest.approx(10.0 - 0.8 - 0.5)
    assert tune._search_timeout(None) is None
    assert "W_TIMEOUT_SPENT" not in capsys.readouterr().err  # room left: no warning
    assert tune._search_timeout(1.0) == pytest.approx(0.1)
    assert "W_TIMEOUT_SPENT" in capsys.readouterr().err
    r = CliRunner().invoke(search_cmd, [EX, "--format", "json", "--timeout", "1"])
    assert r.exit_code == 0, r.output
    warned = [ln for ln in r.stderr.splitlines() if ln.startswith("warning W_TIMEOUT_SPENT")]
    assert warned == ["warning W_TIMEOUT_SPENT: --timeout: 1 s cannot be kept: 0.8 s passed before the search "
                      "started (interpreter, imports, the config's first read) and 0.5 s is kept for writing the "
                      "output; the search gets 10 % of the limit (0.1 s) and ends with what it found by then"]
    assert json.loads(r.stdout)["timed_out"] is True
