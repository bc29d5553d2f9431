"""TrainingConfig reading: real example values and one-line errors naming the YAML path."""

from __future__ import annotations

import pytest
import yaml

from autotune.config.training import config_from_dict, load_config
from autotune.errors import ConfigError
from tests.conftest import EXAMPLES

MINIMAL = {
    "model": {"model_config": {"num_layers": 12}},
    "parallel_config": {"pipeline_stage": 4, "micro_batch_num": 8},
}


def test_telechat_example_values():
    cfg = load_config(EXAMPLES / "telechat2_115b" / "train.yaml")
    assert (cfg.num_layers, cfg.pipeline_stage, cfg.micro_batch_num) == (96, 8, 8)
    assert cfg.pp_interleave_num == 3 and cfg.pipeline_interleave
    assert cfg.hbm_mib == 54.5 * 1024  # "54.5GB" is GiB in MindSpore
    assert cfg.select_comm_recompute == [8, 8, 10, 11, 10, 7, 5, 4]
    assert cfg.dims.hidden_size == 8192 and cfg.dims.n_kv_heads == 8
    assert cfg.devices == 512


def test_llama_ffn_and_budget():
    cfg = load_config(EXAMPLES / "llama3_1_70b" / "train.yaml")
    assert cfg.dims.intermediate_size == 28672
    assert cfg.hbm_mib == 52.5 * 1024
    assert cfg.pp_interleave_num == 1


def test_interleave_off_forces_vpp_1():
    data = yaml.safe_load(yaml.safe_dump(MINIMAL))
    data["model"]["model_config"]["pp_interleave_num"] = 3
    data["parallel"] = {"pipeline_config": {"pipeline_interleave": False}}
    assert config_from_dict(data).pp_interleave_num == 1
    data["parallel"]["pipeline_config"]["pipeline_interleave"] = True
    assert config_from_dict(data).pp_interleave_num == 3


def test_hbm_override_wins():
    data = dict(MINIMAL, context={"max_device_memory": "58GB"})
    assert config_from_dict(data, hbm_mib=1000.0).hbm_mib == 1000.0
    assert config_from_dict(data).hbm_mib == 58 * 1024


@pytest.mark.parametrize("mutate, field, rule", [
    (lambda d: d["model"]["model_config"].pop("num_layers"), "model.model_config.num_layers", "R_MISSING"),
    (lambda d: d["parallel_config"].__setitem__("pipeline_stage", "8"), "parallel_config.pipeline_stage", "R_TYPE"),
    (lambda d: d["parallel_config"].__setitem__("micro_batch_num", 0), "parallel_config.micro_batch_num", "R_RANGE"),
    (lambda d: d.__setitem__("context", {"max_device_memory": "lots"}), "context.max_device_memory", "R_TYPE"),
    (lambda d: d.__setitem__("parallel", {"pipeline_config": {"pipeline_scheduler": "2f2b"}}),
     "parallel.pipeline_config.pipeline_scheduler", "R_SCHEDULER"),
    (lambda d: d.__setitem__("recompute_config", [1, 2]), "recompute_config", "R_TYPE"),
])
def test_errors_name_the_field(mutate, field, rule):
    data = yaml.safe_load(yaml.safe_dump(MINIMAL))
    mutate(data)
    with pytest.raises(ConfigError) as ei:
        config_from_dict(data)
    assert ei.value.field == field and ei.value.rule == rule
    assert field in str(ei.value) and "\n" not in str(ei.value)


@pytest.mark.parametrize("value, rule, shown", [
    (1.5, "R_TYPE", "got 1.5"), ("two", "R_TYPE", "got 'two'"), (True, "R_TYPE", "got True"),
    (False, "R_TYPE", "got False"), (2.0, "R_TYPE", "got 2.0"), (None, "R_TYPE", "got None"),
    ([2], "R_TYPE", "got [2]"), (0, "R_RANGE", "must be >= 1, got 0"), (-4, "R_RANGE", "must be >= 1, got -4"),
    (2**31, "R_RANGE", "must be <= 2147483647"),
])
def test_a_bad_batch_size_is_refused_not_read_as_1(value, rule, shown):
    """A non-integer ``runner_config.batch_size`` used to fall back to 1 without a word (and so did
    0 and negative values): MindFormers multiplies it into the batch MindSpore's ``Dataset.batch``
    takes, which refuses anything but an int >= 1."""
    data = dict(yaml.safe_load(yaml.safe_dump(MINIMAL)), runner_config={"batch_size": value})
    with pytest.raises(ConfigError) as ei:
        config_from_dict(data)
    assert (ei.value.rule, ei.value.field) == (rule, "runner_config.batch_size")
    assert shown in str(ei.value) and "\n" not in str(ei.value)


def test_batch_size_is_read_once_and_follows_a_reference():
    base = yaml.safe_load(yaml.safe_dump(MINIMAL))
    assert config_from_dict(base).batch_size == 1                      # absent: RunnerConfig's default
    assert config_from_dict(dict(base, runner_config={"epochs": 2})).batch_size == 1
    assert config_from_dict(dict(base, runner_config={"batch_size": 4})).batch_size == 4
    ref = dict(base, runner_config={"batch_size": "${parallel_config.micro_batch_num}"})
    assert config_from_dict(ref).batch_size == 8                       # was read as 1 by the profile


def test_the_profile_uses_the_config_batch_size():
    from autotune.profile.analytic import analytic_profile

    cfg = load_config(EXAMPLES / "telechat2_115b" / "train.yaml")
    data = dict(cfg.raw, runner_config={"batch_size": "${parallel_config.micro_batch_num}"})
    prof = analytic_profile(config_from_dict(data), "ascend-910b")
    assert prof.assumptions["micro_batch_size"] == 8


def test_missing_and_non_yaml_files(tmp_path):
    with pytest.raises(ConfigError, match="file not found"):
        load_config(tmp_path / "nope.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("a: [1, 2\n")
    with pytest.raises(ConfigError, match="not valid YAML at line"):
        load_config(bad)
    # an unclosed bracket is found on a later line; the message also names where it opened
    bad.write_text("a: 1\nb: [1, 2\nc: 3\n")
    with pytest.raises(ConfigError) as ei:
        load_config(bad)
    msg = str(ei.value)
    assert "at line 3" in msg and "a flow sequence that starts at line 2, column 4" in msg and "\n" not in msg
    scalar = tmp_path / "scalar.yaml"
    scalar.write_text("42\n")
    with pytest.raises(ConfigError, match="top level must be a mapping"):
        load_config(scalar)


@pytest.mark.parametrize("section, good, bad, strict", [
    ("model.model_config", "offset", "ofset", False),
    ("model.model_config", "pp_interleave_num", "pp_interleve_num", False),
    ("recompute_config", "select_recompute", "select_recompte", True),
    ("parallel_config", "pipeline_stage", "pipline_stage", True),
    ("parallel_config", "micro_batch_num", "micro_batch_nun", True),
    ("", "recompute_config", "recompute_cfg", False),
    # memory-relevant keys (issue 20): a typo here silently moved the predicted peak by gigabytes
    ("model.model_config", "use_flash_attention", "use_flash_atention", False),
    ("model.model_config", "param_init_type", "param_init_typ", False),
    ("model.model_config", "compute_dtype", "compute_dtyp", False),
])
def test_misspelled_keys_are_rejected_or_warned_not_ignored(section, good, bad, strict):
    """Issue 15 item 3: an unknown key is an error only where MindFormers' template rejects it
    (parallel_config / recompute_config / swap_config: KeyError); elsewhere MindFormers passes it on,
    so autotune warns W_KEY_UNKNOWN naming the key and the key it probably meant."""
    data = yaml.safe_load((EXAMPLES / "telechat2_115b" / "train.yaml").read_text())
    node = data
    for part in [p for p in section.split(".") if p]:
        node = node[part]
    node[bad] = node.pop(good, 0)
    where = f"{section}.{bad}" if section else bad
    if strict:
        with pytest.raises(ConfigError) as ei:
            config_from_dict(data)
        assert ei.value.rule == "R_UNKNOWN_KEY"
        assert ei.value.field == where
        assert f"did you mean {good!r}" in str(ei.value)
        assert "KeyError" in str(ei.value)
        return
    cfg = config_from_dict(data)
    [w] = [w for w in cfg.warnings if w.code == "W_KEY_UNKNOWN"]
    assert w.field == where
    assert f"did you mean {good!r}" in w.message


def test_real_mcore_spellings_are_not_near_misses():
    """moe_intermediate_size is a real mcore key, not a typo of intermediate_size (issue 15)."""
    data = yaml.safe_load((EXAMPLES / "telechat2_115b" / "train.yaml").read_text())
    data["model"]["model_config"]["moe_intermediate_size"] = 768
    data["model"]["model_config"]["num_hidden_layers"] = data["model"]["model_config"]["num_layers"]
    cfg = config_from_dict(data)
    assert not [w for w in cfg.warnings if w.code == "W_KEY_UNKNOWN"]


def test_megatron_style_parallel_keys_name_the_pynative_configs():
    """A parallel_config with Megatron-style keys is a config of MindFormers' experimental
    parallel_core (pynative) trainer (tests/st/test_distri_core, r1.3.1), read by its own loader and
    never by the template: the error says so instead of claiming a template KeyError."""
    data = yaml.safe_load((EXAMPLES / "telechat2_115b" / "train.yaml").read_text())
    data["parallel_config"]["zero_level"] = "z1"   # another unknown key first: the reason is still this one
    data["parallel_config"]["tensor_model_parallel_size"] = 2
    with pytest.raises(ConfigError) as ei:
        config_from_dict(data)
    assert (ei.value.rule, ei.value.field) == ("R_UNSUPPORTED", "parallel_config.tensor_model_parallel_size")
    assert "parallel_core (pynative)" in str(ei.value) and "KeyError" not in str(ei.value)


def test_iflytekspark_compute_type_is_its_compute_dtype():
    """iFlytekSpark (research, r1.0) names its compute dtype compute_type: read, not a typo."""
    data = yaml.safe_load((EXAMPLES / "telechat2_115b" / "train.yaml").read_text())
    mc = data["model"]["model_config"]
    mc.pop("compute_dtype", None)
    mc["compute_type"] = "float32"
    cfg = config_from_dict(data)
    assert not [w for w in cfg.warnings if w.code == "W_KEY_UNKNOWN"]
    assert cfg.dims.compute_dtype_bytes == 4
    mc["compute_type"] = "bfloat16"
    assert config_from_dict(data).dims.compute_dtype_bytes == 2


def test_unrelated_model_keys_are_fine():
    data = yaml.safe_load((EXAMPLES / "telechat2_115b" / "train.yaml").read_text())
    data["model"]["model_config"]["rope_theta"] = 10000.0
    data["model"]["model_config"]["use_flash_attention"] = True
    data["some_tool_section"] = {"x": 1}
    assert config_from_dict(data).num_layers == 96
