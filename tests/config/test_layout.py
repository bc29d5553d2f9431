"""Canonical layout normalizer: the spec's doc examples and strict rejections."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from autotune.config.layout import layout_from_values
from autotune.emit.yaml_block import canonical_values
from autotune.errors import ConfigError


def test_mf_offset_48l_pp5_vpp2(shared):
    """MF-OFFSET-48L-PP5-VPP2 from validation_cases.json (MindFormers doc example)."""
    import json

    case = next(c for c in json.loads((shared / "cases" / "validation_cases.json").read_text())["cases"]
                if c["id"] == "MF-OFFSET-48L-PP5-VPP2")
    inp, exp = case["inputs"], case["expected"]
    lay = layout_from_values(inp["num_layers"], inp["pipeline_stage"], inp["pp_interleave_num"],
                             offset=inp["offset"], recompute=inp["recompute_1d"])
    assert lay.layers_vp.tolist() == exp["layers_per_chunk_stage"]
    assert lay.recompute_vp.tolist() == exp["recompute_2d"]
    assert inp["num_layers"] % (inp["pipeline_stage"] * inp["pp_interleave_num"]) == exp["sum_offset_must_equal"]


def test_round_robin_split_r01():
    """Spec §3.2 example R01: [3,4,0,10,100] over [[4,5,5,5,5],[5,5,5,5,4]]."""
    def rec(spec):
        return layout_from_values(48, 5, 2, offset=[[0, 1, 1, 1, 1], [1, 1, 1, 1, 0]], recompute=spec).recompute_vp.tolist()

    assert rec([3, 4, 0, 10, 100]) == [[2, 2, 0, 5, 5], [1, 2, 0, 5, 4]]
    assert rec([True, False]) == [[4, 0, 0, 0, 0], [5, 0, 0, 0, 0]]
    assert rec([[9, 1, 0, 0, 0], True]) == [[4, 1, 0, 0, 0], [5, 5, 5, 5, 4]]


@pytest.mark.parametrize("N, pp, vpp, offset, rule", [
    (48, 5, 2, [[0, 0, 0, 0, 0], [0, 0, 0, 0, 0]], "R_OFFSET_SUM"),
    (13, 4, 1, 1, "R_OFFSET_OVERCOUNT"),
    (10, 2, 2, [1, 1], "R_OFFSET_OVERCOUNT"),
    (16, 4, 1, [1, 1, 1], "R_OFFSET_SHAPE_PP"),
    (16, 4, 2, [[0, 0, 0, 0]], "R_OFFSET_SHAPE_VPP"),
    (16, 4, 1, [-5, 1, 2, 2], "R_STAGE_NEGATIVE"),
    (16, 4, 1, [1, -4, 2, 1], "R_STAGE_EMPTY_MIDDLE"),
    (16, 4, 1, "abc", "R_OFFSET_TYPE"),
])
def test_offset_rejections(N, pp, vpp, offset, rule):
    with pytest.raises(ConfigError) as ei:
        layout_from_values(N, pp, vpp, offset=offset)
    assert ei.value.rule == rule
    assert ei.value.field == "model.model_config.offset"


def test_offset_sum_message_states_rule_and_fix():
    with pytest.raises(ConfigError) as ei:
        layout_from_values(50, 4, 2, offset=0)
    msg = str(ei.value)
    assert "offset must sum to num_layers % (pipeline_stage × pp_interleave_num) = 2, got 0" in msg
    assert "fix:" in msg and "\n" not in msg


@pytest.mark.parametrize("spec, rule", [([1, -1, 0, 0], "R_RECOMPUTE_NEGATIVE"), ([1, 1, 1, 1, 1], "R_RECOMPUTE_LEN"),
                                        (3, "R_RECOMPUTE_TYPE"), ([[1, 2, 3, "a"]], "R_RECOMPUTE_TYPE")])
def test_recompute_rejections(spec, rule):
    with pytest.raises(ConfigError) as ei:
        layout_from_values(16, 4, 1, recompute=spec)
    assert ei.value.rule == rule


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 4), st.integers(1, 3), st.data())
def test_emit_then_read_round_trips(pp, vpp, data):
    """Any valid layout emitted in canonical form reads back to the same layout."""
    lo = [[1] * pp for _ in range(vpp)]
    lo[0][0] = 0
    lo[-1][-1] = 0
    layers = np.array([[data.draw(st.integers(lo[v][p], 6)) for p in range(pp)] for v in range(vpp)])
    rec = np.array([[data.draw(st.integers(0, n)) for n in row] for row in layers])
    N = int(layers.sum())
    if pp * vpp > N or (pp * vpp > 2 and (layers.reshape(-1)[1:-1] < 1).any()):
        return
    from autotune.config.layout import make_layout

    lay = make_layout(layers, rec, rec, rec)
    vals = canonical_values(lay)
    back = layout_from_values(N, pp, vpp, offset=vals["offset"], recompute=vals["recompute"],
                              select_recompute=vals["select_recompute"],
                              select_comm_recompute=vals["select_comm_recompute"])
    assert np.array_equal(back.layers_vp, layers)
    assert np.array_equal(back.recompute_vp, rec)
    assert np.array_equal(back.select_vp, rec) and np.array_equal(back.comm_vp, rec)
