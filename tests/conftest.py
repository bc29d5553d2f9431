"""Shared fixtures: paths to the project root, the shipped examples and ../shared."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"
EXAMPLES = ROOT / "examples"


@pytest.fixture
def root() -> Path:
    return ROOT


@pytest.fixture
def shared() -> Path:
    if not SHARED.is_dir():
        pytest.skip("../shared is not next to the checkout")
    return SHARED
