"""A config's own select / comm patterns round-trip through ``search`` and ``evaluate``.

examples/real_configs/03_qwen2_5_72b_32k.yaml names its own patterns: ``select_recompute``
``feed_forward\\.mul`` and ``feed_forward\\.activate\\.silu`` (plus two reshapes that match no op
of the profile), ``select_comm_recompute`` ``.*\\.norm`` (plus two reshapes). The answer keeps
them, and ``evaluate`` prices them per op: mul and activate.silu free 231 MiB each per layer (2.67
ms replay each). MindFormers' default legacy pattern ``feed_forward\\.w1\\.activation\\.silu`` is
no cell of this model, so the profile's aggregate ``select`` option (the default patterns) frees
only mul's 231 MiB. The search used to price select with that aggregate and wrote the user's
patterns: its tuned row (72131.7 ms, 56960 MiB) and its "user" baseline (73630.1 ms, 50849 MiB)
were not what ``evaluate`` printed for the same YAML (72135.0 ms, 56128 MiB; 74506.7 ms, 48539 MiB).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from autotune.cli import main
from autotune.cost.inputs import NONE, SELECT, ProfileArrays
from autotune.tuner.inputs import as_config, resolve_profile
from autotune.tuner.space import SearchSpace, expand_space

ROOT = Path(__file__).resolve().parents[2]
QWEN_32K = ROOT / "examples" / "real_configs" / "03_qwen2_5_72b_32k.yaml"


def _json(argv: list[str]) -> dict:
    res = CliRunner().invoke(main, argv, catch_exceptions=False)
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout)


def test_default_space_prices_the_configs_own_select_patterns() -> None:
    """The default space's sub-problem frees what the config's own patterns free per layer (mul +
    activate.silu: 2 × 231 MiB), not the aggregate option of MindFormers' defaults (mul only)."""
    cfg = as_config(QWEN_32K)
    pa = ProfileArrays.from_profile(resolve_profile(cfg))
    assert pa.act_kc[0, NONE] - pa.act_kc[0, SELECT] == pytest.approx(231.0)   # the defaults: mul
    (var,) = expand_space(cfg, SearchSpace())
    assert var.select_patterns is None and var.comm_patterns is None   # emitted: the config's own
    assert var.pa.act_kc[0, NONE] - var.pa.act_kc[0, SELECT] == pytest.approx(462.0)


def test_search_rows_are_what_evaluate_prints(tmp_path: Path) -> None:
    """Search's tuned row is evaluate of the YAML it writes, its "user" row evaluate of the original
    (step ms and every stage's peak MiB; ~1 s: the gap target stops it after 4 trials)."""
    out = tmp_path / "best.yaml"
    res = _json(["search", str(QWEN_32K), "--out", str(out), "--trials", "5", "--timeout", "60",
                 "--quiet", "--format", "json"])
    tuned = _json(["evaluate", str(out), "--format", "json"])
    user = _json(["evaluate", str(QWEN_32K), "--format", "json"])
    for row, ev in ((res["best"], tuned), (res["baselines"]["user"], user)):
        assert row["step_time_ms"] == pytest.approx(ev["step_time_ms"], rel=1e-9)
        assert row["peak_mib"] == ev["peak_mib"]
        assert [s["peak_mib"] for s in row["stages"]] == [s["peak_mib"] for s in ev["stages"]]
    # evaluate's own figures for the unchanged config (what the search's "user" row now says)
    assert user["step_time_ms"] == pytest.approx(74506.7, abs=0.05)
    assert user["peak_mib"] == pytest.approx(48539, abs=0.5)
