"""Shared fixtures: paths to the project root, the shipped examples and the reference cases.

`shared` is `tests/data`, whose `cases/` folder holds verbatim copies of the steering repo's
`shared/cases/` (a user's clone has no `../shared`)."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT / "tests" / "data"
EXAMPLES = ROOT / "examples"


@pytest.fixture
def root() -> Path:
    return ROOT


@pytest.fixture
def shared() -> Path:
    return SHARED
