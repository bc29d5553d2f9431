"""Megatron-LM's theoretical memory report, reproduced by hand.

Formulas: Megatron-LM megatron/training/theoretical_memory_usage.py (mirror commit d98e8a64dd),
``compute_weight_and_optimizer_memory`` and ``compute_activation_memory`` (the sequence-parallel +
selective-recompute branch ``report_theoretical_memory`` picks). Every number below is worked out
by hand from those formulas for this small GQA/SwiGLU model, not by calling our code.
"""

import pytest

from autotune.megatron.memory import in_flight_microbatches, theoretical_memory
from autotune.megatron.run import build_run
from tests.megatron.small_model import SMALL_GQA

ARGS = {**SMALL_GQA, "recompute-granularity": "selective"}


def test_weight_and_optimizer_memory_by_hand():
    run = build_run(dict(ARGS))
    # padded vocab: multiple 128 * TP 2 = 256; ceil(32000 / 256) * 256 = 32000
    assert run.padded_vocab == 32000
    attn = 2 * 1024 ** 2 * ((1 + 4 / 16) * (64 * 16 / 1024))          # 2,621,440
    mlp = 2 * 1024 * 4096 * 1.5                                          # 12,582,912
    assert attn == 2_621_440 and mlp == 12_582_912
    tp_most = ((attn + mlp) * 8 / 2 + 1024 * 32000) / 2                  # 46,792,704
    repl_most = (2 * 1024 * 1 * 8 + 1 * 1024) / 2                        # 8,704
    assert tp_most == 46_792_704 and repl_most == 8_704
    bytes_ = (tp_most + repl_most) * (6 + 12 / 4)                        # dp = 16 / (2*2*1) = 4
    th = theoretical_memory(run, run.m)
    assert run.dp == 4 and run.m == 8
    assert th["weight_and_optimizer_mb"] == pytest.approx(421_212_672 / 2 ** 20)
    assert bytes_ == 421_212_672
    assert th["params_most_loaded_shard"] == pytest.approx(46_801_408)


def test_activation_memory_by_hand_sp_selective():
    run = build_run(dict(ARGS))
    per_layer = 2048 * 1 * 1024 * (18 + 4 * 4096 / 1024)                 # 71,303,168
    total = per_layer * 8 + 8 * 2048 * 1 * 2 + 2048 * 1 * 1024 * 2       # 574,652,416
    total *= min(1, 8 / 2)                                               # no interleave, m >= pp
    assert total == 574_652_416
    th = theoretical_memory(run, run.m)
    assert th["with_sp_formula"] == 1.0
    assert th["activation_mb"] == pytest.approx(287_326_208 / 2 ** 20)   # / TP 2 = 274.02 MB
    assert in_flight_microbatches(run) == 2


def test_activation_memory_without_sp_interleaved():
    args = dict(ARGS, **{"num-layers-per-virtual-pipeline-stage": 1, "sequence-parallel": False,
                         "pipeline-model-parallel-size": 4, "world-size": 32})
    args.pop("recompute-granularity")
    run = build_run(args)
    assert run.vpp == 2 and run.layers_vp == [[1, 1, 1, 1], [1, 1, 1, 1]]
    # compute_activation_memory_without_sp: sbh(10 + 24/t) per layer, embedding terms, interleave
    # penalty 1 + (pp-1)/(pp*vpp) = 1 + 3/8, then * 1.05 (not divided by TP)
    per_layer = 2048 * 1024 * (10 + 24 / 2)
    total = (per_layer * 8 + 8 * 2048 * 4 + 2048 * 1024 * 4) * (1 + 3 / 8) * 1.05
    th = theoretical_memory(run, run.m)
    assert th["with_sp_formula"] == 0.0
    assert th["activation_mb"] == pytest.approx(total / 2 ** 20)
    assert in_flight_microbatches(run) == 6                               # ceil(1.375 * 4)


def test_profile_static_matches_megatron_bytes_per_param():
    """Our per-layer static memory uses Megatron's 6 + 12/d bytes per parameter (distributed
    optimizer, bf16): a dense layer holds (attn + mlp)/TP + norms parameters."""
    from autotune.megatron.profile import megatron_profile

    run = build_run(dict(ARGS))
    prof = megatron_profile(run, "h100")
    per_layer = ((2_621_440 + 12_582_912) / 2 + 2048) * (6 + 12 / 4)
    assert prof.kinds["dense"].static_mib == pytest.approx(per_layer / 2 ** 20)
    assert prof.head.static_mib == pytest.approx(1024 * 32000 / 2 * 9 / 2 ** 20)
