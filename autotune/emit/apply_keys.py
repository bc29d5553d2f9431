"""Which keys of a BEST.yaml ``autotune apply`` writes into the user's config, and which it compares.

A BEST.yaml is either the block of tuned keys (what ``search`` prints, or written by hand) or the
whole tuned config ``search --out`` writes (the user's file with the tuned keys spliced in, under a
comment header whose ``# tuned keys:`` line names them). ``apply`` writes only the tuned keys:

- :data:`TUNED_PATHS`, which every search sets (the layout of the canonical block,
  :func:`autotune.emit.yaml_block.tuned_block`);
- :data:`FREEABLE_PATHS`, which a search changes only when its space frees them (the ``settings`` of
  :func:`autotune.tuner.space.expand_space`): written when BEST's ``# tuned keys:`` line names them,
  or when BEST holds nothing but tuned keys (a block to paste); otherwise compared like the keys below.

Every other key of BEST is either layout-relevant (:func:`is_layout_key`: the parallel, recompute,
swap and MoE sections, the HBM budget, the batch and optimizer-parallel settings, the model class
and dimensions: :data:`RELEVANT`, which ``scripts/make_examples.py`` imports) and must equal the
config's (else rule ``R_APPLY_MISMATCH``: BEST was tuned for another config), or it is left alone
(``epochs``, ``callbacks``, ``trainer.model_name``, ...): the user's later edits stay.
"""

from __future__ import annotations

import re
from typing import Any

from autotune.config.model_dims import ALIASES
from autotune.emit.splice import leaves, same_value
from autotune.errors import ConfigError

#: Keys every search writes (the canonical block).
TUNED_PATHS = frozenset({
    "model.model_config.offset", "model.model_config.pp_interleave_num",
    "parallel.pipeline_config.pipeline_interleave", "parallel.pipeline_config.pipeline_scheduler",
    "recompute_config.recompute", "recompute_config.select_recompute",
    "recompute_config.select_comm_recompute",
})
#: Keys a search writes only when its space frees them (``autotune.tuner.space.expand_space``'s
#: settings; tests/test_cli_check.py keeps the two lists in step).
FREEABLE_PATHS = frozenset({
    "recompute_config.recompute_slice_activation", "recompute_config.mp_comm_recompute",
    "recompute_config.parallel_optimizer_comm_recompute",
    "parallel_config.micro_batch_num", "runner_config.batch_size",
})
#: MindFormers' defaults of tuned keys: not inserted into a config that lacks them (the same meaning,
#: one diff line less; e.g. ``pipeline_interleave: false`` when the tuned pp_interleave_num is 1).
DEFAULTS = {"parallel.pipeline_config.pipeline_interleave": False,
            "parallel.pipeline_config.pipeline_scheduler": "1f1b"}

#: The layout- and memory-relevant keys of a MindFormers YAML, in three lists: sections whose every
#: key is relevant; dotted keys (the value and everything under it); ``model.model_config`` keys (and
#: everything under them). One list for ``apply`` (:func:`is_layout_key`: such a key must agree
#: between BEST and CONFIG) and for the shipped examples (``scripts/make_examples.py`` imports it as
#: ``RELEVANT``: an example carries every such key of its MindFormers source).
LAYOUT_SECTIONS = ("parallel_config", "recompute_config", "swap_config", "moe_config")
LAYOUT_KEYS = (
    "use_legacy", "pretrained_model_dir", "model.pretrained_model_dir", "run_mode",
    "context.max_device_memory",
    "runner_config.batch_size", "runner_config.gradient_accumulation_steps",
    "runner_wrapper.calculate_per_token_loss",
    "parallel.parallel_mode", "parallel.enable_parallel_optimizer", "parallel.parallel_optimizer_config",
    "parallel.pipeline_config.pipeline_interleave", "parallel.pipeline_config.pipeline_scheduler",
    "micro_batch_interleave_num", "model.arch.type",
)
_NAMED_MODEL_KEYS = (
    "type", "num_layers", "num_hidden_layers", "n_layer", "offset", "pp_interleave_num",
    "hidden_size", "num_heads", "num_attention_heads", "n_kv_heads", "num_key_value_heads",
    "num_query_groups", "multi_query_attention", "multi_query_group_num", "head_dim", "kv_channels",
    "intermediate_size", "ffn_hidden_size", "ffn_dim_multiplier", "multiple_of", "expand_ratio",
    "hidden_act", "gated_linear_unit", "seq_length", "max_position_embeddings", "vocab_size",
    "padded_vocab_size", "tie_word_embeddings", "untie_embeddings_and_output_weights",
    "num_experts", "n_routed_experts", "num_moe_experts", "num_experts_per_tok", "moe_router_topk",
    "moe_intermediate_size", "moe_ffn_hidden_size", "n_shared_experts", "shared_expert_num",
    "moe_shared_expert_intermediate_size", "first_k_dense_replace", "moe_expert_capacity_factor",
    "mtp_depth", "mtp_num_layers", "num_nextn_predict_layers",
    "q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_head_dim", "qk_rope_head_dim",
    "qk_pos_emb_head_dim", "v_head_dim",
    "param_init_type", "params_dtype", "embedding_init_type", "compute_dtype",
    "layernorm_compute_type", "layernorm_compute_dtype", "softmax_compute_type",
    "softmax_compute_dtype", "rotary_dtype", "use_flash_attention", "use_ring_attention",
    "use_attn_mask_compression", "attention_dropout", "attention_dropout_rate",
    "attention_dropout_prob", "hidden_dropout", "hidden_dropout_rate", "hidden_dropout_prob",
    "fine_grain_interleave", "batch_size", "pet_config", "qkv_concat",
    # older releases' recompute keys (autotune.config.older_releases) and a multimodal model's stages
    "use_select_recompute", "no_recompute_layers", "pipeline_stage",
)
#: ... plus every model_config spelling the reader knows (:data:`autotune.config.model_dims.ALIASES`).
LAYOUT_MODEL_KEYS = _NAMED_MODEL_KEYS + tuple(sorted(
    {n for names in ALIASES.values() for n in names if "." not in n} - set(_NAMED_MODEL_KEYS)))
RELEVANT = (LAYOUT_SECTIONS, LAYOUT_KEYS, LAYOUT_MODEL_KEYS)
_HEADER = re.compile(r"^#\s*tuned keys:(.*)$", re.MULTILINE)


def is_layout_key(path: str) -> bool:
    """Whether the dotted key ``path`` changes the layout autotune tunes or prices (:data:`RELEVANT`)."""
    parts = path.split(".")
    if parts[0] in LAYOUT_SECTIONS or any(path == k or path.startswith(k + ".") for k in LAYOUT_KEYS):
        return True
    return len(parts) >= 3 and parts[:2] == ["model", "model_config"] and parts[2] in LAYOUT_MODEL_KEYS


def header_tuned_keys(text: str) -> set[str] | None:
    """The dotted keys a ``# tuned keys:`` comment line of ``text`` names one by one (the grouped
    ``a.{b, c}`` entries are the fixed ones and are skipped); None when there is no such line."""
    m = _HEADER.search(text)
    if m is None:
        return None
    flat = re.sub(r"\{[^}]*\}", "", m.group(1))
    return {t.strip() for t in flat.split(",") if t.strip()}


def _get(data: Any, path: str) -> tuple[bool, Any]:
    for key in path.split("."):
        if not isinstance(data, dict) or key not in data:
            return False, None
        data = data[key]
    return True, data


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def inserts_default(dotted: str, value: Any, config: dict[str, Any]) -> bool:
    """Whether writing ``value`` at ``dotted`` would only insert MindFormers' default of a tuned key
    (:data:`DEFAULTS`) into a ``config`` that lacks it: the same meaning, so neither ``apply`` nor
    ``search --out`` writes it."""
    return dotted in DEFAULTS and same_value(value, DEFAULTS[dotted]) and not _get(config, dotted)[0]


def apply_updates(best_text: str, best: dict[str, Any], config: dict[str, Any], *,
                  best_name: str = "BEST", config_name: str = "CONFIG") -> list[tuple[tuple[str, ...], Any]]:
    """The (path, value) pairs of ``best`` that ``apply`` writes into ``config`` (see module doc).

    Args:
        best_text: BEST.yaml's text (its ``# tuned keys:`` header line is read);
        best, config: the two files' parsed mappings; best_name, config_name: their names in errors.

    Raises:
        ConfigError: rule ``R_APPLY_MISMATCH`` naming the first layout-relevant key whose value
            differs (or that only one of the two has, for a whole config written by ``search --out``).
    """
    named = header_tuned_keys(best_text)
    pairs = [(".".join(p), p, v) for p, v in leaves(best)]
    block = named is None and all(d in TUNED_PATHS | FREEABLE_PATHS for d, _, _ in pairs)
    tuned = TUNED_PATHS | (FREEABLE_PATHS if block else FREEABLE_PATHS & (named or set()))
    updates = []
    for dotted, path, value in pairs:
        found, current = _get(config, dotted)
        if dotted in tuned:
            if not inserts_default(dotted, value, config):
                updates.append((path, value))
        elif is_layout_key(dotted) and not (found and same_value(value, current)):
            _mismatch(dotted, value, current if found else None, found, best_name, config_name)
    if named is not None:                 # a whole config: a layout key BEST lacks must be unset too
        mine = {d for d, _, _ in pairs}
        for path, value in leaves(config):
            dotted = ".".join(path)
            if dotted not in mine and dotted not in tuned and is_layout_key(dotted) \
                    and not _get(best, dotted)[0]:
                raise ConfigError(f"{best_name} has no {dotted} but {config_name} sets it to {_show(value)}: "
                                  f"{best_name} was tuned for another config; fix: run `autotune search` on "
                                  f"{config_name} again (only tuned keys are written)",
                                  field=dotted, value=value, rule="R_APPLY_MISMATCH")
    return updates


def _mismatch(dotted: str, best_value: Any, value: Any, found: bool, best_name: str,
              config_name: str) -> None:
    theirs = f"{_show(value)} in {config_name}" if found else f"not set in {config_name}"
    raise ConfigError(f"{_show(best_value)} in {best_name} but {theirs}: {best_name} was tuned for "
                      f"another config, so its layout may not fit this one; fix: run `autotune search` "
                      f"on {config_name} again (only tuned keys are written, and only when the "
                      f"layout keys agree)", field=dotted, value=value, rule="R_APPLY_MISMATCH")
