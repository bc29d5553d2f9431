"""Memory terms of a Megatron run: Megatron-LM's own theoretical estimate, reproduced, and the
parameter counts autotune's per-stage model uses.

:func:`theoretical_memory` re-derives, from its formulas (not its code), what Megatron-LM prints as
``Theoretical memory footprints: weight and optimizer=… MB, activation=… MB`` —
megatron/training/theoretical_memory_usage.py (mirror commit d98e8a64dd), functions
``compute_weight_and_optimizer_memory``, ``compute_activation_memory`` (sequence parallel with
selective recompute) and ``compute_activation_memory_without_sp`` (otherwise), chosen by
``report_theoretical_memory``. Its terms:

- **weights + gradients + optimizer**, on the most loaded rank (the first pipeline rank: 1/pp of
  the decoder, the whole MTP block and the embedding): parameters split into TP-sharded
  (attention, dense MLP, shared experts, embedding; /TP), replicated (norms ``2·h·norm`` per layer,
  router ``h·E`` (+E with biases), final norm) and expert-sharded (routed experts; /(ETP·EP)),
  times bytes per parameter ``18`` (bf16 weight 2 + fp32 grad 4 + fp32 master 4 + Adam 8) or with
  ``--use-distributed-optimizer`` ``6 + 12/d``, d = data parallel size (experts: the expert data
  parallel size world/(ETP·EP·PP)). Attention ``2h²(1 + g/a)·(a·d/h)``; MLA: q term
  ``q_lora·(h + a·(qk + rope) + norm)`` (or ``h·a·(qk+rope)`` without q LoRA) +
  ``kv_lora·(h + a·(qk + v) + norm) + h·rope + a·v·h``; MLP ``2·h·f·(3/2 with SwiGLU)``.
- **activations** (first stage, Korthikanti et al. 2022 Table 2): with sequence parallel and
  selective recompute ``s·b·h·(18 + 4·f/h)`` per layer × num_layers (pp ranks hold pp micro-batches
  of L/pp layers) + ``8·s·b·pp`` + ``s·b·h·pp`` (embedding input and dropout), × the interleave
  penalty ``1 + (pp−1)/(pp·vpp)`` or × ``min(1, m/pp)`` without interleaving, + ``4·s·b·h·(1+V/h)``
  when pp = 1 (output layer and loss), all / TP; otherwise ``s·b·h·(10 + 24/TP)`` per layer, the same
  embedding terms and factors, + ``2·(s·b·V/TP + s·b·h)`` when pp = 1, × 1.05 (not divided by TP).

These are estimates of one rank; autotune's per-stage model (:mod:`autotune.megatron.profile`)
is more detailed: see docs/megatron.md.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from autotune.units import BYTES_PER_MIB


@dataclass(frozen=True)
class Params:
    """Parameter counts of one Megatron model (whole model, not per rank), by how they are held.

    ``attention`` per layer; ``dense_mlp`` / ``shared`` / ``routed`` per layer; ``norms`` (the two
    layer norms) per layer; ``router`` (+ shared-expert gate) per MoE layer; ``embedding`` one table
    ``V_pad·h``; ``final_norm``; ``mtp_extra`` the MTP module's own projection and norms (autotune
    only: Megatron's estimate counts an MTP layer as one decoder layer).
    """

    attention: float
    dense_mlp: float
    shared: float
    routed: float
    routed_active: float
    norms: float
    router: float
    embedding: float
    final_norm: float
    mtp_extra: float

    @property
    def dense_layer(self) -> float:
        return self.attention + self.dense_mlp + self.norms

    @property
    def moe_layer(self) -> float:
        return self.attention + self.shared + self.routed + self.norms + self.router


def params(run: Any) -> Params:
    """:class:`Params` of a :class:`~autotune.megatron.run.MegatronRun` (module docstring terms)."""
    h, a = run.hidden, run.heads
    ns = run.norm_size
    if run.mla:
        qk = run.qk_head + run.qk_rope
        q = h * a * qk if not run.q_lora else run.q_lora * (h + a * qk + ns)
        attn = q + run.kv_lora * (h + a * (run.qk_head + run.v_head) + ns) + h * run.qk_rope + a * run.v_head * h
    else:
        attn = 2 * h * h * ((1 + run.query_groups / a) * (run.kv_channels * a / h))
    glu = 1.5 if run.swiglu else 1.0
    experts = run.num_experts
    add_bias = not run.args.has("disable_bias_linear")
    router = (h * experts + (experts if add_bias else 0)) if experts else 0
    gate = h if run.shared_ffn and run.args.has("moe_shared_expert_gate") else 0
    return Params(
        attention=float(attn), dense_mlp=2 * h * run.ffn * glu, shared=2 * h * run.shared_ffn * glu,
        routed=2 * h * run.moe_ffn * max(experts, 1) * glu if experts else 0.0,
        routed_active=2 * h * run.moe_ffn * run.topk * glu if experts else 0.0,
        norms=float(2 * h * ns), router=float(router + gate), embedding=float(h * run.padded_vocab),
        final_norm=float(ns * h), mtp_extra=float(2 * h * h + 3 * ns * h) if run.mtp else 0.0)


def bytes_per_param(run: Any, shard: int) -> float:
    """Bytes per parameter of weight + gradient + optimizer state on one rank: bf16/fp16 training
    ``18`` (``6 + 12/shard`` with ``--use-distributed-optimizer``), fp32 ``16`` (``8 + 8/shard``)
    (Megatron-LM docs/user-guide/features/dist_optimizer.md; the estimator assumes bf16)."""
    kept, sharded = (8.0, 8.0) if run.dtype == "fp32" else (6.0, 12.0)
    return kept + (sharded / shard if run.dist_opt else sharded)


def theoretical_memory(run: Any, num_microbatches: int | None = None) -> dict[str, float]:
    """What Megatron-LM's ``report_theoretical_memory`` prints for this run (MB = MiB), plus the
    parameter totals it logs with ``verbose``.

    Returns: {"weight_and_optimizer_mb", "activation_mb", "total_mb", "params_total",
    "params_most_loaded_shard", "with_sp_formula" (1.0 when the sequence-parallel formula applies)}.
    """
    P = params(run)
    pattern = run.moe_pattern
    n = run.num_layers
    n_moe = sum(pattern)
    n_dense = n - n_moe
    mtp_moe = pattern[-1] * run.mtp if run.mtp else 0
    mtp_dense = run.mtp - mtp_moe if run.mtp else 0
    pp, tp = run.pp, run.tp
    etp, ep = run.etp, run.ep
    emb = P.embedding
    emb_layers = 2 * emb if run.untied else emb
    moe_repl = P.norms + P.router
    block_total = P.dense_layer * n_dense + P.moe_layer * n_moe + P.final_norm
    mtp_total = P.dense_layer * mtp_dense + P.moe_layer * mtp_moe
    tp_block = (P.attention + P.dense_mlp) * n_dense + (P.attention + P.shared) * n_moe
    repl_block = P.norms * n_dense + moe_repl * n_moe + P.final_norm
    exp_block = P.routed * n_moe
    tp_mtp = (P.attention + P.dense_mlp) * mtp_dense + (P.attention + P.shared) * mtp_moe
    repl_mtp = P.norms * mtp_dense + moe_repl * mtp_moe
    exp_mtp = P.routed * mtp_moe
    tp_most = (tp_block / pp + tp_mtp + emb) / tp
    repl_most = repl_block / pp + repl_mtp
    exp_most = (exp_block / pp + exp_mtp) / (etp * ep)
    if run.untied and pp == 1:
        tp_most += emb / tp
    edp = run.world // (etp * ep * pp)

    def bpp(d: int) -> float:
        return 18.0 if not run.dist_opt else 6.0 + 12.0 / d

    weights = (tp_most + repl_most) * bpp(run.dp) + exp_most * bpp(edp)
    s, b, h = run.seq, run.mbs, run.hidden
    vpp = run.vpp if run.vpp > 1 else None
    with_sp = run.sp and run.granularity == "selective"
    per_layer = s * b * h * ((18 + 4 * run.ffn / h) if with_sp else (10 + 24 / tp))
    act = per_layer * n + 8 * s * b * pp + s * b * h * pp
    if vpp is not None:
        act *= 1 + (pp - 1) / (pp * vpp)
    elif pp > 1 and num_microbatches is not None:
        act *= min(1.0, num_microbatches / pp)
    if with_sp:
        if pp == 1:
            act += s * b * h * 4 * (1 + run.padded_vocab / h)
        act /= tp
    else:
        if pp == 1:
            act += (s * b * run.padded_vocab / tp + s * b * h) * 2
        act *= 1.05
    w_mb, a_mb = weights / BYTES_PER_MIB, act / BYTES_PER_MIB
    return {"weight_and_optimizer_mb": w_mb, "activation_mb": a_mb, "total_mb": w_mb + a_mb,
            "params_total": block_total + mtp_total + emb_layers,
            "params_most_loaded_shard": tp_most + repl_most + exp_most,
            "with_sp_formula": 1.0 if with_sp else 0.0}


def in_flight_microbatches(run: Any) -> int:
    """Megatron's count of micro-batches in flight on the first stage (its verbose log):
    ``ceil((1 + (pp−1)/(pp·vpp))·pp)`` interleaved, ``min(m, pp)`` otherwise."""
    if run.vpp > 1:
        return math.ceil((1 + (run.pp - 1) / (run.pp * run.vpp)) * run.pp)
    return min(run.m, run.pp)
