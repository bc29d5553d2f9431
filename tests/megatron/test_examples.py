"""End to end: the shipped DeepSeek-V3-class example through the CLI and the Python API (the
Llama-3-70B example takes ~15 CPU s: benchmarks/megatron_examples.py measures both)."""

import json

import pytest
from click.testing import CliRunner

import autotune
from autotune.cli import main
from autotune.megatron.layout import parse_layout_string
from autotune.megatron.run import build_run

EX = "examples/megatron/deepseek_v3_moe.yaml"


@pytest.mark.slow
def test_deepseek_example_cli_json_and_rewrite(root, tmp_path):
    out = tmp_path / "tuned.yaml"
    r = CliRunner().invoke(main, ["search", str(root / EX), "--format", "json", "--out", str(out)])
    assert r.exit_code == 0, r.output
    data = json.loads(r.output)
    best = data["best"]
    assert best["fits"] and data["lower_bound_ms"] <= best["step_time_ms"]
    assert data["certified_gap"] is not None and data["certified_gap"] >= 0
    assert best["step_time_ms"] < data["baselines"]["user"]["step_time_ms"]
    meg = data["megatron"]
    layout = meg["flags"]["pipeline_model_parallel_layout"]
    table = parse_layout_string(layout, pp=16, num_layers=61, mtp_num_layers=1)
    assert table == meg["layers_per_virtual_stage"]
    # the written file is the example with only the tuned arguments changed, and reads back the same
    run = build_run(out)
    assert run.layers_vp == table and run.m == 128
    orig = (root / EX).read_text().splitlines()
    new = out.read_text().splitlines()
    assert [x for x in orig if x.startswith("#")] == [x for x in new if x.startswith("#")]
    assert {x.split(":")[0] for x in set(new) ^ set(orig)} <= {
        "pipeline-model-parallel-layout", "recompute-granularity", "recompute-method", "recompute-num-layers",
        "recompute-modules"}


@pytest.mark.slow
def test_python_api_takes_the_same_inputs(root):
    run = autotune.load_megatron(root / EX)
    res = autotune.search(megatron_args=run, seed=0)
    res2 = autotune.search(megatron_args=str(root / EX), seed=0)
    assert res.step_time_ms == res2.step_time_ms and res.flags == res2.flags
