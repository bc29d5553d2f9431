"""Merging measured fields into the analytic profile: values, provenance, errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from autotune.config.training import load_config
from autotune.errors import ConfigError
from autotune.profile.analytic import analytic_profile
from autotune.profile.merge import leaf_fields, merge_profile, provenance_table
from autotune.profile.schema import load_profile

DATA = Path(__file__).parent / "data"


@pytest.fixture(scope="module")
def base():
    return analytic_profile(load_config(DATA / "llama_small.yaml"))


def test_later_source_wins_and_every_field_is_attributed(base):
    prof, prov = merge_profile(base, [({"kinds.dense.fwd_ms": 7.0, "stage_const_mib": 3000.0}, "sapp:x"),
                                      ({"kinds.dense.fwd_ms": 6.5}, "trace:t.json")])
    assert prof.kinds["dense"].fwd_ms == 6.5 and prof.stage_const_mib == 3000.0
    assert prov["kinds.dense.fwd_ms"] == "trace:t.json"
    assert prov["stage_const_mib"] == "sapp:x"
    assert prov["kinds.dense.bwd_ms"] == "analytic"
    assert set(prov) == set(leaf_fields(prof))
    assert prof.sources["field.kinds.dense.fwd_ms"] == "trace:t.json"
    assert prof.sources["activation"].startswith("Korthikanti")  # analytic sources kept
    assert "kinds.dense.fwd_ms" in provenance_table(prov, prof)


def test_profile_yaml_round_trip_keeps_provenance(base, tmp_path):
    prof, _ = merge_profile(base, [({"head.static_mib": 1234.0}, "dryrun:a")])
    p = tmp_path / "p.yaml"
    p.write_text(prof.to_yaml())
    back = load_profile(p)
    assert back.head.static_mib == 1234.0 and back.sources["field.head.static_mib"] == "dryrun:a"


def test_no_base_creates_kinds_and_options(tmp_path):
    prof, prov = merge_profile(None, [({"kinds.moe.select.act_mib": 5.0, "kinds.moe.act_mib": 9.0},
                                       "dryrun")], layer_kinds=[("moe", 4)])
    assert prof.kinds["moe"].select.act_mib == 5.0 and prof.kinds["moe"].act_mib == 9.0
    assert prov["kinds.moe.select.extra_ms"] == "default" and prov["kinds.moe.fwd_ms"] == "default"


def test_negative_value_clamped_with_note(base):
    prof, prov = merge_profile(base, [({"kinds.dense.comm.act_mib": -3.0}, "dryrun")])
    assert prof.kinds["dense"].comm.act_mib == 0.0
    assert prov["kinds.dense.comm.act_mib"] == "dryrun (clamped from -3)"


def test_errors(base):
    with pytest.raises(ConfigError) as e:
        merge_profile(base, [({"kinds.dense.speed": 1.0}, "x")])
    assert e.value.rule == "profile_field"
    with pytest.raises(ConfigError) as e:
        merge_profile(base, [({"kinds.moe.fwd_ms": 1.0}, "x")])
    assert e.value.rule == "profile_layers"
    with pytest.raises(ConfigError):
        merge_profile(None, [({"p2p_ms": 1.0}, "x")])
