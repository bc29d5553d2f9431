"""The analytic profile over the whole accepted range of model dimensions: whatever the config
reader accepts (every count up to int32, MoE, MLA, MTP, micro-batch size, dropout, capacity factor)
gives a profile of finite, non-negative numbers, under any ``--set`` assumptions in their ranges;
whatever it refuses is a one-line ConfigError with R_TYPE / R_RANGE. Fuzzing found
``ffn_dim_multiplier: 1.0e+300`` (OverflowError) and ``-1.3`` (a negative FFN width: pydantic's
``extra_ms >= 0``) reaching the profile.
"""

from __future__ import annotations

import copy
import math
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from autotune.config.limits import MAX_INT
from autotune.config.training import config_from_dict
from autotune.errors import ConfigError
from autotune.profile.analytic import ASSUMPTION_RANGES, analytic_profile
from tests.conftest import ROOT

BASE = yaml.safe_load((ROOT / "examples" / "llama3_1_70b" / "train.yaml").read_text())
MP = BASE["parallel_config"]["model_parallel"]


def _numbers(obj: Any, path: str = ""):
    """Every (path, float) in a profile's dump (bools excluded)."""
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from _numbers(v, f"{path}.{k}")
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            yield from _numbers(v, f"{path}[{i}]")
    elif isinstance(obj, (int, float)) and not isinstance(obj, bool):
        yield path, float(obj)


def _assert_finite_non_negative(profile) -> None:
    dump = profile.model_dump(exclude={"assumptions", "sources"})
    seen = 0
    for path, val in _numbers(dump):
        seen += 1
        assert math.isfinite(val), (path, val)
        if not path.endswith("static_delta_mib"):          # negative by design: the weights it frees
            assert val >= 0, (path, val)
    assert seen > 20


big = st.one_of(st.integers(1, 64), st.integers(1, MAX_INT), st.just(MAX_INT))


@st.composite
def dims(draw):
    heads = MP * draw(st.integers(1, MAX_INT // MP))
    head_dim = draw(st.integers(1, MAX_INT // heads))
    mc: dict[str, Any] = {"num_heads": heads, "hidden_size": heads * head_dim,
                          "n_kv_heads": MP * draw(st.integers(1, heads // MP)),
                          "seq_length": draw(big), "vocab_size": draw(big)}
    if draw(st.booleans()):
        mc["intermediate_size"] = draw(big)
    else:
        mc["ffn_dim_multiplier"] = draw(st.floats(1e-6, 64.0))
        mc["multiple_of"] = draw(big)
    if draw(st.booleans()):
        mc.update(num_experts=draw(st.integers(2, MAX_INT)), num_experts_per_tok=draw(big),
                  moe_intermediate_size=draw(big), shared_expert_num=draw(st.integers(0, MAX_INT)),
                  first_k_dense_replace=draw(st.integers(0, 3)),
                  moe_expert_capacity_factor=draw(st.floats(0.0, float(MAX_INT))))
    if draw(st.booleans()):
        mc.update(q_lora_rank=draw(big), kv_lora_rank=draw(big), qk_nope_head_dim=draw(big),
                  qk_rope_head_dim=draw(big), v_head_dim=draw(big))
    mc["mtp_depth"] = draw(st.integers(0, 2))
    mc["use_flash_attention"] = draw(st.booleans())
    mc["attention_dropout"] = draw(st.floats(0.0, 1.0))
    mc["hidden_dropout"] = draw(st.floats(0.0, 1.0))
    return mc, draw(big)


@st.composite
def assumptions(draw):
    """Some ``--set`` overrides, each anywhere in its accepted range."""
    out = {}
    for key, (lo, hi, _ok, whole) in ASSUMPTION_RANGES.items():
        if draw(st.booleans()):
            val = draw(st.integers(int(lo), int(hi)) if whole else st.floats(max(lo, 1e-6), hi))
            out[key] = float(val)
    return out


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(dims(), assumptions())
def test_accepted_dims_give_a_finite_non_negative_profile(drawn, overrides):
    mc, batch = drawn
    data = copy.deepcopy(BASE)
    data["model"]["model_config"].pop("ffn_dim_multiplier", None)
    data["model"]["model_config"].update(mc)
    data["runner_config"]["batch_size"] = batch
    try:
        cfg = config_from_dict(data)
    except ConfigError as exc:        # refused: by a range or type rule, on one line
        assert exc.rule in ("R_RANGE", "R_TYPE", "R_HIDDEN_HEADS", "R_HEADS_MP"), str(exc)
        assert "\n" not in str(exc)
        return
    _assert_finite_non_negative(analytic_profile(cfg, "ascend-910b", overrides=overrides))


EXTREME_ASSUMPTIONS = {k: (lo if k == "efficiency" else hi) for k, (lo, hi, _ok, _whole) in ASSUMPTION_RANGES.items()}


@pytest.mark.parametrize("overrides", [None, EXTREME_ASSUMPTIONS], ids=["defaults", "extreme_assumptions"])
def test_every_dim_at_int32_max_gives_a_finite_profile(overrides):
    """The largest accepted values together (no hypothesis luck needed), with the default
    assumptions and with every ``--set`` assumption at its slowest / largest accepted value."""
    data = copy.deepcopy(BASE)
    mc = data["model"]["model_config"]
    mc.pop("ffn_dim_multiplier", None)
    heads = MP
    mc.update(num_heads=heads, n_kv_heads=heads, hidden_size=heads * (MAX_INT // heads),
              intermediate_size=MAX_INT, seq_length=MAX_INT, vocab_size=MAX_INT, num_experts=MAX_INT,
              num_experts_per_tok=MAX_INT, moe_intermediate_size=MAX_INT, shared_expert_num=MAX_INT,
              q_lora_rank=MAX_INT, kv_lora_rank=MAX_INT, qk_nope_head_dim=MAX_INT, qk_rope_head_dim=MAX_INT,
              v_head_dim=MAX_INT, mtp_depth=2, use_flash_attention=False, attention_dropout=1.0,
              moe_expert_capacity_factor=float(MAX_INT))
    data["runner_config"]["batch_size"] = MAX_INT
    _assert_finite_non_negative(analytic_profile(config_from_dict(data), "ascend-910b", overrides=overrides))


@pytest.mark.parametrize("key, value", [("hidden_size", MAX_INT + 1), ("seq_length", 2**40),
                                        ("ffn_dim_multiplier", 1e300), ("ffn_dim_multiplier", -1.3),
                                        ("capacity_factor", float("inf")), ("hidden_dropout", -0.1)])
def test_out_of_range_dims_are_refused_by_the_reader(key, value):
    data = copy.deepcopy(BASE)
    data["model"]["model_config"][key] = value
    with pytest.raises(ConfigError) as ei:
        config_from_dict(data)
    assert ei.value.rule == "R_RANGE" and ei.value.field == f"model.model_config.{key}"
    assert ei.value.value == value


def test_runner_batch_size_over_int32_is_refused():
    data = copy.deepcopy(BASE)
    data["runner_config"]["batch_size"] = 2**31
    with pytest.raises(ConfigError) as ei:
        config_from_dict(data)
    assert (ei.value.rule, ei.value.field, ei.value.value) == ("R_RANGE", "runner_config.batch_size", 2**31)
