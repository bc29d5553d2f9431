"""The README's promises: it starts with the two commands, and every command it names exists."""

from __future__ import annotations

import re

from click.testing import CliRunner

from autotune.cli import main
from tests.conftest import ROOT

README = (ROOT / "README.md").read_text()


def test_readme_starts_with_the_two_commands():
    blocks = re.findall(r"```bash\n(.*?)```", README, flags=re.S)
    first, second = blocks[0].strip(), blocks[1].strip()
    assert README.index("```bash") < README.index("## ")
    assert first.startswith("python3 -m venv .venv && .venv/bin/pip install -e '.[dev]'")
    assert first.endswith("autotune search examples/telechat2_115b/train.yaml --out best.yaml")
    assert second == ".venv/bin/python -m pytest -q"
    ci = (ROOT / ".ci" / "run").read_text()
    assert ".venv/bin/python -m pytest -q" in ci and "pip install --quiet -e '.[dev]'" in ci
    assert (ROOT / "examples" / "telechat2_115b" / "train.yaml").is_file()


def test_every_documented_command_has_help():
    names = set(re.findall(r"`autotune (\w+)", README))
    assert {"search", "evaluate", "profile", "check", "apply"} <= names
    runner = CliRunner()
    for name in names:
        r = runner.invoke(main, [name, "--help"])
        assert r.exit_code == 0, (name, r.output)
