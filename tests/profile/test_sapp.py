"""The old MindFormers pipeline balancer's (SAPP) layer and init files, read as its last release
reads them, and `autotune profile --from-sapp`.

Reference: mindspore-lab/mindformers commit 959a24518 (2025-02-24), toolkit/pipeline_balance:
utils/layer.py ``Layer.compute_internal_time`` (``backward_default_ratio = 2  # of forward time``:
forward = time, backward = 2·time; per-class backward = ``<class>_time`` or (1 + coef)·2·time),
utils/recompute.py (key names, ``"recompute_time "`` with its trailing space, ``DEFAULT_COEF``),
utils/config.py ``initialize_layer_json`` / ``get_stage_const_mem``, utils/compute_memory.py
``ComputeMemory`` (init-file decomposition), sapp/sapp_solver.py (``stage_param_memory`` +
``stage_active_memory`` with ``compute_activation_nums`` = P - s in flight at vpp 1, plus
``constant_memory_``; head / tail time ×1 forward, ×2 backward in ``micro_batch_time``). The older
"total" semantics (time = forward + backward, forward = time/3): commits fd38c9046 .. 58c59eea8.

The demo files in tests/profile/data/ are written by hand in the balancer's documented format.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from autotune.cli import main
from autotune.config.layout import make_layout
from autotune.cost.report import evaluate_layout
from autotune.errors import ConfigError
from autotune.profile.merge import merge_profile
from autotune.profile.sapp import load_sapp

DATA = Path(__file__).parent / "data"
LAYERS = DATA / "sapp_demo_layers.json"
INIT = DATA / "sapp_demo_init.yaml"


def _profile(imp):
    """What `autotune profile --from-sapp FILE` builds without CONFIG (no analytic profile)."""
    prof, _ = merge_profile(None, [(imp.fields, "sapp")], layer_kinds=imp.layer_kinds)
    return prof


def test_layer_file_read_as_the_balancer_reads_it():
    imp = load_sapp(LAYERS)
    f = imp.fields
    assert imp.layer_kinds == [("Decoder", 14)]
    # time 1.0 is the forward time; backward = 2·time
    assert (f["kinds.Decoder.fwd_ms"], f["kinds.Decoder.bwd_ms"]) == (1.0, 2.0)
    assert (f["head.fwd_ms"], f["head.bwd_ms"], f["tail.fwd_ms"], f["tail.bwd_ms"]) == (1.0, 2.0, 1.0, 2.0)
    # select: (1 + select_rec_coef 0.1)·2 - 2; comm: default 0.125·2; full: "recompute_time " 3.0 - 2
    assert f["kinds.Decoder.select.extra_ms"] == pytest.approx(0.2, abs=1e-12)
    assert f["kinds.Decoder.comm.extra_ms"] == pytest.approx(0.25, abs=1e-12)
    assert f["kinds.Decoder.full.extra_ms"] == 1.0  # not the 99.0 of the key without the space
    assert "kinds.Decoder.both.act_mib" not in f  # no memory_both_comm_select: the class does not exist
    assert (f["kinds.Decoder.static_mib"], f["kinds.Decoder.act_mib"], f["kinds.Decoder.full.act_mib"]) == \
        (800.0, 400.0, 40.0)
    assert f["stage_const_mib"] == 1000.0  # stage_const_mem
    assert (f["head.static_mib"], f["tail.static_mib"]) == (3000.0, 2000.0)
    assert "tail.act_mib" not in f  # TAIL memory_activation: not read by the balancer
    notes = "\n".join(imp.notes)
    assert "'recompute_time' is not read by the balancer" in notes
    assert "'memory_activation' not read by the balancer for TAIL" in notes
    assert "default coefficient 0.125" in notes


def test_total_semantics_is_a_third_of_every_time():
    fwd, tot = load_sapp(LAYERS).fields, load_sapp(LAYERS, time_semantics="total").fields
    for k in ("kinds.Decoder.fwd_ms", "kinds.Decoder.bwd_ms", "kinds.Decoder.select.extra_ms",
              "kinds.Decoder.comm.extra_ms", "head.fwd_ms", "head.bwd_ms", "tail.bwd_ms"):
        assert tot[k] == pytest.approx(fwd[k] / 3, rel=1e-12), k
    # an absolute per-class time is not scaled: 3.0 - 2/3
    assert tot["kinds.Decoder.full.extra_ms"] == pytest.approx(3.0 - 2 / 3, rel=1e-12)
    assert tot["stage_const_mib"] == fwd["stage_const_mib"]


def test_step_and_peaks_equal_the_balancers_model():
    """P = 4, layers [3, 4, 4, 3], m = 8. Per micro-batch every stage runs forward 4 ms (stage 0:
    3 layers + HEAD 1.0; stage 3: 3 + TAIL) and backward 8 ms (2·forward), so the balancer's
    ideal-bubble model ``real = ideal = (P - 1)/m`` gives a step of (m + P - 1)·12 = 132 ms. Memory
    (solver: stage_param_memory + stage_active_memory, P - s in flight, + stage_const_mem):
    stage 0: 3·800 + 4·3·400 + 1000 + 3000 = 11200; 1: 4·800 + 3·4·400 + 1000 = 9000;
    2: 3200 + 2·1600 + 1000 = 7400; 3: 2400 + 1200 + 1000 + 2000 = 6600."""
    prof = _profile(load_sapp(LAYERS))
    r = evaluate_layout(prof, make_layout([[3, 4, 4, 3]]), micro_batch_num=8, schedule="1f1b")
    assert r.step_time_ms == pytest.approx(132.0, rel=1e-12)
    assert [s.peak_mib for s in r.stages] == pytest.approx([11200, 9000, 7400, 6600], rel=1e-12)
    assert [s.fwd_ms / 8 for s in r.stages] == pytest.approx([4, 4, 4, 4])
    # one fully recomputed layer per stage: backward + 1 ms ("recompute_time " 3 - 2), act 40 for it
    r = evaluate_layout(prof, make_layout([[3, 4, 4, 3]], recompute_vp=[[1, 1, 1, 1]]),
                        micro_batch_num=8, schedule="1f1b")
    assert r.step_time_ms == pytest.approx(11 * 13.0, rel=1e-12)
    assert [s.peak_mib for s in r.stages] == pytest.approx(
        [2400 + 4 * 840 + 4000, 3200 + 3 * 1240 + 1000, 3200 + 2 * 1240 + 1000, 2400 + 840 + 3000],
        rel=1e-12)
    # the older "total" reading: the same layout runs in a third of the time, same memory
    tot = _profile(load_sapp(LAYERS, time_semantics="total"))
    r3 = evaluate_layout(tot, make_layout([[3, 4, 4, 3]]), micro_batch_num=8, schedule="1f1b")
    assert r3.step_time_ms == pytest.approx(44.0, rel=1e-12)
    assert [s.peak_mib for s in r3.stages] == pytest.approx([11200, 9000, 7400, 6600], rel=1e-12)


def test_unbalanced_two_stage_step_by_hand():
    """P = 2, layers [1, 13], m = 2, 1F1B. Stage 0: F 2 (1 layer + HEAD), B 4; stage 1: F 14, B 28.
    s0 F0 [0,2], F1 [2,4]; s1 F0 [2,16], B0 [16,44]; s1 F1 [44,58], B1 [58,86]; s0 B0 [44,48],
    B1 [86,90]: step 90 ms. Peaks: 800 + 2·400 + 1000 + 3000 = 5600; 13·800 + 13·400 + 1000 + 2000
    = 18600."""
    prof = _profile(load_sapp(LAYERS))
    r = evaluate_layout(prof, make_layout([[1, 13]]), micro_batch_num=2, schedule="1f1b")
    assert r.step_time_ms == pytest.approx(90.0, rel=1e-12)
    assert [s.peak_mib for s in r.stages] == pytest.approx([5600, 18600], rel=1e-12)


def test_full_recompute_key_without_trailing_space_is_ignored(tmp_path):
    p = tmp_path / "l.json"
    p.write_text(json.dumps({"layers_description": [
        {"name": "L", "type": "BODY", "time": 1.0, "nb_layer": 4, "memory_parameter": 10,
         "memory_activation": 100, "memory_recompute": 5, "recompute_time": 7.0}]}))
    f = load_sapp(p).fields
    assert f["kinds.L.full.extra_ms"] == pytest.approx(1.0)  # default 0.5 × 2·time, not 7 - 2
    p.write_text(json.dumps({"layers_description": [
        {"name": "L", "type": "BODY", "time": 1.0, "nb_layer": 4, "memory_parameter": 10,
         "memory_activation": 100, "memory_recompute": 5, "recompute_time ": 7.0}]}))
    assert load_sapp(p).fields["kinds.L.full.extra_ms"] == pytest.approx(5.0)


def test_init_file_decomposed_as_the_balancer_does():
    """tests/profile/data/sapp_demo_init.yaml follows the balancer's memory model for constant 1500,
    parameters 900, activation 500 / 60 (full), first-stage extra 4000, last-stage extra 2500.
    ComputeMemory recovers them; its head / tail extras keep the constant (5500, 4000)."""
    imp = load_sapp(INIT)
    f = imp.fields
    assert imp.layer_kinds == [("BODY", 32)]
    assert (f["stage_const_mib"], f["kinds.BODY.static_mib"], f["kinds.BODY.act_mib"],
            f["kinds.BODY.full.act_mib"]) == (1500.0, 900.0, 500.0, 60.0)
    assert (f["head.static_mib"], f["tail.static_mib"]) == (5500.0, 4000.0)
    # time_config: body 2.0 -> forward 2, backward 4, full recompute default 0.5 x 4
    assert (f["kinds.BODY.fwd_ms"], f["kinds.BODY.bwd_ms"], f["kinds.BODY.full.extra_ms"]) == (2.0, 4.0, 2.0)
    assert (f["head.fwd_ms"], f["head.bwd_ms"], f["tail.fwd_ms"]) == (1.5, 3.0, 3.0)
    assert any("counted twice" in n for n in imp.notes)
    # the imported profile reproduces the dry run's middle stages exactly; the first and last
    # carry the constant twice (+1500), as the balancer's solver does
    layers, rec = [6, 5, 4, 4, 4, 4, 3, 2], [0, 1, 0, 2, 2, 2, 2, 2]
    r = evaluate_layout(_profile(imp), make_layout([layers], recompute_vp=[rec]), micro_batch_num=8,
                        schedule="1f1b")
    assert [s.peak_mib for s in r.stages] == pytest.approx(
        [34900 + 1500, 20420, 17100, 10700, 9580, 8460, 5440, 5920 + 1500], rel=1e-12)


@pytest.mark.parametrize("edit, match", [
    (lambda d: d["memory_usage"]["body_memories"].update(stage_id=[1, 2], memories=[20420, 17100]),
     "needs at least 5"),
    (lambda d: d["recompute_config"].update(recompute=True), "process_rec_config fails"),
    (lambda d: d["pipeline_config"].update(offset=0), "same number of layers"),
    (lambda d: (d["memory_usage"]["body_memories"].update(stage_id=[1, 2, 3], memories=[1, 2, 3]),
                d["recompute_config"].update(select_recompute=[1] * 8)),
     "5 stage peaks for 3 activation classes .none, select, full.: the balancer needs 6 .no stage "
     "constant. or at least 7"),
])
def test_init_file_the_balancer_cannot_read_is_an_error(tmp_path, edit, match):
    d = yaml.safe_load(INIT.read_text())
    edit(d)
    p = tmp_path / "init.yaml"
    p.write_text(yaml.safe_dump(d))
    with pytest.raises(ConfigError, match=match) as e:
        load_sapp(p)
    assert e.value.rule == "sapp"


def test_rejects_bad_layer_files(tmp_path):
    p = tmp_path / "s.json"
    p.write_text(json.dumps({"layers_description": [{"name": "x", "type": "MIDDLE", "nb_layer": 1,
                                                     "time": 1}]}))
    with pytest.raises(ConfigError) as e:
        load_sapp(p)
    assert e.value.rule == "sapp" and e.value.field == "layers_description[0].type"
    p.write_text(json.dumps({"layers_description": [
        {"name": "L", "type": "BODY", "nb_layer": 4, "time": 1, "memory_activation": "big"}]}))
    with pytest.raises(ConfigError) as e:
        load_sapp(p)
    assert e.value.field == "layers_description[0].memory_activation"
    p.write_text(json.dumps({"layers_description": [{"name": "L", "type": "BODY", "nb_layer": 4}]}))
    with pytest.raises(ConfigError, match="missing 'time'"):
        load_sapp(p)
    p.write_text(json.dumps({"layers_description": [{"name": "E", "type": "HEAD", "time": 1,
                                                     "nb_layer": 1}]}))
    with pytest.raises(ConfigError, match="no BODY"):
        load_sapp(p)


def test_init_file_without_a_constant_term(tmp_path):
    """#classes + 3 stage peaks: the balancer solves [n, (P-s)·none, (P-s)·full] without a constant
    (stage_const_mem 0). Stages 1..3: 5p + 28a + 7f = 20420, 4p + 24a = 17100, 4p + 10a + 10f =
    10700 -> p = 1563.46, a = 451.92, f = -7.31, truncated to 1563, 451, -7; a class whose memory is
    <= 0 does not exist for the balancer, so full recompute is not imported."""
    d = yaml.safe_load(INIT.read_text())
    d["memory_usage"]["body_memories"].update(stage_id=[1, 2, 3], memories=[20420, 17100, 10700])
    p = tmp_path / "init.yaml"
    p.write_text(yaml.safe_dump(d))
    imp = load_sapp(p)
    f = imp.fields
    assert (f["stage_const_mib"], f["kinds.BODY.static_mib"], f["kinds.BODY.act_mib"]) == (0.0, 1563.0, 451.0)
    assert "kinds.BODY.full.act_mib" not in f
    assert any("absorbed" in n for n in imp.notes)
    assert any("memory_recompute = -7: the balancer cannot use this recompute class" in n for n in imp.notes)


def test_negative_memory_is_clamped_with_a_note(tmp_path):
    p = tmp_path / "s.json"
    p.write_text(json.dumps({"stage_const_mem": -1896, "layers_description": [
        {"name": "L", "type": "BODY", "nb_layer": 4, "time": 1, "memory_parameter": 10,
         "memory_activation": 5}]}))
    imp = load_sapp(p)
    assert imp.fields["stage_const_mib"] == 0.0
    assert any("-1896" in n and "clamped" in n for n in imp.notes)


# ---- CLI -------------------------------------------------------------------------------------

def test_cli_over_analytic_warns_every_field_it_fills(tmp_path):
    out = tmp_path / "prof.yaml"
    r = CliRunner().invoke(main, ["profile", str(DATA / "llama_small.yaml"), "--from-sapp", str(LAYERS),
                                  "--out", str(out)])
    assert r.exit_code == 0, r.output
    prof = yaml.safe_load(out.read_text())
    dense = prof["kinds"]["dense"]  # the SAPP kind is mapped onto the config's single kind
    assert (dense["static_mib"], dense["fwd_ms"], dense["bwd_ms"]) == (800.0, 1.0, 2.0)
    assert prof["stage_const_mib"] == 1000.0
    assert prof["sources"]["field.stage_const_mib"] == "sapp:sapp_demo_layers.json"
    # what the file leaves out is named, with its value and origin, on stderr and in the profile
    warn = [w for w in prof["warnings"] if "not in sapp:sapp_demo_layers.json" in w]
    text = "\n".join(warn)
    assert "p2p_ms" in text and "kinds.dense.full: workspace_mib" in text
    assert "kinds.dense.both: act_mib" in text  # no memory_both_comm_select in the file
    assert all("taken from the analytic profile for ascend-910b" in w for w in warn)
    assert "warning: kinds.dense.full: workspace_mib" in r.stderr
    assert any("'recompute_time' is not read" in w for w in prof["warnings"])
    # search / evaluate --profile repeat them
    e = CliRunner().invoke(main, ["evaluate", str(DATA / "llama_small.yaml"), "--profile", str(out)])
    assert e.exit_code == 0, e.output
    assert "p2p_ms" in e.stderr and "taken from the analytic profile" in e.stderr
    s = CliRunner().invoke(main, ["search", str(DATA / "llama_small.yaml"), "--profile", str(out),
                                  "--trials", "3", "--quiet", "--hbm", "200GB"])
    assert s.exit_code == 0, s.output
    assert f"warning: profile {out}: kinds.dense.full: workspace_mib" in s.stderr


def test_cli_strict_fails_naming_the_fields(tmp_path):
    r = CliRunner().invoke(main, ["profile", str(DATA / "llama_small.yaml"), "--from-sapp", str(LAYERS),
                                  "--strict", "--out", str(tmp_path / "p.yaml")])
    assert r.exit_code == 2 and "Traceback" not in r.output
    assert "[import_incomplete]" in r.output and "p2p_ms" in r.output
    assert "kinds.dense.full.workspace_mib" in r.output
    assert not (tmp_path / "p.yaml").exists()


def test_cli_sapp_time_total(tmp_path):
    out = tmp_path / "p.yaml"
    r = CliRunner().invoke(main, ["profile", "--from-sapp", str(LAYERS), "--sapp-time", "total",
                                  "--out", str(out)])
    assert r.exit_code == 0, r.output
    prof = yaml.safe_load(out.read_text())
    assert prof["kinds"]["Decoder"]["fwd_ms"] == pytest.approx(1 / 3)
    # without CONFIG a left-out field is 0 and says so
    assert any(w.startswith("p2p_ms 0 ms not in") and "no base profile" in w for w in prof["warnings"])


def test_cli_init_file_alone():
    r = CliRunner().invoke(main, ["profile", "--from-sapp", str(INIT)])
    assert r.exit_code == 0, r.output
    prof = yaml.safe_load(r.stdout)
    assert prof["stage_const_mib"] == 1500.0 and prof["layer_kinds"] == [["BODY", 32]]


def test_cli_bad_sapp_is_one_line_error(tmp_path):
    p = tmp_path / "s.json"
    p.write_text("{")
    r = CliRunner().invoke(main, ["profile", "--from-sapp", str(p)])
    assert r.exit_code == 2 and "Traceback" not in r.output and "[sapp]" in r.output


def test_search_on_the_import_respects_the_balancers_limit(tmp_path):
    """A fit autotune reports on an imported profile is a fit by the balancer's own model: the
    best answer's peaks equal sapp_solver's stage_param_memory + stage_active_memory (P - s in
    flight) + constant_memory_ stage by stage, all within the limit (the issue's complaint was
    63,120 MB reported as fitting 62,000 when stage_const_mem was dropped)."""
    from autotune.api import search
    from autotune.tuner.space import SearchSpace

    raw = yaml.safe_load((Path(__file__).parents[1] / "e2e" / "data" / "toy.yaml").read_text())
    raw["model"]["model_config"].update(num_layers=14, offset=0, pp_interleave_num=1)
    raw["parallel"]["pipeline_config"]["pipeline_interleave"] = False
    raw["recompute_config"]["recompute"] = False
    cfg = tmp_path / "train.yaml"
    cfg.write_text(yaml.safe_dump(raw))
    prof = tmp_path / "prof.yaml"
    prof.write_text(_profile(load_sapp(LAYERS)).model_copy(update={"layer_kinds": [("Decoder", 14)]}).to_yaml())
    limit = 9000.0
    res = search(str(cfg), str(prof), space=SearchSpace(pp_interleave_num=[1], recompute_kinds=["full"]),
                 hbm_mib=limit, trials=20, seed=0)
    assert res.best is not None
    P = 4
    for s in res.best.stages:
        n, r = s.layers[0], s.recompute[0]
        balancer = (n * 800 + (P - s.stage) * ((n - r) * 400 + r * 40) + 1000
                    + (3000 if s.stage == 0 else 0) + (2000 if s.stage == P - 1 else 0))
        assert s.peak_mib == pytest.approx(balancer, rel=1e-12)
        assert balancer <= limit
