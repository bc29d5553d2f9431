"""Megatron reader: layout strings (round trip), argument files, launch scripts, errors, rewrites."""

import json
import re

import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from autotune.cli import main
from autotune.config.megatron import parse_layout as project_parse_layout
from autotune.errors import ConfigError
from autotune.megatron.args import parse_int_list_expr
from autotune.megatron.read import read_args
from autotune.megatron.layout import expand_layout, first_last_counts, format_layout, parse_layout_string
from autotune.megatron.rewrite import rewrite
from autotune.megatron.run import build_run


@st.composite
def tables(draw):
    pp = draw(st.integers(1, 6))
    vpp = draw(st.integers(1, 4))
    counts = draw(st.lists(st.integers(0, 7), min_size=pp * vpp, max_size=pp * vpp))
    mtp = draw(st.integers(0, 2))
    return [counts[v * pp:(v + 1) * pp] for v in range(vpp)], mtp


@settings(max_examples=300, deadline=None)
@given(tables())
def test_layout_round_trip(case):
    table, mtp = case
    pp = len(table[0])
    text = format_layout(table, mtp_num_layers=mtp)
    assert " " not in text and not re.search(r"\([^)]*\(", text)        # no spaces, no nesting
    assert parse_layout_string(text, pp=pp, num_layers=sum(map(sum, table)), mtp_num_layers=mtp) == table
    # the project's older reader (autotune check --from megatron) agrees stage by stage
    stages = project_parse_layout(text)
    assert [s["t"] for s in stages] == [table[v][p] for v in range(len(table)) for p in range(pp)]
    assert sum(s["m"] for s in stages) == mtp and stages[0]["E"] == 1 and stages[-1]["L"] == 1


def test_megatron_doc_layout():
    # docs/user-guide/features/pipeline_parallel_layout.md: PP16 VPP2, MTP alone on rank 14
    t = parse_layout_string("Et*3|(tt|)*29,m|L", pp=16, num_layers=61, mtp_num_layers=1)
    assert t[0] == [3] + [2] * 15 and t[1] == [2] * 14 + [0, 0]
    assert expand_layout("E|(t|)*3,m|m||L") == ["E", "t", "t", "t", "m", "m", "", "L"]


@pytest.mark.parametrize("layout, rule, words", [
    ("Et*3|t*3|t*2|tL", "R_MEGATRON_LAYOUT", "places 9 decoder layers t but --num-layers is 8"),
    ("Et*3|t*3|t*2L", "R_MEGATRON_VPP", "3 virtual stages are not a multiple of pipeline_model_parallel_size 2"),
    ("tE*3|t*3|t*2|L", "R_MEGATRON_LAYOUT", "embedding E must be the first symbol"),
    ("Et*3 | t*3|t|tL", "R_MEGATRON_LAYOUT", "a space is not a layer symbol"),
    ("Et*3|mt*3|t|tL", "R_MEGATRON_LAYOUT", "places 1 MTP layers m but --mtp-num-layers is 0"),
])
def test_layout_errors(layout, rule, words):
    with pytest.raises(ConfigError) as e:
        parse_layout_string(layout, pp=2, num_layers=8)
    assert e.value.rule == rule and words in str(e.value) and e.value.field == "--pipeline-model-parallel-layout"


def test_first_last_counts():
    assert first_last_counts([[3, 4, 4, 1]]) == (3, 1)
    assert first_last_counts([[1, 2, 2, 1], [1, 2, 2, 1]]) == (2, 2)
    assert first_last_counts([[1, 2, 3, 1]]) is None


BASE = {"num-layers": 8, "hidden-size": 256, "num-attention-heads": 4, "seq-length": 128, "vocab-size": 1000,
        "pipeline-model-parallel-size": 2, "world-size": 4, "global-batch-size": 8}


def _cli(tmp_path, data, *extra):
    p = tmp_path / "args.yaml"
    p.write_text("\n".join(f"{k}: {json.dumps(v)}" for k, v in data.items()) + "\n")
    return CliRunner().invoke(main, ["search", str(p), *extra])


@pytest.mark.parametrize("change, flag, rule", [
    ({"num-layers": 7}, "--num-layers", "R_MEGATRON_UNEVEN"),
    ({"num-layers-per-virtual-pipeline-stage": 2, "num-layers": 12, "pipeline-model-parallel-size": 4,
      "world-size": 8}, "--num-layers-per-virtual-pipeline-stage", "R_MEGATRON_VPP"),
    ({"pipeline-model-parallel-layout": "Et*4|t*3L"}, "--pipeline-model-parallel-layout", "R_MEGATRON_LAYOUT"),
    ({"decoder-first-pipeline-num-layers": 3, "decoder-last-pipeline-num-layers": 2, "pipeline-model-parallel-size": 4,
      "world-size": 8}, "--decoder-last-pipeline-num-layers", "R_MEGATRON_UNEVEN"),
    ({"global-batch-size": 9}, "--global-batch-size", "R_MEGATRON_BATCH"),
    ({"recompute-granularity": "full"}, "--recompute-method", "R_MEGATRON_RECOMPUTE"),
    ({"recompute-granularity": "selective", "recompute-modules": "moe_act"}, "--recompute-modules",
     "R_MEGATRON_RECOMPUTE"),
])
def test_cli_errors_name_flag_value_rule(tmp_path, change, flag, rule):
    r = _cli(tmp_path, {**BASE, **change})
    assert r.exit_code == 2, r.output
    line = r.output.strip().splitlines()[-1]
    assert line.startswith(f"error: [{rule}] {flag}:") and "Traceback" not in r.output


SCRIPT = """#!/bin/bash
# toy launch script in the style of Megatron-LM's examples
GPUS_PER_NODE=4
NUM_NODES=${NUM_NODES:-2}
WORLD=$(($GPUS_PER_NODE*$NUM_NODES))
PP=2
DATA=$1
MODEL_ARGS=(
    --num-layers 8
    --hidden-size 256   # comment
    --num-attention-heads 4
    --seq-length 128
    --vocab-size 1000
)
MODEL_ARGS+=(--swiglu)
PAR_ARGS=(
    --tensor-model-parallel-size 1
    --pipeline-model-parallel-size $PP
    --recompute-granularity full
    --recompute-method uniform
    --recompute-num-layers 1
)
if [ ! -f pretrain_gpt.py ]; then echo "run from Megatron-LM"; fi
torchrun --nproc_per_node $GPUS_PER_NODE --nnodes $NUM_NODES pretrain_gpt.py \\
    ${MODEL_ARGS[@]} \\
    "${PAR_ARGS[@]}" \\
    --global-batch-size 16 \\
    --data-path $DATA \\
    --bf16
"""


def test_script_reader(tmp_path):
    p = tmp_path / "train.sh"
    p.write_text(SCRIPT)
    a = read_args(p)
    assert a.entry == "pretrain_gpt.py" and a.launcher == {"nproc_per_node": 4, "nnodes": 2}
    assert a.values["num_layers"] == 8 and a.values["pipeline_model_parallel_size"] == 2
    assert a.values["swiglu"] is True and a.values["bf16"] is True
    assert a.unresolved == {"data_path": ["1"]}               # not read by autotune: not an error
    run = build_run(p)
    assert run.world == 8 and run.dp == 4 and run.m == 4 and run.granularity == "full"


def test_script_unresolved_variable_is_named(tmp_path):
    p = tmp_path / "train.sh"
    p.write_text(SCRIPT.replace("PP=2\n", "").replace("$PP", "$PP_SIZE"))
    r = CliRunner().invoke(main, ["search", "--megatron-args", str(p)])
    assert r.exit_code == 2
    assert "[R_MEGATRON_UNRESOLVED] --pipeline-model-parallel-size:" in r.output and "PP_SIZE" in r.output


def test_script_rewrite_keeps_other_bytes(tmp_path):
    p = tmp_path / "train.sh"
    p.write_text(SCRIPT)
    a = read_args(p)
    flags = {"pipeline_model_parallel_layout": "Et*3|t*5L", "recompute_granularity": "full",
             "recompute_method": "block", "recompute_num_layers": 2, "num_layers_per_virtual_pipeline_stage": None}
    out = rewrite(a, flags)
    old, new = SCRIPT.splitlines(), out.splitlines()
    added = [x for x in new if x not in old]
    gone = [x for x in old if x not in new]
    assert added == ['    --pipeline-model-parallel-layout "Et*3|t*5L"', "    --recompute-method block",
                     "    --recompute-num-layers 2"]
    assert gone == ["    --recompute-method uniform", "    --recompute-num-layers 1"]
    assert build_run(_write(tmp_path, out)).layers_vp == [[3, 5]]


def _write(tmp_path, text):
    q = tmp_path / "new.sh"
    q.write_text(text)
    return q


def test_yaml_rewrite_keeps_comments(tmp_path):
    text = ("# my run\n--num-layers: 8  # layers\n--hidden-size: 256\n--num-attention-heads: 4\n"
            "--seq-length: 128\n--vocab-size: 1000\n--pipeline-model-parallel-size: 2\n--world-size: 4\n"
            "--recompute-granularity: selective\n--global-batch-size: 8\n")
    p = tmp_path / "a.yaml"
    p.write_text(text)
    out = rewrite(read_args(p), {"pipeline_model_parallel_layout": "Et*3|t*5L", "recompute_granularity": None})
    assert out == text.replace("--recompute-granularity: selective\n", "").replace(
        "--pipeline-model-parallel-size: 2\n",
        '--pipeline-model-parallel-size: 2\n--pipeline-model-parallel-layout: "Et*3|t*5L"\n')


def test_moe_layer_freq_expression():
    assert parse_int_list_expr("[0]*3+[1]*5", field="f") == [0, 0, 0, 1, 1, 1, 1, 1]
    assert parse_int_list_expr("([1]*2+[0])*2", field="f") == [1, 1, 0, 1, 1, 0]
    with pytest.raises(ConfigError):
        parse_int_list_expr("__import__('os')", field="f")
