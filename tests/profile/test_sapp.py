"""SAPP (MindFormers pipeline_balance) layer-file import and `autotune profile --from-sapp`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from autotune.cli import main
from autotune.errors import ConfigError
from autotune.profile.sapp import load_sapp

DATA = Path(__file__).parent / "data"


def test_mapping_read_and_derived():
    imp = load_sapp(DATA / "sapp_layers.json")
    f, how = imp.fields, imp.how
    assert imp.layer_kinds == [("DecoderLayer", 16)]
    assert f["kinds.DecoderLayer.static_mib"] == 1350.0 and f["kinds.DecoderLayer.act_mib"] == 300.0
    assert f["kinds.DecoderLayer.full.act_mib"] == 16.0
    assert f["kinds.DecoderLayer.both.act_mib"] == 160.0
    assert (f["kinds.DecoderLayer.fwd_ms"], f["kinds.DecoderLayer.bwd_ms"]) == (2.0, 4.0)
    assert f["kinds.DecoderLayer.select.extra_ms"] == pytest.approx(0.16)   # 4.16 - 4.0
    assert f["kinds.DecoderLayer.full.extra_ms"] == pytest.approx(2.0)      # 0.5 x 4.0
    assert f["kinds.DecoderLayer.both.extra_ms"] == pytest.approx(0.66)     # default 0.165 x 4.0
    assert "default" in how["kinds.DecoderLayer.both.extra_ms"]
    assert (f["head.fwd_ms"], f["head.bwd_ms"]) == (pytest.approx(0.3), pytest.approx(0.6))  # b = 2f
    assert f["tail.act_mib"] == 500.0 and f["tail.static_mib"] == 1500.0


def test_rejects_bad_files(tmp_path):
    p = tmp_path / "s.json"
    p.write_text(json.dumps({"layers_description": [{"name": "x", "type": "MIDDLE"}]}))
    with pytest.raises(ConfigError) as e:
        load_sapp(p)
    assert e.value.rule == "sapp" and e.value.field == "layers_description[0].type"
    p.write_text(json.dumps({"layers_description": [
        {"name": "L", "type": "BODY", "nb_layer": 4, "memory_activation": -1}]}))
    with pytest.raises(ConfigError) as e:
        load_sapp(p)
    assert e.value.field == "layers_description[0].memory_activation"
    p.write_text(json.dumps({"layers_description": [{"name": "E", "type": "HEAD", "time": 1}]}))
    with pytest.raises(ConfigError, match="no BODY"):
        load_sapp(p)


def test_cli_from_sapp_over_analytic(tmp_path):
    out = tmp_path / "prof.yaml"
    r = CliRunner().invoke(main, ["profile", str(DATA / "llama_small.yaml"), "--from-sapp",
                                  str(DATA / "sapp_layers.json"), "--out", str(out)])
    assert r.exit_code == 0, r.output
    prof = yaml.safe_load(out.read_text())
    dense = prof["kinds"]["dense"]  # the SAPP kind is mapped onto the config's single kind
    assert dense["static_mib"] == 1350.0 and dense["fwd_ms"] == 2.0
    assert prof["sources"]["field.kinds.dense.static_mib"] == "sapp:sapp_layers.json"
    assert prof["sources"]["field.stage_const_mib"] == "analytic"   # SAPP has no constant
    assert prof["layer_kinds"] == [["dense", 16]]


def test_cli_from_sapp_alone(tmp_path):
    r = CliRunner().invoke(main, ["profile", "--from-sapp", str(DATA / "sapp_layers.json")])
    assert r.exit_code == 0, r.output
    assert "DecoderLayer" in r.output


def test_cli_bad_sapp_is_one_line_error(tmp_path):
    p = tmp_path / "s.json"
    p.write_text("{")
    r = CliRunner().invoke(main, ["profile", "--from-sapp", str(p)])
    assert r.exit_code == 2 and "Traceback" not in r.output and "[sapp]" in r.output
