"""A layout with an empty middle stage (Megatron-LM's ``--pipeline-model-parallel-layout`` allows
one; MindFormers' offset rules do not): the cost model evaluates it and ``CostReport.to_dict``
gives the whole JSON shape with ``config`` None (it used to raise R_STAGE_EMPTY_MIDDLE)."""

import json

import numpy as np
import pytest

from autotune.config.layout import make_layout
from autotune.cost.report import evaluate_layout
from autotune.errors import ConfigError
from autotune.profile.schema import ModelProfile

PROFILE = ModelProfile(kinds={"L": {"fwd_ms": 1, "bwd_ms": 2, "act_mib": 10, "static_mib": 5,
                                    "full": {"act_mib": 1, "extra_ms": 1}}},
                       layer_kinds=[("L", 6)], head={"static_mib": 20},
                       tail={"fwd_ms": 1, "bwd_ms": 2, "static_mib": 30})


@pytest.fixture
def report():
    layers = np.array([[2, 0, 4]])
    z = np.zeros_like(layers)
    return evaluate_layout(PROFILE, make_layout(layers, z, z, z), micro_batch_num=4, hbm_mib=1000)


def test_to_dict_with_an_empty_middle_stage(report):
    d = json.loads(json.dumps(report.to_dict()))
    assert d["config"] is None
    assert [s["layers"] for s in d["stages"]] == [[2], [0], [4]]
    # 1F1B, m = 4, no p2p: one micro-batch through every stage, then 3 more on the slowest.
    # Stage f+b: 2·(1+2) = 6, 0, 4·(1+2) + tail (1+2) = 15 -> 6 + 0 + 15 + 3·15 = 66 ms
    assert d["step_time_ms"] == pytest.approx(66.0)
    # peaks: first stage 2·5 + head 20 static + 2 layers · 10 MiB · 3 in flight = 90; the empty
    # stage holds nothing; last stage 4·5 + tail 30 + 4 · 10 · 1 = 90
    assert [s["peak_mib"] for s in d["stages"]] == pytest.approx([90.0, 0.0, 90.0])
    assert d["fits"] is True and d["peak_mib"] == pytest.approx(90.0)
    assert set(d) >= {"bubble", "bubble_fraction", "warnings", "seq_split_num", "p2p_ms", "schedule"}


def test_config_dict_still_names_the_rule(report):
    with pytest.raises(ConfigError) as exc:
        report.config_dict()
    assert exc.value.rule == "R_STAGE_EMPTY_MIDDLE"
