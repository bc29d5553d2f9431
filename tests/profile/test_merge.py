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


def test_import_warnings_name_value_and_origin(base):
    from autotune.profile.merge import import_warnings, left_out_fields

    measured = {f: v for f, v in leaf_fields(base).items() if f not in
                ("p2p_ms", "kinds.dense.full.workspace_mib", "kinds.dense.select.extra_ms")}
    measured["kinds.dense.comm.act_mib"] = -3.0
    prof, prov = merge_profile(base, [(measured, "trace:t.json")])
    lines = import_warnings(prov, prof, measured=["trace:t.json"], base_desc="the analytic profile for x")
    p2p = f"{base.p2p_ms:.4g}"
    ws = f"{base.kinds['dense'].full.workspace_mib:.4g}"
    assert lines == [
        f"kinds.dense.full: workspace_mib {ws} MiB not in trace:t.json; taken from the analytic profile for x",
        f"kinds.dense.select: extra_ms {base.kinds['dense'].select.extra_ms:.4g} ms not in trace:t.json; "
        f"taken from the analytic profile for x",
        f"p2p_ms {p2p} ms not in trace:t.json; taken from the analytic profile for x",
        "kinds.dense.comm.act_mib: -3 from trace:t.json clamped to 0 (a profile holds no negative value)"]
    assert left_out_fields(prov) == ["kinds.dense.comm.act_mib", "kinds.dense.full.workspace_mib",
                                     "kinds.dense.select.extra_ms", "p2p_ms"]
    # without a base: 0 (or the option's fallback), and it says so
    prof, prov = merge_profile(None, [({"kinds.moe.select.act_mib": 5.0}, "dryrun")],
                               layer_kinds=[("moe", 4)])
    lines = import_warnings(prov, prof, measured=["dryrun"])
    assert "kinds.moe: fwd_ms 0 ms, bwd_ms 0 ms, act_mib 0 MiB, static_mib 0 MiB, workspace_mib 0 MiB " \
           "not in dryrun; 0, no base profile (give CONFIG to take it from the analytic profile)" in lines
    assert any(w.startswith("kinds.moe.select: extra_ms 0 ms, workspace_mib 0 MiB not in dryrun; the "
                            "option's fallback") for w in lines)
