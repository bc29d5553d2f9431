"""The corpus tests need the extracted MindFormers corpus (tests/corpus/corpus_lib.py); the whole-
corpus search round trip is slow and runs only with AUTOTUNE_SLOW=1."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))


def pytest_collection_modifyitems(config, items):
    if os.environ.get("AUTOTUNE_SLOW") == "1":
        return
    skip = pytest.mark.skip(reason="slow: set AUTOTUNE_SLOW=1 to run the search round trip on the whole corpus")
    here = Path(__file__).resolve().parent
    for item in items:
        if "slow" in item.keywords and here in Path(str(item.fspath)).resolve().parents:
            item.add_marker(skip)
