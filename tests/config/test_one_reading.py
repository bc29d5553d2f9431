"""One reading of a config for every command: check, evaluate, search, report and apply agree on the
layer split (MTP counted exactly as the MindFormers release counts it), and a search that cannot
evaluate the user's config says why."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import yaml
from click.testing import CliRunner

import autotune
from autotune.cli import main
from autotune.config.layout import layout_from_config, mtp_layers_in_split
from autotune.config.read import check_config
from autotune.config.training import config_from_dict, load_config
from autotune.errors import ConfigError
from tests.conftest import EXAMPLES

DEEPSEEK = EXAMPLES / "real_configs" / "01_deepseek3_671b.yaml"

# legacy research DeepSeek-V3 style: 13 decoder layers + mtp_depth 1 -> MindFormers splits 14 layers
TINY_MTP = {
    "context": {"max_device_memory": "60GB"},
    "parallel_config": {"pipeline_stage": 4, "micro_batch_num": 8},
    "model": {"model_config": {"num_layers": 13, "mtp_depth": 1, "offset": [0, 1, 1, 0],
                               "hidden_size": 1024, "num_heads": 16, "seq_length": 1024,
                               "vocab_size": 32000, "intermediate_size": 4096}},
}


def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def test_deepseek_example_check_and_evaluate_agree():
    res = check_config(yaml.safe_load(DEEPSEEK.read_text()))
    assert res.num_layers == 62 and res.mtp_counted                       # 61 + mtp_depth 1
    assert res.layers_vp.tolist() == [[4] * 15 + [2]]                     # offset sums to 62 % 16 = 14
    cfg = load_config(DEEPSEEK)
    lay = layout_from_config(cfg)
    assert lay.layers_vp.tolist() == [[4] * 15 + [1]]                     # decoder layers: MTP taken out
    assert lay.mtp_in_split == 1 and mtp_layers_in_split(cfg) == 1
    r = run("evaluate", DEEPSEEK, "--format", "json")
    assert r.exit_code == 0, r.output


def test_mtp_counting_per_release():
    data = copy.deepcopy(TINY_MTP)
    mc = data["model"]["model_config"]
    mc.pop("mtp_depth")
    mc["mtp_num_layers"] = 1
    data["use_legacy"] = False
    # mcore: counted in dev / r1.6.0 ("1.5"), not in r1.7.0+
    assert check_config(data, "1.5").num_layers == 14
    with pytest.raises(ConfigError) as ei:
        check_config(data, "1.8")                     # 13 layers: the offset must sum to 1, not 2
    assert ei.value.rule == "R_OFFSET_SUM"
    mc["offset"] = [0, 1, 0, 0]
    assert check_config(data, "1.8").num_layers == 13
    assert layout_from_config(config_from_dict(data)).mtp_in_split == 0
    assert layout_from_config(config_from_dict(data, version="1.8")).layers_vp.sum() == 13
    # legacy + mtp_num_layers: no legacy model reads that key -> no MTP layer, warned
    data["use_legacy"] = True
    res = check_config(data, "1.8")
    assert res.num_layers == 13 and "W_KEY_IGNORED" in res.warning_codes


def test_mcore_mtp_above_one_is_rejected():
    data = copy.deepcopy(TINY_MTP)
    data["use_legacy"] = False
    data["model"]["model_config"]["mtp_depth"] = 2
    for reader in (lambda d: check_config(d), lambda d: config_from_dict(d)):
        with pytest.raises(ConfigError) as ei:
            reader(data)
        assert (ei.value.rule, ei.value.field, ei.value.value) == (
            "R_MTP_MCORE", "model.model_config.mtp_depth", 2)


def test_search_writes_what_check_evaluate_and_apply_read(tmp_path):
    cfg_path = tmp_path / "train.yaml"
    cfg_path.write_text(yaml.safe_dump(TINY_MTP, sort_keys=False))
    result = autotune.search(str(cfg_path), trials=3, seed=0)
    assert result.baselines["user"] is not None and result.user_config_error is None
    best = tmp_path / "best.yaml"
    best.write_text(result.to_yaml(full=True))
    offset = np.asarray(yaml.safe_load(best.read_text())["model"]["model_config"]["offset"])
    assert int(offset.sum()) == 14 % (4 * result.best.layout.vpp)          # MindFormers' sum rule on 13 + 1
    assert run("check", best).exit_code == 0
    again = autotune.evaluate(str(best))
    assert again.step_time_ms == pytest.approx(result.best.step_time_ms, rel=1e-9)
    assert again.peak_mib == pytest.approx(result.best.peak_mib, rel=1e-9)
    tuned = tmp_path / "tuned.yaml"
    r = run("apply", best, cfg_path, "-o", tuned)
    assert r.exit_code == 0, r.output
    assert autotune.evaluate(str(tuned)).step_time_ms == pytest.approx(result.best.step_time_ms, rel=1e-9)


def test_search_says_why_the_user_config_has_no_baseline(tmp_path):
    data = copy.deepcopy(TINY_MTP)
    data["model"]["model_config"]["offset"] = [1, 1, 1, 0]            # sums to 3, MindFormers wants 2
    cfg_path = tmp_path / "bad.yaml"
    cfg_path.write_text(yaml.safe_dump(data))
    r = run("evaluate", cfg_path)
    assert r.exit_code == 2 and "R_OFFSET_SUM" in r.output
    result = autotune.search(str(cfg_path), trials=2, seed=0)
    assert result.baselines["user"] is None
    assert result.user_config_error["rule"] == "R_OFFSET_SUM"
    assert result.user_config_error["field"] == "model.model_config.offset"
    assert result.to_dict()["user_config_error"]["rule"] == "R_OFFSET_SUM"
    r = run("search", cfg_path, "--trials", "2", "--quiet")
    assert r.exit_code == 0, r.output
    assert "your config was not evaluated: [R_OFFSET_SUM] model.model_config.offset:" in r.output
