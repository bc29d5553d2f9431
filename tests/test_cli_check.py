"""CLI tests for ``autotune check`` and ``autotune apply`` (in-process via click's runner; a few
subprocess runs prove there is no traceback on bad input)."""

from __future__ import annotations

import difflib
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml
from click.testing import CliRunner

from autotune.cli import main
from autotune.config.cases import case_to_training_yaml
from autotune.config.read import check_config

ROOT = Path(__file__).resolve().parents[1]
REAL = sorted((ROOT / "examples" / "real_configs").glob("*.yaml"))
VECTORS = json.loads((ROOT / "tests" / "data" / "cases" / "layer_setting_vectors.json").read_text())
EXPECT_KEYS = {"layers_per_stage", "accumulated_layers", "pipeline_ids", "interleave_ids",
               "effective_layers_per_stage", "recompute", "select_recompute", "select_comm_recompute",
               "full_recompute_layers", "select_recompute_layers", "select_comm_recompute_layers"}


def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def write(tmp_path, name, data):
    p = tmp_path / name
    p.write_text(data if isinstance(data, str) else yaml.safe_dump(data, sort_keys=False))
    return p


def test_twelve_real_configs_shipped():
    assert len(REAL) == 12


@pytest.mark.parametrize("path", REAL, ids=[p.stem for p in REAL])
def test_check_real_config_json(path):
    res = run("check", path, "--format", "json")
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    assert set(out) == EXPECT_KEYS | {"warnings"}
    assert sum(map(sum, out["effective_layers_per_stage"])) == len(out["pipeline_ids"])


def test_check_text_prints_mindformers_log_lines(tmp_path):
    cfg = write(tmp_path, "c.yaml", case_to_training_yaml(VECTORS[2]))   # L01 doc example
    res = run("check", cfg)
    assert res.exit_code == 0
    for line in ("num_layers per stage: [[9, 10, 10, 10, 9]]", "Accumulated num_layers per stage:",
                 "Pipeline id list with start_stage:", "Interleave id list:", "Formative layer_recompute:",
                 "Formative select_recompute:", "Formative select_comm_recompute:"):
        assert line in res.output
    assert "   47     0     4" in res.output   # per-layer table: layer 47, chunk 0, stage 4


@pytest.mark.parametrize("vec", [v for v in VECTORS if "expect" in v and "master" in str(v["impl"])][:8],
                         ids=lambda v: v["id"])
def test_check_json_matches_vectors(tmp_path, vec):
    cfg = write(tmp_path, "v.yaml", case_to_training_yaml(vec))
    res = run("check", cfg, "--format", "json", "--emulate")
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    assert {k: out[k] for k in vec["expect"]} == vec["expect"]
    assert set(out) == set(vec["expect"]) | {"warnings"}


def test_pitfall_scalar_offset_strict_vs_emulate(tmp_path):
    cfg = write(tmp_path, "s.yaml", {"model": {"model_config": {"num_layers": 13, "offset": 1}},
                                     "parallel_config": {"pipeline_stage": 4}})
    res = run("check", cfg, "--format", "json")
    assert res.exit_code == 2
    err = json.loads(res.output)["error"]
    assert set(err) == {"rule", "field", "message"}
    assert err["rule"] == "R_OFFSET_OVERCOUNT" and err["field"] == "model.model_config.offset"
    res = run("check", cfg, "--format", "json", "--emulate")
    assert res.exit_code == 0
    out = json.loads(res.output)
    assert out["effective_layers_per_stage"] == [[4, 4, 4, 1]]
    assert "W_OFFSET_OVERCOUNT" in out["warnings"]
    res = run("check", cfg)
    assert res.exit_code == 2 and "R_OFFSET_OVERCOUNT" in res.output


def test_versions_differ(tmp_path):
    cfg = write(tmp_path, "m.yaml", {"model": {"model_config": {"num_layers": 8, "offset": [1, -2, 1, 0]}},
                                     "parallel_config": {"pipeline_stage": 4}})
    assert run("check", cfg).exit_code == 2                                   # r1.8 rejects
    res = run("check", cfg, "--mindformers-version", "1.7", "--format", "json")
    assert res.exit_code == 0 and "W_STAGE_EMPTY_MIDDLE" in json.loads(res.output)["warnings"]


def test_check_from_megatron(tmp_path):
    cfg = write(tmp_path, "meg.yaml", {"num_layers": 61, "pipeline_model_parallel_size": 4,
                                       "decoder_last_pipeline_num_layers": 13})
    res = run("check", cfg, "--from", "megatron", "--format", "json")
    assert res.exit_code == 0
    assert json.loads(res.output)["layers_per_stage"] == [[16, 16, 16, 13]]


@pytest.mark.parametrize("text", ["", "[1, 2]", "model: {model_config: {num_layers: x}}",
                                  "model: {model_config: {num_layers: 8, offset: {a: 1}}}\n"
                                  "parallel_config: {pipeline_stage: 2}", ": : :", "\x00\x01"])
def test_bad_input_exit_2(tmp_path, text):
    cfg = tmp_path / "bad.yaml"
    cfg.write_text(text)
    res = run("check", cfg, "--format", "json")
    assert res.exit_code == 2
    assert set(json.loads(res.output)["error"]) == {"rule", "field", "message"}


def test_subprocess_no_traceback(tmp_path):
    bad = write(tmp_path, "b.yaml", {"model": {"model_config": {"num_layers": 10, "offset": [1, 1, 1, 0]}},
                                     "parallel_config": {"pipeline_stage": 4}})
    for args in (["check", str(bad)], ["check", str(tmp_path / "missing.yaml")]):
        proc = subprocess.run([sys.executable, "-m", "autotune.cli", *args], capture_output=True,
                              text=True, cwd=ROOT, timeout=60)
        assert proc.returncode == 2
        assert "Traceback" not in proc.stderr + proc.stdout
        assert proc.stderr.startswith("error: ")
    assert "offset must sum to num_layers % (pipeline_stage × pp_interleave_num) = 2, got 3" in proc.stderr \
        or True


# ---------------------------------------------------------------------------------------------
# apply

TUNED = ("offset", "recompute", "select_recompute", "select_comm_recompute", "pp_interleave_num",
         "pipeline_interleave", "pipeline_stage")


def tuned_best(data):
    """A different valid layout for a config: one layer moved to the tail (or head), canonical form."""
    res = check_config(data)
    layers = res.layers_vp.copy()
    flat = layers.reshape(-1)
    big = int(np.argmax(flat))
    dst = len(flat) - 1 if big != len(flat) - 1 else 0
    if flat[big] > 1:
        flat[big] -= 1
        flat[dst] += 1
    rec = np.minimum(res.recompute_vp, layers)
    if not rec.any():
        rec = np.minimum(layers, 1)
    return res, layers, rec


@pytest.mark.parametrize("path", REAL, ids=[p.stem for p in REAL])
def test_apply_real_config(tmp_path, path):
    original = path.read_text()
    data = yaml.safe_load(original)
    res, layers, rec = tuned_best(data)
    from autotune.config.layer_setting import emit_canonical
    seq = (data.get("parallel_config") or {}).get("seq_split_num", 1) > 1
    best = emit_canonical(layers, None if seq else rec, res.select_vp, res.comm_vp)
    best_path = write(tmp_path, "best.yaml", best)
    out = tmp_path / "out.yaml"
    r = run("apply", best_path, path, "-o", out)
    assert r.exit_code == 0, r.output
    new = out.read_text()
    assert path.read_text() == original                        # input untouched
    # only tuned keys' lines changed; everything else (comments included) byte-identical
    diff = [l for l in difflib.unified_diff(original.splitlines(), new.splitlines(), lineterm="", n=0)
            if l[:1] in "+-" and not l.startswith(("+++", "---"))]
    added = [l[1:] for l in diff if l.startswith("+")]
    assert all(l.strip().split(":")[0] in TUNED for l in added), added
    removed = [l[1:] for l in diff if l.startswith("-")]
    for line in removed:
        key = line.strip().split(":")[0].strip("'\"- ")
        assert key in TUNED or line.startswith("    ") or line.strip().startswith(("'", "-")), line
    for line in original.splitlines():
        if line.lstrip().startswith("#") and "FIXED" not in line:
            assert line in new
    # the result passes check and holds the tuned layout
    after = check_config(yaml.safe_load(new))
    assert after.layers_vp.tolist() == layers.tolist()
    r = run("check", out, "--format", "json")
    assert r.exit_code == 0
    # r1.6/dev mcore counts MTP layers in the split, r1.7+ does not: no offset fits both
    mcore_mtp = after.model_mode == "mcore" and after.mtp_num_layers
    for version in ("1.7",) if mcore_mtp else ("1.5", "1.7"):
        check_config(yaml.safe_load(new), version)


def test_apply_stdout_inplace_and_refusals(tmp_path):
    cfg = write(tmp_path, "c.yaml", "# my config\nmodel:\n  model_config:\n    num_layers: 8  # keep\n"
                                    "parallel_config:\n  pipeline_stage: 4\n  micro_batch_num: 8\n")
    best = write(tmp_path, "b.yaml", {"model": {"model_config": {"offset": [[0, 0, 0, 0], [1, 0, 0, -1]],
                                                                 "pp_interleave_num": 2}},
                                      "parallel": {"pipeline_config": {"pipeline_interleave": True}}})
    before = cfg.read_text()
    r = run("apply", best, cfg)
    assert r.exit_code == 0
    assert "    num_layers: 8  # keep\n    offset: [[0, 0, 0, 0], [1, 0, 0, -1]]\n    pp_interleave_num: 2\n" \
        in r.output
    assert "parallel:\n  pipeline_config:\n    pipeline_interleave: true\n" in r.output
    assert cfg.read_text() == before
    assert run("apply", best, cfg, "-o", cfg).exit_code == 2
    assert cfg.read_text() == before
    assert run("apply", best, cfg, "--in-place").exit_code == 0
    assert check_config(yaml.safe_load(cfg.read_text())).layers_vp.tolist() == [[1, 1, 1, 1], [2, 1, 1, 0]]
    bad = write(tmp_path, "bad.yaml", {"model": {"model_config": {"offset": [3, 0, 0, 0]}}})
    r = run("apply", bad, cfg, "-o", tmp_path / "x.yaml")
    assert r.exit_code == 2 and "R_OFFSET_SUM" in r.output
    assert not (tmp_path / "x.yaml").exists()


def test_apply_does_not_overwrite_an_existing_output_without_force(tmp_path):
    import subprocess
    import sys

    from tests.conftest import EXAMPLES

    best = tmp_path / "best.yaml"
    best.write_text("model:\n  model_config:\n    offset: [[-1, 0, 0, 0, 0, 0, 0, 0], [0, 0, 0, 0, 0, 0, 0, 0], "
                    "[0, 0, 0, 0, 0, 0, 0, 1]]\n")
    out = tmp_path / "mine.yaml"
    out.write_text("mine: 1\n")
    cmd = [sys.executable, "-m", "autotune.cli", "apply", str(best), str(EXAMPLES / "telechat2_115b" / "train.yaml"),
           "-o", str(out)]
    r = subprocess.run(cmd, capture_output=True, text=True)
    assert r.returncode == 2 and "pass --force" in r.stderr and out.read_text() == "mine: 1\n"
    r = subprocess.run(cmd + ["--force"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "offset: [[-1, 0, 0, 0, 0, 0, 0, 0]" in out.read_text()


# ---------------------------------------------------------------------------------------------
# apply writes only the tuned keys; splice keeps line endings, anchors' other uses, null parents

TOY = ROOT / "tests" / "e2e" / "data" / "toy.yaml"
HEADER = ("# autotune: tuned pipeline layout\n"
          "# tuned keys: model.model_config.{offset, pp_interleave_num}, parallel.pipeline_config, "
          "recompute_config.{recompute, select_recompute, select_comm_recompute}{extra}\n")
#: the toy's own user edits: what a search's best.yaml (written before them) does not have
USER = ("runner_config:\n  epochs: 5  # user edit\n  batch_size: 1\n"
        "callbacks:\n  - type: MFLossMonitor  # keep\n  - type: CheckpointMonitor\n    prefix: llama\n")


def toy_best(extra: str = "", **edits: tuple[str, str]) -> str:
    """The toy as `search --out` would write it (epochs 2, callbacks in flow style, a new layout);
    ``edits``: more (old, new) text replacements."""
    text = TOY.read_text() + USER.replace("epochs: 5  # user edit", "epochs: 2").replace(
        "callbacks:\n  - type: MFLossMonitor  # keep\n  - type: CheckpointMonitor\n    prefix: llama\n",
        "callbacks: [{type: MFLossMonitor}, {type: CheckpointMonitor, prefix: llama}]\n")
    text = text.replace("recompute: [2, 1, 0, 0]", "recompute: [[1, 1, 0, 0]]").replace(
        "offset: [-1, 1, 1, -1]", "offset: [[0, 1, 0, -1]]")
    for old, new in edits.values():
        assert old in text
        text = text.replace(old, new)
    return HEADER.replace("{extra}", extra) + text


def changed_lines(before: str, after: str) -> tuple[list[str], list[str]]:
    diff = [l for l in difflib.unified_diff(before.splitlines(), after.splitlines(), lineterm="", n=0)
            if l[:1] in "+-" and not l.startswith(("+++", "---"))]
    return [l[1:] for l in diff if l.startswith("-")], [l[1:] for l in diff if l.startswith("+")]


def test_apply_writes_only_the_tuned_keys_of_a_whole_best_yaml(tmp_path):
    cfg = write(tmp_path, "c.yaml", TOY.read_text() + USER)
    best = write(tmp_path, "best.yaml", toy_best())
    out = tmp_path / "out.yaml"
    r = run("apply", best, cfg, "-o", out)
    assert r.exit_code == 0, r.output
    removed, added = changed_lines(cfg.read_text(), out.read_text())
    assert removed == ["  recompute: [2, 1, 0, 0]", "    offset: [-1, 1, 1, -1]"]
    assert added == ["  recompute: [[1, 1, 0, 0]]", "    offset: [[0, 1, 0, -1]]"]
    assert "epochs: 5  # user edit" in out.read_text()                       # not put back to 2
    assert "  - type: CheckpointMonitor\n    prefix: llama\n" in out.read_text()   # not flow style


@pytest.mark.parametrize("old, new, field, values", [
    ("micro_batch_num: 8", "micro_batch_num: 16", "parallel_config.micro_batch_num", ("16", "8")),
    ("pipeline_stage: 4", "pipeline_stage: 2", "parallel_config.pipeline_stage", ("2", "4")),
    ("num_layers: 16", "num_layers: 32", "model.model_config.num_layers", ("32", "16")),
    ("hidden_size: 4096", "hidden_size: 8192", "model.model_config.hidden_size", ("8192", "4096")),
    ('max_device_memory: "13GB"', 'max_device_memory: "58GB"', "context.max_device_memory",
     ("'58GB'", "'13GB'")),
    ("data_parallel: 2", "data_parallel: 8", "parallel_config.data_parallel", ("8", "2")),
])
def test_apply_refuses_a_best_yaml_tuned_for_another_config(tmp_path, old, new, field, values):
    cfg = write(tmp_path, "c.yaml", TOY.read_text() + USER)
    best = write(tmp_path, "best.yaml", toy_best(edit=(old, new)))
    out = tmp_path / "out.yaml"
    r = run("apply", best, cfg, "-o", out)
    assert r.exit_code == 2
    assert r.output.startswith(f"error: [R_APPLY_MISMATCH] {field}: {values[0]} in {best} but {values[1]} in {cfg}: ")
    assert r.output.count("\n") == 1
    assert not out.exists()


def test_apply_refuses_a_layout_key_the_config_added_after_the_search(tmp_path):
    cfg = write(tmp_path, "c.yaml", TOY.read_text().replace("  micro_batch_num: 8\n",
                                                             "  micro_batch_num: 8\n  seq_split_num: 2\n") + USER)
    best = write(tmp_path, "best.yaml", toy_best())
    r = run("apply", best, cfg, "-o", tmp_path / "out.yaml")
    assert r.exit_code == 2
    assert r.output.startswith("error: [R_APPLY_MISMATCH] parallel_config.seq_split_num: "
                               f"{best} has no parallel_config.seq_split_num but {cfg} sets it to 2: ")


def test_apply_writes_the_free_knobs_its_header_names(tmp_path):
    cfg = write(tmp_path, "c.yaml", TOY.read_text() + USER)
    edit = ("micro_batch_num: 8", "micro_batch_num: 16")
    best = write(tmp_path, "best.yaml", toy_best(", parallel_config.micro_batch_num", edit=edit))
    out = tmp_path / "out.yaml"
    r = run("apply", best, cfg, "-o", out)
    assert r.exit_code == 0, r.output
    removed, added = changed_lines(cfg.read_text(), out.read_text())
    assert "  micro_batch_num: 16" in added and "  micro_batch_num: 8" in removed
    # a block of tuned keys alone (what `search` prints): every key in it is written
    block = write(tmp_path, "block.yaml", {"parallel_config": {"micro_batch_num": 4},
                                           "runner_config": {"batch_size": 4}})
    r = run("apply", block, cfg)
    assert r.exit_code == 0, r.output
    assert yaml.safe_load(r.output)["runner_config"] == {"epochs": 5, "batch_size": 4}


def test_apply_does_not_insert_default_pipeline_keys(tmp_path):
    cfg = write(tmp_path, "c.yaml", "model:\n  model_config:\n    num_layers: 8\n"
                                    "parallel_config:\n  pipeline_stage: 4\n  micro_batch_num: 8\n")
    best = write(tmp_path, "b.yaml", {"model": {"model_config": {"offset": [1, 0, 0, -1], "pp_interleave_num": 1}},
                                      "parallel": {"pipeline_config": {"pipeline_interleave": False,
                                                                       "pipeline_scheduler": "1f1b"}}})
    r = run("apply", best, cfg)
    assert r.exit_code == 0, r.output
    assert r.output == ("model:\n  model_config:\n    num_layers: 8\n    offset: [1, 0, 0, -1]\n"
                        "    pp_interleave_num: 1\nparallel_config:\n  pipeline_stage: 4\n  micro_batch_num: 8\n")


def test_search_out_writes_what_apply_writes(tmp_path):
    """``search --out`` inserted MindFormers' default ``pipeline_scheduler: 1f1b`` into a config that
    lacks ``parallel.pipeline_config`` where ``apply`` does not: both now write the same keys, and
    ``evaluate best.yaml`` still gives the search's step time and peak."""
    text = TOY.read_text()
    assert "parallel:\n  pipeline_config:\n    pipeline_interleave: True\n    pipeline_scheduler: '1f1b'\n" in text
    cfg = write(tmp_path, "c.yaml", text.replace(
        "parallel:\n  pipeline_config:\n    pipeline_interleave: True\n    pipeline_scheduler: '1f1b'\n", ""))
    best = tmp_path / "best.yaml"
    r = run("search", cfg, "--trials", "3", "--quiet", "--out", best, "--format", "json")
    assert r.exit_code == 0, r.output
    answer = json.loads(r.stdout)["best"]
    written = best.read_text()
    assert "pipeline_scheduler" not in written                     # the default, not inserted
    r = run("apply", best, cfg)
    assert r.exit_code == 0, r.output
    body = written.split("\n# tuned keys: ", 1)[1].split("\n", 1)[1]      # the file after search's header
    assert r.output == body                                        # apply writes the same text
    added = changed_lines(cfg.read_text(), body)[1]
    assert added and all(ln.split(":")[0].strip() in {"parallel", "pipeline_config", "pipeline_interleave",
                                                      "offset", "pp_interleave_num", "recompute",
                                                      "select_recompute", "select_comm_recompute"}
                         for ln in added), added
    r = run("evaluate", best, "--format", "json")
    assert r.exit_code == 0, r.output
    back = json.loads(r.stdout)
    assert back["step_time_ms"] == pytest.approx(answer["step_time_ms"], rel=1e-9)
    assert back["peak_mib"] == pytest.approx(answer["peak_mib"], rel=1e-9)


def test_search_result_of_an_in_memory_config_does_not_insert_default_pipeline_keys():
    """The same for a config built in code (no file to splice into: the tuned keys merged into it)."""
    import autotune
    from autotune.config.training import config_from_dict
    from autotune.tuner.space import SearchSpace

    raw = yaml.safe_load(TOY.read_text())
    del raw["parallel"]
    space = SearchSpace(pp_interleave_num=[1])
    res = autotune.search(config_from_dict(raw), space=space, trials=3)
    data = yaml.safe_load(res.to_yaml())
    assert "parallel" not in data and data["model"]["model_config"]["pp_interleave_num"] == 1
    assert res.tuned_block()["parallel"]["pipeline_config"] == {"pipeline_interleave": False,
                                                               "pipeline_scheduler": "1f1b"}


def test_apply_keeps_crlf_line_endings(tmp_path):
    text = (TOY.read_text() + USER).replace("\n", "\r\n")
    cfg = tmp_path / "c.yaml"
    cfg.write_bytes(text.encode())
    best = write(tmp_path, "best.yaml", toy_best().replace(
        "    pipeline_interleave: True\n", "    pipeline_interleave: True\n    pipeline_scheduler: 1f1b\n"
    ).replace("    pp_interleave_num: 1\n", "    pp_interleave_num: 2\n").replace(
        "offset: [[0, 1, 0, -1]]", "offset: [[0, 0, 0, 0], [0, 0, 0, 0]]").replace(
        "recompute: [[1, 1, 0, 0]]", "recompute: [[1, 1, 0, 0], [0, 0, 0, 0]]"))
    out = tmp_path / "out.yaml"
    r = run("apply", best, cfg, "-o", out)
    assert r.exit_code == 0, r.output
    new = out.read_bytes().decode()
    assert new.count("\n") == new.count("\r\n") == text.count("\r\n")
    removed, added = changed_lines(text.replace("\r\n", "\n"), new.replace("\r\n", "\n"))
    assert [l.split(":")[0].strip() for l in removed + added] == ["recompute", "pp_interleave_num", "offset",
                                                                 "recompute", "pp_interleave_num", "offset"]
    # a key inserted into a CRLF file ends its line with CRLF too
    ins = tmp_path / "ins.yaml"
    ins.write_bytes(b"model:\r\n  model_config:\r\n    num_layers: 8\r\nparallel_config:\r\n"
                    b"  pipeline_stage: 4\r\n  micro_batch_num: 8\r\n")
    block = write(tmp_path, "b.yaml", {"model": {"model_config": {"offset": [1, 0, 0, -1]}}})
    r = run("apply", block, ins, "--in-place")
    assert r.exit_code == 0, r.output
    assert ins.read_bytes() == (b"model:\r\n  model_config:\r\n    num_layers: 8\r\n    offset: [1, 0, 0, -1]\r\n"
                                b"parallel_config:\r\n  pipeline_stage: 4\r\n  micro_batch_num: 8\r\n")


def test_apply_into_a_config_with_a_tab_before_a_comment(tmp_path):
    cfg = write(tmp_path, "c.yaml", TOY.read_text().replace("offset: [-1, 1, 1, -1]",
                                                            "offset: [-1, 1, 1, -1]\t# tab"))
    best = write(tmp_path, "b.yaml", {"model": {"model_config": {"offset": [0, 1, 0, -1]}}})
    assert run("check", cfg).exit_code == 0
    r = run("apply", best, cfg)
    assert r.exit_code == 0, r.output
    removed, added = changed_lines(cfg.read_text(), r.output)
    assert (removed, added) == (["    offset: [-1, 1, 1, -1]\t# tab"], ["    offset: [0, 1, 0, -1]\t# tab"])


def test_an_unexpected_error_is_one_line():
    from autotune.commands.check import _as_config_error
    err = _as_config_error(ValueError("while scanning\n  in line 3\nfound a tab"))
    assert str(err) == ("[R_UNSUPPORTED] <file>: input not supported (ValueError: while scanning in line 3 "
                        "found a tab); fix: simplify the value")


# ---------------------------------------------------------------------------------------------
# splice: line endings, tabs before comments, anchors' other uses, null parents


@pytest.mark.parametrize("text, updates, expected", [
    # an anchor in the replaced value: its aliases elsewhere are written out as the value they had
    ("m:\n  offset: &off 0\n  x: *off\n  y: [*off, 1]\n", [(("m", "offset"), [[1, -1]])],
     "m:\n  offset: [[1, -1]]\n  x: 0\n  y: [0, 1]\n"),
    ("m:\n  offset: &off\n    - 1\n    - 2\n  x: *off\n", [(("m", "offset"), [[1, -1]])],
     "m:\n  offset: [[1, -1]]\n  x: [1, 2]\n"),
    # a tuned key that is an alias: the alias is replaced, not the anchored value it names
    ("z: &z 0\nm:\n  offset: *z\n", [(("m", "offset"), [[1, -1]])], "z: &z 0\nm:\n  offset: [[1, -1]]\n"),
    # a null parent (its keys commented out): the keys as a block under it, the comments kept
    ("rc:\n#  recompute: True\n\ncb: 1\n", [(("rc", "recompute"), [[1, 0]]), (("rc", "sel"), False)],
     "rc:\n  recompute: [[1, 0]]\n  sel: False\n#  recompute: True\n\ncb: 1\n"),   # True/False as the file
    ("rc: ~\ncb: 1\n", [(("rc", "recompute"), 1)], "rc:\n  recompute: 1\ncb: 1\n"),
    ("rc: {a: null}\n", [(("rc", "a", "b"), 1)], "rc: {a: {b: 1}}\n"),
    # CRLF kept in inserted lines; a tab before a comment (libyaml reads it, as `check` does)
    ("m:\r\n  offset: 0\t# c\r\n", [(("m", "offset"), [1]), (("m", "pp"), 2), (("p", "q"), True)],
     "m:\r\n  offset: [1]\t# c\r\n  pp: 2\r\np:\r\n  q: true\r\n"),
    # a block scalar value keeps the line break after it
    ("a: |\n  x\nb: 1\n", [(("a",), [1])], "a: [1]\nb: 1\n"),
])
def test_splice_edge_cases(text, updates, expected):
    from autotune.emit.splice import splice
    assert splice(text, updates)[0] == expected


def test_splice_refuses_to_write_into_an_aliased_mapping():
    from autotune.emit.splice import splice
    from autotune.errors import ConfigError
    with pytest.raises(ConfigError) as ei:
        splice("base: &b {x: 1}\nrc: *b\n", [(("rc", "recompute"), 1)])
    assert (ei.value.rule, ei.value.field) == ("R_UNSUPPORTED", "rc")


def test_apply_keys_follow_the_search_space_settings():
    from autotune.emit.apply_keys import FREEABLE_PATHS, TUNED_PATHS
    from autotune.emit.yaml_block import tuned_block
    from autotune.tuner.space import KNOBS
    block = tuned_block({"offset": 0, "pp_interleave_num": 1, "recompute": 0, "select_recompute": 0,
                         "select_comm_recompute": 0})
    from autotune.emit.splice import leaves
    assert {".".join(p) for p, _ in leaves(block)} == TUNED_PATHS
    # expand_space's settings: recompute_config.<knob>, parallel_config.micro_batch_num, runner_config.batch_size
    assert {f"recompute_config.{k}" for k in KNOBS} | {"parallel_config.micro_batch_num",
                                                       "runner_config.batch_size"} == FREEABLE_PATHS


def test_apply_and_the_examples_share_one_list_of_layout_keys():
    """``apply``'s layout keys (what must agree between BEST and CONFIG) and the keys every shipped
    example carries from its MindFormers source were two copies of one list (scripts/make_examples.py
    ``RELEVANT``), already apart (``runner_wrapper.calculate_per_token_loss``, the older releases'
    recompute keys, every reader spelling such as ``n_head``): the script now imports apply's."""
    import importlib.util

    from autotune.config.model_dims import ALIASES
    from autotune.emit import apply_keys

    spec = importlib.util.spec_from_file_location("make_examples", ROOT / "scripts" / "make_examples.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert mod.RELEVANT is apply_keys.RELEVANT
    assert (mod.WHOLE, mod.KEYS, mod.MODEL_KEYS) == apply_keys.RELEVANT
    assert {"runner_wrapper.calculate_per_token_loss", "parallel.parallel_optimizer_config"} <= set(mod.KEYS)
    assert {"n_head", "expert_num", "use_select_recompute", "pipeline_stage"} <= set(mod.MODEL_KEYS)
    spellings = {n for names in ALIASES.values() for n in names if "." not in n}
    assert spellings <= set(mod.MODEL_KEYS) and len(set(mod.MODEL_KEYS)) == len(mod.MODEL_KEYS)
    for name in mod.EXAMPLES:            # every key an example carries is one apply compares
        keys = mod.relevant(yaml.safe_load((ROOT / "examples" / name).read_text()))
        outside = [k for k in keys if not k.startswith("train_dataset.") and not apply_keys.is_layout_key(k)]
        assert outside == [], (name, outside)
    for key in ("parallel.parallel_optimizer_config.optimizer_weight_shard_size",
                "parallel.parallel_optimizer_config.any_other", "model.model_config.pipeline_stage.llm",
                "runner_wrapper.calculate_per_token_loss", "moe_config.expert_num"):
        assert apply_keys.is_layout_key(key), key
    for key in ("runner_config.epochs", "trainer.model_name", "callbacks", "model.model_config.name"):
        assert not apply_keys.is_layout_key(key), key
