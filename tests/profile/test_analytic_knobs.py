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
