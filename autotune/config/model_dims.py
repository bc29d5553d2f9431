"""Model dimensions and memory-relevant settings of a MindFormers training YAML, as every release
spells them.

MindFormers has two config layouts: legacy ``model.model_config`` (``num_layers``, ``num_heads``,
``n_kv_heads``, ``moe_config.*``, ...) and the r1.7+ mcore one (``use_legacy: False``; Hugging Face
spellings such as ``num_hidden_layers``, ``num_attention_heads``, ``moe_intermediate_size``,
``num_experts``, ``n_shared_experts``, ``moe_router_topk``, ``mtp_num_layers``; the model may come
from ``pretrained_model_dir``/``config.json``). :data:`ALIASES` lists, per quantity, the spellings
that MindFormers maps to one TransformerConfig field
(``mindformers/parallel_core/transformer_config_utils.py: COMMON_CONFIG_MAPPING`` @ r1.7.0+,
plus the legacy config classes' own names); the first spelling present wins.

``pretrained_model_dir`` (r1.7+, ``mindformers/models/build_config.py: merge_model_config``): the
Hugging Face ``config.json`` in that folder is read and the YAML's ``model_config`` overrides it.
:func:`merge_hf_config` does the same; it looks for ``<pretrained_model_dir>/config.json``
(relative to the working directory, then to the YAML's folder), then ``config.json`` beside the
YAML, or the file given with ``--hf-config``.

Counts may be written as integer-valued floats (``shared_expert_num: 8.0``, as MindFormers'
research configs do); YAML anchors are resolved by the YAML loader and a ``${a.b.c}`` string
value by :func:`resolve_refs` (dotted path into the same YAML).
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from autotune.config.layer_setting import Warning_
from autotune.config.layer_types import misspelt_hint, short_repr
from autotune.config.limits import MAX_INT
from autotune.errors import ConfigError

MC = "model.model_config."

#: The dims an analytic profile cannot do without (its error lists them).
REQUIRED_DIMS = ("hidden_size", "num_heads", "intermediate_size", "seq_length", "vocab_size")
#: quantity -> spellings (model_config keys unless dotted), first present wins.
ALIASES: dict[str, tuple[str, ...]] = {
    "num_layers": ("num_layers", "num_hidden_layers", "n_layer"),
    "hidden_size": ("hidden_size", "n_embd"),
    "num_heads": ("num_heads", "num_attention_heads", "n_head"),
    "n_kv_heads": ("n_kv_heads", "num_key_value_heads", "num_query_groups", "multi_query_group_num"),
    "head_dim": ("head_dim", "kv_channels"),
    "intermediate_size": ("intermediate_size", "ffn_hidden_size"),
    "seq_length": ("seq_length",),
    "vocab_size": ("vocab_size", "padded_vocab_size"),
    "num_experts": ("num_experts", "n_routed_experts", "num_moe_experts", "expert_num",
                    "moe_config.expert_num"),
    "num_experts_per_tok": ("num_experts_per_tok", "moe_router_topk", "num_experts_chosen",
                            "moe_config.num_experts_chosen"),
    "moe_intermediate_size": ("moe_intermediate_size", "moe_ffn_hidden_size",
                              "moe_config.moe_intermediate_size"),
    "shared_expert_num": ("n_shared_experts", "shared_expert_num", "moe_config.shared_expert_num"),
    "first_k_dense_replace": ("first_k_dense_replace", "moe_config.first_k_dense_replace"),
    "mtp_num_layers": ("mtp_num_layers", "mtp_depth", "num_nextn_predict_layers"),
    "q_lora_rank": ("q_lora_rank",),
    "kv_lora_rank": ("kv_lora_rank",),
    "qk_nope_head_dim": ("qk_nope_head_dim", "qk_head_dim"),
    "qk_rope_head_dim": ("qk_rope_head_dim", "qk_pos_emb_head_dim"),
    "v_head_dim": ("v_head_dim",),
    "param_init_type": ("param_init_type", "params_dtype"),
    "compute_dtype": ("compute_dtype", "compute_type"),  # compute_type: iFlytekSpark (research, r1.0)
    "softmax_compute_type": ("softmax_compute_type", "softmax_compute_dtype"),
    "embedding_init_type": ("embedding_init_type",),
    "capacity_factor": ("moe_expert_capacity_factor", "capacity_factor", "moe_config.capacity_factor"),
}

#: Hugging Face ``config.json`` keys read by :func:`merge_hf_config` (every spelling above that is
#: a model_config key, plus the MLP / tie flags).
HF_KEYS = {k for names in ALIASES.values() for k in names if "." not in k} | {
    "hidden_act", "tie_word_embeddings", "max_position_embeddings", "moe_shared_expert_intermediate_size",
    "use_flash_attention", "attention_dropout", "torch_dtype", "architectures", "model_type"}

DTYPE_BYTES = {"float32": 4, "fp32": 4, "float16": 2, "fp16": 2, "bfloat16": 2, "bf16": 2}
_REF = re.compile(r"^\$\{([A-Za-z0-9_.]+)\}$")
GELU_ACTS = ("gelu", "fast_gelu", "fastgelu", "gelu_new", "relu")


class ModelDims(BaseModel):
    """Model dimensions and memory-relevant settings read by the analytic profile.

    Counts have no unit; ``*_bytes`` are bytes per element. ``family`` is ``model.arch.type`` (or
    the mcore ``model_type`` / ``architectures``), used to look up layer cell names
    (:mod:`autotune.config.cells`). Memory settings (see docs/profiles.md, "Memory keys"):
    ``param_dtype_bytes`` / ``embedding_dtype_bytes`` weights and gradients, ``compute_dtype_bytes``
    activations, ``softmax_dtype_bytes`` the attention probabilities without flash attention,
    ``use_flash_attention``, ``attention_dropout`` / ``hidden_dropout`` (dropout masks),
    ``gated_mlp`` (SwiGLU: 3 matrices; else 2, GPT-2's GELU MLP), ``capacity_factor`` (0 =
    dropless routing), ``frozen_base`` (LoRA / ``pet_config``: base weights have no gradient or
    optimizer state), ``vocab_emb_dp`` (embedding and LM head replicated over model parallel),
    ``gradient_accumulation_shard``, ``gradient_accumulation_steps``, ``context_parallel_algo``,
    ``qkv_concat`` (fused projection cells), ``moe_tokens_split_tp`` (legacy
    ``moe_config.ep_extend_tp``, default True: the experts spread over expert x model parallel, so
    each device routes 1/t of its micro-batch's tokens).
    ``notes`` lists what was read with its source key (printed by ``autotune profile``).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    hidden_size: int
    num_heads: int
    n_kv_heads: int
    head_dim: int
    intermediate_size: int
    seq_length: int
    vocab_size: int
    num_experts: int = 0
    num_experts_per_tok: int = 0
    moe_intermediate_size: int = 0
    shared_expert_num: int = 0
    first_k_dense_replace: int = 0
    mtp_num_layers: int = 0
    tie_word_embeddings: bool = False
    # MLA (DeepSeek-V2/V3 style); 0 = plain MHA/GQA.
    q_lora_rank: int = 0
    kv_lora_rank: int = 0
    qk_nope_head_dim: int = 0
    qk_rope_head_dim: int = 0
    v_head_dim: int = 0
    compute_dtype_bytes: int = 2
    param_dtype_bytes: int = 4
    embedding_dtype_bytes: int = 4
    softmax_dtype_bytes: int = 4
    use_flash_attention: bool = True
    attention_dropout: float = 0.0
    hidden_dropout: float = 0.0
    gated_mlp: bool = True
    capacity_factor: float = 0.0
    frozen_base: bool = False
    vocab_emb_dp: bool = True
    gradient_accumulation_shard: bool = False
    gradient_accumulation_steps: int = 1
    context_parallel_algo: str = "colossalai_cp"
    moe_tokens_split_tp: bool = False
    qkv_concat: bool = False
    family: str | None = None
    notes: tuple[str, ...] = ()


# ---------------------------------------------------------------------------------------------
# raw access
# ---------------------------------------------------------------------------------------------

def _node(data: dict[str, Any], path: str) -> Any:
    cur: Any = data
    for part in path.split("."):
        if not isinstance(cur, dict) or part not in cur:
            return None
        cur = cur[part]
    return cur


def resolve_refs(data: dict[str, Any], value: Any, *, field: str, _depth: int = 0) -> Any:
    """Resolve a ``${a.b.c}`` string (a dotted path into ``data``); other values pass through.

    Raises:
        ConfigError: the path does not exist or the references loop (rule R_REFERENCE).
    """
    if not isinstance(value, str):
        return value
    m = _REF.match(value.strip())
    if not m:
        return value
    target = _node(data, m.group(1))
    if target is None or _depth > 8:
        raise ConfigError(f"reference {value!r} does not resolve to a value in this YAML",
                          field=field, value=value, rule="R_REFERENCE")
    return resolve_refs(data, target, field=field, _depth=_depth + 1)


def find(data: dict[str, Any], quantity: str) -> tuple[Any, str | None]:
    """The first spelling of ``quantity`` (:data:`ALIASES`) present: (value, YAML path) or (None, None)."""
    for name in ALIASES[quantity]:
        path = name if "." in name else MC + name
        val = _node(data, path)
        if val is not None:
            return resolve_refs(data, val, field=path), path
    return None, None


def missing_dims_hint(data: Any) -> str:
    """Which of the analytic profile's required dims the YAML lacks, and a near-miss key of its
    ``model.model_config`` for the first one (:func:`~autotune.config.layer_types.misspelt_hint`):
    ``"; missing: hidden_size; found 'hiden_size' there: a misspelling of 'hidden_size'?"``, or ``""``."""
    if not isinstance(data, dict):
        return ""
    try:
        missing = [q for q in REQUIRED_DIMS if find(data, q)[0] is None]
    except ConfigError:
        return ""
    if not missing:
        return ""
    return f"; missing: {', '.join(missing)}" + misspelt_hint(data, ALIASES[missing[0]])


def as_count(val: Any, path: str, *, minimum: int = 0) -> int:
    """An integer count; an integer-valued float (``8.0``) is accepted as MindFormers does.

    Raises:
        ConfigError: not a whole number (rule R_TYPE), below ``minimum`` or above
            :data:`~autotune.config.limits.MAX_INT` (int32, the README's input limit; rule R_RANGE).
    """
    if isinstance(val, float) and val.is_integer():
        val = int(val)
    if isinstance(val, bool) or not isinstance(val, int):
        raise ConfigError(f"must be an integer, got {short_repr(val)}; fix: write a whole number",
                          field=path, value=val, rule="R_TYPE")
    if val < minimum:
        raise ConfigError(f"must be >= {minimum}, got {short_repr(val)}; fix: use a value >= {minimum}",
                          field=path, value=val, rule="R_RANGE")
    if val > MAX_INT:
        raise ConfigError(f"must be <= {MAX_INT} (int32; autotune's input limit), got {short_repr(val)}; "
                          "fix: use a real size", field=path, value=val, rule="R_RANGE")
    return val


def as_number(val: Any, path: str, *, low: float = 0.0, high: float = float(MAX_INT),
              low_ok: bool = True) -> float:
    """A finite real number in ``[low, high]`` (``(low, high]`` when not ``low_ok``).

    Raises:
        ConfigError: not a number (rule R_TYPE); NaN, infinite or outside the range (rule R_RANGE).
    """
    if isinstance(val, bool) or not isinstance(val, (int, float)):
        hint = "write a number"
        if isinstance(val, str) and re.fullmatch(r"\s*[-+]?[0-9.]+[eE][0-9]+\s*", val):
            hint = ("YAML 1.1 (PyYAML, as MindFormers loads it) reads an exponent without a sign as "
                    "a string; write e.g. 1.0e+3")
        raise ConfigError(f"must be a number, got {short_repr(val)}; fix: {hint}", field=path,
                          value=val, rule="R_TYPE")
    try:
        num = float(val)
    except OverflowError:                     # an integer beyond float's range
        num = math.inf if val > 0 else -math.inf
    ok = math.isfinite(num) and (num >= low if low_ok else num > low) and num <= high
    if not ok:
        rng = f"{'[' if low_ok else '('}{_num(low)}, {_num(high)}]"
        raise ConfigError(f"must be a finite number in {rng}, got {short_repr(val)}; fix: use a value "
                          f"in {rng}", field=path, value=val, rule="R_RANGE")
    return num


def count(data: dict[str, Any], quantity: str, default: int | None = None, *, minimum: int = 0) -> int:
    """:func:`find` + :func:`as_count`; ``default`` when absent (None = required).

    Raises:
        ConfigError: missing (rule R_MISSING, naming every spelling) or not a count (R_TYPE /
            R_RANGE, :func:`as_count`).
    """
    val, path = find(data, quantity)
    if val is None:
        if default is None:
            names = ALIASES[quantity]
            raise ConfigError("required key is missing" + (
                f" (also looked for {', '.join(names[1:])})" if len(names) > 1 else "")
                + misspelt_hint(data, names), field=MC + names[0], value=None, rule="R_MISSING")
        return default
    return as_count(val, path or quantity, minimum=minimum)


def _dtype(data: dict[str, Any], quantity: str, default: int) -> tuple[int, str | None]:
    val, path = find(data, quantity)
    if val is None:
        return default, None
    key = str(val).lower().replace("mstype.", "")
    if key not in DTYPE_BYTES:
        raise ConfigError(f"unknown dtype {val!r}; known: {', '.join(sorted(DTYPE_BYTES))}",
                          field=path, value=val, rule="R_TYPE")
    return DTYPE_BYTES[key], path


def _seq_length(data: dict[str, Any]) -> tuple[int, str]:
    val, path = find(data, "seq_length")
    if val is not None:
        return as_count(val, path or "seq_length", minimum=1), path or ""
    # mcore templates: the dataset handler's seq_length (the model takes what the dataset gives)
    found: list[tuple[int, str]] = []

    def walk(node: Any, where: str) -> None:
        if isinstance(node, dict):
            for k, v in node.items():
                if k == "seq_length" and isinstance(v, int) and not isinstance(v, bool) and v > 0:
                    found.append((v, f"{where}.{k}"))
                else:
                    walk(v, f"{where}.{k}")
        elif isinstance(node, list):
            for i, v in enumerate(node):
                walk(v, f"{where}[{i}]")

    walk(data.get("train_dataset"), "train_dataset")
    if found:
        val, where = max(found)
        return as_count(val, where, minimum=1), where
    mpe = _node(data, MC + "max_position_embeddings")
    if mpe is not None:
        return as_count(mpe, MC + "max_position_embeddings", minimum=1), MC + "max_position_embeddings"
    raise ConfigError("required key is missing (also looked for the train_dataset's seq_length and "
                      "max_position_embeddings)", field=MC + "seq_length", value=None, rule="R_MISSING")


# ---------------------------------------------------------------------------------------------
# Hugging Face config.json (pretrained_model_dir)
# ---------------------------------------------------------------------------------------------

def hf_config_path(data: dict[str, Any], yaml_path: str | Path | None,
                   hf_config: str | Path | None = None) -> tuple[Path | None, list[str]]:
    """Where the Hugging Face ``config.json`` of this YAML is: (path or None, places looked at)."""
    if hf_config is not None:
        return Path(hf_config), [str(hf_config)]
    pmd = data.get("pretrained_model_dir") or _node(data, "model.pretrained_model_dir") or \
        _node(data, MC + "pretrained_model_dir")
    looked: list[str] = []
    here = Path(yaml_path).resolve().parent if yaml_path else None
    if isinstance(pmd, str) and pmd.strip():
        cands = [Path(pmd) / "config.json"]
        if here is not None and not Path(pmd).is_absolute():
            cands.append(here / pmd / "config.json")
        if here is not None:
            cands.append(here / "config.json")
        for c in cands:
            looked.append(str(c))
            if c.is_file():
                return c, looked
    return None, looked


def merge_hf_config(data: dict[str, Any], yaml_path: str | Path | None = None,
                    hf_config: str | Path | None = None) -> dict[str, Any]:
    """The YAML with the Hugging Face ``config.json`` merged into ``model.model_config`` (YAML keys
    win, as MindFormers' ``merge_model_config``); unchanged when there is none.

    Only the keys autotune reads (:data:`HF_KEYS`) are merged. The merged mapping gets the key
    ``model.model_config._hf_config`` = the file read.

    Raises:
        ConfigError: ``--hf-config`` / the found file is missing or not a JSON object (rule
            ``R_HF_CONFIG``, field ``--hf-config`` or ``pretrained_model_dir``).
    """
    path, _looked = hf_config_path(data, yaml_path, hf_config)
    if path is None:
        return data
    field = "--hf-config" if hf_config is not None else "pretrained_model_dir"
    if not path.is_file():
        raise ConfigError(f"Hugging Face config not found: {str(path)!r}", field=field,
                          value=str(path), rule="R_HF_CONFIG")
    try:
        hf = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path} is not JSON: {exc}", field=field, value=str(path),
                          rule="R_HF_CONFIG") from None
    if not isinstance(hf, dict):
        raise ConfigError(f"{path} must hold a JSON object", field=field, value=str(path),
                          rule="R_HF_CONFIG")
    out = dict(data)
    model = dict(out.get("model") or {})
    mc = dict(model.get("model_config") or {})
    merged = {k: v for k, v in hf.items() if k in HF_KEYS}
    merged.update(mc)
    merged["_hf_config"] = str(path)
    model["model_config"] = merged
    out["model"] = model
    return out


def missing_dims_error(data: dict[str, Any], yaml_path: str | Path | None,
                       hf_config: str | Path | None = None) -> ConfigError | None:
    """The error to raise when the layer count is absent: names the ``config.json`` that is missing
    and what to pass instead (``--hf-config PATH`` or the YAML key). None when a count is given."""
    if find(data, "num_layers")[0] is not None:
        return None
    mc = _node(data, "model.model_config") or {}
    sub = [k for k in ("llm_model", "text_model", "text_config", "vision_model") if isinstance(mc, dict) and k in mc]
    if sub:
        return ConfigError(
            f"multimodal model (model_config has {', '.join(sub)}): the vision encoder and the "
            f"cross-model pipeline split are not modelled; tune the language model alone (a YAML "
            f"whose model.model_config holds the language model's dims), or set "
            f"model.model_config.num_layers and the dims by hand",
            field="model.model_config", value=sorted(mc)[:6], rule="R_UNSUPPORTED")
    pmd = data.get("pretrained_model_dir")
    if isinstance(pmd, str) and pmd.strip():
        _p, looked = hf_config_path(data, yaml_path, hf_config)
        return ConfigError(
            f"the model comes from pretrained_model_dir {pmd!r}, whose Hugging Face config is "
            f"missing (looked for {', '.join(looked)}); pass --hf-config PATH/config.json, or set "
            f"model.model_config.num_layers (num_hidden_layers) and the other dims",
            field="pretrained_model_dir", value=pmd, rule="R_HF_CONFIG")
    return None


# ---------------------------------------------------------------------------------------------
# dims
# ---------------------------------------------------------------------------------------------

def _flag(data: dict[str, Any], path: str, default: bool) -> bool:
    val = resolve_refs(data, _node(data, path), field=path)
    if val is None:
        return default
    if not isinstance(val, bool):
        raise ConfigError(f"must be true or false, got {short_repr(val)}", field=path, value=val, rule="R_TYPE")
    return val


def _num(x: float) -> str:
    """``x`` for a message: a whole number in full (2147483647, not 2.14748e+09), else ``:g``."""
    return str(int(x)) if math.isfinite(x) and x.is_integer() else f"{x:g}"


def _float(data: dict[str, Any], paths: tuple[str, ...], default: float, *, high: float = float(MAX_INT)) -> float:
    """The first of ``paths`` present as a finite number in [0, ``high``] (:func:`as_number`);
    ``default`` when none is.

    Raises:
        ConfigError: not a number (R_TYPE), NaN, infinite, negative or above ``high`` (R_RANGE).
    """
    for p in paths:
        val = resolve_refs(data, _node(data, p), field=p)
        if val is None:
            continue
        return as_number(val, p, high=high)
    return default


def family_of(data: dict[str, Any]) -> str | None:
    """``model.arch.type`` (legacy), else the mcore ``model_type`` / first ``architectures`` /
    ``trainer.model_name``; None when the YAML names no model class."""
    arch = _node(data, "model.arch.type")
    if isinstance(arch, str) and arch:
        return arch
    for key in (MC + "model_type", MC + "architectures", "trainer.model_name"):
        val = _node(data, key)
        if isinstance(val, list) and val:
            val = val[0]
        if isinstance(val, str) and val:
            return val
    return None


def _intermediate_size(data: dict[str, Any], hidden: int, notes: list[str]) -> int:
    """The FFN width: ``intermediate_size``, else GPT-2's ``expand_ratio`` · h, else Llama's
    LlamaFeedForward rule (llama_layer.py: hidden_dim = 4h, ffn_dim_multiplier, multiple_of); the
    derived ones add a note.

    Raises:
        ConfigError: a count out of range (:func:`as_count`); ``ffn_dim_multiplier`` not a finite
            number > 0 (R_TYPE / R_RANGE); a derived width above
            :data:`~autotune.config.limits.MAX_INT` (R_RANGE, naming the key that makes it so).
    """
    inter_v, inter_p = find(data, "intermediate_size")
    if inter_v is not None:
        return as_count(inter_v, inter_p or "intermediate_size", minimum=1)
    ratio_v = resolve_refs(data, _node(data, MC + "expand_ratio"), field=MC + "expand_ratio")
    if ratio_v is not None:            # GPT-2: f = expand_ratio · h
        inter = as_count(ratio_v, MC + "expand_ratio", minimum=1) * hidden
        _derived_in_range(inter, MC + "expand_ratio", ratio_v)
        notes.append(f"intermediate_size = expand_ratio x hidden_size = {inter}")
        return inter
    mult_p, mo_p = MC + "ffn_dim_multiplier", MC + "multiple_of"
    mult = resolve_refs(data, _node(data, mult_p), field=mult_p)
    mo_v = resolve_refs(data, _node(data, mo_p), field=mo_p)
    multiple_of = 256 if mo_v is None else as_count(mo_v, mo_p, minimum=1)
    base = 4 * hidden
    if mult is not None:
        base = int((as_number(mult, mult_p, low_ok=False) + 0.01) * base)
    base = int(2 * base / 3)
    inter = multiple_of * ((base + multiple_of - 1) // multiple_of)
    _derived_in_range(inter, mult_p if mult is not None else mo_p, mult if mult is not None else multiple_of)
    notes.append(f"intermediate_size from hidden_size/ffn_dim_multiplier/multiple_of = {inter}")
    return inter


def _derived_in_range(inter: int, path: str, value: Any) -> None:
    """Refuse a derived FFN width outside [1, MAX_INT], naming the key ``path`` that makes it so."""
    if not 1 <= inter <= MAX_INT:
        raise ConfigError(f"gives intermediate_size {inter:,} with the hidden_size, outside [1, {MAX_INT}] "
                          f"(int32; autotune's input limit), got {short_repr(value)}; fix: use a real "
                          "value or set intermediate_size", field=path, value=value, rule="R_RANGE")


def _flash_attention(data: dict[str, Any], notes: list[str]) -> bool | Any:
    """``use_flash_attention``, or when absent the config class's default (with a note): legacy
    config classes default False (LlamaConfig, GLM2, GPT2, TeleChat), mcore MFModelConfig True, a
    sketch without a model class True."""
    fa = _node(data, MC + "use_flash_attention")
    if fa is None:
        if data.get("use_legacy") is False:        # mcore MFModelConfig defaults True
            fa, why = True, "the mcore default"
        elif family_of(data) is None:               # no model class: a hand-written sketch
            fa, why = True, "no model.arch.type: assumed"
        else:
            fa, why = False, "the legacy config classes' default"
        notes.append(f"use_flash_attention absent: {fa} ({why})")
    return fa


def read_dims(data: dict[str, Any]) -> ModelDims | None:
    """Read :class:`ModelDims` from a (HF-merged) YAML mapping; None when it has no ``hidden_size``.

    Raises:
        ConfigError: a count, dtype or flag of the wrong type (field = its YAML path) or a required
            dim missing (rule R_MISSING); every count is an integer in [minimum, int32 max] and
            every real number finite and in range (rules R_TYPE / R_RANGE, field = its YAML path).
    """
    if find(data, "hidden_size")[0] is None:
        return None
    notes: list[str] = []
    hidden = count(data, "hidden_size", minimum=1)
    heads = count(data, "num_heads", minimum=1)
    kv = count(data, "n_kv_heads", heads, minimum=1)
    if _node(data, MC + "multi_query_attention") is False:   # GLM2: groups only with MQA on
        kv = heads
    head_dim = count(data, "head_dim", hidden // heads, minimum=1)
    act = str(_node(data, MC + "hidden_act") or "").lower()
    gated = _node(data, MC + "gated_linear_unit")
    gated_mlp = bool(gated) if isinstance(gated, bool) else act not in GELU_ACTS
    inter = _intermediate_size(data, hidden, notes)
    seq, seq_path = _seq_length(data)
    if not seq_path.startswith(MC + "seq_length"):
        notes.append(f"seq_length {seq} from {seq_path}")
    vocab = count(data, "vocab_size", minimum=1)
    moe = data.get("moe_config")
    if moe is not None and not isinstance(moe, dict):
        raise ConfigError("must be a mapping", field="moe_config", value=moe, rule="R_TYPE")
    experts = count(data, "num_experts", 0)
    if experts <= 1:       # MoEConfig's default expert_num is 1 = no MoE
        experts = 0
    topk = count(data, "num_experts_per_tok", 1 if experts else 0)
    moe_inter = count(data, "moe_intermediate_size", inter if experts else 0, minimum=1 if experts else 0)
    shared = count(data, "shared_expert_num", 0)
    sh_size = _node(data, MC + "moe_shared_expert_intermediate_size")
    if experts and not shared and sh_size:
        shared = max(1, round(as_count(sh_size, MC + "moe_shared_expert_intermediate_size") / moe_inter))
    first_dense, dense_notes, _ = dense_layers(data, experts)
    notes += dense_notes
    mtp = count(data, "mtp_num_layers", 0)
    cdt, _ = _dtype(data, "compute_dtype", 2)
    pdt, pdt_path = _dtype(data, "param_init_type", 4)
    edt, edt_path = _dtype(data, "embedding_init_type", pdt)
    sdt, _ = _dtype(data, "softmax_compute_type", 4)
    if _node(data, MC + "attention_softmax_in_fp32") is True:
        sdt = 4
    tie = _node(data, MC + "tie_word_embeddings")
    untie = _node(data, MC + "untie_embeddings_and_output_weights")
    tied = bool(tie) if tie is not None else (untie is False)
    cf_default = 0.0
    if experts and _node(data, "moe_config") is not None:
        cf_default = 1.1               # MoEConfig template default capacity_factor (legacy MoE)
    cf = _float(data, tuple(p if "." in p else MC + p for p in ALIASES["capacity_factor"]), cf_default)
    if experts and _dropless(data):
        cf = 0.0
    pet = _node(data, MC + "pet_config")
    frozen = isinstance(pet, dict) and bool(pet.get("pet_type"))
    if frozen:
        notes.append(f"pet_config {pet.get('pet_type')}: base weights frozen (no gradient, no optimizer state)")
    fa = _flash_attention(data, notes)
    return ModelDims(
        hidden_size=hidden, num_heads=heads, n_kv_heads=kv, head_dim=head_dim,
        intermediate_size=inter, seq_length=seq, vocab_size=vocab, num_experts=experts,
        num_experts_per_tok=topk, moe_intermediate_size=moe_inter, shared_expert_num=shared,
        first_k_dense_replace=first_dense if experts else 0, mtp_num_layers=mtp,
        tie_word_embeddings=tied,
        q_lora_rank=count(data, "q_lora_rank", 0), kv_lora_rank=count(data, "kv_lora_rank", 0),
        qk_nope_head_dim=count(data, "qk_nope_head_dim", 0),
        qk_rope_head_dim=count(data, "qk_rope_head_dim", 0), v_head_dim=count(data, "v_head_dim", 0),
        compute_dtype_bytes=cdt, param_dtype_bytes=pdt, embedding_dtype_bytes=edt,
        softmax_dtype_bytes=sdt, use_flash_attention=bool(fa),
        attention_dropout=_float(data, (MC + "attention_dropout", MC + "attention_dropout_rate",
                                        MC + "attention_dropout_prob"), 0.0, high=1.0),
        hidden_dropout=_float(data, (MC + "hidden_dropout", MC + "hidden_dropout_rate",
                                     MC + "hidden_dropout_prob"), 0.0, high=1.0),
        gated_mlp=gated_mlp, capacity_factor=cf, frozen_base=frozen,
        vocab_emb_dp=_flag(data, "parallel_config.vocab_emb_dp", True),
        gradient_accumulation_shard=_flag(
            data, "parallel.parallel_optimizer_config.gradient_accumulation_shard", False),
        gradient_accumulation_steps=count_path(data, "runner_config.gradient_accumulation_steps", 1),
        context_parallel_algo=str(_node(data, "parallel_config.context_parallel_algo") or "colossalai_cp"),
        moe_tokens_split_tp=bool(experts) and data.get("use_legacy") is not False and _flag(
            data, "moe_config.ep_extend_tp", True),
        qkv_concat=_node(data, MC + "qkv_concat") is True, family=family_of(data), notes=tuple(notes),
    )


#: Legacy model classes (``model.arch.type``) that read ``moe_config.first_k_dense_replace``: the
#: research DeepSeek decoder layer ``DeepSeekV2DecodeLayer`` builds a dense FFN where ``layer_id <
#: first_k_dense_replace`` (research/deepseek2 r1.3.0+, research/deepseek3/deepseek2_model.py r1.5.0+;
#: ``DeepseekV3ForCausalLM`` trains ``TrainingDeepseekV3ForCausalLM(DeepseekV2ForCausalLM)``). No
#: other legacy class reads the key (Llama/Mixtral, Qwen2-MoE, TeleChat2 MoE: every layer MoE).
LEGACY_DENSE_READERS = ("DeepseekV2ForCausalLM", "DeepseekV3ForCausalLM")
#: Legacy ``MoEConfig``'s default (``modules/transformer/moe.py`` r1.3.0+, the YAML template's
#: ``moe_config`` section r1.5.0+): ``True``, which ``layer_id < True`` counts as 1.
LEGACY_DENSE_DEFAULT = (1, "legacy MoEConfig defaults it to True, which DeepSeekV2DecodeLayer's layer_id < "
                           "first_k_dense_replace counts as 1: modules/transformer/moe.py r1.3.0+, the YAML "
                           "template r1.5.0+")
#: mcore config classes (``model_config.model_type``) whose own ``first_k_dense_replace`` default is
#: a number: (default, class, where); every other mcore class leaves TransformerConfig's None (0).
MCORE_DENSE_DEFAULTS: dict[str, tuple[int, str, str]] = {
    "deepseek_v3": (3, "DeepseekV3Config", "models/deepseek3/configuration_deepseek_v3.py r1.6.0+"),
    "deepseek_mtp": (3, "DeepseekV3Config", "models/deepseek3/configuration_deepseek_v3.py r1.7.0+"),
    "glm4_moe": (1, "Glm4MoeConfig", "models/glm4_moe/configuration_glm4_moe.py r1.7.0+"),
    "telechat3": (3, "TeleChat3Config", "models/telechat3/configuration_telechat3.py, master"),
    "telechat3_mtp": (3, "TeleChat3Config", "models/telechat3/configuration_telechat3.py, master"),
}
_FK = "first_k_dense_replace"


def _present(data: dict[str, Any], path: str) -> tuple[bool, Any]:
    """(whether the key is written, its value with ``${...}`` resolved); null counts as written."""
    parent, _, key = path.rpartition(".")
    node = _node(data, parent) if parent else data
    if not isinstance(node, dict) or key not in node:
        return False, None
    return True, resolve_refs(data, node[key], field=path)


def _ignored(path: str, value: Any, why: str) -> Warning_:
    return Warning_("W_KEY_IGNORED", path, f"{_FK} {short_repr(value)} is not read: {why}; the model has "
                                           "no dense layer from it (remove the key)")


def dense_layers(data: dict[str, Any], experts: int = 0) -> tuple[int, list[str], list[Warning_]]:
    """The dense layers before the MoE ones, as MindFormers builds them: (count, notes, warnings).

    Which key counts and its default depend on the model (module constants): legacy research
    DeepSeek reads ``moe_config.first_k_dense_replace`` (absent: 1, :data:`LEGACY_DENSE_DEFAULT`);
    other legacy classes read no such key (0; a written one is ``W_KEY_IGNORED``); mcore reads
    ``model_config.first_k_dense_replace`` (absent: its config class's default,
    :data:`MCORE_DENSE_DEFAULTS`, else None = 0); ``moe_config``'s is ignored there. A YAML with no
    model class (a sketch) is read as written, either spelling, 0 when absent. Null is 0 everywhere
    (``None`` is falsy in both code paths). A default that is not 0 adds ``W_FIRST_K_DENSE_DEFAULT``
    (``experts`` > 1 only: a dense model has no MoE layer to place after them).

    Raises:
        ConfigError: R_TYPE / R_RANGE (:func:`_dense_count`); R_FIRST_K_DENSE_MCORE on an mcore model:
            a float (``[0] * first_k_dense_replace`` is a TypeError: r1.6.0 training gpt_layer_specs,
            r1.7.0+ TransformerConfig) or a value above num_layers (TransformerConfig ValueError, r1.6.0+).
    """
    mc_path, moe_path = MC + _FK, "moe_config." + _FK
    (mc_has, mc_val), (moe_has, moe_val) = _present(data, mc_path), _present(data, moe_path)
    notes: list[str] = []
    warns: list[Warning_] = []
    if data.get("use_legacy") is False:
        if moe_has and experts:
            warns.append(_ignored(moe_path, moe_val, "mcore models take it from model.model_config "
                                                     "(moe_config is not converted into TransformerConfig)"))
        return _mcore_dense(data, mc_has, mc_val, experts, notes, warns), notes, warns
    arch = _node(data, "model.arch.type")
    if not isinstance(arch, str) or not arch:          # a sketch: read as written
        val, path = (mc_val, mc_path) if mc_val is not None else (moe_val, moe_path)
        return (_dense_count(val, path, notes) if val is not None else 0), notes, warns
    if arch not in LEGACY_DENSE_READERS:
        for has, val, path in ((mc_has, mc_val, mc_path), (moe_has, moe_val, moe_path)):
            if has and val is not None and experts:
                warns.append(_ignored(path, val, f"{arch} has no dense-layer option (only the research "
                                                 f"DeepSeek classes read moe_config.{_FK}): every layer is MoE"))
        return 0, notes, warns
    if mc_has and mc_val is not None and experts:
        warns.append(_ignored(mc_path, mc_val, f"{arch} reads moe_config.{_FK} only"))
    if moe_has:
        return (0 if moe_val is None else _dense_count(moe_val, moe_path, notes)), notes, warns
    n, why = LEGACY_DENSE_DEFAULT
    if experts:
        _default_used(moe_path, n, why, notes, warns)
    return n, notes, warns


def _default_used(path: str, n: int, why: str, notes: list[str], warns: list[Warning_]) -> None:
    layers = f"{n} dense layer{'s' if n != 1 else ''}"
    notes.append(f"{_FK} absent: {layers} ({why})")
    warns.append(Warning_("W_FIRST_K_DENSE_DEFAULT", path,
                          f"not set: MindFormers builds {layers} before the MoE layers ({why}); fix: write "
                          f"{path.split('.')[-2]}.{_FK}: {n} (or the count you mean) to say so"))


def _mcore_dense(data: dict[str, Any], has: bool, val: Any, experts: int, notes: list[str],
                 warns: list[Warning_]) -> int:
    """:func:`dense_layers` of an mcore model (``use_legacy: False``)."""
    path = MC + _FK
    layers = count(data, "num_layers", 0)
    model_type = _node(data, MC + "model_type")
    if not has:
        n, cls, where = MCORE_DENSE_DEFAULTS.get(model_type if isinstance(model_type, str) else "", (0, "", ""))
        if n and experts:
            _default_used(path, n, f"model_type {model_type!r} takes {cls}'s default: {where}", notes, warns)
        val, what = n, f"not set, so {cls}'s default {n} (model_type {model_type!r})"
    else:
        what = f"got {short_repr(val)}"
    if val is None:
        return 0
    if isinstance(val, float) and val:
        whole = str(int(val)) if val.is_integer() else "a whole number"
        raise ConfigError(f"must be an integer on an mcore model, {what}; fix: write {whole} "
                          f"(MindFormers builds [0] * {_FK}, a TypeError for a float: r1.6.0 gpt_layer_specs, "
                          "r1.7.0+ TransformerConfig)", field=path, value=val, rule="R_FIRST_K_DENSE_MCORE")
    n = _dense_count(val, path, notes)
    if layers and n > layers:
        raise ConfigError(f"must not exceed num_layers ({layers}) on an mcore model, {what}; fix: write a "
                          f"count <= {layers} (MindFormers' TransformerConfig raises ValueError: '{_FK}({n}) "
                          f"cannot be bigger than num_layers({layers})' r1.6.0, 'should not be bigger' r1.7.0+)",
                          field=path, value=val, rule="R_FIRST_K_DENSE_MCORE")
    return n


def _dense_count(fk: Any, path: str, notes: list[str]) -> int:
    """A written ``first_k_dense_replace``: a whole number >= 0; a boolean counts 0 / 1 as MindFormers
    counts it (legacy MoEConfig's own default is ``True``), with a note.

    MindFormers uses it as a number without checking its type: mcore builds ``[0] *
    first_k_dense_replace`` and legacy DeepSeek compares ``layer_id < first_k_dense_replace``. A string
    fails in both (TypeError), so it is refused here instead of being skipped.

    Raises:
        ConfigError: not a number (rule R_TYPE), fractional (R_TYPE), negative or above int32 (R_RANGE).
    """
    if isinstance(fk, bool):
        notes.append(f"{_FK} {fk} from {path}: {int(fk)} dense layer(s), as MindFormers counts a boolean")
        return int(fk)
    if not isinstance(fk, (int, float)):
        raise ConfigError(f"must be an integer, got {short_repr(fk)}; fix: write a whole number (MindFormers "
                          "uses it as a count: mcore builds [0] * first_k_dense_replace, legacy DeepSeek compares "
                          "layer_id < first_k_dense_replace; a string or a list fails there)", field=path,
                          value=fk, rule="R_TYPE")
    return as_count(fk, path)


def read_batch_size(data: dict[str, Any]) -> int:
    """``runner_config.batch_size``, the micro-batch size: 1 when absent (MindFormers' RunnerConfig
    template default).

    MindFormers does not check it: its trainer multiplies it into the batch it hands to MindSpore's
    ``Dataset.batch`` (``base_trainer._check_global_batch_size_for_auto_parallel``, r1.3.0 to master),
    which refuses anything but an int >= 1. So a float (``2.0`` included), a string or null fails
    there, and a boolean would be multiplied as 0 / 1: each is refused here, never read as 1.

    Raises:
        ConfigError: not an integer (rule R_TYPE), below 1 or above int32 (rule R_RANGE).
    """
    path = "runner_config.batch_size"
    runner = data.get("runner_config")
    if not isinstance(runner, dict) or "batch_size" not in runner:
        return 1
    val = resolve_refs(data, runner["batch_size"], field=path)
    if isinstance(val, bool) or not isinstance(val, int):
        raise ConfigError(f"must be an integer, got {short_repr(val)}; fix: write a whole number >= 1 (MindFormers "
                          "multiplies it into the batch size MindSpore's Dataset.batch takes, which must be an int)",
                          field=path, value=val, rule="R_TYPE")
    return as_count(val, path, minimum=1)


def count_path(data: dict[str, Any], path: str, default: int) -> int:
    """A count at a dotted YAML path (integer-valued floats accepted); ``default`` when absent."""
    val = resolve_refs(data, _node(data, path), field=path)
    return default if val is None else as_count(val, path, minimum=1)


def _dropless(data: dict[str, Any]) -> bool:
    """MoE routing without a capacity buffer: mcore (``use_legacy: False``, dropless unless
    ``moe_expert_capacity_factor`` is set), or legacy grouped-matmul experts (``use_gmm``)."""
    if data.get("use_legacy") is False:
        return _node(data, MC + "moe_expert_capacity_factor") is None
    return bool(_node(data, "moe_config.use_gmm"))


def unread_memory_keys(data: dict[str, Any]) -> list[Warning_]:
    """``W_MEMORY_KEY_IGNORED`` for each memory-relevant key the YAML sets that the analytic
    profile does not model (docs/profiles.md, "Memory keys")."""
    out = []
    swap = data.get("swap_config")
    if isinstance(swap, dict) and swap.get("swap"):
        out.append(Warning_("W_MEMORY_KEY_IGNORED", "swap_config.swap",
                            "swap (layer / op offload to host) is not modelled: the activations of "
                            "swapped layers are counted as kept on the device, so the predicted peak "
                            "is an upper bound"))
    return out
