"""Layer profile of a Megatron run: the analytic profile's times with Megatron's memory terms.

Times (forward, backward, weight-gradient share, head/tail, p2p) come from
:func:`autotune.profile.analytic.analytic_profile` on a :class:`TrainingConfig` built from the flags
(:func:`training_config`); the memory of every layer kind, the head and the tail is replaced by
Megatron's accounting:

- **static** per rank = parameters held × :func:`autotune.megatron.memory.bytes_per_param`:
  attention, dense MLP, shared experts, embedding and output layer /TP; norms, router replicated;
  routed experts /(ETP·EP) with the expert data-parallel shard world/(ETP·EP·PP). The distributed
  optimizer shards over DP·CP (Megatron's data-parallel group with context parallel; its
  theoretical estimate divides by DP only — equal when CP = 1). The last stage holds the output
  layer (also when embeddings are tied and PP > 1: Megatron keeps a copy there), the final norm and
  the MTP layers with their projection ``2h·h/TP`` and three norms.
- **activations** per layer and micro-batch (bytes; c = bytes of the compute dtype, s = seq/CP, b =
  micro batch, /sp = /TP with sequence parallel; flash attention, no dropout) as named
  *components*: ``ln1_in``, ``ln1_out`` ``c·s·b·h/sp`` each; ``qkv`` ``c·s·b·(a+2g)·d/TP`` (MLA: the
  up-projected ``c·s·b·a·(2(qk+rope)+v)/TP`` plus latents ``c·s·b·(q_lora+kv_lora+rope)/sp``);
  ``attn_lse`` ``4·s·b·a/TP`` (fp32 log-sum-exp); ``attn_out`` ``c·s·b·a·v/TP``; ``ln2_in``, ``ln2_out``;
  dense ``fc1`` ``(2 with SwiGLU)·c·s·b·f/TP`` and ``act`` ``c·s·b·f/TP``; MoE ``moe_in``
  ``c·s·b·k·h/TP`` (permuted tokens), ``moe_fc1``, ``moe_act`` (the same with f_moe, ×k),
  ``router`` ``4·s·b·E/sp``, shared experts ``sh_fc1``, ``sh_act``.
- **selective recompute** (``--recompute-modules``) frees components: core_attn -> attn_lse (with
  flash attention the inputs q, k, v and the output are kept by the neighbouring GEMMs: only the
  softmax statistics go); layernorm -> ln1_out, ln2_out; mlp -> fc1, act (dense layers); moe ->
  moe_in, moe_fc1, moe_act, router, sh_fc1, sh_act; moe_act -> moe_act; shared_experts -> sh_fc1,
  sh_act; mla_up_proj -> qkv. A set frees the union; its replay time is the modules' forward FLOPs
  at the profile's throughput (GEMMs, core attention) or the analytic profile's elementwise
  coefficient (``select_extra_frac``·backward per SiLU+product pair, half of it per norm). The set
  is folded into the kind's ``select`` option and applies to every layer (Megatron has no per-layer
  selection): the cost model's select count = the layer count of every virtual stage.
- **full recompute** keeps the layer input ``c·s·b·h/sp``, replays one forward and needs one
  layer's activations as workspace during its backward.
"""

from __future__ import annotations

from typing import Any

from autotune.config.training import ModelDims, TrainingConfig
from autotune.megatron.memory import bytes_per_param, params
from autotune.profile.analytic import DEFAULT_ASSUMPTIONS, analytic_profile, check_overrides
from autotune.profile.devices import get_device
from autotune.profile.schema import EndPart, LayerKind, ModelProfile, RecomputeOption
from autotune.units import BYTES_PER_MIB

FREES = {"core_attn": ("attn_lse",), "layernorm": ("ln1_out", "ln2_out"), "mlp": ("fc1", "act"),
         "moe": ("moe_in", "moe_fc1", "moe_act", "router", "sh_fc1", "sh_act"), "moe_act": ("moe_act",),
         "shared_experts": ("sh_fc1", "sh_act"), "mla_up_proj": ("qkv",)}


def training_config(run: Any, *, hbm_mib: float | None = None, layers_vp: list[list[int]] | None = None,
                    ) -> TrainingConfig:
    """The :class:`TrainingConfig` the cost model and the analytic profile read (MindFormers terms:
    pipeline_stage = PP, micro_batch_num = m, pp_interleave_num = VPP, offset = layers − N//(PP·VPP),
    model_parallel = TP, mcore op names, no MindSpore optimizer parallel)."""
    table = layers_vp if layers_vp is not None else run.layers_vp
    V, P = len(table), len(table[0])
    base = run.num_layers // (P * V)
    offset = [[c - base for c in row] for row in table]
    n_dense = run.num_layers - sum(run.moe_pattern)
    f_time = run.ffn if run.swiglu else max(1, round(run.ffn * 2 / 3))   # 3·h·f' = 2·h·f FLOPs (GeLU MLP)
    fm_time = run.moe_ffn if run.swiglu else max(1, round(run.moe_ffn * 2 / 3))
    dims = ModelDims(
        hidden_size=run.hidden, num_heads=run.heads, n_kv_heads=run.query_groups, head_dim=run.kv_channels,
        intermediate_size=f_time, seq_length=run.seq, vocab_size=run.padded_vocab,
        num_experts=run.num_experts, num_experts_per_tok=run.topk, moe_intermediate_size=fm_time,
        shared_expert_num=round(run.shared_ffn / run.moe_ffn) if run.num_experts and run.moe_ffn else 0,
        first_k_dense_replace=n_dense if run.num_experts else 0, mtp_num_layers=run.mtp,
        tie_word_embeddings=not run.untied, q_lora_rank=run.q_lora, kv_lora_rank=run.kv_lora,
        qk_nope_head_dim=run.qk_head, qk_rope_head_dim=run.qk_rope, v_head_dim=run.v_head,
        compute_dtype_bytes=4 if run.dtype == "fp32" else 2, param_dtype_bytes=4)
    return TrainingConfig(
        source=run.source, num_layers=run.num_layers, pipeline_stage=P, micro_batch_num=run.m,
        pp_interleave_num=V, pipeline_interleave=V > 1, offset=offset if V > 1 else offset[0],
        data_parallel=run.dp, model_parallel=run.tp, context_parallel=run.cp, expert_parallel=run.ep,
        use_seq_parallel=run.sp, use_legacy=False, hbm_mib=hbm_mib, dims=dims, batch_size=run.mbs,
        raw={"runner_config": {"batch_size": run.mbs}})


def activation_components(run: Any, moe: bool) -> dict[str, float]:
    """Activation components of one layer (bytes per micro-batch per rank; module docstring)."""
    c = 4.0 if run.dtype == "fp32" else 2.0
    s = run.seq / run.cp
    b = run.mbs
    h, a, t = run.hidden, run.heads, run.tp
    sp = t if run.sp else 1
    comp = {"ln1_in": c * s * b * h / sp, "ln1_out": c * s * b * h / sp}
    if run.mla:
        qk = run.qk_head + run.qk_rope
        comp["qkv"] = c * s * b * a * (2 * qk + run.v_head) / t
        comp["mla_latent"] = c * s * b * (run.q_lora + run.kv_lora + run.qk_rope) / sp
        vd = run.v_head
    else:
        comp["qkv"] = c * s * b * (a + 2 * run.query_groups) * run.kv_channels / t
        vd = run.kv_channels
    comp["attn_lse"] = 4.0 * s * b * a / t
    comp["attn_out"] = c * s * b * a * vd / t
    comp["ln2_in"] = c * s * b * h / sp
    comp["ln2_out"] = c * s * b * h / sp
    glu = 2 if run.swiglu else 1
    if moe:
        k, fm = run.topk, run.moe_ffn
        comp["router"] = 4.0 * s * b * run.num_experts / sp
        comp["moe_in"] = c * s * b * k * h / t
        comp["moe_fc1"] = glu * c * s * b * k * fm / t
        comp["moe_act"] = c * s * b * k * fm / t
        if run.shared_ffn:
            comp["sh_fc1"] = glu * c * s * b * run.shared_ffn / t
            comp["sh_act"] = c * s * b * run.shared_ffn / t
    else:
        comp["fc1"] = glu * c * s * b * run.ffn / t
        comp["act"] = c * s * b * run.ffn / t
    return comp


def module_replay_ms(run: Any, module: str, moe: bool, bwd_ms: float, flops_per_ms: float,
                     select_frac: float) -> float:
    """Replay time (ms per micro-batch) of one selective-recompute module in one layer kind (0
    where the module does not apply to the kind)."""
    s = run.seq / run.cp
    b, h, a, t = run.mbs, run.hidden, run.heads, run.tp
    mats = 3 if run.swiglu else 2
    ew = select_frac * bwd_ms / 2
    if module == "core_attn":
        if run.mla:
            core = s * s * b * a * (run.qk_head + run.qk_rope + run.v_head)
        else:
            core = 2 * s * s * b * a * run.kv_channels
        return core / t / flops_per_ms
    if module == "layernorm":
        return 2 * (ew / 2)
    if module == "mlp":
        return 0.0 if moe else 2 * s * b * mats * h * run.ffn / t / flops_per_ms
    if module == "moe":
        if not moe:
            return 0.0
        work = run.topk * mats * h * run.moe_ffn + mats * h * run.shared_ffn + h * run.num_experts
        return 2 * s * b * work / t / flops_per_ms
    if module == "moe_act":
        return ew * 2 if moe else 0.0
    if module == "shared_experts":
        return 2 * s * b * mats * h * run.shared_ffn / t / flops_per_ms if moe else 0.0
    if module == "mla_up_proj":
        if not run.mla:
            return 0.0
        qk = run.qk_head + run.qk_rope
        q_in = run.q_lora or h
        return 2 * s * b * (q_in * a * qk + run.kv_lora * a * (run.qk_head + run.v_head)) / t / flops_per_ms
    raise ValueError(f"unknown module {module!r}")


def selective_option(run: Any, modules: list[str] | tuple[str, ...], moe: bool, act_bytes: float,
                     bwd_ms: float, flops_per_ms: float, select_frac: float) -> tuple[float, float]:
    """(activation bytes kept, replay ms) of a layer kind under a module set (module docstring)."""
    comp = activation_components(run, moe)
    freed = {x for mod in modules for x in FREES[mod] if x in comp}
    extra = 0.0
    for mod in modules:
        if "moe" in modules and mod in ("moe_act", "shared_experts"):
            continue   # inside the recomputed MoE layer already
        extra += module_replay_ms(run, mod, moe, bwd_ms, flops_per_ms, select_frac)
    return act_bytes - sum(comp[x] for x in freed), extra


def megatron_profile(run: Any, device: str = "h100", *, modules: list[str] | tuple[str, ...] | None = None,
                     overrides: dict[str, float] | None = None, base: ModelProfile | None = None,
                     select_override: dict[str, tuple[float, float]] | None = None) -> ModelProfile:
    """The :class:`ModelProfile` of a Megatron run (module docstring).

    Args:
        run: a :class:`~autotune.megatron.run.MegatronRun`.
        device: preset name (``autotune.profile.devices``).
        modules: the selective-recompute module set folded into every kind's ``select`` option
            (None or empty: ``select`` saves nothing).
        overrides: analytic-profile assumptions (``--set``), e.g. efficiency, stage_const_mib.
        base: an analytic profile already derived for this run (saves time when building many).
        select_override: kind -> (act MiB, extra ms) for the ``select`` option instead of
            ``modules`` (used for the relaxation bound).

    Raises:
        ConfigError: an unknown device or assumption.
    """
    cfg = training_config(run)
    prof = base or analytic_profile(cfg, get_device(device), overrides=overrides)
    A = dict(DEFAULT_ASSUMPTIONS)
    A.update(check_overrides(overrides))
    dev = get_device(device)
    flops_per_ms = dev.peak_tflops * 1e12 * A["efficiency"] / 1e3
    P = params(run)
    shard = run.dp * run.cp
    edp = max(1, run.world // (run.etp * run.ep * run.pp))
    bpp, bpp_e = bytes_per_param(run, shard), bytes_per_param(run, edp)
    tp = run.tp
    c = 4.0 if run.dtype == "fp32" else 2.0
    s = run.seq / run.cp
    sp = tp if run.sp else 1
    layer_in = c * s * run.mbs * run.hidden / sp
    mib = 1.0 / BYTES_PER_MIB
    kinds: dict[str, LayerKind] = {}
    static_of: dict[str, float] = {}
    for name, lk in prof.kinds.items():
        moe = name == "moe"
        if moe:
            static = ((P.attention + P.shared) / tp + P.norms + P.router) * bpp + P.routed / (run.etp * run.ep) * bpp_e
        else:
            static = ((P.attention + P.dense_mlp) / tp + P.norms) * bpp
        static_of[name] = static
        comp = activation_components(run, moe)
        act = sum(comp.values())
        if select_override is not None and name in select_override:
            sel_act_mib, sel_ms = select_override[name]
        elif modules:
            kept, extra = selective_option(run, modules, moe, act, lk.bwd_ms, flops_per_ms, A["select_extra_frac"])
            sel_act_mib, sel_ms = kept * mib, extra
        else:
            sel_act_mib, sel_ms = act * mib, 0.0
        kinds[name] = LayerKind(
            fwd_ms=lk.fwd_ms, bwd_ms=lk.bwd_ms, act_mib=act * mib, static_mib=static * mib,
            bwd_w_frac=lk.bwd_w_frac,
            full=RecomputeOption(act_mib=layer_in * mib, extra_ms=lk.fwd_ms, workspace_mib=act * mib),
            select=RecomputeOption(act_mib=sel_act_mib, extra_ms=sel_ms))
    runs: list[tuple[str, int]] = []
    for flag in run.moe_pattern:
        kind = "moe" if flag else "dense"
        if runs and runs[-1][0] == kind:
            runs[-1] = (kind, runs[-1][1] + 1)
        else:
            runs.append((kind, 1))
    head = EndPart(fwd_ms=prof.head.fwd_ms, bwd_ms=prof.head.bwd_ms, act_mib=prof.head.act_mib,
                   static_mib=P.embedding / tp * bpp * mib, bwd_w_frac=prof.head.bwd_w_frac)
    tail_static = P.final_norm * bpp
    if run.untied or run.pp > 1:
        tail_static += P.embedding / tp * bpp
    V = run.padded_vocab
    tail_act = 2 * c * s * run.mbs * run.hidden / sp + 8.0 * s * run.mbs * V / tp
    if run.mtp:
        mk = "moe" if run.moe_pattern[-1] else "dense"
        tail_static += run.mtp * (static_of[mk] + (2 * run.hidden * run.hidden / tp) * bpp
                                  + 3 * run.norm_size * run.hidden * bpp)
        tail_act += run.mtp * (sum(activation_components(run, mk == "moe").values())
                               + 2 * c * s * run.mbs * run.hidden / sp + 8.0 * s * run.mbs * V / tp)
    tail = EndPart(fwd_ms=prof.tail.fwd_ms, bwd_ms=prof.tail.bwd_ms, static_mib=tail_static * mib,
                   act_mib=tail_act * mib, workspace_mib=prof.tail.workspace_mib, bwd_w_frac=prof.tail.bwd_w_frac)
    assumptions = dict(prof.assumptions)
    assumptions.update({"static_bytes_per_param": round(bpp, 4), "static_bytes_per_param_experts": round(bpp_e, 4),
                        "optimizer_shard_group": shard, "optimizer_shard_group_experts": edp,
                        "selective_modules": list(modules or []), "framework": "megatron"})
    sources = dict(prof.sources)
    sources.update({"static_bytes": "Megatron-LM theoretical_memory_usage.py / dist_optimizer.md "
                                    "(autotune.megatron.memory)",
                    "activation": "Korthikanti et al. 2022 adapted to Megatron-Core modules "
                                  "(autotune.megatron.profile docstring)"})
    return ModelProfile(name=f"megatron:{run.source}", device=prof.device, kinds=kinds, layer_kinds=runs,
                        head=head, tail=tail, stage_const_mib=prof.stage_const_mib, p2p_ms=prof.p2p_ms,
                        assumptions=assumptions, sources=sources)
