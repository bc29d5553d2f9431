"""Toy fixtures for the report pictures, with numbers computable on paper.

Profile: one layer kind, fwd 1 ms, bwd 2 ms, activation 10 MiB, static 5 MiB per layer; full
recompute keeps 1 MiB and replays 1 ms. Head 20 MiB static (stage 0), tail 30 MiB static (last
stage), p2p 0.5 ms per hop.

Layout: 4 layers, 2 stages x 1 chunk ([[2, 2]]), stage 1 recomputes 1 layer; 3 micro-batches, 1F1B.
Per micro-batch: stage 0 fwd 2 / bwd 4 ms, stage 1 fwd 2 / bwd 4 + 1 replay ms. Hand simulation:

    stage 0: F0 [0,2]  F1 [2,4]  B0 [10,14]  F2 [14,16]  B1 [17,21]  B2 [24,28]
    stage 1: F0 [2.5,4.5]  B0 [4.5,9.5]  F1 [9.5,11.5]  B1 [11.5,16.5]  F2 [16.5,18.5]  B2 [18.5,23.5]

step 28 ms; busy 18 + 21 ms, bubble 1 - 39/56. Memory: static 30 / 40 MiB; activation per
micro-batch 20 / 11 MiB; peak 30 + 2·20 = 70 and 40 + 11 = 51 MiB.
"""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import numpy as np  # noqa: E402
import pytest  # noqa: E402

from autotune.config.layout import Layout  # noqa: E402
from autotune.cost.report import evaluate_layout  # noqa: E402
from autotune.profile.schema import profile_from_dict  # noqa: E402

TOY_PROFILE = {
    "name": "toy",
    "kinds": {"dense": {"fwd_ms": 1, "bwd_ms": 2, "act_mib": 10, "static_mib": 5,
                        "full": {"act_mib": 1, "extra_ms": 1}}},
    "layer_kinds": [["dense", 4]],
    "head": {"static_mib": 20},
    "tail": {"static_mib": 30},
    "p2p_ms": 0.5,
}

TOY_CONFIG = """\
context:
  max_device_memory: "1GB"
parallel_config:
  data_parallel: 1
  model_parallel: 1
  pipeline_stage: 2
  micro_batch_num: 4
recompute_config:
  recompute: [1, 0]
model:
  model_config:
    num_layers: 8
    hidden_size: 256
    num_heads: 4
    seq_length: 128
    vocab_size: 1000
    offset: [1, -1]
"""

TOY8_PROFILE = """\
name: toy8
kinds:
  dense: {fwd_ms: 1, bwd_ms: 2, act_mib: 10, static_mib: 5, full: {act_mib: 1, extra_ms: 1}}
layer_kinds: [[dense, 8]]
head: {static_mib: 20}
tail: {fwd_ms: 0.5, bwd_ms: 1, static_mib: 30}
p2p_ms: 0.25
"""


def toy_layout(recompute=(0, 1), layers=(2, 2)) -> Layout:
    lay = np.asarray([layers], dtype=np.int64)
    z = np.zeros_like(lay)
    return Layout(lay, np.asarray([recompute], dtype=np.int64), z, z.copy())


@pytest.fixture
def toy_profile():
    return profile_from_dict(TOY_PROFILE)


@pytest.fixture
def toy_report(toy_profile):
    return evaluate_layout(toy_profile, toy_layout(), micro_batch_num=3, schedule="1f1b", hbm_mib=100.0)


@pytest.fixture
def toy_files(tmp_path):
    """(config path, profile path) of an 8-layer, 2-stage toy that api.search tunes in < 1 s."""
    cfg = tmp_path / "train.yaml"
    cfg.write_text(TOY_CONFIG)
    prof = tmp_path / "profile.yaml"
    prof.write_text(TOY8_PROFILE)
    return cfg, prof
