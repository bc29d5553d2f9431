"""A user's clone has no ``../shared``: the README's test command must still collect and pass.

The test clones the committed HEAD into a temporary folder (nothing beside it, so no
``../shared``), collects the whole suite there and runs the tests that read reference data
(``tests/data/cases``, copies of the steering repo's ``shared/cases``).
"""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest

from tests.conftest import ROOT

DATA_TESTS = ["tests/config/test_layer_setting_vectors.py", "tests/config/test_bug_cases.py",
              "tests/config/test_layer_setting_props.py", "tests/cost/test_validation_cases.py",
              "tests/search/test_exact_bounds.py", "tests/test_cli_check.py"]


@pytest.fixture(scope="module")
def clone(tmp_path_factory):
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    dest = tmp_path_factory.mktemp("fresh") / "autotune"
    subprocess.run(["git", "clone", "--quiet", str(ROOT), str(dest)], check=True)
    assert not (dest.parent / "shared").exists()
    return dest


def _pytest(clone, *args):
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args],
                          cwd=clone, capture_output=True, text=True, timeout=600)


@pytest.mark.slow
def test_suite_collects_without_shared(clone):
    r = _pytest(clone, "--collect-only")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "error" not in r.stdout.lower().splitlines()[-1], r.stdout[-500:]


@pytest.mark.slow
def test_reference_data_tests_pass_without_shared(clone):
    r = _pytest(clone, "-x", *DATA_TESTS)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert " passed" in r.stdout.splitlines()[-1]
