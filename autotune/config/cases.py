"""Flat test cases (``shared/cases`` vectors and bug-case inputs) as MindFormers training YAMLs.

Test-case code, kept out of the normaliser: the mapping follows ``shared/cases/README.md``.
"""

from __future__ import annotations

from typing import Any

from autotune.config.megatron import megatron_to_case

_RECOMPUTE_KEYS = ("recompute", "select_recompute", "select_comm_recompute",
                   "select_recompute_exclude", "select_comm_recompute_exclude",
                   "recompute_slice_activation")


def is_flat_case(data: Any) -> bool:
    """A flat case mapping: ``num_layers`` at the top level and no ``model`` section."""
    return isinstance(data, dict) and "num_layers" in data and "model" not in data


def case_to_training_yaml(case: dict[str, Any]) -> dict[str, Any]:
    """A flat case (``shared/cases`` vector or bug-case ``input``) as a MindFormers training YAML
    mapping, following ``shared/cases/README.md``. Megatron cases (``framework: megatron`` with
    ``framework_args``) go through :func:`autotune.config.megatron.megatron_to_case` first."""
    if case.get("framework") == "megatron" and isinstance(case.get("framework_args"), dict):
        case = megatron_to_case(case)
    pp = case.get("pp", case.get("pipeline_stage", 1))
    vpp = case.get("vpp", case.get("pp_interleave_num"))
    mc: dict[str, Any] = {"num_layers": case.get("num_layers")}
    if vpp is not None:
        mc["pp_interleave_num"] = vpp
    if "offset" in case:
        mc["offset"] = case["offset"]
    out: dict[str, Any] = {"model": {"model_config": mc}}
    pc: dict[str, Any] = {"pipeline_stage": pp}
    if case.get("stage_num") or case.get("start_stage"):
        ss, sn = case.get("start_stage", 0) or 0, case.get("stage_num", 0) or 0
        mc["pipeline_stage"] = {"start_stage": ss, "stage_num": sn}
        if isinstance(ss, int) and isinstance(sn, int):
            pc["pipeline_stage"] = ss + sn
    for key in ("micro_batch_num", "seq_split_num"):
        if case.get(key) is not None:
            pc[key] = case[key]
    out["parallel_config"] = pc
    pipe: dict[str, Any] = {}
    if "pipeline_interleave" in case:
        pipe["pipeline_interleave"] = case["pipeline_interleave"]
    elif isinstance(vpp, int) and not isinstance(vpp, bool) and vpp > 1:
        pipe["pipeline_interleave"] = True
    if case.get("pipeline_scheduler") is not None:
        pipe["pipeline_scheduler"] = case["pipeline_scheduler"]
    if pipe:
        out["parallel"] = {"pipeline_config": pipe}
    rc = {k: case[k] for k in _RECOMPUTE_KEYS if k in case}
    if rc:
        out["recompute_config"] = rc
    if "swap" in case:
        out["swap_config"] = {"swap": case["swap"]}
    mode = case.get("model_mode")
    mtp = case.get("mtp_num_layers")
    if mtp:
        if case.get("mtp_counted_in_layer_split"):
            mc["mtp_depth"] = mtp
            mode = mode or "legacy"
        else:
            mc["mtp_num_layers"] = mtp
            mode = mode or "mcore"
    if mode is not None:
        out["use_legacy"] = mode != "mcore"
    return out
