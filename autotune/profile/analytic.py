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
  and optimizer state are sharded over the optimizer group d_os: ``12/d_os + 4``.
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
- **Tail**: final norm + LM head (``2·s·b·h·V/t`` FLOPs) + loss; activation ``2·c·s·b·h`` +
  fp32 logits and their softmax ``8·s·b·V/t``. MTP modules (r1.7+ semantics) sit on the last stage
  and are added to the tail. **Head**: embedding table, activation ``c·s·b·h/t``.
- **p2p**: one activation ``c·s·b·h`` (/t with sequence parallel) over the device's p2p bandwidth.
"""

from __future__ import annotations

from typing import Any

from autotune.config.training import TrainingConfig, get_path
from autotune.errors import ConfigError
from autotune.profile.devices import Device, get_device
from autotune.profile.schema import EndPart, LayerKind, ModelProfile, RecomputeOption
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
}


def _mib(x: float) -> float:
    return x / BYTES_PER_MIB


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
        A[key] = float(val)
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

    def kind(mlp_params_tp: float, mlp_params_ep: float, active_mlp: float, f_eff: float) -> LayerKind:
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
        return LayerKind(
            fwd_ms=fwd, bwd_ms=bwd, act_mib=_mib(act), static_mib=_mib(static_b),
            full=RecomputeOption(act_mib=_mib(act_full), extra_ms=fwd, workspace_mib=_mib(act)),
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
        kinds["moe"] = kind(moe_shared + h * d.num_experts, moe_routed, active + h * d.num_experts, f_moe)
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
    if d.mtp_num_layers:
        last = kinds[runs[-1][0]]
        tail_static += d.mtp_num_layers * (last.static_mib * BYTES_PER_MIB + 2 * h * h / t * bpp)
        tail_fwd += d.mtp_num_layers * (last.fwd_ms + tail_fwd)
        tail_bwd += d.mtp_num_layers * (last.bwd_ms + 2 * tail_fwd)
        tail_act += d.mtp_num_layers * last.act_mib * BYTES_PER_MIB
    tail = EndPart(fwd_ms=tail_fwd, bwd_ms=tail_bwd, static_mib=_mib(tail_static),
                   act_mib=_mib(tail_act), workspace_mib=_mib(8 * s * b * V / t))
    p2p = c * sbh / sp_div / (dev.p2p_gbps * 1e9) * 1e3 + dev.p2p_latency_ms
    assumptions: dict[str, Any] = dict(A)
    assumptions.update({
        "device": dev.name, "device_peak_tflops": dev.peak_tflops, "device_p2p_gbps": dev.p2p_gbps,
        "static_bytes_per_param": round(bpp, 4), "optimizer_shard_group": d_os,
        "model_parallel": t, "context_parallel": cp, "expert_parallel": ep,
        "sequence_parallel": sp, "compute_dtype_bytes": c,
    })
    return ModelProfile(
        name=f"analytic:{cfg.source}", device=dev.name, kinds=kinds, layer_kinds=runs, head=head,
        tail=tail, stage_const_mib=A["stage_const_mib"], p2p_ms=p2p, assumptions=assumptions,
        sources={"activation": "Korthikanti et al. 2022 (arXiv 2205.05198) §4, adapted (module docstring)",
                 "parameters": "Narayanan et al. 2021 (arXiv 2104.04473) Eq. 2, generalized",
                 "static_bytes": "cost-model reference §5.1 (MindSpore AdamW, optimizer parallel)",
                 "recompute_time": "SAPP defaults, cost-model reference §3.4",
                 "device": dev.source},
    )
