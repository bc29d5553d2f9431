"""W_OLDER_RELEASE: recompute keys that recompute something else in MindFormers releases older
than the rules autotune applies (autotune.config.older_releases); the config is still read."""

from __future__ import annotations

import copy

import pytest
import yaml

from autotune.config.older_releases import older_release_warnings
from autotune.config.read import check_config
from autotune.config.training import config_from_dict

EX = "examples/telechat2_115b/train.yaml"


@pytest.fixture(scope="module")
def example() -> dict:
    with open(EX, encoding="utf-8") as f:
        return yaml.safe_load(f)


def _fields(data: dict) -> list[str]:
    return [w.field for w in older_release_warnings(data) if w.code == "W_OLDER_RELEASE"]


def test_recompute_true_with_select_set() -> None:
    # r0.8-r1.1 (Llama family, ChatGLM2/3, TeleChat) recompute only the selected ops then
    # (r1.1.0 models/utils.py set_layer_stage_recompute: full only when select_recompute is empty)
    for sel in (True, [1, 1], {"feed_forward\\.mul": True}):
        assert _fields({"recompute_config": {"recompute": True, "select_recompute": sel}}) == [
            "recompute_config.select_recompute"], sel
    # a count table for recompute, no select, or recompute false: the same in every release
    for rc in ({"recompute": [2, 2], "select_recompute": True}, {"recompute": True, "select_recompute": False},
               {"recompute": True, "select_recompute": []}, {"recompute": True},
               {"recompute": False, "select_recompute": True}):
        assert _fields({"recompute_config": rc}) == [], rc


def test_model_specific_keys() -> None:
    mc = {"use_select_recompute": True, "no_recompute_layers": [20]}
    assert _fields({"model": {"model_config": mc}}) == ["model.model_config.use_select_recompute",
                                                        "model.model_config.no_recompute_layers"]
    assert "[20]" in older_release_warnings({"model": {"model_config": mc}})[1].message
    off = {"use_select_recompute": False, "no_recompute_layers": []}
    assert _fields({"model": {"model_config": off}}) == []
    assert _fields({"model": "not a mapping", "recompute_config": None}) == []


def test_every_command_reads_the_config_with_the_warning(example) -> None:
    data = copy.deepcopy(example)
    data["recompute_config"]["recompute"] = True
    data["recompute_config"]["select_recompute"] = True
    data["model"]["model_config"]["no_recompute_layers"] = [3]
    cfg = config_from_dict(copy.deepcopy(data))
    got = [w.field for w in cfg.config_warnings if w.code == "W_OLDER_RELEASE"]
    assert got == ["recompute_config.select_recompute", "model.model_config.no_recompute_layers"]
    # check (the same reader): accepted, the layout as r1.3+ reads it (every layer fully
    # recomputed), and the warnings listed
    res = check_config(copy.deepcopy(data))
    assert [w.field for w in res.warnings if w.code == "W_OLDER_RELEASE"] == got
    assert res.full_recompute_layers == list(range(res.num_layers))
