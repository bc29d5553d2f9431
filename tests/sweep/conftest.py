"""Fixtures for the sweep tests: a real PostgreSQL database per test (127.0.0.1:5432, trust auth,
created and dropped here) and journal files."""

from __future__ import annotations

import uuid

import pytest

from tests.sweep.sweep_helpers import PG_HOST, PG_PORT, pg_admin


@pytest.fixture
def pg_url():
    """URL of a fresh database on the machine's PostgreSQL; dropped after the test."""
    conn, user = pg_admin()
    name = f"autotune_sweep_{uuid.uuid4().hex[:10]}"
    conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield f"postgresql+psycopg://{user}@{PG_HOST}:{PG_PORT}/{name}"
    finally:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.close()


@pytest.fixture(params=["journal", "postgres"])
def store(request, tmp_path):
    """A storage target of each kind: a journal file path or a PostgreSQL URL."""
    if request.param == "journal":
        return str(tmp_path / "store" / "sweep.journal")
    return request.getfixturevalue("pg_url")


