"""CLI: --dry-run prints the space size; --format json carries lower_bound_ms and certified_gap."""

from __future__ import annotations

import pytest
import json

from click.testing import CliRunner

from autotune.commands.tune import search_cmd

EX = "examples/telechat2_115b/train.yaml"


def test_dry_run_prints_space_size() -> None:
    r = CliRunner().invoke(search_cmd, [EX, "--dry-run", "--format", "json"])
    assert r.exit_code == 0, r.output
    info = json.loads(r.output)
    assert info["pp_interleave_num runnable"] == [1, 2, 3, 4]
    assert info["layer_splits"] > 10**20 and info["enumerable"] is False


@pytest.mark.slow
def test_json_has_bound_and_gap() -> None:
    r = CliRunner().invoke(search_cmd, [EX, "--format", "json", "--timeout", "3", "--trials", "5"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.output)
    for k in ("best", "baselines", "trials", "seconds", "lower_bound_ms", "certified_gap"):
        assert k in d
    assert 0 < d["lower_bound_ms"] <= d["best"]["step_time_ms"]
    assert abs(d["certified_gap"] - (d["best"]["step_time_ms"] - d["lower_bound_ms"]) / d["lower_bound_ms"]) < 1e-9
