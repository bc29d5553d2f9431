"""Search space as data: schema validation, sub-problems (boolean knobs, micro_batch_num with a
fixed global batch, schedulers, per-op pattern sets), recompute granularity, and --dry-run."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

import autotune
from autotune.config.layout import make_layout
from autotune.cost.inputs import ProfileArrays
from autotune.cost.report import evaluate_layout
from autotune.errors import ConfigError
from autotune.tuner.params import decode, encode, param_names, representable
from autotune.tuner.problem import Problem
from autotune.tuner.space import (SearchSpace, expand_space, fold_patterns, load_search_space,
                                  micro_batch_candidates, pattern_sets)

ROOT = Path(__file__).resolve().parents[2]
TOY = ROOT / "tests" / "e2e" / "data" / "toy.yaml"
DATA = ROOT / "tests" / "sweep" / "data"


def test_default_file_is_the_builtin_default() -> None:
    assert load_search_space() == SearchSpace()
    assert load_search_space(ROOT / "search_spaces" / "default.yaml").pipeline_scheduler == "keep"


@pytest.mark.parametrize("path", sorted((ROOT / "search_spaces").glob("*.yaml")))
def test_shipped_spaces_validate(path) -> None:
    if path.name == "megatron.yaml":   # the Megatron mode's own schema (autotune.megatron.search)
        from autotune.megatron.search import load_megatron_space

        load_megatron_space(path)
        return
    load_search_space(path)


@pytest.mark.parametrize("data,field", [
    ({"select_patterns": [["mlp\\.(bad"]]}, "select_patterns"),
    ({"pipeline_scheduler": ["keep", "nosuch"]}, "pipeline_scheduler"),
    ({"recompute_kinds": ["full"], "comm_patterns": "ranked"}, ""),
    ({"micro_batch_num": [0, 2]}, "micro_batch_num"),
    ({"mp_comm_recompute": "maybe"}, "mp_comm_recompute"),
    ({"recompute_granularity": "layer"}, "recompute_granularity"),
])
def test_schema_errors_name_the_field(tmp_path, data, field) -> None:
    import yaml

    p = tmp_path / "s.yaml"
    p.write_text(yaml.safe_dump(data))
    with pytest.raises(ConfigError) as e:
        load_search_space(p)
    assert e.value.rule == "search_space" and e.value.field == field


def test_fold_patterns_matches_per_op_cost_model() -> None:
    """The folded aggregate options score a layout exactly as the per-op path scores the emitted
    {pattern: table} form, for ranked select sets combined with a comm set."""
    cfg = autotune.load_config(TOY)
    prof = autotune.resolve_profile(cfg)
    pa = ProfileArrays.from_profile(prof)
    sels = pattern_sets(pa, "select", "ranked", 3)
    assert len(sels) == 3 and len(sels[2]) == 3 and sels[0][0] in sels[2]
    comm = [".*\\.norm"]
    layers = np.array([[4, 4, 4, 4]])
    rec, sel, com = np.array([[1, 0, 0, 0]]), np.array([[3, 2, 4, 0]]), np.array([[2, 4, 1, 0]])
    for s in sels:
        folded = fold_patterns(pa, s, comm)
        agg = evaluate_layout(folded, make_layout(layers, rec, sel, com), micro_batch_num=8, hbm_mib=cfg.hbm_mib)
        per_op = dataclasses.replace(make_layout(layers, rec, sel, com),
                                     select_patterns={p: sel for p in s}, comm_patterns={p: com for p in comm})
        ref = evaluate_layout(prof, per_op, micro_batch_num=8, hbm_mib=cfg.hbm_mib)
        assert agg.step_time_ms == pytest.approx(ref.step_time_ms, rel=1e-12)
        np.testing.assert_allclose([s_.peak_mib for s_ in agg.stages], [s_.peak_mib for s_ in ref.stages], rtol=1e-12)
    assert fold_patterns(pa, None, None) is pa


def test_pattern_set_search_emits_dict_form() -> None:
    sp = SearchSpace(pp_interleave_num=[1], select_patterns="ranked", ranked_max_sets=2)
    res = autotune.search(TOY, space=sp, trials=10, seed=0)
    assert res.subproblems == 2
    vals = res.tuned_values()
    sel = vals["select_recompute"]
    if sel is not False:
        assert isinstance(sel, dict) and set(sel) == set(res.select_patterns)
        assert all(np.shape(t) == (4,) or np.shape(t) == (1, 4) for t in sel.values())


def test_free_knob_is_two_subproblems_and_emitted() -> None:
    cfg = autotune.load_config(TOY)
    sp = SearchSpace(pp_interleave_num=[1], mp_comm_recompute="free", recompute_slice_activation="free")
    vs = expand_space(cfg, sp)
    assert len(vs) == 4 and vs[0].settings == {} and vs[0].cfg is cfg
    assert {tuple(sorted(v.settings.items())) for v in vs[1:]} == {
        (("recompute_config.mp_comm_recompute", False),),
        (("recompute_config.recompute_slice_activation", True),),
        (("recompute_config.mp_comm_recompute", False), ("recompute_config.recompute_slice_activation", True))}
    # the knob changes the analytic profile
    assert not np.array_equal(vs[0].pa.act_kc, vs[2].pa.act_kc) or not np.array_equal(vs[0].pa.act_kc, vs[1].pa.act_kc)
    res = autotune.search(TOY, space=sp, trials=10, seed=0, gap=None)
    # the answer is the best over the sub-problems: no single sub-problem beats it
    for v in vs:
        one = autotune.search(v.cfg, space=SearchSpace(pp_interleave_num=[1]), trials=10, seed=0, gap=None)
        assert res.best.step_time_ms <= one.best.step_time_ms + 1e-9
    block = res.tuned_block()
    for k, v in res.settings.items():
        node = block
        for part in k.split("."):
            node = node[part]
        assert node == v
    assert res.config.mp_comm_recompute == (res.settings.get("recompute_config.mp_comm_recompute",
                                                             cfg.mp_comm_recompute))


def test_free_knob_with_given_profile_is_an_error() -> None:
    with pytest.raises(ConfigError) as e:
        autotune.search(DATA / "tiny.yaml", DATA / "tiny_profile.yaml",
                        space=SearchSpace(parallel_optimizer_comm_recompute="free"))
    assert e.value.field == "parallel_optimizer_comm_recompute" and "analytic profile" in str(e.value)


def test_micro_batch_candidates_keep_global_batch() -> None:
    cfg = autotune.load_config(TOY)  # dp 2, micro_batch_num 8, no runner_config.batch_size (1)
    got = micro_batch_candidates(cfg, SearchSpace(micro_batch_num=[3, 4, 8, 16]))
    assert got == [(4, 2), (8, None)]  # 8 * 1 = 4 * 2; 3 and 16 leave a fractional batch
    res = autotune.search(TOY, space=SearchSpace(pp_interleave_num=[1], micro_batch_num=[4, 8]), trials=8,
                          seed=0, gap=None)
    assert res.subproblems == 2
    if "parallel_config.micro_batch_num" in res.settings:
        assert res.tuned_block()["parallel_config"]["micro_batch_num"] == 4
        assert res.tuned_block()["runner_config"]["batch_size"] == 2
        assert res.best.micro_batch_num == 4 if hasattr(res.best, "micro_batch_num") else True


def test_scheduler_candidates() -> None:
    res = autotune.search(DATA / "tiny.yaml", DATA / "tiny_profile.yaml",
                          space=SearchSpace(pp_interleave_num=[1], recompute_kinds=["full"],
                                            pipeline_scheduler=["keep", "gpipe"]), trials=8, seed=0, gap=None)
    assert res.subproblems == 2
    one = {s: autotune.search(DATA / "tiny.yaml", DATA / "tiny_profile.yaml",
                              space=SearchSpace(pp_interleave_num=[1], recompute_kinds=["full"],
                                                pipeline_scheduler=s), trials=8, seed=0, gap=None)
           for s in ("1f1b", "gpipe")}
    assert res.best.step_time_ms == pytest.approx(min(r.best.step_time_ms for r in one.values()))


def test_stage_granularity_shares_fraction_across_chunks() -> None:
    cfg = autotune.load_config(DATA / "tiny.yaml")
    pa = ProfileArrays.from_profile(autotune.load_profile(DATA / "tiny_profile.yaml"))
    prob = Problem(pa, P=2, m=4, hbm_mib=1024, vpp_candidates=[1, 2], kinds=("full",),
                   recompute_granularity="stage")
    assert [n for n in param_names(prob, 2) if n.startswith("recompute")] == [
        "recompute_s0_v0", "recompute_s1_v0", "recompute_s0_v1", "recompute_s1_v1"]
    # stage 0: 2 of 3 layers in both chunks (one fraction, 4/6); stage 1: 3 of 3 in both
    params = {"pp_interleave_num": 2, "layers_s0_v0": 3, "layers_s1_v0": 3, "layers_s0_v1": 3, "layers_s1_v1": 3,
              "recompute_s0_v0": 2, "recompute_s1_v0": 3, "recompute_s0_v1": 2, "recompute_s1_v1": 3}
    c = decode(prob, params)
    assert c.layers.tolist() == [[3, 3], [3, 3]] and c.rec.tolist() == [[2, 3], [2, 3]]
    assert representable(prob, c) and encode(prob, c) == params
    # 1 of 3 and 3 of 3 on stage 0's chunks: no single fraction gives both
    c.rec = np.array([[1, 3], [3, 3]])
    assert not representable(prob, c)
    res = autotune.search(cfg, DATA / "tiny_profile.yaml", trials=12, seed=0,
                          space=SearchSpace(pp_interleave_num=[1, 2], recompute_kinds=["full"],
                                            recompute_granularity="stage"))
    assert res.best is not None


def test_dry_run_prints_size_and_constraints() -> None:
    from click.testing import CliRunner

    from autotune.cli import main

    r = CliRunner().invoke(main, ["search", str(TOY), "--dry-run", "--space",
                                  str(ROOT / "search_spaces" / "rich.yaml")])
    assert r.exit_code == 0, r.output
    for key in ("subproblems:", "layer_splits:", "space_size_log10:", "constraints:", "free knobs:",
                "pinned:", "micro_batch_num"):
        assert key in r.output, key
