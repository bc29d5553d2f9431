"""Every public LayerSetting vector (shared/cases/layer_setting_vectors.json) as a test.

``expect`` is what the listed MindFormers releases really do (``--emulate``); ``expect_error``
must be rejected in strict and emulate mode. ``impl`` names releases: r1.3–r1.6 → "1.5",
r1.7.0 → "1.7", r1.8.0/master → "1.8" (no release named: all three).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from autotune.config.cases import case_to_training_yaml
from autotune.config.read import check_config
from autotune.errors import ConfigError

CASES = Path(__file__).resolve().parents[1] / "data" / "cases" / "layer_setting_vectors.json"
VECTORS = json.loads(CASES.read_text()) if CASES.exists() else []


def versions_of(impl: list[str]) -> list[str]:
    out = set()
    for item in impl:
        if any(tag in item for tag in ("r1.3", "r1.4", "r1.5", "r1.6", "models/utils.py")):
            out.add("1.5")
        if "r1.7" in item:
            out.add("1.7")
        if "r1.8" in item or "master" in item:
            out.add("1.8")
    return sorted(out) or ["1.5", "1.7", "1.8"]


def _params(kind: str):
    for vec in VECTORS:
        if kind not in vec:
            continue
        for version in versions_of(vec["impl"]):
            yield pytest.param(vec, version, id=f"{vec['id']}@{version}")


@pytest.mark.parametrize("vec,version", list(_params("expect")))
def test_expect_emulate(vec, version):
    got = check_config(case_to_training_yaml(vec), version, emulate=True).to_json()
    for key, want in vec["expect"].items():
        assert key in got, key
        assert got[key] == want, key
    assert set(got) - {"warnings"} == set(vec["expect"])


@pytest.mark.parametrize("vec,version", list(_params("expect_error")))
@pytest.mark.parametrize("emulate", [False, True], ids=["strict", "emulate"])
def test_expect_error(vec, version, emulate):
    with pytest.raises(ConfigError) as info:
        check_config(case_to_training_yaml(vec), version, emulate=emulate)
    err = info.value
    assert err.rule and err.rule.startswith("R_")
    assert err.field
    assert err.message and "fix" in err.message


def test_vectors_present():
    assert len(VECTORS) >= 40
