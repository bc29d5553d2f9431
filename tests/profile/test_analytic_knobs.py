"""The boolean recompute knobs change the analytic profile by their documented terms."""

from __future__ import annotations

from pathlib import Path

import pytest

from autotune.config.training import load_config
from autotune.profile.analytic import analytic_profile
from autotune.units import BYTES_PER_MIB

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "llama3_1_70b" / "train.yaml"


def test_mp_comm_recompute_keeps_two_collective_outputs():
    cfg = load_config(EXAMPLE)
    if cfg.model_parallel <= 1:
        pytest.skip("needs model_parallel > 1")
    on = analytic_profile(cfg.model_copy(update={"mp_comm_recompute": True}))
    off = analytic_profile(cfg.model_copy(update={"mp_comm_recompute": False}))
    d = cfg.dims
    sp_div = cfg.model_parallel if cfg.use_seq_parallel else 1
    b = on.assumptions["micro_batch_size"]
    want = 2 * d.compute_dtype_bytes * d.seq_length / cfg.context_parallel * b * d.hidden_size / sp_div
    got = (off.kinds["dense"].full.act_mib - on.kinds["dense"].full.act_mib) * BYTES_PER_MIB
    assert got == pytest.approx(want)
    assert off.kinds["dense"].act_mib == on.kinds["dense"].act_mib  # only recomputed layers change


def test_recompute_slice_activation_divides_the_kept_input():
    cfg = load_config(EXAMPLE)
    if cfg.model_parallel <= 1 or cfg.use_seq_parallel:
        pytest.skip("needs model_parallel > 1 without sequence parallel")
    a = analytic_profile(cfg.model_copy(update={"recompute_slice_activation": False, "mp_comm_recompute": True}))
    b = analytic_profile(cfg.model_copy(update={"recompute_slice_activation": True, "mp_comm_recompute": True}))
    assert a.kinds["dense"].full.act_mib == pytest.approx(b.kinds["dense"].full.act_mib * cfg.model_parallel)


# ---- parallel_optimizer_comm_recompute ---------------------------------------------------------

def test_gathered_weights_hand_values():
    from autotune.profile.analytic import gathered_weights

    # 1000 TP-sharded params over t=2 in 2-byte dtype: 1000 B (d_os = 4 > 1); 4000 routed-expert
    # params over t·ep = 4: 2000 B (d_os_exp = 2). Ring all-gather moves 1000·3/4 + 2000·1/2 =
    # 1750 B; at 1 GB/s that is 1.75e-6 s = 1.75e-3 ms.
    w, ms = gathered_weights(1000, 4000, t=2, ep=2, d_os=4, d_os_exp=2, dtype_bytes=2, allgather_gbps=1.0)
    assert w == 3000.0
    assert ms == pytest.approx(1.75e-3)
    # no optimizer parallel: nothing gathered, nothing to replay
    assert gathered_weights(1000, 4000, t=2, ep=2, d_os=1, d_os_exp=1, dtype_bytes=2,
                            allgather_gbps=1.0) == (0.0, 0.0)
    with pytest.raises(ValueError):
        gathered_weights(1, 1, t=0, ep=1, d_os=1, d_os_exp=1, dtype_bytes=2, allgather_gbps=1.0)


def _llama_os(knob: bool, shard: int = 4):
    cfg = load_config(EXAMPLE)
    # data_parallel 8: the shard group is at most the number of copies of a weight (dp·cp)
    cfg = cfg.model_copy(update={"enable_parallel_optimizer": True, "optimizer_weight_shard_size": shard,
                                 "parallel_optimizer_comm_recompute": knob, "data_parallel": 8})
    return cfg, analytic_profile(cfg, overrides={"allgather_gbps": 10.0})


def test_parallel_optimizer_comm_recompute_terms():
    cfg, off = _llama_os(False)
    _, on = _llama_os(True)
    d, t = cfg.dims, cfg.model_parallel
    h, a, g, hd, f = d.hidden_size, d.num_heads, d.n_kv_heads, d.head_dim, d.intermediate_size
    # Llama-3.1-70B layer: attention h·a·d + 2·h·g·d + a·d·h = 150,994,944; SwiGLU 3·h·f =
    # 704,643,072 -> 855,638,016 params, /t = 8 -> 106,954,752 per device, bf16 -> 213,909,504 B.
    params = h * a * hd + 2 * h * g * hd + a * hd * h + 3 * h * f
    assert params == 855_638_016
    w_g = 2 * params / t
    assert w_g == 213_909_504
    # one ring all-gather over d_os = 4 at 10 GB/s: 213,909,504·3/4 B / 1e10 B/s = 16.043 ms
    ag_ms = w_g * 3 / 4 / 10e9 * 1e3
    assert ag_ms == pytest.approx(16.0432128)
    k_off, k_on = off.kinds["dense"], on.kinds["dense"]
    # gathered weights are held once per step by every layer (static), whatever the knob
    assert k_on.static_mib == pytest.approx(k_off.static_mib)
    # knob on: a fully recomputed layer frees them, re-gathers in backward (workspace) and pays the gather
    assert k_off.full.static_delta_mib == 0.0
    assert k_on.full.static_delta_mib * BYTES_PER_MIB == pytest.approx(-w_g)
    assert (k_on.full.workspace_mib - k_off.full.workspace_mib) * BYTES_PER_MIB == pytest.approx(w_g)
    assert k_on.full.extra_ms - k_off.full.extra_ms == pytest.approx(ag_ms)
    assert k_on.full.act_mib == k_off.full.act_mib  # per-micro-batch activations unchanged
    assert k_on.select == k_off.select and k_on.act_mib == k_off.act_mib
    # without optimizer parallel (shard group 1) the knob changes nothing
    _, plain_off = _llama_os(False, shard=1)
    _, plain_on = _llama_os(True, shard=1)
    assert plain_on.kinds["dense"] == plain_off.kinds["dense"]
    # static: (weight + 8)/d_os + grad bytes per param of the layer shard (weight and gradient in
    # param_init_type, here fp32: 12/4 + 4) plus the gathered copy (2 B/param)
    norms = 2 * h
    assert d.param_dtype_bytes == 4
    want_static = (params / t) * (12 / 4 + 4) + norms * (12 / 4 + 4) + w_g
    assert k_off.static_mib * BYTES_PER_MIB == pytest.approx(want_static)


def test_parallel_optimizer_comm_recompute_in_stage_memory():
    # the static delta reaches the stage's static memory once per fully recomputed layer
    import numpy as np

    from autotune.config.layout import make_layout
    from autotune.cost import evaluate_layout

    cfg, off = _llama_os(False)
    _, on = _llama_os(True)
    n = cfg.num_layers
    P = cfg.pipeline_stage
    layers = [[n // P] * P]
    rec = [[2] + [0] * (P - 1)]
    r_off = evaluate_layout(off, make_layout(layers, rec), micro_batch_num=cfg.micro_batch_num)
    r_on = evaluate_layout(on, make_layout(layers, rec), micro_batch_num=cfg.micro_batch_num)
    w_g_mib = -on.kinds["dense"].full.static_delta_mib
    diff = np.asarray([a.static_mib - b.static_mib for a, b in zip(r_off.stages, r_on.stages)])
    assert diff[0] == pytest.approx(2 * w_g_mib)
    assert np.allclose(diff[1:], 0.0)
    assert r_on.stages[0].recompute_ms > r_off.stages[0].recompute_ms
