"""Profiler traces: synthetic Chrome traces generated from a known profile (1F1B order, warm-up
step, a second stream, an outlier) are read back exactly without noise and within 1 % with noise."""

from __future__ import annotations

import json

import numpy as np
import pytest

from autotune.cost.schedules.one_f_one_b import one_f_one_b_order
from autotune.errors import ConfigError
from autotune.profile.trace import (LayerMap, load_layer_map, measure_traces, robust_mean,
                                    write_chrome_trace)

# known per-micro-batch times (ms): layers 0-1 dense, 2-7 moe; head on stage 0, tail on stage 1
TRUTH = {("dense", "fwd"): 2.0, ("dense", "bwd"): 4.0, ("moe", "fwd"): 3.0, ("moe", "bwd"): 6.5,
         ("head", "fwd"): 0.4, ("head", "bwd"): 0.6, ("tail", "fwd"): 1.2, ("tail", "bwd"): 2.2}
KINDS = [("dense", 2), ("moe", 6)]
SPLIT = (0.5, 0.3, 0.2)  # each part's time is three kernels


def _kind(i: int) -> str:
    return "dense" if i < 2 else "moe"


def _names(stage: int, part: str, i: int, fwd: bool) -> list[str]:
    if stage == 0:  # PyTorch / Hugging Face module names
        base = {"layer": f"model.layers.{i}", "head": "model.embed_tokens", "tail": "lm_head"}[part]
        ops = ["input_layernorm/aten::rms_norm", "self_attn.q_proj/aten::mm", "mlp.down_proj/aten::mm"]
        return [f"{base}.{o}" + ("" if fwd else "/MmBackward0") for o in ops]
    # MindSpore scope names
    base = {"layer": f"Default/network-LlamaForCausalLM/model-LlamaModel/layers-CellList/{i}-LLamaDecodeLayer",
            "head": "Default/network-LlamaForCausalLM/model-LlamaModel/tok_embeddings-LlamaEmbedding",
            "tail": "Default/network-LlamaForCausalLM/lm_head-Linear"}[part]
    ops = [f"attention-LLamaAttention/MatMul-op{10 * i + 1}", f"feed_forward-FFN/MatMul-op{10 * i + 2}",
           f"feed_forward-FFN/Mul-op{10 * i + 3}"]
    return [("" if fwd else "Gradients/") + f"{base}/{o}" for o in ops]


def make_traces(tmp, *, noise: float = 0.0, m: int = 4, steps: int = 4, seed: int = 0,
                outlier: bool = True) -> list:
    """Two stage files; step 0 is a 3x slower warm-up; comm kernels on a second stream."""
    rng = np.random.default_rng(seed)
    stage_parts = [[("head", 0)] + [("layer", i) for i in range(4)],
                   [("layer", i) for i in range(4, 8)] + [("tail", 0)]]
    order = one_f_one_b_order(2, 1, m)
    paths = []
    for st in range(2):
        ev, t = [], 0.0
        for step in range(steps):
            t0 = t
            slow = 3.0 if step == 0 else 1.0
            for _, mb, fwd in order[st]:
                parts = stage_parts[st] if fwd else list(reversed(stage_parts[st]))
                for part, i in parts:
                    key = (_kind(i) if part == "layer" else part, "fwd" if fwd else "bwd")
                    dur_ms = TRUTH[key] * slow * (1 + noise * rng.standard_normal())
                    if outlier and step == 2 and mb == 1 and part == "layer" and i in (1, 5) and fwd:
                        dur_ms *= 4.0  # one slow occurrence (a hiccup) per stage
                    for name, frac in zip(_names(st, part, i, fwd), SPLIT):
                        d = dur_ms * frac * 1000.0
                        ev.append({"name": name, "ph": "X", "ts": t, "dur": d, "pid": 1, "tid": 7})
                        t += d
                    if part == "layer":  # overlapping all-reduce on the comm stream
                        ev.append({"name": f"model.layers.{i}.self_attn/AllReduce", "ph": "X",
                                   "ts": t - 500.0, "dur": 400.0, "pid": 1, "tid": 9})
                t += 50.0  # p2p wait between ops
            ev.append({"name": f"ProfilerStep#{step}", "ph": "X", "ts": t0, "dur": t - t0,
                       "pid": 1, "tid": 1})
            ev.append({"name": "some_metadata", "ph": "M", "pid": 1})
            t += 1000.0
        p = tmp / f"trace_view_stage{st}.json"
        write_chrome_trace(p, ev)
        paths.append(p)
    return paths


def test_exact_without_noise(tmp_path):
    paths = make_traces(tmp_path)
    meas = measure_traces(paths, layer_map=LayerMap(layer_kinds=KINDS))
    for key, val in TRUTH.items():
        assert meas.timings[key].mean_ms == pytest.approx(val, rel=1e-9), key
    # 3 steps kept x 4 micro-batches; the 4x hiccup of layers 1 and 5 was rejected as an outlier
    assert meas.steps_used == [3, 3]
    assert meas.timings[("dense", "fwd")].samples == 2 * 12 - 1
    assert meas.timings[("dense", "fwd")].dropped == 1
    assert meas.timings[("moe", "fwd")].dropped == 1
    assert meas.timings[("moe", "bwd")].cv == pytest.approx(0.0, abs=1e-12)
    assert meas.per_layer_ms[(6, "bwd")] == pytest.approx(6.5)
    f = meas.fields()
    assert f["kinds.moe.bwd_ms"] == pytest.approx(6.5) and f["head.fwd_ms"] == pytest.approx(0.4)
    assert any("busiest" in w for w in meas.warnings)


def test_within_one_percent_with_noise(tmp_path):
    paths = make_traces(tmp_path, noise=0.01, steps=6, seed=11)
    meas = measure_traces(paths, layer_map=LayerMap(layer_kinds=KINDS))
    for key, val in TRUTH.items():
        t = meas.timings[key]
        assert t.mean_ms == pytest.approx(val, rel=0.01), key
        assert 0.003 < t.cv < 0.02, key  # the spread is reported


def test_warmup_kept_when_asked(tmp_path):
    paths = make_traces(tmp_path, outlier=False)
    meas = measure_traces(paths, layer_map=LayerMap(layer_kinds=KINDS), warmup_steps=0)
    # the 3x warm-up step is 1 of 4 steps: the MAD rule rejects it (it is a quarter of the samples)
    assert meas.timings[("moe", "fwd")].mean_ms == pytest.approx(3.0)
    assert meas.timings[("moe", "fwd")].dropped == 6 * 4


def test_layer_map_file_and_errors(tmp_path):
    p = tmp_path / "map.yaml"
    p.write_text("patterns:\n  layer: 'blk(\\d+)'\nlayer_kinds: [[dense, 2], [moe, 6]]\n")
    lm = load_layer_map(p)
    assert lm.kind_of(1) == "dense" and lm.kind_of(7) == "moe"
    assert lm.patterns["layer"] == "blk(\\d+)"
    bad = tmp_path / "bad.yaml"
    bad.write_text("patterns:\n  layers: 'x'\n")
    with pytest.raises(ConfigError) as e:
        load_layer_map(bad)
    assert e.value.rule == "layer_map"
    nomatch = tmp_path / "t.json"
    nomatch.write_text(json.dumps([{"name": "foo", "ph": "X", "ts": 0, "dur": 1}]))
    with pytest.raises(ConfigError) as e:
        measure_traces([nomatch])
    assert e.value.rule == "trace"
    notjson = tmp_path / "n.json"
    notjson.write_text("{")
    with pytest.raises(ConfigError):
        measure_traces([notjson])


def test_robust_mean():
    mean, kept = robust_mean([1.0, 1.1, 0.9, 1.0, 10.0])
    assert kept.size == 4 and mean == pytest.approx(1.0)


def test_cli_trace_import_warns_what_traces_leave_out(tmp_path):
    """Traces give times only: every memory field and p2p is named with its analytic value."""
    from pathlib import Path

    import yaml
    from click.testing import CliRunner

    from autotune.cli import main

    cfg = Path(__file__).parent / "data" / "llama_small.yaml"
    paths = make_traces(tmp_path)
    lm = tmp_path / "map.yaml"
    lm.write_text(yaml.safe_dump({"layer_kinds": [["dense", 16]]}))
    out = tmp_path / "p.yaml"
    args = ["profile", str(cfg), *sum((["--from-trace", str(p)] for p in paths), []),
            "--layer-map", str(lm), "--out", str(out)]
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 0, r.output
    prof = yaml.safe_load(out.read_text())
    label = "trace:trace_view_stage0.json,trace_view_stage1.json"
    dense = [w for w in prof["warnings"] if w.startswith("kinds.dense: ")]
    assert len(dense) == 1 and "act_mib" in dense[0] and "static_mib" in dense[0]
    assert "fwd_ms" not in dense[0]  # measured
    assert dense[0].endswith(f"not in {label}; taken from the analytic profile for ascend-910b")
    assert f"warning: {dense[0]}" in r.stderr
    r = CliRunner().invoke(main, args[:-2] + ["--strict"])
    assert r.exit_code == 2 and "[import_incomplete]" in r.output and "kinds.dense.static_mib" in r.output
