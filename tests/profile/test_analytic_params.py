"""Parameter counts from model dims against published numbers (cost-model reference §5.3)."""

from __future__ import annotations

import pytest

from autotune.config.training import ModelDims
from autotune.profile.analytic import param_counts

DSV3 = dict(hidden_size=7168, num_heads=128, n_kv_heads=128, head_dim=128, intermediate_size=18432,
            seq_length=4096, vocab_size=129280, num_experts=256, num_experts_per_tok=8,
            moe_intermediate_size=2048, shared_expert_num=1, first_k_dense_replace=3, mtp_num_layers=1,
            q_lora_rank=1536, kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128)


def test_deepseek_v3_671b():
    c = param_counts(ModelDims(**DSV3), 61)
    assert c["total"] == pytest.approx(671e9, rel=0.005)            # report: 671 B
    assert c["active"] == pytest.approx(37.6e9, rel=0.005)          # reference §5.3: 37.6 B (report "37B")
    assert c["attention_per_layer"] == pytest.approx(0.187e9, rel=0.005)
    assert c["dense_layer"] == pytest.approx(0.583e9, rel=0.005)
    assert c["moe_layer"] == pytest.approx(11.507e9, rel=0.001)
    assert c["embedding"] == pytest.approx(0.927e9, rel=0.001)
    assert c["mtp_module"] == pytest.approx(11.6e9, rel=0.005)      # MTP's own weights
    with_mtp = param_counts(ModelDims(**DSV3), 61, count_mtp=True)
    assert with_mtp["total"] - c["total"] == pytest.approx(c["mtp_module"])


def test_dense_gpt_matches_narayanan_eq2():
    """MHA + a 4h two-matrix MLP is not SwiGLU, so compare the attention block and embeddings:
    GQA with g = a reduces to 4h² attention parameters."""
    d = ModelDims(hidden_size=1024, num_heads=16, n_kv_heads=16, head_dim=64, intermediate_size=4096,
                  seq_length=2048, vocab_size=50000, tie_word_embeddings=True)
    c = param_counts(d, 2)
    assert c["attention_per_layer"] == 4 * 1024 ** 2
    assert c["dense_layer"] == 4 * 1024 ** 2 + 3 * 1024 * 4096 + 2 * 1024
    assert c["total"] == 2 * c["dense_layer"] + 50000 * 1024 + 1024   # tied: one table + final norm
