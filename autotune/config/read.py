"""One reading of a config for ``check`` (and, through the config loader, every other command).

:func:`check_config` is what ``autotune check`` runs: the MindFormers rules outside LayerSetting
(:mod:`autotune.config.mf_rules`), misspelled keys, then :func:`~autotune.config.layer_setting.normalize`
on the inputs :func:`~autotune.config.layer_yaml.inputs_from_yaml` reads. ``evaluate``, ``search``,
``report`` and ``apply`` load configs with :func:`autotune.config.training.config_from_dict`, which
reads the same inputs with the same function and runs the same rules.
"""

from __future__ import annotations

from typing import Any

from autotune.config.cases import case_to_training_yaml, is_flat_case
from autotune.config.layer_setting import normalize
from autotune.config.layer_types import LayerSettingResult, Warning_
from autotune.config.layer_yaml import inputs_from_yaml
from autotune.config.megatron import translate
from autotune.config.mf_rules import model_rules
from autotune.config.training import check_keys


def check_config(data: dict[str, Any], version: str = "1.8", *, emulate: bool = False,
                 source: str = "mindformers") -> LayerSettingResult:
    """What MindFormers ``version`` does with a parsed training YAML (or a flat case mapping).

    ``source="megatron"`` (or a flat case with ``framework: megatron``) reads Megatron arguments
    through :func:`autotune.config.megatron.translate`; its warnings come first in the result.

    Raises:
        ConfigError: a rule MindFormers (or, in strict mode, autotune) enforces, with its code.
    """
    extra: list[Warning_] = []
    if isinstance(data, dict) and (source == "megatron" or (
            data.get("framework") == "megatron" and isinstance(data.get("framework_args"), dict))):
        tr = translate(data)
        data, extra = case_to_training_yaml(tr.case), tr.warnings
    elif is_flat_case(data):
        data = case_to_training_yaml(data)
    elif isinstance(data, dict) and ("model" in data or "parallel_config" in data):
        if not emulate:
            check_keys(data)  # strict mode: a misspelled key would silently fall back to its default
        extra = model_rules(data)
    res = normalize(inputs_from_yaml(data), version, emulate=emulate)
    res.warnings[:0] = extra
    return res
