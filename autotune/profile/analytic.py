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
- **Static bytes/parameter** (:func:`static_groups`; docs/profiles.md "Memory keys"): weight p +
  gradient p (p = bytes of ``param_init_type``; MindSpore keeps gradients and the pipeline's
  accumulated gradients in the parameter's dtype) + AdamW m, v 8 (fp32 in MindFormers' AdamW):
  16 for fp32, 12 for bf16 weights. With ``enable_parallel_optimizer`` the weight and optimizer
  state are sharded over the optimizer group d_os (the devices holding copies of the weight: dp·cp,
  dp·cp/ep for routed experts, ×t for a vocabulary replicated by ``vocab_emb_dp``; at most
  ``optimizer_weight_shard_size``); the gradient too when nothing accumulates it (pp = 1 without
  gradient accumulation: reduce-scatter) or with ``gradient_accumulation_shard``. Frozen LoRA base
  weights (``pet_config``) keep the weight only. Plus the gathered weights below.
- **Activations** (Korthikanti et al. 2022, §4 accounting, adapted to SwiGLU/GQA and flash attention):
  attention ``c·s·b·h`` (norm input, /t with sequence parallel) + ``c·s·b·h`` (norm output = QKV
  input, gathered) + ``c·s·b·(a+2g)·d/t`` (Q, K, V) + ``c·s·b·a·d/t`` (attention output) +
  ``64·s·b·a/t`` (flash attention's softmax_max and softmax_sum, (B, N, S, 8) fp32 each) — without
  flash attention instead the probabilities ``a·s·s·b/t·(softmax bytes [+ c when they differ]
  [+ c + 1/8 with attention dropout])``; MLP ``c·s·b·h`` (norm input) + ``c·s·b·h`` (norm output) +
  ``2·c·s·b·f/t`` (gate, up) + ``2·c·s·b·f/t`` (SiLU output, product) — a GELU MLP (GPT-2) keeps
  ``c·s·b·f/t`` of each; hidden dropout masks ``2·s·b·h/8``. MoE layers use ``f = cf·k·f_moe +
  S·f_moe`` (cf the capacity factor, 1 when dropless) and keep the dispatched expert input and the
  expert output, ``moe_buffer_copies·c·cf·k·s·b·h`` (/t with ``ep_extend_tp``) + the fp32 router
  logits ``4·s·b·E``. Select / comm recompute free what the family's cells matched by the patterns
  hold (:func:`role_savings`, :func:`op_tables`; the default patterns' aggregate is the ``select`` /
  ``comm`` option, 0 when they name no cell of the model class, :mod:`autotune.config.cells`); full
  recompute keeps the layer input ``c·s·b·h`` (/t with sequence parallel or
  ``recompute_slice_activation``) and needs one layer's full activation as workspace in backward.
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
  the loss's fp32 softmax and one-hot label ``8·s·b·V/t`` (``_LogSoftmax`` / ``_NLLLoss`` bprop in
  ``mindformers/core/loss/loss.py``), the same again as backward workspace (+ the whole
  vocabulary's logits ``c·s·b·V`` when the LM head is replicated over t). MTP modules (r1.7+
  semantics) sit on the last stage and are added to the tail. **Head**: embedding table, activation ``c·s·b·h/t``.
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

import math
import numbers
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from autotune.config.cells import family_for
from autotune.config.cells import matches as match_pattern
from autotune.config.layer_setting import DEFAULT_PATTERNS
from autotune.config.model_dims import missing_dims_hint, unread_memory_keys
from autotune.config.training import TrainingConfig
from autotune.errors import ConfigError
from autotune.profile.devices import Device, get_device
from autotune.profile.schema import EndPart, LayerKind, ModelProfile, OpSaving, RecomputeOption
from autotune.config.limits import MAX_INT
from autotune.units import BYTES_PER_MIB, MAX_MEMORY_MIB

DEFAULT_ASSUMPTIONS: dict[str, float] = {
    "efficiency": 0.45,             # achieved fraction of peak FLOP/s (MFU-like), all comm included
    "micro_batch_size": 1,          # runner_config.batch_size when present
    "weight_bytes": 4.0,            # fp32 master weight
    "grad_bytes": 4.0,              # fp32 accumulated gradient
    "optimizer_bytes": 8.0,         # AdamW m and v in fp32
    "stage_const_mib": 2048.0,      # runtime, communication buffers, fragmentation per device
    "select_extra_frac": 0.04,      # SAPP default: select recompute adds 4 % of backward
    "comm_extra_frac": 0.125,       # SAPP default: comm recompute adds 12.5 % of backward
    "softmax_stat_bytes": 64.0,     # flash attention's softmax_max + softmax_sum, (B, N, S, 8) fp32 each
    "allgather_gbps": 0.0,          # optimizer-parallel all-gather bandwidth (GB/s); 0 = device p2p
    "moe_buffer_copies": 2.0,       # MoE: dispatched expert input + expert output kept per token copy
}

#: Valid range of each assumption: (lowest, highest, lowest is allowed, must be a whole number).
#: Every range is finite and far above real values (bytes per parameter 4-16, a few GiB of stage
#: constant, an efficiency of 0.3-0.6), so that no accepted value makes the profile's arithmetic
#: overflow to inf / NaN (tests/profile/test_analytic_ranges.py).
ASSUMPTION_RANGES: dict[str, tuple[float, float, bool, bool]] = {
    "efficiency": (1e-6, 1.0, True, False),
    "micro_batch_size": (1.0, float(MAX_INT), True, True),
    "weight_bytes": (0.0, 64.0, True, False),
    "grad_bytes": (0.0, 64.0, True, False),
    "optimizer_bytes": (0.0, 64.0, True, False),
    "stage_const_mib": (0.0, MAX_MEMORY_MIB, True, False),
    "select_extra_frac": (0.0, 100.0, True, False),
    "comm_extra_frac": (0.0, 100.0, True, False),
    "softmax_stat_bytes": (0.0, 1024.0, True, False),
    "allgather_gbps": (0.0, 1e6, True, False),
    "moe_buffer_copies": (0.0, 1024.0, True, False),
}


def check_overrides(overrides: Mapping[str, Any] | None) -> dict[str, float]:
    """The assumption overrides (``--set KEY=VALUE``, the API's ``overrides``) as floats, each a known
    key with a finite real number in its :data:`ASSUMPTION_RANGES` range: the one check both the
    CLI and the Python API go through (:func:`analytic_profile`, ``resolve_profile``, the Megatron
    profiles).

    Raises:
        ConfigError: rule ``assumption``: an unknown key, a value that is not a real number (a string,
            a boolean, None), NaN or infinite, or outside its range.
    """
    out: dict[str, float] = {}
    for key, val in (overrides or {}).items():
        if key not in DEFAULT_ASSUMPTIONS:
            raise ConfigError(f"unknown assumption {key!r}; known: {', '.join(sorted(DEFAULT_ASSUMPTIONS))}",
                              field=f"--set {key}", value=val, rule="assumption")
        if isinstance(val, bool) or not isinstance(val, numbers.Real):
            raise ConfigError(f"must be a number, got {val!r}", field=f"--set {key}", value=val, rule="assumption")
        out[key] = _check_assumption(key, float(val))
    return out


def _check_assumption(key: str, val: float) -> float:
    lo, hi, lo_ok, whole = ASSUMPTION_RANGES[key]
    ok = math.isfinite(val) and (val >= lo if lo_ok else val > lo) and val <= hi
    if whole and ok:
        ok = float(val).is_integer()
    if not ok:
        rng = f"{'[' if lo_ok else '('}{lo:g}, {hi:.15g}]" + (", a whole number" if whole else "")
        raise ConfigError(f"must be a finite number in {rng}, got {val!r}", field=f"--set {key}", value=val,
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


def role_savings(*, c: float, s: float, b: float, h: int, t: int, qkv_bytes: float,
                 core_bytes: float, core_ms: float, qkv_params: float, out_proj_params: float,
                 heads: tuple[int, int] | None, f_routed: float, f_shared: float, experts: int,
                 gated: bool, bwd_ms: float, select_frac: float, flops_per_ms: float
                 ) -> dict[str, tuple[float, float]]:
    """What recomputing each priced op of one decoder layer frees and costs, per micro-batch and
    device: role (:data:`autotune.config.cells.ROLES`) -> (bytes, replay ms).

    The terms of the module docstring's activation accounting: a norm frees its output
    ``c·s·b·h``; Q / K / V projections ``c·s·b·(a+2g)·d/t`` (split a : g : g; MLA: one ``qkv``),
    the attention core its output and softmax statistics (flash attention) or its probabilities
    (without flash attention: ``core_bytes``); gate and up projections ``c·s·b·f/t`` each (non-gated
    GELU MLP: ``up`` only), the activation ``c·s·b·f/t``, the product ``c·s·b·f/t``; output
    projections (o, down) 0 (their output feeds the residual add, whose result the next norm's input
    already counts). Replay: matmuls ``2·s·b·params/t`` FLOPs at the profile's throughput, the core
    ``core_ms``, elementwise ops SAPP's default coefficient (activation + product =
    ``select_frac·bwd``, each norm ``select_frac·bwd/2``). MoE: ``router`` and ``e_*`` (routed
    experts, FFN width ``f_routed``) / ``s_*`` (shared experts, ``f_shared``) instead of the dense
    roles.
    """
    mm = lambda params: 2 * s * b * params / t / flops_per_ms  # noqa: E731  (matmul replay, ms)
    ew = select_frac * bwd_ms / 2
    norm = c * s * b * h
    out: dict[str, tuple[float, float]] = {"attn_norm": (norm, ew), "ffn_norm": (norm, ew)}
    if heads is None:
        out["qkv"] = (qkv_bytes, mm(qkv_params))
    else:
        a_, g_ = heads
        for name, share in (("q", a_), ("k", g_), ("v", g_)):
            w = share / (a_ + 2 * g_)
            out[name] = (qkv_bytes * w, mm(qkv_params * w))
    out["core"] = (core_bytes, core_ms)
    out["o"] = (0.0, mm(out_proj_params))
    f = f_routed + f_shared

    def mlp(prefix: str, width: float, share: float) -> None:
        one = c * s * b * width / t
        if gated:
            out[prefix + "gate"] = (one, mm(h * width))
            out[prefix + "up"] = (one, mm(h * width))
            out[prefix + "act"] = (one, ew * share)
            out[prefix + "mul"] = (one, ew * share)
        else:
            out[prefix + "up"] = (one, mm(h * width))
            out[prefix + "act"] = (one, 2 * ew * share)
        out[prefix + "down"] = (0.0, mm(h * width))

    if experts:
        out["router"] = (0.0, mm(h * experts))
        mlp("e_", f_routed, f_routed / f if f else 1.0)
        if f_shared:
            mlp("s_", f_shared, f_shared / f)
    else:
        mlp("", f_routed, 1.0)
    return out


def op_tables(fam: Any, savings: dict[str, tuple[float, float]], *, comm_frac: float, bwd_ms: float
              ) -> tuple[dict[str, OpSaving], dict[str, OpSaving]]:
    """Per-op select / comm recompute tables of one layer kind, keyed by the family's op paths.

    ``fam``: a :class:`autotune.config.cells.CellFamily`; ``savings``: :func:`role_savings`. A role
    the family spells as one fused op takes the sum of its parts (``gate`` + ``up`` -> ``gate_up``,
    ``q`` + ``k`` + ``v`` -> ``qkv``); roles the family does not have are dropped. Roles mapped to
    the same path add up. Comm table: the two norms, each freeing its (all-gathered) output and
    costing ``comm_frac·bwd/2``.
    """
    sav = dict(savings)
    for fused, parts in (("qkv", ("q", "k", "v")), ("gate_up", ("gate", "up")),
                         ("e_gate_up", ("e_gate", "e_up")), ("s_gate_up", ("s_gate", "s_up"))):
        if fused in fam.roles and fused not in sav and all(q in sav for q in parts):
            sav[fused] = (sum(sav[q][0] for q in parts), sum(sav[q][1] for q in parts))
            for q in parts:
                if q not in fam.roles:
                    del sav[q]
    sel: dict[str, list[float]] = {}
    for role, (nbytes, ms) in sav.items():
        path = fam.roles.get(role)
        if path is None:
            continue
        acc = sel.setdefault(path, [0.0, 0.0])
        acc[0] += nbytes
        acc[1] += ms
    sel_t = {p: OpSaving(act_mib=_mib(v[0]), extra_ms=v[1]) for p, v in sel.items()}
    comm: dict[str, OpSaving] = {}
    for role in ("attn_norm", "ffn_norm"):
        if role in fam.roles:
            comm[fam.roles[role]] = OpSaving(act_mib=_mib(savings[role][0]), extra_ms=comm_frac * bwd_ms / 2)
    return sel_t, comm


def default_saving(fam: Any, table: dict[str, OpSaving], key: str) -> tuple[float, float]:
    """(MiB, ms) the mode's default ``key`` patterns (``select_recompute`` / ``select_comm_recompute``,
    :data:`autotune.config.layer_setting.DEFAULT_PATTERNS`) free on one layer of ``fam``: the sum
    over the ops of ``table`` they match (an op counts once)."""
    pats = DEFAULT_PATTERNS[(key, fam.mode)]
    cells_ok = key == "select_recompute"
    hit = [p for p in table if any(match_pattern(pt, p, cells=cells_ok) for pt in pats)]
    return sum(table[p].act_mib for p in hit), sum(table[p].extra_ms for p in hit)


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


@dataclass(frozen=True)
class StaticGroup:
    """Bytes per parameter of one group of parameters on one device (module docstring, "Static").

    ``weight`` / ``grad`` / ``optim`` bytes per parameter before optimizer sharding; ``d_os`` the
    optimizer shard group (1 = none); ``grad_sharded`` whether the gradient is sharded with it.
    """

    weight: float
    grad: float
    optim: float
    d_os: int
    grad_sharded: bool

    @property
    def per_param(self) -> float:
        """Bytes per (tensor/expert-parallel-sharded) parameter kept on the device."""
        g = self.grad / self.d_os if self.grad_sharded else self.grad
        return (self.weight + self.optim) / self.d_os + g


def static_groups(cfg: TrainingConfig, A: dict[str, float], *, vocab_replicated: bool,
                  embedding_bytes: float) -> dict[str, StaticGroup]:
    """The three parameter groups' bytes per parameter: ``layer`` (attention, dense MLP, shared
    experts, router: replicated over dp·cp), ``expert`` (routed experts: replicated over dp·cp/ep)
    and ``vocab`` (embedding table and LM head: replicated over dp·cp, ·t when ``vocab_emb_dp`` or
    the vocabulary does not divide by t), and ``embedding`` (the table alone: weight and gradient
    in ``embedding_init_type``).

    - weight and gradient: ``A["weight_bytes"]`` / ``A["grad_bytes"]`` (default: the bytes of
      ``param_init_type``; MindSpore keeps gradients and the pipeline's accumulated gradients in the
      parameter's dtype); optimizer: ``A["optimizer_bytes"]`` (AdamW m and v, always fp32:
      ``mindformers/core/optim/adamw.py`` ``clone_state(..., dtype=mstype.float32)``, r1.3's
      ``FP32StateAdamWeightDecay``).
    - optimizer parallel (``parallel.enable_parallel_optimizer``): weight and optimizer state are
      sharded over the group that holds identical copies (dp·cp, or
      ``optimizer_weight_shard_size`` when set, at most the copies); the gradient too when nothing
      accumulates it (pp = 1 and ``gradient_accumulation_steps`` = 1: reduce-scatter), or with
      ``gradient_accumulation_shard: True``; otherwise the accumulated gradient is whole.
    - frozen base weights (``pet_config``, LoRA): weight only, never sharded (not in the optimizer).
    """
    d = cfg.dims
    assert d is not None
    dpcp = cfg.data_parallel * cfg.context_parallel
    ep = max(1, cfg.expert_parallel)
    shard_on = cfg.enable_parallel_optimizer
    size = cfg.optimizer_weight_shard_size

    def group(copies: int, weight: float, grad: float) -> StaticGroup:
        if d.frozen_base:
            return StaticGroup(weight, 0.0, 0.0, 1, False)
        d_os = (min(size, copies) if size > 0 else copies) if shard_on else 1
        grad_sharded = shard_on and (d.gradient_accumulation_shard or (
            cfg.pipeline_stage == 1 and d.gradient_accumulation_steps == 1))
        return StaticGroup(weight, grad, A["optimizer_bytes"], max(1, d_os), grad_sharded)

    vocab_copies = dpcp * (cfg.model_parallel if vocab_replicated else 1)
    w, g = A["weight_bytes"], A["grad_bytes"]
    return {"layer": group(dpcp, w, g), "expert": group(max(1, dpcp // ep), w, g),
            "vocab": group(vocab_copies, w, g),
            "embedding": group(vocab_copies, embedding_bytes, embedding_bytes)}


@dataclass(frozen=True)
class _Shape:
    """The sizes an analytic profile is built from (the module docstring's symbols, per device).

    ``A``: the assumptions in force; ``fam``: the cell-name family (None: unknown); t, cp, ep: model,
    context and expert parallel; ``sp``: sequence parallel; c: bytes of the compute dtype; b:
    micro-batch size; s: sequence per context-parallel rank; h, a, g, hd: hidden, heads, kv heads,
    head dim; ``vocab``: vocabulary size; ``sbh`` = s·b·h; ``sp_div``: t with sequence parallel,
    else 1; ``mlp_mats``: 3 (gated) or 2. Attention: ``attn_p`` parameters, ``qkv_act`` /
    ``attn_out_act`` / ``core_kept`` / ``dropout_masks`` activation bytes, ``core_flops`` the
    causal core's FLOPs, ``out_proj_p`` the output projection's parameters. Static memory:
    ``groups`` (:func:`static_groups`), ``bpp`` / ``bpp_exp`` bytes per parameter (layer, routed
    experts), ``d_os`` / ``d_os_exp`` their optimizer shard groups, ``ag_gbps`` the all-gather
    bandwidth (GB/s); ``flops_per_ms`` the achieved FLOP/ms.
    """

    cfg: TrainingConfig
    d: Any
    dev: Device
    A: dict[str, float]
    fam: Any
    t: int
    cp: int
    ep: int
    sp: bool
    c: float
    b: float
    s: float
    h: int
    a: int
    g: int
    hd: int
    vocab: int
    sbh: float
    sp_div: int
    mlp_mats: int
    mla: bool
    attn_p: float
    qkv_act: float
    attn_out_act: float
    core_flops: float
    core_kept: float
    dropout_masks: float
    norms_p: float
    dense_mlp_p: float
    vocab_replicated: bool
    groups: dict[str, StaticGroup]
    bpp: float
    bpp_exp: float
    d_os: int
    d_os_exp: int
    ag_gbps: float
    out_proj_p: float
    flops_per_ms: float


def _assumptions(cfg: TrainingConfig, overrides: Mapping[str, Any] | None) -> dict[str, float]:
    """:data:`DEFAULT_ASSUMPTIONS` with the parameter dtype's bytes, ``runner_config.batch_size``
    and the overrides (:func:`check_overrides`).

    Raises:
        ConfigError: an override key is unknown, its value not a finite number or out of range.
    """
    d = cfg.dims
    A = dict(DEFAULT_ASSUMPTIONS)
    A["weight_bytes"] = float(d.param_dtype_bytes)
    A["grad_bytes"] = float(d.param_dtype_bytes)
    A["micro_batch_size"] = cfg.batch_size
    A.update(check_overrides(overrides))
    return A


def _model_warnings(cfg: TrainingConfig, fam: Any) -> list[dict[str, str]]:
    """What the YAML sets that is not modelled (``W_MEMORY_KEY_IGNORED``) and an unknown cell-name
    family (``W_FAMILY_UNKNOWN``)."""
    warnings = [{"code": w.code, "field": w.field, "message": w.message}
                for w in unread_memory_keys(cfg.raw)]
    if fam is None:
        warnings.append({"code": "W_FAMILY_UNKNOWN", "field": "model.arch.type", "message": (
            f"model class {cfg.dims.family!r} is not in the cell-name registry (autotune.config.cells): its "
            f"select_recompute / select_comm_recompute patterns are credited no saving")})
    return warnings


def _attention_terms(d: Any, *, c: float, s: float, b: float, h: int, a: int, g: int, hd: int,
                     t: int) -> tuple[float, float, float, float]:
    """(parameters, QKV activation bytes, attention-output bytes, causal core FLOPs) of one
    attention block; MLA (``q_lora_rank`` / ``kv_lora_rank``) counts its LoRA projections."""
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
    return attn_p, qkv_act, attn_out_act, core_flops


def _core_kept(d: Any, A: dict[str, float], *, c: float, s: float, b: float, a: int, t: int) -> float:
    """Bytes the attention core keeps for backward: flash attention's softmax statistics, or
    without it the s x s probabilities (softmax output in softmax_compute_type, its cast to the
    compute dtype for the AV matmul unless the dtypes agree, the dropout mask (1 bit) and output)."""
    if d.use_flash_attention:
        return A["softmax_stat_bytes"] * s * b * a / t
    per_elem = d.softmax_dtype_bytes + (c if d.softmax_dtype_bytes != c else 0)
    if d.attention_dropout > 0:
        per_elem += c + 1 / 8
    return per_elem * a * s * d.seq_length * b / t   # scores span the whole sequence


def _shape(cfg: TrainingConfig, dev: Device, A: dict[str, float], fam: Any,
           overrides: dict[str, float] | None) -> _Shape:
    """The sizes of :class:`_Shape` for ``cfg`` on ``dev`` under the assumptions ``A``."""
    d = cfg.dims
    t = cfg.model_parallel
    sp = cfg.use_seq_parallel
    c = d.compute_dtype_bytes
    b = A["micro_batch_size"]
    s = d.seq_length / cfg.context_parallel
    h, a, g, hd = d.hidden_size, d.num_heads, d.n_kv_heads, d.head_dim
    sbh = s * b * h
    sp_div = t if sp else 1
    mla = bool(d.q_lora_rank or d.kv_lora_rank)
    attn_p, qkv_act, attn_out_act, core_flops = _attention_terms(d, c=c, s=s, b=b, h=h, a=a, g=g, hd=hd, t=t)
    mlp_mats = 3 if d.gated_mlp else 2
    vocab_replicated = cfg.use_legacy and (d.vocab_emb_dp or d.vocab_size % t != 0)
    emb_bytes = float(d.embedding_dtype_bytes)
    if "weight_bytes" in (overrides or {}) or d.embedding_dtype_bytes == d.param_dtype_bytes:
        emb_bytes = A["weight_bytes"]      # --set weight_bytes applies to the table too
    groups = static_groups(cfg, A, vocab_replicated=vocab_replicated, embedding_bytes=emb_bytes)
    return _Shape(
        cfg=cfg, d=d, dev=dev, A=A, fam=fam, t=t, cp=cfg.context_parallel, ep=max(1, cfg.expert_parallel),
        sp=sp, c=c, b=b, s=s, h=h, a=a, g=g, hd=hd, vocab=d.vocab_size, sbh=sbh, sp_div=sp_div,
        mlp_mats=mlp_mats, mla=mla, attn_p=attn_p, qkv_act=qkv_act, attn_out_act=attn_out_act,
        core_flops=core_flops, core_kept=_core_kept(d, A, c=c, s=s, b=b, a=a, t=t),
        dropout_masks=2 * sbh / 8 / sp_div if d.hidden_dropout > 0 else 0.0, norms_p=2 * h,
        dense_mlp_p=mlp_mats * h * d.intermediate_size, vocab_replicated=vocab_replicated, groups=groups,
        bpp=groups["layer"].per_param, bpp_exp=groups["expert"].per_param, d_os=groups["layer"].d_os,
        d_os_exp=groups["expert"].d_os, ag_gbps=A["allgather_gbps"] if A["allgather_gbps"] > 0 else dev.p2p_gbps,
        out_proj_p=a * ((d.v_head_dim or hd) if mla else hd) * h,
        flops_per_ms=dev.peak_tflops * 1e12 * A["efficiency"] / 1e3)


def _layer_activation(x: _Shape, f_eff: float, experts: int, tokens_routed: float) -> float:
    """Activation bytes one layer keeps for backward (module docstring, "Activations")."""
    c, s, b, h, t, d = x.c, x.s, x.b, x.h, x.t, x.d
    norm_in = 2 * c * x.sbh / x.sp_div                        # two norm inputs
    norm_out = 2 * c * x.sbh                                  # two gathered norm outputs
    core = x.attn_out_act + x.core_kept
    mlp_in_out = (2 if d.gated_mlp else 1) * c * s * b * f_eff / t   # gate, up (GELU: up)
    act_mul = (2 if d.gated_mlp else 1) * c * s * b * f_eff / t      # SiLU and product (GELU out)
    # MoE: the dispatched expert input and the expert output kept for the combine, each
    # c·k·(capacity factor)·s·b·h, plus the fp32 router logits 4·s·b·E
    moe_div = t if d.moe_tokens_split_tp else 1
    moe_buf = (x.A["moe_buffer_copies"] * c * tokens_routed * s * b * h / moe_div
               + 4 * s * b * experts) if experts else 0.0
    return norm_in + norm_out + x.qkv_act + core + mlp_in_out + act_mul + moe_buf + x.dropout_masks


def _pattern_savings(x: _Shape, bwd: float, f_routed: float, f_shared: float,
                     experts: int) -> tuple[Any, Any, tuple[float, float], tuple[float, float]]:
    """(select op table, comm op table, default select saving, default comm saving) of one layer;
    (None, None, (0, 0), (0, 0)) for an unknown cell-name family."""
    if x.fam is None:
        return None, None, (0.0, 0.0), (0.0, 0.0)
    core = x.attn_out_act + x.core_kept
    sav = role_savings(c=x.c, s=x.s, b=x.b, h=x.h, t=x.t, qkv_bytes=x.qkv_act, core_bytes=core,
                       core_ms=x.core_flops / x.t / x.flops_per_ms, qkv_params=x.attn_p - x.out_proj_p,
                       out_proj_params=x.out_proj_p, heads=None if x.mla else (x.a, x.g),
                       f_routed=f_routed, f_shared=f_shared, experts=experts,
                       gated=x.d.gated_mlp, bwd_ms=bwd, select_frac=x.A["select_extra_frac"],
                       flops_per_ms=x.flops_per_ms)
    sel_ops, comm_ops = op_tables(x.fam, sav, comm_frac=x.A["comm_extra_frac"], bwd_ms=bwd)
    return (sel_ops, comm_ops, default_saving(x.fam, sel_ops, "select_recompute"),
            default_saving(x.fam, comm_ops, "select_comm_recompute"))


def _layer_kind(x: _Shape, mlp_params_tp: float, mlp_params_ep: float, active_mlp: float, f_routed: float,
                f_shared: float = 0.0, experts: int = 0, tokens_routed: float = 0.0) -> LayerKind:
    """One layer kind: times (ms), activation and static memory (MiB) and its recompute options."""
    t, cfg = x.t, x.cfg
    static_b = ((x.attn_p + mlp_params_tp) / t * x.bpp + x.norms_p * x.bpp
                + mlp_params_ep / (t * x.ep) * x.bpp_exp)
    flops = 2 * x.s * x.b * (x.attn_p + active_mlp) + x.core_flops
    fwd = flops / t / (x.dev.peak_tflops * 1e12 * x.A["efficiency"]) * 1e3
    bwd = 2 * fwd
    act = _layer_activation(x, f_routed + f_shared, experts, tokens_routed)
    slice_div = t if (x.sp or cfg.recompute_slice_activation) else 1
    act_full = x.c * x.sbh / slice_div
    if not cfg.mp_comm_recompute and t > 1:
        # mp_comm_recompute off: the outputs of the layer's two model-parallel collectives
        # (attention and MLP output reduce) are kept instead of replayed: 2·c·s·b·h (/t with SP)
        act_full += 2 * x.c * x.sbh / x.sp_div
    gathered, ag_ms = gathered_weights(x.attn_p + mlp_params_tp, mlp_params_ep, t=t, ep=x.ep,
                                       d_os=x.d_os, d_os_exp=x.d_os_exp, dtype_bytes=x.c,
                                       allgather_gbps=x.ag_gbps)
    static_b += gathered
    full_extra, full_ws, full_delta = fwd, act, 0.0
    if cfg.parallel_optimizer_comm_recompute and gathered > 0:
        full_extra += ag_ms
        full_ws += gathered
        full_delta = -gathered
    sel_ops, comm_ops, (sel_mib, sel_ms), (comm_mib, comm_ms) = _pattern_savings(x, bwd, f_routed, f_shared,
                                                                                 experts)
    act_mib = _mib(act)
    gemm = 2 * x.s * x.b * (x.attn_p + active_mlp)
    w_frac = gemm / (2 * (gemm + x.core_flops)) if gemm + x.core_flops > 0 else 0.5
    return LayerKind(
        fwd_ms=fwd, bwd_ms=bwd, act_mib=act_mib, static_mib=_mib(static_b), bwd_w_frac=w_frac,
        select_ops=sel_ops, comm_ops=comm_ops,
        full=RecomputeOption(act_mib=_mib(act_full), extra_ms=full_extra, workspace_mib=_mib(full_ws),
                             static_delta_mib=_mib(full_delta)),
        select=RecomputeOption(act_mib=max(0.0, act_mib - sel_mib), extra_ms=sel_ms),
        comm=RecomputeOption(act_mib=max(0.0, act_mib - comm_mib), extra_ms=comm_ms),
        both=RecomputeOption(act_mib=max(0.0, act_mib - sel_mib - comm_mib), extra_ms=sel_ms + comm_ms),
    )


def _layer_kinds(x: _Shape) -> tuple[dict[str, LayerKind], list[tuple[str, int]]]:
    """The layer kinds (``dense``, ``moe``) and the model's runs of them, first layer first."""
    d, h, mlp_mats = x.d, x.h, x.mlp_mats
    kinds: dict[str, LayerKind] = {}
    runs: list[tuple[str, int]] = []
    n = x.cfg.num_layers
    if not d.num_experts:
        kinds["dense"] = _layer_kind(x, x.dense_mlp_p, 0.0, x.dense_mlp_p, d.intermediate_size)
        runs.append(("dense", n))
        return kinds, runs
    cf = max(1.0, d.capacity_factor) if d.capacity_factor > 0 else 1.0
    moe_shared = d.shared_expert_num * mlp_mats * h * d.moe_intermediate_size
    moe_routed = d.num_experts * mlp_mats * h * d.moe_intermediate_size
    active = (d.num_experts_per_tok + d.shared_expert_num) * mlp_mats * h * d.moe_intermediate_size
    dense_n = min(d.first_k_dense_replace, n)
    if dense_n:
        kinds["dense"] = _layer_kind(x, x.dense_mlp_p, 0.0, x.dense_mlp_p, d.intermediate_size)
        runs.append(("dense", dense_n))
    kinds["moe"] = _layer_kind(x, moe_shared + h * d.num_experts, moe_routed, active + h * d.num_experts,
                               cf * d.num_experts_per_tok * d.moe_intermediate_size,
                               f_shared=d.shared_expert_num * d.moe_intermediate_size, experts=d.num_experts,
                               tokens_routed=cf * d.num_experts_per_tok)
    if n - dense_n:
        runs.append(("moe", n - dense_n))
    return kinds, runs


def _end_parts(x: _Shape, kinds: dict[str, LayerKind], runs: list[tuple[str, int]]) -> tuple[EndPart, EndPart]:
    """(head, tail): the embedding, and the final norm + LM head + loss with the MTP modules."""
    d, c, s, b, h, t, V = x.d, x.c, x.s, x.b, x.h, x.t, x.vocab
    v_div = 1 if x.vocab_replicated else t
    emb_p = V * h / v_div
    head = EndPart(static_mib=_mib(emb_p * x.groups["embedding"].per_param), act_mib=_mib(c * x.sbh / t))
    tail_flops = 2 * s * b * h * V / v_div
    tail_fwd = tail_flops / (x.dev.peak_tflops * 1e12 * x.A["efficiency"]) * 1e3
    tail_static = emb_p * x.groups["vocab"].per_param + h * x.bpp
    tail_act = 2 * c * x.sbh / x.sp_div + 8 * s * b * V / t
    tail_ws = 8 * s * b * V / t + (c * s * b * V / v_div if x.vocab_replicated and t > 1 else 0.0)
    tail_bwd = 2 * tail_fwd
    mtp_w = 0.0
    if d.mtp_num_layers:
        last = kinds[runs[-1][0]]
        tail_static += d.mtp_num_layers * (last.static_mib * BYTES_PER_MIB + 2 * h * h / t * x.bpp)
        tail_fwd += d.mtp_num_layers * (last.fwd_ms + tail_fwd)
        tail_bwd += d.mtp_num_layers * (last.bwd_ms + 2 * tail_fwd)
        tail_act += d.mtp_num_layers * last.act_mib * BYTES_PER_MIB
        mtp_w = d.mtp_num_layers * last.bwd_ms * (last.w_frac - 0.5)
    # W of the tail: half of its GEMM backward (LM head, MTP projections), the MTP layers' own W
    tail_w_frac = (0.5 * tail_bwd + mtp_w) / tail_bwd if tail_bwd > 0 else 0.5
    tail = EndPart(fwd_ms=tail_fwd, bwd_ms=tail_bwd, static_mib=_mib(tail_static),
                   act_mib=_mib(tail_act), workspace_mib=_mib(tail_ws), bwd_w_frac=tail_w_frac)
    return head, tail


def _assumption_record(x: _Shape) -> dict[str, Any]:
    """Every number the profile used (its ``assumptions``): ``A`` plus the derived sizes."""
    d, dev, fam = x.d, x.dev, x.fam
    assumptions: dict[str, Any] = dict(x.A)
    assumptions.update({
        "device": dev.name, "device_peak_tflops": dev.peak_tflops, "device_p2p_gbps": dev.p2p_gbps,
        "static_bytes_per_param": round(x.bpp, 4), "optimizer_shard_group": x.d_os,
        "gradient_sharded": x.groups["layer"].grad_sharded,
        "model_parallel": x.t, "context_parallel": x.cp, "expert_parallel": x.ep,
        "sequence_parallel": x.sp, "compute_dtype_bytes": x.c,
        "param_dtype_bytes": d.param_dtype_bytes, "embedding_dtype_bytes": d.embedding_dtype_bytes,
        "use_flash_attention": d.use_flash_attention, "softmax_dtype_bytes": d.softmax_dtype_bytes,
        "gated_mlp": d.gated_mlp, "moe_capacity_factor": d.capacity_factor,
        "frozen_base_weights": d.frozen_base, "vocab_replicated_over_mp": x.vocab_replicated,
        "cell_family": fam.name if fam is not None else None,
        "optimizer_shard_group_experts": x.d_os_exp, "allgather_gbps_used": x.ag_gbps,
        "parallel_optimizer_comm_recompute": x.cfg.parallel_optimizer_comm_recompute,
    })
    for note in d.notes:
        assumptions.setdefault("notes", []).append(note)
    return assumptions


def _sources(x: _Shape) -> dict[str, str]:
    """Where each formula of the profile comes from (its ``sources``)."""
    return {"activation": "Korthikanti et al. 2022 (arXiv 2205.05198) §4, adapted (module docstring)",
            "parameters": "Narayanan et al. 2021 (arXiv 2104.04473) Eq. 2, generalized",
            "static_bytes": "MindFormers AdamW fp32 states, parameter-dtype gradients, MindSpore "
                            "optimizer parallel (static_groups; docs/profiles.md, Memory keys)",
            "recompute_time": "SAPP defaults, cost-model reference §3.4",
            "cell_names": x.fam.source if x.fam is not None else "unknown model class: no select saving",
            "bwd_w_frac": "weight-gradient GEMMs / backward FLOPs (Qi et al. ICLR 2024 §2 B/W "
                          "split; module docstring)",
            "gathered_weights": "MindSpore optimizer parallel (reference §5.1) + ring all-gather "
                                "(d-1)/d; held once per step (assumption, module docstring)",
            "device": x.dev.source}


def analytic_profile(cfg: TrainingConfig, device: str | Device = "ascend-910b", *,
                     overrides: dict[str, float] | None = None) -> ModelProfile:
    """Derive a :class:`ModelProfile` from a training config's dims and parallel sizes.

    Args:
        cfg: validated training config; needs ``model.model_config`` dims (hidden_size, …).
        device: preset name or :class:`Device`.
        overrides: replaces entries of :data:`DEFAULT_ASSUMPTIONS` (unknown keys rejected).

    Returns:
        A profile with kinds ``dense`` (and ``moe`` for MoE models), head, tail, stage constant and
        p2p time; ``assumptions`` lists every number used, ``sources`` the formulas' sources,
        ``model_warnings`` what the YAML sets that is not modelled (``W_MEMORY_KEY_IGNORED``) and an
        unknown cell-name family (``W_FAMILY_UNKNOWN``: select / comm recompute save nothing).

    Raises:
        ConfigError: the YAML has no model dims, or an override key is unknown.
    """
    dev = get_device(device) if isinstance(device, str) else device
    d = cfg.dims
    if d is None:
        raise ConfigError("model dims are needed for an analytic profile (hidden_size, num_heads, "
                          f"intermediate_size, seq_length, vocab_size){missing_dims_hint(cfg.raw)}",
                          field="model.model_config.hidden_size", value=None, rule="R_MISSING")
    A = _assumptions(cfg, overrides)
    mode = "legacy" if cfg.use_legacy else "mcore"
    fam = family_for(d.family, mode, moe=bool(d.num_experts), shared=bool(d.shared_expert_num),
                     concat=d.qkv_concat)
    warnings = _model_warnings(cfg, fam)
    x = _shape(cfg, dev, A, fam, overrides)
    kinds, runs = _layer_kinds(x)
    head, tail = _end_parts(x, kinds, runs)
    p2p = x.c * x.sbh / x.sp_div / (dev.p2p_gbps * 1e9) * 1e3 + dev.p2p_latency_ms
    return ModelProfile(
        name=f"analytic:{cfg.source}", device=dev.name, kinds=kinds, layer_kinds=runs, head=head,
        tail=tail, stage_const_mib=A["stage_const_mib"], p2p_ms=p2p, assumptions=_assumption_record(x),
        model_warnings=warnings, sources=_sources(x))
