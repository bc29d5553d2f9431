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


def test_the_commands_table_names_every_option():
    """Each row of the README's "Commands" table names every option its command takes (and no
    option it does not), so the table cannot fall behind the CLI. A new user's check found four
    rows without options the commands had (evaluate's --device / --set, check's --format / --from,
    apply's --mindformers-version, ...)."""
    import click

    table = README[README.index("## Commands"):]
    rows = [line for line in table[:table.index("\n\n", table.index("| command"))].splitlines()
            if line.startswith("| `autotune ")]
    ctx = click.Context(main)
    seen = set()
    for row in rows:
        name = re.match(r"\| `autotune (\w+)", row).group(1)
        cmd = main.get_command(ctx, name)
        assert cmd is not None, name
        seen.add(name)
        opts = {o for p in cmd.params if isinstance(p, click.Option) and not p.hidden
                for o in p.opts + p.secondary_opts if o.startswith("--") and o != "--help"}
        named = set(re.findall(r"--[a-z][a-z-]*[a-z]", row))
        assert opts <= named, (name, sorted(opts - named))
        assert named - {"--output"} <= opts, (name, sorted(named - opts))  # --output: apply's old spelling
    assert seen == set(main.list_commands(ctx)) - {"help"}, sorted(set(main.list_commands(ctx)) - seen)
