"""Bad model dimensions and non-string keys: every command gives the same one-line error, exit 2.

Fuzzing found values that ``check`` accepted and ``evaluate`` / ``search`` / ``profile`` ended on
with a traceback (exit 1): ``ffn_dim_multiplier: 1.0e+300`` (OverflowError in the analytic
profile), ``ffn_dim_multiplier: -1.3`` (a negative FFN width, then pydantic's ``extra_ms >= 0``),
``hidden_size: 4294967296`` (accepted although the README limits config integers to int32), and a
top-level key ``1: 2`` / ``~: 2`` (pydantic's multi-line ``raw.1.[key]`` error).
"""

from __future__ import annotations

import copy

import pytest
import yaml
from click.testing import CliRunner

from autotune.cli import main
from tests.conftest import ROOT

BASE = yaml.safe_load((ROOT / "examples" / "llama3_1_70b" / "train.yaml").read_text())
COMMANDS = ("check", "evaluate", "profile", "search")
MC = "model.model_config."


def _write(tmp_path, text: str):
    p = tmp_path / "train.yaml"
    p.write_text(text)
    return p


def _with_dims(tmp_path, **dims):
    data = copy.deepcopy(BASE)
    data["model"]["model_config"].update(dims)
    return _write(tmp_path, yaml.safe_dump(data, sort_keys=False))


def _one_error(args) -> str:
    res = CliRunner().invoke(main, [str(a) for a in args])
    assert res.exit_code == 2, res.output
    assert "Traceback" not in res.output and res.exception is None or isinstance(res.exception, SystemExit)
    lines = [ln for ln in res.output.splitlines() if ln.strip()]
    errors = [ln for ln in lines if ln.startswith("error:")]
    assert len(errors) == 1 and errors == [lines[-1]], res.output
    return errors[0]


def _run(cmd: str, path) -> str:
    extra = ["--trials", "2", "--timeout", "30"] if cmd == "search" else []
    return _one_error([cmd, path, *extra])


@pytest.mark.parametrize("cmd", COMMANDS)
@pytest.mark.parametrize("key, value, expect", [
    # 1.0e+300 is a YAML float: over the range
    ("ffn_dim_multiplier", 1.0e300, "[R_RANGE] model.model_config.ffn_dim_multiplier: must be a finite "
                                    "number in (0, 2147483647], got 1e+300"),
    ("ffn_dim_multiplier", -1.3, "[R_RANGE] model.model_config.ffn_dim_multiplier: must be a finite "
                                 "number in (0, 2147483647], got -1.3"),
    ("ffn_dim_multiplier", 0.0, "[R_RANGE] model.model_config.ffn_dim_multiplier: must be a finite "
                                "number in (0, 2147483647], got 0.0"),
    ("ffn_dim_multiplier", float("nan"), "[R_RANGE] model.model_config.ffn_dim_multiplier: must be a finite "
                                         "number in (0, 2147483647], got nan"),
    # finite, but the FFN width it gives is over int32
    ("ffn_dim_multiplier", 5.0e5, "[R_RANGE] model.model_config.ffn_dim_multiplier: gives intermediate_size "
                                  "10,922,667,008 with the hidden_size"),
    ("multiple_of", -256, "[R_RANGE] model.model_config.multiple_of: must be >= 1, got -256"),
    ("hidden_size", 4294967296, "[R_RANGE] model.model_config.hidden_size: must be <= 2147483647 (int32; "
                                "autotune's input limit), got 4294967296"),
    ("seq_length", 2**31, "[R_RANGE] model.model_config.seq_length: must be <= 2147483647"),
    ("vocab_size", 10**30, "[R_RANGE] model.model_config.vocab_size: must be <= 2147483647"),
    ("n_kv_heads", 0, "[R_RANGE] model.model_config.n_kv_heads: must be >= 1, got 0"),
    ("intermediate_size", -5, "[R_RANGE] model.model_config.intermediate_size: must be >= 1, got -5"),
    ("attention_dropout", 1.5, "[R_RANGE] model.model_config.attention_dropout: must be a finite number in "
                               "[0, 1], got 1.5"),
    ("num_heads", "many", "[R_TYPE] model.model_config.num_heads: must be an integer, got 'many'"),
])
def test_a_bad_model_dim_is_one_line_exit_2_on_every_command(tmp_path, cmd, key, value, expect):
    path = _with_dims(tmp_path, **{key: value})
    err = _run(cmd, path)
    assert err.startswith("error: " + expect), err


@pytest.mark.parametrize("cmd", COMMANDS)
def test_an_exponent_without_sign_is_a_string_in_yaml_11(tmp_path, cmd):
    """``1.0e300`` (the fuzzer's file) is a string to PyYAML, as to MindFormers: a type error."""
    text = (ROOT / "examples" / "llama3_1_70b" / "train.yaml").read_text()
    assert "ffn_dim_multiplier: 1.3\n" in text
    path = _write(tmp_path, text.replace("ffn_dim_multiplier: 1.3\n", "ffn_dim_multiplier: 1.0e300\n"))
    err = _run(cmd, path)
    assert err.startswith("error: [R_TYPE] model.model_config.ffn_dim_multiplier: must be a number, "
                          "got '1.0e300'; fix: YAML 1.1"), err


@pytest.mark.parametrize("cmd", COMMANDS)
@pytest.mark.parametrize("line, field, shown", [("1: 2", "1", "int key 1"), ("~: 2", "~", "null key ~"),
                                                ("true: 2", "True", "bool key True")])
def test_a_non_string_top_level_key_is_one_line_r_type(tmp_path, cmd, line, field, shown):
    text = (ROOT / "examples" / "llama3_1_70b" / "train.yaml").read_text() + line + "\n"
    err = _run(cmd, _write(tmp_path, text))
    assert err.startswith(f"error: [R_TYPE] {field}: a top-level key must be a string"), err
    assert shown in err and "pydantic" not in err


@pytest.mark.parametrize("cmd", COMMANDS)
@pytest.mark.parametrize("value, rule, shown", [(1.5, "R_TYPE", "got 1.5"), ("two", "R_TYPE", "got 'two'"),
                                                (True, "R_TYPE", "got True"), (0, "R_RANGE", "got 0")])
def test_a_bad_batch_size_is_one_line_exit_2_on_every_command(tmp_path, cmd, value, rule, shown):
    """``runner_config.batch_size`` 1.5 / 'two' / true used to run as 1 without a word."""
    data = copy.deepcopy(BASE)
    data["runner_config"]["batch_size"] = value
    err = _run(cmd, _write(tmp_path, yaml.safe_dump(data, sort_keys=False)))
    assert err.startswith(f"error: [{rule}] runner_config.batch_size: ") and shown in err, err


@pytest.mark.parametrize("cmd", COMMANDS)
@pytest.mark.parametrize("value", ["3", "three"])
def test_a_string_first_k_dense_replace_is_one_line_exit_2_on_every_command(tmp_path, cmd, value):
    """DeepSeek-V3's ``moe_config.first_k_dense_replace: '3'`` used to run as 0 dense layers."""
    text = (ROOT / "examples" / "real_configs" / "01_deepseek3_671b.yaml").read_text()
    assert "  first_k_dense_replace: 3\n" in text
    path = _write(tmp_path, text.replace("  first_k_dense_replace: 3\n", f"  first_k_dense_replace: '{value}'\n"))
    err = _run(cmd, path)
    assert err.startswith(f"error: [R_TYPE] moe_config.first_k_dense_replace: must be an integer, got '{value}'"), err


def test_the_config_reader_rules_are_the_documented_codes(tmp_path):
    """A model-dim rule is R_TYPE / R_RANGE / R_MISSING / R_REFERENCE, as the README documents."""
    readme = (ROOT / "README.md").read_text()
    cases = [({"vocab_size": "${model.model_config.nope}"}, "R_REFERENCE"),
             ({"vocab_size": 1.5}, "R_TYPE"), ({"vocab_size": -1}, "R_RANGE")]
    for dims, rule in cases:
        err = _one_error(["check", _with_dims(tmp_path, **dims)])
        assert err.startswith(f"error: [{rule}] model.model_config.vocab_size:"), err
        assert f"| {rule}" in readme or f"/ {rule}" in readme or f"{rule} /" in readme, rule
    data = copy.deepcopy(BASE)
    del data["model"]["model_config"]["vocab_size"]
    err = _one_error(["check", _write(tmp_path, yaml.safe_dump(data))])
    assert err.startswith("error: [R_MISSING] model.model_config.vocab_size: required key is missing"), err



def test_a_pydantic_error_is_one_line_on_the_cli(monkeypatch, tmp_path):
    """A derived value one of autotune's models refuses (what ``-1.3`` did before the reader checked
    it) is one line naming the model and its field, exit 2, not pydantic's multi-line text."""
    import autotune.profile.analytic as analytic
    from autotune.profile.schema import OpSaving

    def bad_tables(*a, **k):
        OpSaving(act_mib=1.0, extra_ms=-0.25)

    monkeypatch.setattr(analytic, "op_tables", bad_tables)
    path = _with_dims(tmp_path)
    for cmd in ("evaluate", "profile"):
        err = _one_error([cmd, path])
        assert err.startswith("error: [R_UNSUPPORTED] extra_ms: Input should be greater than or equal to 0 "
                              "(got -0.25) in the OpSaving derived from the input"), err
    res = CliRunner().invoke(main, ["--debug", "evaluate", str(path)])
    assert type(res.exception).__name__ == "ValidationError"      # --debug keeps the real error


def test_a_config_error_with_a_line_break_prints_one_line():
    from autotune.errors import ConfigError

    err = ConfigError("first\n  second\r\nthird", field="a.b", value=1, rule="R_TYPE")
    assert str(err) == "[R_TYPE] a.b: first second third" and err.message == "first second third"


def test_check_turns_a_pydantic_error_into_one_line():
    from pydantic import ValidationError

    from autotune.commands.check import _as_config_error
    from autotune.profile.schema import OpSaving

    with pytest.raises(ValidationError) as ei:
        OpSaving(extra_ms=-1.0)
    err = _as_config_error(ei.value)
    assert "\n" not in str(err) and "errors.pydantic.dev" not in str(err)
    assert (err.rule, err.field, err.value) == ("R_UNSUPPORTED", "extra_ms", -1.0)


def _with_memory(tmp_path, text_value: str):
    text = (ROOT / "examples" / "llama3_1_70b" / "train.yaml").read_text()
    assert "  max_device_memory: 52.5GB\n" in text
    return _write(tmp_path, text.replace("  max_device_memory: 52.5GB\n", f"  max_device_memory: {text_value}\n"))


@pytest.mark.parametrize("cmd", ("check", "evaluate"))
@pytest.mark.parametrize("written, rule, shown", [
    ("-58GB", "R_MEMORY_RANGE", "got '-58GB'"), ("nanGB", "R_MEMORY_RANGE", "got 'nanGB'"),
    (".nan", "R_MEMORY_UNIT", "got nan"), ("-58", "R_MEMORY_UNIT", "got -58"), (".inf", "R_MEMORY_UNIT", "got inf"),
    ("[60GB]", "R_TYPE", "got a list")])
def test_a_bad_memory_size_has_a_documented_rule_and_no_invalid_fix(tmp_path, cmd, written, rule, shown):
    err = _one_error([cmd, _with_memory(tmp_path, written)])
    assert err.startswith(f"error: [{rule}] context.max_device_memory:") and shown in err, err
    fix = err.split("; fix: ")[-1]
    assert not any(bad in fix for bad in ("nan", "inf", "-58")), err
    if rule == "R_MEMORY_UNIT":          # a bare number: the fix is a size that is itself accepted
        assert "e.g. '60GB'" in err, err


@pytest.mark.parametrize("value", [60, 0.5, 1024, 52.5, 1e-300, 1025, -1, float("nan"), float("inf")])
def test_a_suggested_memory_size_is_itself_valid(value):
    import re

    from autotune.errors import ConfigError
    from autotune.units import MAX_MEMORY_MIB, parse_memory_mib

    with pytest.raises(ConfigError) as ei:
        parse_memory_mib(value, field="--hbm")
    assert ei.value.rule == "R_MEMORY_UNIT"
    suggested = re.findall(r"e\.g\. '([^']*)'", ei.value.message)
    assert len(suggested) == 1
    assert 0 < parse_memory_mib(suggested[0], field="--hbm") <= MAX_MEMORY_MIB
    if 0 < value <= 1024 and "e" not in repr(value):
        assert suggested[0] == f"{value}GB"


@pytest.mark.parametrize("make, args, rule", [
    (lambda d: d / "absent.yaml", [], "file"),
    (lambda d: (d / "bad.yaml").write_text("a: [1, 2\n") and d / "bad.yaml", [], "yaml"),
    (lambda d: d / "train.yaml", ["--set", "efficiency=2"], "assumption"),
])
def test_the_lower_case_rules_are_documented(tmp_path, make, args, rule):
    """The remaining lower-case codes of the reader and --set are in README's code table."""
    _write(tmp_path, (ROOT / "examples" / "llama3_1_70b" / "train.yaml").read_text())
    err = _one_error(["evaluate", make(tmp_path), *args])
    assert err.startswith(f"error: [{rule}] "), err
    row = next(ln for ln in (ROOT / "README.md").read_text().splitlines() if ln.startswith("| file / yaml"))
    assert f"(`{rule}`)" in row


@pytest.mark.parametrize("args, expect", [
    (["search", "{cfg}", "--timeout", "0"],
     "error: Invalid value for '--timeout': 0.0 is not in the range x>0 (see 'autotune search --help')"),
    (["search", "{cfg}", "--timeout", "-1"],
     "error: Invalid value for '--timeout': -1.0 is not in the range x>0 (see 'autotune search --help')"),
    (["search", "{cfg}", "--timeout", "abc"],
     "error: Invalid value for '--timeout': 'abc' is not a number (the range is x>0) "
     "(see 'autotune search --help')"),
    (["search", "{cfg}", "--gap", "-0.1"],
     "error: Invalid value for '--gap': -0.1 is not in the range x>=0 (see 'autotune search --help')"),
    (["evaluate", "{cfg}", "--no-such-option"],
     "error: No such option '--no-such-option' (see 'autotune evaluate --help')"),
    (["no-such-command"], "error: No such command 'no-such-command' (see 'autotune --help')"),
])
def test_usage_errors_are_one_line(args, expect) -> None:
    """click's usage errors (a value out of an option's range, no number, an unknown option or
    command) are one line naming the option, the value and the rule, exit 2: click printed its
    usage block and a hint on three more lines (a new user's check of ``--timeout 0``)."""
    cfg = str(ROOT / "examples" / "llama3_1_70b" / "train.yaml")
    res = CliRunner().invoke(main, [a.format(cfg=cfg) for a in args], prog_name="autotune")
    assert res.exit_code == 2, res.output
    assert [ln for ln in res.output.splitlines() if ln.strip()] == [expect]
