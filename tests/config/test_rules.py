"""Every rule the config reader enforces, with the exact error (rule, field, value), the same in
``check``, ``evaluate`` and ``search``: the MindFormers rejections of issue 14 item 4, the input
limits, and the messages of issue 19 item 9."""

from __future__ import annotations

import copy
import time

import pytest
import yaml
from click.testing import CliRunner

import autotune
from autotune.cli import main
from autotune.config import patterns
from autotune.config.read import check_config
from autotune.config.training import config_from_dict
from autotune.errors import ConfigError

BASE = {
    "context": {"max_device_memory": "60GB"},
    "parallel": {"parallel_mode": 1},
    "parallel_config": {"pipeline_stage": 4, "micro_batch_num": 8, "model_parallel": 2},
    "model": {"model_config": {"num_layers": 16, "hidden_size": 1024, "num_heads": 16, "seq_length": 1024,
                               "vocab_size": 32000, "intermediate_size": 4096}},
}


def cfg(**paths):
    """BASE with dotted paths set (value ``...`` deletes the key)."""
    data = copy.deepcopy(BASE)
    for dotted, value in paths.items():
        keys = dotted.split("__")
        node = data
        for k in keys[:-1]:
            node = node.setdefault(k, {})
        if value is ...:
            node.pop(keys[-1], None)
        else:
            node[keys[-1]] = value
    return data


def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def write(tmp_path, data, name="c.yaml"):
    p = tmp_path / name
    p.write_text(yaml.safe_dump(data, sort_keys=False))
    return p


def write_tmp(data):
    """``data`` as a YAML file in a fresh temporary directory (for CLI runs)."""
    import tempfile
    from pathlib import Path
    return write(Path(tempfile.mkdtemp()), data)


def assert_rule(exc, rule, field, value):
    assert (exc.rule, exc.field) == (rule, field), str(exc)
    assert exc.value == value
    assert "\n" not in str(exc) and "fix" in exc.message


# config-level rules: every command refuses the config when it loads it (exit 2, same rule)
CONFIG_LEVEL = [
    (cfg(recompute_config__mp_comm_recompute=1), "R_RECOMPUTE_BOOL", "recompute_config.mp_comm_recompute", 1),
    (cfg(recompute_config__parallel_optimizer_comm_recompute="yes"), "R_RECOMPUTE_BOOL",
     "recompute_config.parallel_optimizer_comm_recompute", "yes"),
    (cfg(recompute_config__mp_comm_recompute=None), "R_RECOMPUTE_BOOL", "recompute_config.mp_comm_recompute", None),
    (cfg(parallel_config__micro_batch_num=2), "R_MICRO_BATCH_MIN", "parallel_config.micro_batch_num", 2),
    (cfg(use_legacy=False, parallel_config__seq_split_num=2), "R_SEQPIPE_MCORE", "parallel_config.seq_split_num", 2),
    (cfg(use_legacy=False, recompute_config__recompute_slice_activation=True), "R_SLICE_ACTIVATION_MCORE",
     "recompute_config.recompute_slice_activation", True),
    (cfg(use_legacy=False, micro_batch_interleave_num=2), "R_MB_INTERLEAVE_MCORE", "micro_batch_interleave_num", 2),
    (cfg(model__model_config__hidden_size=1000), "R_HIDDEN_HEADS", "model.model_config.hidden_size", 1000),
    (cfg(parallel_config__model_parallel=3), "R_HEADS_MP", "parallel_config.model_parallel", 3),
    (cfg(parallel_config__context_parallel=2), "R_CP_FLASH", "parallel_config.context_parallel", 2),
    (cfg(model__model_config__fine_grain_interleave=2), "R_FINE_GRAIN_SP", "model.model_config.fine_grain_interleave",
     2),
    (cfg(parallel_config__seq_split_num=2, runner_wrapper={"calculate_per_token_loss": True}),
     "R_SEQPIPE_PER_TOKEN_LOSS", "runner_wrapper.calculate_per_token_loss", True),
    (cfg(model__model_config__num_layers=5000), "R_LIMIT_NUM_LAYERS", "model.model_config.num_layers", 5000),
    (cfg(parallel_config__pipeline_stage=512, parallel_config__micro_batch_num=512,
         model__model_config__num_layers=1024), "R_LIMIT_PIPELINE_STAGE", "parallel_config.pipeline_stage", 512),
    (cfg(parallel_config__micro_batch_num=1_000_000), "R_LIMIT_MICRO_BATCH", "parallel_config.micro_batch_num",
     1_000_000),
    (cfg(parallel_config__micro_batch_num=4096, parallel_config__pipeline_stage=64,
         model__model_config__num_layers=256), "R_LIMIT_SCHEDULE", "parallel_config.micro_batch_num", 4096),
    (cfg(parallel_config__micro_batch_num=2048, model__model_config__pp_interleave_num=4,
         parallel__pipeline_config={"pipeline_interleave": True}), "R_LIMIT_SCHEDULE",
     "parallel_config.micro_batch_num", 2048),
    (cfg(parallel_config__seq_split_num=65), "R_LIMIT_SEQ_SPLIT", "parallel_config.seq_split_num", 65),
    (cfg(model__model_config__pp_interleave_num=17, parallel__pipeline_config={"pipeline_interleave": True}),
     "R_LIMIT_VPP", "model.model_config.pp_interleave_num", 17),
    (cfg(parallel_config__data_parallel=2**40), "R_RANGE", "parallel_config.data_parallel", 2**40),
    (cfg(parallel_config__micro_batch_num=None), "R_TYPE", "parallel_config.micro_batch_num", None),
    (cfg(parallel_config__seq_split_num=None), "R_TYPE", "parallel_config.seq_split_num", None),
    (cfg(parallel_config__pipeline_stage=None), "R_TYPE", "parallel_config.pipeline_stage", None),
    (cfg(parallel_config__data_parallel=None), "R_TYPE", "parallel_config.data_parallel", None),
    (cfg(swap_config={"swap": None}), "R_TYPE", "swap_config.swap", None),
    (cfg(recompute_config__recompute_slice_activation=None), "R_RECOMPUTE_BOOL",
     "recompute_config.recompute_slice_activation", None),
    (cfg(recompute_config__recompute_slice_activation=1), "R_RECOMPUTE_BOOL",
     "recompute_config.recompute_slice_activation", 1),
    (cfg(parallel__pipeline_config={"pipeline_scheduler": "1F1B"}), "R_SCHEDULER",
     "parallel.pipeline_config.pipeline_scheduler", "1F1B"),
]


@pytest.mark.parametrize("data, rule, field, value", CONFIG_LEVEL, ids=[c[1] + "-" + c[2] for c in CONFIG_LEVEL])
def test_config_level_rule_in_every_command(tmp_path, data, rule, field, value):
    with pytest.raises(ConfigError) as ei:
        check_config(data)
    assert_rule(ei.value, rule, field, value)
    with pytest.raises(ConfigError) as ei:
        config_from_dict(data)
    assert_rule(ei.value, rule, field, value)
    path = write(tmp_path, data)
    for args in (["check", path], ["evaluate", path], ["search", path, "--dry-run"]):
        r = run(*args)
        assert r.exit_code == 2 and f"[{rule}] {field}:" in r.output, (args, r.output)


# layout-level rules: check and evaluate refuse; search runs and says why the user's config is missing
LAYOUT_LEVEL = [
    (cfg(parallel_config__seq_split_num=2, recompute_config__recompute=[0, 0, 0, 0],
         parallel__pipeline_config={"pipeline_scheduler": "seqpipe"}), "R_SEQPIPE_RECOMPUTE",
     "recompute_config.recompute", [0, 0, 0, 0]),
    (cfg(use_legacy=False, parallel__pipeline_config={"pipeline_interleave": True}), "R_VPP_MISSING",
     "model.model_config.pp_interleave_num", None),
    (cfg(recompute_config__select_recompute_exclude=["feed_forward\\.(mul"]), "R_SELECT_PATTERN",
     "recompute_config.select_recompute_exclude", "feed_forward\\.(mul"),
    (cfg(recompute_config__select_comm_recompute_exclude={".*\\.norm": [1, "x"]}), "R_RECOMPUTE_TYPE",
     "recompute_config.select_comm_recompute_exclude..*\\.norm", [1, "x"]),
    (cfg(model__model_config__offset=0.5), "R_OFFSET_FLOAT", "model.model_config.offset", 0.5),
    (cfg(model__model_config__offset=[0.5, 0, 0, 0]), "R_OFFSET_FLOAT", "model.model_config.offset", [0.5, 0, 0, 0]),
]


@pytest.mark.parametrize("data, rule, field, value", LAYOUT_LEVEL, ids=[c[1] for c in LAYOUT_LEVEL])
def test_layout_rule_in_every_command(tmp_path, data, rule, field, value):
    with pytest.raises(ConfigError) as ei:
        check_config(data)
    assert_rule(ei.value, rule, field, value)
    with pytest.raises(ConfigError) as ei:
        autotune.evaluate(config_from_dict(data))
    assert_rule(ei.value, rule, field, value)
    path = write(tmp_path, data)
    assert f"[{rule}] {field}:" in run("evaluate", path).output
    res = autotune.search(config_from_dict(data), trials=1, seed=0)
    assert res.baselines["user"] is None
    assert (res.user_config_error["rule"], res.user_config_error["field"]) == (rule, field)


def test_emulate_keeps_the_float_offset_as_a_warning():
    res = check_config(cfg(model__model_config__offset=0.5), emulate=True)
    assert "W_OFFSET_FLOAT" in res.warning_codes and res.layers_vp.tolist() == [[4, 4, 4, 4]]


def test_seqpipe_mcore_needs_pipeline_stages():
    """r1.7+ refuses seq_split_num > 1 on mcore only inside its pipeline branch (pp > 1)."""
    data = cfg(use_legacy=False, parallel_config__seq_split_num=2, parallel_config__pipeline_stage=1)
    assert check_config(data).pp == 1


def test_micro_batch_limit_answers_fast(tmp_path):
    """issue 14: ``micro_batch_num: 1000000`` in evaluate hung for minutes; now a rule, at once."""
    path = write(tmp_path, cfg(parallel_config__micro_batch_num=1_000_000))
    t0 = time.process_time()
    r = run("evaluate", path)
    assert r.exit_code == 2 and "R_LIMIT_MICRO_BATCH" in r.output
    assert time.process_time() - t0 < 5


def test_issue17_sizes_are_within_the_limits():
    data = cfg(parallel_config__pipeline_stage=64, parallel_config__micro_batch_num=512,
               model__model_config__num_layers=256, model__model_config__pp_interleave_num=4,
               parallel__pipeline_config={"pipeline_interleave": True})
    assert check_config(data).layers_vp.shape == (4, 64)
    assert config_from_dict(data).pp_interleave_num == 4


def test_recompute_counts_above_the_stage_are_clamped_with_a_warning():
    data = cfg(recompute_config__recompute=[[9, 4, 4, 4]])
    res = check_config(data)
    assert res.recompute_vp.tolist() == [[4, 4, 4, 4]]                # MindFormers caps at the 4 layers
    w = [w for w in res.warnings if w.code == "W_RECOMPUTE_CLAMPED"]
    assert w and w[0].field == "recompute_config.recompute" and "count 9 at [0][0]" in w[0].message
    rep = autotune.evaluate(config_from_dict(data))
    assert "W_RECOMPUTE_CLAMPED" in [w.code for w in rep.warnings]
    assert "W_RECOMPUTE_CLAMPED" in check_config(cfg(recompute_config__recompute=[5, 0, 0, 0])).warning_codes


def test_missing_parallel_config_is_named():
    data = cfg(parallel_config=..., recompute_config__recompute=[1, 1, 1, 1])
    with pytest.raises(ConfigError) as ei:
        check_config(data)
    assert ei.value.rule == "R_RECOMPUTE_LEN"
    assert "parallel_config.pipeline_stage is not set: is the parallel_config section missing?" in str(ei.value)


def test_missing_micro_batch_num_is_warned_the_same_everywhere():
    data = cfg(parallel_config__micro_batch_num=...)
    assert "W_MICRO_BATCH_DEFAULT" in check_config(data).warning_codes
    assert "W_MICRO_BATCH_DEFAULT" in [w.code for w in autotune.evaluate(config_from_dict(data)).warnings]


def test_moe_without_sequence_parallel_by_release():
    """r1.6.0+ check_rules refuses it; r1.3.0–r1.5.0 (rules "1.5") do not have the rule."""
    data = cfg(moe_config={"expert_num": 8})
    with pytest.raises(ConfigError) as ei:
        config_from_dict(data)
    assert_rule(ei.value, "R_MOE_MP_SP", "parallel_config.use_seq_parallel", False)
    assert check_config(data, "1.5").pp == 4
    with pytest.raises(ConfigError) as ei:
        check_config(data, "1.7")
    assert ei.value.rule == "R_MOE_MP_SP"
    assert check_config(cfg(moe_config={"expert_num": 8}, parallel_config__use_seq_parallel=True)).pp == 4


@pytest.mark.parametrize("hbm, rule", [("60", "R_MEMORY_UNIT"), ("60TB", "R_MEMORY_RANGE"),
                                       ("0GB", "R_MEMORY_RANGE"), ("lots", "R_TYPE"),
                                       ("-58GB", "R_MEMORY_RANGE"), ("nanGB", "R_MEMORY_RANGE"),
                                       ("infGB", "R_MEMORY_RANGE")])
def test_hbm_needs_a_unit_and_a_sane_size(tmp_path, hbm, rule):
    path = write(tmp_path, BASE)
    r = run("evaluate", path, "--hbm", hbm)
    assert r.exit_code == 2 and f"[{rule}] --hbm:" in r.output
    with pytest.raises(ConfigError) as ei:
        config_from_dict(cfg(context__max_device_memory=hbm))
    assert (ei.value.rule, ei.value.field) == (rule, "context.max_device_memory")
    assert run("evaluate", path, "--hbm", "60GB").exit_code == 0


def test_empty_file_message(tmp_path):
    path = tmp_path / "empty.yaml"
    path.write_text("\n# nothing\n")
    for cmd in ("check", "evaluate"):
        r = run(cmd, path)
        assert r.exit_code == 2 and "the file is empty" in r.output and "NoneType" not in r.output


def test_space_and_sweep_typos_name_the_key(tmp_path):
    space = tmp_path / "space.yaml"
    space.write_text("pp_interleave_num: [1, 2]\nrecompute_kind: [full]\n")
    r = run("search", write(tmp_path, BASE), "--space", space, "--dry-run")
    assert r.exit_code == 2
    assert "unknown key 'recompute_kind'" in r.output and "did you mean 'recompute_kinds'?" in r.output
    assert "allowed keys: comm_patterns, " in r.output and "Extra inputs" not in r.output
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text(f"name: n\ndefaults: {{trial: 5}}\nscenarios:\n  - name: a\n    config: {tmp_path / 'c.yaml'}\n")
    r = run("sweep", sweep, "--out", tmp_path / "out")
    assert r.exit_code == 2 and "[sweep] defaults.trial: unknown key 'trial'" in r.output
    assert "did you mean 'trials'?" in r.output


# ---- pattern-vs-pattern matching (issue 21 item 4) -------------------------------------------------

def test_pathological_pattern_pair_is_fast_and_no_match():
    """``re.fullmatch`` took 29 s on this pair (doubling per character); the regex module with
    MindFormers' timeout answers at once, and the select pattern is kept (no conflict)."""
    data = cfg(recompute_config__select_recompute=["a" * 40 + "!"],
               recompute_config__select_recompute_exclude=["(a+)+b"])
    t0 = time.process_time()
    res = check_config(data)
    assert time.process_time() - t0 < 3
    assert list(res.select_recompute) == ["a" * 40 + "!"]
    assert "W_SELECT_REMOVED_BY_EXCLUDE" not in res.warning_codes


def test_a_timeout_counts_as_no_match(monkeypatch):
    monkeypatch.setattr(patterns, "REGEX_TIMEOUT_S", 0.05)
    budget = patterns.MatchBudget(limit_s=5.0)
    assert budget.fullmatch("(x+x+)+y", "x" * 5000, "f") is False
    assert len(budget.timeouts) == 1 and budget.spent_s < 1.0
    assert patterns.patterns_conflict("feed_forward\\.mul", ".*\\.mul", "f", budget) is True   # S11
    assert patterns.patterns_conflict("feed_forward\\.w1", "feed_forward\\.w1\\.activation", "f", budget) is False


def test_the_match_budget_is_a_rule(monkeypatch):
    monkeypatch.setattr(patterns, "REGEX_TIMEOUT_S", 0.05)
    budget = patterns.MatchBudget(limit_s=0.1)
    with pytest.raises(ConfigError) as ei:
        for i in range(10):   # distinct texts: a pair already answered is remembered and costs nothing
            budget.fullmatch("(x+x+)+y", "x" * (5000 + i), "recompute_config.select_recompute")
    assert ei.value.rule == "R_PATTERN_BUDGET" and ei.value.field == "recompute_config.select_recompute"
    assert ei.value.value == "(x+x+)+y" and "\n" not in str(ei.value)


def test_a_remembered_timeout_costs_nothing_and_still_counts(monkeypatch):
    monkeypatch.setattr(patterns, "REGEX_TIMEOUT_S", 0.05)
    budget = patterns.MatchBudget(limit_s=5.0)
    assert budget.fullmatch("(x+x+)+y", "x" * 5000, "f", value="a\\.(x+x+)+y") is False
    spent = budget.spent_s
    assert budget.fullmatch("(x+x+)+y", "x" * 5000, "f", value="a\\.(x+x+)+y") is False
    assert budget.spent_s == spent and budget.timeout_events == 2 and len(budget.timeouts) == 1
    assert budget.timed_out == {"a\\.(x+x+)+y": "x" * 5000}


# ---- a user's pattern against the layer's cell names (fuzzing: ReDoS hung check / evaluate / search) ---

#: The fuzzing run's patterns: catastrophic backtracking with ``re`` (check hung past 60 s, evaluate
#: 56 s); ``regex`` (MindFormers r1.6+) answers them at once: no cell matches, so W_SELECT_NO_MATCH.
REDOS = [["(.*.*.*)*=$"], ["(.*.*)*=$"], {"(.*.*)*=$": [1, 1, 1, 1]}]
#: Times out under ``regex`` too, on every cell name of 9 characters or more (attention_norm,
#: attention, feed_forward, ...): the config's 2 s budget ends.
REGEX_HOSTILE = "(.*?.*?.*?.*?)*?(?<=Z)"


@pytest.mark.parametrize("value", REDOS, ids=["list3", "list2", "dict"])
def test_redos_patterns_end_at_once_with_no_match(value):
    data = cfg(recompute_config__select_recompute=value)
    t0 = time.perf_counter()
    res = check_config(data)
    report = autotune.evaluate(config_from_dict(data))
    assert time.perf_counter() - t0 < 10          # a hang guard (was > 60 s), not a benchmark
    assert "W_SELECT_NO_MATCH" in res.warning_codes and "W_PATTERN_TIMEOUT" not in res.warning_codes
    assert [w.field for w in report.warnings if w.code == "W_SELECT_NO_MATCH"][0] == "recompute_config.select_recompute"


def test_redos_pattern_in_comm_recompute_ends_at_once():
    data = cfg(recompute_config__select_comm_recompute=["(.*.*)*=$"])
    t0 = time.perf_counter()
    r = run("evaluate", write_tmp(data))
    assert time.perf_counter() - t0 < 10
    assert r.exit_code == 0 and "W_SELECT_NO_MATCH" in r.output


@pytest.mark.parametrize("command", ["check", "evaluate"])
@pytest.mark.parametrize("key", ["select_recompute", "select_comm_recompute"])
def test_a_pattern_that_times_out_everywhere_spends_the_budget(command, key):
    t0 = time.perf_counter()
    r = run(command, write_tmp(cfg(**{f"recompute_config__{key}": [REGEX_HOSTILE]})))
    assert time.perf_counter() - t0 < 10          # 2 s budget + the regex timeout's overshoot
    assert r.exit_code == 2 and "Traceback" not in r.output
    line = [ln for ln in r.output.splitlines() if ln.startswith("error:")]
    assert len(line) == 1 and f"[R_PATTERN_BUDGET] recompute_config.{key}:" in line[0]
    assert repr(REGEX_HOSTILE) in line[0]


def test_a_timed_out_cell_match_warns_and_is_no_match(monkeypatch):
    monkeypatch.setattr(patterns, "REGEX_TIMEOUT_S", 0.01)   # every cell name times out, within the budget
    res = check_config(cfg(recompute_config__select_recompute=[REGEX_HOSTILE]))
    w = [w for w in res.warnings if w.code == "W_PATTERN_TIMEOUT"]
    assert len(w) == 1 and w[0].field == "recompute_config.select_recompute" and REGEX_HOSTILE in w[0].message
    assert "W_SELECT_NO_MATCH" in res.warning_codes


def test_compiled_segments_do_not_bypass_the_timeout():
    """select_ops used to call the compiled segment's ``fullmatch`` without a timeout."""
    from autotune.cost.select_ops import pattern_matches
    t0 = time.perf_counter()
    with pytest.raises(ConfigError) as ei, patterns.pattern_scope():
        for name in ("attention_norm", "feed_forward", "activation"):
            pattern_matches(REGEX_HOSTILE, name, cells=False, field="recompute_config.select_comm_recompute")
    assert time.perf_counter() - t0 < 10
    assert (ei.value.rule, ei.value.field) == ("R_PATTERN_BUDGET", "recompute_config.select_comm_recompute")


def test_pattern_count_limit():
    data = cfg(recompute_config__select_recompute=[f"op{i}" for i in range(257)])
    with pytest.raises(ConfigError) as ei:
        check_config(data)
    assert (ei.value.rule, ei.value.field) == ("R_LIMIT_PATTERNS", "recompute_config.select_recompute")


def test_timeout_warning_in_check(monkeypatch):
    monkeypatch.setattr(patterns, "REGEX_TIMEOUT_S", 0.02)
    data = cfg(recompute_config__select_recompute=["x" * 4000],
               recompute_config__select_recompute_exclude=["(x+x+)+y"])
    res = check_config(data)
    w = [w for w in res.warnings if w.code == "W_PATTERN_TIMEOUT"]
    assert w and w[0].field == "recompute_config.select_recompute"
    assert list(res.select_recompute) == ["x" * 4000]          # a timeout is no conflict: kept


@pytest.mark.parametrize("extra, field", [
    ({"swap_config": {"swap": True}, "recompute_config__recompute": [0, 3]}, "swap_config.swap"),
    ({"model__model_config__pipeline_stage": {"start_stage": 1, "stage_num": 2}}, "model.model_config.pipeline_stage"),
])
def test_not_modelled_layouts_are_named(extra, field):
    data = cfg(**{k: v for k, v in extra.items() if "__" in k})
    data.update({k: v for k, v in extra.items() if "__" not in k})
    check_config(data)                                          # check shows their placement
    with pytest.raises(ConfigError) as ei:
        autotune.evaluate(config_from_dict(data))
    assert (ei.value.rule, ei.value.field) == ("R_NOT_MODELLED", field)


def test_swap_with_true_false_is_evaluated_as_all_or_none():
    rep = autotune.evaluate(config_from_dict(cfg(swap_config={"swap": True}, recompute_config__recompute=True)))
    assert [s.layers for s in rep.stages] == [s.recompute for s in rep.stages]     # every layer fully recomputed


def test_user_config_outside_the_space_is_said():
    from autotune.tuner.space import SearchSpace

    data = cfg(model__model_config__pp_interleave_num=2, parallel__pipeline_config={"pipeline_interleave": True})
    res = autotune.search(config_from_dict(data), space=SearchSpace(pp_interleave_num=[1]), trials=1, seed=0)
    assert res.baselines["user"] is None
    assert res.user_config_error["rule"] == "R_USER_OUTSIDE_SPACE"
    assert "pp_interleave_num 2" in res.user_config_error["message"]


# sizes the cost model's schedule cannot run: check reads the layout (MindFormers' layer rules
# hold), evaluate names the key at fault, search leaves that pp_interleave_num out of its space
SCHEDULE_SIZES = [
    (cfg(model__model_config__pp_interleave_num=2, model__model_config__num_layers=16,
         parallel__pipeline_config={"pipeline_interleave": True, "pipeline_scheduler": "seqpipe"}),
     "R_SCHEDULE", "model.model_config.pp_interleave_num", 2),
    (cfg(model__model_config__pp_interleave_num=2, parallel_config__micro_batch_num=6,
         parallel__pipeline_config={"pipeline_interleave": True}),
     "R_MICRO_BATCH_MIN", "parallel_config.micro_batch_num", 6),
]


@pytest.mark.parametrize("data, rule, field, value", SCHEDULE_SIZES, ids=[c[1] for c in SCHEDULE_SIZES])
def test_schedule_sizes_name_the_key_at_fault(tmp_path, data, rule, field, value):
    path = write(tmp_path, data)
    assert run("check", path).exit_code == 0
    r = run("evaluate", path)
    assert r.exit_code == 2 and r.output.startswith(f"error: [{rule}] {field}:"), r.output
    with pytest.raises(ConfigError) as ei:
        autotune.evaluate(path)
    assert (ei.value.rule, ei.value.field, ei.value.value) == (rule, field, value)
    assert run("search", path, "--dry-run").exit_code == 0


def test_a_misspelt_required_model_key_is_named(tmp_path):
    """model_config's keys are open (no unknown-key error there), so a misspelt required key shows
    up as missing; the error then names the near miss it found, and says nothing when there is none."""
    layers = cfg(model__model_config__num_layers=..., model__model_config__num_layer=16)
    r = run("check", write(tmp_path, layers, "a.yaml"))
    assert r.exit_code == 2 and "[R_MISSING] model.model_config.num_layers:" in r.stderr
    assert "found 'num_layer' there: a misspelling of 'num_layers'?" in r.stderr
    dims = cfg(model__model_config__hidden_size=..., model__model_config__hiden_size=1024)
    r = run("evaluate", write(tmp_path, dims, "b.yaml"))
    assert r.exit_code == 2 and "[R_MISSING] model.model_config.hidden_size:" in r.stderr
    assert "missing: hidden_size; found 'hiden_size' there: a misspelling of 'hidden_size'?" in r.stderr
    r = run("check", write(tmp_path, cfg(model__model_config__num_layers=...), "c.yaml"))
    assert r.exit_code == 2 and "misspelling" not in r.stderr


@pytest.mark.parametrize("mode,warned", [("predict", True), ("eval", True), ("train", False), ("finetune", False),
                                         (" Finetune ", False), (None, False)])
def test_run_mode_other_than_training_is_warned(mode, warned):
    """An inference config (run_mode predict) is priced as a training step: W_RUN_MODE says so."""
    from autotune.config.training import run_mode_warnings

    data = {} if mode is None else {"run_mode": mode}
    got = run_mode_warnings(data)
    assert [w.code for w in got] == (["W_RUN_MODE"] if warned else [])
    if warned:
        assert got[0].field == "run_mode" and repr(mode) in got[0].message
