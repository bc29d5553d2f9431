"""MindFormers rules on the rest of a training YAML (model dims and parallel settings), read from the
MindFormers sources per release; every command applies them when it reads a config (``check`` too).

Each rule names the release and code that rejects the config:

- R_HIDDEN_HEADS: ``hidden_size`` not a multiple of the attention heads — ValueError in the
  attention of the legacy LLaMA family, TeleChat2 and research DeepSeek-V3 (r1.3.0–master,
  ``llama_transformer.py`` "hidden_size must be a multiple of n_head") and of mcore models
  (r1.7.0+, ``parallel_core/.../attention.py``). GLM-family models (GLM2/3/4, YiZhao) compute their
  head size from ``kv_channels`` and are exempt; so are mcore multi-latent-attention models.
- R_HEADS_MP: attention heads not a multiple of ``model_parallel`` — legacy LLaMA family
  (r1.3.0–master: "n_head must be a multiple of parallel_config.model_parallel", a necessary part of
  its ``model_parallel × ulysses`` rule) and mcore ``TransformerConfig`` (r1.6.0+, "num_attention_heads
  must be a multiple of tensor_model_parallel_size"). GLM family exempt; skipped with 3-D tensor
  parallel.
- R_FINE_GRAIN_SP: ``fine_grain_interleave > 1`` without ``use_seq_parallel`` or context parallel —
  ``tools/check_rules.py`` ``_check_config_campacity`` (r1.3.0–master).
- R_CP_FLASH: ``context_parallel > 1`` without ``use_flash_attention`` in semi-auto parallel —
  ``check_rules._check_parallel`` (r1.3.0–master).
- R_MOE_MP_SP: a MoE model (``moe_config.expert_num > 1``) with ``model_parallel > 1`` and no
  ``use_seq_parallel`` in semi-auto parallel — ``check_rules._check_moe_parallel_valid`` (r1.6.0+).
- R_SEQPIPE_PER_TOKEN_LOSS: seq pipe (``seq_split_num > 1``, pipeline_stage > 1) with
  ``runner_wrapper.calculate_per_token_loss`` — ``trainer/base_trainer.py`` (r1.5.0–master).

Only values that are present and of the right type are judged here; types and ranges of the keys
autotune models are checked by :mod:`autotune.config.training` and
:mod:`autotune.config.layer_setting`.

Rules that a release range lacks are applied only to the releases that have them (the ``version``
of :func:`model_rules`; R_MOE_MP_SP for "1.7" and "1.8", since r1.3.0–r1.5.0 lack it).
"""

from __future__ import annotations

from typing import Any

from autotune.config.layer_types import Warning_, is_int, rule_error
from autotune.config.layer_yaml import MC, get_node

HEAD_KEYS = ("num_heads", "num_attention_heads", "n_head")
def _first_int(data: dict[str, Any], paths: tuple[str, ...]) -> tuple[int | None, str]:
    for path in paths:
        val = get_node(data, path, None)
        if val is not None:
            return (int(val) if is_int(val) else None), path
    return None, paths[0]


def _glm_family(data: dict[str, Any]) -> bool:
    names = [get_node(data, MC + "type", None), get_node(data, "model.arch.type", None)]
    return any(isinstance(n, str) and ("glm" in n.lower() or "yizhao" in n.lower()) for n in names)


def _semi_auto(data: dict[str, Any]) -> bool:
    mode = get_node(data, "parallel.parallel_mode", None)
    return mode in (1, "semi_auto_parallel")


def _attention_rules(data: dict[str, Any]) -> None:
    if _glm_family(data):
        return
    mcore = get_node(data, "use_legacy", True) is False
    hidden, _ = _first_int(data, (MC + "hidden_size",))
    heads, heads_path = _first_int(data, tuple(MC + k for k in HEAD_KEYS))
    if not heads or heads < 1:
        return
    mla = any(get_node(data, MC + k, None) for k in ("q_lora_rank", "kv_lora_rank", "multi_latent_attention"))
    if hidden and hidden % heads and not (mcore and mla):
        raise rule_error("R_HIDDEN_HEADS", MC + "hidden_size", hidden,
                         f"hidden_size must be a multiple of the attention heads ({heads_path.split('.')[-1]} = "
                         f"{heads}; MindFormers r1.3.0–master attention raises ValueError)",
                         f"use a hidden_size divisible by {heads}")
    mp, _ = _first_int(data, ("parallel_config.model_parallel",))
    if mp and mp > 1 and heads % mp and not get_node(data, MC + "use_3d_tensor_parallel", False):
        raise rule_error("R_HEADS_MP", "parallel_config.model_parallel", mp,
                         f"the attention heads ({heads}) must be a multiple of model_parallel (MindFormers "
                         "r1.3.0–master legacy attention, r1.6.0+ mcore TransformerConfig)",
                         f"use a model_parallel that divides {heads}")


def _parallel_rules(data: dict[str, Any], version: str) -> None:
    sp = get_node(data, "parallel_config.use_seq_parallel", False) is True
    cp, _ = _first_int(data, ("parallel_config.context_parallel",))
    mp, _ = _first_int(data, ("parallel_config.model_parallel",))
    fgi, fgi_path = _first_int(data, (MC + "fine_grain_interleave",))
    if fgi and fgi > 1 and not sp and not (cp and cp > 1):
        raise rule_error("R_FINE_GRAIN_SP", fgi_path, fgi,
                         "fine_grain_interleave > 1 without context parallel needs "
                         "parallel_config.use_seq_parallel: true (MindFormers r1.3.0–master check_rules)",
                         "set use_seq_parallel: true, or fine_grain_interleave: 1")
    if not _semi_auto(data):
        return
    if cp and cp > 1 and get_node(data, MC + "use_flash_attention", False) is not True:
        raise rule_error("R_CP_FLASH", "parallel_config.context_parallel", cp,
                         "context_parallel > 1 needs model.model_config.use_flash_attention: true "
                         "(MindFormers r1.3.0–master check_rules)", "set use_flash_attention: true")
    experts, _ = _first_int(data, ("moe_config.expert_num",))
    if experts and experts > 1 and mp and mp > 1 and not sp and version in ("1.7", "1.8"):
        raise rule_error("R_MOE_MP_SP", "parallel_config.use_seq_parallel", sp,
                         "a MoE model with model_parallel > 1 needs use_seq_parallel: true (MindFormers "
                         "r1.6.0+ check_rules: 'performance may degrade')", "set use_seq_parallel: true")


def _seq_pipe_rules(data: dict[str, Any]) -> None:
    split, split_path = _first_int(data, ("parallel_config.seq_split_num",))
    pp, _ = _first_int(data, ("parallel_config.pipeline_stage",))
    if split and split > 1 and pp and pp > 1 and get_node(data, "runner_wrapper.calculate_per_token_loss", False):
        raise rule_error("R_SEQPIPE_PER_TOKEN_LOSS", "runner_wrapper.calculate_per_token_loss", True,
                         f"seq pipe (seq_split_num = {split}) cannot be combined with calculate_per_token_loss "
                         "(MindFormers r1.5.0–master base_trainer)", "set calculate_per_token_loss: false")


def model_rules(data: dict[str, Any], version: str = "1.8") -> list[Warning_]:
    """Apply the rules of the module docstring to a parsed training YAML, for MindFormers
    ``version`` ("1.5" = r1.3–r1.6, "1.7", "1.8").

    Returns:
        warnings (none at present: every rule here is an error in the releases that have it).

    Raises:
        ConfigError: R_HIDDEN_HEADS, R_HEADS_MP, R_FINE_GRAIN_SP, R_CP_FLASH, R_MOE_MP_SP,
            R_SEQPIPE_PER_TOKEN_LOSS; or R_TYPE when a section on the way is not a mapping.
    """
    _attention_rules(data)
    _parallel_rules(data, version)
    _seq_pipe_rules(data)
    return []
