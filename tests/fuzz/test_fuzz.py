"""The fuzz suite in CI: a fixed, derandomized budget of hostile YAML and odd configs through
``check`` and ``evaluate`` (in process). Every input ends in exit 0 or a one-line error with exit 2,
in bounded time, and no config that MindFormers rejects (per the independent oracle of
``tests/fuzz/oracle.py``) is accepted. ``benchmarks/fuzz.py --n 10000`` runs the same at length."""

from __future__ import annotations

import yaml
from hypothesis import HealthCheck, given, settings

from autotune.config.safe_yaml import load_yaml_text
from autotune.errors import ConfigError
from tests.fuzz.harness import classify, run_in_process
from tests.fuzz.oracle import mindformers_rejects
from tests.fuzz.strategies import BASE, configs, yaml_attacks

CI = settings(max_examples=40, derandomize=True, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))


def _mapping(raw: bytes) -> bool:
    try:
        return isinstance(load_yaml_text(raw), dict)
    except ConfigError:
        return False


@CI
@given(yaml_attacks())
def test_yaml_attacks(tmp_path_factory, raw):
    path = tmp_path_factory.mktemp("f") / "attack.yaml"
    path.write_bytes(raw)
    for argv, js in ((["check", str(path), "--format", "json"], True), (["evaluate", str(path)], False)):
        out = run_in_process(argv)
        assert not classify(out, data=None, json_format=js, mapping=_mapping(raw)), (argv, out.output[-500:])


@CI
@given(configs())
def test_configs(tmp_path_factory, data):
    path = tmp_path_factory.mktemp("f") / "config.yaml"
    path.write_text(yaml.safe_dump(data, allow_unicode=True))
    parsed = yaml.safe_load(path.read_text())
    for argv, js in ((["check", str(path), "--format", "json"], True), (["evaluate", str(path)], False)):
        out = run_in_process(argv)
        flags = classify(out, data=parsed, json_format=js, mapping=True)
        assert not flags, (flags, argv, mindformers_rejects(parsed), out.output[-800:])


def test_oracle_agrees_on_known_verdicts():
    """The oracle itself, on configs whose verdict the spec states."""
    import copy

    ok = copy.deepcopy(BASE)
    assert mindformers_rejects(ok) is None
    bad = copy.deepcopy(BASE)
    bad["model"]["model_config"]["offset"] = [1, 0]          # sums to 1, 8 % 2 = 0
    assert "check 3" in mindformers_rejects(bad)
    bad = copy.deepcopy(BASE)
    bad["recompute_config"]["mp_comm_recompute"] = 1
    assert "bool" in mindformers_rejects(bad)
    bad = copy.deepcopy(BASE)
    bad["parallel_config"]["seq_split_num"] = 2
    bad["recompute_config"]["recompute"] = [0, 0]
    assert "seq pipe" in mindformers_rejects(bad)
    bad = copy.deepcopy(BASE)
    bad["parallel_config"]["micro_batch_num"] = 1
    assert "micro_batch_num" in mindformers_rejects(bad)
