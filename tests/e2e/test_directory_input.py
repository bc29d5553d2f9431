"""A directory given where a file is expected: the same one-line error as a missing file
(rule ``file``, exit 2) from every command, not click's usage message."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from autotune.cli import main

EX = "examples/telechat2_115b/train.yaml"


@pytest.mark.parametrize("args", [
    ["check", "{d}"], ["evaluate", "{d}"], ["search", "{d}"], ["report", "{d}", "--out", "{d}/r"],
    ["profile", "{d}"], ["apply", "{d}", EX], ["apply", EX, "{d}"], ["sweep", "{d}"],
])
def test_directory_is_a_one_line_file_error(tmp_path, args) -> None:
    r = CliRunner().invoke(main, [a.format(d=tmp_path) for a in args])
    assert r.exit_code == 2, r.output
    lines = [ln for ln in r.output.splitlines() if ln.strip()]
    assert lines == [f"error: [file] {tmp_path}: is a directory, not a file"], r.output
    assert "Usage:" not in r.output and "Traceback" not in r.output


@pytest.mark.parametrize("args", [
    ["search", EX, "--megatron-args", "{d}"], ["search", EX, "--space", "{d}"], ["evaluate", EX, "--profile", "{d}"],
    ["report", EX, "--compare", "{d}", "--out", "{out}"], ["profile", "--config", "{d}"],
    ["profile", EX, "--from-trace", "{d}"], ["profile", EX, "--from-sapp", "{d}"],
    ["sweep", "examples/nightly_sweep.yaml", "--baseline", "{d}", "--out", "{out}"],
])
def test_directory_given_to_a_file_option(tmp_path, args) -> None:
    d = tmp_path / "d"
    d.mkdir()
    r = CliRunner().invoke(main, [a.format(d=d, out=tmp_path / "out") for a in args])
    assert r.exit_code == 2, r.output
    # profile lists its assumptions on stderr first; the error is one line, the last
    [line] = [ln for ln in r.output.splitlines() if ln.startswith("error")]
    assert r.output.strip().splitlines()[-1] == line
    assert line.startswith("error: [file] ") and "is a directory, not a file" in line and str(d) in line, line
    assert "Usage:" not in r.output and "Traceback" not in r.output
    assert not (tmp_path / "out").exists()  # refused before any work or output


def test_check_json_carries_the_error_object(tmp_path) -> None:
    r = CliRunner().invoke(main, ["check", str(tmp_path), "--format", "json"])
    assert r.exit_code == 2
    assert json.loads(r.stdout) == {"error": {"rule": "file", "field": str(tmp_path),
                                              "message": "is a directory, not a file"}}
