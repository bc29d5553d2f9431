"""Every public real-world bug case (shared/cases/bug_cases.json) as a test.

Version per shared/cases/README.md: MTP counted in the split → 1.5 (research DeepSeek-V3 path),
otherwise the default 1.8. Megatron cases also run from their ``framework_args`` alone where those
determine the layout (the ``--from megatron`` path).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from autotune.config.read import check_config
from autotune.config.megatron import parse_layout, translate
from autotune.errors import ConfigError

CASES = Path(__file__).resolve().parents[1] / "data" / "cases" / "bug_cases.json"
BUGS = json.loads(CASES.read_text()) if CASES.exists() else []


def version_for(case):
    return "1.5" if case["input"].get("mtp_counted_in_layer_split") else "1.8"


def _check_accept(res, detail, case_input):
    assert res.layers_vp.tolist() == detail["layers_per_stage"]
    assert res.stage_totals() == detail["stage_totals"]
    assert set(detail.get("warnings", [])) <= set(res.warning_codes)
    if "decoder_layers_per_stage" in detail:
        assert res.decoder_layers_vp().tolist() == detail["decoder_layers_per_stage"]
    if "mtp_stage" in detail:
        assert res.mtp_stage() == detail["mtp_stage"]
    if "recompute_normalized" in detail:
        assert res.recompute == detail["recompute_normalized"]
    if "effective_full_recompute" in detail:
        assert (res.recompute_vp.clip(0, res.layers_vp)).tolist() == detail["effective_full_recompute"]
    if "effective_select_only" in detail:
        assert res.select_only_vp.tolist() == detail["effective_select_only"]
    if "layer_start_index" in detail:
        assert res.layer_start_index() == detail["layer_start_index"]
    if "output_layer_stage" in detail:
        assert res.output_layer_stage() == detail["output_layer_stage"]
    if "recompute_groups" in detail:
        assert translate(case_input).recompute_groups[0] == detail["recompute_groups"]


def _check_reject(err, detail):
    assert err.rule == detail["rule"]
    if "field" in detail:
        assert err.field == detail["field"] or err.field.endswith("." + detail["field"])
    for key in ("got", "required", "required_min"):
        if key in detail:
            assert str(detail[key]) in err.message


@pytest.mark.parametrize("case", BUGS, ids=[c["id"] for c in BUGS])
def test_bug_case(case):
    detail = case["expect_detail"]
    if case["expect"] == "accept":
        res = check_config(case["input"], version_for(case))
        _check_accept(res, detail, case["input"])
    else:
        with pytest.raises(ConfigError) as info:
            check_config(case["input"], version_for(case))
        _check_reject(info.value, detail)


_DETERMINED = ("decoder_first_pipeline_num_layers", "decoder_last_pipeline_num_layers",
               "num_layers_in_first_pipeline_stage", "num_layers_in_last_pipeline_stage",
               "pipeline_model_parallel_layout", "num_layers_per_virtual_pipeline_stage",
               "virtual_pipeline_model_parallel_size", "recompute_granularity")
MEGATRON = [c for c in BUGS if c["input"].get("framework") == "megatron"
            and any(k in c["input"].get("framework_args", {}) for k in _DETERMINED)
            and "pipeline_model_parallel_size" in c["input"].get("framework_args", {})]


@pytest.mark.parametrize("case", MEGATRON, ids=[c["id"] for c in MEGATRON])
def test_megatron_args_alone(case):
    args = case["input"]["framework_args"]
    detail = case["expect_detail"]
    if case["expect"] == "accept":
        res = check_config(args, "1.8", source="megatron")
        _check_accept(res, detail, args)
    else:
        with pytest.raises(ConfigError) as info:
            check_config(args, "1.8", source="megatron")
        _check_reject(info.value, detail)


def test_layout_parser():
    stages = parse_layout("Et*2|(t*2|)*34,t*3|(t*2|)*3,tL")
    assert len(stages) == 40 and sum(s["t"] for s in stages) == 80
    assert stages[0] == {"E": 1, "t": 2, "m": 0, "L": 0} and stages[-1]["L"] == 1
    with pytest.raises(ConfigError) as info:
        parse_layout("Et|(tt")
    assert info.value.rule == "R_MEGATRON_LAYOUT"


def test_megatron_dashed_keys_and_uneven():
    res = check_config({"--num-layers": 61, "--pipeline-model-parallel-size": 4,
                        "--decoder-last-pipeline-num-layers": 13}, source="megatron")
    assert res.layers_vp.tolist() == [[16, 16, 16, 13]]
    with pytest.raises(ConfigError) as info:
        check_config({"num_layers": 60, "pipeline_model_parallel_size": 4,
                      "decoder_last_pipeline_num_layers": 13}, source="megatron")
    assert info.value.rule == "R_MEGATRON_UNEVEN"


def test_cases_present():
    assert len(BUGS) >= 20
