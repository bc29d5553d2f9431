"""Optional PyTorch layer measurement (skips cleanly without torch; CPU, tiny dims)."""

from __future__ import annotations

import sys

import pytest

from autotune.errors import ConfigError


def test_missing_torch_is_a_config_error(monkeypatch):
    from autotune.profile import torch_measure

    monkeypatch.setitem(sys.modules, "torch", None)  # import torch -> ImportError
    with pytest.raises(ConfigError) as e:
        torch_measure.measure_layer(64, 4, 2, 128, 32)
    assert e.value.rule == "torch_missing" and "autotune[torch]" in str(e.value)


def test_tiny_layer_on_cpu():
    pytest.importorskip("torch")
    from autotune.profile.torch_measure import measure_layer

    h, s = 64, 32
    m = measure_layer(h, 4, 2, 128, s, repeats=2, warmup=1)
    # params: q 64x64, kv 64x(2*2*16), o 64x64, gate_up 64x256, down 128x64, two norms
    assert m.params == 64 * 64 + 64 * 64 + 64 * 64 + 64 * 256 + 128 * 64 + 2 * 64
    # checkpointed layer keeps exactly its input: s x h fp32
    assert m.full_act_mib * 2**20 == s * h * 4
    # without checkpointing it keeps many activations, among them the gate/up outputs (2 x s x 128)
    assert m.act_mib * 2**20 > 10 * s * h * 4
    assert m.fwd_ms > 0 and m.bwd_ms > 0
    f = m.fields()
    assert f["kinds.dense.full.workspace_mib"] == m.act_mib


def test_bad_dims():
    pytest.importorskip("torch")
    from autotune.profile.torch_measure import measure_layer

    with pytest.raises(ConfigError) as e:
        measure_layer(64, 5, 1, 128, 8)
    assert e.value.rule == "torch_dims"
