"""Each memory-relevant MindFormers key moves the analytic prediction the right way by the right
amount (issue 20 items 1 and 5; docs/profiles.md "Memory keys").

Base model (hand-written, Llama-style): h = 1024, a = g = 8 heads of d = 128, FFN f = 4096,
s = 2048, V = 32000, 8 layers, bf16 compute, fp32 weights, flash attention, b = 1,
dp 2 x mp 2 x pp 2, no optimizer parallel. Per layer: attention h·a·d + 2·h·g·d + a·d·h =
4,194,304 and SwiGLU 3·h·f = 12,582,912 parameters (16,777,216; 8,388,608 per device at t = 2)
plus the two norms 2h = 2,048 (not sharded).
"""

from __future__ import annotations

import copy

import pytest

from autotune.config.training import config_from_dict
from autotune.profile.analytic import analytic_profile
from autotune.units import BYTES_PER_MIB

BASE = {
    "context": {"max_device_memory": "60GB"},
    "parallel": {"enable_parallel_optimizer": False},
    "parallel_config": {"data_parallel": 2, "model_parallel": 2, "pipeline_stage": 2, "micro_batch_num": 4,
                        "use_seq_parallel": False, "vocab_emb_dp": False},
    "recompute_config": {"recompute": False},
    "model": {"arch": {"type": "LlamaForCausalLM"},
              "model_config": {"num_layers": 8, "hidden_size": 1024, "num_heads": 8, "n_kv_heads": 8,
                               "intermediate_size": 4096, "seq_length": 2048, "vocab_size": 32000,
                               "compute_dtype": "bfloat16", "param_init_type": "float32",
                               "softmax_compute_type": "float32", "use_flash_attention": True}},
}
PER_DEV = 8_388_608          # layer parameters per device (t = 2), norms excluded
NORMS = 2_048


def prof(**changes):
    """Profile of BASE with dotted-path changes (None deletes the key)."""
    data = copy.deepcopy(BASE)
    for path, val in changes.items():
        node = data
        parts = path.split("__")
        for p in parts[:-1]:
            node = node.setdefault(p, {})
        if val is None:
            node.pop(parts[-1], None)
        else:
            node[parts[-1]] = val
    cfg = config_from_dict(data)
    return cfg, analytic_profile(cfg)


def mib(x: float) -> float:
    return x / BYTES_PER_MIB


def test_base_numbers():
    _, p = prof()
    k = p.kinds["dense"]
    # fp32 weight 4 + fp32 gradient 4 + AdamW 8 = 16 B per parameter
    assert k.static_mib == pytest.approx(mib((PER_DEV + NORMS) * 16))
    # activation (s = 2048, b = 1, c = 2, t = 2): norm inputs 2·c·s·h = 8 MiB, norm outputs 8 MiB,
    # Q/K/V c·s·(a+2g)·d/t = 6 MiB, attention output c·s·a·d/t = 2 MiB, softmax statistics
    # 64·s·a/t = 0.5 MiB, gate + up 2·c·s·f/t = 16 MiB, SiLU + product 16 MiB -> 56.5 MiB
    assert k.act_mib == pytest.approx(56.5)


def test_param_init_type_bf16_halves_weights_and_gradients():
    _, p32 = prof()
    _, p16 = prof(model__model_config__param_init_type="bfloat16")
    # 16 -> 12 B per parameter (weight 2 + gradient 2 + fp32 AdamW 8)
    assert p32.kinds["dense"].static_mib - p16.kinds["dense"].static_mib == pytest.approx(
        mib((PER_DEV + NORMS) * 4))
    assert p16.assumptions["weight_bytes"] == 2 and p16.assumptions["grad_bytes"] == 2


def test_params_dtype_is_the_mcore_spelling():
    _, a = prof(model__model_config__param_init_type="bfloat16")
    _, b = prof(model__model_config__param_init_type=None, model__model_config__params_dtype="bfloat16")
    assert a.kinds["dense"].static_mib == b.kinds["dense"].static_mib


def test_embedding_init_type():
    _, p32 = prof()
    _, p16 = prof(model__model_config__embedding_init_type="bfloat16")
    # embedding V·h/t = 16,384,000 parameters per device: weight + gradient 8 -> 4 bytes
    assert p32.head.static_mib - p16.head.static_mib == pytest.approx(mib(16_384_000 * 4))
    assert p32.tail.static_mib == p16.tail.static_mib      # the LM head keeps param_init_type


def test_compute_dtype_fp32_doubles_activations():
    _, p = prof(model__model_config__compute_dtype="float32")
    # every c-byte term doubles (56 MiB -> 112 MiB); the fp32 softmax statistics stay 0.5 MiB
    assert p.kinds["dense"].act_mib == pytest.approx(112.5)


def test_no_flash_attention_keeps_the_probabilities():
    _, fa = prof()
    _, no = prof(model__model_config__use_flash_attention=False)
    # fp32 softmax output + its bf16 copy for the AV matmul: 6 B · a·s²/t = 6·8·2048²/2 = 96 MiB,
    # instead of the 0.5 MiB statistics
    assert no.kinds["dense"].act_mib - fa.kinds["dense"].act_mib == pytest.approx(96 - 0.5)


def test_softmax_compute_type_without_flash_attention():
    _, f32 = prof(model__model_config__use_flash_attention=False)
    _, f16 = prof(model__model_config__use_flash_attention=False,
                  model__model_config__softmax_compute_type="float16")
    # fp16 softmax = the compute dtype: no second copy, 2 B · 8·2048²/2 = 32 MiB instead of 96
    assert f32.kinds["dense"].act_mib - f16.kinds["dense"].act_mib == pytest.approx(64)
    _, fa32 = prof()
    _, fa16 = prof(model__model_config__softmax_compute_type="float16")
    assert fa32.kinds["dense"].act_mib == fa16.kinds["dense"].act_mib    # flash attention: no effect


def test_flash_attention_default_is_the_config_class_default():
    _, legacy = prof(model__model_config__use_flash_attention=None)
    assert legacy.assumptions["use_flash_attention"] is False            # LlamaConfig default


def test_attention_dropout_without_flash_attention():
    _, a = prof(model__model_config__use_flash_attention=False)
    _, b = prof(model__model_config__use_flash_attention=False, model__model_config__attention_dropout=0.1)
    # the dropout output (c = 2 B) and its 1-bit mask: 2.125 · 8·2048²/2 B = 34 MiB
    assert b.kinds["dense"].act_mib - a.kinds["dense"].act_mib == pytest.approx(34)


def test_use_seq_parallel_divides_the_norm_inputs():
    _, off = prof()
    _, on = prof(parallel_config__use_seq_parallel=True)
    # norm inputs 2·c·s·h = 8 MiB -> /t = 4 MiB
    assert off.kinds["dense"].act_mib - on.kinds["dense"].act_mib == pytest.approx(4)


def test_context_parallel_splits_the_sequence_and_joins_the_optimizer_group():
    _, cp1 = prof(parallel__enable_parallel_optimizer=True)
    _, cp2 = prof(parallel__enable_parallel_optimizer=True, parallel_config__context_parallel=2)
    assert cp2.kinds["dense"].act_mib == pytest.approx(cp1.kinds["dense"].act_mib / 2)   # s -> s/2
    # optimizer shard group dp·cp: 2 -> 4; weight + AdamW 12 B over it, gradient 4 B whole (pp 2)
    assert cp1.assumptions["optimizer_shard_group"] == 2 and cp2.assumptions["optimizer_shard_group"] == 4
    assert cp1.kinds["dense"].static_mib - cp2.kinds["dense"].static_mib == pytest.approx(
        mib((PER_DEV + NORMS) * (12 / 2 - 12 / 4)))


def test_enable_parallel_optimizer():
    _, off = prof()
    _, on = prof(parallel__enable_parallel_optimizer=True)
    # 16 -> 12/2 + 4 = 10 B per parameter, plus the gathered bf16 copy of the layer (2 B · PER_DEV)
    want = (PER_DEV + NORMS) * 10 + 2 * PER_DEV
    assert on.kinds["dense"].static_mib == pytest.approx(mib(want))
    assert off.kinds["dense"].static_mib == pytest.approx(mib((PER_DEV + NORMS) * 16))


def test_optimizer_weight_shard_size():
    _, full = prof(parallel__enable_parallel_optimizer=True, parallel_config__data_parallel=8)
    _, two = prof(parallel__enable_parallel_optimizer=True, parallel_config__data_parallel=8,
                  parallel__parallel_optimizer_config={"optimizer_weight_shard_size": 2})
    assert full.assumptions["optimizer_shard_group"] == 8 and two.assumptions["optimizer_shard_group"] == 2
    assert two.kinds["dense"].static_mib - full.kinds["dense"].static_mib == pytest.approx(
        mib((PER_DEV + NORMS) * (12 / 2 - 12 / 8)))


def test_gradient_accumulation_shard():
    _, whole = prof(parallel__enable_parallel_optimizer=True)
    _, shard = prof(parallel__enable_parallel_optimizer=True,
                    parallel__parallel_optimizer_config={"gradient_accumulation_shard": True})
    # the accumulated fp32 gradient is sharded over dp = 2: 4 -> 2 B per parameter
    assert whole.kinds["dense"].static_mib - shard.kinds["dense"].static_mib == pytest.approx(
        mib((PER_DEV + NORMS) * 2))


def test_single_stage_gradients_are_reduce_scattered():
    _, pp2 = prof(parallel__enable_parallel_optimizer=True)
    _, pp1 = prof(parallel__enable_parallel_optimizer=True, parallel_config__pipeline_stage=1)
    assert pp1.assumptions["gradient_sharded"] and not pp2.assumptions["gradient_sharded"]
    assert pp2.kinds["dense"].static_mib - pp1.kinds["dense"].static_mib == pytest.approx(
        mib((PER_DEV + NORMS) * 2))
    _, acc = prof(parallel__enable_parallel_optimizer=True, parallel_config__pipeline_stage=1,
                  runner_config={"gradient_accumulation_steps": 4})
    assert not acc.assumptions["gradient_sharded"]                       # accumulated: whole


def test_vocab_emb_dp_replicates_embedding_and_head():
    _, split = prof()
    _, rep = prof(parallel_config__vocab_emb_dp=True)
    # V·h = 32,768,000 parameters, 16 B each: /t = 2 when split, whole when replicated
    assert split.head.static_mib == pytest.approx(mib(32_768_000 / 2 * 16))
    assert rep.head.static_mib == pytest.approx(mib(32_768_000 * 16))
    # mcore ignores vocab_emb_dp (the vocabulary is always sharded over t)
    _, mc = prof(parallel_config__vocab_emb_dp=True, use_legacy=False)
    assert mc.head.static_mib == pytest.approx(split.head.static_mib)


def test_keys_without_a_memory_term_change_nothing():
    _, base = prof()
    for change in ({"micro_batch_interleave_num": 2},
                   {"model__model_config__layernorm_compute_type": "bfloat16"},
                   {"parallel_config__context_parallel_algo": "ulysses_cp"}):
        _, other = prof(**change)
        assert other.kinds == base.kinds and other.head == base.head and other.tail == base.tail, change
    # fine_grain_interleave > 1 needs use_seq_parallel (MindFormers check_rules, R_FINE_GRAIN_SP)
    _, sp = prof(parallel_config__use_seq_parallel=True)
    _, other = prof(parallel_config__use_seq_parallel=True, model__model_config__fine_grain_interleave=2)
    assert other.kinds == sp.kinds and other.head == sp.head and other.tail == sp.tail


def test_swap_is_warned_not_modelled():
    _, base = prof()
    _, sw = prof(swap_config={"swap": True, "layer_swap": [{"backward_prefetch": 1, "layers": True}]})
    assert sw.kinds == base.kinds
    assert [w["code"] for w in sw.model_warnings] == ["W_MEMORY_KEY_IGNORED"]
    assert sw.model_warnings[0]["field"] == "swap_config.swap"


def test_recompute_slice_activation():
    _, off = prof()
    _, on = prof(recompute_config={"recompute": False, "recompute_slice_activation": True})
    # a fully recomputed layer keeps its input c·s·h = 4 MiB, /t = 2 MiB when sliced
    assert off.kinds["dense"].full.act_mib == pytest.approx(4)
    assert on.kinds["dense"].full.act_mib == pytest.approx(2)


MOE = {"moe_config": {"expert_num": 4, "num_experts_chosen": 2, "capacity_factor": 1.0,
                      "moe_intermediate_size": 1024, "ep_extend_tp": False}}


def test_moe_capacity_factor():
    _, c1 = prof(**MOE)
    moe2 = copy.deepcopy(MOE)
    moe2["moe_config"]["capacity_factor"] = 2.0
    _, c2 = prof(**moe2)
    # routed expert tokens x cf: FFN width k·f_moe = 2048 -> 4096: gate, up, SiLU, product
    # 4·c·s·(Δf)/t = 4·2·2048·2048/2 = 16 MiB; dispatch + combine buffers 2·c·(Δ k·cf)·s·h =
    # 2·2·2·2048·1024 = 16 MiB
    assert c2.kinds["moe"].act_mib - c1.kinds["moe"].act_mib == pytest.approx(32)


def test_moe_ep_extend_tp_splits_the_dispatch_buffers():
    _, whole = prof(**MOE)
    moe = copy.deepcopy(MOE)
    moe["moe_config"]["ep_extend_tp"] = True
    _, split = prof(**moe)
    # dispatch + combine buffers 2·c·k·s·h = 2·2·2·2048·1024 B = 16 MiB -> /t = 8 MiB
    assert whole.kinds["moe"].act_mib - split.kinds["moe"].act_mib == pytest.approx(8)


def test_mtp_depth_adds_a_module_to_the_last_stage():
    _, base = prof()
    _, mtp = prof(model__model_config__mtp_depth=1)
    layer = base.kinds["dense"]
    # one MTP module: a decoder layer's static + the 2h x h projection (/t, 16 B per parameter)
    assert mtp.tail.static_mib - base.tail.static_mib == pytest.approx(
        layer.static_mib + mib(2 * 1024 * 1024 / 2 * 16))
    assert mtp.tail.act_mib - base.tail.act_mib == pytest.approx(layer.act_mib)


def test_lora_freezes_the_base_weights():
    _, full = prof(parallel__enable_parallel_optimizer=True)
    _, lora = prof(parallel__enable_parallel_optimizer=True,
                   model__model_config__pet_config={"pet_type": "lora", "lora_rank": 8})
    # frozen: the fp32 weight only (4 B), not sharded, no gradient, no optimizer state, nothing gathered
    assert lora.kinds["dense"].static_mib == pytest.approx(mib((PER_DEV + NORMS) * 4))
    assert full.kinds["dense"].static_mib > lora.kinds["dense"].static_mib


def test_gelu_mlp_has_two_matrices():
    _, swiglu = prof()
    _, gelu = prof(model__model_config__hidden_act="fast_gelu")
    # 3·h·f -> 2·h·f: h·f/t = 2,097,152 fewer parameters per device, 16 B each; activations:
    # gate + up + SiLU + product (4·c·s·f/t = 32 MiB) -> up + GELU output (16 MiB)
    assert swiglu.kinds["dense"].static_mib - gelu.kinds["dense"].static_mib == pytest.approx(
        mib(2_097_152 * 16))
    assert swiglu.kinds["dense"].act_mib - gelu.kinds["dense"].act_mib == pytest.approx(16)
