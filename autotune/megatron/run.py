"""A Megatron-LM training run as autotune models it: model dims, parallel sizes, pipeline layout
and recompute, read from Megatron's own arguments (:class:`MegatronRun`, :func:`build_run`).

Every default and rule below is Megatron-LM's (mirror commit d98e8a64dd, 2026-08-22, and the
releases named), recorded as facts:

- ``ffn_hidden_size`` unset: ``int(4h·2/3 / 64)·64`` with ``--swiglu``, else ``4h``;
  ``kv_channels`` unset: ``h / heads``; ``num_query_groups`` only with ``--group-query-attention``
  (else = heads); ``moe_ffn_hidden_size`` unset: ``ffn_hidden_size``; ``moe_router_topk`` 2;
  ``moe_layer_freq`` 1 (an int k: layer i is MoE when ``i % k == 0``; or a list such as
  ``[0]*3+[1]*58``); MLA defaults ``q_lora_rank`` None, ``kv_lora_rank`` 32, ``qk_head_dim`` 128,
  ``qk_pos_emb_head_dim`` 64, ``v_head_dim`` 128; ``expert_tensor_parallel_size`` unset = TP
  (megatron/training/arguments.py, ``validate_args``).
- padded vocabulary: ``ceil(vocab / (make_vocab_size_divisible_by · TP)) · (that multiple)``,
  divisible-by default 128 (megatron/core/tokenizers/utils/build_tokenizer.py,
  ``vocab_size_with_padding``).
- data parallel size = world / (TP · PP · CP); micro-batches per step = global batch /
  (micro batch · DP), which must divide (megatron/core/num_microbatches_calculator.py).
- pipeline layout (megatron/core/transformer/pipeline_parallel_layer_layout.py,
  ``PipelineParallelLayerLayout.validate_layer_layout``; flag since core_v0.13.0): ``E`` first and
  exactly once, ``L`` last and exactly once, as many ``t`` as ``--num-layers``, as many ``m`` as
  ``--mtp-num-layers``, every ``m`` after every ``t`` and all in one virtual stage, the stage count a
  multiple of PP (VPP = stages / PP), empty stages allowed; commas are cosmetic, spaces are not
  (``parse_str_to_list`` rejects any other character).
- without a layout: ``--decoder-first/last-pipeline-num-layers`` fix the first/last rank's layer
  count, the rest split evenly over the middle ranks (must divide); otherwise ``num_layers`` (+1 with
  ``--account-for-embedding-in-pipeline-split``, +1 with ``--account-for-loss-in-pipeline-split``)
  must divide by PP; with VPP each rank's count must divide by VPP (megatron/core/transformer/
  transformer_block.py, ``get_num_layers_to_build``). Interleaving needs PP > 2 unless
  ``--overlap-p2p-comm`` (arguments.py).
- recompute (megatron/core/transformer/transformer_config.py, ``__post_init__``): ``full`` needs
  ``--recompute-method`` (``block``/``uniform``) and ``--recompute-num-layers``; ``selective``
  forbids ``--recompute-num-layers`` and takes ``--recompute-modules`` (default ``core_attn``; the
  flag exists since core_v0.12.0 with core_attn, moe_act, layernorm, mla_up_proj, mlp, moe;
  shared_experts since core_v0.14.0); ``moe_act`` needs ``--moe-grouped-gemm``, ``mla_up_proj``
  needs ``--multi-latent-attention``, ``shared_experts`` is refused with
  ``--moe-shared-expert-overlap``. ``recompute_num_layers`` is one ``Optional[int]`` in every
  release from core_v0.8.0 to main: it cannot vary per stage.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from autotune.errors import ConfigError
from autotune.megatron.args import MegatronArgs, flag_name, parse_int_list_expr
from autotune.megatron.layout import parse_layout_string
from autotune.megatron.read import read_args

#: Selective-recompute modules autotune models (the list of core_v0.14.0+; later releases add
#: modules for other layer types: gdn_norm_out, gdp_*, mhc).
MODULES = ("core_attn", "moe_act", "layernorm", "mla_up_proj", "mlp", "moe", "shared_experts")
#: Tokenizer sizes of a few public tokenizers (their config.json ``vocab_size``), used when the
#: arguments name the tokenizer but not ``--vocab-size``.
KNOWN_TOKENIZERS = {"meta-llama/meta-llama-3-70b": 128256, "meta-llama/meta-llama-3-8b": 128256,
                    "meta-llama/llama-3.1-70b": 128256, "meta-llama/llama-3.1-8b": 128256,
                    "deepseek-ai/deepseek-v3": 129280, "deepseek-ai/deepseek-v3-base": 129280,
                    "mistralai/mixtral-8x7b-v0.1": 32000}
#: Arguments autotune reads (an unresolved script variable in any of them is an error).
READ_KEYS = {
    "num_layers", "hidden_size", "ffn_hidden_size", "num_attention_heads", "group_query_attention",
    "num_query_groups", "kv_channels", "seq_length", "vocab_size", "padded_vocab_size",
    "make_vocab_size_divisible_by", "tokenizer_model", "swiglu", "untie_embeddings_and_output_weights",
    "normalization", "num_experts", "moe_ffn_hidden_size", "moe_router_topk",
    "moe_shared_expert_intermediate_size", "moe_layer_freq", "moe_grouped_gemm", "mtp_num_layers",
    "multi_latent_attention", "q_lora_rank", "kv_lora_rank", "qk_head_dim", "qk_pos_emb_head_dim",
    "v_head_dim", "tensor_model_parallel_size", "pipeline_model_parallel_size", "context_parallel_size",
    "expert_model_parallel_size", "expert_tensor_parallel_size", "sequence_parallel", "micro_batch_size",
    "global_batch_size", "use_distributed_optimizer", "bf16", "fp16", "pipeline_model_parallel_layout",
    "num_layers_per_virtual_pipeline_stage", "num_virtual_stages_per_pipeline_rank",
    "virtual_pipeline_model_parallel_size", "decoder_first_pipeline_num_layers",
    "decoder_last_pipeline_num_layers", "account_for_embedding_in_pipeline_split",
    "account_for_loss_in_pipeline_split", "recompute_granularity", "recompute_method",
    "recompute_num_layers", "recompute_modules", "recompute_activations", "world_size",
    "data_parallel_size", "nproc_per_node", "nnodes", "overlap_p2p_comm", "moe_shared_expert_overlap",
}


@dataclass
class MegatronRun:
    """One Megatron run (see module docstring for the rules).

    Attributes:
        args: the arguments as read; num_layers: decoder layers (MTP excluded).
        hidden, heads, query_groups, kv_channels, ffn, seq, vocab, padded_vocab: model dims.
        swiglu, untied, norm_size (1 RMSNorm, 2 LayerNorm); moe_pattern: 1 per MoE layer (len
        num_layers), num_experts (0 = dense), moe_ffn, topk, shared_ffn (0 = no shared expert),
        grouped_gemm; mtp: MTP layers; mla: multi-latent attention with q_lora (0 = none),
        kv_lora, qk_head, qk_rope, v_head.
        tp, pp, cp, ep, etp, dp, world: parallel sizes; sp: sequence parallel; mbs, gbs, m (micro-
        batches per step); dist_opt; dtype ("bf16", "fp16", "fp32").
        vpp, layers_vp: decoder layers per virtual stage, [vpp][pp] (virtual stage k = v·pp + p);
        layout_form: "layout" (string), "first_last", "even".
        granularity (None, "full", "selective"), method, recompute_num_layers, modules.
    """

    args: MegatronArgs
    num_layers: int
    hidden: int
    heads: int
    query_groups: int
    kv_channels: int
    ffn: int
    seq: int
    vocab: int
    padded_vocab: int
    swiglu: bool
    untied: bool
    norm_size: int
    moe_pattern: list[int]
    num_experts: int
    moe_ffn: int
    topk: int
    shared_ffn: int
    grouped_gemm: bool
    mtp: int
    mla: bool
    q_lora: int
    kv_lora: int
    qk_head: int
    qk_rope: int
    v_head: int
    tp: int
    pp: int
    cp: int
    ep: int
    etp: int
    dp: int
    world: int
    sp: bool
    mbs: int
    gbs: int
    m: int
    dist_opt: bool
    dtype: str
    vpp: int
    layers_vp: list[list[int]]
    layout_form: str
    granularity: str | None
    method: str | None
    recompute_num_layers: int | None
    modules: list[str]
    overlap_p2p: bool = False
    shared_overlap: bool = False
    warnings: list[str] = field(default_factory=list)

    @property
    def source(self) -> str:
        return self.args.source

    @property
    def moe_layers(self) -> int:
        return sum(self.moe_pattern)

    def applicable_modules(self) -> list[str]:
        """Selective-recompute modules Megatron accepts for this model (module docstring)."""
        out = ["core_attn", "layernorm"]
        if self.num_layers - self.moe_layers > 0:
            out.append("mlp")
        if self.num_experts:
            out.append("moe")
            if self.grouped_gemm:
                out.append("moe_act")
            if self.shared_ffn and not self.shared_overlap:
                out.append("shared_experts")
        if self.mla:
            out.append("mla_up_proj")
        return [x for x in MODULES if x in out]


def _err(key: str, value: Any, msg: str, rule: str) -> ConfigError:
    return ConfigError(msg, field=flag_name(key), value=value, rule=rule)


def _int(a: MegatronArgs, key: str, default: Any = ..., *, minimum: int = 1) -> Any:
    v = a.get(key)
    if v is None or v is False:
        if default is ...:
            raise _err(key, None, f"is required; fix: add {flag_name(key)} N", "R_MISSING")
        return default
    if isinstance(v, str) and v.strip().lstrip("-").isdigit():
        v = int(v)
    if isinstance(v, bool) or not isinstance(v, int) or v < minimum:
        raise _err(key, v, f"must be an integer >= {minimum}, got {v!r}", "R_TYPE")
    return v


def _flag(a: MegatronArgs, key: str) -> bool:
    v = a.get(key)
    if v is None or v is False:
        return False
    if v is True or (isinstance(v, str) and v.lower() in ("true", "1", "yes")):
        return True
    if isinstance(v, str) and v.lower() in ("false", "0", "no"):
        return False
    raise _err(key, v, f"is a flag: write it alone (or true/false in a mapping), got {v!r}", "R_TYPE")


def build_run(source: str | Path | dict | list | MegatronArgs) -> MegatronRun:
    """Read and validate a Megatron run (file, script, mapping, argv list or :class:`MegatronArgs`).

    Raises:
        ConfigError: the flag (``--name``), its value and the rule: R_MISSING, R_TYPE,
            R_MEGATRON_UNRESOLVED (a script variable autotune cannot resolve, named),
            R_MEGATRON_LAYOUT, R_MEGATRON_UNEVEN, R_MEGATRON_VPP, R_MEGATRON_BATCH,
            R_MEGATRON_WORLD, R_MEGATRON_DIVIDE, R_MEGATRON_RECOMPUTE, R_MEGATRON_VOCAB.
    """
    if isinstance(source, MegatronRun):
        return source
    a = read_args(source)
    _check_resolved(a)
    n = _int(a, "num_layers")
    h, heads, swiglu, ffn, gqa, groups, kvc = _attention_dims(a)
    seq = _int(a, "seq_length")
    tp = _int(a, "tensor_model_parallel_size", 1)
    pp = _int(a, "pipeline_model_parallel_size", 1)
    cp = _int(a, "context_parallel_size", 1)
    ep = _int(a, "expert_model_parallel_size", 1)
    etp = _int(a, "expert_tensor_parallel_size", tp)
    vocab = _vocab(a)
    div = _int(a, "make_vocab_size_divisible_by", 128)
    mult = div * tp
    padded = _int(a, "padded_vocab_size", int(math.ceil(vocab / mult) * mult))
    norm = str(a.get("normalization", "LayerNorm"))
    experts, pattern = _moe_pattern(a, n, ep)
    mla = _flag(a, "multi_latent_attention")
    if heads % tp:
        raise _err("tensor_model_parallel_size", tp, f"must divide num_attention_heads = {heads}",
                   "R_MEGATRON_DIVIDE")
    if gqa and groups % tp:
        raise _err("tensor_model_parallel_size", tp, f"must divide num_query_groups = {groups}",
                   "R_MEGATRON_DIVIDE")
    dp, world = _world(a, tp, pp, cp, ep, etp)
    mbs = _int(a, "micro_batch_size", 1)
    gbs = _int(a, "global_batch_size", mbs * dp)
    if gbs % (mbs * dp):
        raise _err("global_batch_size", gbs, f"must be a multiple of micro_batch_size × data parallel = "
                   f"{mbs} × {dp} = {mbs * dp}", "R_MEGATRON_BATCH")
    m = gbs // (mbs * dp)
    dtype = "bf16" if _flag(a, "bf16") else ("fp16" if _flag(a, "fp16") else "fp32")
    mtp = _int(a, "mtp_num_layers", 0, minimum=0)
    overlap = _flag(a, "overlap_p2p_comm")
    vpp, table, form = _layout(a, n, pp, mtp, overlap)
    gran, method, rnl, modules = _recompute(a, experts, mla)
    run = MegatronRun(
        args=a, num_layers=n, hidden=h, heads=heads, query_groups=groups, kv_channels=kvc, ffn=ffn, seq=seq,
        vocab=vocab, padded_vocab=padded, swiglu=swiglu,
        untied=_flag(a, "untie_embeddings_and_output_weights"), norm_size=1 if norm == "RMSNorm" else 2,
        moe_pattern=pattern, num_experts=experts,
        moe_ffn=_int(a, "moe_ffn_hidden_size", ffn) if experts else 0,
        topk=_int(a, "moe_router_topk", 2) if experts else 0,
        shared_ffn=_int(a, "moe_shared_expert_intermediate_size", 0, minimum=0) if experts else 0,
        grouped_gemm=_flag(a, "moe_grouped_gemm"), mtp=mtp, mla=mla,
        q_lora=_int(a, "q_lora_rank", 0, minimum=0) if mla else 0,
        kv_lora=_int(a, "kv_lora_rank", 32) if mla else 0,
        qk_head=_int(a, "qk_head_dim", 128) if mla else 0,
        qk_rope=_int(a, "qk_pos_emb_head_dim", 64) if mla else 0,
        v_head=_int(a, "v_head_dim", 128) if mla else 0,
        tp=tp, pp=pp, cp=cp, ep=ep, etp=etp, dp=dp, world=world, sp=_flag(a, "sequence_parallel"),
        mbs=mbs, gbs=gbs, m=m, dist_opt=_flag(a, "use_distributed_optimizer"), dtype=dtype,
        vpp=vpp, layers_vp=table, layout_form=form, granularity=gran, method=method,
        recompute_num_layers=rnl, modules=modules, overlap_p2p=overlap,
        shared_overlap=_flag(a, "moe_shared_expert_overlap"))
    _check_modules(run, a)
    return run


def _check_resolved(a: MegatronArgs) -> None:
    """Raises R_MEGATRON_UNRESOLVED for a flag autotune reads whose value uses a script variable it
    cannot resolve (named)."""
    for key in sorted(a.unresolved):
        if key in READ_KEYS:
            names = ", ".join(a.unresolved[key])
            raise _err(key, a.get(key), f"uses script variable(s) {names} that autotune cannot resolve "
                       "(set them in the script, or pass a YAML of the arguments)", "R_MEGATRON_UNRESOLVED")


def _attention_dims(a: MegatronArgs) -> tuple[int, int, bool, int, bool, int, int]:
    """(hidden, heads, swiglu, ffn, group_query_attention, query groups, kv channels), with
    Megatron's defaults: ffn 4h (swiglu: 8h/3 rounded down to 64), kv channels hidden / heads."""
    h = _int(a, "hidden_size")
    heads = _int(a, "num_attention_heads")
    swiglu = _flag(a, "swiglu")
    ffn = _int(a, "ffn_hidden_size", int((4 * h * 2 / 3) / 64) * 64 if swiglu else 4 * h)
    gqa = _flag(a, "group_query_attention")
    groups = _int(a, "num_query_groups", 1) if gqa else heads
    if a.has("kv_channels"):
        kvc = _int(a, "kv_channels")
    else:
        if h % heads:
            raise _err("num_attention_heads", heads, f"must divide hidden_size {h} when --kv-channels is "
                       "not given", "R_MEGATRON_DIVIDE")
        kvc = h // heads
    return h, heads, swiglu, ffn, gqa, groups, kvc


def _moe_pattern(a: MegatronArgs, n: int, ep: int) -> tuple[int, list[int]]:
    """(num_experts, per-layer 0/1 MoE pattern from ``--moe-layer-freq``: an integer k = every k-th
    layer from the first, or a list of n 0/1 entries)."""
    experts = _int(a, "num_experts", 0, minimum=0)
    if not experts:
        return experts, [0] * n
    freq = parse_int_list_expr(a.get("moe_layer_freq", 1), field="--moe-layer-freq")
    if isinstance(freq, int):
        if freq < 1:
            raise _err("moe_layer_freq", freq, "must be >= 1", "R_TYPE")
        pattern = [1 if i % freq == 0 else 0 for i in range(n)]
    else:
        if len(freq) != n or any(x not in (0, 1) for x in freq):
            raise _err("moe_layer_freq", a.get("moe_layer_freq"), f"a list must hold num_layers = {n} "
                       f"entries of 0/1, got {len(freq)}", "R_MEGATRON_LAYOUT")
        pattern = list(freq)
    if experts % ep:
        raise _err("expert_model_parallel_size", ep, f"must divide num_experts = {experts}",
                   "R_MEGATRON_DIVIDE")
    return experts, pattern


def _world(a: MegatronArgs, tp: int, pp: int, cp: int, ep: int, etp: int) -> tuple[int, int]:
    """(data parallel, world size): from ``data_parallel_size``, ``world_size`` or torchrun's
    ``--nproc_per_node`` × ``--nnodes``."""
    mp = tp * pp * cp
    if a.has("data_parallel_size"):
        dp = _int(a, "data_parallel_size")
        world = dp * mp
    else:
        if a.has("world_size"):
            world = _int(a, "world_size")
        elif a.launcher.get("nproc_per_node") is not None or a.has("nproc_per_node"):
            nproc = a.launcher.get("nproc_per_node", a.get("nproc_per_node"))
            nn = a.launcher.get("nnodes", a.get("nnodes", 1))
            if not isinstance(nproc, int) or not isinstance(nn, int):
                raise _err("nproc_per_node", nproc, "torchrun's --nproc_per_node/--nnodes must be integers "
                           f"(got {nproc!r}, {nn!r}); give world_size instead", "R_TYPE")
            world = nproc * nn
        else:
            raise _err("world_size", None, "the number of GPUs is unknown: add world_size (or "
                       "data_parallel_size) to the arguments, or launch with torchrun --nproc_per_node/--nnodes",
                       "R_MISSING")
        if world % mp:
            raise _err("world_size", world, f"must be a multiple of TP·PP·CP = {tp}·{pp}·{cp} = {mp}",
                       "R_MEGATRON_WORLD")
        dp = world // mp
    if (world // (etp * ep * pp)) < 1 or world % (etp * ep * pp):
        raise _err("expert_model_parallel_size", ep, f"world {world} is not a multiple of expert TP·EP·PP = "
                   f"{etp}·{ep}·{pp}", "R_MEGATRON_WORLD")
    return dp, world


def _check_modules(run: MegatronRun, a: MegatronArgs) -> None:
    """Raises R_MEGATRON_RECOMPUTE for a ``--recompute-modules`` entry the model cannot take."""
    bad = [x for x in run.modules if run.granularity == "selective" and x not in run.applicable_modules()]
    if bad:
        need = {"moe_act": "--moe-grouped-gemm", "mla_up_proj": "--multi-latent-attention",
                "shared_experts": "--moe-shared-expert-intermediate-size without --moe-shared-expert-overlap",
                "mlp": "dense layers", "moe": "--num-experts"}
        raise _err("recompute_modules", a.get("recompute_modules"), f"{bad[0]} needs {need.get(bad[0], '?')} "
                   "(Megatron's TransformerConfig refuses it)", "R_MEGATRON_RECOMPUTE")


def _vocab(a: MegatronArgs) -> int:
    if a.has("vocab_size"):
        return _int(a, "vocab_size")
    if a.has("padded_vocab_size"):
        return _int(a, "padded_vocab_size")
    tok = str(a.get("tokenizer_model", "")).strip().lower().rstrip("/")
    for name, size in KNOWN_TOKENIZERS.items():
        if tok == name or tok.endswith("/" + name.split("/")[-1]):
            return size
    raise _err("vocab_size", None, "the vocabulary size is unknown (it comes from the tokenizer): add "
               f"--vocab-size N{' for ' + repr(a.get('tokenizer_model')) if a.has('tokenizer_model') else ''}",
               "R_MEGATRON_VOCAB")


def _layout(a: MegatronArgs, n: int, pp: int, mtp: int, overlap: bool) -> tuple[int, list[list[int]], str]:
    layout = a.get("pipeline_model_parallel_layout")
    if layout is not None:
        for k in ("decoder_first_pipeline_num_layers", "decoder_last_pipeline_num_layers",
                  "account_for_embedding_in_pipeline_split", "account_for_loss_in_pipeline_split"):
            if a.has(k):
                raise _err(k, a.get(k), "cannot be combined with --pipeline-model-parallel-layout "
                           "(TransformerConfig raises)", "R_MEGATRON_LAYOUT")
        table = parse_layout_string(str(layout), pp=pp, num_layers=n, mtp_num_layers=mtp)
        vpp = len(table)
        given = a.get("virtual_pipeline_model_parallel_size") or a.get("num_virtual_stages_per_pipeline_rank")
        if given is not None and given != vpp:
            key = ("virtual_pipeline_model_parallel_size" if a.has("virtual_pipeline_model_parallel_size")
                   else "num_virtual_stages_per_pipeline_rank")
            raise _err(key, given, f"conflicts with the layout's {vpp} virtual stages per rank",
                       "R_MEGATRON_VPP")
        form = "layout"
    else:
        first = _int(a, "decoder_first_pipeline_num_layers", None, minimum=0)
        last = _int(a, "decoder_last_pipeline_num_layers", None, minimum=0)
        vpp = 1
        if a.has("num_virtual_stages_per_pipeline_rank"):
            vpp = _int(a, "num_virtual_stages_per_pipeline_rank")
        elif a.has("virtual_pipeline_model_parallel_size"):
            vpp = _int(a, "virtual_pipeline_model_parallel_size")
        per_rank = [0] * pp
        if first is not None or last is not None:
            key = "decoder_last_pipeline_num_layers" if last is not None else "decoder_first_pipeline_num_layers"
            if a.has("account_for_embedding_in_pipeline_split") or a.has("account_for_loss_in_pipeline_split"):
                raise _err(key, a.get(key), "cannot be combined with --account-for-embedding/loss-in-pipeline-"
                           "split (TransformerConfig raises)", "R_MEGATRON_LAYOUT")
            if a.has("num_layers_per_virtual_pipeline_stage"):
                raise _err("num_layers_per_virtual_pipeline_stage", a.get("num_layers_per_virtual_pipeline_stage"),
                           "with uneven first/last stages use --num-virtual-stages-per-pipeline-rank",
                           "R_MEGATRON_VPP")
            left = pp - (first is not None) - (last is not None)
            rest = n - (first or 0) - (last or 0)
            if rest < 0 or (left == 0 and rest != 0) or (left > 0 and rest % left):
                raise _err(key, a.get(key), f"the {rest} layers left do not split evenly over the {left} "
                           f"middle stage(s) (num_layers {n}, pp {pp})", "R_MEGATRON_UNEVEN")
            per_rank = [rest // left if left else 0] * pp
            if first is not None:
                per_rank[0] = first
            if last is not None:
                per_rank[-1] = last
            form = "first_last"
        else:
            extra = (int(a.has("account_for_embedding_in_pipeline_split"))
                     + int(a.has("account_for_loss_in_pipeline_split")))
            if (n + extra) % pp:
                raise _err("num_layers", n, f"{n}{' + ' + str(extra) if extra else ''} layers do not divide by "
                           f"pipeline_model_parallel_size {pp}; fix: use --pipeline-model-parallel-layout or "
                           "first/last-stage counts", "R_MEGATRON_UNEVEN")
            per_rank = [(n + extra) // pp] * pp
            if a.has("num_layers_per_virtual_pipeline_stage"):
                lpvs = _int(a, "num_layers_per_virtual_pipeline_stage")
                if per_rank[0] % lpvs:
                    raise _err("num_layers_per_virtual_pipeline_stage", lpvs, f"must divide the {per_rank[0]} "
                               "layers per pipeline rank", "R_MEGATRON_VPP")
                vpp = per_rank[0] // lpvs
            form = "even"
        if vpp > 1:
            bad = [r for r in per_rank if r % vpp]
            if bad:
                key = ("num_virtual_stages_per_pipeline_rank" if a.has("num_virtual_stages_per_pipeline_rank")
                       else "virtual_pipeline_model_parallel_size")
                raise _err(key, vpp, f"a pipeline rank holds {bad[0]} layers, not a multiple of the {vpp} virtual "
                           "stages", "R_MEGATRON_VPP")
        table = [[per_rank[p] // vpp for p in range(pp)] for _ in range(vpp)]
        if form == "even":
            if a.has("account_for_embedding_in_pipeline_split"):
                table[0][0] -= 1
            if a.has("account_for_loss_in_pipeline_split"):
                table[-1][-1] -= 1
    if vpp > 1 and pp <= 2 and not overlap:
        raise _err("pipeline_model_parallel_size", pp, "interleaving (virtual stages > 1) needs pp > 2 unless "
                   "--overlap-p2p-comm (arguments.py)", "R_MEGATRON_VPP")
    return vpp, table, form


def _recompute(a: MegatronArgs, experts: int, mla: bool) -> tuple[str | None, str | None, int | None, list[str]]:
    gran = a.get("recompute_granularity")
    if _flag(a, "recompute_activations"):
        gran = "selective"
    method = a.get("recompute_method")
    rnl = a.get("recompute_num_layers")
    mods = a.get("recompute_modules")
    if isinstance(mods, str):
        mods = mods.split()
    if gran is None:
        return None, None, None, []
    if gran not in ("full", "selective"):
        raise _err("recompute_granularity", gran, "must be full or selective", "R_MEGATRON_RECOMPUTE")
    if gran == "full":
        if method not in ("block", "uniform"):
            raise _err("recompute_method", method, "full recompute needs --recompute-method block or uniform",
                       "R_MEGATRON_RECOMPUTE")
        rnl = _int(a, "recompute_num_layers")
        return gran, method, rnl, []
    if rnl is not None:
        raise _err("recompute_num_layers", rnl, "must be absent with --recompute-granularity selective",
                   "R_MEGATRON_RECOMPUTE")
    mods = list(mods) if mods else ["core_attn"]
    unknown = [x for x in mods if x not in MODULES]
    if unknown:
        raise _err("recompute_modules", mods, f"unknown module {unknown[0]!r}; known: {', '.join(MODULES)}",
                   "R_MEGATRON_RECOMPUTE")
    return gran, None, None, mods
