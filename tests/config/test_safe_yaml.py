"""The bounded YAML loader: each limit is a one-line ConfigError with its rule, in every reader and
on the CLI (exit 2, no traceback)."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from autotune.cli import main
from autotune.config.limits import MAX_YAML_BYTES, MAX_YAML_DEPTH, MAX_YAML_NODES
from autotune.config.safe_yaml import load_yaml_text, read_yaml_file
from autotune.errors import ConfigError
from tests.conftest import EXAMPLES

GOOD = (EXAMPLES / "telechat2_115b" / "train.yaml").read_text()


def bomb(levels: int = 8, width: int = 9) -> str:
    """``a0: &a0 [1, …]`` then ``a{k}: &a{k} [*a{k-1}, …]``: width**levels nodes from ~400 bytes."""
    lines = [f"a0: &a0 [{', '.join(['1'] * width)}]"]
    for k in range(1, levels):
        lines.append(f"a{k}: &a{k} [{', '.join([f'*a{k - 1}'] * width)}]")
    return "\n".join(lines) + "\n"


def rule_of(text):
    with pytest.raises(ConfigError) as ei:
        load_yaml_text(text, where="x.yaml")
    assert ei.value.field == "x.yaml" and "\n" not in str(ei.value)
    return ei.value.rule


def test_limits_each_have_a_rule():
    assert rule_of(bomb()) == "R_YAML_ALIAS"                      # 9**8 = 43 million nodes
    assert rule_of("a: &a [1, *a]") == "R_YAML_ALIAS"              # recursive structure
    assert rule_of("a: " + "[" * (MAX_YAML_DEPTH + 1) + "]" * (MAX_YAML_DEPTH + 1)) == "R_YAML_DEPTH"
    assert rule_of("a: " + "[" * 5000 + "]" * 5000) == "R_YAML_DEPTH"   # libyaml's own 1000 limit
    assert rule_of("".join("  " * i + f"k{i}:\n" for i in range(MAX_YAML_DEPTH + 2))) == "R_YAML_DEPTH"
    assert rule_of("a: [" + ", ".join(["1"] * (MAX_YAML_NODES + 1)) + "]") == "R_YAML_NODES"
    assert rule_of("a: " + "x" * MAX_YAML_BYTES) == "R_YAML_SIZE"
    assert rule_of("a: 1" + "0" * 5000) == "yaml"                   # int over Python's 4300 digits
    assert rule_of("a: !!python/object:os.system x") == "yaml"
    assert rule_of("a: *undefined") == "yaml"


def test_ordinary_documents_and_shared_aliases():
    assert load_yaml_text("a: &x [1, 2]\nb: *x\nc: {k: *x}") == {"a": [1, 2], "b": [1, 2], "c": {"k": [1, 2]}}
    assert load_yaml_text(bomb(levels=4, width=9))["a3"][0][0][0] == [1] * 9    # about 8,300 nodes: fine
    assert load_yaml_text(GOOD)["parallel_config"]["pipeline_stage"] == 8
    assert load_yaml_text("") is None


def test_file_messages(tmp_path):
    empty = tmp_path / "empty.yaml"
    empty.write_text("# only a comment\n")
    with pytest.raises(ConfigError) as ei:
        read_yaml_file(empty)
    assert "the file is empty" in str(ei.value) and "NoneType" not in str(ei.value)
    lst = tmp_path / "list.yaml"
    lst.write_text("- 1\n")
    with pytest.raises(ConfigError, match="top level must be a mapping .*got a list"):
        read_yaml_file(lst)
    big = tmp_path / "big.yaml"
    big.write_bytes(b"a: 1\n" + b"#" * MAX_YAML_BYTES)
    with pytest.raises(ConfigError) as ei:
        read_yaml_file(big)
    assert ei.value.rule == "R_YAML_SIZE"
    binary = tmp_path / "bin.yaml"
    binary.write_bytes(b"\xff\xfe\x00a")
    with pytest.raises(ConfigError) as ei:
        read_yaml_file(binary)
    assert ei.value.rule == "yaml"


@pytest.mark.parametrize("argv", [
    ["check", "{f}"], ["evaluate", "{f}"], ["check", "{f}", "--format", "json"],
    ["search", "{good}", "--space", "{f}", "--dry-run"], ["sweep", "{f}", "--out", "{tmp}/o"],
    ["evaluate", "{good}", "--profile", "{f}"], ["apply", "{f}", "{good}"], ["apply", "{best}", "{f}"],
])
@pytest.mark.parametrize("text, rule", [(bomb(), "R_YAML_ALIAS"), ("a: " + "[" * 40 + "]" * 40, "R_YAML_DEPTH")])
def test_every_reader_on_the_cli(tmp_path, argv, text, rule):
    f = tmp_path / "hostile.yaml"
    f.write_text(GOOD + text if argv[0] in ("check", "evaluate") else text)
    good = tmp_path / "good.yaml"
    good.write_text(GOOD)
    best = tmp_path / "best.yaml"
    best.write_text("model:\n  model_config:\n    pp_interleave_num: 3\n")
    args = [a.format(f=f, good=good, best=best, tmp=tmp_path) for a in argv]
    res = CliRunner().invoke(main, args)
    assert res.exit_code == 2, res.output
    assert rule in res.output
    assert res.exception is None or isinstance(res.exception, SystemExit)
