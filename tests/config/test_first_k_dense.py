"""``first_k_dense_replace`` read as MindFormers reads it, per model family (the dense layers before
the MoE ones):

- legacy research DeepSeek (``DeepseekV2ForCausalLM`` / ``DeepseekV3ForCausalLM``) reads
  ``moe_config.first_k_dense_replace``; absent, legacy ``MoEConfig``'s default ``True`` makes layer 0
  dense (``layer_id < True``; moe.py r1.3.0+, YAML template r1.5.0+): 1 dense layer, which autotune
  used to read as 0;
- no other legacy class reads the key (Mixtral / Llama, Qwen2-MoE, TeleChat2 MoE: every layer MoE);
- mcore reads ``model_config.first_k_dense_replace``; absent, the config class's default
  (DeepseekV3Config 3, Glm4MoeConfig 1, TeleChat3Config 3, else None = 0); it refuses a float
  (``[0] * 2.0``) and a value above num_layers (TransformerConfig, r1.6.0+), which autotune accepted.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from autotune.cli import main
from autotune.config.training import config_from_dict
from autotune.errors import ConfigError
from autotune.profile.analytic import analytic_profile

ROOT = Path(__file__).resolve().parents[2]
DSV3 = yaml.safe_load((ROOT / "examples" / "real_configs" / "01_deepseek3_671b.yaml").read_text())  # 61 layers
MIXTRAL = yaml.safe_load((ROOT / "examples" / "real_configs" / "11_mixtral_8x7b.yaml").read_text())  # 32 layers
MCORE = yaml.safe_load((Path(__file__).parent / "data" / "spellings" / "mcore_moe_mla_mtp.yaml").read_text())  # 6


def _dsv3(**moe):
    data = copy.deepcopy(DSV3)
    del data["moe_config"]["first_k_dense_replace"]
    data["moe_config"].update(moe)
    return data


def _mcore(**mc):
    data = copy.deepcopy(MCORE)
    del data["model"]["model_config"]["first_k_dense_replace"]
    data["model"]["model_config"].update(mc)
    return data


def _codes(cfg):
    return [w.code for w in cfg.warnings]


def _cli(tmp_path, data, *args):
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(data))
    res = CliRunner().invoke(main, [*args, str(path)])
    return res.exit_code, res.stdout, res.stderr


# --- legacy --------------------------------------------------------------------------------------

def test_legacy_deepseek_without_the_key_has_one_dense_layer_and_says_why():
    cfg = config_from_dict(_dsv3())
    assert cfg.dims.first_k_dense_replace == 1
    assert analytic_profile(cfg).layer_kinds == [("dense", 1), ("moe", 60)]
    w = [w for w in cfg.warnings if w.code == "W_FIRST_K_DENSE_DEFAULT"]
    assert [x.field for x in w] == ["moe_config.first_k_dense_replace"]
    assert "1 dense layer" in w[0].message and "MoEConfig defaults it to True" in w[0].message
    assert any(n.startswith("first_k_dense_replace absent: 1 dense layer (legacy MoEConfig") for n in cfg.dims.notes)
    assert "notes" in analytic_profile(cfg).assumptions


def test_legacy_deepseek_written_key_and_null_are_read_as_written():
    assert config_from_dict(DSV3).dims.first_k_dense_replace == 3
    assert "W_FIRST_K_DENSE_DEFAULT" not in _codes(config_from_dict(DSV3))
    cfg = config_from_dict(_dsv3(first_k_dense_replace=None))      # None and ... -> no dense layer
    assert cfg.dims.first_k_dense_replace == 0 and "W_FIRST_K_DENSE_DEFAULT" not in _codes(cfg)
    assert analytic_profile(cfg).layer_kinds == [("moe", 61)]
    assert config_from_dict(_dsv3(first_k_dense_replace=2.0)).dims.first_k_dense_replace == 2  # layer_id < 2.0


def test_legacy_deepseek_ignores_a_model_config_key():
    """DeepSeekV2DecodeLayer reads moe_config.first_k_dense_replace only; a model_config one was
    taken for it (3 dense layers where MindFormers builds 1)."""
    data = _dsv3()
    data["model"]["model_config"]["first_k_dense_replace"] = 3
    cfg = config_from_dict(data)
    assert cfg.dims.first_k_dense_replace == 1
    ign = [w for w in cfg.warnings if w.code == "W_KEY_IGNORED"]
    assert [w.field for w in ign] == ["model.model_config.first_k_dense_replace"]
    assert "reads moe_config.first_k_dense_replace only" in ign[0].message
    assert "W_FIRST_K_DENSE_DEFAULT" in _codes(cfg)


def test_other_legacy_moe_classes_have_no_dense_layer():
    """Mixtral (LlamaForCausalLM) has no such option: absent is 0 without a warning; written, it is
    ignored with W_KEY_IGNORED (it used to make the first layers dense)."""
    cfg = config_from_dict(MIXTRAL)
    assert cfg.dims.first_k_dense_replace == 0 and "W_FIRST_K_DENSE_DEFAULT" not in _codes(cfg)
    data = copy.deepcopy(MIXTRAL)
    data["moe_config"]["first_k_dense_replace"] = 2
    cfg = config_from_dict(data)
    assert cfg.dims.first_k_dense_replace == 0
    assert analytic_profile(cfg).layer_kinds == [("moe", 32)]
    assert [(w.code, w.field) for w in cfg.warnings] == [("W_KEY_IGNORED", "moe_config.first_k_dense_replace")]
    assert "LlamaForCausalLM has no dense-layer option" in cfg.warnings[0].message


def test_check_cli_prints_the_default_warning(tmp_path):
    rc, out, err = _cli(tmp_path, _dsv3(), "check")
    assert rc == 0, err
    assert ("warning W_FIRST_K_DENSE_DEFAULT: moe_config.first_k_dense_replace: not set: MindFormers builds "
            "1 dense layer before the MoE layers") in out


# --- mcore ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("model_type, dense", [("deepseek_v3", 3), ("glm4_moe", 1), ("telechat3", 3),
                                               ("qwen3_moe", 0), (None, 0)])
def test_mcore_default_is_the_config_class_default(model_type, dense):
    cfg = config_from_dict(_mcore(**({"model_type": model_type} if model_type else {})))
    assert cfg.dims.first_k_dense_replace == dense
    assert analytic_profile(cfg).layer_kinds == ([("dense", dense)] if dense else []) + [("moe", 6 - dense)]
    w = [w for w in cfg.warnings if w.code == "W_FIRST_K_DENSE_DEFAULT"]
    assert [x.field for x in w] == (["model.model_config.first_k_dense_replace"] if dense else [])
    if dense:
        assert f"model_type '{model_type}'" in w[0].message


@pytest.mark.parametrize("value", [7, 100, 2.0, 1.5, float("nan")])
def test_mcore_refuses_what_transformer_config_refuses(value):
    with pytest.raises(ConfigError) as ei:
        config_from_dict(_mcore(first_k_dense_replace=value))
    e = ei.value
    assert (e.rule, e.field) == ("R_FIRST_K_DENSE_MCORE", "model.model_config.first_k_dense_replace")
    want = "must not exceed num_layers (6)" if isinstance(value, int) else "must be an integer on an mcore model"
    assert e.message.startswith(f"{want} on an mcore model" if isinstance(value, int) else want), e.message


def test_mcore_default_above_num_layers_is_refused_too():
    with pytest.raises(ConfigError) as ei:
        config_from_dict(_mcore(model_type="deepseek_v3", num_hidden_layers=2, offset=0,
                                mtp_num_layers=0))
    assert ei.value.rule == "R_FIRST_K_DENSE_MCORE"
    assert "not set, so DeepseekV3Config's default 3 (model_type 'deepseek_v3')" in ei.value.message


@pytest.mark.parametrize("value, dense", [(6, 6), (0, 0), (0.0, 0), (True, 1), (None, 0)])
def test_mcore_accepts_what_transformer_config_accepts(value, dense):
    cfg = config_from_dict(_mcore(first_k_dense_replace=value))
    assert cfg.dims.first_k_dense_replace == dense


def test_mcore_ignores_moe_config_key():
    data = _mcore()
    data["moe_config"] = {"first_k_dense_replace": 2}
    cfg = config_from_dict(data)
    assert cfg.dims.first_k_dense_replace == 0
    assert [(w.code, w.field) for w in cfg.warnings] == [("W_KEY_IGNORED", "moe_config.first_k_dense_replace")]


@pytest.mark.parametrize("cmd", ["check", "evaluate"])
def test_mcore_refusal_is_one_line_exit_2(tmp_path, cmd):
    rc, out, err = _cli(tmp_path, _mcore(first_k_dense_replace=100), cmd)
    assert rc == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("error: [R_FIRST_K_DENSE_MCORE] model.model_config.first_k_dense_replace: must "
                               "not exceed num_layers (6) on an mcore model, got 100"), lines[0]
    rc, out, _ = _cli(tmp_path, _mcore(first_k_dense_replace=2.0), "check", "--format", "json")
    assert rc == 2 and json.loads(out)["error"]["rule"] == "R_FIRST_K_DENSE_MCORE"


def test_readme_documents_the_codes():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    for code in ("R_FIRST_K_DENSE_MCORE", "W_FIRST_K_DENSE_DEFAULT"):
        assert f"| {code} |" in readme or f"| {code} /" in readme or f"/ {code} |" in readme, code
