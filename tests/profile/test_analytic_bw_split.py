"""The analytic profile's B/W split of backward (bwd_w_frac), from FLOPs."""

from __future__ import annotations

from pathlib import Path

import pytest

from autotune.config.training import load_config
from autotune.cost import simulate_schedule
from autotune.profile.analytic import analytic_profile

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "llama3_1_70b" / "train.yaml"


def test_llama70b_w_fraction_hand_value():
    """Llama 3.1 70B (h 8192, 64 heads, 8 KV heads, d 128, f 28672, s 8192): per layer
    P = 2·8192² + 2·8192·1024 + 3·8192·28672 = 855,638,016 weights = 12.75·s·a·d, and the causal
    core is 2·s²·a·d FLOPs. W = 2·s·P, backward = 2·(2·s·P + 2·s²·a·d), so
    bwd_w_frac = 12.75 / (2·13.75) = 51/110. The LM-head tail splits evenly."""
    prof = analytic_profile(load_config(EXAMPLE))
    assert prof.kinds["dense"].bwd_w_frac == pytest.approx(51 / 110, rel=1e-12)
    assert prof.tail.bwd_w_frac == 0.5
    assert "bwd_w_frac" in prof.sources


def test_mtp_tail_adds_its_layer_w():
    cfg = load_config(EXAMPLE)
    raw_dims = cfg.dims.model_copy(update={"mtp_num_layers": 1})
    prof = analytic_profile(cfg.model_copy(update={"dims": raw_dims}))
    base = analytic_profile(cfg)
    last = prof.kinds["dense"]
    t = prof.tail
    # tail W = half of its GEMM backward + the MTP layer's own W
    want = 0.5 * (t.bwd_ms - last.bwd_ms) + last.bwd_w_frac * last.bwd_ms
    assert t.bwd_w_frac * t.bwd_ms == pytest.approx(want)
    assert base.tail.bwd_w_frac == 0.5


def test_zero_bubble_v_uses_the_split():
    """With W < B the uniform ZB-V step grows over the T_F = T_B = T_W one, and its W ops last
    bwd_w_frac of the backward."""
    r = simulate_schedule([[1.0] * 2] * 2, [[2.0] * 2] * 2, micro_batch_num=4, schedule="zero_bubble_v",
                          bwd_w_frac=51 / 110)
    w = {round(o["end_ms"] - o["start_ms"], 12) for o in r.ops if o["kind"] == "W"}
    assert w == {round(2 * 51 / 110, 12)}
    assert r.step_ms >= 25.0
