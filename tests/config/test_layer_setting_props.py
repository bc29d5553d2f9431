"""Property tests for the LayerSetting emulation.

1. Round trip: any valid layout → :func:`emit_canonical` → strict check in 1.5, 1.7 and 1.8 gives
   the same layers / recompute / select tables back.
2. Robustness: 10,000+ random and mutated configs end in a result or a ConfigError (CLI exit 0 or
   2) — never another exception, never a hang (each case is timed).
"""

from __future__ import annotations

import copy
import json
import random
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from autotune.config.cases import case_to_training_yaml
from autotune.config.layer_setting import VERSIONS, emit_canonical
from autotune.config.read import check_config
from autotune.errors import ConfigError
from tests.conftest import MACHINE_LOAD

ROOT = Path(__file__).resolve().parents[2]
SHARED = ROOT / "tests" / "data" / "cases"  # copies of shared/cases (see its README)
VECTORS = json.loads((SHARED / "layer_setting_vectors.json").read_text())
BUGS = json.loads((SHARED / "bug_cases.json").read_text())
REAL = [yaml.safe_load(p.read_text()) for p in sorted((ROOT / "examples" / "real_configs").glob("*.yaml"))]


@st.composite
def layouts(draw):
    pp = draw(st.integers(1, 8))
    vpp = draw(st.integers(1, 3))
    total = pp * vpp
    flat = [draw(st.integers(0 if k in (0, total - 1) else 1, 6)) for k in range(total)]
    if sum(flat) < total:                       # MindFormers needs num_layers >= pp * vpp
        flat[1 if total > 2 else 0] += total - sum(flat)
    layers = np.array(flat, dtype=np.int64).reshape(vpp, pp)
    def table():
        return np.array([draw(st.integers(0, int(c))) for c in flat], dtype=np.int64).reshape(vpp, pp)
    rec = table()
    mode = draw(st.sampled_from(["legacy", "mcore"]))
    sel = {"feed_forward\\.mul": table()} if draw(st.booleans()) else None
    com = {".*\\.norm": table(), "attention_norm\\.norm": table()} if draw(st.booleans()) else None
    return layers, rec, sel, com, mode


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(layouts())
def test_emit_round_trip_all_versions(case):
    layers, rec, sel, com, mode = case
    emitted = emit_canonical(layers, rec, sel, com)
    emitted["model"]["model_config"]["num_layers"] = int(layers.sum())   # the model's, not tuned
    if mode == "mcore":
        emitted["use_legacy"] = False
    text = yaml.safe_dump(emitted)              # through YAML text, as a user would get it
    for version in VERSIONS:
        res = check_config(yaml.safe_load(text), version)
        assert res.layers_vp.tolist() == layers.tolist()
        assert res.effective_vp.tolist() == layers.tolist()
        assert res.recompute_vp.tolist() == rec.tolist()
        for given_tabs, got in ((sel, res.select_vp), (com, res.comm_vp)):
            if given_tabs is not None and any(t.any() for t in given_tabs.values()):
                assert {k: v.tolist() for k, v in got.items()} == {k: v.tolist() for k, v in given_tabs.items()}
            else:
                assert all(not v.any() for v in got.values())
        assert not [w for w in res.warning_codes if w.startswith("W_OFFSET") or w.startswith("W_STAGE_")]


# ---- robustness ---------------------------------------------------------------------------------

_SCALARS = [0, 1, -1, 2, 3, 7, 13, 64, 2**31, 2**40, -2**33, 1.5, -0.2, float("nan"), True, False, None,
            "x", "feed_forward\\.mul", "(", "", "1f1b", "zero_bubble_v", "seqpipe", "seqvpp",
            "seqsmartvpp", "gpipe", [], {}]


def _random_value(rng: random.Random, depth: int = 0):
    r = rng.random()
    if depth > 3 or r < 0.45:
        return rng.choice(_SCALARS)
    if r < 0.85:
        return [_random_value(rng, depth + 1) for _ in range(rng.randint(0, 9))]
    return {rng.choice(["a", "b", ".*\\.norm", "feed_forward\\.mul", "x\\.y", 1]): _random_value(rng, depth + 1)
            for _ in range(rng.randint(0, 3))}


_PATHS = [("model", "model_config", "num_layers"), ("model", "model_config", "offset"),
          ("model", "model_config", "pp_interleave_num"), ("model", "model_config", "mtp_depth"),
          ("model", "model_config", "mtp_num_layers"), ("model", "model_config", "pipeline_stage"),
          ("parallel_config", "pipeline_stage"), ("parallel_config", "micro_batch_num"),
          ("parallel_config", "seq_split_num"), ("parallel", "pipeline_config", "pipeline_interleave"),
          ("parallel", "pipeline_config", "pipeline_scheduler"), ("parallel", "pipeline_config"),
          ("recompute_config", "recompute"), ("recompute_config", "select_recompute"),
          ("recompute_config", "select_comm_recompute"), ("recompute_config", "select_recompute_exclude"),
          ("recompute_config", "select_comm_recompute_exclude"),
          ("recompute_config", "recompute_slice_activation"), ("recompute_config",), ("swap_config", "swap"),
          ("use_legacy",), ("model",), ("model", "model_config")]


def _mutate(rng: random.Random, data: dict) -> dict:
    data = copy.deepcopy(data)
    for _ in range(rng.randint(1, 3)):
        path = rng.choice(_PATHS)
        node = data
        for key in path[:-1]:
            if not isinstance(node, dict):
                break
            node = node.setdefault(key, {}) if rng.random() < 0.9 else node.get(key)
        if not isinstance(node, dict):
            continue
        if rng.random() < 0.1:
            node.pop(path[-1], None)
        elif rng.random() < 0.5 and isinstance(node.get(path[-1]), int) and not isinstance(node.get(path[-1]), bool):
            node[path[-1]] += rng.choice([-2, -1, 1, 2])           # small numeric nudges
        else:
            node[path[-1]] = _random_value(rng)
    return data


def _bases():
    out = [case_to_training_yaml(v) for v in VECTORS]
    for b in BUGS:
        try:
            out.append(case_to_training_yaml(b["input"]))
        except ConfigError:          # e.g. a Megatron override that is rejected on translation
            pass
    return out + REAL


def _exit_code(data, version, emulate):
    try:
        check_config(data, version, emulate=emulate)
        return 0
    except ConfigError as exc:
        assert exc.rule and exc.message
        return 2


@MACHINE_LOAD  # wall-clock limits (2 s a config, 60 s in all): never while the busy-loop tests run
def test_ten_thousand_random_and_mutated_configs():
    rng = random.Random(20240603)
    bases = _bases()
    codes = {0: 0, 2: 0}
    start = time.perf_counter()
    for i in range(10_000):
        data = _mutate(rng, rng.choice(bases)) if i % 10 else {"model": {"model_config": {
            "num_layers": rng.randint(1, 40), "offset": _random_value(rng)}},
            "parallel_config": {"pipeline_stage": rng.randint(1, 8)}}
        t0 = time.perf_counter()
        codes[_exit_code(data, rng.choice(VERSIONS), rng.random() < 0.5)] += 1
        assert time.perf_counter() - t0 < 2.0, data
    assert codes[0] > 500 and codes[2] > 500, codes
    assert time.perf_counter() - start < 60


def test_mutated_configs_through_cli_subprocess(tmp_path):
    rng = random.Random(7)
    bases = _bases()
    for i in range(4):
        path = tmp_path / f"m{i}.yaml"
        path.write_text(yaml.safe_dump(_mutate(rng, rng.choice(bases))))
        proc = subprocess.run([sys.executable, "-m", "autotune.cli", "check", str(path), "--format", "json"],
                              capture_output=True, text=True, cwd=ROOT, timeout=60)
        assert proc.returncode in (0, 2)
        assert "Traceback" not in proc.stderr
        json.loads(proc.stdout)
