"""A plain ``pip install`` (no extras): commands that need an optional module exit 2 with one line
naming the extra to install, before any work, instead of a ModuleNotFoundError traceback (issue 19
item 8).

Each test runs the CLI (or the API) in a subprocess where the optional modules are blocked
(``sys.modules[name] = None``: ``import name`` fails exactly as when it is not installed).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.emit.conftest import TOY8_PROFILE, TOY_CONFIG

TOY = Path(__file__).parent / "data" / "toy.yaml"


def run_without(blocked: list[str], *args: str, code: str | None = None) -> subprocess.CompletedProcess:
    pre = "import sys\nfor m in %r: sys.modules[m] = None\n" % (blocked,)
    body = code if code is not None else "from autotune.cli import main\nmain()"
    return subprocess.run([sys.executable, "-c", pre + body, *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)


def one_line(r: subprocess.CompletedProcess) -> str:
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert "Traceback" not in r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    return lines[0]


@pytest.fixture
def toy(tmp_path):
    cfg = tmp_path / "train.yaml"
    cfg.write_text(TOY_CONFIG)
    prof = tmp_path / "profile.yaml"
    prof.write_text(TOY8_PROFILE)
    return cfg, prof


@pytest.mark.parametrize("blocked, names", [
    (["matplotlib"], "matplotlib, which is not installed"),
    (["jinja2"], "jinja2, which is not installed"),
    (["matplotlib", "jinja2"], "matplotlib, jinja2, which are not installed"),
])
def test_report_names_the_extra(toy, tmp_path, blocked, names):
    cfg, prof = toy
    r = run_without(blocked, "report", str(cfg), "--profile", str(prof), "--out", str(tmp_path / "rep"))
    assert one_line(r) == f"error: autotune report needs {names}: pip install 'autotune[report]'"
    assert not (tmp_path / "rep").exists()


def test_search_report_names_the_extra_before_searching(tmp_path):
    r = run_without(["plotly"], "search", str(TOY), "--trials", "3", "--report", str(tmp_path / "rep"))
    assert one_line(r) == "error: search --report needs plotly, which is not installed: pip install 'autotune[report]'"
    assert r.stdout == ""                              # nothing searched, nothing printed


@pytest.mark.slow
def test_search_without_report_needs_no_extra(tmp_path):
    r = run_without(["matplotlib", "jinja2", "plotly", "pandas", "sqlalchemy", "psycopg"],
                    "search", str(TOY), "--trials", "3", "--out", str(tmp_path / "best.yaml"))
    assert r.returncode == 0, r.stderr
    assert "MindFormers keys to paste" in r.stdout and (tmp_path / "best.yaml").is_file()


URL = "postgresql+psycopg://tuner:s3cret@127.0.0.1:5432/test"


@pytest.mark.parametrize("blocked, url, needle", [
    (["sqlalchemy"], URL, "needs sqlalchemy, which is not installed"),
    (["psycopg"], URL, "needs psycopg, which is not installed"),
    (["psycopg", "psycopg2"], "postgresql://tuner:s3cret@127.0.0.1:5432/test",
     "needs a PostgreSQL driver (psycopg or psycopg2), none is installed"),
])
def test_postgres_storage_names_the_extra(blocked, url, needle):
    r = run_without(blocked, "search", str(TOY), "--trials", "3", "--storage", url)
    line = one_line(r)
    assert needle in line and line.endswith("pip install 'autotune[postgres]'")
    assert "s3cret" not in r.stderr + r.stdout and r.stdout == ""


def test_sweep_storage_names_the_extra(tmp_path):
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text(f"scenarios:\n  - name: toy\n    config: {TOY}\n")
    r = run_without(["sqlalchemy"], "sweep", str(sweep), "--storage", URL, "--out", str(tmp_path / "o"))
    assert "needs sqlalchemy" in one_line(r) and "autotune[postgres]" in r.stderr
    assert "s3cret" not in r.stderr


def test_api_names_the_extra(toy):
    cfg, prof = toy
    code = f"""
import autotune
from autotune.extras import MissingExtraError
res = autotune.search({str(cfg)!r}, {str(prof)!r}, trials=3)
try:
    res.trials_dataframe()
except ImportError as exc:                     # catchable as an ImportError
    assert isinstance(exc, MissingExtraError)
    print(exc)
try:
    res.plot_timeline()
except MissingExtraError as exc:
    print(exc)
html = res.best._repr_html_()                  # the notebook view still works, without the picture
assert "<table>" in html and "the timeline needs matplotlib" in html
print("ok")
"""
    r = run_without(["pandas", "matplotlib"], code=code)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == [
        "trials_dataframe() needs pandas, which is not installed: pip install 'autotune[report]'",
        "plot_timeline() needs matplotlib, which is not installed: pip install 'autotune[report]'",
        "ok"]


def test_extras_match_pyproject():
    """The modules the messages promise are the ones the extras install."""
    import tomllib

    from autotune.extras import EXTRAS

    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    for extra, modules in EXTRAS.items():
        names = {req.split(">")[0].split("[")[0].split("=")[0].strip().lower() for req in extras[extra]}
        assert set(modules) <= names, (extra, names)
