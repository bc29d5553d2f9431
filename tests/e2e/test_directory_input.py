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


def test_check_json_carries_the_error_object(tmp_path) -> None:
    r = CliRunner().invoke(main, ["check", str(tmp_path), "--format", "json"])
    assert r.exit_code == 2
    assert json.loads(r.stdout) == {"error": {"rule": "file", "field": str(tmp_path),
                                              "message": "is a directory, not a file"}}
