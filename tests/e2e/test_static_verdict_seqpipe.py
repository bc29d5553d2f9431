"""The fast static-memory verdict writes a closest config the space may write: with seq pipe
(seq_split_num 2) MindFormers forbids full recompute (R_SEQPIPE_RECOMPUTE), so the closest is the
even split without recompute, and `evaluate` reads it back. Found by the round-trip property
(tests/e2e/test_round_trip.py, seqpipe and seqvpp draws)."""

from __future__ import annotations

import yaml
from click.testing import CliRunner

from autotune.cli import main

CFG = """
context: {max_device_memory: 9GB}
parallel: {pipeline_config: {pipeline_interleave: true, pipeline_scheduler: seqpipe}}
parallel_config: {data_parallel: 2, model_parallel: 2, pipeline_stage: 2, micro_batch_num: 2,
                  use_seq_parallel: true, vocab_emb_dp: false, seq_split_num: 2}
recompute_config: {recompute: false, select_recompute: false, select_comm_recompute: false,
                   mp_comm_recompute: false, recompute_slice_activation: false}
model: {model_config: {num_layers: 9, hidden_size: 4096, num_heads: 32, n_kv_heads: 8,
                       intermediate_size: 11008, seq_length: 4096, vocab_size: 32000,
                       pp_interleave_num: 1, offset: 0}}
"""


def test_static_verdict_closest_has_no_full_recompute_under_seqpipe(tmp_path):
    cfg, space, out = tmp_path / "cfg.yaml", tmp_path / "space.yaml", tmp_path / "best.yaml"
    cfg.write_text(CFG)
    space.write_text("pp_interleave_num: [1]\nrecompute_kinds: [full]\npipeline_scheduler: seqpipe\n")
    r = CliRunner().invoke(main, ["search", str(cfg), "--space", str(space), "--out", str(out), "--quiet"])
    assert r.exit_code == 2 and "R_HBM_INFEASIBLE" in r.output  # 9,809 MiB of static memory > 9,216
    written = yaml.safe_load(out.read_text())
    assert written["recompute_config"]["recompute"] is False
    back = CliRunner().invoke(main, ["evaluate", str(out)])
    assert back.exit_code == 0, back.output
