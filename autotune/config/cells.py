"""Registry of the decoder-layer cell names of each MindFormers model family.

``select_recompute`` / ``select_comm_recompute`` patterns name cells and operators *inside one
decoder layer* (``feed_forward\\.mul``, ``.*\\.norm``; matching rules in
:func:`autotune.cost.select_ops.pattern_matches`). The names differ per model class: Llama-style
legacy models have ``attention_norm`` / ``attention`` / ``ffn_norm`` / ``feed_forward``; GLM2/3/4
and YiZhao (also legacy!) have ``input_layernorm`` / ``self_attention`` /
``post_attention_layernorm`` / ``mlp``; GPT-2 has ``layernorm1`` / ``attention`` / ``layernorm2`` /
``output``; r1.7+ mcore models have ``input_layernorm`` / ``self_attention`` /
``pre_mlp_layernorm`` / ``mlp``. So MindFormers' default patterns (legacy ``feed_forward\\.mul``,
``feed_forward\\.w1\\.activation\\.silu``; comm ``.*\\.norm``) recompute nothing on a GLM model,
and ``.*\\.norm`` matches nothing on GPT-2 (its norm op is ``layer_norm``).

Each :class:`CellFamily` maps *roles* (what the analytic profile prices: the two norms, the Q / K /
V / output projections, the attention core, the MLP's gate / up / activation / product / down
projections, MoE router and experts) to the op path of that family, and lists ``extra`` paths
(other attributes of the same cells: reshapes, casts, adds, ...) that a user pattern may name
without saving anything the model prices. The names were read from the model code in the
MindFormers repository (``source`` of each family: file @ branch, the decoder-layer class and the
classes it builds); they are facts about that code, not copies of it.

Lookup is by ``model.arch.type`` (legacy) or, for ``use_legacy: False``, the mcore family;
:func:`family_for` returns None for a class not in the registry: then ``check`` says so and the
cost model credits select / comm recompute no saving.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from autotune.config.patterns import path_matches, pattern_scope
from autotune.errors import ConfigError

#: Roles priced by the analytic profile (autotune.profile.analytic.op_tables).
ROLES = ("attn_norm", "q", "k", "v", "qkv", "core", "o", "ffn_norm", "gate", "up", "gate_up", "act",
         "mul", "down", "router", "e_gate", "e_up", "e_gate_up", "e_act", "e_mul", "e_down",
         "s_gate", "s_up", "s_gate_up", "s_act", "s_mul", "s_down")


@dataclass(frozen=True)
class CellFamily:
    """Decoder-layer op paths of one model family (module docstring).

    ``roles``: role -> op path (names joined by "."); ``extra``: other op / cell paths of the layer;
    ``arch_types``: the ``model.arch.type`` values (or mcore model names) it covers; ``mode``:
    ``legacy`` or ``mcore``; ``source``: where the names were read (file @ branch: classes).
    """

    name: str
    arch_types: tuple[str, ...]
    mode: str
    source: str
    roles: dict[str, str]
    extra: tuple[str, ...] = ()
    paths: tuple[str, ...] = field(init=False)

    def __post_init__(self) -> None:
        bad = set(self.roles) - set(ROLES)
        if bad:
            raise ValueError(f"unknown roles {sorted(bad)} in family {self.name}")
        seen = dict.fromkeys(list(self.roles.values()) + list(self.extra))
        object.__setattr__(self, "paths", tuple(seen))


_NORM = ("add", "cast", "rcast", "mean", "mul", "mul2", "rsqrt", "square")   # LlamaRMSNorm attributes
_LINEAR = ("matmul", "bias_add", "cast", "reshape")                         # mindformers Linear


def _cell(prefix: str, attrs: tuple[str, ...]) -> tuple[str, ...]:
    return (prefix,) + tuple(f"{prefix}.{a}" for a in attrs)


def _linears(*names: str) -> tuple[str, ...]:
    out: tuple[str, ...] = ()
    for n in names:
        out += _cell(n, _LINEAR)
    return out


_LLAMA_ATTN_EXTRA = (_cell("attention", ("add", "batch_matmul", "batch_matmul_q_k", "cast", "cast_attn",
                                         "mul", "reshape", "softmax", "split_qkv", "tile_kv", "transpose",
                                         "merger_head_transpose", "apply_rotary_emb", "transpose_back"))
                     + _linears("attention.wq", "attention.wk", "attention.wv", "attention.wo",
                                "attention.w_qkv")
                     + _cell("attention_norm", _NORM) + _cell("ffn_norm", _NORM))
_LLAMA_FFN_EXTRA = (_cell("feed_forward", ("cast", "reshape", "split", "mul", "activate", "swiglu",
                                           "expand_dims", "w13_concat"))
                    + _linears("feed_forward.w1", "feed_forward.w2", "feed_forward.w3",
                               "feed_forward.w_gate_hidden")
                    + _cell("feed_forward.w1.activation", ("silu", "sigmoid", "mul"))
                    + _cell("feed_forward.activate", ("silu", "sigmoid", "mul")))
_LLAMA_ROLES = {"attn_norm": "attention_norm.norm", "q": "attention.wq.matmul",
                "k": "attention.wk.matmul", "v": "attention.wv.matmul",
                "core": "attention.flash_attention", "o": "attention.wo.matmul",
                "ffn_norm": "ffn_norm.norm", "gate": "feed_forward.w1.matmul",
                "act": "feed_forward.w1.activation.silu", "up": "feed_forward.w3.matmul",
                "mul": "feed_forward.mul", "down": "feed_forward.w2.matmul"}
_LLAMA_SRC = ("mindformers/models/llama/llama_transformer.py, llama_layer.py, llama_interleave.py @ "
              "r1.3.0-master: LLamaDecodeLayer(Interleave), LLamaAttention, LlamaFeedForward, "
              "LlamaRMSNorm; mindformers/modules/layers.py: Linear")
_GLM_ROLES = {"attn_norm": "input_layernorm.norm", "qkv": "self_attention.query_key_value.matmul",
              "core": "self_attention.flash_attention", "o": "self_attention.dense.matmul",
              "ffn_norm": "post_attention_layernorm.norm", "gate_up": "mlp.dense_h_to_4h.matmul",
              "act": "mlp.activation_func.silu", "mul": "mlp.activation_func.mul",
              "down": "mlp.dense_4h_to_h.matmul"}
_GLM_EXTRA = (_cell("self_attention", ("core_attention", "split_qkv", "apply_rotary_emb", "tile_kv",
                                       "kv_transpose", "transpose_back", "merger_head_transpose"))
              + _cell("self_attention.core_attention", ("mul_mask", "add", "batch_matmul_q_k",
                                                         "batch_matmul", "softmax",
                                                         "merger_head_transpose"))
              + _linears("self_attention.query_key_value", "self_attention.wq", "self_attention.wk",
                         "self_attention.wv", "self_attention.dense", "mlp.dense_h_to_4h",
                         "mlp.dense_left", "mlp.dense_right", "mlp.dense_4h_to_h")
              + _cell("mlp", ("split", "activation_func")) + _cell("mlp.activation_func.silu",
                                                                   ("silu", "sigmoid", "mul"))
              + _cell("input_layernorm", _NORM) + _cell("post_attention_layernorm", _NORM))
_MOE_LEGACY_ROLES = {"router": "feed_forward.routed_experts.router",
                     "e_gate": "feed_forward.routed_experts.ffn.w1.matmul",
                     "e_act": "feed_forward.routed_experts.ffn.w1.activation.silu",
                     "e_up": "feed_forward.routed_experts.ffn.w3.matmul",
                     "e_mul": "feed_forward.routed_experts.ffn.mul",
                     "e_down": "feed_forward.routed_experts.ffn.w2.matmul",
                     "s_gate": "feed_forward.shared_experts.w1.matmul",
                     "s_act": "feed_forward.shared_experts.w1.activation.silu",
                     "s_up": "feed_forward.shared_experts.w3.matmul",
                     "s_mul": "feed_forward.shared_experts.mul",
                     "s_down": "feed_forward.shared_experts.w2.matmul"}
_MLA_LEGACY = {"attn_norm": "attention_norm.norm", "qkv": "attention.q2l_proj.matmul",
               "core": "attention.flash_attention", "o": "attention.wo.matmul",
               "ffn_norm": "ffn_norm.norm"}
_MLA_EXTRA = (_linears("attention.q2l_proj", "attention.l2q_nope_proj", "attention.l2q_pe_proj",
                       "attention.kv2l_k_pe", "attention.kv2l_latent_kv", "attention.lkv2kv_k_nope",
                       "attention.lkv2kv_v", "attention.wo")
              + _cell("attention.lq_norm", ("norm",) + _NORM) + _cell("attention.lkv_norm", ("norm",) + _NORM)
              + _cell("attention", ("pe_concat", "value_concat", "softmax", "batch_matmul",
                                    "batch_matmul_q_k", "mul", "add", "dim_slice_3d", "dim_slice_4d"))
              + _cell("feed_forward", ("mul", "add", "cast", "reshape", "sigmoid", "routed_experts",
                                       "shared_experts", "shared_experts_gate"))
              + _cell("attention_norm", _NORM) + _cell("ffn_norm", _NORM))
_MCORE_ROLES = {"attn_norm": "input_layernorm.norm", "qkv": "self_attention.linear_qkv",
                "core": "self_attention.core_attention", "o": "self_attention.linear_proj",
                "ffn_norm": "pre_mlp_layernorm.norm", "gate_up": "mlp.linear_fc1",
                "act": "mlp.activation_func.silu", "mul": "mlp.mul", "down": "mlp.linear_fc2",
                "router": "mlp.router", "e_gate_up": "mlp.experts.linear_fc1",
                "e_act": "mlp.activation_func.silu", "e_mul": "mlp.mul",
                "e_down": "mlp.experts.linear_fc2", "s_gate_up": "mlp.shared_experts.linear_fc1",
                "s_act": "mlp.shared_experts.activation_func.silu", "s_mul": "mlp.shared_experts.mul",
                "s_down": "mlp.shared_experts.linear_fc2"}

FAMILIES: tuple[CellFamily, ...] = (
    CellFamily("llama", ("LlamaForCausalLM", "LlamaModel", "InternLMForCausalLM", "InternLM2ForCausalLM",
                         "TelechatForCausalLM", "Baichuan7BV2ForCausalLM", "Baichuan13BV2ForCausalLM",
                         "LlamaForCausalLMWithLora"),
               "legacy",
               _LLAMA_SRC + "; research/internlm(2), research/telechat(2,3)/telechat_transformer.py "
               "(TelechatDecodeLayer: same names), research/baichuan2/baichuan2_13b.py "
               "(Baichuan13BDecodeLayer: same names)",
               dict(_LLAMA_ROLES), _LLAMA_ATTN_EXTRA + _LLAMA_FFN_EXTRA
               + _linears("attention.w", "attention.wk_v") + ("attention.split_kv",)),
    CellFamily("llama_concat", (), "legacy",
               _LLAMA_SRC + "; with qkv_concat: True: LLamaAttention.w_qkv and LlamaFeedForward(ffn_concat="
               "True).w_gate_hidden + activate (also TelechatFeedForward)",
               {**{k: v for k, v in _LLAMA_ROLES.items() if k not in ("q", "k", "v", "gate", "up", "act")},
                "qkv": "attention.w_qkv.matmul", "gate_up": "feed_forward.w_gate_hidden.matmul",
                "act": "feed_forward.activate.silu"},
               tuple(p for p in _LLAMA_ATTN_EXTRA + _LLAMA_FFN_EXTRA
                     if not p.startswith(("feed_forward.w1", "feed_forward.w3")))),
    CellFamily("qwen1", ("QwenForCausalLM",), "legacy",
               "research/qwen/qwen_model.py @ r1.3.0: QwenDecodeLayer(LLamaDecodeLayer), QwenFeedForward "
               "(w1, w3, silu = LlamaSiLU cell applied to w3's output, mul, w2)",
               {**{k: v for k, v in _LLAMA_ROLES.items() if k != "act"}, "act": "feed_forward.silu.silu"},
               _LLAMA_ATTN_EXTRA + _cell("feed_forward", ("cast", "mul", "silu"))
               + _cell("feed_forward.silu", ("silu", "sigmoid", "mul"))
               + _linears("feed_forward.w1", "feed_forward.w2", "feed_forward.w3")),
    CellFamily("mixtral", ("MixtralForCausalLM",), "legacy",
               _LLAMA_SRC + "; mindformers/modules/transformer/moe.py: MoEV2 (router, ffn = the experts' "
               "LlamaFeedForward)",
               {**{k: v for k, v in _LLAMA_ROLES.items() if k not in ("gate", "act", "up", "mul", "down")},
                "router": "feed_forward.router", "e_gate": "feed_forward.ffn.w1.matmul",
                "e_act": "feed_forward.ffn.w1.activation.silu", "e_up": "feed_forward.ffn.w3.matmul",
                "e_mul": "feed_forward.ffn.mul", "e_down": "feed_forward.ffn.w2.matmul"},
               _LLAMA_ATTN_EXTRA + _cell("feed_forward", ("ffn", "router", "concat", "split", "add_loss"))),
    CellFamily("llama_moe_shared", (), "legacy",
               _LLAMA_SRC + "; LLamaDecodeLayer with shared experts builds LlamaFeedForwardWithMoE "
               "(routed_experts = MoEV2 with ffn = LlamaFeedForward, shared_experts = LlamaFeedForward)",
               {**{k: v for k, v in _LLAMA_ROLES.items() if k not in ("gate", "act", "up", "mul", "down")},
                **_MOE_LEGACY_ROLES},
               _LLAMA_ATTN_EXTRA + _cell("feed_forward", ("mul", "add", "cast", "reshape", "sigmoid",
                                                          "routed_experts", "shared_experts",
                                                          "shared_experts_gate"))),
    CellFamily("deepseek", ("DeepseekV2ForCausalLM", "DeepseekV3ForCausalLM"), "legacy",
               "research/deepseek2/deepseek2_model.py @ r1.5.0, research/deepseek3/deepseek2_model.py @ "
               "r1.5.0: DeepSeekV2DecodeLayer (attention_norm, attention = DeepSeekV2Attention (MLA: "
               "q2l_proj, lq_norm, l2q_*_proj, kv2l_*, lkv_norm, lkv2kv_*, flash_attention, wo), ffn_norm, "
               "feed_forward = LlamaFeedForwardWithMoE (routed_experts, shared_experts) or LlamaFeedForward)",
               {**_MLA_LEGACY, **{k: v for k, v in _LLAMA_ROLES.items()
                                  if k in ("gate", "act", "up", "mul", "down")}, **_MOE_LEGACY_ROLES},
               _MLA_EXTRA + _LLAMA_FFN_EXTRA),
    CellFamily("glm2", ("ChatGLM2ForConditionalGeneration", "GLMForConditionalGeneration",
                        "ChatGLM3ForConditionalGeneration", "ChatGLM4ForConditionalGeneration",
                        "ChatGLM2WithPtuning2"), "legacy",
               "mindformers/models/glm2/glm2_transformer.py, glm2_modules.py @ r1.3.0-master: ChatGLM2Block "
               "(input_layernorm, self_attention = ChatGLM2SelfAttention (query_key_value or wq/wk/wv, "
               "flash_attention, core_attention, dense), post_attention_layernorm, mlp = ChatGLM2MLP "
               "(dense_h_to_4h, activation_func = ChatGLM2SwiGLU (silu, mul), dense_4h_to_h))",
               dict(_GLM_ROLES), _GLM_EXTRA),
    CellFamily("yizhao", ("YiZhaoForCausalLM", "YiZhaoDPO"), "legacy",
               "research/yizhao/yizhao_transformer.py, yizhao_modules.py @ r1.5.0: YiZhaoBlock "
               "(input_layernorm, self_attention = YiZhaoSelfAttention, post_attention_layernorm, mlp = "
               "YiZhaoMLP (dense_left, dense_right, activation_func = YiZhaoSwiGLU, dense_4h_to_h) or "
               "YiZhaoConcatMLP (dense_h_to_4h, activation_func, dense_4h_to_h))",
               {**_GLM_ROLES, "gate_up": "mlp.dense_h_to_4h.matmul"}, _GLM_EXTRA),
    CellFamily("gpt2", ("GPT2LMHeadModel", "GPT2ForSequenceClassification"), "legacy",
               "mindformers/models/gpt2/gpt2.py, gpt_modules.py @ r1.3.0/r1.5.0: GPTTransformerDecoderLayer"
               "(TransformerEncoderLayer) of mindformers/modules/transformer/transformer.py (layernorm1, "
               "attention = MultiHeadAttention (dense1/2/3, softmax, projection), layernorm2, output = "
               "FeedForward (mapping with the GELU activation, projection)); LayerNorm's op is layer_norm",
               {"attn_norm": "layernorm1.layer_norm", "q": "attention.dense1.matmul",
                "k": "attention.dense2.matmul", "v": "attention.dense3.matmul",
                "core": "attention.softmax", "o": "attention.projection.matmul",
                "ffn_norm": "layernorm2.layer_norm", "up": "output.mapping.matmul",
                "act": "output.mapping.activation", "down": "output.projection.matmul"},
               _cell("attention", ("batch_matmul", "flash_attention", "softmax_cast", "prob_dropout",
                                   "add", "mul", "real_div", "sub"))
               + _linears("attention.dense1", "attention.dense2", "attention.dense3",
                          "attention.projection", "output.mapping", "output.projection")
               + _cell("output", ("dropout",)) + _cell("layernorm1", ("mean", "square", "sqrt"))
               + _cell("layernorm2", ("mean", "square", "sqrt"))),
    CellFamily("mcore", ("<mcore>",), "mcore",
               "mindformers/parallel_core/training_graph/transformer/{transformer_layer,attention,mlp,"
               "moe/moe_layer,moe/shared_experts,multi_latent_attention}.py @ r1.7.0-master: "
               "TransformerLayer (input_layernorm, self_attention (linear_qkv | MLA projections, "
               "core_attention, linear_proj), pre_mlp_layernorm, mlp = MLP (linear_fc1, activation_func, "
               "mul, linear_fc2) or MoELayer (router, experts, shared_experts))",
               dict(_MCORE_ROLES),
               _cell("self_attention", ("q_layernorm", "k_layernorm", "linear_q_proj", "linear_q_down_proj",
                                        "linear_q_up_proj", "linear_kv_down_proj", "linear_kv_up_proj",
                                        "q_layernorm.norm", "kv_layernorm", "kv_layernorm.norm",
                                        "split_qkv", "apply_rotary_pos_emb"))
               + _cell("mlp", ("split", "add", "router", "experts", "shared_experts", "activation_func",
                               "shared_experts.shared_experts_gate", "shared_experts.mul_shared_gate"))
               + ("input_layernorm", "pre_mlp_layernorm", "hidden_states_dropout")),
)

_BY_ARCH = {a: f for f in FAMILIES for a in f.arch_types}
_BY_NAME = {f.name: f for f in FAMILIES}
MCORE = next(f for f in FAMILIES if f.mode == "mcore")


def family_for(arch_type: str | None, mode: str, *, moe: bool = False,
               shared: bool = False, concat: bool = False) -> CellFamily | None:
    """The family of a model: ``mcore`` for every ``use_legacy: False`` model (one layer class for
    all of them), else by ``model.arch.type``. A Llama-class MoE (``LLamaDecodeLayer`` with
    ``moe_config.expert_num`` > 1) uses ``MoEV2`` (Mixtral names: ``feed_forward.ffn.*``) without
    shared experts and ``LlamaFeedForwardWithMoE`` (``feed_forward.routed_experts`` /
    ``shared_experts``) with them. None when the class is unknown."""
    if mode == "mcore":
        return MCORE
    if arch_type is None:   # no model class named (a hand-written sketch): MindFormers' legacy
        arch_type = "LlamaForCausalLM"   # default select patterns name Llama's cells
    fam = _BY_ARCH.get(arch_type)
    if fam is not None and fam.name == "llama" and moe:
        return _BY_NAME["llama_moe_shared"] if shared else _BY_NAME["mixtral"]
    if fam is not None and fam.name == "llama" and concat:
        return _BY_NAME["llama_concat"]
    return fam


def matches(pattern: str, path: str, *, cells: bool = True,
            yaml_field: str = "recompute_config.select_recompute") -> bool:
    """Does a MindFormers select pattern match the op / cell at ``path``? Segments are split on
    the literal ``\\.`` and full-matched against the path's names with ``regex`` under MindFormers'
    1 s timeout, charged to the enclosing pattern budget (:func:`autotune.config.patterns.path_matches`;
    a timeout is no match); with ``cells`` (``select_recompute``) a pattern shorter than the path
    matches a cell on it. An invalid regular expression matches nothing (the caller reports it).

    Raises:
        ConfigError: R_PATTERN_BUDGET (``yaml_field``) when the config's matches have used their budget.
    """
    try:
        return path_matches(pattern, path.split("."), cells=cells, path=yaml_field)
    except ConfigError as exc:
        if exc.rule == "R_SELECT_PATTERN":
            return False
        raise


def pattern_hits(fam: CellFamily, pattern: str, *, cells: bool = True,
                 yaml_field: str = "recompute_config.select_recompute") -> list[str]:
    """The paths of ``fam`` a pattern matches (cells and ops, registry order; one pattern budget,
    see :func:`matches`)."""
    with pattern_scope():
        return [p for p in fam.paths if matches(pattern, p, cells=cells, yaml_field=yaml_field)]


def role_hits(fam: CellFamily, pattern: str, *, cells: bool = True) -> list[str]:
    """The priced roles whose op a pattern matches (select: also via a matched parent cell)."""
    with pattern_scope():
        return [r for r, p in fam.roles.items() if matches(pattern, p, cells=cells)]


def _get(data: dict, path: str):
    cur = data
    for part in path.split("."):
        if not isinstance(cur, dict) or part not in cur:
            return None
        cur = cur[part]
    return cur


def family_from_yaml(data: dict) -> tuple[CellFamily | None, str | None]:
    """(family, model class name) of a training YAML: ``use_legacy: False`` -> mcore; else
    ``model.arch.type`` with the MoE layout (``moe_config.expert_num`` / ``n_routed_experts`` > 1:
    Mixtral names without shared experts, DeepSeek-style ``routed_experts`` / ``shared_experts``
    with them). (None, name) when the class is not in the registry."""
    if not isinstance(data, dict):
        return None, None
    if data.get("use_legacy") is False:
        return MCORE, "mcore"
    arch = _get(data, "model.arch.type")
    arch = arch if isinstance(arch, str) else None
    experts = 0
    for p in ("model.model_config.num_experts", "model.model_config.n_routed_experts", "moe_config.expert_num"):
        v = _get(data, p)
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            experts = int(v)
            break
    shared = 0
    for p in ("model.model_config.n_shared_experts", "model.model_config.shared_expert_num",
              "moe_config.shared_expert_num"):
        v = _get(data, p)
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            shared = int(v)
            break
    concat = _get(data, "model.model_config.qkv_concat") is True
    fam = family_for(arch, "legacy", moe=experts > 1, shared=shared > 0, concat=concat)
    return fam, arch


def _active(value) -> bool:
    """Does a formatted select value apply to any layer (True, or a count > 0 anywhere)?"""
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)):
        return value > 0
    if isinstance(value, (list, tuple)):
        return any(_active(v) for v in value)
    return bool(value)


def select_no_match(fam: CellFamily | None, arch: str | None, key: str, pattern: str,
                    value, *, yaml_field: str | None = None) -> str | None:
    """The ``W_SELECT_NO_MATCH`` message for a select (``key`` = ``select_recompute``) or comm
    (``select_comm_recompute``) pattern that is active (``value`` applies to some layer) and names
    no cell / op of the family's decoder layer; None when it matches, is inactive, or the family is
    unknown (the caller then uses its legacy-vs-mcore check). A match that times out is no match.

    Raises:
        ConfigError: R_PATTERN_BUDGET (``yaml_field``, default ``recompute_config.<key>``) when the
            config's pattern matches have used their budget (:func:`matches`).
    """
    if fam is None or not _active(value):
        return None
    cells = key == "select_recompute"
    if pattern_hits(fam, pattern, cells=cells, yaml_field=yaml_field or f"recompute_config.{key}"):
        return None
    what = "cell or op" if cells else "op"
    tops = ", ".join(dict.fromkeys(p.split(".")[0] for p in fam.roles.values()))
    return (f"pattern {pattern!r} matches no {what} of a {arch or fam.name} decoder layer "
            f"({fam.name} cell names: {tops}), so it recomputes nothing")
