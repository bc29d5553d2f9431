"""Read the LayerSetting inputs from a MindFormers training YAML (paths in §7 of the layer-setting
spec). The one reader of these keys: ``check`` and the config loader of every other command use it.
"""

from __future__ import annotations

from typing import Any

from autotune.config.cells import family_from_yaml
from autotune.config.layer_types import ABSENT, LayerInputs, misspelt_hint, short_repr
from autotune.errors import ConfigError

MC = "model.model_config."
#: MTP depth keys, in the order they are looked up.
MTP_KEYS = ("mtp_depth", "mtp_num_layers", "num_nextn_predict_layers")
LAYER_KEYS = ("num_layers", "num_hidden_layers", "n_layer")


def get_node(data: Any, path: str, default: Any = ABSENT) -> Any:
    """The value at dotted ``path``; ``default`` when a key is absent or a parent is null.

    Raises:
        ConfigError: a parent is not a mapping (R_TYPE).
    """
    node = data
    walked = []
    for key in path.split("."):
        walked.append(key)
        if node is None:
            return default
        if not isinstance(node, dict):
            raise ConfigError(f"expected a mapping, got {short_repr(node)}; fix: make it a mapping",
                              field=".".join(walked[:-1]), value=node, rule="R_TYPE")
        if key not in node:
            return default
        node = node[key]
    return node


def _mtp(data: dict[str, Any], fields: dict[str, str]) -> tuple[Any, str | None]:
    for key in MTP_KEYS:
        val = get_node(data, MC + key)
        if val not in (ABSENT, None):
            fields["mtp_num_layers"] = MC + key
            return val, key
    return 0, None


def _stage_block(data: dict[str, Any], fields: dict[str, str]) -> tuple[Any, Any, Any]:
    block = get_node(data, MC + "pipeline_stage", None)
    if block is None:
        return 0, 0, ABSENT
    if not isinstance(block, dict):
        raise ConfigError(f"must be a mapping {{start_stage, stage_num, offset}}, got {short_repr(block)}",
                          field=MC + "pipeline_stage", value=block, rule="R_TYPE")
    offset = block.get("offset", ABSENT)
    if offset is not ABSENT:
        fields["offset"] = MC + "pipeline_stage.offset"
    return block.get("start_stage", 0), block.get("stage_num", 0), offset


def inputs_from_yaml(data: dict[str, Any]) -> LayerInputs:
    """Map a parsed MindFormers training YAML to :class:`LayerInputs` (spec §7).

    Raises:
        ConfigError: the layer count is missing (R_MISSING), the top level or a section is not a
            mapping, or ``use_legacy`` is not a bool (R_TYPE).
    """
    if not isinstance(data, dict):
        raise ConfigError("top level must be a mapping", field="<file>", value=None, rule="R_TYPE")
    n, n_path = ABSENT, MC + "num_layers"
    for key in LAYER_KEYS:
        val = get_node(data, MC + key)
        if val is not ABSENT and val is not None:
            n, n_path = val, MC + key
            break
    if n is ABSENT:
        raise ConfigError("required key is missing (also looked for num_hidden_layers, n_layer)"
                          f"{misspelt_hint(data, LAYER_KEYS)}; fix: add model.model_config.num_layers",
                          field=MC + "num_layers", value=None, rule="R_MISSING")
    use_legacy = get_node(data, "use_legacy", True)
    if not isinstance(use_legacy, bool):
        raise ConfigError(f"use_legacy must be true or false, got {short_repr(use_legacy)}; fix: write "
                          "true or false", field="use_legacy", value=use_legacy, rule="R_TYPE")
    fields = {"num_layers": n_path}
    mtp, mtp_key = _mtp(data, fields)
    start_stage, stage_num, stage_offset = _stage_block(data, fields)
    rc = get_node(data, "recompute_config", None) or {}
    if not isinstance(rc, dict):
        raise ConfigError(f"must be a mapping, got {short_repr(rc)}", field="recompute_config", value=rc,
                          rule="R_TYPE")

    def d(path: str, default: Any) -> Any:
        val = get_node(data, path, default)
        return default if val is None else val

    # absent -> 1 (pp_given False); an explicit null stays None: MindFormers' validator rejects it
    # (check_positive_int), and so does the normaliser (R_TYPE)
    pp = get_node(data, "parallel_config.pipeline_stage")
    nulls = frozenset(name for name, path in (("micro_batch_num", "parallel_config.micro_batch_num"),
                                              ("seq_split_num", "parallel_config.seq_split_num"),
                                              ("swap", "swap_config.swap"),
                                              ("recompute_slice_activation",
                                               "recompute_config.recompute_slice_activation"))
                      if get_node(data, path) is None)
    return LayerInputs(
        num_layers=n,
        pp=1 if pp is ABSENT else pp,
        vpp=get_node(data, MC + "pp_interleave_num", None),
        offset=get_node(data, MC + "offset", 0),
        recompute=rc.get("recompute", False),
        select_recompute=rc.get("select_recompute", False),
        select_comm_recompute=rc.get("select_comm_recompute", False),
        select_recompute_exclude=rc.get("select_recompute_exclude", ABSENT),
        select_comm_recompute_exclude=rc.get("select_comm_recompute_exclude", ABSENT),
        recompute_slice_activation=rc.get("recompute_slice_activation", False),
        mp_comm_recompute=rc.get("mp_comm_recompute", ABSENT),
        parallel_optimizer_comm_recompute=rc.get("parallel_optimizer_comm_recompute", ABSENT),
        pipeline_interleave=get_node(data, "parallel.pipeline_config.pipeline_interleave", None),
        pipeline_scheduler=d("parallel.pipeline_config.pipeline_scheduler", "1f1b"),
        swap=d("swap_config.swap", False),
        start_stage=start_stage, stage_num=stage_num, stage_offset=stage_offset,
        seq_split_num=d("parallel_config.seq_split_num", 1),
        micro_batch_num=get_node(data, "parallel_config.micro_batch_num", None),
        micro_batch_interleave_num=get_node(data, "micro_batch_interleave_num"),
        model_mode="legacy" if use_legacy else "mcore", mtp_num_layers=mtp, mtp_key=mtp_key,
        pp_given=pp is not ABSENT, from_yaml=True, nulls=nulls, fields=fields,
        cell_family=family_from_yaml(data),
    )
