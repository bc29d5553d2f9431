"""Analytic layer profile from model dimensions, parallel sizes and a device preset.

Every number below is an assumption you can override (``overrides``/``--set KEY=VALUE``); the
profile records them all under ``assumptions`` and the CLI prints them.

Formulas (per micro-batch, per device; s = seq_length / context_parallel, b = micro-batch size,
h = hidden, a = heads, g = kv heads, d = head dim, f = FFN width, t = model_parallel, c = bytes of
the compute dtype):

- **Parameters** (Narayanan et al. 2021, Eq. 2 generalized to GQA/SwiGLU/MoE/MLA): attention
  ``h·a·d + 2·h·g·d + a·d·h`` (MLA: the LoRA projections), SwiGLU MLP ``3·h·f``, MoE layer
  ``E·3·h·f_moe + S·3·h·f_moe + h·E`` (E routed, S shared experts), 2 norms ``2h``; embedding and
  LM head ``V·h`` each. Per device: divided by t; routed experts also by expert_parallel.
- **Static bytes/parameter** (cost-model reference §5.1, MindSpore working assumption): fp32 weight
  4 + fp32 accumulated gradient 4 + AdamW m, v 8 = 16; with ``enable_parallel_optimizer`` the weight
  and optimizer state are sharded over the optimizer group d_os: ``12/d_os + 4``, plus the gathered
  weights below (``c`` bytes per parameter when d_os > 1).
- **Activations** (Korthikanti et al. 2022, §4 accounting, adapted to SwiGLU/GQA and flash attention,
  no dropout): attention ``c·s·b·h`` (norm input, /t with sequence parallel) + ``c·s·b·h`` (norm
  output = QKV input, gathered) + ``c·s·b·(a+2g)·d/t`` (Q, K, V) + ``c·s·b·a·d/t`` (attention output)
  + ``4·s·b·a/t`` (softmax statistics); MLP ``c·s·b·h`` (norm input) + ``c·s·b·h`` (norm output) +
  ``2·c·s·b·f/t`` (gate, up) + ``2·c·s·b·f/t`` (SiLU output, product). Select recompute (SiLU, mul)
  drops the last ``2·c·s·b·f/t``; comm recompute (the norms and their all-gather) drops the two norm
  outputs ``2·c·s·b·h``; full recompute keeps the layer input ``c·s·b·h`` (/t with sequence
  parallel or ``recompute_slice_activation``) and needs one layer's full activation as workspace
  in backward. MoE layers use ``f = top_k·f_moe + S·f_moe``.
- **Time**: forward FLOPs ``2·s·b·P_active + 2·s²·b·a·d`` (causal attention: half of QKᵀ and AV),
  divided by t; backward = 2 × forward (Narayanan et al. 2021, 6·N rule); time = FLOPs / (device
  peak × ``efficiency``). Recompute extra time: full = one forward; select = 0.04 × backward and
  comm = 0.125 × backward (SAPP's default coefficients, cost-model reference §3.4).
- **B/W split** (``bwd_w_frac``, for zero_bubble_v; Qi et al. ICLR 2024 §2): every weight GEMM
  Y = X·W of the forward has two backward GEMMs of the same FLOPs, dX = dY·Wᵀ (B, input gradient)
  and dW = Xᵀ·dY (W, weight gradient); attention's core (QKᵀ, softmax, AV) has no weights and is
  all B. So W = ``2·s·b·P_active/t`` FLOPs and ``bwd_w_frac = 2·s·b·P_active / (2·(2·s·b·P_active
  + core))`` (< 0.5, backward = 2 × forward as above). Tail: the LM head GEMM splits evenly (0.5);
  MTP modules add their layer's W. Recompute replay is never W.
- **Tail**: final norm + LM head (``2·s·b·h·V/t`` FLOPs) + loss; activation ``2·c·s·b·h`` +
  fp32 logits and their softmax ``8·s·b·V/t``. MTP modules (r1.7+ semantics) sit on the last stage
  and are added to the tail. **Head**: embedding table, activation ``c·s·b·h/t``.
- **Optimizer-parallel gathered weights** (``enable_parallel_optimizer`` with a shard group
  d_os > 1; MindSpore optimizer parallel gathers each sharded weight before use, reference §5.1
  "gathered-weight transients"): a layer's gathered weights ``W_g = c·P_dev`` (P_dev = the layer's
  per-device parameters after tensor/expert sharding, norms excluded: they stay below
  ``parallel_optimizer_threshold``) are held once per step between its forward and backward, so
  they are added to the layer's static memory. ``parallel_optimizer_comm_recompute: true`` replays
  the all-gather inside fully recomputed layers instead: such a layer's static memory drops by
  ``W_g`` (``full.static_delta_mib = −W_g``), its backward re-gathers them (``full.workspace_mib +=
  W_g``) and pays one ring all-gather per micro-batch, ``Σ_groups W_g·(d−1)/d / allgather_gbps``
  (``full.extra_ms``). Assumptions (no public measurement): gathered in the compute dtype, held
  once per step rather than per micro-batch (micro-batches reuse one gather), bandwidth
  ``allgather_gbps`` (0 = the device's p2p bandwidth).
- **p2p**: one activation ``c·s·b·h`` (/t with sequence parallel) over the device's p2p bandwidth.
"""

from __future__ import annotations

from typing import Any

from autotune.config.training import TrainingConfig, get_path
from autotune.errors import ConfigError
from autotune.profile.devices import Device, get_device
from autotune.profile.schema import EndPart, LayerKind, ModelProfile, OpSaving, RecomputeOption
from autotune.units import BYTES_PER_MIB

DEFAULT_ASSUMPTIONS: dict[str, float] = {
    "efficiency": 0.45,             # achieved fraction of peak FLOP/s (MFU-like), all comm included
    "micro_batch_size": 1,          # runner_config.batch_size when present
    "weight_bytes": 4.0,            # fp32 master weight
    "grad_bytes": 4.0,              # fp32 accumulated gradient
    "optimizer_bytes": 8.0,         # AdamW m and v in fp32
    "stage_const_mib": 2048.0,      # runtime, communication buffers, fragmentation per device
    "select_extra_frac": 0.04,      # SAPP default: select recompute adds 4 % of backward
    "comm_extra_frac": 0.125,       # SAPP default: comm recompute adds 12.5 % of backward
    "softmax_stat_bytes": 4.0,      # flash attention keeps fp32 log-sum-exp per head and token
    "allgather_gbps": 0.0,          # optimizer-parallel all-gather bandwidth (GB/s); 0 = device p2p
}

#: Valid range of each assumption: (lowest, highest, lowest is allowed, must be a whole number).
ASSUMPTION_RANGES: dict[str, tuple[float, float, bool, bool]] = {
    "efficiency": (0.0, 1.0, False, False),
    "micro_batch_size": (1.0, float("inf"), True, True),
    "weight_bytes": (0.0, float("inf"), True, False),
    "grad_bytes": (0.0, float("inf"), True, False),
    "optimizer_bytes": (0.0, float("inf"), True, False),
    "stage_const_mib": (0.0, float("inf"), True, False),
    "select_extra_frac": (0.0, float("inf"), True, False),
    "comm_extra_frac": (0.0, float("inf"), True, False),
    "softmax_stat_bytes": (0.0, float("inf"), True, False),
    "allgather_gbps": (0.0, float("inf"), True, False),
}


def _check_assumption(key: str, val: float) -> float:
    lo, hi, lo_ok, whole = ASSUMPTION_RANGES[key]
    ok = (val >= lo if lo_ok else val > lo) and val <= hi and val == val
    if whole and ok:
        ok = float(val).is_integer()
    if not ok:
        rng = f"{'[' if lo_ok else '('}{lo:g}, {hi:g}]" + (", a whole number" if whole else "")
        raise ConfigError(f"must be in {rng}, got {val!r}", field=f"--set {key}", value=val,
                          rule="assumption")
    return float(val)


def _mib(x: float) -> float:
    return x / BYTES_PER_MIB


# ---------------------------------------------------------------------------------------------
# Published closed forms (each reproduces a case of shared/cases/validation_cases.json)
# ---------------------------------------------------------------------------------------------

def korthikanti_layer_activation_bytes(s: int, b: int, h: int, a: int, t: int = 1, *,
                                       sequence_parallel: bool = False,
                                       recompute: str = "none") -> float:
    """Activation bytes one transformer layer keeps per micro-batch (16-bit activations, 1-byte
    dropout masks, GPT block with 4h GeLU MLP).

    Source: Korthikanti et al., "Reducing Activation Recomputation in Large Transformer Models",
    MLSys 2023 (arXiv 2205.05198), Table 2 (cost-model reference §1.2):

    ========================================  ==========================
    no parallelism (t = 1)                    ``sbh(34 + 5as/h)``
    tensor parallel                           ``sbh(10 + 24/t + 5as/(ht))``
    tensor + sequence parallel                ``sbh(34/t + 5as/(ht))``
    tensor parallel + selective recompute     ``sbh(10 + 24/t)``
    tensor + sequence + selective             ``sbh·34/t``
    full recompute                            ``2·sbh`` (layer input only)
    ========================================  ==========================

    Args: s sequence length, b micro-batch size, h hidden, a heads, t tensor-parallel size;
    ``recompute`` one of "none", "selective", "full".

    Raises:
        ValueError: unknown ``recompute``.
    """
    sbh = float(s) * b * h
    attn = 5.0 * a * s / (h * t)
    if recompute == "full":
        return 2.0 * sbh
    if recompute not in ("none", "selective"):
        raise ValueError(f"recompute must be none, selective or full, got {recompute!r}")
    core = 0.0 if recompute == "selective" else attn
    if sequence_parallel:
        return sbh * (34.0 / t + core)
    return sbh * (10.0 + 24.0 / t + core) if t > 1 else sbh * (34.0 + core)


def megatron_bytes_per_param(param_dtype: str = "bf16", grad_dtype: str = "fp32", *,
                             distributed_optimizer: bool = False, dp: int = 1) -> float:
    """Bytes per parameter of weights + gradients + Adam state (Megatron-LM
    ``theoretical_memory_usage.py`` / docs ``dist_optimizer.md``; cost-model reference §2.1).

    Kept on every rank: the weight (2 B fp16/bf16, 4 B fp32) and its gradient (2 or 4 B).
    Sharded over ``dp`` by the distributed optimizer (ZeRO-1): fp32 master weight (4 B, absent when
    the weight is already fp32), Adam m and v (8 B), and an fp32 main-gradient copy when the
    gradient is fp16 (4 B). Plain = kept + sharded: fp16/fp16 20, bf16/fp32 18, fp32/fp32 16;
    distributed = kept + sharded/dp: 4 + 16/d, 6 + 12/d, 8 + 8/d.

    Raises:
        ValueError: unknown dtype or dp < 1.
    """
    size = {"fp16": 2, "bf16": 2, "fp32": 4}
    if param_dtype not in size or grad_dtype not in size or dp < 1:
        raise ValueError(f"dtypes must be fp16/bf16/fp32 and dp >= 1, got {param_dtype}, {grad_dtype}, {dp}")
    kept = size[param_dtype] + size[grad_dtype]
    sharded = 8.0 + (0.0 if param_dtype == "fp32" else 4.0) + (4.0 if grad_dtype == "fp16" else 0.0)
    return kept + (sharded / dp if distributed_optimizer else sharded)


def narayanan_params(num_layers: int, hidden: int, vocab: int, seq: int) -> float:
    """GPT parameter count ``12·L·h²·(1 + 13/(12h) + (V + s)/(12·L·h))`` (Narayanan et al., SC'21,
    arXiv 2104.04473, Eq. 2; reference §1.6)."""
    L, h = float(num_layers), float(hidden)
    return 12 * L * h * h * (1 + 13 / (12 * h) + (vocab + seq) / (12 * L * h))


def korthikanti_step_flops(global_batch: int, num_layers: int, seq: int, hidden: int, vocab: int, *,
                           selective_recompute: bool = False) -> float:
    """FLOPs per step ``72·B·L·s·h²·(1 + s/(6h) + V/(12hL))`` (model FLOPs); with
    ``selective_recompute`` the hardware FLOPs use ``s/(3h)`` (Korthikanti et al. 2022, §6 /
    Table 5; reference §1.6)."""
    B, L, s, h = float(global_batch), float(num_layers), float(seq), float(hidden)
    attn = s / (3 * h) if selective_recompute else s / (6 * h)
    return 72 * B * L * s * h * h * (1 + attn + vocab / (12 * h * L))


def flops_utilization(flops_per_step: float, step_s: float, devices: int, peak_tflops: float) -> float:
    """MFU/HFU = FLOPs per step / (step seconds · devices · peak FLOP/s) (fraction)."""
    return flops_per_step / (step_s * devices * peak_tflops * 1e12)


def param_counts(d: Any, num_layers: int, *, count_mtp: bool = False) -> dict[str, float]:
    """Whole-model parameter counts from model dims (:class:`~autotune.config.training.ModelDims`)
    and the decoder layer count (MTP modules excluded from ``num_layers``).

    Terms (Narayanan et al. 2021 Eq. 2, generalized; reference §5.3 for DeepSeek-V3):
    attention MHA/GQA ``h·a·d + 2·h·g·d + a·d·h``; MLA (DeepSeek-V2/V3)
    ``h·q_lora + q_lora·a·(nope + rope) + h·(kv_lora + rope) + kv_lora·a·(nope + v) + a·v·h``
    plus the two LoRA norms ``q_lora + kv_lora``; SwiGLU MLP ``3·h·f``; MoE layer
    ``(E + S)·3·h·f_moe`` plus router ``h·E``; two norms ``2h`` per layer; embedding ``V·h`` and LM
    head ``V·h`` (one table when ``tie_word_embeddings``); final norm ``h``; an MTP module (when
    counted) = one MoE (or dense) block + projection ``2h·h`` + 3 norms ``3h``, sharing embedding
    and head.

    Returns: dict with ``attention_per_layer``, ``dense_layer``, ``moe_layer``, ``moe_layer_active``,
    ``embedding``, ``mtp_module``, ``total``, ``active`` (parameters, not billions).
    """
    h, a, g, hd = d.hidden_size, d.num_heads, d.n_kv_heads, d.head_dim
    if d.q_lora_rank or d.kv_lora_rank:
        qk = d.qk_nope_head_dim + d.qk_rope_head_dim
        vhd = d.v_head_dim or hd
        attn = (h * d.q_lora_rank + d.q_lora_rank * a * qk + h * (d.kv_lora_rank + d.qk_rope_head_dim)
                + d.kv_lora_rank * a * (d.qk_nope_head_dim + vhd) + a * vhd * h
                + d.q_lora_rank + d.kv_lora_rank)
    else:
        attn = h * a * hd + 2 * h * g * hd + a * hd * h
    norms = 2 * h
    dense = attn + 3 * h * d.intermediate_size + norms
    n = num_layers
    if d.num_experts:
        f = d.moe_intermediate_size
        moe = attn + (d.num_experts + d.shared_expert_num) * 3 * h * f + h * d.num_experts + norms
        moe_act = attn + (d.num_experts_per_tok + d.shared_expert_num) * 3 * h * f + h * d.num_experts + norms
    else:
        moe = moe_act = 0.0
    emb = float(d.vocab_size * h)
    mtp = ((moe if d.num_experts else dense) + 2 * h * h + 3 * h) if d.mtp_num_layers else 0.0
    out = {"attention_per_layer": float(attn), "dense_layer": float(dense), "moe_layer": float(moe),
           "moe_layer_active": float(moe_act), "embedding": emb, "mtp_module": float(mtp)}
    n_dense = min(d.first_k_dense_replace, n) if d.num_experts else n
    n_moe = n - n_dense
    ends = emb * (1 if d.tie_word_embeddings else 2) + h
    extra = d.mtp_num_layers * mtp if count_mtp else 0.0
    out["total"] = n_dense * dense + n_moe * moe + ends + extra
    out["active"] = n_dense * dense + n_moe * moe_act + ends + extra
    return out


def op_tables(*, legacy: bool, c: float, s: float, b: float, h: int, t: int, attn_params: float,
              out_proj_params: float, qkv_bytes: float, attn_out_bytes: float, core_flops: float,
              f_routed: float, f_shared: float, experts: int, bwd_ms: float, select_frac: float,
              comm_frac: float, flops_per_ms: float,
              heads: tuple[int, int] | None = None) -> tuple[dict[str, OpSaving], dict[str, OpSaving]]:
    """Per-op select / comm recompute savings of one decoder layer (per micro-batch, per device).

    Op names follow MindFormers' cells: legacy (Llama-style) ``attention_norm.norm``,
    ``attention.wq|wk|wv|wo.matmul`` (MLA: one ``attention.qkv_proj``),
    ``attention.flash_attention``, ``ffn_norm.norm``, ``feed_forward.w1.matmul``,
    ``feed_forward.w1.activation.silu``, ``feed_forward.w3.matmul``, ``feed_forward.mul``,
    ``feed_forward.w2.matmul`` (MoE: the same names for routed + shared experts, plus
    ``feed_forward.router``); mcore ``input_layernorm.norm``, ``self_attention.linear_qkv``,
    ``self_attention.core_attention``, ``self_attention.linear_proj``, ``pre_mlp_layernorm.norm``,
    ``mlp.linear_fc1`` (gate + up), ``mlp.activation_func.silu``, ``mlp.mul``, ``mlp.linear_fc2``
    (MoE: ``mlp.router``, ``mlp.experts.linear_fc1|linear_fc2``, the routed SiLU/product under
    ``mlp.activation_func.silu`` / ``mlp.mul``, and ``mlp.shared_experts.linear_fc1|
    activation_func.silu|mul|linear_fc2``).

    Savings (bytes -> MiB), the terms of the module docstring's activation accounting:
    a norm frees its output ``c·s·b·h``; Q/K/V projections ``c·s·b·(a+2g)·d/t`` (split by head
    count), flash attention its output and softmax statistics; gate and up projections
    ``c·s·b·f/t`` each, SiLU ``c·s·b·f/t``, the product ``c·s·b·f/t``; output projections (wo, w2,
    linear_proj, linear_fc2) 0 (their outputs feed the residual add, whose result the next norm's
    input already counts). Replay time: matmuls their forward FLOPs ``2·s·b·params/t`` at the
    profile's throughput, flash attention ``core_flops/t``; elementwise ops (SiLU, product, norm)
    share SAPP's default coefficient: SiLU + product = ``select_frac·bwd`` (split by FFN width for
    MoE), each norm ``select_frac·bwd/2``. Comm table: the two norms, output ``c·s·b·h`` each (their
    all-gathered output) and ``comm_frac·bwd/2`` each. So the default patterns reproduce the
    aggregate ``select`` (SiLU + product) and ``comm`` (``.*\\.norm``) options exactly.
    """
    def mib_op(nbytes: float, ms: float) -> OpSaving:
        return OpSaving(act_mib=_mib(nbytes), extra_ms=ms)

    mm = lambda params: 2 * s * b * params / t / flops_per_ms  # noqa: E731  (matmul replay, ms)
    norm = c * s * b * h
    f = f_routed + f_shared
    ew = select_frac * bwd_ms / 2
    qkv_params = attn_params - out_proj_params
    sel: dict[str, OpSaving] = {}
    if legacy:
        n1, n2, att, ffn = "attention_norm.norm", "ffn_norm.norm", "attention", "feed_forward"
        sel[n1] = mib_op(norm, ew)
        if heads is None:  # MLA: the LoRA projections as one op
            sel[f"{att}.qkv_proj"] = mib_op(qkv_bytes, mm(qkv_params))
        else:  # Q, K, V in proportion a : g : g (bytes and parameters)
            a_, g_ = heads
            for name, share in (("wq", a_), ("wk", g_), ("wv", g_)):
                w = share / (a_ + 2 * g_)
                sel[f"{att}.{name}.matmul"] = mib_op(qkv_bytes * w, mm(qkv_params * w))
        sel[f"{att}.flash_attention"] = mib_op(attn_out_bytes, core_flops / t / flops_per_ms)
        sel[f"{att}.wo.matmul"] = mib_op(0.0, mm(out_proj_params))
        sel[n2] = mib_op(norm, ew)
        if experts:
            sel[f"{ffn}.router"] = mib_op(0.0, mm(h * experts))
        sel[f"{ffn}.w1.matmul"] = mib_op(c * s * b * f / t, mm(h * f))
        sel[f"{ffn}.w1.activation.silu"] = mib_op(c * s * b * f / t, ew)
        sel[f"{ffn}.w3.matmul"] = mib_op(c * s * b * f / t, mm(h * f))
        sel[f"{ffn}.mul"] = mib_op(c * s * b * f / t, ew)
        sel[f"{ffn}.w2.matmul"] = mib_op(0.0, mm(h * f))
    else:
        n1, n2 = "input_layernorm.norm", "pre_mlp_layernorm.norm"
        sel[n1] = mib_op(norm, ew)
        sel["self_attention.linear_qkv"] = mib_op(qkv_bytes, mm(qkv_params))
        sel["self_attention.core_attention"] = mib_op(attn_out_bytes, core_flops / t / flops_per_ms)
        sel["self_attention.linear_proj"] = mib_op(0.0, mm(out_proj_params))
        sel[n2] = mib_op(norm, ew)
        share_r = f_routed / f if f else 1.0
        if experts:
            sel["mlp.router"] = mib_op(0.0, mm(h * experts))
            sel["mlp.experts.linear_fc1"] = mib_op(2 * c * s * b * f_routed / t, mm(2 * h * f_routed))
        else:
            sel["mlp.linear_fc1"] = mib_op(2 * c * s * b * f_routed / t, mm(2 * h * f_routed))
        sel["mlp.activation_func.silu"] = mib_op(c * s * b * f_routed / t, ew * share_r)
        sel["mlp.mul"] = mib_op(c * s * b * f_routed / t, ew * share_r)
        sel["mlp.experts.linear_fc2" if experts else "mlp.linear_fc2"] = mib_op(0.0, mm(h * f_routed))
        if f_shared:
            sh = "mlp.shared_experts"
            sel[f"{sh}.linear_fc1"] = mib_op(2 * c * s * b * f_shared / t, mm(2 * h * f_shared))
            sel[f"{sh}.activation_func.silu"] = mib_op(c * s * b * f_shared / t, ew * (1 - share_r))
            sel[f"{sh}.mul"] = mib_op(c * s * b * f_shared / t, ew * (1 - share_r))
            sel[f"{sh}.linear_fc2"] = mib_op(0.0, mm(h * f_shared))
    comm = {n1: mib_op(norm, comm_frac * bwd_ms / 2), n2: mib_op(norm, comm_frac * bwd_ms / 2)}
    return sel, comm


def gathered_weights(params_tp: float, params_ep: float, *, t: int, ep: int, d_os: int,
                     d_os_exp: int, dtype_bytes: float, allgather_gbps: float) -> tuple[float, float]:
    """Optimizer-parallel gathered weights of one layer and the time to gather them once.

    Args: ``params_tp`` whole-layer parameters sharded over tensor parallel only (attention, dense
    or shared MLP, router), ``params_ep`` routed-expert parameters (sharded over t·ep); ``d_os`` /
    ``d_os_exp`` the optimizer shard groups of the two (1 = no optimizer parallel);
    ``dtype_bytes`` bytes per gathered element; ``allgather_gbps`` GB/s.

    Returns: (bytes, ms): ``W_g = c·(params_tp/t·[d_os > 1] + params_ep/(t·ep)·[d_os_exp > 1])``
    and a ring all-gather ``Σ_g W_g·(d_g − 1)/d_g / bandwidth`` (each rank receives the other
    shards). Source: MindSpore optimizer parallel (weights sharded over the data-parallel group and
    all-gathered before use; cost-model reference §5.1); ring all-gather volume (d−1)/d (standard
    collective cost model). Norm weights are excluded (below ``parallel_optimizer_threshold``).

    Raises:
        ValueError: a group size below 1 or a bandwidth <= 0.
    """
    if min(t, ep, d_os, d_os_exp) < 1 or allgather_gbps <= 0:
        raise ValueError(f"group sizes must be >= 1 and bandwidth > 0, got t={t}, ep={ep}, "
                         f"d_os={d_os}, d_os_exp={d_os_exp}, {allgather_gbps} GB/s")
    tp_b = dtype_bytes * params_tp / t if d_os > 1 else 0.0
    ep_b = dtype_bytes * params_ep / (t * ep) if d_os_exp > 1 else 0.0
    moved = tp_b * (d_os - 1) / d_os + ep_b * (d_os_exp - 1) / d_os_exp
    return tp_b + ep_b, moved / (allgather_gbps * 1e9) * 1e3


def analytic_profile(cfg: TrainingConfig, device: str | Device = "ascend-910b", *,
                     overrides: dict[str, float] | None = None) -> ModelProfile:
    """Derive a :class:`ModelProfile` from a training config's dims and parallel sizes.

    Args:
        cfg: validated training config; needs ``model.model_config`` dims (hidden_size, …).
        device: preset name or :class:`Device`.
        overrides: replaces entries of :data:`DEFAULT_ASSUMPTIONS` (unknown keys rejected).

    Returns:
        A profile with kinds ``dense`` (and ``moe`` for MoE models), head, tail, stage constant and
        p2p time; ``assumptions`` lists every number used, ``sources`` the formulas' sources.

    Raises:
        ConfigError: the YAML has no model dims, or an override key is unknown.
    """
    dev = get_device(device) if isinstance(device, str) else device
    A = dict(DEFAULT_ASSUMPTIONS)
    mbs = get_path(cfg.raw, "runner_config.batch_size", None)
    if isinstance(mbs, int) and not isinstance(mbs, bool) and mbs > 0:
        A["micro_batch_size"] = mbs
    for key, val in (overrides or {}).items():
        if key not in A:
            raise ConfigError(f"unknown assumption {key!r}; known: {', '.join(sorted(A))}",
                              field=f"--set {key}", value=val, rule="assumption")
        A[key] = _check_assumption(key, float(val))
    d = cfg.dims
    if d is None:
        raise ConfigError("model dims are needed for an analytic profile (hidden_size, num_heads, "
                          "intermediate_size, seq_length, vocab_size)",
                          field="model.model_config.hidden_size", value=None, rule="missing_key")
    t = cfg.model_parallel
    cp = cfg.context_parallel
    ep = max(1, cfg.expert_parallel)
    sp = cfg.use_seq_parallel
    c = d.compute_dtype_bytes
    b = A["micro_batch_size"]
    s = d.seq_length / cp
    h, a, g, hd = d.hidden_size, d.num_heads, d.n_kv_heads, d.head_dim
    V = d.vocab_size
    sbh = s * b * h
    sp_div = t if sp else 1

    # ---- parameters (per layer, whole model) ----
    if d.q_lora_rank or d.kv_lora_rank:
        qk_hd = d.qk_nope_head_dim + d.qk_rope_head_dim
        vhd = d.v_head_dim or hd
        attn_p = (h * d.q_lora_rank + d.q_lora_rank * a * qk_hd
                  + h * (d.kv_lora_rank + d.qk_rope_head_dim)
                  + d.kv_lora_rank * a * (d.qk_nope_head_dim + vhd) + a * vhd * h
                  + d.q_lora_rank + d.kv_lora_rank)
        qkv_act = c * s * b * (a * qk_hd * 2 + a * vhd) / t + c * s * b * (d.q_lora_rank + d.kv_lora_rank)
        attn_out_act = c * s * b * a * vhd / t
        core_flops = s * s * b * a * (qk_hd + vhd)  # causal: half of 2·s²·a·(qk+v)
    else:
        attn_p = h * a * hd + 2 * h * g * hd + a * hd * h
        qkv_act = c * s * b * (a + 2 * g) * hd / t
        attn_out_act = c * s * b * a * hd / t
        core_flops = 2 * s * s * b * a * hd  # causal: half of 4·s²·a·d
    norms_p = 2 * h
    dense_mlp_p = 3 * h * d.intermediate_size
    bpp_full = A["weight_bytes"] + A["grad_bytes"] + A["optimizer_bytes"]
    if cfg.enable_parallel_optimizer:
        d_os = cfg.optimizer_weight_shard_size if cfg.optimizer_weight_shard_size > 0 else cfg.data_parallel
        d_os_exp = max(1, d_os // ep)
        bpp = (A["weight_bytes"] + A["optimizer_bytes"]) / d_os + A["grad_bytes"]
        bpp_exp = (A["weight_bytes"] + A["optimizer_bytes"]) / d_os_exp + A["grad_bytes"]
    else:
        d_os = d_os_exp = 1
        bpp = bpp_exp = bpp_full

    ag_gbps = A["allgather_gbps"] if A["allgather_gbps"] > 0 else dev.p2p_gbps

    mla = bool(d.q_lora_rank or d.kv_lora_rank)
    out_proj_p = a * ((d.v_head_dim or hd) if mla else hd) * h
    flops_per_ms = dev.peak_tflops * 1e12 * A["efficiency"] / 1e3

    def kind(mlp_params_tp: float, mlp_params_ep: float, active_mlp: float, f_eff: float,
             f_shared: float = 0.0, experts: int = 0) -> LayerKind:
        static_b = (attn_p + mlp_params_tp) / t * bpp + norms_p * bpp + mlp_params_ep / (t * ep) * bpp_exp
        flops = 2 * s * b * (attn_p + active_mlp) + core_flops
        fwd = flops / t / (dev.peak_tflops * 1e12 * A["efficiency"]) * 1e3
        bwd = 2 * fwd
        norm_in = 2 * c * sbh / sp_div                       # two norm inputs
        norm_out = 2 * c * sbh                                # two gathered norm outputs
        lse = A["softmax_stat_bytes"] * s * b * a / t
        gate_up = 2 * c * s * b * f_eff / t
        silu_mul = 2 * c * s * b * f_eff / t
        act = norm_in + norm_out + qkv_act + attn_out_act + lse + gate_up + silu_mul
        act_sel = act - silu_mul
        act_comm = act - norm_out
        act_both = act - silu_mul - norm_out
        slice_div = t if (sp or cfg.recompute_slice_activation) else 1
        act_full = c * sbh / slice_div
        if not cfg.mp_comm_recompute and t > 1:
            # mp_comm_recompute off: the outputs of the layer's two model-parallel collectives
            # (attention and MLP output reduce) are kept instead of replayed: 2·c·s·b·h (/t with SP)
            act_full += 2 * c * sbh / sp_div
        gathered, ag_ms = gathered_weights(attn_p + mlp_params_tp, mlp_params_ep, t=t, ep=ep,
                                           d_os=d_os, d_os_exp=d_os_exp, dtype_bytes=c,
                                           allgather_gbps=ag_gbps)
        static_b += gathered
        full_extra, full_ws, full_delta = fwd, act, 0.0
        if cfg.parallel_optimizer_comm_recompute and gathered > 0:
            full_extra += ag_ms
            full_ws += gathered
            full_delta = -gathered
        sel_ops, comm_ops = op_tables(
            legacy=cfg.use_legacy, c=c, s=s, b=b, h=h, t=t, attn_params=attn_p,
            out_proj_params=out_proj_p, qkv_bytes=qkv_act, attn_out_bytes=attn_out_act + lse,
            core_flops=core_flops, f_routed=f_eff - f_shared, f_shared=f_shared, experts=experts,
            bwd_ms=bwd, select_frac=A["select_extra_frac"], comm_frac=A["comm_extra_frac"],
            flops_per_ms=flops_per_ms, heads=None if mla else (a, g))
        gemm = 2 * s * b * (attn_p + active_mlp)
        w_frac = gemm / (2 * (gemm + core_flops)) if gemm + core_flops > 0 else 0.5
        return LayerKind(
            fwd_ms=fwd, bwd_ms=bwd, act_mib=_mib(act), static_mib=_mib(static_b), bwd_w_frac=w_frac,
            select_ops=sel_ops, comm_ops=comm_ops,
            full=RecomputeOption(act_mib=_mib(act_full), extra_ms=full_extra, workspace_mib=_mib(full_ws),
                                 static_delta_mib=_mib(full_delta)),
            select=RecomputeOption(act_mib=_mib(act_sel), extra_ms=A["select_extra_frac"] * bwd),
            comm=RecomputeOption(act_mib=_mib(act_comm), extra_ms=A["comm_extra_frac"] * bwd),
            both=RecomputeOption(act_mib=_mib(act_both),
                                 extra_ms=(A["select_extra_frac"] + A["comm_extra_frac"]) * bwd),
        )

    kinds: dict[str, LayerKind] = {}
    runs: list[tuple[str, int]] = []
    n = cfg.num_layers
    if d.num_experts:
        moe_shared = d.shared_expert_num * 3 * h * d.moe_intermediate_size
        moe_routed = d.num_experts * 3 * h * d.moe_intermediate_size
        active = (d.num_experts_per_tok + d.shared_expert_num) * 3 * h * d.moe_intermediate_size
        f_moe = (d.num_experts_per_tok + d.shared_expert_num) * d.moe_intermediate_size
        dense_n = min(d.first_k_dense_replace, n)
        if dense_n:
            kinds["dense"] = kind(dense_mlp_p, 0.0, dense_mlp_p, d.intermediate_size)
            runs.append(("dense", dense_n))
        kinds["moe"] = kind(moe_shared + h * d.num_experts, moe_routed, active + h * d.num_experts, f_moe,
                            f_shared=d.shared_expert_num * d.moe_intermediate_size, experts=d.num_experts)
        if n - dense_n:
            runs.append(("moe", n - dense_n))
    else:
        kinds["dense"] = kind(dense_mlp_p, 0.0, dense_mlp_p, d.intermediate_size)
        runs.append(("dense", n))

    emb_p = V * h / t
    head = EndPart(static_mib=_mib(emb_p * bpp), act_mib=_mib(c * sbh / t))
    tail_flops = 2 * s * b * h * V / t
    tail_fwd = tail_flops / (dev.peak_tflops * 1e12 * A["efficiency"]) * 1e3
    tail_static = (emb_p + h) * bpp
    tail_act = 2 * c * sbh / sp_div + 8 * s * b * V / t
    tail_bwd = 2 * tail_fwd
    mtp_w = 0.0
    if d.mtp_num_layers:
        last = kinds[runs[-1][0]]
        tail_static += d.mtp_num_layers * (last.static_mib * BYTES_PER_MIB + 2 * h * h / t * bpp)
        tail_fwd += d.mtp_num_layers * (last.fwd_ms + tail_fwd)
        tail_bwd += d.mtp_num_layers * (last.bwd_ms + 2 * tail_fwd)
        tail_act += d.mtp_num_layers * last.act_mib * BYTES_PER_MIB
        mtp_w = d.mtp_num_layers * last.bwd_ms * (last.w_frac - 0.5)
    # W of the tail: half of its GEMM backward (LM head, MTP projections), the MTP layers' own W
    tail_w_frac = (0.5 * tail_bwd + mtp_w) / tail_bwd if tail_bwd > 0 else 0.5
    tail = EndPart(fwd_ms=tail_fwd, bwd_ms=tail_bwd, static_mib=_mib(tail_static),
                   act_mib=_mib(tail_act), workspace_mib=_mib(8 * s * b * V / t),
                   bwd_w_frac=tail_w_frac)
    p2p = c * sbh / sp_div / (dev.p2p_gbps * 1e9) * 1e3 + dev.p2p_latency_ms
    assumptions: dict[str, Any] = dict(A)
    assumptions.update({
        "device": dev.name, "device_peak_tflops": dev.peak_tflops, "device_p2p_gbps": dev.p2p_gbps,
        "static_bytes_per_param": round(bpp, 4), "optimizer_shard_group": d_os,
        "model_parallel": t, "context_parallel": cp, "expert_parallel": ep,
        "sequence_parallel": sp, "compute_dtype_bytes": c,
        "optimizer_shard_group_experts": d_os_exp, "allgather_gbps_used": ag_gbps,
        "parallel_optimizer_comm_recompute": cfg.parallel_optimizer_comm_recompute,
    })
    return ModelProfile(
        name=f"analytic:{cfg.source}", device=dev.name, kinds=kinds, layer_kinds=runs, head=head,
        tail=tail, stage_const_mib=A["stage_const_mib"], p2p_ms=p2p, assumptions=assumptions,
        sources={"activation": "Korthikanti et al. 2022 (arXiv 2205.05198) §4, adapted (module docstring)",
                 "parameters": "Narayanan et al. 2021 (arXiv 2104.04473) Eq. 2, generalized",
                 "static_bytes": "cost-model reference §5.1 (MindSpore AdamW, optimizer parallel)",
                 "recompute_time": "SAPP defaults, cost-model reference §3.4",
                 "bwd_w_frac": "weight-gradient GEMMs / backward FLOPs (Qi et al. ICLR 2024 §2 B/W "
                               "split; module docstring)",
                 "gathered_weights": "MindSpore optimizer parallel (reference §5.1) + ring all-gather "
                                     "(d-1)/d; held once per step (assumption, module docstring)",
                 "device": dev.source},
    )
