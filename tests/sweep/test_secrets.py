"""A password in a storage URL never shows: not in any command's output or log, summary, report,
result.json or best.yaml, nor in the study database; and masking hides only the URL's password
component (a password ``p`` must not turn "import" into "im***ort", ``5432`` must not hide the port)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from autotune.tuner.storage import mask_url, redact
from tests.sweep.sweep_helpers import DATA, cli, write_sweep

SECRET = "Zq7-s3cret_XW"


@pytest.mark.parametrize("url, shown", [
    ("postgresql+psycopg://alice:p@127.0.0.1:5432/important", "postgresql+psycopg://alice:***@127.0.0.1:5432/important"),
    ("postgresql+psycopg://u:5432@db.example:5432/autotune", "postgresql+psycopg://u:***@db.example:5432/autotune"),
    ("postgresql://tuner:p%40ss@h/db", "postgresql://tuner:***@h/db"),
    ("postgresql://tuner:p@ss@h/db", "postgresql://tuner:***@h/db"),           # raw '@': masked whole
    ("postgresql://tuner:a/b@h:6543/db?sslmode=require", "postgresql://tuner:***@h:6543/db?sslmode=require"),
    ("postgresql://h/db?user=u&password=s3&sslmode=require", "postgresql://h/db?user=u&password=***&sslmode=require"),
    ("postgresql://tuner@h/db", "postgresql://tuner@h/db"),
    ("mysql://u:@h/db", "mysql://u:***@h/db"),
    ("/srv/nights/sweep.journal", "/srv/nights/sweep.journal"),
])
def test_mask_url_hides_only_the_password(url, shown):
    assert mask_url(url) == shown


def test_mask_url_agrees_with_sqlalchemy_on_well_formed_urls():
    from sqlalchemy.engine import make_url

    for url in ("postgresql+psycopg://alice:p@127.0.0.1:5432/important", "postgresql://u:5432@h:5432/db",
                "postgresql://tuner:p%40ss@h/db", "mysql+pymysql://u:x@h/db?charset=utf8"):
        assert mask_url(url) == make_url(url).render_as_string(hide_password=True)


def test_redact_replaces_the_url_not_the_letters():
    url = "postgresql+psycopg://alice:p@127.0.0.1:5432/important"
    text = f"cannot import the study: {url} not specified (password=p), port 5432"
    assert redact(text, url) == ("cannot import the study: postgresql+psycopg://alice:***@127.0.0.1:5432/important "
                                 "not specified (password=***), port 5432")
    url2 = "postgresql://u:5432@h:5432/db"
    assert redact(f"{url2} refused on port 5432", url2) == "postgresql://u:***@h:5432/db refused on port 5432"
    # URL-decoded and driver-normalized spellings are masked too
    url3 = "postgresql://u:p%40ss@h/db"
    assert "p@ss" not in redact("postgresql://u:p@ss@h/db", url3)


def _with_password(url: str, password: str) -> str:
    scheme, rest = url.split("://", 1)
    user, host = rest.split("@", 1)
    return f"{scheme}://{user}:{password}@{host}"


def _db_text(url: str) -> str:
    """Every row of every table of the study database, as text."""
    import sqlalchemy as sa

    eng = sa.create_engine(url)
    out = []
    with eng.connect() as conn:
        for table in sa.inspect(eng).get_table_names():
            out += [repr(tuple(r)) for r in conn.execute(sa.text(f'SELECT * FROM "{table}"'))]
    eng.dispose()
    return "\n".join(out)


def _files_text(root: Path) -> str:
    return "\n".join(p.read_bytes().decode("utf-8", "replace") for p in root.rglob("*") if p.is_file())


@pytest.mark.slow  # seven CLI runs
def test_no_output_of_any_command_contains_the_secret(pg_url, tmp_path):
    url = _with_password(pg_url, SECRET)          # trust auth: the server never asks for it
    sweep = write_sweep(tmp_path / "sweep.yaml", trials=6, mbs=(4,), memories=("1GB", "0.2GB"))
    runs = [
        cli("sweep", str(sweep), "--storage", url, "--out", str(tmp_path / "s1"), "--report"),
        cli("sweep", str(sweep), "--out", str(tmp_path / "s2"), "--workers", "2", env={"AUTOTUNE_STORAGE": url}),
        cli("search", str(DATA / "tiny.yaml"), "--profile", str(DATA / "tiny_profile.yaml"), "--trials", "6",
            "--storage", url, "--study-name", "plain", "--out", str(tmp_path / "best.yaml"),
            "--report", str(tmp_path / "rep")),
        cli("search", str(DATA / "tiny.yaml"), "--profile", str(DATA / "tiny_profile.yaml"), "--trials", "8",
            "--storage", url, "--study-name", "plain", "--format", "json"),
        cli("search", str(DATA / "tiny.yaml"), "--profile", str(DATA / "tiny_profile.yaml"), "--trials", "3",
            "--storage", _with_password("postgresql+psycopg://u@127.0.0.1:1/nodb", SECRET)),
        cli("sweep", str(sweep), "--out", str(tmp_path / "s3"),
            "--storage", _with_password("postgresql+psycopg://u@127.0.0.1:1/nodb", SECRET)),
        cli("--debug", "sweep", str(sweep), "--out", str(tmp_path / "s4"),
            "--storage", _with_password("postgresql+psycopg://u@127.0.0.1:1/nodb", SECRET)),
    ]
    assert [r.returncode for r in runs[:4]] == [1, 1, 0, 0], [r.stderr for r in runs]  # 0.2GB fits nothing
    assert all(r.returncode != 0 for r in runs[4:])
    for r in runs[4:6]:
        assert r.stderr.startswith("error: [storage] --storage:") and "u:***@127.0.0.1:1/nodb" in r.stderr
    seen = "\n".join(r.stdout + r.stderr for r in runs) + _files_text(tmp_path) + _db_text(pg_url)
    assert (tmp_path / "s1" / "tiny-mb4-hbm1GB" / "result.json").is_file()
    assert (tmp_path / "rep" / "report.html").is_file()
    assert SECRET not in seen
    assert "***@" in runs[0].stdout                 # the store is named, masked


@pytest.mark.slow  # two CLI sweeps
def test_short_password_masks_only_the_url(pg_url, tmp_path):
    """Password ``p`` (a letter of most words) and ``5432`` (the port): every ``***`` in the output
    is the URL's password; words and the port are intact."""
    sweep = write_sweep(tmp_path / "sweep.yaml", trials=4, mbs=(4,), memories=("1GB",))
    for pw in ("p", "5432"):
        url = _with_password(pg_url, pw)
        out = tmp_path / f"out-{pw}"
        r = cli("sweep", str(sweep), "--storage", url, "--out", str(out), "--fresh")
        assert r.returncode == 0, r.stderr
        shown = mask_url(url)
        assert shown.endswith("@127.0.0.1:5432/" + pg_url.rsplit("/", 1)[1]) and ":***@" in shown
        text = r.stdout + r.stderr
        assert text.count("***") == text.count(shown) >= 1
        assert f"wrote {out}/summary.md" in r.stdout and "scenario" in r.stderr
        assert "***" not in re.sub(re.escape(shown), "", text)
