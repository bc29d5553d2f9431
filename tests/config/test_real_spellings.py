"""Key spellings and section layouts of real MindFormers configs read, check and evaluate
(issue 15 item 3), on hand-written configs that reproduce each one (tests/config/data/spellings/),
and search -> best.yaml -> evaluate reproduces the peak on them (issue 20 item 5, sample)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from autotune.api import evaluate, search
from autotune.cli import main
from autotune.config.training import load_config, read_training_yaml
from autotune.errors import ConfigError
from autotune.profile.analytic import analytic_profile

D = Path(__file__).parent / "data" / "spellings"
ROOT = Path(__file__).resolve().parents[2]


def cli(*args: str):
    res = CliRunner().invoke(main, list(args))
    return res.exit_code, res.stdout, res.stderr


def test_integer_valued_float_counts_and_anchors():
    cfg = load_config(D / "legacy_moe_float_count.yaml")
    d = cfg.dims
    assert (d.num_experts, d.num_experts_per_tok, d.shared_expert_num, d.moe_intermediate_size) == (16, 2, 2, 512)
    assert isinstance(d.shared_expert_num, int) and d.capacity_factor == 1.5
    assert cfg.expert_parallel == cfg.data_parallel == 4          # the &dp anchor
    assert evaluate(cfg).fits


def test_non_integer_float_count_is_an_error():
    import yaml

    data = yaml.safe_load((D / "legacy_moe_float_count.yaml").read_text())
    data["moe_config"]["shared_expert_num"] = 2.5
    from autotune.config.training import config_from_dict

    with pytest.raises(ConfigError) as ei:
        config_from_dict(data)
    assert ei.value.field == "moe_config.shared_expert_num" and ei.value.rule == "R_TYPE"


@pytest.mark.parametrize("value", ["1", "one", "", [1], {"k": 1}])
@pytest.mark.parametrize("where", ["model_config", "moe_config"])
def test_a_non_number_first_k_dense_replace_is_refused_not_skipped(where, value):
    """A string ``first_k_dense_replace`` was skipped (0 dense layers) without a word: MindFormers
    fails on it (mcore ``[0] * first_k_dense_replace``, legacy DeepSeek ``layer_id < ...``). Each
    spelling is tried where it is read: ``model_config`` on mcore, ``moe_config`` on legacy DeepSeek."""
    import yaml

    from autotune.config.training import config_from_dict

    if where == "model_config":
        data = yaml.safe_load((D / "mcore_moe_mla_mtp.yaml").read_text())
        data["model"]["model_config"]["first_k_dense_replace"] = value
    else:
        data = yaml.safe_load((ROOT / "examples" / "real_configs" / "01_deepseek3_671b.yaml").read_text())
        data["moe_config"]["first_k_dense_replace"] = value
    with pytest.raises(ConfigError) as ei:
        config_from_dict(data)
    field = ("model.model_config." if where == "model_config" else "moe_config.") + "first_k_dense_replace"
    assert (ei.value.rule, ei.value.field, ei.value.value) == ("R_TYPE", field, value)
    assert str(ei.value).startswith(f"[R_TYPE] {field}: must be an integer, got ")


@pytest.mark.parametrize("value, dense", [(True, 1), (False, 0), (None, 0), (2, 2), (0.0, 0)])
def test_first_k_dense_replace_counts_as_mindformers_counts_it(value, dense):
    """A boolean counts 0 / 1 in MindFormers (legacy MoEConfig's default is True): read as that, with a
    note; ``true`` used to be read as 0. (A truthy float such as 2.0 is refused on mcore:
    tests/config/test_first_k_dense.py.)"""
    import yaml

    from autotune.config.training import config_from_dict

    data = yaml.safe_load((D / "mcore_moe_mla_mtp.yaml").read_text())
    data["model"]["model_config"]["first_k_dense_replace"] = value
    cfg = config_from_dict(data)
    assert cfg.dims.first_k_dense_replace == dense
    assert analytic_profile(cfg).layer_kinds == ([("dense", dense)] if dense else []) + [("moe", 6 - dense)]
    assert any("first_k_dense_replace True" in n for n in cfg.dims.notes) == (value is True)


def test_mcore_spellings_mla_moe_mtp():
    cfg = load_config(D / "mcore_moe_mla_mtp.yaml")
    d = cfg.dims
    assert not cfg.use_legacy and cfg.num_layers == 6
    assert (d.num_experts, d.num_experts_per_tok, d.moe_intermediate_size, d.shared_expert_num) == (32, 4, 256, 1)
    assert (d.q_lora_rank, d.kv_lora_rank, d.qk_nope_head_dim, d.qk_rope_head_dim, d.v_head_dim) == (384, 128, 64, 32, 64)
    assert d.mtp_num_layers == 1 and d.first_k_dense_replace == 1
    assert d.n_kv_heads == 8                                      # ${model.model_config.num_attention_heads}
    assert d.seq_length == 2048                                   # from the dataset, not max_position_embeddings
    assert d.capacity_factor == 0.0                               # mcore: dropless
    assert not cfg.warnings                                       # no real key taken for a typo
    prof = analytic_profile(cfg)
    assert prof.layer_kinds == [("dense", 1), ("moe", 5)]
    rc, out, err = cli("check", str(D / "mcore_moe_mla_mtp.yaml"), "--format", "json")
    assert rc == 0, err
    assert json.loads(out)["layers_per_stage"] == [[3, 3]]


def test_pretrained_model_dir_config_json():
    cfg = load_config(D / "hf_dir" / "train.yaml")
    d = cfg.dims
    assert cfg.num_layers == 6 and d.hidden_size == 512 and d.n_kv_heads == 2 and d.head_dim == 64
    assert d.seq_length == 1024 and d.tie_word_embeddings              # the YAML's seq_length wins
    data = read_training_yaml(D / "hf_dir" / "train.yaml")
    assert data["model"]["model_config"]["_hf_config"].endswith("model/config.json")
    rc, out, err = cli("check", str(D / "hf_dir" / "train.yaml"), "--format", "json")
    assert rc == 0 and json.loads(out)["layers_per_stage"] == [[3, 3]]


def test_missing_pretrained_model_dir_names_the_file(tmp_path):
    yml = tmp_path / "train.yaml"
    yml.write_text((D / "hf_dir" / "train.yaml").read_text().replace('"model"', '"/nowhere/Model-7B"'))
    with pytest.raises(ConfigError) as ei:
        load_config(yml)
    assert ei.value.rule == "R_HF_CONFIG" and ei.value.field == "pretrained_model_dir"
    assert "/nowhere/Model-7B/config.json" in str(ei.value) and "--hf-config" in str(ei.value)
    rc, _out, err = cli("evaluate", str(yml))
    assert rc == 2 and "R_HF_CONFIG" in err and "/nowhere/Model-7B/config.json" in err
    rc, _out, _err = cli("evaluate", str(yml), "--hf-config", str(D / "hf_dir" / "model" / "config.json"))
    assert rc == 0
    rc, _out, err = cli("check", str(yml), "--hf-config", str(tmp_path / "none.json"))
    assert rc == 2 and "R_HF_CONFIG" in err


def test_glm_select_recompute_saves_nothing_and_check_warns():
    rc, out, err = cli("check", str(D / "glm_select.yaml"), "--format", "json")
    assert rc == 0, err
    assert "W_SELECT_NO_MATCH" in json.loads(out)["warnings"]
    cfg = load_config(D / "glm_select.yaml")
    assert cfg.dims.n_kv_heads == 2 and cfg.dims.head_dim == 128 and cfg.dims.vocab_size == 32000
    k = analytic_profile(cfg).kinds["dense"]
    assert k.select.act_mib == k.act_mib and k.select.extra_ms == 0   # feed_forward\.* match no GLM cell
    assert k.comm.act_mib < k.act_mib                                  # .*\.norm does match GLM's norms
    assert "mlp.activation_func.silu" in k.select_ops


def test_gpt2_layout_and_swap_warning():
    cfg = load_config(D / "gpt2_swap.yaml")
    d = cfg.dims
    assert d.intermediate_size == 4096 and not d.gated_mlp and not d.use_flash_attention
    assert d.softmax_dtype_bytes == 2 and d.attention_dropout == 0.1
    rep = evaluate(cfg)
    assert [w.code for w in rep.warnings] == ["W_MEMORY_KEY_IGNORED"]
    k = analytic_profile(cfg).kinds["dense"]
    assert k.comm.act_mib == k.act_mib            # GPT-2's norm op is layer_norm: .*\.norm matches nothing


def test_multimodal_is_unsupported_with_a_reason():
    rc, _out, err = cli("evaluate", str(D / "multimodal.yaml"))
    assert rc == 2 and "R_UNSUPPORTED" in err and "multimodal" in err
    rc, out, _err = cli("check", str(D / "multimodal.yaml"), "--format", "json")
    assert rc == 2 and json.loads(out)["error"]["rule"] == "R_UNSUPPORTED"


def test_unknown_model_class_is_credited_no_saving():
    import yaml

    from autotune.config.training import config_from_dict

    data = yaml.safe_load((D / "glm_select.yaml").read_text())
    data["model"]["arch"]["type"] = "MadeUpForCausalLM"
    prof = analytic_profile(config_from_dict(data))
    k = prof.kinds["dense"]
    assert k.select.act_mib == k.comm.act_mib == k.act_mib and k.select_ops is None
    assert [w["code"] for w in prof.model_warnings] == ["W_FAMILY_UNKNOWN"]


def test_qkv_concat_llama_names():
    import yaml

    from autotune.config.training import config_from_dict

    data = yaml.safe_load((D / "legacy_moe_float_count.yaml").read_text())
    data.pop("moe_config")
    plain = analytic_profile(config_from_dict(data)).kinds["dense"]
    data["model"]["model_config"]["qkv_concat"] = True
    fused = analytic_profile(config_from_dict(data)).kinds["dense"]
    # default select patterns: feed_forward.mul and feed_forward.w1.activation.silu; with the fused
    # w_gate_hidden the SiLU is feed_forward.activate.silu, so only the product is recomputed
    assert plain.act_mib - plain.select.act_mib == pytest.approx(2 * (fused.act_mib - fused.select.act_mib))
    assert "feed_forward.w_gate_hidden.matmul" in fused.select_ops


@pytest.mark.parametrize("name", ["legacy_moe_float_count.yaml", "glm_select.yaml", "hf_dir/train.yaml"])
def test_search_then_evaluate_reproduces_the_peak(name, tmp_path):
    res = search(D / name, trials=8, seed=0)
    assert res.best is not None
    out = tmp_path / "best.yaml"
    out.write_text(res.to_yaml(full=True))
    # best.yaml is the user's YAML with the tuned keys: a relative pretrained_model_dir needs the
    # HF config named again when the file is written elsewhere
    hf = D / "hf_dir" / "model" / "config.json" if name.startswith("hf_dir") else None
    again = evaluate(load_config(out, hf_config=hf))
    assert again.peak_mib == pytest.approx(res.best.peak_mib, rel=1e-9)
    assert again.step_time_ms == pytest.approx(res.best.step_time_ms, rel=1e-9)
