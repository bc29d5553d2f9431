"""Read a MindFormers training YAML into a validated, frozen :class:`TrainingConfig`.

Only the keys autotune needs are read; unknown keys are ignored. Every error names the YAML path
(e.g. ``parallel_config.pipeline_stage``), the value found and the rule broken.

YAML paths read (MindFormers layout, see shared/spec/real-configs.md):

- ``model.model_config.{num_layers|num_hidden_layers, offset, pp_interleave_num, hidden_size,
  num_heads|num_attention_heads, n_kv_heads|num_key_value_heads|multi_query_group_num,
  intermediate_size|ffn_hidden_size, seq_length, vocab_size, mtp_depth|mtp_num_layers, ...}``
- ``parallel_config.{pipeline_stage, micro_batch_num, data_parallel, model_parallel,
  context_parallel, expert_parallel, use_seq_parallel, seq_split_num}``
- ``parallel.pipeline_config.{pipeline_interleave, pipeline_scheduler}``,
  ``parallel.enable_parallel_optimizer``
- ``recompute_config.{recompute, select_recompute, select_comm_recompute, ...}``
- ``context.max_device_memory`` (the HBM budget), ``use_legacy``
- ``moe_config`` (legacy MoE keys) for the analytic profile.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from autotune.config.layer_setting import Warning_, validate_config_level
from autotune.config.older_releases import older_release_warnings
from autotune.config.layer_types import AUTOTUNE_SCHEDULERS, near_key, short_repr  # noqa: F401 - re-exported
from autotune.config.layer_yaml import inputs_from_yaml
from autotune.config.limits import MAX_INT
from autotune.config.mf_rules import model_rules
from autotune.config.model_dims import (ALIASES, ModelDims, dense_layers, merge_hf_config, missing_dims_error,
                                        read_batch_size, read_dims)
from autotune.config.safe_yaml import read_yaml_file
from autotune.errors import ConfigError, require_file
from autotune.units import parse_memory_mib

__all__ = ["ModelDims", "TrainingConfig", "check_keys", "config_from_dict", "get_path", "load_config",
           "read_training_yaml", "read_yaml"]

SCHEDULERS = ("1f1b", "gpipe", "seqpipe", "seqvpp", "seqsmartvpp", "zero_bubble_v")


def read_yaml(path: str | Path) -> dict[str, Any]:
    """Load a YAML file through the bounded safe loader and return its top-level mapping
    (:func:`autotune.config.safe_yaml.read_yaml_file`).

    Raises:
        ConfigError: missing file (rule ``file``), empty file, unreadable or non-YAML text, a top
            level that is not a mapping (rule ``yaml``), or a limit (R_YAML_SIZE, R_YAML_DEPTH,
            R_YAML_ALIAS, R_YAML_NODES); field = the file path.
    """
    return read_yaml_file(path, mapping=True)


def read_json(path: str | Path, *, rule: str, what: str = "JSON") -> Any:
    """Load a JSON file (profiler traces, SAPP layer files: too large for the YAML loader).

    Raises:
        ConfigError: missing file or not JSON (field = the file path, rule = ``rule``).
    """
    p = require_file(path)
    try:
        return json.loads(p.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"not {what}: {exc}", field=str(p), value=None, rule=rule) from None
    except (RecursionError, ValueError, MemoryError) as exc:   # nesting or an over-long number
        raise ConfigError(f"not {what} autotune can read ({type(exc).__name__}: {str(exc)[:120]})",
                          field=str(p), value=None, rule=rule) from None


_MISSING = object()
_ABSENT = object()


def get_path(data: dict[str, Any], path: str, default: Any = _MISSING) -> Any:
    """Return the value at dotted ``path`` (``a.b.c``); ``default`` when absent.

    Raises:
        ConfigError: the key is absent and no default was given (rule ``missing_key``), or an
            intermediate node is not a mapping.
    """
    node: Any = data
    walked = []
    for key in path.split("."):
        walked.append(key)
        if node is None:
            node = {}
        if not isinstance(node, dict):
            raise ConfigError(f"expected a mapping, got {type(node).__name__}",
                              field=".".join(walked[:-1]), value=node, rule="R_TYPE")
        if key not in node:
            if default is _MISSING:
                raise ConfigError("required key is missing", field=path, value=None,
                                  rule="R_MISSING")
            return default
        node = node[key]
    return node


def _first(data: dict[str, Any], paths: tuple[str, ...], default: Any = _MISSING) -> tuple[Any, str]:
    for path in paths:
        val = get_path(data, path, None)
        if val is not None:
            return val, path
    if default is _MISSING:
        raise ConfigError("required key is missing" + (
            f" (also looked for {', '.join(paths[1:])})" if len(paths) > 1 else "") + f"; fix: add {paths[0]}",
            field=paths[0], value=None, rule="R_MISSING")
    return default, paths[0]


def _int(data: dict[str, Any], paths: tuple[str, ...] | str, default: Any = _MISSING, *,
         minimum: int | None = 1, null_ok: bool = True) -> int:
    paths = (paths,) if isinstance(paths, str) else paths
    if not null_ok:
        for path in paths:
            if get_path(data, path, _ABSENT) is None:    # written as null: MindFormers' validators refuse it
                raise ConfigError("must be an integer, got None; fix: write a whole number or remove the key",
                                  field=path, value=None, rule="R_TYPE")
    val, path = _first(data, paths, default)
    if isinstance(val, bool) or not isinstance(val, int):
        raise ConfigError(f"must be an integer, got {short_repr(val)}; fix: write a whole number", field=path,
                          value=val, rule="R_TYPE")
    if minimum is not None and val < minimum:
        raise ConfigError(f"must be >= {minimum}, got {val}; fix: use a value >= {minimum}", field=path,
                          value=val, rule="R_RANGE")
    if abs(val) > MAX_INT:
        raise ConfigError(f"must be <= {MAX_INT} (int32; autotune's input limit), got {short_repr(val)}; "
                          f"fix: use a real size", field=path, value=val, rule="R_RANGE")
    return val


def _bool(data: dict[str, Any], path: str, default: bool) -> bool:
    val = get_path(data, path, default)
    if val is None:
        return default
    if not isinstance(val, bool):
        raise ConfigError(f"must be true or false, got {short_repr(val)}; fix: write true or false", field=path,
                          value=val, rule="R_TYPE")
    return val


class TrainingConfig(BaseModel):
    """The parts of a MindFormers training YAML that autotune reads (frozen).

    ``offset`` and the recompute values keep the user's raw form; the canonical [vpp][pp] tables
    come from :func:`autotune.config.layout.layout_from_config`.
    ``hbm_mib`` is ``context.max_device_memory`` in MiB (None when absent). ``layer_inputs`` holds
    the :class:`~autotune.config.layer_types.LayerInputs` read from the YAML (the keys ``check``
    reads; None for a config built in code); ``mindformers_version`` the release whose rules apply;
    ``warnings`` what the reading warned about (near-miss keys, warn-only MindFormers rules, the
    config-level LayerSetting rules). ``batch_size`` is ``runner_config.batch_size`` (the
    micro-batch size; 1 when absent).
    """

    model_config = ConfigDict(frozen=True, extra="forbid", arbitrary_types_allowed=True)

    source: str = "<memory>"
    num_layers: int
    pipeline_stage: int
    micro_batch_num: int
    pp_interleave_num: int = 1
    pp_interleave_num_raw: int | None = None
    pipeline_interleave: bool = False
    pipeline_scheduler: str = "1f1b"
    offset: Any = 0
    recompute: Any = False
    select_recompute: Any = False
    select_comm_recompute: Any = False
    recompute_slice_activation: bool = False
    mp_comm_recompute: bool = True
    parallel_optimizer_comm_recompute: bool = False
    data_parallel: int = 1
    model_parallel: int = 1
    context_parallel: int = 1
    expert_parallel: int = 1
    use_seq_parallel: bool = False
    seq_split_num: int = 1
    batch_size: int = 1
    enable_parallel_optimizer: bool = False
    optimizer_weight_shard_size: int = -1
    use_legacy: bool = True
    hbm_mib: float | None = None
    dims: ModelDims | None = None
    warnings: tuple[Warning_, ...] = ()
    raw: dict[str, Any] = {}
    layer_inputs: Any = None
    mindformers_version: str = "1.8"

    @property
    def config_warnings(self) -> list[Warning_]:
        """The reading's warnings (misspelled-key near misses, the warn-only MindFormers rules, the
        config-level LayerSetting rules), as a list."""
        return list(self.warnings)

    @property
    def vpp(self) -> int:
        """Effective interleave count: 1 when ``pipeline_interleave`` is off (MindFormers rule)."""
        return self.pp_interleave_num

    @property
    def devices(self) -> int:
        """dp · mp · cp · pp."""
        return self.data_parallel * self.model_parallel * self.context_parallel * self.pipeline_stage


#: MindFormers' ``run_mode`` values that run a training step (``train``, ``finetune``); ``eval`` and
#: ``predict`` run the forward only.
TRAINING_RUN_MODES = ("train", "finetune")


def run_mode_warnings(data: dict[str, Any]) -> list[Warning_]:
    """``W_RUN_MODE`` when the file's top-level ``run_mode`` is another than ``train`` or
    ``finetune`` (MindFormers' inference configs say ``predict``): autotune prices a training step
    (the activations a backward keeps, gradients, optimizer state), so its figures and its memory
    verdict are not those of that run. A new user searched a DeepSeek-R1 ``predict`` config and got
    "no configuration fits" with advice for training."""
    mode = data.get("run_mode")
    if not isinstance(mode, str) or mode.strip().lower() in TRAINING_RUN_MODES:
        return []
    return [Warning_("W_RUN_MODE", "run_mode",
                     f"run_mode is {mode!r}: this file configures a run without a training step, but autotune "
                     "prices one (activations kept for the backward, gradients, optimizer state); tune the "
                     "training config (run_mode: train or finetune) instead")]


def _dims(data: dict[str, Any]) -> ModelDims | None:
    """Model dims and memory settings (:func:`autotune.config.model_dims.read_dims`)."""
    return read_dims(data)


#: Keys MindFormers' YAML template accepts in these sections; any other key is a KeyError there
#: (shared/spec/mindformers-layer-setting.md §1.6, §7; r1.5+).
STRICT_SECTIONS: dict[str, set[str]] = {
    "parallel_config": {"data_parallel", "model_parallel", "context_parallel", "expert_parallel",
                        "pipeline_stage", "micro_batch_num", "seq_split_num", "use_seq_parallel",
                        "optimizer_shard", "gradient_aggregation_group", "vocab_emb_dp",
                        "context_parallel_algo", "ulysses_degree_in_cp", "mem_coeff"},
    "recompute_config": {"recompute", "select_recompute", "select_comm_recompute",
                         "parallel_optimizer_comm_recompute", "mp_comm_recompute",
                         "recompute_slice_activation", "select_recompute_exclude",
                         "select_comm_recompute_exclude"},
    "swap_config": {"swap", "layer_swap", "op_swap", "default_prefetch"},
}
#: Megatron-style parallel keys: MindFormers' experimental parallel_core (pynative) configs put them
#: in ``parallel_config`` and read them with their own loader (``parallel_core/pynative/config.py``
#: ``init_configs_from_yaml``, r1.3.0 to r1.5.0), never through the training YAML template.
MEGATRON_STYLE_KEYS = {"tensor_model_parallel_size", "pipeline_model_parallel_size", "data_parallel_size",
                       "virtual_pipeline_model_parallel_size", "context_parallel_size",
                       "expert_model_parallel_size", "sequence_parallel"}
#: Keys autotune relies on in sections that also hold many model-specific keys: an unknown key
#: that is a near-miss of one of these (and the real key absent) is taken for a typo.
NEAR_MISS_KEYS: dict[str, set[str]] = {
    "": {"model", "parallel", "parallel_config", "recompute_config", "context", "runner_config",
         "moe_config", "swap_config", "use_legacy"},
    "model": {"model_config"},
    "model.model_config": {"num_layers", "offset", "pp_interleave_num", "hidden_size", "num_heads",
                           "n_kv_heads", "intermediate_size", "seq_length", "vocab_size",
                           "mtp_depth", "mtp_num_layers", "num_experts", "first_k_dense_replace",
                           # the memory-relevant keys (docs/profiles.md's key table): a typo would
                           # silently swap in the default and move the predicted peak by gigabytes
                           "use_flash_attention", "param_init_type", "compute_dtype", "softmax_compute_type",
                           "fine_grain_interleave"},
    "parallel": {"pipeline_config", "enable_parallel_optimizer", "parallel_optimizer_config"},
    "parallel.pipeline_config": {"pipeline_interleave", "pipeline_scheduler"},
    "context": {"max_device_memory"},
}
#: Real spellings MindFormers accepts that look like near misses of the keys above (every alias of
#: :data:`autotune.config.model_dims.ALIASES`, e.g. ``moe_intermediate_size`` vs ``intermediate_size``).
KNOWN_SPELLINGS: dict[str, set[str]] = {
    "model.model_config": {n for names in ALIASES.values() for n in names if "." not in n} | {
        "moe_shared_expert_intermediate_size", "max_position_embeddings",
        "max_position_embedding", "multi_query_attention", "hidden_dropout", "attention_dropout"},
}


def check_keys(data: dict[str, Any]) -> list[Warning_]:
    """Reject the unknown keys MindFormers' YAML template rejects; warn about the other near misses.

    Unknown keys in ``parallel_config`` / ``recompute_config`` / ``swap_config`` are rejected as
    MindFormers' template (``mindformers/tools/register/template.py``, r1.5+) does with a KeyError.
    Elsewhere (``model.model_config``, ``parallel``, the top level, ...) MindFormers passes unknown
    keys on or only logs them, so an unknown key that is a near miss (difflib ratio >= 0.85) of a
    key autotune relies on, which the section lacks, gives the warning ``W_KEY_UNKNOWN`` naming it
    (it is ignored and the default is used).

    Returns:
        the ``W_KEY_UNKNOWN`` warnings (field = the key's YAML path, the intended key in the message).

    Raises:
        ConfigError: rule ``R_UNKNOWN_KEY``, field = the unknown key's YAML path; rule
            ``R_UNSUPPORTED`` when ``parallel_config`` holds a Megatron-style key
            (:data:`MEGATRON_STYLE_KEYS`: a parallel_core pynative config, not a training YAML).
    """
    def node(path: str) -> Any:
        cur: Any = data
        for part in [p for p in path.split(".") if p]:
            cur = cur.get(part) if isinstance(cur, dict) else None
        return cur

    pc = data.get("parallel_config")
    megatron = [k for k in pc if k in MEGATRON_STYLE_KEYS] if isinstance(pc, dict) else []
    if megatron:  # before the unknown-key loop: whatever key comes first, the reason is this one
        key = megatron[0]
        raise ConfigError(f"{key!r} is a Megatron-style key: a config of MindFormers' experimental "
                          "parallel_core (pynative) trainer, which its own loader reads, not the "
                          "training YAML template; to tune it, write it as a training YAML "
                          "(parallel_config.pipeline_stage, model_parallel, data_parallel, ... "
                          "and model.model_config) or give Megatron-LM arguments with --from megatron",
                          field=f"parallel_config.{key}", value=pc[key], rule="R_UNSUPPORTED")
    for section, allowed in STRICT_SECTIONS.items():
        sec = data.get(section)
        if not isinstance(sec, dict):
            continue
        for key in sec:
            if key not in allowed:
                guess = near_key(key, allowed)
                hint = f"did you mean {guess!r}?" if guess else f"allowed: {', '.join(sorted(allowed))}"
                raise ConfigError(f"unknown key {key!r} (MindFormers' training YAML template rejects it from "
                                  f"r1.5 on: KeyError); {hint}",
                                  field=f"{section}.{key}", value=sec[key], rule="R_UNKNOWN_KEY")
    warns: list[Warning_] = []
    for section, wanted in NEAR_MISS_KEYS.items():
        sec = node(section)
        if not isinstance(sec, dict):
            continue
        for key in sec:
            if key in wanted or not isinstance(key, str) or key in KNOWN_SPELLINGS.get(section, ()):
                continue
            guess = near_key(key, wanted)
            if guess and guess not in sec:
                where = f"{section}.{key}" if section else key
                warns.append(Warning_("W_KEY_UNKNOWN", where,
                                      f"unknown key {key!r}: did you mean {guess!r}? (it is ignored and "
                                      f"the default of {guess!r} is used)"))
    return warns


def _read_dims(data: dict[str, Any]) -> ModelDims | None:
    """:func:`_dims`, with any value it cannot convert reported as a one-line error."""
    try:
        return _dims(data)
    except ConfigError:
        raise
    except (ValueError, TypeError, ArithmeticError) as exc:       # e.g. ffn_dim_multiplier: "abc"
        raise ConfigError(f"a model dimension cannot be read ({type(exc).__name__}: {str(exc)[:120]}); fix: "
                          "give the model_config dimensions as numbers", field="model.model_config",
                          value=None, rule="R_TYPE") from None


def _check_top_keys(data: dict[str, Any]) -> None:
    """Refuse a top-level key that is not a string (``1: 2``, ``~: 2``, ``true: 1``): every section
    of a MindFormers training YAML is named by a string (MindFormers reads them as attributes).

    Raises:
        ConfigError: rule R_TYPE, field = the key as YAML wrote it (``~`` for null).
    """
    for key in data:
        if not isinstance(key, str):
            shown = "~" if key is None else short_repr(key, 60)
            kind = "null" if key is None else type(key).__name__
            raise ConfigError(f"a top-level key must be a string (a section name such as "
                              f"parallel_config), got {kind} key {shown}; fix: remove "
                              "the line or quote the key", field=shown, value=key, rule="R_TYPE")


def config_from_dict(data: dict[str, Any], *, source: str = "<memory>",
                     hbm_mib: float | None = None, version: str = "1.8", spelling: bool = True) -> TrainingConfig:
    """Validate a parsed MindFormers YAML mapping into a :class:`TrainingConfig`.

    The layer-setting keys are read once, by :func:`autotune.config.layer_yaml.inputs_from_yaml`
    (the reader ``check`` uses), and checked by the same rules: misspelled keys
    (:func:`check_keys`), the MindFormers rules on model dims and parallel settings
    (:func:`autotune.config.mf_rules.model_rules`) and the config-level LayerSetting rules
    (:func:`autotune.config.layer_setting.validate_config_level`: types, input limits, MTP,
    micro_batch_num, schedulers, seq pipe, mcore-only rules). The layout keys (offset, recompute
    values, patterns) are checked when the layout is derived
    (:func:`autotune.config.layout.layout_from_config`).

    Args:
        data: the YAML's top-level mapping.
        source: where it came from (for messages).
        hbm_mib: overrides ``context.max_device_memory`` when given (MiB).
        version: MindFormers release whose rules apply ("1.5", "1.7", "1.8").
        spelling: refuse misspelled keys (:func:`check_keys`); ``check --emulate`` turns it off.

    Raises:
        ConfigError: a required key is missing or has the wrong type/range, a top-level key is not
            a string (R_TYPE), a key is misspelled, or a rule above is broken; the message names the
            YAML path and the rule.
    """
    if not isinstance(data, dict):
        raise ConfigError(f"top level must be a mapping, got {type(data).__name__}", field=source,
                          value=None, rule="yaml")
    _check_top_keys(data)
    key_warnings = check_keys(data) if spelling else []
    missing = missing_dims_error(data, source if source != "<memory>" else None)
    if missing is not None:
        raise missing
    inputs = inputs_from_yaml(data)
    warnings = (key_warnings + run_mode_warnings(data) + older_release_warnings(data) + model_rules(data, version)
                + validate_config_level(inputs, version))
    interleave = bool(inputs.pipeline_interleave) if inputs.pipeline_interleave is not None else bool(
        inputs.vpp and inputs.vpp > 1)
    vpp_raw = inputs.vpp
    ctx_mem = get_path(data, "context.max_device_memory", None)
    if hbm_mib is None and ctx_mem is not None:
        hbm_mib = parse_memory_mib(ctx_mem, field="context.max_device_memory")
    cfg = TrainingConfig(
        source=source,
        num_layers=inputs.num_layers,
        pipeline_stage=inputs.pp,
        micro_batch_num=1 if inputs.micro_batch_num is None else inputs.micro_batch_num,
        pp_interleave_num=(vpp_raw or 1) if interleave else 1,
        pp_interleave_num_raw=vpp_raw,
        pipeline_interleave=interleave,
        pipeline_scheduler=str(inputs.pipeline_scheduler),
        offset=inputs.offset,
        recompute=inputs.recompute,
        select_recompute=inputs.select_recompute,
        select_comm_recompute=inputs.select_comm_recompute,
        recompute_slice_activation=bool(inputs.recompute_slice_activation),
        mp_comm_recompute=_bool(data, "recompute_config.mp_comm_recompute", True),
        parallel_optimizer_comm_recompute=_bool(data, "recompute_config.parallel_optimizer_comm_recompute", False),
        data_parallel=_int(data, "parallel_config.data_parallel", 1, null_ok=False),
        model_parallel=_int(data, "parallel_config.model_parallel", 1, null_ok=False),
        context_parallel=_int(data, "parallel_config.context_parallel", 1, null_ok=False),
        expert_parallel=_int(data, "parallel_config.expert_parallel", 1, null_ok=False),
        use_seq_parallel=_bool(data, "parallel_config.use_seq_parallel", False),
        seq_split_num=1 if inputs.seq_split_num is None else inputs.seq_split_num,
        batch_size=read_batch_size(data),
        enable_parallel_optimizer=_bool(data, "parallel.enable_parallel_optimizer", False),
        optimizer_weight_shard_size=_int(
            data, "parallel.parallel_optimizer_config.optimizer_weight_shard_size", -1, minimum=None),
        use_legacy=inputs.model_mode == "legacy",
        hbm_mib=hbm_mib,
        dims=_read_dims(data),
        warnings=tuple(warnings),
        raw=data,
        layer_inputs=inputs,
        mindformers_version=version,
    )
    if cfg.dims is not None and cfg.dims.num_experts:    # a first_k_dense_replace default or an ignored key
        cfg = cfg.model_copy(update={"warnings": cfg.warnings + tuple(dense_layers(data, cfg.dims.num_experts)[2])})
    return cfg


def read_training_yaml(path: str | Path, *, hf_config: str | Path | None = None) -> dict[str, Any]:
    """:func:`read_yaml` plus the Hugging Face ``config.json`` of ``pretrained_model_dir`` (or
    ``hf_config``) merged into ``model.model_config`` as MindFormers merges it
    (:func:`autotune.config.model_dims.merge_hf_config`).

    Raises:
        ConfigError: see :func:`read_yaml`; rule ``R_HF_CONFIG`` for an unreadable HF config.
    """
    return merge_hf_config(read_yaml(path), path, hf_config)


def load_config(path: str | Path, *, hbm_mib: float | None = None,
                hf_config: str | Path | None = None, version: str = "1.8") -> TrainingConfig:
    """Read and validate a MindFormers training YAML file.

    Args:
        path: the YAML file.
        hbm_mib: HBM budget override in MiB (default: ``context.max_device_memory``).
        version: MindFormers release whose rules apply ("1.5", "1.7", "1.8").
        hf_config: a Hugging Face ``config.json`` with the model dims (default: the one in
            ``pretrained_model_dir`` or beside the YAML, when the YAML names a
            ``pretrained_model_dir``).

    Raises:
        ConfigError: see :func:`read_yaml` and :func:`config_from_dict`; rule ``R_HF_CONFIG`` when
            the dims come from a ``pretrained_model_dir`` whose ``config.json`` is missing.
    """
    return config_from_dict(read_training_yaml(path, hf_config=hf_config), source=str(path),
                            hbm_mib=hbm_mib, version=version)
