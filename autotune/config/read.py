"""One reading of a config for ``check`` (and, through the config loader, every other command).

:func:`check_config` is what ``autotune check`` runs: a training YAML is loaded with
:func:`autotune.config.training.config_from_dict`, the loader of ``evaluate``, ``search``, ``report``
and ``apply`` (misspelled keys, the MindFormers rules outside LayerSetting, types and input limits),
then :func:`~autotune.config.layer_setting.normalize` runs on the inputs it read
(:func:`~autotune.config.layer_yaml.inputs_from_yaml`). Flat test cases and Megatron arguments are
mapped to a training YAML's layer keys first.
"""

from __future__ import annotations

from typing import Any

from autotune.config.cases import case_to_training_yaml, is_flat_case
from autotune.config.layer_setting import normalize
from autotune.config.layer_types import LayerSettingResult, Warning_
from autotune.config.layer_yaml import inputs_from_yaml
from autotune.config.megatron import translate
from autotune.config.training import config_from_dict


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
        # a training YAML: the loader every other command uses (same reader, same rules); in
        # emulate mode a misspelled key is not refused (it is what MindFormers would ignore)
        cfg = config_from_dict(data, version=version, spelling=not emulate)
        res = normalize(cfg.layer_inputs, version, emulate=emulate)
        res.warnings[:0] = list(cfg.config_warnings)
        return res
    res = normalize(inputs_from_yaml(data), version, emulate=emulate)
    res.warnings[:0] = extra
    return res
